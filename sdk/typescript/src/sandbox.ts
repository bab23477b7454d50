/**
 * {@link Sandbox}: the spec's API over the daemon's `sandbox.*`, `command.*`,
 * `fs.*`, `policy.check` and `events.subscribe` methods, and
 * {@link Snapshot} over `snapshot.*` (volumes are in volume.ts).
 * @module
 */
import { Readable, type Writable } from "node:stream";
import { getDefaultClient, type SandboxClient } from "./client.js";
import { Command, CommandFinished } from "./command.js";
import { NotFoundError, SandboxError, SandboxStoppedError } from "./errors.js";
import type {
  CommandInfo, CreateSandboxParams, EventKind, NetworkPolicy, PolicyDecision, PortInfo, Resources,
  SandboxEvent, SandboxInfo, SandboxStats, SandboxStatus, SnapshotInfo, UpdateSandboxParams, VolumeMount, WatchEvent,
} from "./types.js";

/** Which client a call uses: the default one (`SANDBOXD_SOCKET`) unless given. */
export interface WithClient {
  /** The connection to use (default: {@link getDefaultClient}). */
  client?: SandboxClient;
}

/** Options that only abort. */
export interface CallOptions {
  /** Aborts the call. */
  signal?: AbortSignal;
}

/** Options of the file calls: `sudo` runs them as root inside the sandbox instead of the sandbox user. */
export interface FsOptions extends CallOptions {
  /** Run as root in the sandbox (a command's `sudo` confinement); files made are root's. */
  sudo?: boolean;
}

/** What a session's expiry does ({@link Sandbox.setTimeout}): `stop` ends it, `pause` freezes it as {@link Sandbox.pause}. */
export type OnTimeout = "stop" | "pause";

/** A file to write with {@link Sandbox.writeFiles}. */
export interface WriteFileEntry {
  /** The path inside the sandbox (relative paths are under `/workspace`); parents are created. */
  path: string;
  /** The content: text (UTF-8) or bytes. */
  content: string | Uint8Array;
  /** Permission bits of a new file (default 0o644). */
  mode?: number;
  /**
   * The file's extended attributes in the `user.` namespace become exactly these
   * (`{ "user.origin": "ci" }`; `{}` removes them all); other namespaces are untouched.
   */
  xattrs?: Record<string, string>;
}

/** Parameters of `runCommand({...})`. */
export interface RunCommandParams {
  /** The program (looked up in `PATH`). */
  cmd: string;
  /** Its arguments. */
  args?: string[];
  /** Working directory (default `/workspace`). */
  cwd?: string;
  /** Extra environment. */
  env?: Record<string, string>;
  /** Run as root inside the sandbox. */
  sudo?: boolean;
  /** Return a {@link Command} as soon as it starts instead of waiting for its exit. */
  detached?: boolean;
  /** Written to stdin, which is then closed. */
  stdin?: string | Uint8Array;
  /** Output is written here as it comes. */
  stdout?: Writable;
  /** Error output is written here as it comes. */
  stderr?: Writable;
  /** Kill (SIGKILL, exit 137) after this many ms. */
  timeoutMs?: number;
  /** Run on a pty of this size (stdout and stderr merged; resize with {@link Command.resize}). */
  tty?: { rows: number; cols: number };
  /** Aborts: the command is killed and the call rejects with the signal's reason. */
  signal?: AbortSignal;
}

const CHUNK = 4 << 20; // fs.write pieces, well under the daemon's maxLineBytes

function toBuffer(d: string | Uint8Array): Buffer {
  return typeof d === "string" ? Buffer.from(d, "utf8") : Buffer.from(d.buffer, d.byteOffset, d.byteLength);
}

function opt(signal: AbortSignal | undefined): { signal?: AbortSignal } {
  return signal ? { signal } : {};
}

function sudo(options: FsOptions | undefined): { sudo?: true } {
  return options?.sudo ? { sudo: true } : {};
}

function strip<T extends Record<string, unknown>>(o: T, drop: string[]): Record<string, unknown> {
  const r: Record<string, unknown> = {};
  for (const [k, v] of Object.entries(o)) if (v !== undefined && !drop.includes(k)) r[k] = v;
  return r;
}

/**
 * A sandbox: an isolated Linux environment with its own filesystem, network
 * policy and commands.
 *
 * ```ts
 * await using sandbox = await Sandbox.create({ networkPolicy: "deny-all" });
 * const r = await sandbox.runCommand("echo", ["hi"]);
 * console.log(await r.stdout());
 * ```
 */
export class Sandbox {
  /** The connection this sandbox's calls use. */
  readonly client: SandboxClient;
  #info: SandboxInfo;
  /** The `node:fs/promises`-style view of the sandbox's files. */
  readonly fs: SandboxFs;

  /** @internal Use {@link Sandbox.create}, {@link Sandbox.get} and friends. */
  constructor(client: SandboxClient, info: SandboxInfo) {
    this.client = client;
    this.#info = info;
    this.fs = new SandboxFs(this);
  }

  /** The name (unique on the daemon). */
  get name(): string { return this.#info.name; }
  /** The daemon's unique id (32 hex). */
  get sandboxId(): string { return this.#info.id; }
  /** The status as last seen (refresh with {@link refresh}). */
  get status(): SandboxStatus { return this.#info.status; }
  /** The timeout (ms). */
  get timeout(): number { return this.#info.timeout; }
  /** When the running session ends, or null. */
  get expiresAt(): Date | null { return this.#info.expiresAt ? new Date(this.#info.expiresAt) : null; }
  /** When it was created. */
  get createdAt(): Date { return new Date(this.#info.createdAt); }
  /** The exposed ports and their host endpoints. */
  get ports(): PortInfo[] { return this.#info.ports ?? []; }
  /** The network policy as the daemon shows it (transform header values redacted). */
  get networkPolicy(): NetworkPolicy { return this.#info.networkPolicy; }
  /** The environment of its commands. */
  get env(): Record<string, string> { return this.#info.env ?? {}; }
  /** Its tags. */
  get tags(): Record<string, string> { return this.#info.tags ?? {}; }
  /** Whether it outlives its sessions. */
  get persistent(): boolean { return !!this.#info.persistent; }
  /** False while no `onCreate` of {@link getOrCreate} has succeeded on it. */
  get ready(): boolean { return this.#info.ready !== false; }
  /** Its resources. */
  get resources(): Resources & { diskMiB?: number } { return this.#info.resources; }
  /** Its runtime. */
  get runtime(): string { return this.#info.runtime; }
  /** The volumes it mounts, `{ name, path, readOnly? }` each. */
  get volumes(): VolumeMount[] { return this.#info.volumes ?? []; }
  /** True while the running session is paused ({@link pause}, or its expiry with `onTimeout: "pause"`). */
  get paused(): boolean { return !!(this.#info.session as { paused?: boolean } | null | undefined)?.paused; }
  /** What the running session's expiry does (`stop` or `pause`); null when no session runs. */
  get onTimeout(): OnTimeout | null { return (this.#info.session as { onTimeout?: OnTimeout } | null | undefined)?.onTimeout ?? null; }
  /** The whole Sandbox object as the daemon last sent it. */
  get info(): SandboxInfo { return this.#info; }

  /**
   * Creates a sandbox and waits until its session runs and its source is in `/workspace`.
   * @param params the spec's create parameters, plus `client`; `volumes` mounts volumes
   *   (`[{ name, path, readOnly? }]`, see {@link Volume}).
   * @returns the running sandbox.
   * @throws {AlreadyExistsError} the name is taken; {@link SourceFailedError}, {@link InvalidPolicyError}, {@link InvalidParamsError};
   *   {@link NotFoundError} a volume of `volumes` does not exist (`field` names it).
   */
  static async create(params: CreateSandboxParams & WithClient = {}): Promise<Sandbox> {
    const client = params.client ?? getDefaultClient();
    const info = await client.request<SandboxInfo>("sandbox.create", strip(params as unknown as Record<string, unknown>, ["client", "signal"]), opt(params.signal));
    return new Sandbox(client, info);
  }

  /**
   * Gets a sandbox by name, with its session resumed (a stopped persistent sandbox gets a new session).
   * @throws {NotFoundError} no such sandbox; {@link SandboxStoppedError} a non-persistent one that is stopping.
   */
  static async get(params: { name: string; signal?: AbortSignal } & WithClient): Promise<Sandbox> {
    const client = params.client ?? getDefaultClient();
    const info = await client.request<SandboxInfo>("sandbox.get", { name: params.name, resume: true }, opt(params.signal));
    return new Sandbox(client, info);
  }

  /**
   * Gets the sandbox of this name, or creates it with these params. Of
   * concurrent callers exactly one creates it.
   *
   * With `onCreate` (to install dependencies, say), no caller, in this
   * process or another, gets the sandbox before an `onCreate` succeeded on
   * it (docs/API.md, "Setup and readiness"): the caller that creates it
   * runs its `onCreate` before this returns and then marks the sandbox
   * ready; concurrent callers wait for that. When `onCreate` throws (or its
   * process dies), the sandbox stays, not ready, and the error goes to this
   * caller; the next `getOrCreate` with `onCreate` (a waiting one first)
   * runs its `onCreate` again on the sandbox as the failed attempt left it.
   * @returns the sandbox, running.
   */
  static async getOrCreate(params: CreateSandboxParams & WithClient & {
    name: string;
    onCreate?: (sandbox: Sandbox) => unknown | Promise<unknown>;
  }): Promise<Sandbox> {
    const client = params.client ?? getDefaultClient();
    const p = strip(params as unknown as Record<string, unknown>, ["client", "signal", "onCreate"]);
    if (params.onCreate) p.setup = true;
    const r = await client.request<{ sandbox: SandboxInfo; created: boolean; differs: string[]; setup?: boolean }>(
      "sandbox.getOrCreate", p, opt(params.signal));
    const sb = new Sandbox(client, r.sandbox);
    sb.differs = r.differs ?? [];
    if (r.setup && params.onCreate) {
      // This caller holds the setup claim: it ends it either way.
      try {
        await params.onCreate(sb);
      } catch (e) {
        await client.request<SandboxInfo>("sandbox.setReady", { name: sb.name, ready: false }).then(
          (info) => sb.#set(info), () => undefined);
        throw e;
      }
      sb.#set(await client.request<SandboxInfo>("sandbox.setReady", { name: sb.name, ready: true }));
    }
    return sb;
  }

  /**
   * The keys given to {@link getOrCreate} whose value is not the existing sandbox's (`[]` when it was created).
   */
  differs: string[] = [];

  /**
   * Forks a sandbox: a new running sandbox whose filesystem is the source's current state.
   * It mounts the source's volumes (the same volumes, not copies) unless `volumes` names others (`[]`: none).
   * @param params `sourceSandbox` (a name or a Sandbox), `name?`, and any create parameter to override.
   */
  static async fork(params: Omit<CreateSandboxParams, "source" | "name"> & WithClient & {
    sourceSandbox: string | Sandbox;
    name?: string;
  }): Promise<Sandbox> {
    const client = params.client ?? (typeof params.sourceSandbox === "string" ? getDefaultClient() : params.sourceSandbox.client);
    const source = typeof params.sourceSandbox === "string" ? params.sourceSandbox : params.sourceSandbox.name;
    const overrides = strip(params as unknown as Record<string, unknown>, ["client", "signal", "sourceSandbox", "name"]);
    const p: Record<string, unknown> = { sourceSandbox: source };
    if (params.name !== undefined) p.name = params.name;
    if (Object.keys(overrides).length > 0) p.overrides = overrides;
    return new Sandbox(client, await client.request<SandboxInfo>("sandbox.fork", p, opt(params.signal)));
  }

  /**
   * Lists sandboxes, page by page over the daemon's cursor.
   * ```ts
   * for await (const sb of Sandbox.list({ tags: { team: "a" } })) console.log(sb.name);
   * ```
   * @param params `namePrefix`, `tags` (all must match), `limit` (page size, 1-1000).
   * @returns an async iterable of sandboxes.
   */
  static async *list(params: { namePrefix?: string; tags?: Record<string, string>; limit?: number; signal?: AbortSignal } & WithClient = {}): AsyncGenerator<Sandbox, void, undefined> {
    const client = params.client ?? getDefaultClient();
    let cursor: string | null = null;
    do {
      const p = strip({ namePrefix: params.namePrefix, tags: params.tags, limit: params.limit }, []);
      if (cursor !== null) p.cursor = cursor;
      const page: { sandboxes: SandboxInfo[]; nextCursor: string | null } =
        await client.request("sandbox.list", p, opt(params.signal));
      for (const info of page.sandboxes) yield new Sandbox(client, info);
      cursor = page.nextCursor;
    } while (cursor !== null);
  }

  #set(info: SandboxInfo): this {
    this.#info = info;
    return this;
  }

  /** Reads the sandbox again from the daemon (status, ports' endpoints after a restart). */
  async refresh(options: CallOptions = {}): Promise<this> {
    return this.#set(await this.client.request<SandboxInfo>("sandbox.get", { name: this.name }, opt(options.signal)));
  }

  /**
   * Changes the sandbox live: `networkPolicy` and `resources` apply to the running session at once, `env` to later commands.
   * @returns this sandbox, updated.
   */
  async update(params: UpdateSandboxParams): Promise<this> {
    const p = strip(params as unknown as Record<string, unknown>, ["signal"]);
    return this.#set(await this.client.request<SandboxInfo>("sandbox.update", { name: this.name, ...p }, opt(params.signal)));
  }

  /** Deletes the sandbox and every trace of it. */
  async delete(options: CallOptions = {}): Promise<void> {
    await this.client.request("sandbox.delete", { name: this.name }, opt(options.signal));
  }

  /** Stops the session (a non-persistent sandbox is then deleted; a persistent one keeps its files). */
  async stop(options: CallOptions = {}): Promise<void> {
    this.#set(await this.client.request<SandboxInfo>("sandbox.stop", { name: this.name }, opt(options.signal)));
  }

  /**
   * Moves the running session's expiry later.
   * @param durationMs how much later (ms).
   */
  async extendTimeout(durationMs: number, options: CallOptions = {}): Promise<void> {
    this.#set(await this.client.request<SandboxInfo>("sandbox.extendTimeout", { name: this.name, duration: durationMs }, opt(options.signal)));
  }

  /**
   * Sets when the running session ends: `timeoutMs` from now, earlier or later than it would have.
   * The sandbox's own `timeout` (of its later sessions) is unchanged: that is {@link update}'s.
   * @param timeoutMs ms from now (1000 to the daemon's maximum timeout).
   * @param options `onTimeout`: `"pause"` pauses the session at its expiry instead of ending it
   *   (kept for the rest of the session; {@link resume} gives it a whole timeout again); `"stop"` ends it.
   * @throws {SandboxStoppedError} no session runs.
   */
  async setTimeout(timeoutMs: number, options: CallOptions & { onTimeout?: OnTimeout } = {}): Promise<void> {
    const p: Record<string, unknown> = { name: this.name, timeout: timeoutMs };
    if (options.onTimeout !== undefined) p.onTimeout = options.onTimeout;
    this.#set(await this.client.request<SandboxInfo>("sandbox.setTimeout", p, opt(options.signal)));
  }

  /** Freezes every process of the running session; commands and file calls are refused until {@link resume}. */
  async pause(options: CallOptions = {}): Promise<void> {
    this.#set(await this.client.request<SandboxInfo>("sandbox.pause", { name: this.name }, opt(options.signal)));
  }

  /** Thaws a paused session (one whose expiry passed gets a whole timeout from now). */
  async resume(options: CallOptions = {}): Promise<void> {
    this.#set(await this.client.request<SandboxInfo>("sandbox.resume", { name: this.name }, opt(options.signal)));
  }

  /**
   * Captures the filesystem and config as a snapshot (the sandbox keeps running).
   * @param params `expiration`: ms from now until the daemon deletes it (0 or absent: never);
   *   `tags`: the snapshot's own labels (at most 5), which {@link Snapshot.list} filters by.
   */
  async snapshot(params: { expiration?: number; tags?: Record<string, string>; signal?: AbortSignal } = {}): Promise<Snapshot> {
    const p: Record<string, unknown> = { name: this.name };
    if (params.expiration !== undefined) p.expiration = params.expiration;
    if (params.tags !== undefined) p.tags = params.tags;
    return new Snapshot(this.client, await this.client.request<SnapshotInfo>("sandbox.snapshot", p, opt(params.signal)));
  }

  /** Runs a command and waits for it to exit. */
  runCommand(cmd: string, args?: string[], options?: CallOptions): Promise<CommandFinished>;
  /** Starts a command and returns it while it runs. */
  runCommand(params: RunCommandParams & { detached: true }): Promise<Command>;
  /** Runs a command and waits for it to exit. */
  runCommand(params: RunCommandParams & { detached?: false }): Promise<CommandFinished>;
  /** Runs a command; detached: returns it while it runs. */
  runCommand(params: RunCommandParams): Promise<Command | CommandFinished>;
  async runCommand(a: string | RunCommandParams, args?: string[], options?: CallOptions): Promise<Command | CommandFinished> {
    const params: RunCommandParams = typeof a === "string" ? { cmd: a, ...(args ? { args } : {}), ...(options?.signal ? { signal: options.signal } : {}) } : a;
    const signal = params.signal;
    signal?.throwIfAborted();
    // Always started detached, so the answer names the cmdId at once and
    // its output can be routed; a non-detached run then closes stdin and
    // waits, as the daemon's own non-detached form does.
    const p: Record<string, unknown> = { sandbox: this.name, cmd: params.cmd, detached: true };
    if (params.args) p.args = params.args;
    if (params.cwd !== undefined) p.cwd = params.cwd;
    if (params.env) p.env = params.env;
    if (params.sudo !== undefined) p.sudo = params.sudo;
    if (params.stdin !== undefined) p.stdin = toBuffer(params.stdin).toString("base64");
    if (params.timeoutMs !== undefined) p.timeoutMs = params.timeoutMs;
    if (params.tty) Object.assign(p, { tty: true, rows: params.tty.rows, cols: params.tty.cols });
    const info = await this.client.request<CommandInfo>("command.run", p, opt(signal));
    const cmd = new Command(this.client, info, true);
    cmd._pipeTo(params.stdout, params.stderr);
    const onAbort = () => { cmd.kill("SIGKILL").catch(() => undefined); };
    if (signal?.aborted) onAbort();
    if (params.detached) return cmd;
    signal?.addEventListener("abort", onAbort, { once: true });
    try {
      if (params.stdin === undefined && !params.tty) await cmd.closeStdin().catch(() => undefined);
      return await cmd.wait(opt(signal));
    } finally {
      signal?.removeEventListener("abort", onAbort);
    }
  }

  /**
   * Watches `path` (relative paths are under /workspace) for changes, as an
   * async iterator of {@link WatchEvent}s (`fs.watch`): created, modified,
   * deleted, renamed (with `oldPath`), and `overflow` when events were
   * dropped. With `recursive` the whole tree is watched, new directories as
   * they appear. The iteration ends when the sandbox stops or the path is
   * deleted; `break`, `return` or `signal` end the watch.
   *
   * ```ts
   * for await (const e of sandbox.watch("/workspace", { recursive: true })) console.log(e.type, e.path);
   * ```
   * @param options `onStarted` is called once the watch is in place.
   * @throws {NotFoundError} the path does not exist; LimitExceededError the sandbox has too many watches.
   */
  watch(path: string,
    options: { recursive?: boolean; signal?: AbortSignal; onStarted?: () => void } = {}): AsyncIterableIterator<WatchEvent> {
    return this.client.watchFs(this.name, path, options);
  }

  /**
   * A command of this sandbox by id (from any connection, e.g. after a restart of your program).
   * @throws {NotFoundError} no such command.
   */
  async getCommand(cmdId: string, options: CallOptions = {}): Promise<Command> {
    const info = await this.client.request<CommandInfo>("command.get", { cmdId }, opt(options.signal));
    if (info.sandbox !== this.name) throw new NotFoundError(`command ${cmdId} is not of sandbox ${this.name}`, -32000, { reason: "not_found" });
    return new Command(this.client, info, false);
  }

  /**
   * This sandbox's commands the daemon keeps (running ones and the most recent finished ones),
   * newest first, every page of `command.list`; each as `getCommand` gives it.
   * @param options `limit`: page size (1-1000).
   */
  async listCommands(options: CallOptions & { limit?: number } = {}): Promise<Command[]> {
    const out: Command[] = [];
    let cursor: string | null = null;
    do {
      const p: Record<string, unknown> = { name: this.name };
      if (options.limit !== undefined) p.limit = options.limit;
      if (cursor !== null) p.cursor = cursor;
      const page: { commands: CommandInfo[]; nextCursor: string | null } =
        await this.client.request("command.list", p, opt(options.signal));
      for (const info of page.commands) out.push(new Command(this.client, info, false));
      cursor = page.nextCursor;
    } while (cursor !== null);
    return out;
  }

  /**
   * Writes files (parents created), in order. Large contents go in 4 MiB pieces.
   * @param files `{ path, content, mode?, xattrs? }` each.
   * @param options `sudo`: written as root in the sandbox.
   */
  async writeFiles(files: WriteFileEntry[], options: FsOptions = {}): Promise<void> {
    const small: Record<string, unknown>[] = [];
    const flush = async () => {
      if (small.length) await this.client.request("fs.write", { sandbox: this.name, files: small.splice(0), ...sudo(options) }, opt(options.signal));
    };
    for (const f of files) {
      const b = toBuffer(f.content);
      const first: Record<string, unknown> = { path: f.path, content: b.subarray(0, CHUNK).toString("base64") };
      if (f.mode !== undefined) first.mode = f.mode;
      if (f.xattrs !== undefined) first.xattrs = f.xattrs; // set with the first piece, before any content
      small.push(first);
      if (b.length <= CHUNK) continue;
      await flush();
      for (let off = CHUNK; off < b.length; off += CHUNK) {
        await this.client.request("fs.write", {
          sandbox: this.name, files: [{ path: f.path, content: b.subarray(off, off + CHUNK).toString("base64"), append: true }], ...sudo(options),
        }, opt(options.signal));
      }
    }
    await flush();
  }

  /**
   * Reads a file (up to 64 MiB) as a stream.
   * @param file a path, or `{ path }`.
   * @returns a Readable of its bytes, or `null` when it does not exist.
   */
  async readFile(file: string | { path: string }, options: FsOptions = {}): Promise<Readable | null> {
    const b = await this.readFileToBuffer(file, options);
    return b === null ? null : Readable.from([b]);
  }

  /**
   * Reads a file (up to 64 MiB) into a Buffer.
   * @returns its bytes, or `null` when it does not exist.
   */
  async readFileToBuffer(file: string | { path: string }, options: FsOptions = {}): Promise<Buffer | null> {
    const path = typeof file === "string" ? file : file.path;
    try {
      const r = await this.client.request<{ content: string }>("fs.read", { sandbox: this.name, path, ...sudo(options) }, opt(options.signal));
      return Buffer.from(r.content, "base64");
    } catch (e) {
      if (e instanceof NotFoundError) return null;
      throw e;
    }
  }

  /** Makes a directory and its parents (no error when it exists). */
  async mkDir(path: string, options: FsOptions = {}): Promise<void> {
    await this.client.request("fs.mkdir", { sandbox: this.name, path, parents: true, ...sudo(options) }, opt(options.signal));
  }

  /**
   * The URL of an exposed port's host endpoint, e.g. `http://127.0.0.1:43123`.
   * @param port a port given in `ports`.
   * @throws {SandboxError} when the port is not exposed or no session runs.
   */
  domain(port: number): string {
    const p = this.ports.find((x) => x.port === port);
    if (!p) throw new SandboxError(`port ${port} is not exposed by sandbox ${this.name} (exposed: ${this.ports.map((x) => x.port).join(", ") || "none"}); add it with update({ ports })`, -32602, { reason: "not_found", field: "port" });
    if (!p.endpoint) throw new SandboxStoppedError(`port ${port} of sandbox ${this.name} has no endpoint: no session runs`, -32000, { reason: "sandbox_stopped" });
    return `http://${p.endpoint}`;
  }

  /**
   * Would the sandbox's policy allow this destination? A dry run; nothing is sent.
   * @param target a URL (`https://api.example.com/x`), or `{ url }` / `{ host, port?, protocol? }`.
   */
  async checkPolicy(target: string | { url?: string; host?: string; port?: number; protocol?: "tcp" | "udp" }, options: CallOptions = {}): Promise<PolicyDecision> {
    const t = typeof target === "string" ? { url: target } : target;
    return this.client.request<PolicyDecision>("policy.check", { sandbox: this.name, ...strip(t as Record<string, unknown>, []) }, opt(options.signal));
  }

  /**
   * This sandbox's events (denied connections, status changes, OOM kills, netd restarts), on a connection of their own.
   * @param params `kinds` to receive only those; `signal` ends the iteration.
   */
  events(params: { kinds?: EventKind[]; signal?: AbortSignal } = {}): AsyncIterableIterator<SandboxEvent> {
    const f: { sandbox: string; kinds?: EventKind[] } = { sandbox: this.name };
    if (params.kinds) f.kinds = params.kinds;
    return this.client.events(f, opt(params.signal));
  }

  /** Stops the sandbox at the end of an `await using` scope (a gone sandbox is fine). */
  async [Symbol.asyncDispose](): Promise<void> {
    try {
      await this.stop();
    } catch (e) {
      if (!(e instanceof NotFoundError || e instanceof SandboxStoppedError)) throw e;
    }
  }
}

/** A snapshot of a sandbox's filesystem and config; create from it with `source: { type: "snapshot", snapshotId }`. */
export class Snapshot {
  /** The connection. */
  readonly client: SandboxClient;
  #info: SnapshotInfo;

  /** @internal Use {@link Sandbox.snapshot}, {@link Snapshot.get}, {@link Snapshot.list}. */
  constructor(client: SandboxClient, info: SnapshotInfo) {
    this.client = client;
    this.#info = info;
  }

  /** The id (`snap-…`). */
  get snapshotId(): string { return this.#info.id; }
  /** The name of the sandbox it was taken of. */
  get sourceSandboxName(): string { return this.#info.sandbox; }
  /** When it was taken. */
  get createdAt(): Date { return new Date(this.#info.createdAt); }
  /** When the daemon deletes it, or null for never. */
  get expiresAt(): Date | null { return this.#info.expiresAt ? new Date(this.#info.expiresAt) : null; }
  /** True once expired (kept while sandboxes stand on it; no longer usable as a source). */
  get expired(): boolean { return !!this.#info.expired; }
  /** Its own labels (given to {@link Sandbox.snapshot}). */
  get tags(): Record<string, string> { return this.#info.tags ?? {}; }
  /** The Snapshot object as the daemon sent it. */
  get info(): SnapshotInfo { return this.#info; }

  /**
   * A snapshot by id.
   * @throws {NotFoundError} no such snapshot.
   */
  static async get(params: { snapshotId: string; signal?: AbortSignal } & WithClient): Promise<Snapshot> {
    const client = params.client ?? getDefaultClient();
    return new Snapshot(client, await client.request<SnapshotInfo>("snapshot.get", { id: params.snapshotId }, opt(params.signal)));
  }

  /**
   * The snapshots, or those of one sandbox, or those with given tags.
   * @param params `sandbox`: only that sandbox's (a name); `tags`: only those carrying every given tag.
   */
  static async list(params: { sandbox?: string; tags?: Record<string, string>; signal?: AbortSignal } & WithClient = {}): Promise<Snapshot[]> {
    const client = params.client ?? getDefaultClient();
    const p: Record<string, unknown> = {};
    if (params.sandbox !== undefined) p.sandbox = params.sandbox;
    if (params.tags !== undefined) p.tags = params.tags;
    const r = await client.request<{ snapshots: SnapshotInfo[] }>("snapshot.list", p, opt(params.signal));
    return r.snapshots.map((s) => new Snapshot(client, s));
  }

  /** Deletes the snapshot (sandboxes made from it keep their files). */
  async delete(options: CallOptions = {}): Promise<void> {
    await this.client.request("snapshot.delete", { id: this.snapshotId }, opt(options.signal));
  }
}

/** An entry of {@link SandboxFs.readdir} with `withFileTypes: true`, shaped like `node:fs`'s `Dirent`. */
export interface SandboxDirent {
  /** The entry's name. */
  name: string;
  /** The directory it is in. */
  parentPath: string;
  /** True for a regular file. */
  isFile(): boolean;
  /** True for a directory. */
  isDirectory(): boolean;
  /** True for a symbolic link. */
  isSymbolicLink(): boolean;
}

interface RawStat { name: string; path: string; type: SandboxStats["type"]; size: number; mode: number; uid: number; gid: number; mtime: string; xattrs?: Record<string, string> }

function toStats(s: RawStat): SandboxStats {
  return {
    name: s.name, path: s.path, type: s.type, size: s.size, mode: s.mode, uid: s.uid, gid: s.gid,
    mtime: new Date(s.mtime), xattrs: s.xattrs ?? {},
    isFile: () => s.type === "file", isDirectory: () => s.type === "directory", isSymbolicLink: () => s.type === "symlink",
  };
}

/**
 * The sandbox's files with `node:fs/promises` names: `readFile`, `writeFile`,
 * `appendFile`, `readdir`, `stat`, `lstat`, `mkdir`, `rm`, `rmdir`, `unlink`,
 * `access`. Everything runs inside the sandbox as the sandbox user (as root
 * with the option `sudo: true`); paths are absolute or relative to
 * `/workspace`. A missing path throws {@link NotFoundError}.
 */
export class SandboxFs {
  readonly #sb: Sandbox;

  /** @internal Reach it as `sandbox.fs`. */
  constructor(sb: Sandbox) {
    this.#sb = sb;
  }

  #call<T>(method: string, params: Record<string, unknown>, signal?: AbortSignal): Promise<T> {
    return this.#sb.client.request<T>(method, { sandbox: this.#sb.name, ...params }, opt(signal));
  }

  /**
   * Reads a whole file (up to 64 MiB).
   * @param path the file.
   * @param options an encoding (`"utf8"`) to get a string, else a Buffer.
   */
  readFile(path: string, options?: FsOptions): Promise<Buffer>;
  /** Reads a whole file as text. */
  readFile(path: string, options: BufferEncoding | (FsOptions & { encoding: BufferEncoding })): Promise<string>;
  async readFile(path: string, options?: BufferEncoding | (FsOptions & { encoding?: BufferEncoding })): Promise<Buffer | string> {
    const o: FsOptions & { encoding?: BufferEncoding } = typeof options === "string" ? { encoding: options } : options ?? {};
    const r = await this.#call<{ content: string }>("fs.read", { path, ...sudo(o) }, o.signal);
    const b = Buffer.from(r.content, "base64");
    return o.encoding ? b.toString(o.encoding) : b;
  }

  /**
   * Creates or truncates a file (parents created).
   * @param options `mode` of a new file (default 0o644); `xattrs`: its `user.*` extended attributes become exactly these.
   */
  async writeFile(path: string, data: string | Uint8Array, options: FsOptions & { mode?: number; xattrs?: Record<string, string> } = {}): Promise<void> {
    const e: WriteFileEntry = { path, content: data };
    if (options.mode !== undefined) e.mode = options.mode;
    if (options.xattrs !== undefined) e.xattrs = options.xattrs;
    await this.#sb.writeFiles([e], { ...opt(options.signal), ...sudo(options) });
  }

  /** Appends to an existing file. */
  async appendFile(path: string, data: string | Uint8Array, options: FsOptions = {}): Promise<void> {
    const b = toBuffer(data);
    for (let off = 0; off < b.length || off === 0; off += CHUNK) {
      await this.#call("fs.write", { files: [{ path, content: b.subarray(off, off + CHUNK).toString("base64"), append: true }], ...sudo(options) }, options.signal);
      if (b.length === 0) break;
    }
  }

  /** The names in a directory, sorted. */
  readdir(path: string, options?: FsOptions & { withFileTypes?: false }): Promise<string[]>;
  /** The entries of a directory, sorted by name. */
  readdir(path: string, options: FsOptions & { withFileTypes: true }): Promise<SandboxDirent[]>;
  async readdir(path: string, options: FsOptions & { withFileTypes?: boolean } = {}): Promise<string[] | SandboxDirent[]> {
    const r = await this.#call<{ entries: RawStat[] }>("fs.list", { path, ...sudo(options) }, options.signal);
    if (!options.withFileTypes) return r.entries.map((e) => e.name);
    return r.entries.map((e) => ({
      name: e.name, parentPath: path,
      isFile: () => e.type === "file", isDirectory: () => e.type === "directory", isSymbolicLink: () => e.type === "symlink",
    }));
  }

  /** Metadata of a path without following a final symlink. */
  async lstat(path: string, options: FsOptions = {}): Promise<SandboxStats> {
    return toStats(await this.#call<RawStat>("fs.stat", { path, ...sudo(options) }, options.signal));
  }

  /**
   * Metadata of a path. The daemon does not follow links for you: a path
   * that is a symlink is refused (use {@link lstat}) rather than described
   * as its target.
   */
  async stat(path: string, options: FsOptions = {}): Promise<SandboxStats> {
    const s = await this.lstat(path, options);
    if (s.isSymbolicLink()) throw new SandboxError(`stat ${path}: is a symbolic link, which sandbox.fs does not follow; use lstat`, -32602, { reason: "failed", field: "path" });
    return s;
  }

  /** Resolves when the path exists; throws {@link NotFoundError} otherwise. */
  async access(path: string, options: FsOptions = {}): Promise<void> {
    await this.lstat(path, options);
  }

  /**
   * Makes a directory.
   * @param options `recursive`: parents too, no error when it exists (as node's).
   */
  async mkdir(path: string, options: FsOptions & { recursive?: boolean; mode?: number } = {}): Promise<void> {
    await this.#call("fs.mkdir", { path, parents: !!options.recursive, ...sudo(options) }, options.signal);
  }

  /**
   * Removes a file or directory.
   * @param options `recursive` for a non-empty directory; `force` ignores a missing path.
   */
  async rm(path: string, options: FsOptions & { recursive?: boolean; force?: boolean } = {}): Promise<void> {
    try {
      await this.#call("fs.remove", { path, recursive: !!options.recursive, ...sudo(options) }, options.signal);
    } catch (e) {
      if (options.force && e instanceof NotFoundError) return;
      throw e;
    }
  }

  /** Removes an empty directory. */
  async rmdir(path: string, options: FsOptions = {}): Promise<void> {
    await this.#call("fs.remove", { path, recursive: false, ...sudo(options) }, options.signal);
  }

  /** Removes a file. */
  async unlink(path: string, options: FsOptions = {}): Promise<void> {
    await this.#call("fs.remove", { path, recursive: false, ...sudo(options) }, options.signal);
  }
}
