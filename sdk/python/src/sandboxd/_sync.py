"""The synchronous API: Sandbox, Command, Snapshot, Volume, SandboxClient. Each
SandboxClient runs the asyncio client on an event loop thread of its own;
a call blocks the caller until its answer. Ctrl-C (KeyboardInterrupt)
during a create, fork, snapshot, get_or_create or run_command cancels it on
the daemon and waits (CANCEL_WAIT_S at most) until the daemon has undone
it, then raises KeyboardInterrupt: a create interrupted so leaves no
sandbox, even when the process exits at once."""
from __future__ import annotations

import asyncio
import atexit
import concurrent.futures
import threading
from typing import Any, AsyncIterator, Callable, Coroutine, Iterable, Iterator, Literal, Mapping, TypeVar

from ._async import (AsyncCommand, AsyncSandbox, AsyncSnapshot, AsyncVolume, CommandFinished, EventStream, Output,
                     WatchStream, _Hybrid)
from ._client import CANCEL_WAIT_S, AsyncSandboxClient
from ._errors import NotFoundError
from ._types import FileEntry, LogLine, NetworkPolicy, Resources, Source, Tty, VolumeMount

T = TypeVar("T")
# The longest an interrupted call waits for its cancellation (a little over
# the client's own bound, CANCEL_WAIT_S, and the delete after it).
_INTERRUPT_WAIT_S = 2 * CANCEL_WAIT_S + 1


class SandboxClient:
    """A connection to sandboxd for the synchronous API; the same
    arguments as AsyncSandboxClient (socket_path, or url="tcp://host:port"
    with cert, key and ca for TLS; reconnect_timeout; request_timeout).
    Use ``with SandboxClient(...) as client`` or ``client.close()``."""

    def __init__(self, socket_path: str | None = None, **kw: Any) -> None:
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="sandboxd-client", daemon=True)
        self._thread.start()
        self._closed = False

        async def make() -> AsyncSandboxClient:
            return AsyncSandboxClient(socket_path, **kw)
        self.aio: AsyncSandboxClient = self._run(make())

    def _run(self, coro: Coroutine[Any, Any, T]) -> T:
        if threading.current_thread() is self._thread:
            coro.close()
            raise RuntimeError("a synchronous sandboxd call from a stdout/stderr callback would wait for itself; "
                               "collect the output and call after run_command returns")
        holder: dict[str, Any] = {}

        async def tracked() -> T:
            holder["task"] = asyncio.current_task()
            if holder.get("interrupted"):
                coro.close()
                raise asyncio.CancelledError
            return await coro
        fut = asyncio.run_coroutine_threadsafe(tracked(), self._loop)
        try:
            return fut.result()
        except KeyboardInterrupt:
            # Ctrl-C: the task is cancelled on the loop, where a
            # cancellable request sends request.cancel and waits for the
            # daemon to undo it (AsyncSandboxClient.call). Only then does
            # KeyboardInterrupt go on: the process may exit right after,
            # and its loop thread with it. (Cancelling `fut` itself would
            # return at once.) A second Ctrl-C stops the wait.
            def interrupt() -> None:
                task = holder.get("task")
                if task is None:
                    holder["interrupted"] = True
                else:
                    task.cancel()
            self._loop.call_soon_threadsafe(interrupt)
            try:
                fut.result(timeout=_INTERRUPT_WAIT_S)
            except (concurrent.futures.CancelledError, concurrent.futures.TimeoutError, Exception):
                pass
            raise

    def _iter(self, agen: AsyncIterator[T]) -> Iterator[T]:
        try:
            while True:
                async def step() -> T:
                    return await agen.__anext__()
                try:
                    yield self._run(step())
                except StopAsyncIteration:
                    return
        finally:
            aclose = getattr(agen, "aclose", None)
            if aclose is not None and not self._closed:
                try:
                    self._run(aclose())
                except Exception:
                    pass

    def daemon_info(self) -> dict[str, Any]:
        """daemon.info: version, limits, capabilities."""
        return self._run(self.aio.daemon_info())

    def call(self, method: str, params: dict[str, Any] | None = None, timeout: float | None = None) -> Any:
        """One raw JSON-RPC call (docs/API.md)."""
        return self._run(self.aio.call(method, params, timeout=timeout))

    def close(self) -> None:
        if self._closed:
            return
        self._run(self.aio.close())
        self._closed = True
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=5)
        self._loop.close()

    def __enter__(self) -> "SandboxClient":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


_default_lock = threading.Lock()
_default: SandboxClient | None = None


def _client(client: SandboxClient | None) -> SandboxClient:
    global _default
    if client is not None:
        return client
    with _default_lock:
        if _default is None or _default._closed:
            _default = SandboxClient()
            atexit.register(_default.close)
        return _default


class Command:
    """A detached command (or one found with get_command)."""

    def __init__(self, a: AsyncCommand, client: SandboxClient, sandbox: "Sandbox") -> None:
        self._a = a
        self._c = client
        self.sandbox = sandbox

    @property
    def cmd_id(self) -> str:
        return self._a.cmd_id

    @property
    def exit_code(self) -> int | None:
        return self._a.exit_code

    def logs(self) -> Iterator[LogLine]:
        """Yields ``{"stream", "data": bytes}`` as output arrives, until the command exits."""
        return self._c._iter(self._a.logs())

    def wait(self) -> CommandFinished:
        """Waits for the exit (across a daemon restart too)."""
        return self._c._run(self._a.wait())

    def stdout(self) -> str:
        return self._c._run(self._a.stdout())

    def stderr(self) -> str:
        return self._c._run(self._a.stderr())

    def kill(self, signal: str | int = "SIGTERM") -> None:
        """Signals the command's process group."""
        self._c._run(self._a.kill(signal))

    def write(self, data: bytes | str) -> None:
        self._c._run(self._a.write(data))

    def close_stdin(self) -> None:
        self._c._run(self._a.close_stdin())

    def resize(self, rows: int, cols: int) -> None:
        self._c._run(self._a.resize(rows, cols))

    def refresh(self) -> dict[str, Any]:
        return self._c._run(self._a.refresh())

    def __repr__(self) -> str:
        return "Command(cmd_id=%r)" % self.cmd_id


class Snapshot:
    """A snapshot of a sandbox's files and config."""

    def __init__(self, a: AsyncSnapshot, client: SandboxClient) -> None:
        self._a = a
        self._c = client

    @property
    def id(self) -> str:
        return self._a.id

    @property
    def info(self) -> dict[str, Any]:
        return self._a.info

    @property
    def sandbox(self) -> str:
        return self._a.sandbox

    @property
    def tags(self) -> dict[str, str]:
        return self._a.tags

    @classmethod
    def get(cls, snapshot_id: str, *, client: SandboxClient | None = None) -> "Snapshot":
        c = _client(client)
        return cls(c._run(AsyncSnapshot.get(snapshot_id, client=c.aio)), c)

    @classmethod
    def list(cls, *, sandbox: str | None = None, tags: Mapping[str, str] | None = None,
             client: SandboxClient | None = None) -> list["Snapshot"]:
        """snapshot.list (of one sandbox with ``sandbox=``; with ``tags=``
        only those carrying every given tag)."""
        c = _client(client)
        return [cls(s, c) for s in c._run(AsyncSnapshot.list(sandbox=sandbox, tags=tags, client=c.aio))]

    def delete(self) -> None:
        self._c._run(self._a.delete())

    def __repr__(self) -> str:
        return "Snapshot(id=%r, sandbox=%r)" % (self.id, self.sandbox)


class Volume:
    """A volume, synchronous: a named filesystem with a size and an inode
    limit, mounted into sandboxes at create (``volumes=[{"name", "path",
    "readOnly"?}]``). The methods and fields are those of AsyncVolume,
    without await."""

    def __init__(self, a: AsyncVolume, client: SandboxClient) -> None:
        self._a = a
        self._c = client

    @property
    def info(self) -> dict[str, Any]:
        return self._a.info

    @property
    def name(self) -> str:
        return self._a.name

    @property
    def size_mib(self) -> int:
        return self._a.size_mib

    @property
    def inodes(self) -> int:
        return self._a.inodes

    @property
    def tags(self) -> dict[str, str]:
        return self._a.tags

    @property
    def created_at(self) -> str | None:
        return self._a.created_at

    @property
    def owner(self) -> str | None:
        return self._a.owner

    @property
    def usage(self) -> dict[str, int]:
        return self._a.usage

    @property
    def mounted_by(self) -> list[str]:
        return self._a.mounted_by

    @property
    def client(self) -> SandboxClient:
        return self._c

    @classmethod
    def create(cls, name: str, *, size_mib: int | None = None, size: str | None = None,
               inodes: int | None = None, tags: Mapping[str, str] | None = None,
               client: SandboxClient | None = None) -> "Volume":
        """volume.create (see AsyncVolume.create): ``size_mib``, or ``size``
        as sandboxctl takes it ("512M", "10G", "2TiB"; a bare number is MiB)."""
        c = _client(client)
        return cls(c._run(AsyncVolume.create(name, size_mib=size_mib, size=size, inodes=inodes, tags=tags,
                                             client=c.aio)), c)

    @classmethod
    def get(cls, name: str, *, client: SandboxClient | None = None) -> "Volume":
        """volume.get; NotFoundError when there is none."""
        c = _client(client)
        return cls(c._run(AsyncVolume.get(name, client=c.aio)), c)

    @classmethod
    def list(cls, *, name_prefix: str | None = None, tags: Mapping[str, str] | None = None,
             limit: int | None = None, client: SandboxClient | None = None) -> Iterator["Volume"]:
        """Every volume (filtered), page by page (``limit``: page size)."""
        c = _client(client)
        agen = AsyncVolume._list(name_prefix, tags, limit, c.aio)
        return (cls(a, c) for a in c._iter(agen))

    def refresh(self) -> "Volume":
        """Reads the volume again (usage, mounted_by)."""
        self._c._run(self._a.refresh())
        return self

    @_Hybrid
    def delete(cls, volume: "Volume | str", *, client: SandboxClient | None = None) -> None:  # type: ignore[misc]
        """``vol.delete()`` or ``Volume.delete(name)``: InUseError while
        sandboxes mount it (``e.sandboxes`` names them)."""
        if isinstance(volume, Volume):
            c = client or volume._c
            name = volume.name
        else:
            c = _client(client)
            name = volume
        c._run(AsyncVolume.delete(name, client=c.aio))

    def __repr__(self) -> str:
        return "Volume(name=%r, size_mib=%r)" % (self.name, self.size_mib)


class Filesystem:
    """File operations inside the sandbox (see AsyncFilesystem)."""

    def __init__(self, sb: "Sandbox") -> None:
        self._sb = sb

    def __getattr__(self, name: str) -> Callable[..., Any]:
        fn = getattr(self._sb._a.fs, name)
        return lambda *a, **kw: self._sb._c._run(fn(*a, **kw))


class Sandbox:
    """A sandbox, synchronous: ``with Sandbox.create(...) as sb:`` stops
    it on exit (a non-persistent sandbox is then deleted). The methods are
    those of AsyncSandbox, without await."""

    def __init__(self, a: AsyncSandbox, client: SandboxClient) -> None:
        self._a = a
        self._c = client
        self.fs = Filesystem(self)

    # fields (see AsyncSandbox)
    @property
    def info(self) -> dict[str, Any]:
        return self._a.info

    @property
    def name(self) -> str:
        return self._a.name

    @property
    def id(self) -> str:
        return self._a.id

    @property
    def status(self) -> str:
        return self._a.status

    @property
    def persistent(self) -> bool:
        return self._a.persistent

    @property
    def ready(self) -> bool:
        return self._a.ready

    @property
    def timeout(self) -> int | None:
        return self._a.timeout

    @property
    def expires_at(self) -> str | None:
        return self._a.expires_at

    @property
    def env(self) -> dict[str, str]:
        return self._a.env

    @property
    def tags(self) -> dict[str, str]:
        return self._a.tags

    @property
    def network_policy(self) -> Any:
        return self._a.network_policy

    @property
    def ports(self) -> list[int]:
        return self._a.ports

    @property
    def volumes(self) -> list[dict[str, Any]]:
        return self._a.volumes

    @property
    def paused(self) -> bool:
        return self._a.paused

    @property
    def on_timeout(self) -> str | None:
        return self._a.on_timeout

    @property
    def client(self) -> SandboxClient:
        return self._c

    @classmethod
    def create(cls, *, name: str | None = None, source: Source | Mapping[str, Any] | None = None,
               ports: list[int] | None = None, timeout: int | None = None,
               resources: Resources | Mapping[str, Any] | None = None, runtime: str | None = None,
               network_policy: NetworkPolicy | None = None, env: Mapping[str, str] | None = None,
               tags: Mapping[str, str] | None = None, persistent: bool | None = None,
               volumes: Iterable[VolumeMount | Mapping[str, Any]] | None = None,
               client: SandboxClient | None = None) -> "Sandbox":
        """sandbox.create (see AsyncSandbox.create); ``timeout`` in ms;
        ``volumes`` ``[{"name", "path", "readOnly"?}]`` mounts volumes."""
        c = _client(client)
        return cls(c._run(AsyncSandbox.create(name=name, source=source, ports=ports, timeout=timeout,
                                              resources=resources, runtime=runtime,
                                              network_policy=network_policy, env=env, tags=tags,
                                              persistent=persistent, volumes=volumes, client=c.aio)), c)

    @classmethod
    def get(cls, name: str, *, resume: bool = True, client: SandboxClient | None = None) -> "Sandbox":
        c = _client(client)
        return cls(c._run(AsyncSandbox.get(name, resume=resume, client=c.aio)), c)

    @classmethod
    def get_or_create(cls, name: str, *, on_create: Callable[["Sandbox"], Any] | None = None,
                      client: SandboxClient | None = None, **create_params: Any) -> "Sandbox":
        """sandbox.getOrCreate (see AsyncSandbox.get_or_create):
        ``on_create(sandbox)`` runs in the caller's thread when this call
        holds the setup (it created the sandbox, or takes over a setup that
        failed or whose process died); every caller with or without
        ``on_create`` gets the sandbox only once an ``on_create`` succeeded."""
        c = _client(client)
        a, _created, setup = c._run(AsyncSandbox._get_or_create(name, client=c.aio, setup=on_create is not None,
                                                                **create_params))
        sb = cls(a, c)
        if setup and on_create is not None:
            try:
                on_create(sb)
            except BaseException:
                c._run(a._set_ready(False))
                raise
            c._run(a._set_ready(True))
        return sb

    @_Hybrid
    def fork(cls, source_sandbox: "Sandbox | str", *, name: str | None = None,  # type: ignore[misc]
             client: SandboxClient | None = None, **overrides: Any) -> "Sandbox":
        """``Sandbox.fork(src, name=...)`` or ``sandbox.fork(name=...)``."""
        if isinstance(source_sandbox, Sandbox):
            c = client or source_sandbox._c
            src: Any = source_sandbox._a
        else:
            c = _client(client)
            src = source_sandbox
        return cls(c._run(AsyncSandbox.fork(src, name=name, client=c.aio, **overrides)), c)

    @classmethod
    def list(cls, *, name_prefix: str | None = None, tags: Mapping[str, str] | None = None,
             limit: int | None = None, client: SandboxClient | None = None) -> Iterator["Sandbox"]:
        """Every sandbox (filtered), page by page (``limit``: page size)."""
        c = _client(client)
        agen = AsyncSandbox._list(name_prefix, tags, limit, c.aio)
        return (cls(a, c) for a in c._iter(agen))

    def refresh(self) -> "Sandbox":
        self._c._run(self._a.refresh())
        return self

    def update(self, **params: Any) -> "Sandbox":
        """timeout, resources, network_policy, env, tags, ports."""
        self._c._run(self._a.update(**params))
        return self

    def extend_timeout(self, duration: int) -> "Sandbox":
        self._c._run(self._a.extend_timeout(duration))
        return self

    def set_timeout(self, timeout: int, *, on_timeout: Literal["stop", "pause"] | None = None) -> "Sandbox":
        """sandbox.setTimeout (see AsyncSandbox.set_timeout)."""
        self._c._run(self._a.set_timeout(timeout, on_timeout=on_timeout))
        return self

    def pause(self) -> "Sandbox":
        self._c._run(self._a.pause())
        return self

    def resume(self) -> "Sandbox":
        self._c._run(self._a.resume())
        return self

    def stop(self) -> "Sandbox":
        self._c._run(self._a.stop())
        return self

    def delete(self) -> None:
        self._c._run(self._a.delete())

    def snapshot(self, *, expiration: int | None = None, tags: Mapping[str, str] | None = None) -> Snapshot:
        return Snapshot(self._c._run(self._a.snapshot(expiration=expiration, tags=tags)), self._c)

    def __enter__(self) -> "Sandbox":
        return self

    def __exit__(self, *exc: object) -> None:
        try:
            self.stop()
        except NotFoundError:
            pass

    def run_command(self, cmd: str, args: Iterable[str] | None = None, *, cwd: str | None = None,
                    env: Mapping[str, str] | None = None, sudo: bool = False, detached: bool = False,
                    stdin: bytes | str | None = None, stdout: Output | None = None, stderr: Output | None = None,
                    timeout_ms: int | None = None, tty: Tty | Mapping[str, int] | bool | None = None) -> Any:
        """CommandFinished, or with ``detached=True`` a Command (see AsyncSandbox.run_command)."""
        r = self._c._run(self._a.run_command(cmd, args, cwd=cwd, env=env, sudo=sudo, detached=detached,
                                             stdin=stdin, stdout=stdout, stderr=stderr, timeout_ms=timeout_ms,
                                             tty=tty))
        return Command(r, self._c, self) if isinstance(r, AsyncCommand) else r

    def get_command(self, cmd_id: str) -> Command:
        return Command(self._c._run(self._a.get_command(cmd_id)), self._c, self)

    def list_commands(self, limit: int | None = None) -> list[Command]:
        """This sandbox's commands the daemon keeps, newest first (command.list, every page)."""
        return [Command(a, self._c, self) for a in self._c._run(self._a.list_commands(limit))]

    def write_files(self, files: Iterable[FileEntry | Mapping[str, Any]], *, sudo: bool = False) -> None:
        self._c._run(self._a.write_files(list(files), sudo=sudo))

    def read_file(self, path: str, *, sudo: bool = False) -> bytes | None:
        return self._c._run(self._a.read_file(path, sudo=sudo))

    def mk_dir(self, path: str, parents: bool = True, *, sudo: bool = False) -> None:
        self._c._run(self._a.mk_dir(path, parents, sudo=sudo))

    def domain(self, port: int) -> str:
        return self._a.domain(port)

    def check_policy(self, url: str) -> dict[str, Any]:
        return self._c._run(self._a.check_policy(url))

    def watch(self, path: str, recursive: bool = False) -> Iterator[dict[str, Any]]:
        """Changes of ``path`` (with ``recursive=True`` its whole tree) as
        event dicts, until the sandbox stops or the path is deleted; the
        watch is in place when this returns (see AsyncSandbox.watch).
        Closing the iterator (or leaving a ``for`` loop) cancels it."""
        stream: WatchStream = self._a.watch(path, recursive)
        self._c._run(stream.start())
        return self._c._iter(stream)

    def events(self, kinds: Iterable[str] | None = None) -> Iterator[dict[str, Any]]:
        """This sandbox's events as they happen; subscribed before this returns."""
        stream: EventStream = self._a.events(kinds)
        self._c._run(stream.start())
        return self._c._iter(stream)

    def __repr__(self) -> str:
        return "Sandbox(name=%r, status=%r)" % (self.name, self.status)
