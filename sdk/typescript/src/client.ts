/**
 * The connection to sandboxd: one socket per {@link SandboxClient} (a Unix
 * socket, or TLS to a remote listener), JSON-RPC 2.0 with one message per
 * line (docs/API.md, "Framing"), requests multiplexed by id, server
 * notifications routed by `cmdId`, and a reconnect when the daemon restarts.
 * @module
 */
import { EventEmitter } from "node:events";
import * as net from "node:net";
import * as tls from "node:tls";
import { DaemonUnreachableError, SandboxError, errorFromRpc, type RpcErrorObject } from "./errors.js";
import { AsyncQueue } from "./queue.js";
import type { SandboxEvent, EventKind, WatchEvent } from "./types.js";

/** The socket a client uses when neither `socketPath` nor `SANDBOXD_SOCKET` says otherwise. */
export const DEFAULT_SOCKET_PATH = "/run/sandboxd/sandboxd.sock";

/** How to reach sandboxd. */
export interface SandboxClientOptions {
  /** The daemon's Unix socket; default `SANDBOXD_SOCKET`, then `/run/sandboxd/sandboxd.sock`. */
  socketPath?: string;
  /** A remote listener instead of the Unix socket: `tcp://host:port` (TLS 1.3 with a client certificate). */
  url?: string;
  /** PEM client certificate for `url`. */
  cert?: string | Buffer;
  /** PEM private key of `cert`. */
  key?: string | Buffer;
  /** PEM CA certificate(s) the daemon's certificate must chain to. */
  ca?: string | Buffer;
  /** The TLS server name to verify (default: the host of `url`). */
  servername?: string;
  /** How long a lost connection is retried before calls fail with {@link DaemonUnreachableError} (ms, default 30000). */
  reconnectTimeoutMs?: number;
}

/** Options of one request. */
export interface RequestOptions {
  /** Aborts the call: it rejects with the signal's reason, and the daemon is asked to cancel it. */
  signal?: AbortSignal | undefined;
}

/** A server notification: `command.output`, `command.exit` or `event`. */
export interface Notification {
  /** The notification's method. */
  method: string;
  /** Its params. */
  params: Record<string, unknown>;
}

interface Pending {
  method: string;
  resolve: (v: unknown) => void;
  reject: (e: unknown) => void;
}

const UNCLAIMED_CAP = 4096;

/**
 * One connection to sandboxd, shared by every call made with it.
 *
 * ```ts
 * const client = new SandboxClient({ socketPath: "/run/sandboxd/sandboxd.sock" });
 * const sb = await Sandbox.create({ client, networkPolicy: "deny-all" });
 * ```
 *
 * The socket is opened at the first call and does not keep the Node process
 * alive while nothing is pending. When it closes (a daemon restart), the
 * next call connects again, retrying for `reconnectTimeoutMs`; commands that
 * were streaming resume their logs from the new daemon.
 *
 * Events: `"disconnect"` (the connection was lost) and `"reconnect"` (a new
 * connection after a loss).
 */
export class SandboxClient extends EventEmitter {
  /** The Unix socket path in use (undefined with `url`). */
  readonly socketPath: string | undefined;
  /** The remote URL in use (undefined with a Unix socket). */
  readonly url: string | undefined;
  readonly #opts: SandboxClientOptions;
  #socket: net.Socket | null = null;
  #connecting: Promise<net.Socket> | null = null;
  #everConnected = false;
  #closed = false;
  #nextId = 1;
  #buf = "";
  readonly #pending = new Map<number, Pending>();
  readonly #watchers = new Map<string, Set<(n: Notification) => void>>();
  readonly #unclaimed = new Map<string, Notification[]>();
  #unclaimedCount = 0;
  readonly #eventSinks = new Set<(n: Notification) => void>();
  // fs.watch notifications of a watch's own connection (watchFs).
  readonly #watchSinks = new Set<(n: Notification) => void>();
  #holds = 0;
  #lostAt = 0;
  // The error line (id null) the daemon sent before closing a connection it
  // refused: permission denied, too many connections.
  #refusal: SandboxError | null = null;
  #heard = false; // a line came on the current socket

  /** @param options where the daemon listens; see {@link SandboxClientOptions}. */
  constructor(options: SandboxClientOptions = {}) {
    super();
    this.setMaxListeners(0); // one "disconnect" listener per live Command
    this.#opts = { ...options };
    if (options.url !== undefined) {
      if (!/^tcp:\/\/[^/]+:\d+\/?$/.test(options.url))
        throw new TypeError(`url: expected "tcp://host:port", got ${JSON.stringify(options.url)}`);
      if (options.socketPath !== undefined) throw new TypeError("give socketPath or url, not both");
      this.url = options.url;
      this.socketPath = undefined;
    } else {
      this.socketPath = options.socketPath ?? process.env.SANDBOXD_SOCKET ?? DEFAULT_SOCKET_PATH;
      this.url = undefined;
    }
  }

  /** When the connection was last lost (ms since the epoch; 0: never). */
  get lastDisconnectAt(): number {
    return this.#lostAt;
  }

  /** The options this client was made with (for a second connection to the same daemon). */
  get options(): SandboxClientOptions {
    return { ...this.#opts };
  }

  #where(): string {
    return this.url ?? (this.socketPath as string);
  }

  #open(): Promise<net.Socket> {
    return new Promise((resolve, reject) => {
      let sock: net.Socket;
      const onError = (e: Error) => {
        sock.destroy();
        reject(new DaemonUnreachableError(`cannot connect to sandboxd at ${this.#where()}: ${e.message}`, e));
      };
      if (this.url !== undefined) {
        const u = new URL(this.url.replace(/^tcp:/, "http:"));
        const host = u.hostname.replace(/^\[|\]$/g, "");
        const o: tls.ConnectionOptions = {
          host, port: Number(u.port), minVersion: "TLSv1.3",
          servername: this.#opts.servername ?? (net.isIP(host) ? undefined as unknown as string : host),
        };
        if (this.#opts.cert !== undefined) o.cert = this.#opts.cert;
        if (this.#opts.key !== undefined) o.key = this.#opts.key;
        if (this.#opts.ca !== undefined) o.ca = this.#opts.ca;
        sock = tls.connect(o, () => { sock.off("error", onError); resolve(sock); });
      } else {
        sock = net.createConnection({ path: this.socketPath as string }, () => {
          sock.off("error", onError); resolve(sock);
        });
      }
      sock.once("error", onError);
    });
  }

  async #connect(): Promise<net.Socket> {
    if (this.#socket) return this.#socket;
    if (this.#connecting) return this.#connecting;
    const retry = this.#everConnected;
    this.#connecting = (async () => {
      const deadline = Date.now() + (this.#opts.reconnectTimeoutMs ?? 30000);
      for (let delay = 50; ; delay = Math.min(delay * 2, 500)) {
        if (this.#closed) throw new DaemonUnreachableError("the SandboxClient was closed");
        try {
          const s = await this.#open();
          this.#attach(s);
          return s;
        } catch (e) {
          if (!retry || Date.now() + delay > deadline) throw e;
          await new Promise((r) => setTimeout(r, delay));
        }
      }
    })();
    try {
      return await this.#connecting;
    } finally {
      this.#connecting = null;
    }
  }

  #attach(s: net.Socket): void {
    const wasLost = this.#everConnected;
    this.#socket = s;
    this.#everConnected = true;
    this.#buf = "";
    this.#refusal = null;
    this.#heard = false;
    s.setEncoding("utf8");
    s.on("data", (chunk: string) => this.#onData(chunk));
    s.on("error", () => { /* handled by close */ });
    s.on("close", () => this.#onClose(s));
    this.#updateRef();
    if (wasLost) this.emit("reconnect");
  }

  #onClose(s: net.Socket): void {
    if (this.#socket !== s) return;
    this.#socket = null;
    const pend = [...this.#pending.values()];
    this.#pending.clear();
    if (!this.#refusal && !this.#heard && pend.length > 0 && this.url === undefined && !this.#closed) {
      // Lost before a single answer: the daemon may have refused it, its
      // reason lost to our write (EPIPE, ECONNRESET). Ask again without
      // writing: a refusal is the first line of a fresh connection.
      void this.#probeRefusal().then((r) => {
        this.#refusal = r;
        this.#finishClose(pend);
      });
      return;
    }
    this.#finishClose(pend);
  }

  #finishClose(pend: Pending[]): void {
    const refusal = this.#refusal;
    const err = () => refusal ?? new DaemonUnreachableError(`the connection to sandboxd at ${this.#where()} was lost`);
    for (const p of pend) p.reject(err());
    if (this.#closed) return;
    // Refused: the calls made on it have the daemon's reason; the next call
    // tries again (a connection may have closed meanwhile), nothing retries
    // in the background.
    if (refusal) return;
    this.#lostAt = Date.now();
    this.emit("disconnect");
    // Reconnect in the background while something listens for notifications.
    if (this.#watchers.size > 0 || this.#eventSinks.size > 0) {
      this.#connect().catch((e) => this.emit("reconnectFailed", e));
    }
  }

  // A connection that writes nothing and reads the daemon's first line: its
  // refusal (permission denied, too many connections) as a typed error, or
  // null when it says nothing within 2 s (accepted) or cannot be reached.
  #probeRefusal(): Promise<SandboxError | null> {
    return new Promise((resolve) => {
      let buf = "";
      let done = false;
      const finish = (r: SandboxError | null) => {
        if (done) return;
        done = true;
        clearTimeout(timer);
        sock.destroy();
        resolve(r);
      };
      const sock = net.createConnection({ path: this.socketPath as string });
      const timer = setTimeout(() => finish(null), 2000);
      sock.setEncoding("utf8");
      sock.on("data", (d: string) => {
        buf += d;
        const nl = buf.indexOf("\n");
        if (nl < 0) return;
        try {
          const m = JSON.parse(buf.slice(0, nl)) as { id?: unknown; error?: RpcErrorObject };
          finish(m.id === null && m.error ? errorFromRpc(m.error) : null);
        } catch {
          finish(null);
        }
      });
      sock.on("error", () => finish(null));
      sock.on("close", () => finish(null));
    });
  }

  #onData(chunk: string): void {
    this.#buf += chunk;
    let nl: number;
    while ((nl = this.#buf.indexOf("\n")) >= 0) {
      const line = this.#buf.slice(0, nl);
      this.#buf = this.#buf.slice(nl + 1);
      if (line.trim() === "") continue;
      this.#heard = true;
      let msg: { id?: unknown; method?: string; params?: Record<string, unknown>; result?: unknown; error?: RpcErrorObject };
      try {
        msg = JSON.parse(line);
      } catch {
        continue;
      }
      if (msg.method !== undefined && msg.id === undefined) {
        this.#onNotification({ method: msg.method, params: msg.params ?? {} });
        continue;
      }
      if (msg.id === null && msg.error) {
        // The daemon refuses the connection and closes it (docs/API.md,
        // "Connections"): every call on it fails with this.
        this.#refusal = errorFromRpc(msg.error);
        continue;
      }
      if (typeof msg.id !== "number") continue;
      const p = this.#pending.get(msg.id);
      if (!p) continue;
      this.#pending.delete(msg.id);
      this.#updateRef();
      if (msg.error) p.reject(errorFromRpc(msg.error, p.method));
      else p.resolve(msg.result);
    }
  }

  #onNotification(n: Notification): void {
    if (n.method === "event") {
      for (const f of this.#eventSinks) f(n);
      return;
    }
    if (n.method === "fs.watchEvent" || n.method === "fs.watchStarted") {
      for (const f of this.#watchSinks) f(n);
      return;
    }
    const cmdId = typeof n.params.cmdId === "string" ? n.params.cmdId : undefined;
    if (cmdId === undefined) return;
    const ws = this.#watchers.get(cmdId);
    if (ws && ws.size > 0) {
      for (const f of ws) f(n);
      return;
    }
    // Output may arrive before the answer that names the command: keep it
    // until someone claims the cmdId (bounded; oldest dropped first).
    let list = this.#unclaimed.get(cmdId);
    if (!list) this.#unclaimed.set(cmdId, (list = []));
    list.push(n);
    if (++this.#unclaimedCount > UNCLAIMED_CAP) {
      const first = this.#unclaimed.keys().next().value as string;
      this.#unclaimedCount -= this.#unclaimed.get(first)?.length ?? 0;
      this.#unclaimed.delete(first);
    }
  }

  #updateRef(): void {
    const s = this.#socket;
    if (!s) return;
    if (this.#pending.size > 0 || this.#holds > 0) s.ref();
    else s.unref();
  }

  /**
   * Keeps the Node process alive (the socket referenced) until the returned
   * function is called; for streams waiting on notifications.
   * @returns the release function (idempotent).
   */
  hold(): () => void {
    this.#holds++;
    this.#updateRef();
    let done = false;
    return () => {
      if (done) return;
      done = true;
      this.#holds--;
      this.#updateRef();
    };
  }

  /**
   * Calls a JSON-RPC method of the daemon.
   * @param method the method, e.g. `"sandbox.get"` (docs/API.md).
   * @param params its params object.
   * @param options `signal` to abort: the promise rejects with the signal's
   *   reason and the daemon is sent `request.cancel` for it.
   * @returns the `result` of the answer.
   * @throws {SandboxError} the daemon's error, typed by reason;
   *   {@link DaemonUnreachableError} when the daemon cannot be reached.
   */
  async request<T = unknown>(method: string, params?: Record<string, unknown>, options: RequestOptions = {}): Promise<T> {
    const signal = options.signal;
    signal?.throwIfAborted();
    const sock = await abortable(this.#connect(), signal);
    const id = this.#nextId++;
    return new Promise<T>((resolve, reject) => {
      let onAbort: (() => void) | undefined;
      const cleanup = () => { if (onAbort) signal?.removeEventListener("abort", onAbort); };
      this.#pending.set(id, {
        method,
        resolve: (v) => { cleanup(); resolve(v as T); },
        reject: (e) => { cleanup(); reject(e); },
      });
      if (signal) {
        onAbort = () => {
          if (!this.#pending.delete(id)) return;
          this.#updateRef();
          reject(signal.reason);
          if (this.#socket === sock) this.#notifyCancel(id);
        };
        signal.addEventListener("abort", onAbort, { once: true });
      }
      this.#updateRef();
      sock.write(JSON.stringify({ jsonrpc: "2.0", id, method, params: params ?? {} }) + "\n");
    });
  }

  #notifyCancel(id: number): void {
    // request.cancel: the daemon cancels what it can (create, fork,
    // snapshot, command.run); a daemon without it answers -32601, ignored.
    this.request("request.cancel", { id }).catch(() => undefined);
  }

  /**
   * Routes the notifications of one command to `listener` (and first hands it
   * any that arrived before this call).
   * @param cmdId the command's id.
   * @param listener called with each `command.output` / `command.exit`.
   * @returns a function that stops the routing.
   */
  watchCommand(cmdId: string, listener: (n: Notification) => void): () => void {
    let set = this.#watchers.get(cmdId);
    if (!set) this.#watchers.set(cmdId, (set = new Set()));
    set.add(listener);
    const early = this.#unclaimed.get(cmdId);
    if (early) {
      this.#unclaimed.delete(cmdId);
      this.#unclaimedCount -= early.length;
      for (const n of early) listener(n);
    }
    return () => {
      const s = this.#watchers.get(cmdId);
      if (!s) return;
      s.delete(listener);
      if (s.size === 0) this.#watchers.delete(cmdId);
    };
  }

  /**
   * The daemon's event stream (`events.subscribe`) on a connection of its
   * own, closed when the iteration stops; resubscribed after a reconnect.
   * @param filter `sandbox` (a name) and `kinds` to receive only those.
   * @param options `signal` ends the iteration.
   * @returns an async iterator of events.
   */
  events(filter: { sandbox?: string; kinds?: EventKind[] } = {}, options: RequestOptions = {}): AsyncIterableIterator<SandboxEvent> {
    const conn = new SandboxClient(this.#opts);
    const release = conn.hold();
    const params: Record<string, unknown> = {};
    if (filter.sandbox !== undefined) params.sandbox = filter.sandbox;
    if (filter.kinds !== undefined) params.kinds = filter.kinds;
    const onAbort = () => q.end(options.signal?.reason);
    const q = new AsyncQueue<SandboxEvent>(() => {
      release();
      conn.close();
      options.signal?.removeEventListener("abort", onAbort);
    });
    conn.#eventSinks.add((n) => q.push(n.params as unknown as SandboxEvent));
    const subscribe = () => conn.request("events.subscribe", params).catch((e) => q.end(e));
    conn.on("reconnect", subscribe);
    conn.on("reconnectFailed", (e) => q.end(e));
    if (options.signal?.aborted) q.end(options.signal.reason);
    else {
      options.signal?.addEventListener("abort", onAbort, { once: true });
      void subscribe();
    }
    return q;
  }

  /**
   * `fs.watch` of `path` in sandbox `sandbox` on a connection of its own,
   * closed (which ends the watch in the sandbox) when the iteration stops.
   * The iteration ends when the sandbox stops or the watched path is
   * deleted, and throws the daemon's error, or {@link DaemonUnreachableError}
   * when the connection is lost (a watch does not outlive its connection).
   * @param options `recursive` to watch the whole tree; `signal` ends the
   *   iteration (with the signal's reason); `onStarted` is called once the
   *   watches are in place (changes from then on are seen).
   */
  watchFs(sandbox: string, path: string,
    options: { recursive?: boolean; signal?: AbortSignal | undefined; onStarted?: () => void } = {}): AsyncIterableIterator<WatchEvent> {
    const conn = new SandboxClient(this.#opts);
    const release = conn.hold();
    const onAbort = () => q.end(options.signal?.reason);
    const q = new AsyncQueue<WatchEvent>(() => {
      release();
      conn.close();
      options.signal?.removeEventListener("abort", onAbort);
    });
    conn.#watchSinks.add((n) => {
      if (n.method === "fs.watchStarted") options.onStarted?.();
      else q.push(n.params as unknown as WatchEvent);
    });
    conn.on("disconnect", () => q.end(new DaemonUnreachableError("the connection of the watch was lost")));
    if (options.signal?.aborted) {
      q.end(options.signal.reason);
      return q;
    }
    options.signal?.addEventListener("abort", onAbort, { once: true });
    conn.request("fs.watch", { sandbox, path, recursive: !!options.recursive })
      .then(() => q.end(), (e) => q.end(e));
    return q;
  }

  /** Closes the socket; pending calls reject with {@link DaemonUnreachableError}. */
  close(): void {
    this.#closed = true;
    const s = this.#socket;
    this.#socket = null;
    const pend = [...this.#pending.values()];
    this.#pending.clear();
    for (const p of pend) p.reject(new DaemonUnreachableError("the SandboxClient was closed"));
    s?.destroy();
  }

  /** Closes the client at the end of an `await using` scope. */
  async [Symbol.asyncDispose](): Promise<void> {
    this.close();
  }
}

// `p`, or the signal's reason as soon as it aborts (a reconnect may retry for
// a while; the caller need not wait for it).
function abortable<T>(p: Promise<T>, signal: AbortSignal | undefined): Promise<T> {
  if (!signal) return p;
  return new Promise<T>((resolve, reject) => {
    const onAbort = () => reject(signal.reason);
    signal.addEventListener("abort", onAbort, { once: true });
    p.then((v) => { signal.removeEventListener("abort", onAbort); if (signal.aborted) reject(signal.reason); else resolve(v); },
      (e) => { signal.removeEventListener("abort", onAbort); reject(e); });
  });
}

let defaultClient: SandboxClient | undefined;

/**
 * The client used by calls that pass none: made at first use from
 * `SANDBOXD_SOCKET` or `/run/sandboxd/sandboxd.sock`.
 * @returns the shared default client.
 */
export function getDefaultClient(): SandboxClient {
  if (!defaultClient) defaultClient = new SandboxClient();
  return defaultClient;
}
