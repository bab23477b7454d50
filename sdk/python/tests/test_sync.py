"""The synchronous API against a real sandboxd."""
import io
import time

import pytest

import leaks
from sandboxd import (AlreadyExistsError, CommandFinished, DaemonUnreachableError, InvalidParamsError,
                      InvalidPolicyError, LimitExceededError, NotFoundError, Sandbox, SandboxClient, SandboxError,
                      SandboxStoppedError, Snapshot, SourceFailedError)


def _gone(client, name):
    with pytest.raises(NotFoundError):
        Sandbox.get(name, client=client)


def test_with_create_runs_commands_and_stops_on_exit(world, client, name):
    with Sandbox.create(name=name, network_policy="deny-all", env={"GREETING": "hi"}, client=client) as sb:
        assert sb.name == name and sb.status == "running"
        r = sb.run_command("sh", ["-c", "echo $GREETING; echo err >&2; exit 3"])
        assert isinstance(r, CommandFinished)
        assert (r.exit_code, r.stdout(), r.stderr()) == (3, "hi\n", "err\n")
        assert r.output("both") == "hi\nerr\n"
        seen = io.StringIO()
        r = sb.run_command("sh", ["-c", "echo streamed"], stdout=seen, cwd="/tmp")
        assert seen.getvalue() == "streamed\n" and r.exit_code == 0
        got = []
        sb.run_command("cat", stdin=b"in\n", stdout=got.append)
        assert "".join(got) == "in\n"
        assert sb.run_command("id", ["-u"], sudo=True).stdout() == "0\n"
    # Not persistent: stopped means deleted.
    _gone(client, name)
    leaks.check(world, name)


def test_files_and_fs_methods(world, client, name):
    with Sandbox.create(name=name, network_policy="deny-all", client=client) as sb:
        sb.write_files([{"path": "a.txt", "content": "hello"},
                        {"path": "/workspace/bin/run.sh", "content": b"#!/bin/sh\necho ran\n", "mode": 0o755}])
        assert sb.read_file("a.txt") == b"hello"
        assert sb.read_file("/workspace/missing") is None
        assert sb.run_command("/workspace/bin/run.sh").stdout() == "ran\n"
        assert sb.fs.stat("/workspace/bin/run.sh")["mode"] & 0o777 == 0o755
        sb.mk_dir("d/e")
        sb.fs.write_file("d/e/f", "x")
        assert sb.fs.readdir("/workspace") == ["a.txt", "bin", "d"]
        assert [e["type"] for e in sb.fs.list("d")] == ["directory"]
        assert sb.fs.read_text("d/e/f") == "x"
        assert sb.fs.exists("d/e/f") and not sb.fs.exists("nope")
        with pytest.raises(SandboxError):
            sb.fs.rm("d")  # not empty
        sb.fs.rm("d", recursive=True)
        assert not sb.fs.exists("d")
        with pytest.raises(NotFoundError):
            sb.fs.read_file("d/e/f")


def test_detached_command_logs_write_wait_kill_and_get_command(world, client, name):
    with Sandbox.create(name=name, network_policy="deny-all", client=client) as sb:
        cmd = sb.run_command("sh", ["-c", "while read l; do echo got $l; echo e >&2; done; exit 4"], detached=True)
        cmd.write("one\n")
        cmd.write(b"two\n")
        cmd.close_stdin()
        out = b"".join(x["data"] for x in cmd.logs() if x["stream"] == "stdout")
        assert out == b"got one\ngot two\n"
        fin = cmd.wait()
        assert (fin.exit_code, fin.stdout(), fin.stderr()) == (4, "got one\ngot two\n", "e\ne\n")
        again = sb.get_command(cmd.cmd_id)
        assert again.wait().exit_code == 4
        assert b"".join(x["data"] for x in again.logs() if x["stream"] == "stdout") == b"got one\ngot two\n"
        long = sb.run_command("sleep", ["100"], detached=True)
        assert long.exit_code is None
        long.kill("SIGKILL")
        assert long.wait().exit_code == 137
        with pytest.raises(NotFoundError):
            sb.get_command("cmd-0000000000000000")


def test_tty_command_sees_its_size_and_resize(world, client, name):
    with Sandbox.create(name=name, network_policy="deny-all", client=client) as sb:
        cmd = sb.run_command("sh", ["-c", "stty size; read x; stty size"], detached=True,
                             tty={"rows": 10, "cols": 40})
        seen = b""
        it = cmd.logs()
        for piece in it:
            seen += piece["data"]
            if b"10 40" in seen:
                break
        cmd.resize(20, 80)
        cmd.write("\n")
        for piece in it:
            seen += piece["data"]
        assert b"10 40" in seen and b"20 80" in seen
        assert cmd.wait().exit_code == 0


def test_typed_errors_carry_code_reason_and_field(world, client, name):
    with pytest.raises(NotFoundError) as e:
        Sandbox.get("no-such-sandbox", client=client)
    assert (e.value.code, e.value.reason) == (-32000, "not_found")
    with pytest.raises(InvalidPolicyError) as e:
        Sandbox.create(name=name, network_policy={"allow": ["*.com"]}, client=client)
    assert e.value.reason == "invalid_policy" and e.value.field.startswith("networkPolicy.allow")
    with pytest.raises(InvalidParamsError) as e:
        Sandbox.create(name=name, timeout=-5, client=client)
    assert (e.value.code, e.value.field) == (-32602, "timeout")
    with Sandbox.create(name=name, network_policy="deny-all", client=client):
        with pytest.raises(AlreadyExistsError) as e:
            Sandbox.create(name=name, client=client)
        assert e.value.reason == "already_exists"
    with pytest.raises(DaemonUnreachableError):
        with SandboxClient("/nonexistent/sandboxd.sock") as c:
            c.daemon_info()
    with pytest.raises(InvalidParamsError) as e:
        Sandbox.create(name=name, tags={"t%d" % i: "v" for i in range(6)}, client=client)
    assert e.value.field == "tags"
    with pytest.raises(SourceFailedError) as e:
        Sandbox.create(name=name, source={"type": "tarball", "url": world.http_url("no-such.tar.gz")},
                       network_policy="deny-all", client=client)
    assert e.value.reason == "source_failed"
    sb = Sandbox.create(name=name, network_policy="deny-all", persistent=True, client=client)
    try:
        sb.stop()
        with pytest.raises(SandboxStoppedError) as e:
            sb.extend_timeout(1000)
        assert e.value.reason == "sandbox_stopped"
    finally:
        sb.delete()
    with Sandbox.create(name=name, network_policy="deny-all", client=client) as sb:
        with pytest.raises(TypeError):
            sb.run_command("ls", "-l /")  # args is a list
        sb.run_command("truncate", ["-s", "65M", "big"])
        with pytest.raises(LimitExceededError) as e:
            sb.read_file("big")
        assert e.value.reason == "limit_exceeded"


def test_get_or_create_runs_on_create_once(world, client, name):
    calls = []
    a = Sandbox.get_or_create(name, on_create=lambda sb: calls.append(sb.name), network_policy="deny-all",
                              client=client)
    b = Sandbox.get_or_create(name, on_create=lambda sb: calls.append("again"), network_policy="deny-all",
                              client=client)
    try:
        assert calls == [name] and a.id == b.id
    finally:
        a.delete()
    _gone(client, name)


def test_update_extend_fork_snapshot_and_snapshot_source(world, client, name):
    sb = Sandbox.create(name=name, network_policy="deny-all", persistent=True, tags={"k": "v"}, client=client)
    fork = snap = from_snap = None
    try:
        sb.update(tags={"k": "w"}, env={"A": "1"})
        assert sb.tags == {"k": "w"} and sb.env == {"A": "1"}
        before = sb.expires_at
        sb.extend_timeout(60000)
        assert sb.expires_at > before
        sb.write_files([{"path": "f", "content": "state"}])
        fork = sb.fork(name=name + "-f", tags={"fork": "1"})
        assert fork.read_file("f") == b"state" and fork.tags == {"fork": "1"}
        fork2 = Sandbox.fork(sb, name=name + "-g")
        fork2.delete()
        snap = sb.snapshot(expiration=3600000)
        assert snap.id.startswith("snap-") and snap.sandbox == name
        assert snap.id in [s.id for s in Snapshot.list(sandbox=name, client=client)]
        assert Snapshot.get(snap.id, client=client).id == snap.id
        from_snap = Sandbox.create(name=name + "-s", source={"type": "snapshot", "snapshot_id": snap.id},
                                   network_policy="deny-all", client=client)
        assert from_snap.read_file("f") == b"state"
        sb.stop()
        assert sb.status == "stopped"
        assert Sandbox.get(name, client=client).status == "running"  # resumed
    finally:
        for x in (from_snap, fork, sb):
            if x is not None:
                x.delete()
        if snap is not None:
            snap.delete()
    with pytest.raises(NotFoundError):
        Snapshot.get(snap.id, client=client)


def test_list_iterates_over_cursor_pages(world, client, name):
    made = [Sandbox.create(name="%s-%d" % (name, i), network_policy="deny-all", tags={"lst": name}, client=client)
            for i in range(3)]
    try:
        got = [s.name for s in Sandbox.list(tags={"lst": name}, limit=2, client=client)]
        assert sorted(got) == sorted(s.name for s in made)
        assert [s.name for s in Sandbox.list(name_prefix=name + "-1", client=client)] == [name + "-1"]
    finally:
        for s in made:
            s.delete()


def test_domain_and_check_policy(world, client, name):
    with Sandbox.create(name=name, ports=[8000], network_policy={"allow": ["api.public.test"]},
                        client=client) as sb:
        url = sb.domain(8000)
        assert url.startswith("http://") and ":" in url[7:]
        with pytest.raises(NotFoundError):
            sb.domain(9000)
        assert sb.check_policy("https://api.public.test/x")["decision"] == "allow"
        r = sb.check_policy("https://evil.test/")
        assert r["decision"] == "deny" and r["message"]


def test_events_stream_sandbox_status(world, client, name):
    sb = Sandbox.create(name=name, network_policy="deny-all", persistent=True, client=client)
    try:
        events = sb.events(kinds=["sandbox"])
        sb.stop()
        statuses = []
        for ev in events:
            assert ev["sandbox"] == name and ev["kind"] == "sandbox"
            statuses.append(ev["status"])
            if ev["status"] == "stopped":
                break
        assert statuses[-1] == "stopped"
        events.close()
    finally:
        sb.delete()


def test_default_client_from_environment(world, monkeypatch, name):
    import sandboxd._sync as S
    monkeypatch.setenv("SANDBOXD_SOCKET", world.daemon.socket)
    monkeypatch.setattr(S, "_default", None)
    with Sandbox.create(name=name, network_policy="deny-all") as sb:
        assert sb.run_command("true").exit_code == 0
    S._default.close()


def test_reconnects_across_a_daemon_restart(world, client, name):
    """Live restore keeps the command; the client reconnects by itself, its
    logs resume and wait() finds the exit."""
    sb = Sandbox.create(name=name, network_policy="deny-all", client=client)
    try:
        cmd = sb.run_command("sh", ["-c", "echo before; read x; echo after; exit 7"], detached=True)
        it = cmd.logs()
        assert next(it)["data"] == b"before\n"
        events = sb.events(kinds=["sandbox"])
        world.daemon.stop()
        world.daemon.start()
        deadline = time.monotonic() + 30
        while True:  # the first call after the restart reconnects
            try:
                assert client.daemon_info()["pid"] == world.daemon.pid
                break
            except DaemonUnreachableError:
                assert time.monotonic() < deadline
        cmd.write("go\n")
        rest = b"".join(x["data"] for x in it)
        assert b"after\n" in rest
        assert cmd.wait().exit_code == 7
        assert sb.run_command("echo", ["new"]).stdout() == "new\n"
        # The event stream was subscribed again on the new connection.
        sb.stop()
        for ev in events:
            if ev["status"] in ("stopped", "deleted"):
                break
        events.close()
    finally:
        try:
            sb.delete()
        except NotFoundError:
            pass


def test_ctrl_c_during_a_create_cancels_it_on_the_daemon(world, client, name):
    """KeyboardInterrupt (here from a timer signal, as Ctrl-C would) while
    Sandbox.create waits on a source that stalls: the create is cancelled
    on the daemon and leaves nothing."""
    import signal
    base, log = world.stall_server()

    def interrupt(signum, frame):
        raise KeyboardInterrupt
    old = signal.signal(signal.SIGALRM, interrupt)
    signal.setitimer(signal.ITIMER_REAL, 1.0)
    try:
        with pytest.raises(KeyboardInterrupt):
            Sandbox.create(name=name, source={"type": "tarball", "url": "%s/%s.tar.gz" % (base, name)},
                           client=client)
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)
    deadline = time.monotonic() + 20
    while "closed /%s.tar.gz" % name not in log():
        assert time.monotonic() < deadline, "the download was not stopped: %s" % log()
        time.sleep(0.05)
    while True:
        try:
            Sandbox.get(name, client=client)
        except NotFoundError:
            break
        assert time.monotonic() < deadline, "the cancelled sandbox is still there"
        time.sleep(0.05)
    leaks.check(world, name)
    # The client still works.
    assert client.daemon_info()["version"]


def test_a_waiting_run_command_resumes_across_a_daemon_restart(world, client, name):
    import threading
    sb = Sandbox.create(name=name, network_policy="deny-all", client=client)
    try:
        up = threading.Event()
        result = {}

        def run():
            try:
                result["r"] = sb.run_command("sh", ["-c", "echo before; while [ ! -e /tmp/go ]; do sleep 0.05; "
                                                    "done; echo after; exit 5"],
                                             stdout=lambda s: up.set())
            except Exception as e:  # reported below
                result["e"] = e
        t = threading.Thread(target=run)
        t.start()
        assert up.wait(30), "the command did not start"
        world.daemon.stop()
        world.daemon.start()
        deadline = time.monotonic() + 30
        while True:
            try:
                sb.write_files([{"path": "/tmp/go", "content": ""}])
                break
            except DaemonUnreachableError:
                assert time.monotonic() < deadline
        t.join(60)
        assert "e" not in result, repr(result.get("e"))
        r = result["r"]
        assert r.exit_code == 5 and r.stdout() == "before\nafter\n"
    finally:
        sb.delete()


def test_a_connection_the_daemon_refuses_fails_at_once_with_its_reason(world):
    """A user not in the socket's group (here `nobody`, given access to the
    socket file so that the daemon itself decides): every call fails at once
    with PermissionDeniedError and the daemon's message, not with a lost
    connection after reconnect_timeout of retries."""
    import json as _json
    import os
    import stat
    import subprocess
    sock = world.daemon.socket
    paths = [sock]
    d = os.path.dirname(sock)
    while d not in ("/", "/tmp"):
        paths.append(d)
        d = os.path.dirname(d)
    modes = [stat.S_IMODE(os.stat(p).st_mode) for p in paths]
    child = """
import json, sys, time
from sandboxd import PermissionDeniedError, Sandbox, SandboxClient
out = []
with SandboxClient(sys.argv[1], reconnect_timeout=30) as c:
    for i in range(2):
        t = time.monotonic()
        try:
            Sandbox.create(network_policy="deny-all", client=c)
            out.append({"ok": True})
        except Exception as e:
            out.append({"cls": type(e).__name__, "typed": isinstance(e, PermissionDeniedError),
                        "reason": getattr(e, "reason", None), "message": str(e), "s": time.monotonic() - t})
print(json.dumps(out))
"""
    src = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "src")
    try:
        os.chmod(sock, 0o666)
        for p in paths[1:]:
            os.chmod(p, stat.S_IMODE(os.stat(p).st_mode) | 0o001)
        r = subprocess.run(["runuser", "-u", "nobody", "--", "/usr/bin/python3", "-c", child, sock],
                           capture_output=True, text=True, timeout=90,
                           env=dict(os.environ, PYTHONPATH=os.path.abspath(src), HOME="/"))
    finally:
        for p, m in zip(paths, modes):
            os.chmod(p, m)
    assert r.returncode == 0, r.stderr
    for x in _json.loads(r.stdout.strip().splitlines()[-1]):
        assert x.get("cls") == "PermissionDeniedError" and x["typed"], x
        assert x["reason"] == "permission_denied" and "socket group" in x["message"], x
        assert x["s"] < 5, "refused promptly, not after retrying: %r" % x


def test_list_commands_gives_the_sandbox_s_commands_newest_first(world, client, name):
    with Sandbox.create(name=name, network_policy="deny-all", client=client) as sb:
        done = sb.run_command("sh", ["-c", "exit 3"])
        long = sb.run_command("sleep", ["100"], detached=True)
        listed = sb.list_commands(limit=1)
        assert [(c.cmd_id, c.exit_code) for c in listed][:1] == [(long.cmd_id, None)]
        assert [c.exit_code for c in listed] == [None, done.exit_code]
        long.kill("SIGKILL")
        assert long.wait().exit_code == 137


def test_watch_iterates_changes_until_closed(world, client, name):
    with Sandbox.create(name=name, network_policy="deny-all", client=client) as sb:
        with pytest.raises(NotFoundError):
            sb.watch("missing")
        it = sb.watch("/workspace", recursive=True)  # in place once this returns
        sb.run_command("sh", ["-c", "mkdir d && echo hi > d/a.txt && mv d/a.txt d/b.txt && rm d/b.txt"])
        seen = []
        for ev in it:
            seen.append(ev)
            if ev["type"] == "deleted" and ev["path"] == "/workspace/d/b.txt":
                break
        it.close()
        assert {"type": "created", "path": "/workspace/d", "isDir": True} in \
            [{k: e.get(k) for k in ("type", "path", "isDir")} for e in seen]
        assert any(e["type"] == "renamed" and e["path"] == "/workspace/d/b.txt"
                   and e["oldPath"] == "/workspace/d/a.txt" for e in seen), seen
        # The closed watch left room: the sandbox's watches are bounded.
        it2 = sb.watch("/workspace")
        it2.close()


def test_finished_commands_report_their_usage(world, client, name):
    with Sandbox.create(name=name, network_policy="deny-all", client=client) as sb:
        r = sb.run_command("true")
        assert r.usage is not None and 0 <= r.usage["cpuMs"] < 1000, r.usage
        assert 0 < r.usage["memoryPeakBytes"] < 256 << 20, r.usage
        cmd = sb.run_command("true", detached=True)
        assert cmd.wait().usage is not None

def test_create_without_a_policy_sends_none_so_the_daemon_default_applies():
    # An explicit "allow-all" here would override daemon.json's
    # defaultNetworkPolicy for every SDK user.
    from sandboxd._async import _config_params
    assert "networkPolicy" not in _config_params(timeout=60000)
    assert _config_params(network_policy="deny-all")["networkPolicy"] == "deny-all"


# ---- Ctrl-C in a child process, and getOrCreate's setup (on_create)

import os
import signal
import subprocess
import sys
import threading

SRC = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "src")


def _child(world, script, *args):
    """A Python process running `script` with the SDK on its path and the
    daemon's socket as argv[1]; stdout and stderr piped."""
    env = dict(os.environ, PYTHONPATH=SRC, PYTHONUNBUFFERED="1")
    # SIGINT at its default in the child, whatever the suite inherited: a
    # suite started as a background job of a non-interactive shell has
    # SIGINT ignored, Python then installs no KeyboardInterrupt handler,
    # and the real SIGINT below was ignored (the child ran on for 60 s).
    return subprocess.Popen([sys.executable, "-c", script, world.daemon.socket, *args], env=env,
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))


def _wait_for(pred, what, secs=60):
    deadline = time.monotonic() + secs
    while not pred():
        assert time.monotonic() < deadline, "timed out waiting for " + what
        time.sleep(0.05)


_CREATE_CHILD = """
import sys
from sandboxd import Sandbox, SandboxClient
c = SandboxClient(sys.argv[1])
Sandbox.create(name=sys.argv[2], source={"type": "tarball", "url": sys.argv[3]}, client=c)
print("created")
"""


def test_a_real_sigint_during_a_synchronous_create_leaves_no_sandbox(world, client, name):
    """SIGINT to a process blocked in Sandbox.create (its source stalls):
    the process exits with KeyboardInterrupt, and by then the daemon has
    undone the create: the sandbox is gone the moment the process is."""
    base, log = world.stall_server()
    child = _child(world, _CREATE_CHILD, name, "%s/%s.tar.gz" % (base, name))
    try:
        _wait_for(lambda: "open /%s.tar.gz" % name in log(), "the download to start")
        child.send_signal(signal.SIGINT)
        out, err = child.communicate(timeout=60)
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
    assert child.returncode == -signal.SIGINT, (child.returncode, out, err)
    assert "KeyboardInterrupt" in err and "created" not in out, (out, err)
    # No wait: the child waited for the daemon's -32800, sent once the
    # create was undone, so the name is free at once (a create still under
    # way, which sandbox.get does not show, would hold it: already_exists).
    Sandbox.create(name=name, network_policy="deny-all", client=client).delete()
    _gone(client, name)
    _wait_for(lambda: "closed /%s.tar.gz" % name in log(), "the download to be closed")
    leaks.check(world, name)


def _waiters(client, name):
    return client.call("sandbox.get", {"name": name})["setup"]["waiters"]


def test_get_or_create_hands_the_sandbox_out_only_after_on_create_finished(world, client, name):
    order = []
    other = SandboxClient(world.daemon.socket)
    got = {}

    def second():
        got["sb"] = Sandbox.get_or_create(name, on_create=lambda sb: order.append("b-setup"),
                                          network_policy="deny-all", client=other)
        order.append("b-got")

    def setup(sb):
        sb.write_files([{"path": "setup.txt", "content": "done"}])
        t = threading.Thread(target=second)
        got["thread"] = t
        t.start()
        # The second caller is waiting on the daemon before this setup ends.
        _wait_for(lambda: _waiters(client, name) == 1, "the second caller to wait")
        assert "b-got" not in order
        order.append("a-setup-done")
    try:
        a = Sandbox.get_or_create(name, on_create=setup, network_policy="deny-all", client=client)
        got["thread"].join(60)
        assert order == ["a-setup-done", "b-got"]
        b = got["sb"]
        assert a.ready and b.ready and a.id == b.id
        assert b.read_file("setup.txt") == b"done"
    finally:
        other.close()
        try:
            Sandbox.get(name, client=client).delete()
        except NotFoundError:
            pass


def test_get_or_create_runs_on_create_again_after_it_failed(world, client, name):
    def failing(sb):
        sb.write_files([{"path": "half.txt", "content": "x"}])
        raise RuntimeError("setup broke")
    calls = []
    try:
        with pytest.raises(RuntimeError, match="setup broke"):
            Sandbox.get_or_create(name, on_create=failing, network_policy="deny-all", client=client)
        sb = Sandbox.get(name, client=client)
        assert not sb.ready and sb.info["setup"]["claimed"] is False
        # A caller without on_create gets it as it is: nothing to wait for.
        assert not Sandbox.get_or_create(name, network_policy="deny-all", client=client).ready
        sb = Sandbox.get_or_create(name, on_create=lambda s: calls.append(s.read_file("half.txt")),
                                   network_policy="deny-all", client=client)
        assert calls == [b"x"] and sb.ready
        # Ready now: on_create never runs again.
        Sandbox.get_or_create(name, on_create=lambda s: calls.append("again"), network_policy="deny-all",
                              client=client)
        assert calls == [b"x"]
    finally:
        try:
            Sandbox.get(name, client=client).delete()
        except NotFoundError:
            pass


_SETUP_CHILD = """
import sys
from sandboxd import Sandbox, SandboxClient
c = SandboxClient(sys.argv[1])
def setup(sb):
    print("in-setup", flush=True)
    sys.stdin.readline()  # blocks until killed
Sandbox.get_or_create(sys.argv[2], on_create=setup, network_policy="deny-all", client=c)
"""


def test_a_waiter_takes_over_the_setup_when_the_creator_dies_mid_on_create(world, client, name):
    child = _child(world, _SETUP_CHILD, name)
    other = SandboxClient(world.daemon.socket)
    got = {}

    def waiter():
        try:
            got["sb"] = Sandbox.get_or_create(
                name, on_create=lambda sb: sb.write_files([{"path": "by-waiter", "content": "1"}]),
                network_policy="deny-all", client=other)
        except BaseException as e:
            got["error"] = e
    t = threading.Thread(target=waiter)
    try:
        assert child.stdout.readline().strip() == "in-setup", child.stderr.read()
        t.start()
        _wait_for(lambda: _waiters(client, name) == 1, "the waiter to wait")
        child.kill()
        child.wait()
        t.join(60)
        assert "error" not in got, got.get("error")
        sb = got["sb"]
        assert sb.ready and sb.read_file("by-waiter") == b"1"
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
        for f in (child.stdin, child.stdout, child.stderr):
            f.close()
        t.join(60)
        other.close()
        try:
            Sandbox.get(name, client=client).delete()
        except NotFoundError:
            pass


def test_set_timeout_shortens_the_session_and_a_persistent_sandbox_stops(world, client, name):
    sb = Sandbox.create(name=name, network_policy="deny-all", persistent=True, timeout=600000, client=client)
    try:
        before = sb.expires_at
        sb.set_timeout(300000)
        assert sb.expires_at < before, "a shorter timeout moves expires_at earlier"
        assert sb.timeout == 600000, "the sandbox's own timeout is update's"
        assert sb.on_timeout == "stop"
        sb.set_timeout(1000)
        _wait_for(lambda: sb.refresh().status == "stopped", "the stop at the new expiry", 30)
        assert sb.on_timeout is None
        with pytest.raises(SandboxStoppedError):
            sb.set_timeout(5000)
    finally:
        sb.delete()


def test_set_timeout_on_timeout_pause_pauses_then_resume_thaws(world, client, name):
    from sandboxd import UnavailableError
    with Sandbox.create(name=name, network_policy="deny-all", timeout=600000, client=client) as sb:
        with pytest.raises(InvalidParamsError) as e:
            sb.set_timeout(1000, on_timeout="later")  # type: ignore[arg-type]
        assert e.value.field == "onTimeout"
        sb.set_timeout(1000, on_timeout="pause")
        assert sb.on_timeout == "pause"
        _wait_for(lambda: sb.refresh().paused, "the session paused at its expiry", 30)
        assert sb.status == "running"
        with pytest.raises(UnavailableError):
            sb.run_command("true")
        assert not sb.resume().paused
        assert sb.run_command("echo", ["thawed"]).stdout() == "thawed\n"
        assert sb.pause().paused and not sb.resume().paused


def test_snapshot_tags_and_list_by_tags(world, client, name):
    with Sandbox.create(name=name, network_policy="deny-all", client=client) as sb:
        plain = sb.snapshot()
        tagged = sb.snapshot(tags={"suite": name, "kind": "base"})
        try:
            assert tagged.tags == {"suite": name, "kind": "base"} and plain.tags == {}
            got = Snapshot.list(tags={"suite": name}, client=client)
            assert [s.id for s in got] == [tagged.id] and got[0].tags == tagged.tags
            assert Snapshot.list(tags={"suite": name, "kind": "other"}, client=client) == []
            assert sorted(s.id for s in Snapshot.list(sandbox=name, client=client)) == sorted([plain.id, tagged.id])
        finally:
            plain.delete()
            tagged.delete()


def test_write_files_xattrs_and_sudo_file_calls(world, client, name):
    with Sandbox.create(name=name, network_policy="deny-all", client=client) as sb:
        sb.write_files([{"path": "x.txt", "content": "x", "xattrs": {"user.origin": "ci", "user.n": "1"}}])
        assert sb.fs.stat("x.txt")["xattrs"] == {"user.origin": "ci", "user.n": "1"}
        sb.fs.write_file("x.txt", "y", xattrs={"user.n": "2"})
        assert sb.fs.stat("x.txt")["xattrs"] == {"user.n": "2"}
        sb.fs.write_file("x.txt", "z", xattrs={})
        assert sb.fs.stat("x.txt").get("xattrs", {}) == {}
        with pytest.raises(InvalidParamsError) as e:
            sb.write_files([{"path": "bad", "content": "", "xattrs": {"security.x": "1"}}])
        assert e.value.field.startswith("files[0].xattrs")

        with pytest.raises(SandboxError):
            sb.fs.write_file("/etc/py-sudo", "no")
        sb.fs.write_file("/etc/py-sudo", "secret", mode=0o600, sudo=True)
        assert sb.fs.stat("/etc/py-sudo", sudo=True)["uid"] == 0
        with pytest.raises(SandboxError):
            sb.fs.read_file("/etc/py-sudo")
        assert sb.fs.read_text("/etc/py-sudo", sudo=True) == "secret"
        assert sb.read_file("/etc/py-sudo", sudo=True) == b"secret"
        sb.mk_dir("/etc/py-dir/sub", sudo=True)
        assert sb.fs.readdir("/etc/py-dir", sudo=True) == ["sub"]
        sb.write_files([{"path": "/etc/py-dir/sub/f", "content": "f"}], sudo=True)
        assert sb.fs.list("/etc/py-dir/sub")[0]["uid"] == 0
        with pytest.raises(SandboxError):
            sb.fs.rm("/etc/py-dir", recursive=True)
        sb.fs.rm("/etc/py-dir", recursive=True, sudo=True)
        sb.fs.rm("/etc/py-sudo", sudo=True)
        assert not sb.fs.exists("/etc/py-sudo", sudo=True)
