/**
 * Typed errors of the SDK. Every error the daemon answers becomes a
 * {@link SandboxError} carrying the JSON-RPC `code`, `data.reason` and
 * `data.field`; the subclasses name the stable reasons of docs/API.md
 * ("Errors").
 * @module
 */

/** The `error` member of a JSON-RPC 2.0 response (JSON-RPC 2.0 §5.1). */
export interface RpcErrorObject {
  /** The JSON-RPC error code (-32602 invalid params, -32000 application error, ...). */
  code: number;
  /** One line a person can act on. */
  message: string;
  /** `reason` (the stable reason) and `field` (the parameter at fault), when the daemon gives them. */
  data?: { reason?: string; field?: string; [key: string]: unknown } | null;
}

/** The base of every error the SDK throws for a daemon's answer or an unreachable daemon. */
export class SandboxError extends Error {
  /** The JSON-RPC error code (`-32000` for application errors, `-32602` invalid params, ...). */
  readonly code: number;
  /** `error.data.reason`: `not_found`, `already_exists`, `invalid_policy`, ... or `undefined`. */
  readonly reason: string | undefined;
  /** `error.data.field`: the parameter at fault (`source.url`, `files[2].path`) or `undefined`. */
  readonly field: string | undefined;
  /** The whole `error.data` object as the daemon sent it. */
  readonly data: Record<string, unknown> | undefined;
  /** The JSON-RPC method that failed, when known. */
  readonly method: string | undefined;

  /**
   * @param message the daemon's message (prefixed with the method by {@link errorFromRpc}).
   * @param code the JSON-RPC code.
   * @param data the error's `data` object.
   * @param method the method that failed.
   */
  constructor(message: string, code: number, data?: Record<string, unknown> | null, method?: string) {
    super(message);
    this.name = new.target.name;
    this.code = code;
    this.data = data ?? undefined;
    this.reason = typeof data?.reason === "string" ? data.reason : undefined;
    this.field = typeof data?.field === "string" ? data.field : undefined;
    this.method = method;
  }
}

/** `not_found`: no such sandbox, snapshot, volume, command, runtime or file. */
export class NotFoundError extends SandboxError {}
/** `already_exists`: the name is taken. */
export class AlreadyExistsError extends SandboxError {}
/** `invalid_policy`: the network policy is refused; `field` names the part (`networkPolicy.allow[0]`). */
export class InvalidPolicyError extends SandboxError {}
/** `limit_exceeded`: a daemon limit (sandboxes, layers, subscriptions, file size) is reached. */
export class LimitExceededError extends SandboxError {}
/** `sandbox_stopped`: the sandbox has no running session and cannot be resumed for this call. */
export class SandboxStoppedError extends SandboxError {}
/** `source_failed`: the git clone or tarball download of `source` failed. */
export class SourceFailedError extends SandboxError {}
/** `unavailable`: the daemon cannot do it now (restarting, a sandbox being created or frozen): try again. */
export class UnavailableError extends SandboxError {}
/** `permission_denied`: the daemon refused the connection (not root and not in the socket's group) or the call. */
export class PermissionDeniedError extends SandboxError {}
/**
 * `in_use`: what is to be deleted is in use: a volume that sandboxes mount
 * (named in {@link InUseError.sandboxes}), a runtime a sandbox or snapshot
 * stands on.
 */
export class InUseError extends SandboxError {
  /** `error.data.sandboxes`: the sandboxes that use it (`[]` when the daemon names none). */
  get sandboxes(): string[] {
    const s = this.data?.sandboxes;
    return Array.isArray(s) ? s.filter((x): x is string => typeof x === "string") : [];
  }
}
/** JSON-RPC `-32602`: a parameter is wrong; `field` names it. */
export class InvalidParamsError extends SandboxError {}
/** The daemon's socket cannot be reached (not running, wrong path, no permission), or the connection was lost. */
export class DaemonUnreachableError extends SandboxError {
  /**
   * @param message what failed and where (the socket path or URL).
   * @param cause the underlying socket error.
   */
  constructor(message: string, cause?: unknown) {
    super(message, -32000, { reason: "daemon_unreachable" });
    if (cause !== undefined) (this as { cause?: unknown }).cause = cause;
  }
}

const BY_REASON: Record<string, new (m: string, c: number, d?: Record<string, unknown> | null, meth?: string) => SandboxError> = {
  not_found: NotFoundError,
  already_exists: AlreadyExistsError,
  invalid_policy: InvalidPolicyError,
  limit_exceeded: LimitExceededError,
  // The daemon refused the connection: over maxConnectionsPerUser / maxConnectionsRoot.
  too_many_connections: LimitExceededError,
  permission_denied: PermissionDeniedError,
  sandbox_stopped: SandboxStoppedError,
  source_failed: SourceFailedError,
  unavailable: UnavailableError,
  in_use: InUseError,
};

/**
 * Maps a JSON-RPC error object to the matching {@link SandboxError} subclass.
 * @param err the response's `error` member.
 * @param method the method that was called (named in the message).
 * @returns the typed error (never throws).
 */
export function errorFromRpc(err: RpcErrorObject, method?: string): SandboxError {
  const data = err.data && typeof err.data === "object" ? err.data : undefined;
  const reason = typeof data?.reason === "string" ? data.reason : undefined;
  const message = method ? `${method}: ${err.message}` : err.message;
  if (err.code === -32602) return new InvalidParamsError(message, err.code, data, method);
  const Cls = (reason && BY_REASON[reason]) || SandboxError;
  return new Cls(message, err.code, data, method);
}
