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
export async function until(pred: () => boolean | Promise<boolean>, ms: number, what: string): Promise<void> {
  const end = Date.now() + ms;
  while (Date.now() < end) {
    if (await pred()) return;
    await new Promise((r) => setTimeout(r, 50));
  }
  throw new Error(`timed out after ${ms} ms waiting for ${what}`);
}
