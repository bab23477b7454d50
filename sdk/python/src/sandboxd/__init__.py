"""sandboxd: the Python client of the sandboxd daemon.

    from sandboxd import Sandbox
    with Sandbox.create(network_policy="deny-all") as sb:
        print(sb.run_command("echo", ["hi"]).stdout())

Synchronous: Sandbox, Command, Snapshot, Volume, SandboxClient. asyncio:
AsyncSandbox, AsyncCommand, AsyncSnapshot, AsyncVolume, AsyncSandboxClient. Errors:
SandboxError and its subclasses. Standard library only.
"""
from ._async import (AsyncCommand, AsyncFilesystem, AsyncSandbox, AsyncSnapshot, AsyncVolume, CommandFinished,
                     EventStream, WatchStream)
from ._client import DEFAULT_SOCKET, AsyncSandboxClient
from ._errors import (AlreadyExistsError, CancelledByDaemonError, DaemonUnreachableError, InUseError,
                      InvalidParamsError, InvalidPolicyError, LimitExceededError, NotFoundError, PermissionDeniedError,
                      SandboxError, SandboxStoppedError, SourceFailedError, UnavailableError)
from ._sync import Command, Filesystem, Sandbox, SandboxClient, Snapshot, Volume
from ._types import (FileEntry, GitSource, LogLine, NetworkPolicy, NetworkPolicyRule, Resources,
                     SnapshotSource, Source, TarballSource, Tty, VolumeMount, VolumeUsage)

__version__ = "0.1.0"

__all__ = [
    "AlreadyExistsError", "AsyncCommand", "AsyncFilesystem", "AsyncSandbox", "AsyncSandboxClient",
    "AsyncSnapshot", "AsyncVolume", "CancelledByDaemonError", "Command", "CommandFinished", "DEFAULT_SOCKET",
    "DaemonUnreachableError", "EventStream", "FileEntry", "Filesystem", "GitSource", "InUseError", "InvalidParamsError",
    "InvalidPolicyError", "LimitExceededError", "LogLine", "NetworkPolicy", "NetworkPolicyRule", "NotFoundError",
    "PermissionDeniedError", "Resources", "Sandbox", "SandboxClient", "SandboxError", "SandboxStoppedError", "Snapshot", "SnapshotSource",
    "Source", "SourceFailedError", "TarballSource", "Tty", "UnavailableError", "Volume", "VolumeMount", "VolumeUsage",
    "WatchStream",
]
