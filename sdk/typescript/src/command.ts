/**
 * Commands running in a sandbox: {@link Command} (running or detached) and
 * {@link CommandFinished} (exited). Output comes from the daemon's
 * `command.output` notifications on the connection that started the command;
 * for a command found with `getCommand`, or after the connection was lost
 * (a daemon restart: live restore keeps the command), it is read with
 * `command.logs` until the command exits.
 * @module
 */
import type { Writable } from "node:stream";
import { StringDecoder } from "node:string_decoder";
import type { Notification, SandboxClient } from "./client.js";
import { DaemonUnreachableError, SandboxError, UnavailableError } from "./errors.js";
import { AsyncQueue } from "./queue.js";
import type { CommandInfo, CommandUsage } from "./types.js";

/** One piece of a command's output. */
export interface LogLine {
  /** Which stream it came on (`stdout` also for a pty). */
  stream: "stdout" | "stderr";
  /** The text (UTF-8, decoded across chunk boundaries). */
  data: string;
}

interface Chunk {
  stream: "stdout" | "stderr";
  data: Buffer;
}

interface ExitInfo {
  exitCode: number;
  durationMs: number;
  timedOut: boolean;
  oomKilled: boolean;
  memoryLimitBytes?: number;
  usage?: CommandUsage | null;
}

const POLL_MS = 200;
// After a lost connection, any answer is retried for this long: a daemon
// shutting down may still accept a connection and answer it with an error
// (its commands are not gone: the next daemon re-adopts them).
const RESTART_GRACE_MS = 5000;
/** Output a Command keeps in memory (its oldest bytes go first past it), per command. */
export const MAX_CAPTURED_OUTPUT_BYTES = 16 << 20;

/** Where Command objects get their output from. */
type Feed = "live" | "poll" | "none";

/** Signal names `kill()` takes (or a number). */
export type SignalName = `SIG${string}` | string | number;

/**
 * A command in a sandbox. `detached: true` gives one while it runs; its
 * {@link wait} gives the {@link CommandFinished}.
 */
export class Command {
  /** The command's id (`cmd-…`), valid from any connection. */
  readonly cmdId: string;
  /** The sandbox's name. */
  readonly sandboxName: string;
  /** The working directory. */
  readonly cwd: string;
  /** When it started. */
  readonly startedAt: Date;
  /** The exit status, `null` while it runs. */
  exitCode: number | null;
  /** @internal */
  protected readonly client: SandboxClient;
  #chunks: Chunk[] = [];
  #captured = 0;
  #received = { stdout: 0, stderr: 0 };
  /** True once output beyond {@link MAX_CAPTURED_OUTPUT_BYTES} was dropped from memory (it was still streamed to `logs()` readers and `stdout`/`stderr` Writables). */
  outputTruncated = false;
  #feed: Feed;
  #pollStarted = false;
  #exit: ExitInfo | null = null;
  #exitWaiters: Array<(e: ExitInfo) => void> = [];
  #listeners = new Set<(c: Chunk | null) => void>();
  #sinks: { stdout?: Writable | undefined; stderr?: Writable | undefined } = {};
  #unwatch: (() => void) | undefined;
  #onDisconnect: (() => void) | undefined;
  #remoteWait: Promise<ExitInfo> | undefined;
  #ended = false;

  /**
   * Made by `Sandbox.runCommand` and `Sandbox.getCommand`; not for direct use.
   * @param client the connection.
   * @param info the daemon's Command object.
   * @param live true when `client` started the command and receives its notifications.
   */
  constructor(client: SandboxClient, info: CommandInfo, live: boolean) {
    this.client = client;
    this.cmdId = info.cmdId;
    this.sandboxName = info.sandbox;
    this.cwd = info.cwd;
    this.startedAt = new Date(info.startedAt);
    this.exitCode = info.exitCode ?? null;
    this.#feed = live ? "live" : "none";
    if (info.exitCode !== null && info.exitCode !== undefined) {
      this.#exit = {
        exitCode: info.exitCode, durationMs: info.durationMs ?? 0,
        timedOut: !!info.timedOut, oomKilled: !!info.oomKilled,
        ...(info.memoryLimitBytes !== undefined ? { memoryLimitBytes: info.memoryLimitBytes } : {}),
        usage: info.usage ?? null,
      };
    }
    if (live) {
      this.#unwatch = client.watchCommand(this.cmdId, (n) => this.#onNote(n));
      this.#onDisconnect = () => this.#switchToPolling();
      client.on("disconnect", this.#onDisconnect);
    }
  }

  /** @internal Pipes output as it arrives (runCommand's `stdout`/`stderr` options). */
  _pipeTo(stdout?: Writable, stderr?: Writable): void {
    this.#sinks = { stdout, stderr };
    for (const c of this.#chunks) this.#sinks[c.stream]?.write(c.data);
  }

  #onNote(n: Notification): void {
    if (n.method === "command.output") {
      const stream = n.params.stream === "stderr" ? "stderr" : "stdout";
      this.#add({ stream, data: Buffer.from(String(n.params.data ?? ""), "base64") });
    } else if (n.method === "command.exit") {
      this.#setExit(n.params as unknown as ExitInfo);
      this.#endOutput();
    }
  }

  #add(c: Chunk): void {
    if (c.data.length === 0) return;
    this.#received[c.stream] += c.data.length;
    this.#chunks.push(c);
    this.#captured += c.data.length;
    // A long-running chatty command must not grow this process without
    // bound: keep the newest bytes, as the daemon's own log does.
    while (this.#captured > MAX_CAPTURED_OUTPUT_BYTES && this.#chunks.length > 1) {
      this.#captured -= (this.#chunks.shift() as Chunk).data.length;
      this.outputTruncated = true;
    }
    this.#sinks[c.stream]?.write(c.data);
    for (const l of this.#listeners) l(c);
  }

  #setExit(e: ExitInfo): void {
    if (this.#exit) return;
    this.#exit = {
      exitCode: e.exitCode, durationMs: e.durationMs ?? 0, timedOut: !!e.timedOut, oomKilled: !!e.oomKilled,
      ...(e.memoryLimitBytes !== undefined ? { memoryLimitBytes: e.memoryLimitBytes } : {}),
      usage: e.usage ?? null,
    };
    this.exitCode = e.exitCode;
    for (const w of this.#exitWaiters.splice(0)) w(this.#exit);
  }

  #endOutput(): void {
    if (this.#ended) return;
    this.#ended = true;
    for (const l of this.#listeners) l(null);
    this.#unwatch?.();
    if (this.#onDisconnect) this.client.off("disconnect", this.#onDisconnect);
  }

  // The connection that received the notifications is gone (the daemon
  // restarted): the new daemon has the same logs (sandbox-init keeps them),
  // so polling goes on after what came live.
  #switchToPolling(): void {
    if (this.#ended || this.#feed !== "live") return;
    this.#feed = "poll";
    this.#unwatch?.();
    this.#startPolling({ ...this.#received });
  }

  // Retries command.wait across a lost connection or a daemon that answered
  // `unavailable` while it went down.
  #waitRemote(): Promise<ExitInfo> {
    if (this.#exit) return Promise.resolve(this.#exit);
    if (!this.#remoteWait) {
      this.#remoteWait = (async () => {
        const deadline = Date.now() + (this.client.options.reconnectTimeoutMs ?? 30000);
        for (;;) {
          try {
            const r = await this.client.request<ExitInfo>("command.wait", { cmdId: this.cmdId });
            this.#setExit(r);
            return this.#exit as ExitInfo;
          } catch (e) {
            if (this.#exit) return this.#exit;
            if (!this.#retryable(e) || Date.now() > deadline) throw e;
            await new Promise((r) => setTimeout(r, 100));
          }
        }
      })();
      this.#remoteWait.catch(() => { this.#remoteWait = undefined; });
    }
    return this.#remoteWait;
  }

  #retryable(e: unknown): boolean {
    // A connection the daemon refused (permission, connection cap) is final.
    if (e instanceof SandboxError && (e.reason === "permission_denied" || e.reason === "too_many_connections")) return false;
    if (e instanceof DaemonUnreachableError || e instanceof UnavailableError) return true;
    return e instanceof SandboxError && Date.now() - this.client.lastDisconnectAt < RESTART_GRACE_MS;
  }

  #startPolling(seen: { stdout: number; stderr: number }): void {
    if (this.#pollStarted || this.#ended) return;
    this.#pollStarted = true;
    const release = this.client.hold();
    const waiting = this.#waitRemote();
    waiting.catch(() => undefined);
    void (async () => {
      let exited = false;
      waiting.then(() => { exited = true; }, () => { exited = true; });
      try {
        for (;;) {
          const last = exited;
          try {
            const r = await this.client.request<{ stdout: string; stderr: string }>("command.logs", { cmdId: this.cmdId });
            for (const stream of ["stdout", "stderr"] as const) {
              const b = Buffer.from(r[stream] ?? "", "base64");
              if (b.length > seen[stream]) this.#add({ stream, data: b.subarray(seen[stream]) });
              seen[stream] = b.length;
            }
          } catch (e) {
            if (!this.#retryable(e)) break;
          }
          if (last) break;
          await new Promise((r) => setTimeout(r, POLL_MS));
        }
      } finally {
        release();
        this.#endOutput();
      }
    })();
  }

  /**
   * The command's output as it comes: what came so far first, then live,
   * until the command exits.
   * @param options `signal` ends the iteration early.
   * @returns an async iterator of `{ stream, data }`.
   */
  logs(options: { signal?: AbortSignal } = {}): AsyncIterableIterator<LogLine> {
    const decoders = { stdout: new StringDecoder("utf8"), stderr: new StringDecoder("utf8") };
    let listener: ((c: Chunk | null) => void) | undefined;
    let release: (() => void) | undefined;
    const onAbort = () => q.end(options.signal?.reason);
    const q = new AsyncQueue<LogLine>(() => {
      release?.();
      if (listener) this.#listeners.delete(listener);
      options.signal?.removeEventListener("abort", onAbort);
    });
    const push = (c: Chunk) => {
      const data = decoders[c.stream].write(c.data);
      if (data) q.push({ stream: c.stream, data });
    };
    for (const c of this.#chunks) push(c);
    if (this.#ended || (this.#feed === "none" && this.#exit && this.#pollStarted)) {
      q.end();
      return q;
    }
    listener = (c) => {
      if (c) push(c);
      else {
        for (const s of ["stdout", "stderr"] as const) {
          const rest = decoders[s].end();
          if (rest) q.push({ stream: s, data: rest });
        }
        q.end();
      }
    };
    this.#listeners.add(listener);
    // Keeps the process alive while the iteration waits for output.
    release = this.client.hold();
    if (options.signal?.aborted) q.end(options.signal.reason);
    else options.signal?.addEventListener("abort", onAbort, { once: true });
    if (this.#feed === "none") {
      this.#feed = "poll";
      this.#startPolling({ stdout: 0, stderr: 0 });
    }
    return q;
  }

  /**
   * Waits for the command to exit.
   * @param options `signal` stops waiting (the command keeps running).
   * @returns the finished command.
   */
  async wait(options: { signal?: AbortSignal } = {}): Promise<CommandFinished> {
    const exit = await this.#exitPromise(options.signal);
    // Let the output that came before the exit settle.
    if (this.#feed === "poll") await this.#outputEnded();
    return new CommandFinished(this.client, this, exit, this.#chunks, this.#feed !== "none");
  }

  #exitPromise(signal?: AbortSignal): Promise<ExitInfo> {
    signal?.throwIfAborted();
    if (this.#exit) return Promise.resolve(this.#exit);
    const release = this.client.hold();
    let onLost: (() => void) | undefined;
    const p = new Promise<ExitInfo>((resolve, reject) => {
      this.#exitWaiters.push(resolve);
      if (this.#feed !== "live") this.#waitRemote().catch(reject);
      else {
        onLost = () => { this.#waitRemote().then(resolve, reject); };
        this.client.once("disconnect", onLost);
      }
    });
    const done = () => { release(); if (onLost) this.client.off("disconnect", onLost); };
    p.then(done, done);
    if (!signal) return p;
    return new Promise<ExitInfo>((resolve, reject) => {
      const onAbort = () => reject(signal.reason);
      signal.addEventListener("abort", onAbort, { once: true });
      p.then((v) => { signal.removeEventListener("abort", onAbort); resolve(v); },
        (e) => { signal.removeEventListener("abort", onAbort); reject(e); });
    });
  }

  #outputEnded(): Promise<void> {
    if (this.#ended) return Promise.resolve();
    return new Promise((resolve) => {
      const l = (c: Chunk | null) => { if (!c) { this.#listeners.delete(l); resolve(); } };
      this.#listeners.add(l);
    });
  }

  /**
   * Sends a signal to the command's process group.
   * @param signal a name (`"SIGTERM"`, `"TERM"`) or number; default `"SIGTERM"`.
   */
  async kill(signal: SignalName = "SIGTERM", options: { signal?: AbortSignal } = {}): Promise<void> {
    const sig = typeof signal === "string" ? signal.replace(/^SIG/i, "").toUpperCase() : signal;
    await this.client.request("command.kill", { cmdId: this.cmdId, signal: sig }, options);
  }

  /**
   * Writes to the command's stdin (detached or tty commands, whose stdin stays open).
   * @param data text (UTF-8) or bytes.
   */
  async write(data: string | Uint8Array, options: { signal?: AbortSignal } = {}): Promise<void> {
    const b = typeof data === "string" ? Buffer.from(data, "utf8") : Buffer.from(data);
    await this.client.request("command.write", { cmdId: this.cmdId, data: b.toString("base64") }, options);
  }

  /** Closes the command's stdin (its reads see end of file). */
  async closeStdin(options: { signal?: AbortSignal } = {}): Promise<void> {
    await this.client.request("command.closeStdin", { cmdId: this.cmdId }, options);
  }

  /**
   * Resizes the pty of a command started with `tty`.
   * @param size the new `rows` and `cols`.
   */
  async resize(size: { rows: number; cols: number }, options: { signal?: AbortSignal } = {}): Promise<void> {
    await this.client.request("command.resize", { cmdId: this.cmdId, rows: size.rows, cols: size.cols }, options);
  }

  /** Waits for the exit and returns stdout as text. */
  async stdout(): Promise<string> {
    return (await this.wait()).stdout();
  }

  /** Waits for the exit and returns stderr as text. */
  async stderr(): Promise<string> {
    return (await this.wait()).stderr();
  }

  /**
   * Waits for the exit and returns the output as text.
   * @param stream `"stdout"`, `"stderr"` or `"both"` (interleaved as it came; the default).
   */
  async output(stream: "stdout" | "stderr" | "both" = "both"): Promise<string> {
    return (await this.wait()).output(stream);
  }

  /** @internal The chunks seen so far. */
  protected get chunks(): readonly Chunk[] {
    return this.#chunks;
  }
}

/** A command that has exited: its status, duration and output. */
export class CommandFinished extends Command {
  /** The exit status (128+N when killed by signal N; 137 for a `timeoutMs` kill). */
  declare exitCode: number;
  /** How long it ran (ms). */
  readonly durationMs: number;
  /** True when `timeoutMs` killed it. */
  readonly timedOut: boolean;
  /** True when the OOM killer ended it at the sandbox's memory limit. */
  readonly oomKilled: boolean;
  /** The memory limit it hit (with `oomKilled`). */
  readonly memoryLimitBytes: number | undefined;
  /**
   * What it used (wait4 in sandbox-init): `cpuMs`, the user+system CPU time of
   * its process and every descendant it waited for; `memoryPeakBytes`, the
   * largest resident set of one of those processes. Null when unknown (its
   * sandbox stopped under it).
   */
  readonly usage: CommandUsage | null;
  #out: Chunk[];
  #complete: boolean;

  /** @internal Made by {@link Command.wait}. */
  constructor(client: SandboxClient, cmd: Command, exit: ExitInfo, chunks: Chunk[], complete: boolean) {
    super(client, {
      cmdId: cmd.cmdId, sandbox: cmd.sandboxName, cwd: cmd.cwd, startedAt: cmd.startedAt.toISOString(),
      exitCode: exit.exitCode, durationMs: exit.durationMs, cmd: "", args: [], user: "", tty: false,
    }, false);
    this.exitCode = exit.exitCode;
    this.durationMs = exit.durationMs;
    this.timedOut = exit.timedOut;
    this.oomKilled = exit.oomKilled;
    this.memoryLimitBytes = exit.memoryLimitBytes;
    this.usage = exit.usage ?? null;
    this.#out = chunks;
    this.#complete = complete;
    this.outputTruncated = cmd.outputTruncated;
  }

  async #chunksOf(): Promise<Chunk[]> {
    if (this.#complete) return this.#out;
    const r = await this.client.request<{ stdout: string; stderr: string }>("command.logs", { cmdId: this.cmdId });
    this.#out = [
      { stream: "stdout", data: Buffer.from(r.stdout ?? "", "base64") },
      { stream: "stderr", data: Buffer.from(r.stderr ?? "", "base64") },
    ];
    this.#complete = true;
    return this.#out;
  }

  /** @returns stdout as text (UTF-8). */
  override async stdout(): Promise<string> {
    return this.output("stdout");
  }

  /** @returns stderr as text (UTF-8). */
  override async stderr(): Promise<string> {
    return this.output("stderr");
  }

  /**
   * @param stream `"stdout"`, `"stderr"` or `"both"` (interleaved as it came; the default).
   * @returns the output as text.
   */
  override async output(stream: "stdout" | "stderr" | "both" = "both"): Promise<string> {
    const cs = await this.#chunksOf();
    return Buffer.concat(cs.filter((c) => stream === "both" || c.stream === stream).map((c) => c.data)).toString("utf8");
  }

  /**
   * The output it made, then the end.
   * @returns an async iterator of `{ stream, data }`.
   */
  override logs(): AsyncIterableIterator<LogLine> {
    const q = new AsyncQueue<LogLine>();
    void this.#chunksOf().then((cs) => {
      const d = { stdout: new StringDecoder("utf8"), stderr: new StringDecoder("utf8") };
      for (const c of cs) {
        const data = d[c.stream].write(c.data);
        if (data) q.push({ stream: c.stream, data });
      }
      for (const s of ["stdout", "stderr"] as const) {
        const rest = d[s].end();
        if (rest) q.push({ stream: s, data: rest });
      }
      q.end();
    }, (e) => q.end(e));
    return q;
  }

  /** @returns this (it has exited). */
  override async wait(): Promise<CommandFinished> {
    return this;
  }
}
