/**
 * The data types of the SDK: the network policy document (docs/POLICY.md),
 * the daemon's Sandbox, Command, Snapshot, Volume, Stat and event objects
 * (docs/API.md, "Objects"), and the params of the calls.
 * @module
 */

/** A string matcher of an HTTP rule: exactly one of the three. */
export type StringMatcher = { exact: string } | { startsWith: string } | { regex: string };

/** A key/value matcher (a query parameter or a header); both parts optional. */
export interface KeyValueMatcher {
  /** Matches the name. */
  key?: StringMatcher;
  /** Matches the value. */
  value?: StringMatcher;
}

/** Which requests an HTTP rule applies to; every dimension given must match. */
export interface NetworkPolicyRuleMatch {
  /** The request path. */
  path?: StringMatcher;
  /** The methods (ORed), e.g. `["GET", "POST"]`. */
  method?: string[];
  /** Query parameters, each must match. */
  queryString?: KeyValueMatcher[];
  /** Request headers, each must match. */
  headers?: KeyValueMatcher[];
}

/** A header transform: sets or overwrites these request headers (applied by the egress proxy, never visible inside the sandbox). */
export interface NetworkPolicyTransform {
  /** Header name to value. */
  headers: Record<string, string>;
}

/** An HTTP rule of a domain pattern: exactly one of `transform` or `forwardURL`. */
export type NetworkPolicyRule =
  | { match?: NetworkPolicyRuleMatch; transform: NetworkPolicyTransform[]; forwardURL?: never }
  | { match?: NetworkPolicyRuleMatch; forwardURL: string; transform?: never };

/** A custom policy: what it does not allow is denied (docs/POLICY.md). */
export interface NetworkPolicyObject {
  /** Domain patterns (`"api.example.com"`, `"*.example.com:443"`), or patterns mapped to their HTTP rules. */
  allow?: string[] | Record<string, NetworkPolicyRule[]>;
  /** Address ranges (CIDR) allowed or denied. */
  subnets?: { allow?: string[]; deny?: string[] };
}

/** A sandbox's network egress policy: `"allow-all"`, `"deny-all"`, or a custom policy object (the daemon's `defaultNetworkPolicy` when a create gives none; allow-all unless set). */
export type NetworkPolicy = "allow-all" | "deny-all" | NetworkPolicyObject;

/** Where a sandbox's `/workspace` comes from. */
export type Source =
  | { type: "git"; url: string; depth?: number; revision?: string; username?: string; password?: string }
  | { type: "tarball"; url: string }
  | { type: "snapshot"; snapshotId: string };

/** Resources of a sandbox. */
export interface Resources {
  /** Virtual CPUs (also sets memory: vcpus × 2 GiB). */
  vcpus: number;
}

/**
 * A volume mounted into a sandbox (`volumes` of {@link CreateSandboxParams}):
 * the daemon's `{name, path, readOnly?}`.
 */
export interface VolumeMount {
  /** The volume's name (see {@link Volume.create}). */
  name: string;
  /** Where it appears inside the sandbox: an absolute path. */
  path: string;
  /** Mount it read-only: writes in the sandbox fail with EROFS (default false). */
  readOnly?: boolean;
}

/** Parameters of {@link Sandbox.create} (the daemon's `sandbox.create`). */
export interface CreateSandboxParams {
  /** `[a-z0-9][a-z0-9-]{0,62}`; `sbx-xxxxxxxx` when omitted. */
  name?: string;
  /** The source of `/workspace`: a git repository, a tarball or a snapshot. */
  source?: Source;
  /** Ports inside the sandbox to expose on the host (see {@link Sandbox.domain}). */
  ports?: number[];
  /** Session timeout in milliseconds. */
  timeout?: number;
  /** vCPUs. */
  resources?: Resources;
  /** A runtime from `runtime.list` (default `"host"`). */
  runtime?: string;
  /** The egress policy; omitted, the daemon's `defaultNetworkPolicy` applies (`"allow-all"` unless the operator set another). */
  networkPolicy?: NetworkPolicy;
  /** Environment of every command. */
  env?: Record<string, string>;
  /** Up to 5 tags, for {@link Sandbox.list}. */
  tags?: Record<string, string>;
  /** Keep the filesystem across sessions (a stop keeps the sandbox). */
  persistent?: boolean;
  /**
   * Volumes to mount, each `{ name, path, readOnly? }`. A volume is shared:
   * every sandbox that mounts it sees the same files, and it is not part of
   * the sandbox's snapshots or forks' copies.
   */
  volumes?: VolumeMount[];
  /** Aborts the creation (the daemon is asked to cancel it). */
  signal?: AbortSignal;
}

/** Parameters of {@link Sandbox.update}: what changes. */
export interface UpdateSandboxParams {
  /** New timeout (ms); an increase also moves the running session's expiry. */
  timeout?: number;
  /** New vCPUs, applied to the running session at once. */
  resources?: Resources;
  /** New policy, applied live. */
  networkPolicy?: NetworkPolicy;
  /** New environment for commands started afterwards. */
  env?: Record<string, string>;
  /** New tags. */
  tags?: Record<string, string>;
  /** The new list of exposed ports. */
  ports?: number[];
  /** Aborts the call. */
  signal?: AbortSignal;
}

/** A sandbox's status (its current session's). */
export type SandboxStatus = "pending" | "running" | "stopping" | "stopped" | "failed";

/** An exposed port and its host endpoint (`null` while no session runs). */
export interface PortInfo {
  /** The port inside the sandbox. */
  port: number;
  /** `127.0.0.1:<allocated>` on the daemon's host, or null. */
  endpoint: string | null;
}

/** The daemon's Sandbox object (docs/API.md, "Objects"). */
export interface SandboxInfo {
  /** The name. */
  name: string;
  /** A unique id (32 hex). */
  id: string;
  /** The tenant that made it ("uid:1001", "ci", "tag:team=a"); null when admin did (docs/API.md "Tenants"). */
  owner?: string | null;
  /** The current session's status. */
  status: SandboxStatus;
  /** The runtime. */
  runtime: string;
  /** The source as given, passwords redacted; null when none. */
  source: Record<string, unknown> | null;
  /** Exposed ports. */
  ports: PortInfo[];
  /** Timeout (ms). */
  timeout: number;
  /** When the running session ends (RFC 3339), null when none runs. */
  expiresAt: string | null;
  /** Resources. */
  resources: { vcpus: number; diskMiB?: number };
  /** Environment. */
  env: Record<string, string>;
  /** Tags. */
  tags: Record<string, string>;
  /** The policy (transform header values redacted). */
  networkPolicy: NetworkPolicy;
  /** Whether the sandbox outlives its sessions. */
  persistent: boolean;
  /** The volumes it mounts (absent from a daemon without volumes). */
  volumes?: VolumeMount[];
  /** Denied connections so far. */
  denials: number;
  /** False while a getOrCreate setup (`onCreate`) has not succeeded on it. */
  ready?: boolean;
  /** Its setup claim: whether a connection holds it, and how many getOrCreate callers wait. */
  setup?: { claimed: boolean; waiters: number };
  /** Creation time (RFC 3339). */
  createdAt: string;
  /** Every other field the daemon sends (`userns`, `sessions`, `session`, ...). */
  [key: string]: unknown;
}

/** The daemon's Snapshot object. */
export interface SnapshotInfo {
  /** `snap-…`. */
  id: string;
  /** The sandbox it was taken of. */
  sandbox: string;
  /** The tenant that took it; null when admin did. */
  owner?: string | null;
  /** Creation time (RFC 3339). */
  createdAt: string;
  /** Expiry time, or null for never. */
  expiresAt: string | null;
  /** True once expired but kept because sandboxes stand on it. */
  expired: boolean;
  /** Its own labels (`{}` when none). */
  tags?: Record<string, string>;
  /** Layers. */
  layers: number;
  /** The sandbox config it captured. */
  config: Record<string, unknown>;
  /** Other fields. */
  [key: string]: unknown;
}

/** What a volume holds now, as its filesystem counts it. */
export interface VolumeUsage {
  /** Bytes in use. */
  usedBytes: number;
  /** Inodes (files, directories, links) in use. */
  usedInodes: number;
}

/** The daemon's Volume object. */
export interface VolumeInfo {
  /** The name (unique on the daemon). */
  name: string;
  /** Its size limit in MiB. */
  sizeMiB: number;
  /** The filesystem's inode count (0 with the daemon's Btrfs storage pool, which has no fixed count). */
  inodes: number;
  /** Tags. */
  tags: Record<string, string>;
  /** Creation time (RFC 3339). */
  createdAt: string;
  /** The tenant that made it; null when admin did (docs/API.md "Tenants"). */
  owner?: string | null;
  /** What it holds now. */
  usage: VolumeUsage;
  /** The names of the sandboxes whose config mounts it, running or stopped. */
  mountedBy: string[];
  /** Other fields. */
  [key: string]: unknown;
}

/** Parameters of {@link Volume.create} (the daemon's `volume.create`). */
export interface CreateVolumeParams {
  /** The name, unique on the daemon (the daemon says which names it takes). */
  name: string;
  /** Its size limit in MiB; or give `size`. */
  sizeMiB?: number;
  /**
   * Its size limit instead of `sizeMiB`, as `sandboxctl volume create
   * --size` takes it: `"512M"`, `"10G"`, `"2T"` (also `MiB`, `GiB`, `TiB`;
   * powers of 1024), or a bare number of MiB (`"512"`).
   */
  size?: string;
  /** Its limit of inodes (the daemon's default when absent). */
  inodes?: number;
  /** Tags, for {@link Volume.list}. */
  tags?: Record<string, string>;
  /** Aborts the call. */
  signal?: AbortSignal;
}

/** The daemon's Command object. */
export interface CommandInfo {
  /** `cmd-…`. */
  cmdId: string;
  /** The sandbox's name. */
  sandbox: string;
  /** The program. */
  cmd: string;
  /** Its arguments. */
  args: string[];
  /** Working directory. */
  cwd: string;
  /** `sandbox` or `root` (sudo). */
  user: string;
  /** Whether it runs on a pty. */
  tty: boolean;
  /** Start time (RFC 3339). */
  startedAt: string;
  /** Exit status (128+N for signal N), null while running. */
  exitCode: number | null;
  /** Run time in ms, null while running. */
  durationMs: number | null;
  /** True when `timeoutMs` killed it. */
  timedOut?: boolean;
  /** True when the OOM killer ended it. */
  oomKilled?: boolean;
  /** The memory limit it hit, with `oomKilled`. */
  memoryLimitBytes?: number;
  /** What it used, once finished (null when unknown; see {@link CommandUsage}). */
  usage?: CommandUsage | null;
  /** Other fields. */
  [key: string]: unknown;
}

/**
 * What a finished command used, measured by sandbox-init with wait4(2) when it
 * reaped the command: `cpuMs` is the user+system CPU time of the command's
 * process and of every descendant it waited for (orphans it left running are
 * not counted); `memoryPeakBytes` is the largest resident set of one of those
 * processes (ru_maxrss), not the sum.
 */
export interface CommandUsage {
  cpuMs: number;
  memoryPeakBytes: number;
}

/** The result of `policy.check` (a dry run of the policy for one destination). */
export interface PolicyDecision {
  /** `allow` or `deny`. */
  decision: "allow" | "deny";
  /** What decided: `policy`, `never`, `forbidden-range`, `subnets.deny`, `subnets.allow`, `allow`, `default-deny`, `invalid-host`, `port`. */
  layer: string;
  /** The deciding rule as written, or null. */
  rule: string | null;
  /** The host after normalisation. */
  host: string;
  /** The port judged, or null for any port. */
  port: number | null;
  /** The transport judged. */
  protocol?: string;
  /** The deciding reason in one line. */
  detail?: string;
  /** One line naming what decided. */
  message: string;
  /** Other fields. */
  [key: string]: unknown;
}

/** Kinds of daemon events. */
export type EventKind = "denied" | "sandbox" | "netd_restarted" | "oom";

/** An event of `events.subscribe`. */
export interface SandboxEvent {
  /** RFC 3339, UTC. */
  time: string;
  /** The kind. */
  kind: EventKind | string;
  /** The sandbox's name, null for the daemon's own events. */
  sandbox: string | null;
  /** One line describing it (denied, oom, netd_restarted). */
  message?: string;
  /** `denied`: the layer (`dns`, `nftables`, `proxy`). */
  layer?: string;
  /** `denied`: the host. */
  host?: string;
  /** `sandbox`: the new status. */
  status?: string;
  /** Other fields of the kind. */
  [key: string]: unknown;
}

/** What happened to a path, in a {@link WatchEvent}. */
export type WatchEventType = "created" | "modified" | "deleted" | "renamed" | "overflow";

/**
 * One change seen by `sandbox.watch()` (`fs.watchEvent`). Paths are the
 * sandbox's own (`/workspace/a.txt`), never host paths.
 */
export interface WatchEvent {
  /** The watch (`fs.watch`) it belongs to. */
  watchId: string;
  /** `renamed` has `oldPath` too; `overflow` says events were dropped. */
  type: WatchEventType;
  /** The path (absent for an `overflow` of the kernel's queue or the client). */
  path?: string;
  /** Whether `path` is a directory. */
  isDir?: boolean;
  /** `renamed`: where it was before. */
  oldPath?: string;
  /** When `path` is not valid UTF-8 (it then reads with U+FFFD): its exact bytes, base64. */
  pathBytes?: string;
  /** When `oldPath` is not valid UTF-8: its exact bytes, base64. */
  oldPathBytes?: string;
  /** `overflow`: `kernel`, `queue`, `client`, `watches` (a directory was not watched: `path`) or `path` (a change under `path` whose own path is past 4096 bytes). */
  reason?: string;
  /** `overflow`: how many events were dropped, when known. */
  dropped?: number;
}

/** A file or directory's metadata, shaped like `node:fs`'s `Stats`. */
export interface SandboxStats {
  /** Base name. */
  name: string;
  /** Absolute path inside the sandbox. */
  path: string;
  /** `file`, `directory`, `symlink` or `other`. */
  type: "file" | "directory" | "symlink" | "other";
  /** Size in bytes. */
  size: number;
  /** Permission bits. */
  mode: number;
  /** Owner uid (inside the sandbox). */
  uid: number;
  /** Group gid. */
  gid: number;
  /** Modification time. */
  mtime: Date;
  /** Its extended attributes in the `user.` namespace with printable values (`{}` when none or unreadable). */
  xattrs: Record<string, string>;
  /** True for a regular file. */
  isFile(): boolean;
  /** True for a directory. */
  isDirectory(): boolean;
  /** True for a symbolic link. */
  isSymbolicLink(): boolean;
}
