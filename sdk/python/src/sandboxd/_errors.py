"""Typed exceptions: one base, SandboxError, carrying the JSON-RPC error's
code, data.reason and data.field, and a subclass per reason."""
from __future__ import annotations

from typing import Any


class SandboxError(Exception):
    """An error answered by sandboxd (or met reaching it).

    Attributes:
        code: the JSON-RPC error code (-32602 invalid params, -32000 an
            application error, -32800 cancelled, ...); None when the daemon
            was not reached.
        reason: the stable ``data.reason`` (``"not_found"``, ...), or None.
        field: ``data.field``, the parameter path the error names, or None.
        data: the whole ``error.data`` object.
    """

    def __init__(self, message: str, *, code: int | None = None, reason: str | None = None,
                 field: str | None = None, data: dict[str, Any] | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.code = code
        self.reason = reason
        self.field = field
        self.data = data or {}

    def __repr__(self) -> str:
        return "%s(%r, code=%r, reason=%r, field=%r)" % (type(self).__name__, self.message, self.code,
                                                         self.reason, self.field)


class NotFoundError(SandboxError):
    """No such sandbox, snapshot, volume, command or path (reason ``not_found``)."""


class AlreadyExistsError(SandboxError):
    """The name is taken (reason ``already_exists``)."""


class InvalidPolicyError(SandboxError):
    """The networkPolicy does not validate; ``field`` names where (reason ``invalid_policy``)."""


class LimitExceededError(SandboxError):
    """A limit of the daemon was reached (reason ``limit_exceeded``)."""


class SandboxStoppedError(SandboxError):
    """The sandbox has no running session (reason ``sandbox_stopped``)."""


class SourceFailedError(SandboxError):
    """The git repository, tarball or snapshot could not be fetched (reason ``source_failed``)."""


class UnavailableError(SandboxError):
    """Not possible right now: starting, stopping, shutting down (reason ``unavailable``)."""


class PermissionDeniedError(SandboxError, PermissionError):
    """The daemon refused the connection or the call (reason ``permission_denied``):
    the caller is not root and not in the socket's group."""


class InUseError(SandboxError):
    """What is to be deleted is in use (reason ``in_use``): a volume that
    sandboxes mount, named in ``sandboxes``, or a runtime a sandbox or
    snapshot stands on."""

    @property
    def sandboxes(self) -> list[str]:
        """``data.sandboxes``: the sandboxes that use it ([] when the daemon names none)."""
        s = self.data.get("sandboxes")
        return [x for x in s if isinstance(x, str)] if isinstance(s, list) else []


class InvalidParamsError(SandboxError, ValueError):
    """A parameter is wrong (JSON-RPC -32602); ``field`` names it."""


class DaemonUnreachableError(SandboxError, ConnectionError):
    """sandboxd could not be reached, or the connection was lost and not regained."""


class CancelledByDaemonError(SandboxError):
    """The request was cancelled (-32800, reason ``cancelled``)."""


_BY_REASON: dict[str, type[SandboxError]] = {
    "not_found": NotFoundError,
    "already_exists": AlreadyExistsError,
    "invalid_policy": InvalidPolicyError,
    "limit_exceeded": LimitExceededError,
    # The daemon refused the connection: over maxConnectionsPerUser / maxConnectionsRoot.
    "too_many_connections": LimitExceededError,
    "permission_denied": PermissionDeniedError,
    "sandbox_stopped": SandboxStoppedError,
    "source_failed": SourceFailedError,
    "unavailable": UnavailableError,
    "in_use": InUseError,
    "cancelled": CancelledByDaemonError,
}


def error_from_rpc(err: dict[str, Any]) -> SandboxError:
    """The exception for a JSON-RPC error object."""
    code = err.get("code")
    data = err.get("data") if isinstance(err.get("data"), dict) else {}
    reason = data.get("reason")
    field = data.get("field")
    message = str(err.get("message", "sandboxd error"))
    if code == -32602:
        cls: type[SandboxError] = InvalidParamsError
    else:
        cls = _BY_REASON.get(reason or "", SandboxError)
    return cls(message, code=code, reason=reason, field=field, data=data)
