"""The asyncio API against a real sandboxd: async with, concurrency on one
connection, cancellation through request.cancel."""
import asyncio
import os

import leaks
from sandboxd import AsyncSandbox, AsyncSandboxClient, AsyncSnapshot, NotFoundError, SandboxError


def run(coro):
    return asyncio.run(asyncio.wait_for(coro, 120))


def test_async_with_runs_and_stops(world, name):
    async def main():
        async with AsyncSandboxClient(world.daemon.socket) as c:
            async with await AsyncSandbox.create(name=name, network_policy="deny-all", client=c) as sb:
                r = await sb.run_command("sh", ["-c", "echo $0", "x"])
                assert r.stdout() == "x\n"
                await sb.write_files([{"path": "f", "content": "1"}])
                assert await sb.read_file("f") == b"1"
                assert await sb.fs.readdir(".") == ["f"]
            try:
                await AsyncSandbox.get(name, client=c)
                raise AssertionError("still there after async with")
            except NotFoundError:
                pass
    run(main())
    leaks.check(world, name)


def test_concurrent_commands_on_one_connection_keep_their_output_apart(world, name):
    async def main():
        async with AsyncSandboxClient(world.daemon.socket) as c:
            sb = await AsyncSandbox.create(name=name, network_policy="deny-all", client=c)
            try:
                seen = {i: [] for i in range(4)}
                runs = [sb.run_command("sh", ["-c", "for j in 1 2 3; do echo %d-$j; sleep 0.05; done" % i],
                                       stdout=seen[i].append) for i in range(4)]
                results = await asyncio.gather(*runs)
                for i, r in enumerate(results):
                    want = "".join("%d-%d\n" % (i, j) for j in (1, 2, 3))
                    assert r.stdout() == want and "".join(seen[i]) == want
                # A detached one streams through logs() while another runs.
                cmd = await sb.run_command("sh", ["-c", "echo d1; sleep 0.2; echo d2"], detached=True)
                other = asyncio.ensure_future(sb.run_command("echo", ["o"]))
                out = b"".join([x["data"] async for x in cmd.logs()])
                assert out == b"d1\nd2\n" and (await other).stdout() == "o\n"
                assert (await cmd.wait()).exit_code == 0
            finally:
                await sb.delete()
    run(main())


def test_cancelled_create_from_a_stalled_source_leaves_nothing(world, name):
    base, log = world.stall_server()
    url = "%s/%s.tar.gz" % (base, name)

    async def main():
        async with AsyncSandboxClient(world.daemon.socket) as c:
            task = asyncio.ensure_future(AsyncSandbox.create(name=name, source={"type": "tarball", "url": url},
                                                             client=c))
            for _ in range(400):
                if "open /%s.tar.gz" % name in log():
                    break
                await asyncio.sleep(0.05)
            assert "open /%s.tar.gz" % name in log(), "the download never started"
            task.cancel()
            try:
                await task
                raise AssertionError("the create was not cancelled")
            except asyncio.CancelledError:
                pass
            # The daemon undoes it and closes the download.
            for _ in range(400):
                if "closed /%s.tar.gz" % name in log():
                    break
                await asyncio.sleep(0.05)
            assert "closed /%s.tar.gz" % name in log()
            for _ in range(200):
                try:
                    await AsyncSandbox.get(name, client=c)
                except NotFoundError:
                    break
                await asyncio.sleep(0.05)
            else:
                raise AssertionError("the cancelled sandbox is still there")
    run(main())
    leaks.check(world, name)


def test_cancelled_run_command_kills_the_command(world, name):
    async def main():
        async with AsyncSandboxClient(world.daemon.socket) as c:
            async with await AsyncSandbox.create(name=name, network_policy="deny-all", client=c) as sb:
                started = asyncio.Event()
                task = asyncio.ensure_future(sb.run_command(
                    "sh", ["-c", "echo up; sleep 1000 & sleep 1001"], stdout=lambda s: started.set()))
                await asyncio.wait_for(started.wait(), 30)
                task.cancel()
                try:
                    await task
                    raise AssertionError("not cancelled")
                except asyncio.CancelledError:
                    pass
                for _ in range(200):
                    r = await sb.run_command("sh", ["-c", "grep -l sleep /proc/[0-9]*/comm 2>/dev/null | wc -l"])
                    if r.stdout().strip() == "0":
                        break
                    await asyncio.sleep(0.05)
                assert r.stdout().strip() == "0", "sleep processes left: %s" % r.stdout()
    run(main())


def test_async_list_snapshots_and_events(world, name):
    async def main():
        async with AsyncSandboxClient(world.daemon.socket) as c:
            sb = await AsyncSandbox.create(name=name, network_policy="deny-all", persistent=True, client=c)
            try:
                names = [s.name async for s in AsyncSandbox.list(name_prefix=name, client=c)]
                assert names == [name]
                snap = await sb.snapshot()
                assert snap.id in [s.id for s in await AsyncSnapshot.list(client=c)]
                await snap.delete()
                events = await sb.events(kinds=["sandbox"])
                await sb.stop()
                async for ev in events:
                    if ev["status"] == "stopped":
                        break
                await events.aclose()
                fork = await sb.fork(name=name + "-f")
                assert fork.status == "running"
                await fork.delete()
            finally:
                await sb.delete()
    run(main())


def test_errors_are_typed_in_async_too(world, name):
    async def main():
        async with AsyncSandboxClient(world.daemon.socket) as c:
            try:
                await AsyncSandbox.get("no-such", client=c)
            except NotFoundError as e:
                assert e.reason == "not_found" and isinstance(e, SandboxError)
    run(main())


def test_tls_client_refuses_a_url_that_is_not_tcp():
    try:
        AsyncSandboxClient(url="https://x:1")
        raise AssertionError("accepted")
    except ValueError as e:
        assert "tcp://" in str(e)


def test_tls_client_speaks_tls13_with_a_client_certificate(tmp_path):
    """Against a local TLS 1.3 server that requires a client certificate
    and answers daemon.info: what the daemon's TCP listener expects."""
    import json
    import socket
    import ssl
    import subprocess
    import threading

    d = str(tmp_path)

    def openssl(*args):
        subprocess.run(["openssl", *args], check=True, capture_output=True)
    openssl("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes", "-days", "1",
            "-subj", "/CN=test-ca", "-keyout", d + "/ca.key", "-out", d + "/ca.crt")
    for who in ("server", "client"):
        openssl("req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes", "-subj",
                "/CN=localhost", "-keyout", "%s/%s.key" % (d, who), "-out", "%s/%s.csr" % (d, who))
        ext = "%s/%s.ext" % (d, who)
        with open(ext, "w") as f:
            f.write("subjectAltName=DNS:localhost,IP:127.0.0.1\n")
        openssl("x509", "-req", "-in", "%s/%s.csr" % (d, who), "-CA", d + "/ca.crt", "-CAkey", d + "/ca.key",
                "-CAcreateserial", "-days", "1", "-extfile", ext, "-out", "%s/%s.crt" % (d, who))
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_3
    ctx.load_cert_chain(d + "/server.crt", d + "/server.key")
    ctx.load_verify_locations(d + "/ca.crt")
    ctx.verify_mode = ssl.CERT_REQUIRED
    lsock = socket.socket()
    lsock.bind(("127.0.0.1", 0))
    lsock.listen(1)
    port = lsock.getsockname()[1]
    seen = {}

    def serve():
        conn, _ = lsock.accept()
        with ctx.wrap_socket(conn, server_side=True) as s:
            seen["version"] = s.version()
            seen["peer"] = s.getpeercert()["subject"]
            req = json.loads(s.makefile("rb").readline())
            s.sendall(json.dumps({"jsonrpc": "2.0", "id": req["id"], "result": {"version": "tls"}}).encode() + b"\n")
    t = threading.Thread(target=serve, daemon=True)
    t.start()

    async def main():
        async with AsyncSandboxClient(url="tcp://localhost:%d" % port, cert=d + "/client.crt",
                                      key=d + "/client.key", ca=d + "/ca.crt") as c:
            return await c.daemon_info()
    try:
        assert run(main()) == {"version": "tls"}
    finally:
        lsock.close()
    t.join(5)
    assert seen["version"] == "TLSv1.3" and seen["peer"]


def test_polled_logs_keep_the_output_made_between_two_calls_of_a_poll(world, name):
    """A command followed through command.logs (found with get_command, or
    after a daemon restart) loses none of its output: here it writes its
    last line and exits right after the daemon answered a command.logs, in
    the middle of the poll, before the poll asks whether it has exited."""
    async def main():
        async with AsyncSandboxClient(world.daemon.socket) as c:
            async with await AsyncSandbox.create(name=name, network_policy="deny-all", client=c) as sb:
                cmd = await sb.run_command("sh", ["-c", "read x; echo after; exit 3"], detached=True)
                found = await sb.get_command(cmd.cmd_id)
                real = c.call
                fired = []

                async def call(method, params=None, **kw):
                    r = await real(method, params, **kw)
                    if method == "command.logs" and not fired:
                        fired.append(True)
                        await real("command.write", {"cmdId": cmd.cmd_id, "data": "Z28K"})  # "go\n"
                        await real("command.wait", {"cmdId": cmd.cmd_id})
                    return r
                c.call = call
                try:
                    out = b"".join([x["data"] async for x in found.logs()])
                finally:
                    del c.call
                assert fired and out == b"after\n"
                assert (await found.wait()).exit_code == 3
    run(main())


def test_async_watch_ends_when_the_sandbox_stops(world, name):
    async def main():
        async with AsyncSandboxClient(world.daemon.socket) as c:
            sb = await AsyncSandbox.create(name=name, network_policy="deny-all", persistent=True, client=c)
            try:
                stream = await sb.watch("/workspace")
                await sb.run_command("touch", ["/workspace/x"])
                seen = []
                async for ev in stream:
                    seen.append(ev)
                    if ev["path"] == "/workspace/x":
                        await sb.stop()
                assert seen[0]["type"] == "created", seen
            finally:
                await sb.delete()


def test_concurrent_get_or_create_waits_for_the_other_callers_on_create(world, name):
    """Two callers on two connections: the one that creates runs its
    coroutine on_create; the other gets the sandbox only once it is done,
    and a cancelled waiter leaves the setup alone."""
    async def main():
        async with AsyncSandboxClient(world.daemon.socket) as a, AsyncSandboxClient(world.daemon.socket) as b:
            order = []

            async def waiters():
                return (await a.call("sandbox.get", {"name": name}))["setup"]["waiters"]

            async def setup(sb):
                await sb.write_files([{"path": "setup.txt", "content": "done"}])
                other = asyncio.ensure_future(AsyncSandbox.get_or_create(
                    name, on_create=lambda s: order.append("b-setup"), network_policy="deny-all", client=b))
                setup.other = other
                for _ in range(600):
                    if await waiters() == 1:
                        break
                    await asyncio.sleep(0.05)
                assert await waiters() == 1, "the second caller never waited"
                # A third caller that gives up (its task cancelled) leaves
                # the waiting one and the setup as they are.
                third = asyncio.ensure_future(AsyncSandbox.get_or_create(name, network_policy="deny-all", client=a))
                for _ in range(600):
                    if await waiters() == 2:
                        break
                    await asyncio.sleep(0.05)
                third.cancel()
                try:
                    await third
                    raise AssertionError("the third caller was not cancelled")
                except asyncio.CancelledError:
                    pass
                assert await waiters() == 1 and not other.done()
                order.append("a-setup-done")
            try:
                first = await AsyncSandbox.get_or_create(name, on_create=setup, network_policy="deny-all", client=a)
                second = await asyncio.wait_for(setup.other, 60)
                assert order == ["a-setup-done"]
                assert first.ready and second.ready
                assert await second.read_file("setup.txt") == b"done"
            finally:
                try:
                    await (await AsyncSandbox.get(name, client=a)).delete()
                except NotFoundError:
                    pass
    run(main())


def test_async_set_timeout_snapshot_tags_and_sudo(world, name):
    async def main():
        async with AsyncSandboxClient(world.daemon.socket) as c:
            async with await AsyncSandbox.create(name=name, network_policy="deny-all", timeout=600000,
                                                 client=c) as sb:
                before = sb.expires_at
                assert (await sb.set_timeout(120000, on_timeout="pause")).on_timeout == "pause"
                assert sb.expires_at < before and sb.timeout == 600000
                snap = await sb.snapshot(tags={"suite": name})
                try:
                    got = await AsyncSnapshot.list(tags={"suite": name}, client=c)
                    assert [s.id for s in got] == [snap.id] and got[0].tags == {"suite": name}
                finally:
                    await snap.delete()
                await sb.fs.write_file("/etc/apy", "a", sudo=True, xattrs={"user.k": "v"})
                st = await sb.fs.stat("/etc/apy", sudo=True)
                assert (st["uid"], st.get("xattrs")) == (0, {"user.k": "v"})
                assert (await sb.pause()).paused is True
                assert (await sb.resume()).paused is False
    run(main())
