"""The connection to sandboxd: JSON-RPC 2.0, one message per line, over its
Unix socket (or TLS over TCP). One socket per client; requests are
multiplexed on it; command notifications are routed by cmdId, events to
their subscribers. When the daemon restarts the client reconnects: requests
in flight then fail with DaemonUnreachableError, except the waits that can
be resumed (command waits and logs, event streams), which go on."""
from __future__ import annotations

import asyncio
import collections
import json
import os
import ssl
import urllib.parse
from typing import Any, Callable

from ._errors import DaemonUnreachableError, SandboxError, error_from_rpc

DEFAULT_SOCKET = "/run/sandboxd/sandboxd.sock"
# An fs.read answer may carry 64 MiB as base64, and a line a bit more.
_LINE_LIMIT = 128 * 1024 * 1024
# Methods the daemon can cancel (request.cancel); others just lose their answer.
_CANCELLABLE = frozenset({"sandbox.create", "sandbox.fork", "sandbox.snapshot", "sandbox.getOrCreate",
                          "command.run", "fs.watch"})
# How long a cancelled call waits for the daemon to undo it (the answer to
# request.cancel, then the cancelled request's own -32800) before it gives
# up and lets its caller go on.
CANCEL_WAIT_S = 10.0


class ConnectionLost(DaemonUnreachableError):
    """The connection broke while the request was in flight: it may or may
    not have run. The client reconnects on its own."""


class CommandStream:
    """Output and exit of one command, as its notifications arrive."""

    def __init__(self) -> None:
        self.cmd_id: str | None = None
        self.queue: asyncio.Queue[tuple[str, Any]] = asyncio.Queue()
        self.stdout = bytearray()
        self.stderr = bytearray()
        self.exit: dict[str, Any] | None = None
        self.on_data: Callable[[str, bytes], None] | None = None

    def feed(self, method: str, params: dict[str, Any]) -> None:
        import base64
        if method == "command.output":
            data = base64.b64decode(params.get("data", ""))
            stream = "stderr" if params.get("stream") == "stderr" else "stdout"
            (self.stderr if stream == "stderr" else self.stdout).extend(data)
            if self.on_data:
                self.on_data(stream, data)
            self.queue.put_nowait(("data", (stream, data)))
        elif method == "command.exit":
            self.exit = params
            self.queue.put_nowait(("exit", params))

    def lost(self) -> None:
        self.queue.put_nowait(("lost", None))


class WatchRoute:
    """The notifications of one fs.watch: ("started", params) once its
    watches are in place, then ("event", params) per fs.watchEvent."""

    def __init__(self) -> None:
        self.watch_id: str | None = None
        self.queue: asyncio.Queue[tuple[str, Any]] = asyncio.Queue()


class EventSubscription:
    def __init__(self, params: dict[str, Any]) -> None:
        self.params = params
        self.queue: asyncio.Queue[dict[str, Any]] = asyncio.Queue()

    def wants(self, ev: dict[str, Any]) -> bool:
        sb = self.params.get("sandbox")
        kinds = self.params.get("kinds")
        return (sb is None or ev.get("sandbox") == sb) and (not kinds or ev.get("kind") in kinds)


def _ssl_context(cert: str | None, key: str | None, ca: str | None) -> ssl.SSLContext:
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_3
    if ca:
        ctx.load_verify_locations(cafile=ca)
    else:
        ctx.load_default_certs()
    if cert:
        ctx.load_cert_chain(cert, key)
    return ctx


class AsyncSandboxClient:
    """A connection to sandboxd for the asyncio API.

    Args:
        socket_path: the daemon's Unix socket; default ``$SANDBOXD_SOCKET``,
            then ``/run/sandboxd/sandboxd.sock``.
        url: instead of a socket, ``"tcp://host:port"``: TLS 1.3 with a
            client certificate (``cert``, ``key``: PEM files) and the CA
            that signed the daemon's certificate (``ca``).
        reconnect_timeout: seconds to keep trying to reconnect after the
            connection broke (a daemon restart) before giving up.
        request_timeout: default seconds a call may take (None: no limit).

    The connection is made at the first call. Use ``async with`` or
    ``await client.close()``.
    """

    def __init__(self, socket_path: str | None = None, *, url: str | None = None, cert: str | None = None,
                 key: str | None = None, ca: str | None = None, reconnect_timeout: float = 30.0,
                 request_timeout: float | None = None) -> None:
        self.url = url
        self.socket_path = socket_path or os.environ.get("SANDBOXD_SOCKET") or DEFAULT_SOCKET
        self._tls = (cert, key, ca)
        if url is not None:
            u = urllib.parse.urlsplit(url)
            if u.scheme != "tcp" or not u.hostname or not u.port:
                raise ValueError("url: expected tcp://HOST:PORT, got %r" % url)
            self._host, self._port = u.hostname, u.port
        self.reconnect_timeout = reconnect_timeout
        self.request_timeout = request_timeout
        self._reader: asyncio.StreamReader | None = None
        self._writer: asyncio.StreamWriter | None = None
        self._read_task: asyncio.Task[None] | None = None
        self._connecting: asyncio.Task[None] | None = None
        self._write_lock = asyncio.Lock()
        self._next_id = 1
        self._pending: dict[int, asyncio.Future[Any]] = {}
        self._run_routes: dict[int, CommandStream] = {}
        self._cmd_routes: dict[str, CommandStream] = {}
        self._orphans: collections.deque[tuple[str, dict[str, Any]]] = collections.deque(maxlen=4096)
        self._subs: list[EventSubscription] = []
        self._watch_req_routes: dict[int, WatchRoute] = {}
        self._watch_routes: dict[str, WatchRoute] = {}
        self._closed = False
        self.generation = 0  # counts connections made: a change means the daemon may have restarted
        # The error line (id null) of a connection the daemon refused:
        # permission denied, too many connections.
        self._refusal: SandboxError | None = None

    # ---- connection
    async def _open(self) -> None:
        if self.url is not None:
            cert, key, ca = self._tls
            r, w = await asyncio.open_connection(self._host, self._port, ssl=_ssl_context(cert, key, ca),
                                                 server_hostname=self._host, limit=_LINE_LIMIT)
        else:
            r, w = await asyncio.open_unix_connection(self.socket_path, limit=_LINE_LIMIT)
        self._reader, self._writer = r, w
        self._refusal = None
        self.generation += 1
        self._read_task = asyncio.get_running_loop().create_task(self._read_loop(r))
        for sub in self._subs:  # event streams go on across a restart
            await self._send({"jsonrpc": "2.0", "id": self._take_id(), "method": "events.subscribe",
                              "params": sub.params}, expect_answer=False)

    def _where(self) -> str:
        return self.url if self.url is not None else self.socket_path

    async def _connect_until(self, deadline: float | None) -> None:
        loop = asyncio.get_running_loop()
        last: Exception | None = None
        while True:
            try:
                await self._open()
                return
            except (OSError, ssl.SSLError) as e:
                last = e
            if deadline is None or loop.time() >= deadline:
                raise DaemonUnreachableError("cannot reach sandboxd at %s: %s" % (self._where(), last))
            await asyncio.sleep(0.1)

    async def connect(self) -> None:
        """Connects now (otherwise the first call does); waits for a
        reconnection under way."""
        if self._closed:
            raise DaemonUnreachableError("the client is closed")
        if self._writer is not None and self._connecting is None:
            return
        if self._connecting is None:
            loop = asyncio.get_running_loop()
            deadline = None if self.generation == 0 else loop.time() + self.reconnect_timeout
            self._connecting = loop.create_task(self._connect_until(deadline))
        task = self._connecting
        try:
            await asyncio.shield(task)
        finally:
            if task.done() and self._connecting is task:
                self._connecting = None

    async def wait_connected(self) -> None:
        """After a lost connection: returns once reconnected (or raises
        DaemonUnreachableError after reconnect_timeout)."""
        await self.connect()

    async def _probe_refusal(self) -> SandboxError | None:
        """A connection that writes nothing and reads the daemon's first
        line: its refusal as a typed error, or None when it says nothing
        within 2 s (accepted) or cannot be reached."""
        try:
            r, w = await asyncio.open_unix_connection(self.socket_path, limit=_LINE_LIMIT)
        except OSError:
            return None
        try:
            msg = json.loads(await asyncio.wait_for(r.readline(), 2))
        except (OSError, ValueError, asyncio.TimeoutError):
            return None
        finally:
            w.close()
        if isinstance(msg, dict) and msg.get("id", 0) is None and isinstance(msg.get("error"), dict):
            return error_from_rpc(msg["error"])
        return None

    def _connection_lost(self, heard: bool = True) -> None:
        if self._writer is not None:
            self._writer.close()
        self._reader = self._writer = None
        pending, self._pending = self._pending, {}
        if self._refusal is None and not heard and pending and self.url is None and not self._closed:
            # Lost before a single answer: the daemon may have refused it,
            # its reason lost to our write (EPIPE, ECONNRESET). Ask again
            # without writing: a refusal is the first line of a connection.
            async def probe() -> None:
                self._refusal = await self._probe_refusal()
                self._finish_lost(pending)
            asyncio.get_running_loop().create_task(probe())
            return
        self._finish_lost(pending)

    def _finish_lost(self, pending: dict[int, asyncio.Future[Any]]) -> None:
        refusal = self._refusal
        for fut in pending.values():
            if not fut.done():
                fut.set_exception(refusal if refusal is not None else
                                  ConnectionLost("connection to sandboxd at %s lost" % self._where()))
        self._run_routes.clear()
        self._watch_req_routes.clear()
        self._watch_routes.clear()
        if refusal is not None:
            # Refused: the calls made on it have the daemon's reason; the
            # next call connects again; nothing retries in the background.
            return
        streams, self._cmd_routes = self._cmd_routes, {}
        for s in set(streams.values()):
            s.lost()
        if not self._closed:
            loop = asyncio.get_running_loop()
            self._connecting = loop.create_task(self._connect_until(loop.time() + self.reconnect_timeout))
            self._connecting.add_done_callback(lambda t: t.exception() if not t.cancelled() else None)

    async def _read_loop(self, reader: asyncio.StreamReader) -> None:
        heard = False
        try:
            while True:
                line = await reader.readline()
                if not line:
                    break
                if not line.strip():
                    continue
                heard = True
                try:
                    msg = json.loads(line)
                except ValueError:
                    continue
                if isinstance(msg, dict) and msg.get("id", 0) is None and isinstance(msg.get("error"), dict):
                    # The daemon refuses the connection and closes it.
                    self._refusal = error_from_rpc(msg["error"])
                    continue
                if isinstance(msg, dict):
                    self._dispatch(msg)
        except (OSError, ValueError, asyncio.IncompleteReadError, asyncio.LimitOverrunError):
            pass
        except asyncio.CancelledError:
            return
        if reader is self._reader:
            self._connection_lost(heard)

    def _dispatch(self, msg: dict[str, Any]) -> None:
        if "id" in msg and ("result" in msg or "error" in msg):
            fut = self._pending.pop(msg["id"], None) if isinstance(msg["id"], int) else None
            self._run_routes.pop(msg["id"], None) if isinstance(msg["id"], int) else None
            route = self._watch_req_routes.pop(msg["id"], None) if isinstance(msg["id"], int) else None
            if route is not None and route.watch_id is not None:
                self._watch_routes.pop(route.watch_id, None)
            if fut is None or fut.done():
                return
            if "error" in msg:
                fut.set_exception(error_from_rpc(msg["error"] if isinstance(msg["error"], dict) else {}))
            else:
                fut.set_result(msg["result"])
            return
        method = msg.get("method")
        params = msg.get("params") if isinstance(msg.get("params"), dict) else {}
        if method == "command.started":
            stream = self._run_routes.get(params.get("requestId"))  # type: ignore[arg-type]
            if stream is not None and isinstance(params.get("cmdId"), str):
                stream.cmd_id = params["cmdId"]
                self._cmd_routes[params["cmdId"]] = stream
        elif method in ("command.output", "command.exit"):
            stream = self._cmd_routes.get(params.get("cmdId"))  # type: ignore[arg-type]
            if stream is None:
                self._orphans.append((method, params))
                return
            stream.feed(method, params)
            if method == "command.exit":
                self._cmd_routes.pop(params.get("cmdId"), None)  # type: ignore[arg-type]
        elif method == "fs.watchStarted":
            route = self._watch_req_routes.get(params.get("requestId"))  # type: ignore[arg-type]
            if route is not None and isinstance(params.get("watchId"), str):
                route.watch_id = params["watchId"]
                self._watch_routes[params["watchId"]] = route
                route.queue.put_nowait(("started", params))
        elif method == "fs.watchEvent":
            route = self._watch_routes.get(params.get("watchId"))  # type: ignore[arg-type]
            if route is not None:
                route.queue.put_nowait(("event", params))
        elif method == "event":
            for sub in self._subs:
                if sub.wants(params):
                    sub.queue.put_nowait(params)

    def _take_id(self) -> int:
        rid = self._next_id
        self._next_id += 1
        return rid

    async def _send(self, msg: dict[str, Any], expect_answer: bool = True) -> None:
        w = self._writer
        if w is None:
            raise ConnectionLost("not connected to sandboxd")
        data = json.dumps(msg, separators=(",", ":")).encode() + b"\n"
        async with self._write_lock:
            try:
                w.write(data)
                await w.drain()
            except OSError as e:
                raise ConnectionLost("connection to sandboxd lost: %s" % e) from e

    async def call(self, method: str, params: dict[str, Any] | None = None, *,
                   timeout: float | None = None, stream: CommandStream | None = None,
                   watch: WatchRoute | None = None) -> Any:
        """Sends one request and returns its result; raises the typed
        SandboxError of an error answer. Cancelling the awaiting task sends
        request.cancel for the methods the daemon can cancel."""
        await self.connect()
        rid = self._take_id()
        fut: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._pending[rid] = fut
        if stream is not None:
            self._run_routes[rid] = stream
        if watch is not None:
            self._watch_req_routes[rid] = watch
        msg: dict[str, Any] = {"jsonrpc": "2.0", "id": rid, "method": method}
        if params is not None:
            msg["params"] = params
        try:
            try:
                await self._send(msg)
            except ConnectionLost:
                # The read loop answers it (a refusal's reason) unless it
                # has already given up on this connection.
                if rid not in self._pending and not fut.done():
                    raise
            t = timeout if timeout is not None else self.request_timeout
            return await (asyncio.wait_for(asyncio.shield(fut), t) if t else asyncio.shield(fut))
        except (asyncio.CancelledError, asyncio.TimeoutError):
            answered = fut.done() and not fut.cancelled() and fut.exception() is None
            if method in _CANCELLABLE and ((rid in self._pending and self._writer is not None) or answered):
                # The cancellation is only over when the daemon has undone
                # the request: a caller that exits right after (Ctrl-C)
                # must leave nothing behind.
                task = asyncio.get_running_loop().create_task(self._cancel_and_wait(rid, fut, method))
                try:
                    await asyncio.shield(task)
                except (asyncio.CancelledError, Exception):
                    pass  # cancelled again: stop waiting (the task goes on while the loop runs); the
                    # cancellation, not what became of it, is the caller's answer
            raise
        finally:
            if not fut.done():
                fut.cancel()
            if fut.cancelled():
                self._pending.pop(rid, None)
                self._run_routes.pop(rid, None)
            if watch is not None and rid not in self._pending:
                self._watch_req_routes.pop(rid, None)
                if watch.watch_id is not None:
                    self._watch_routes.pop(watch.watch_id, None)

    async def _cancel_and_wait(self, rid: int, fut: asyncio.Future[Any], method: str) -> None:
        """request.cancel of request ``rid``, then its own answer, within
        CANCEL_WAIT_S. When the cancel came too late and the request
        succeeded, what it made for the caller who gave up is undone: a
        created or forked sandbox is deleted, a getOrCreate setup claim is
        released."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + CANCEL_WAIT_S
        try:
            if not fut.done():
                await self.call("request.cancel", {"id": rid}, timeout=CANCEL_WAIT_S)
            result = await asyncio.wait_for(asyncio.shield(fut), max(0.0, deadline - loop.time()))
        except (SandboxError, asyncio.TimeoutError, asyncio.CancelledError):
            return  # cancelled (-32800), failed, or no answer in time
        try:
            left = max(0.1, deadline - loop.time())
            if method in ("sandbox.create", "sandbox.fork") and isinstance(result, dict) and result.get("name"):
                await self.call("sandbox.delete", {"name": result["name"]}, timeout=left)
            elif method == "sandbox.getOrCreate" and isinstance(result, dict) and result.get("setup"):
                name = (result.get("sandbox") or {}).get("name")
                await self.call("sandbox.setReady", {"name": name, "ready": False}, timeout=left)
        except (SandboxError, asyncio.TimeoutError):
            pass

    def attach(self, cmd_id: str, stream: CommandStream) -> None:
        """Routes cmd_id's notifications to stream (with any that came first)."""
        stream.cmd_id = cmd_id
        self._cmd_routes[cmd_id] = stream
        early = [(m, p) for m, p in self._orphans if p.get("cmdId") == cmd_id]
        for m, p in early:
            stream.feed(m, p)
        if early:
            self._orphans = collections.deque(((m, p) for m, p in self._orphans if p.get("cmdId") != cmd_id),
                                              maxlen=self._orphans.maxlen)

    def detach(self, cmd_id: str) -> None:
        self._cmd_routes.pop(cmd_id, None)

    async def subscribe(self, sandbox: str | None = None, kinds: list[str] | None = None) -> EventSubscription:
        params: dict[str, Any] = {}
        if sandbox is not None:
            params["sandbox"] = sandbox
        if kinds:
            params["kinds"] = list(kinds)
        sub = EventSubscription(params)
        await self.call("events.subscribe", params)
        self._subs.append(sub)
        return sub

    def unsubscribe(self, sub: EventSubscription) -> None:
        if sub in self._subs:
            self._subs.remove(sub)

    async def daemon_info(self) -> dict[str, Any]:
        """daemon.info: version, limits, capabilities."""
        return await self.call("daemon.info")  # type: ignore[no-any-return]

    async def close(self) -> None:
        """Closes the connection; pending calls fail."""
        self._closed = True
        if self._connecting is not None:
            self._connecting.cancel()
            self._connecting = None
        if self._read_task is not None:
            self._read_task.cancel()
        w, self._writer, self._reader = self._writer, None, None
        for fut in self._pending.values():
            if not fut.done():
                fut.set_exception(DaemonUnreachableError("the client was closed"))
        self._pending.clear()
        if w is not None:
            w.close()
            try:
                await w.wait_closed()
            except OSError:
                pass

    async def __aenter__(self) -> "AsyncSandboxClient":
        await self.connect()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()


_default: dict[int, tuple[asyncio.AbstractEventLoop, AsyncSandboxClient]] = {}


def default_client() -> AsyncSandboxClient:
    """The client shared by calls without ``client=``, one per event loop."""
    loop = asyncio.get_running_loop()
    for k in [k for k, (lp, c) in _default.items() if lp.is_closed() or c._closed]:
        del _default[k]
    entry = _default.get(id(loop))
    if entry is None or entry[0] is not loop:
        entry = _default[id(loop)] = (loop, AsyncSandboxClient())
    return entry[1]
