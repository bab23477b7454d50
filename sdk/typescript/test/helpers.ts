// Shared by the node tests: the world's names, the daemon restart control.
import * as net from "node:net";

/** A sandbox name unique to this run and test. */
export function uniqueName(tag: string): string {
  const w = process.env.SANDBOXD_TEST_WORLD ?? "x";
  const r = Math.random().toString(16).slice(2, 8);
  return `ts${w}-${tag}-${r}`.toLowerCase().slice(0, 63);
}

/** Restarts sandboxd (SIGTERM, then a new daemon on the same state) through the launcher. */
export function restartDaemon(): Promise<void> {
  const path = process.env.SANDBOXD_TEST_CONTROL;
  if (!path) throw new Error("SANDBOXD_TEST_CONTROL is not set: run the tests with test/world.py");
  return new Promise((resolve, reject) => {
    const s = net.createConnection({ path }, () => s.write("restart\n"));
    let buf = "";
    s.setEncoding("utf8");
    s.on("data", (d: string) => {
      buf += d;
      if (buf.includes("\n")) {
        s.end();
        if (buf.startsWith("ok")) resolve();
        else reject(new Error(buf.trim()));
      }
    });
    s.on("error", reject);
  });
}

/** Polls `pred` until true or the deadline. */
export async function until(pred: () => boolean | Promise<boolean>, ms: number, what: string | (() => string)): Promise<void> {
  const end = Date.now() + ms;
  while (Date.now() < end) {
    if (await pred()) return;
    await new Promise((r) => setTimeout(r, 50));
  }
  throw new Error(`timed out after ${ms} ms waiting for ${typeof what === "function" ? what() : what}`);
}

/**
 * `p`, or a rejection naming `what` after `ms`: a step that never settles
 * fails with its name instead of hanging the run until node's timeout.
 */
export async function within<T>(p: Promise<T>, ms: number, what: string): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const late = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new Error(`timed out after ${ms} ms waiting for ${what}`)), ms);
  });
  try {
    return await Promise.race([p, late]);
  } finally {
    clearTimeout(timer);
  }
}

/**
 * Runs `body`, then `cleanup` even when it failed; a cleanup error never
 * hides the body's (both are reported).
 */
export async function withCleanup(body: () => Promise<void>, cleanup: () => Promise<void>): Promise<void> {
  let failed: unknown;
  try {
    await body();
  } catch (e) {
    failed = e;
  }
  try {
    await cleanup();
  } catch (e) {
    if (failed === undefined) throw e;
    throw new AggregateError([failed, e], `${String((failed as Error)?.message ?? failed)} (and the cleanup failed: ${String((e as Error)?.message ?? e)})`);
  }
  if (failed !== undefined) throw failed;
}
