"""The asyncio API: AsyncSandbox, AsyncCommand, AsyncSnapshot, AsyncVolume."""
from __future__ import annotations

import asyncio
import base64
import codecs
import inspect
import re
from typing import Any, AsyncIterator, Awaitable, Callable, Iterable, Literal, Mapping, Union

from ._client import AsyncSandboxClient, CommandStream, ConnectionLost, default_client
from ._errors import InvalidParamsError, NotFoundError, SandboxError, UnavailableError
from ._types import FileEntry, LogLine, NetworkPolicy, Resources, Source, Tty, VolumeMount

Output = Union[Callable[[str], Any], Any]
"""Where a stream goes as it arrives: a callable taking str, or a file-like
object with write() (text or binary; sys.stdout works)."""

_LOG_POLL_S = 0.25


def _b64(data: bytes | str) -> str:
    return base64.b64encode(data.encode() if isinstance(data, str) else bytes(data)).decode()


def _source(src: Mapping[str, Any] | None) -> dict[str, Any] | None:
    if src is None:
        return None
    out = dict(src)
    if "snapshot_id" in out:
        out["snapshotId"] = out.pop("snapshot_id")
    return out


def _volumes(mounts: Iterable[VolumeMount | Mapping[str, Any]]) -> list[dict[str, Any]]:
    """The ``volumes`` param: each mount as a dict, ``read_only`` sent as readOnly."""
    out = []
    for m in mounts:
        d = dict(m)
        if "read_only" in d:
            d["readOnly"] = d.pop("read_only")
        out.append(d)
    return out


def _config_params(*, ports: list[int] | None = None, timeout: int | None = None,
                   resources: Resources | Mapping[str, Any] | None = None, runtime: str | None = None,
                   network_policy: NetworkPolicy | None = None, env: Mapping[str, str] | None = None,
                   tags: Mapping[str, str] | None = None, persistent: bool | None = None,
                   volumes: Iterable[VolumeMount | Mapping[str, Any]] | None = None) -> dict[str, Any]:
    p: dict[str, Any] = {}
    for key, val in (("ports", ports), ("timeout", timeout), ("resources", resources), ("runtime", runtime),
                     ("networkPolicy", network_policy), ("env", env), ("tags", tags),
                     ("persistent", persistent)):
        if val is not None:
            p[key] = dict(val) if isinstance(val, Mapping) else (list(val) if isinstance(val, list) else val)
    if volumes is not None:
        p["volumes"] = _volumes(volumes)
    return p


# The units of `sandboxctl volume create --size` (cli/parse.c
# cli_parse_size_mib), in MiB: powers of 1024; a bare number is MiB.
_UNITS_MIB = {"": 1, "M": 1, "MiB": 1, "G": 1024, "GiB": 1024, "T": 1 << 20, "TiB": 1 << 20}
_SIZE_RE = re.compile(r"([0-9]+)(M|MiB|G|GiB|T|TiB)?")


def _size_mib(size: str) -> int:
    """``size`` of volume.create in MiB, read as ``sandboxctl volume create
    --size`` reads it: digits, then nothing (MiB), M/MiB, G/GiB or T/TiB
    (powers of 1024, case-sensitive). Only the conversion is checked here
    (InvalidParamsError, field ``size``); the range is the daemon's."""
    if not isinstance(size, str):
        raise TypeError("size: a string such as \"512M\" or \"10G\", not %s; give a number of MiB as size_mib"
                        % type(size).__name__)
    m = _SIZE_RE.fullmatch(size)
    if not m:
        raise InvalidParamsError("size: %r is not a size; give a whole number with M, G or T (powers of 1024: "
                                 "\"512M\", \"10G\", \"2TiB\"), or a number of MiB as size_mib" % size[:64],
                                 code=-32602, field="size")
    return int(m.group(1)) * _UNITS_MIB[m.group(2) or ""]


def _writer(out: Output | None) -> Callable[[bytes], None] | None:
    """A sink for raw bytes that decodes UTF-8 incrementally for text sinks."""
    if out is None:
        return None
    dec = codecs.getincrementaldecoder("utf-8")("replace")
    if callable(out) and not hasattr(out, "write"):
        return lambda b: out(dec.decode(b))
    buf = getattr(out, "buffer", None)
    if buf is not None:
        def to_buffer(b: bytes) -> None:
            buf.write(b)
            buf.flush()
        return to_buffer

    def to_file(b: bytes) -> None:
        try:
            out.write(b)
        except TypeError:
            out.write(dec.decode(b))
        if hasattr(out, "flush"):
            out.flush()
    return to_file


class CommandFinished:
    """A command that has exited.

    Attributes: cmd_id, exit_code, duration_ms, timed_out (killed by its
    timeout_ms), oom_killed (killed by the OOM killer at the memory limit),
    usage (a dict ``{"cpuMs": N, "memoryPeakBytes": N}`` measured by
    sandbox-init with wait4(2): the user+system CPU time of the command's
    process and of every descendant it waited for, and the largest resident
    set of one of those processes; None when unknown).
    """

    def __init__(self, result: Mapping[str, Any], stdout: bytes = b"", stderr: bytes = b"") -> None:
        self.cmd_id: str = result.get("cmdId", "")
        self.exit_code: int = int(result.get("exitCode", -1))
        self.duration_ms: int = int(result.get("durationMs") or 0)
        self.timed_out: bool = bool(result.get("timedOut", False))
        self.oom_killed: bool = bool(result.get("oomKilled", False))
        usage = result.get("usage")
        self.usage: dict[str, int] | None = (
            {"cpuMs": int(usage.get("cpuMs", 0)), "memoryPeakBytes": int(usage.get("memoryPeakBytes", 0))}
            if isinstance(usage, Mapping) else None)
        self.stdout_bytes = bytes(stdout)
        self.stderr_bytes = bytes(stderr)
        self.raw = dict(result)

    def stdout(self) -> str:
        """The command's standard output (UTF-8, undecodable bytes replaced)."""
        return self.stdout_bytes.decode(errors="replace")

    def stderr(self) -> str:
        """The command's standard error."""
        return self.stderr_bytes.decode(errors="replace")

    def output(self, stream: Literal["stdout", "stderr", "both"] = "both") -> str:
        """stdout, stderr, or both (stdout then stderr)."""
        if stream == "stdout":
            return self.stdout()
        if stream == "stderr":
            return self.stderr()
        return (self.stdout_bytes + self.stderr_bytes).decode(errors="replace")

    def __repr__(self) -> str:
        return "CommandFinished(cmd_id=%r, exit_code=%d)" % (self.cmd_id, self.exit_code)


def _after(old: bytes, now: bytes) -> bytes:
    """The bytes of the kept log `now` that follow `old`, the output already
    had: the daemon's log is a bounded tail, so `old` is found as a prefix,
    else by its last 4 KiB; all of `now` when neither matches (a gap)."""
    if now.startswith(old):
        return now[len(old):]
    tail = old[-4096:]
    i = now.rfind(tail) if tail else -1
    return now[i + len(tail):] if i >= 0 else now


class AsyncCommand:
    """A command started detached (or found with get_command). Its output
    streams to this client while it runs; after a daemon restart it is
    followed through command.logs."""

    def __init__(self, sandbox: "AsyncSandbox", info: Mapping[str, Any], stream: CommandStream | None) -> None:
        self.sandbox = sandbox
        self.cmd_id: str = info["cmdId"]
        self.info = dict(info)
        self._stream = stream
        self._client = sandbox._client
        self._finished: CommandFinished | None = None
        self._logs_taken = False

    @property
    def exit_code(self) -> int | None:
        """The exit code once the command has exited (after wait()), else None."""
        return self._finished.exit_code if self._finished else self.info.get("exitCode")

    async def _logs_polled(self, seen: dict[str, bytes]) -> AsyncIterator[LogLine]:
        """Follows the daemon's kept logs (command.logs) until the command exits."""
        while True:
            try:
                # The exit first: once it is known, the logs read after it
                # hold all the output (the daemon records a command's
                # output before its exit). The other order loses what came
                # between the two answers.
                done = (await self._client.call("command.get", {"cmdId": self.cmd_id})).get("exitCode") is not None
                logs = await self._client.call("command.logs", {"cmdId": self.cmd_id})
            except ConnectionLost:
                # A restarted daemon has the same logs (sandbox-init keeps
                # them): what was seen stays seen.
                await self._client.wait_connected()
                continue
            for name in ("stdout", "stderr"):
                now = base64.b64decode(logs.get(name, ""))
                new = _after(seen[name], now)
                seen[name] = now
                if new:
                    yield {"stream": name, "data": new}  # type: ignore[typeddict-item]
            if done:
                return
            await asyncio.sleep(_LOG_POLL_S)

    async def logs(self) -> AsyncIterator[LogLine]:
        """Yields ``{"stream": "stdout"|"stderr", "data": bytes}`` as output
        arrives, until the command exits."""
        s = self._stream
        if s is not None and self._logs_taken:
            # A consumer before this one took the live output: all of it
            # once the command has exited.
            if s.exit is None:
                await self.wait()
            if s.stdout:
                yield {"stream": "stdout", "data": bytes(s.stdout)}
            if s.stderr:
                yield {"stream": "stderr", "data": bytes(s.stderr)}
            return
        if s is not None:
            self._logs_taken = True
        if s is not None and s.exit is None:
            while True:
                kind, val = await s.queue.get()
                if kind == "data":
                    yield {"stream": val[0], "data": val[1]}
                elif kind == "exit":
                    return
                else:  # connection lost: follow the kept logs of the new daemon from here
                    self._stream = None
                    async for item in self._logs_polled({"stdout": bytes(s.stdout), "stderr": bytes(s.stderr)}):
                        yield item
                    return
        elif s is not None:
            while not s.queue.empty():
                kind, val = s.queue.get_nowait()
                if kind == "data":
                    yield {"stream": val[0], "data": val[1]}
        else:
            async for item in self._logs_polled({"stdout": b"", "stderr": b""}):
                yield item

    async def wait(self) -> CommandFinished:
        """Waits for the command to exit (across a daemon restart too)."""
        deadline = None
        while True:
            try:
                r = await self._client.call("command.wait", {"cmdId": self.cmd_id})
                break
            except ConnectionLost:
                await self._client.wait_connected()
            except UnavailableError as e:
                # The daemon is stopping (data.completed false: the wait
                # ended, or was not started); the command goes on, and the
                # next daemon answers the wait.
                if e.data.get("completed") is not False:
                    raise
                loop = asyncio.get_running_loop()
                deadline = deadline or loop.time() + self._client.reconnect_timeout
                if loop.time() > deadline:
                    raise
                await asyncio.sleep(0.1)
        s = self._stream
        out, err = (bytes(s.stdout), bytes(s.stderr)) if s is not None else await self._kept_logs()
        self._finished = CommandFinished(r, out, err)
        self.info["exitCode"] = self._finished.exit_code
        return self._finished

    async def _kept_logs(self) -> tuple[bytes, bytes]:
        logs = await self._client.call("command.logs", {"cmdId": self.cmd_id})
        return base64.b64decode(logs.get("stdout", "")), base64.b64decode(logs.get("stderr", ""))

    async def stdout(self) -> str:
        """All of stdout (waits for the exit)."""
        return (self._finished or await self.wait()).stdout()

    async def stderr(self) -> str:
        """All of stderr (waits for the exit)."""
        return (self._finished or await self.wait()).stderr()

    async def kill(self, signal: str | int = "SIGTERM") -> None:
        """Sends a signal (name like "SIGTERM"/"TERM" or number) to the command's process group."""
        sig = signal[3:] if isinstance(signal, str) and signal.upper().startswith("SIG") else signal
        await self._client.call("command.kill", {"cmdId": self.cmd_id, "signal": sig})

    async def write(self, data: bytes | str) -> None:
        """Writes to the command's stdin."""
        await self._client.call("command.write", {"cmdId": self.cmd_id, "data": _b64(data)})

    async def close_stdin(self) -> None:
        """Closes the command's stdin (it reads end of file)."""
        await self._client.call("command.closeStdin", {"cmdId": self.cmd_id})

    async def resize(self, rows: int, cols: int) -> None:
        """Resizes the command's pty (tty commands)."""
        await self._client.call("command.resize", {"cmdId": self.cmd_id, "rows": rows, "cols": cols})

    async def refresh(self) -> dict[str, Any]:
        """command.get: the Command as the daemon has it now."""
        self.info = await self._client.call("command.get", {"cmdId": self.cmd_id})
        return self.info

    def __repr__(self) -> str:
        return "AsyncCommand(cmd_id=%r, sandbox=%r)" % (self.cmd_id, self.sandbox.name)


class _Hybrid:
    """A method callable on the class (first argument given) or on an
    instance (the instance is the first argument): Sandbox.fork(src) and
    sandbox.fork()."""

    def __init__(self, fn: Callable[..., Any]) -> None:
        self.fn = fn
        self.__doc__ = fn.__doc__

    def __get__(self, obj: Any, cls: type) -> Callable[..., Any]:
        if obj is None:
            return lambda *a, **kw: self.fn(cls, *a, **kw)
        return lambda *a, **kw: self.fn(cls, obj, *a, **kw)


class AsyncSnapshot:
    """A snapshot: an immutable copy of a sandbox's files and config."""

    def __init__(self, info: Mapping[str, Any], client: AsyncSandboxClient) -> None:
        self.info = dict(info)
        self.id: str = info["id"]
        self._client = client

    @property
    def sandbox(self) -> str:
        return self.info.get("sandbox", "")

    @property
    def expires_at(self) -> str | None:
        return self.info.get("expiresAt")

    @property
    def tags(self) -> dict[str, str]:
        """The snapshot's own labels (given to ``sb.snapshot(tags=...)``)."""
        return dict(self.info.get("tags") or {})

    @classmethod
    async def get(cls, snapshot_id: str, *, client: AsyncSandboxClient | None = None) -> "AsyncSnapshot":
        """snapshot.get; NotFoundError when there is none."""
        c = client or default_client()
        return cls(await c.call("snapshot.get", {"id": snapshot_id}), c)

    @classmethod
    async def list(cls, *, sandbox: str | None = None, tags: Mapping[str, str] | None = None,
                   client: AsyncSandboxClient | None = None) -> list["AsyncSnapshot"]:
        """snapshot.list (of one sandbox with ``sandbox=``; with ``tags=``
        only those carrying every given tag)."""
        c = client or default_client()
        p: dict[str, Any] = {}
        if sandbox:
            p["sandbox"] = sandbox
        if tags:
            p["tags"] = dict(tags)
        r = await c.call("snapshot.list", p)
        return [cls(s, c) for s in r.get("snapshots", [])]

    async def delete(self) -> None:
        """snapshot.delete: sandboxes made from it keep their files."""
        await self._client.call("snapshot.delete", {"id": self.id})

    def __repr__(self) -> str:
        return "AsyncSnapshot(id=%r, sandbox=%r)" % (self.id, self.sandbox)


class AsyncVolume:
    """A volume: a named filesystem with a size and an inode limit, mounted
    into sandboxes by name at create (``volumes=[{"name", "path",
    "readOnly"?}]``). Every sandbox that mounts it sees the same files; it
    outlives them, and a sandbox's snapshot or fork does not copy it.

    Fields: name, size_mib, inodes (the filesystem's inode count; 0 with
    the daemon's Btrfs storage pool), tags, created_at (RFC 3339), owner
    (None for admin), usage (``{"usedBytes", "usedInodes"}``), mounted_by
    (the sandboxes, running or stopped, whose config mounts it), as last
    read (``refresh()``), and info (the whole Volume object)."""

    def __init__(self, info: Mapping[str, Any], client: AsyncSandboxClient) -> None:
        self.info: dict[str, Any] = dict(info)
        self._client = client

    @property
    def name(self) -> str:
        return self.info["name"]

    @property
    def size_mib(self) -> int:
        return int(self.info.get("sizeMiB", 0))

    @property
    def inodes(self) -> int:
        return int(self.info.get("inodes", 0))

    @property
    def tags(self) -> dict[str, str]:
        return dict(self.info.get("tags") or {})

    @property
    def created_at(self) -> str | None:
        return self.info.get("createdAt")

    @property
    def owner(self) -> str | None:
        return self.info.get("owner")

    @property
    def usage(self) -> dict[str, int]:
        return dict(self.info.get("usage") or {})

    @property
    def mounted_by(self) -> list[str]:
        return list(self.info.get("mountedBy") or [])

    @property
    def client(self) -> AsyncSandboxClient:
        return self._client

    @classmethod
    async def create(cls, name: str, *, size_mib: int | None = None, size: str | None = None,
                     inodes: int | None = None, tags: Mapping[str, str] | None = None,
                     client: AsyncSandboxClient | None = None) -> "AsyncVolume":
        """volume.create: a new, empty volume. Its size is ``size_mib``, or
        ``size`` as ``sandboxctl volume create --size`` takes it: "512M",
        "10G", "2T" (also MiB, GiB, TiB; powers of 1024), or a bare number
        of MiB ("512"). AlreadyExistsError when the name is taken;
        InvalidParamsError for a wrong parameter (a ``size`` that does not
        read as a size, or one given with ``size_mib``, is refused before
        the daemon is asked); LimitExceededError when the daemon cannot
        back it."""
        p: dict[str, Any] = {"name": name}
        if size is not None:
            if size_mib is not None:
                raise InvalidParamsError("size: give size_mib or size, not both", code=-32602, field="size")
            p["sizeMiB"] = _size_mib(size)
        elif size_mib is not None:
            p["sizeMiB"] = size_mib
        if inodes is not None:
            p["inodes"] = inodes
        if tags is not None:
            p["tags"] = dict(tags)
        c = client or default_client()
        return cls(await c.call("volume.create", p), c)

    @classmethod
    async def get(cls, name: str, *, client: AsyncSandboxClient | None = None) -> "AsyncVolume":
        """volume.get; NotFoundError when there is none."""
        c = client or default_client()
        return cls(await c.call("volume.get", {"name": name}), c)

    @classmethod
    def list(cls, *, name_prefix: str | None = None, tags: Mapping[str, str] | None = None,
             limit: int | None = None, client: AsyncSandboxClient | None = None) -> AsyncIterator["AsyncVolume"]:
        """Every volume (filtered), fetched page by page (``limit`` is the
        page size): ``async for v in AsyncVolume.list(): ...``."""
        return cls._list(name_prefix, tags, limit, client or default_client())

    @classmethod
    async def _list(cls, name_prefix: str | None, tags: Mapping[str, str] | None, limit: int | None,
                    c: AsyncSandboxClient) -> AsyncIterator["AsyncVolume"]:
        p: dict[str, Any] = {}
        if name_prefix is not None:
            p["namePrefix"] = name_prefix
        if tags is not None:
            p["tags"] = dict(tags)
        if limit is not None:
            p["limit"] = limit
        while True:
            page = await c.call("volume.list", p)
            for v in page.get("volumes", []):
                yield cls(v, c)
            cur = page.get("nextCursor")
            if not cur:
                return
            p["cursor"] = cur

    async def refresh(self) -> "AsyncVolume":
        """Reads the volume again (usage, mounted_by)."""
        self.info = await self._client.call("volume.get", {"name": self.name})
        return self

    @_Hybrid
    async def delete(cls, volume: "AsyncVolume | str", *,  # type: ignore[misc]
                     client: AsyncSandboxClient | None = None) -> None:
        """volume.delete, with its files: ``await vol.delete()`` or
        ``await AsyncVolume.delete(name)``. InUseError while sandboxes
        mount it (``e.sandboxes`` names them); NotFoundError when there is
        none."""
        if isinstance(volume, AsyncVolume):
            c = client or volume._client
            name = volume.name
        else:
            c = client or default_client()
            name = volume
        await c.call("volume.delete", {"name": name})

    def __repr__(self) -> str:
        return "AsyncVolume(name=%r, size_mib=%r)" % (self.name, self.size_mib)


class AsyncFilesystem:
    """File operations inside a sandbox, as the sandbox user, with the
    names of Python's os / pathlib where they fit."""

    def __init__(self, sb: "AsyncSandbox") -> None:
        self._sb = sb

    def _params(self, path: str, sudo: bool, **more: Any) -> dict[str, Any]:
        p: dict[str, Any] = {"sandbox": self._sb.name, "path": path, **more}
        if sudo:
            p["sudo"] = True
        return p

    async def read_file(self, path: str, *, sudo: bool = False) -> bytes:
        """The file's bytes; NotFoundError when it does not exist."""
        r = await self._sb._call("fs.read", self._params(path, sudo))
        return base64.b64decode(r.get("content", ""))

    async def read_text(self, path: str, encoding: str = "utf-8", *, sudo: bool = False) -> str:
        return (await self.read_file(path, sudo=sudo)).decode(encoding)

    async def write_file(self, path: str, content: bytes | str, mode: int | None = None, *,
                         xattrs: Mapping[str, str] | None = None, sudo: bool = False) -> None:
        """Creates or truncates path (parents are made) with content;
        ``xattrs``: its ``user.*`` extended attributes become exactly these."""
        e: dict[str, Any] = {"path": path, "content": content}
        if mode is not None:
            e["mode"] = mode
        if xattrs is not None:
            e["xattrs"] = dict(xattrs)
        await self._sb.write_files([e], sudo=sudo)

    async def readdir(self, path: str, *, sudo: bool = False) -> list[str]:
        """The names in a directory, sorted."""
        return [e["name"] for e in await self.list(path, sudo=sudo)]

    async def list(self, path: str, *, sudo: bool = False) -> list[dict[str, Any]]:
        """fs.list: a Stat per entry ({name, path, type, size, mode, uid, gid, mtime, xattrs?})."""
        r = await self._sb._call("fs.list", self._params(path, sudo))
        return list(r.get("entries", []))

    async def stat(self, path: str, *, sudo: bool = False) -> dict[str, Any]:
        """fs.stat: {name, path, type: file|directory|symlink|other, size, mode, uid, gid, mtime, xattrs?}."""
        return await self._sb._call("fs.stat", self._params(path, sudo))  # type: ignore[no-any-return]

    async def exists(self, path: str, *, sudo: bool = False) -> bool:
        try:
            await self.stat(path, sudo=sudo)
            return True
        except NotFoundError:
            return False

    async def mkdir(self, path: str, parents: bool = True, *, sudo: bool = False) -> None:
        await self._sb._call("fs.mkdir", self._params(path, sudo, parents=parents))

    async def rm(self, path: str, recursive: bool = False, *, sudo: bool = False) -> None:
        """Removes a file, or a directory (with recursive=True when not empty)."""
        await self._sb._call("fs.remove", self._params(path, sudo, recursive=recursive))

    remove = rm


class EventStream:
    """Events from the daemon (events.subscribe), an async iterator of
    event dicts ({time, kind, sandbox, ...}); kept across a daemon restart."""

    def __init__(self, client: AsyncSandboxClient, sandbox: str | None, kinds: list[str] | None) -> None:
        self._client = client
        self._args = (sandbox, kinds)
        self._sub: Any = None

    async def start(self) -> "EventStream":
        if self._sub is None:
            self._sub = await self._client.subscribe(*self._args)
        return self

    def __await__(self) -> Any:
        return self.start().__await__()

    def __aiter__(self) -> "EventStream":
        return self

    async def __anext__(self) -> dict[str, Any]:
        await self.start()
        return await self._sub.queue.get()  # type: ignore[no-any-return]

    async def aclose(self) -> None:
        if self._sub is not None:
            self._client.unsubscribe(self._sub)


class WatchStream:
    """File changes in a sandbox (fs.watch), an async iterator of event
    dicts ``{"watchId", "type", "path", "isDir", "oldPath"?, "reason"?,
    "dropped"?, "pathBytes"?, "oldPathBytes"?}``: type is "created",
    "modified", "deleted", "renamed" (with oldPath) or "overflow" (events
    were dropped). Paths are the sandbox's own; one that is not valid
    UTF-8 reads with U+FFFD and has its exact bytes, base64, in pathBytes
    (oldPathBytes). The iteration ends when the sandbox stops or the watched
    path is deleted; ``await stream.aclose()`` (or leaving ``async for``
    with break) cancels the watch. ``await stream`` (or ``start()``) returns
    once the watch is in place, so nothing after it is missed; it raises
    NotFoundError for a missing path, LimitExceededError past the
    sandbox's number of watches. A lost connection raises
    DaemonUnreachableError (a watch does not outlive its connection)."""

    def __init__(self, client: AsyncSandboxClient, sandbox: str, path: str, recursive: bool) -> None:
        from ._client import WatchRoute
        self._client = client
        self._params = {"sandbox": sandbox, "path": path, "recursive": recursive}
        self._route = WatchRoute()
        self._task: asyncio.Task[Any] | None = None
        self._started = False
        self._ended = False

    async def start(self) -> "WatchStream":
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(
                self._client.call("fs.watch", self._params, watch=self._route))
            self._task.add_done_callback(lambda t: self._route.queue.put_nowait(("end", t)))
        while not self._started:
            kind, value = await self._route.queue.get()
            if kind == "started":
                self._started = True
            elif kind == "end":
                self._ended = True
                value.result()  # raises the daemon's error
                self._started = True
        return self

    def __await__(self) -> Any:
        return self.start().__await__()

    def __aiter__(self) -> "WatchStream":
        return self

    async def __anext__(self) -> dict[str, Any]:
        await self.start()
        while not self._ended:
            kind, value = await self._route.queue.get()
            if kind == "event":
                return value  # type: ignore[no-any-return]
            if kind == "end":
                self._ended = True
                if not value.cancelled():
                    value.result()
        raise StopAsyncIteration

    async def aclose(self) -> None:
        """Cancels the watch (request.cancel) and waits for its end."""
        t = self._task
        if t is not None and not t.done():
            t.cancel()
            try:
                await t
            except (asyncio.CancelledError, SandboxError):
                pass
        self._ended = True


class AsyncSandbox:
    """A sandbox. Make one with ``await AsyncSandbox.create(...)``;
    ``async with`` stops it on exit (a non-persistent sandbox is then
    deleted)."""

    def __init__(self, info: Mapping[str, Any], client: AsyncSandboxClient) -> None:
        self.info: dict[str, Any] = dict(info)
        self._client = client
        self.fs = AsyncFilesystem(self)

    # ---- fields
    @property
    def name(self) -> str:
        return self.info["name"]

    @property
    def id(self) -> str:
        return self.info.get("id", "")

    @property
    def status(self) -> str:
        return self.info.get("status", "")

    @property
    def persistent(self) -> bool:
        return bool(self.info.get("persistent"))

    @property
    def ready(self) -> bool:
        """False while a get_or_create ``on_create`` has not succeeded on it."""
        return bool(self.info.get("ready", True))

    @property
    def timeout(self) -> int | None:
        return self.info.get("timeout")

    @property
    def expires_at(self) -> str | None:
        return self.info.get("expiresAt")

    @property
    def env(self) -> dict[str, str]:
        return dict(self.info.get("env") or {})

    @property
    def tags(self) -> dict[str, str]:
        return dict(self.info.get("tags") or {})

    @property
    def network_policy(self) -> Any:
        return self.info.get("networkPolicy")

    @property
    def ports(self) -> list[int]:
        return [p["port"] if isinstance(p, dict) else p for p in self.info.get("ports") or []]

    @property
    def volumes(self) -> list[dict[str, Any]]:
        """The volumes it mounts: ``[{"name", "path", "readOnly"?}]``."""
        return [dict(v) for v in self.info.get("volumes") or []]

    @property
    def paused(self) -> bool:
        """True while the running session is paused (pause(), or its timeout with on_timeout="pause")."""
        return bool((self.info.get("session") or {}).get("paused"))

    @property
    def on_timeout(self) -> str | None:
        """What the running session's expiry does: "stop" or "pause"; None when no session runs."""
        return (self.info.get("session") or {}).get("onTimeout")

    @property
    def client(self) -> AsyncSandboxClient:
        return self._client

    async def _call(self, method: str, params: dict[str, Any]) -> Any:
        return await self._client.call(method, params)

    # ---- life cycle
    @classmethod
    async def create(cls, *, name: str | None = None, source: Source | Mapping[str, Any] | None = None,
                     ports: list[int] | None = None, timeout: int | None = None,
                     resources: Resources | Mapping[str, Any] | None = None, runtime: str | None = None,
                     network_policy: NetworkPolicy | None = None, env: Mapping[str, str] | None = None,
                     tags: Mapping[str, str] | None = None, persistent: bool | None = None,
                     volumes: Iterable[VolumeMount | Mapping[str, Any]] | None = None,
                     client: AsyncSandboxClient | None = None) -> "AsyncSandbox":
        """sandbox.create: returns once the sandbox runs with its source in
        /workspace. ``timeout`` is in milliseconds. ``volumes`` mounts
        volumes (AsyncVolume): ``[{"name", "path", "readOnly"?}]``
        (``read_only`` is accepted too); NotFoundError when one does not
        exist. Cancelling the awaiting task cancels the creation on the
        daemon (nothing is left)."""
        c = client or default_client()
        p = _config_params(ports=ports, timeout=timeout, resources=resources, runtime=runtime,
                           network_policy=network_policy, env=env, tags=tags, persistent=persistent,
                           volumes=volumes)
        if name is not None:
            p["name"] = name
        if source is not None:
            p["source"] = _source(source)
        return cls(await c.call("sandbox.create", p), c)

    @classmethod
    async def get(cls, name: str, *, resume: bool = True,
                  client: AsyncSandboxClient | None = None) -> "AsyncSandbox":
        """sandbox.get; with resume (the default) a stopped persistent
        sandbox gets a session again."""
        c = client or default_client()
        return cls(await c.call("sandbox.get", {"name": name, "resume": resume}), c)

    @classmethod
    async def get_or_create(cls, name: str, *,
                            on_create: Callable[["AsyncSandbox"], Awaitable[Any] | Any] | None = None,
                            source: Source | Mapping[str, Any] | None = None, ports: list[int] | None = None,
                            timeout: int | None = None, resources: Resources | Mapping[str, Any] | None = None,
                            runtime: str | None = None, network_policy: NetworkPolicy | None = None,
                            env: Mapping[str, str] | None = None, tags: Mapping[str, str] | None = None,
                            persistent: bool | None = None,
                            volumes: Iterable[VolumeMount | Mapping[str, Any]] | None = None,
                            client: AsyncSandboxClient | None = None) -> "AsyncSandbox":
        """sandbox.getOrCreate: the sandbox ``name``, made with these
        parameters if it does not exist.

        With ``on_create(sandbox)`` (a function or coroutine function), no
        caller, in this process or another, gets the sandbox before an
        ``on_create`` succeeded on it (docs/API.md, "Setup and readiness"):
        the caller that creates it runs its ``on_create`` and then marks it
        ready; concurrent callers wait for that. When ``on_create`` raises
        (or its process dies), the sandbox stays, not ready, and the error
        goes to this caller; the next ``get_or_create`` with ``on_create``
        (a waiting one first) runs its ``on_create`` again on the sandbox
        as the failed attempt left it."""
        sb, _created, setup = await cls._get_or_create(
            name, source=source, ports=ports, timeout=timeout, resources=resources, runtime=runtime,
            network_policy=network_policy, env=env, tags=tags, persistent=persistent, volumes=volumes,
            client=client, setup=on_create is not None)
        if setup and on_create is not None:
            try:
                r = on_create(sb)
                if inspect.isawaitable(r):
                    await r
            except BaseException:
                await sb._set_ready(False)
                raise
            await sb._set_ready(True)
        return sb

    @classmethod
    async def _get_or_create(cls, name: str, *, source: Any = None, client: AsyncSandboxClient | None = None,
                             setup: bool = False, **config: Any) -> tuple["AsyncSandbox", bool, bool]:
        """(sandbox, created, setup): ``setup`` when asked for and this
        caller now holds the sandbox's setup claim (it must end it with
        _set_ready)."""
        c = client or default_client()
        p = _config_params(**config)
        p["name"] = name
        if source is not None:
            p["source"] = _source(source)
        if setup:
            p["setup"] = True
        r = await c.call("sandbox.getOrCreate", p)
        return cls(r["sandbox"], c), bool(r.get("created")), bool(r.get("setup"))

    async def _set_ready(self, ready: bool) -> None:
        """sandbox.setReady: ends this caller's setup claim; True when the
        setup succeeded. A failure to report a failed setup is left to the
        connection's close, which releases the claim too."""
        try:
            self.info = await self._call("sandbox.setReady", {"name": self.name, "ready": ready})
        except SandboxError:
            if ready:
                raise

    @_Hybrid
    async def fork(cls, source_sandbox: "AsyncSandbox | str", *, name: str | None = None,  # type: ignore[misc]
                   client: AsyncSandboxClient | None = None, **overrides: Any) -> "AsyncSandbox":
        """sandbox.fork: ``AsyncSandbox.fork(src, name=...)`` or
        ``await sandbox.fork(name=...)``; keyword overrides as for create
        (timeout, env, tags, resources, network_policy, ports,
        persistent, runtime, volumes). The fork mounts the source's
        volumes (the same volumes, not copies) unless ``volumes=`` names
        others (``[]``: none)."""
        if isinstance(source_sandbox, AsyncSandbox):
            c = client or source_sandbox._client
            src = source_sandbox.name
        else:
            c = client or default_client()
            src = source_sandbox
        p: dict[str, Any] = {"sourceSandbox": src}
        if name is not None:
            p["name"] = name
        ov = _config_params(**overrides)
        if ov:
            p["overrides"] = ov
        return cls(await c.call("sandbox.fork", p), c)

    @classmethod
    def list(cls, *, name_prefix: str | None = None, tags: Mapping[str, str] | None = None,
                   limit: int | None = None, client: AsyncSandboxClient | None = None) -> AsyncIterator["AsyncSandbox"]:
        """Every sandbox (filtered), fetched page by page (``limit`` is the
        page size): ``async for sb in AsyncSandbox.list(): ...``."""
        return cls._list(name_prefix, tags, limit, client or default_client())

    @classmethod
    async def _list(cls, name_prefix: str | None, tags: Mapping[str, str] | None, limit: int | None,
                    c: AsyncSandboxClient) -> AsyncIterator["AsyncSandbox"]:
        p: dict[str, Any] = {}
        if name_prefix is not None:
            p["namePrefix"] = name_prefix
        if tags is not None:
            p["tags"] = dict(tags)
        if limit is not None:
            p["limit"] = limit
        while True:
            page = await c.call("sandbox.list", p)
            for s in page.get("sandboxes", []):
                yield cls(s, c)
            cur = page.get("nextCursor")
            if not cur:
                return
            p["cursor"] = cur

    async def refresh(self) -> "AsyncSandbox":
        """Reads the sandbox again (sandbox.get, without resuming)."""
        self.info = await self._call("sandbox.get", {"name": self.name, "resume": False})
        return self

    async def update(self, *, timeout: int | None = None, resources: Resources | Mapping[str, Any] | None = None,
                     network_policy: NetworkPolicy | None = None, env: Mapping[str, str] | None = None,
                     tags: Mapping[str, str] | None = None, ports: list[int] | None = None) -> "AsyncSandbox":
        """sandbox.update: a policy or resources change applies to the running session at once."""
        p = _config_params(timeout=timeout, resources=resources, network_policy=network_policy, env=env,
                           tags=tags, ports=ports)
        p["name"] = self.name
        self.info = await self._call("sandbox.update", p)
        return self

    async def extend_timeout(self, duration: int) -> "AsyncSandbox":
        """Moves expiresAt later by ``duration`` milliseconds."""
        self.info = await self._call("sandbox.extendTimeout", {"name": self.name, "duration": duration})
        return self

    async def set_timeout(self, timeout: int, *, on_timeout: Literal["stop", "pause"] | None = None) -> "AsyncSandbox":
        """sandbox.setTimeout: the running session ends ``timeout`` ms from
        now, earlier or later than it would have; ``on_timeout="pause"``
        pauses it then instead (kept for the rest of the session), "stop"
        ends it. The sandbox's own ``timeout`` (of later sessions) is
        unchanged: that is update(timeout=)."""
        p: dict[str, Any] = {"name": self.name, "timeout": timeout}
        if on_timeout is not None:
            p["onTimeout"] = on_timeout
        self.info = await self._call("sandbox.setTimeout", p)
        return self

    async def pause(self) -> "AsyncSandbox":
        """sandbox.pause: freezes every process of the running session;
        commands and file calls are refused until resume()."""
        self.info = await self._call("sandbox.pause", {"name": self.name})
        return self

    async def resume(self) -> "AsyncSandbox":
        """sandbox.resume: thaws a paused session (one whose expiry passed
        gets a whole timeout from now)."""
        self.info = await self._call("sandbox.resume", {"name": self.name})
        return self

    async def stop(self) -> "AsyncSandbox":
        """Stops the session (a non-persistent sandbox is then deleted)."""
        self.info = await self._call("sandbox.stop", {"name": self.name})
        return self

    async def delete(self) -> None:
        """Deletes the sandbox and every trace of it."""
        await self._call("sandbox.delete", {"name": self.name})

    async def snapshot(self, *, expiration: int | None = None,
                       tags: Mapping[str, str] | None = None) -> AsyncSnapshot:
        """sandbox.snapshot; ``expiration`` in ms from now (None: never);
        ``tags``: the snapshot's own labels (Snapshot.list(tags=) filters by them)."""
        p: dict[str, Any] = {"name": self.name}
        if expiration is not None:
            p["expiration"] = expiration
        if tags is not None:
            p["tags"] = dict(tags)
        return AsyncSnapshot(await self._call("sandbox.snapshot", p), self._client)

    async def __aenter__(self) -> "AsyncSandbox":
        return self

    async def __aexit__(self, *exc: object) -> None:
        try:
            await self.stop()
        except NotFoundError:
            pass

    # ---- commands
    async def run_command(self, cmd: str, args: Iterable[str] | None = None, *, cwd: str | None = None,
                          env: Mapping[str, str] | None = None, sudo: bool = False, detached: bool = False,
                          stdin: bytes | str | None = None, stdout: Output | None = None,
                          stderr: Output | None = None, timeout_ms: int | None = None,
                          tty: Tty | Mapping[str, int] | bool | None = None) -> Any:
        """command.run. Without ``detached`` waits for the exit and returns
        CommandFinished; with it returns an AsyncCommand at once. ``stdout``
        and ``stderr`` receive output as it arrives (a callable taking str,
        or a file-like object). ``tty`` (True or {"rows", "cols"}) gives the
        command a pty. Cancelling the awaiting task kills the command's
        process group (request.cancel)."""
        if isinstance(args, (str, bytes)):
            raise TypeError("args: a list of strings, not one string (run_command(\"sh\", [\"-c\", %r]) runs a "
                            "shell line)" % (args,))
        p: dict[str, Any] = {"sandbox": self.name, "cmd": cmd}
        if args is not None:
            p["args"] = [str(a) for a in args]
        if cwd is not None:
            p["cwd"] = cwd
        if env is not None:
            p["env"] = dict(env)
        if sudo:
            p["sudo"] = True
        if detached:
            p["detached"] = True
        if stdin is not None:
            p["stdin"] = _b64(stdin)
        if timeout_ms is not None:
            p["timeoutMs"] = timeout_ms
        if tty:
            p["tty"] = True
            if isinstance(tty, Mapping):
                p["rows"], p["cols"] = int(tty["rows"]), int(tty["cols"])
        stream = CommandStream()
        outs = {"stdout": _writer(stdout), "stderr": _writer(stderr)}
        if outs["stdout"] or outs["stderr"]:
            def on_data(name: str, data: bytes) -> None:
                w = outs[name]
                if w:
                    w(data)
            stream.on_data = on_data
        try:
            r = await self._client.call("command.run", p, stream=stream)
        except ConnectionLost:
            if stream.cmd_id is None:
                raise
            return await self._resume_run(stream)
        except SandboxError as e:
            # The daemon stopped under the run (data.cmdId; older daemons
            # name it in the message): the command goes on.
            m = re.search(r"\(cmdId (cmd-[0-9a-f]+)\)", e.message)
            cmd_id = e.data.get("cmdId") or (m.group(1) if m else None)
            if e.reason != "unavailable" or not isinstance(cmd_id, str):
                raise
            stream.cmd_id = cmd_id
            return await self._resume_run(stream)
        if detached:
            self._client.attach(r["cmdId"], stream)
            return AsyncCommand(self, r, stream)
        return CommandFinished(r, bytes(stream.stdout), bytes(stream.stderr))

    async def _resume_run(self, stream: CommandStream) -> CommandFinished:
        """The daemon restarted under a waiting run: the command lives on
        (live restore); wait for it on the new connection."""
        cmd = AsyncCommand(self, {"cmdId": stream.cmd_id}, None)
        before_out, before_err = bytes(stream.stdout), bytes(stream.stderr)
        fin = await cmd.wait()
        # The new daemon's logs hold what came before the restart too
        # (sandbox-init keeps them): only what is past `before` is added.
        return CommandFinished(fin.raw, before_out + _after(before_out, fin.stdout_bytes),
                               before_err + _after(before_err, fin.stderr_bytes))

    async def get_command(self, cmd_id: str) -> AsyncCommand:
        """The command ``cmd_id`` (command.get); its logs() follow the daemon's kept logs."""
        info = await self._call("command.get", {"cmdId": cmd_id})
        return AsyncCommand(self, info, None)

    async def list_commands(self, limit: int | None = None) -> list[AsyncCommand]:
        """This sandbox's commands the daemon keeps (running ones and the most
        recent finished ones), newest first: every page of command.list
        (``limit``: page size, 1-1000), each as get_command gives it."""
        out: list[AsyncCommand] = []
        cursor: str | None = None
        while True:
            p: dict[str, Any] = {"name": self.name}
            if limit is not None:
                p["limit"] = limit
            if cursor is not None:
                p["cursor"] = cursor
            page = await self._call("command.list", p)
            out.extend(AsyncCommand(self, info, None) for info in page.get("commands", []))
            cursor = page.get("nextCursor")
            if cursor is None:
                return out

    # ---- files
    async def write_files(self, files: Iterable[FileEntry | Mapping[str, Any]], *, sudo: bool = False) -> None:
        """fs.write: ``[{"path", "content": bytes|str, "mode"?, "xattrs"?}]``,
        in order, parents made; ``xattrs`` {"user.NAME": value}: the file's
        ``user.*`` extended attributes become exactly these. ``sudo=True``:
        written as root in the sandbox, not the sandbox user."""
        out = []
        for f in files:
            e: dict[str, Any] = {"path": f["path"], "content": _b64(f["content"])}
            if f.get("mode") is not None:
                e["mode"] = f["mode"]
            if f.get("xattrs") is not None:
                e["xattrs"] = dict(f["xattrs"])
            out.append(e)
        p: dict[str, Any] = {"sandbox": self.name, "files": out}
        if sudo:
            p["sudo"] = True
        await self._call("fs.write", p)

    async def read_file(self, path: str, *, sudo: bool = False) -> bytes | None:
        """The file's bytes, or None when it does not exist."""
        try:
            return await self.fs.read_file(path, sudo=sudo)
        except NotFoundError:
            return None

    async def mk_dir(self, path: str, parents: bool = True, *, sudo: bool = False) -> None:
        await self.fs.mkdir(path, parents, sudo=sudo)

    # ---- network
    def domain(self, port: int) -> str:
        """The URL of exposed port ``port``'s endpoint on the host
        (``http://127.0.0.1:43123``). NotFoundError when the port is not
        exposed (``ports=`` at create or update)."""
        for p in self.info.get("ports") or []:
            if isinstance(p, dict) and p.get("port") == port and p.get("endpoint"):
                return "http://%s" % p["endpoint"]
        raise NotFoundError("port %d of sandbox '%s' is not exposed; add it with ports=[...] at create or "
                            "update" % (port, self.name), reason="not_found", field="port")

    async def check_policy(self, url: str) -> dict[str, Any]:
        """policy.check: {decision, layer, rule, host, port, message} for url under this sandbox's policy."""
        return await self._call("policy.check", {"sandbox": self.name, "url": url})  # type: ignore[no-any-return]

    def watch(self, path: str, recursive: bool = False) -> "WatchStream":
        """Watches ``path`` (relative: under /workspace) for changes, with
        ``recursive=True`` its whole tree (new directories as they appear):
        ``async for ev in sandbox.watch("/workspace", recursive=True)``,
        each ev a dict such as ``{"type": "created", "path":
        "/workspace/a.txt", "isDir": False, ...}``. See WatchStream."""
        return WatchStream(self._client, self.name, path, recursive)

    def events(self, kinds: Iterable[str] | None = None) -> "EventStream":
        """This sandbox's events (``kinds``: "denied", "sandbox",
        "netd_restarted", "oom") as they happen: ``async for ev in
        sandbox.events()``. ``stream = await sandbox.events()`` subscribes
        at once, so nothing after it is missed; ``await stream.aclose()``
        ends it."""
        return EventStream(self._client, self.name, list(kinds) if kinds else None)

    def __repr__(self) -> str:
        return "AsyncSandbox(name=%r, status=%r)" % (self.name, self.status)
