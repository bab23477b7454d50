/**
 * `@sandboxd/sdk`: the TypeScript SDK of sandboxd.
 *
 * ```ts
 * import { Sandbox } from "@sandboxd/sdk";
 * await using sandbox = await Sandbox.create({ networkPolicy: "deny-all" });
 * ```
 * @module
 */
export { Sandbox, Snapshot, SandboxFs } from "./sandbox.js";
export type { WithClient, CallOptions, FsOptions, OnTimeout, WriteFileEntry, RunCommandParams, SandboxDirent } from "./sandbox.js";
export { Volume } from "./volume.js";
export { Command, CommandFinished, MAX_CAPTURED_OUTPUT_BYTES } from "./command.js";
export type { LogLine, SignalName } from "./command.js";
export { SandboxClient, getDefaultClient, DEFAULT_SOCKET_PATH } from "./client.js";
export type { SandboxClientOptions, RequestOptions, Notification } from "./client.js";
export {
  SandboxError, NotFoundError, AlreadyExistsError, InvalidPolicyError, LimitExceededError,
  SandboxStoppedError, SourceFailedError, UnavailableError, InvalidParamsError, DaemonUnreachableError,
  PermissionDeniedError, InUseError,
  errorFromRpc,
} from "./errors.js";
export type { RpcErrorObject } from "./errors.js";
export type * from "./types.js";
