"""request.cancel (docs/API.md): a pending sandbox.create, sandbox.fork,
sandbox.snapshot or command.run of the same connection is cancelled; it
answers -32800 (data.reason "cancelled") and leaves nothing behind."""
import base64
import json
import time
import os

import leaks
from common import expect, expect_eq, poll

CANCELLED = -32800


def _send_both(conn, method, params):
    """Sends `method` and a request.cancel of it in one write, so the daemon
    reads both before the operation can finish: the cancel always finds the
    request pending. Returns (request id, cancel id)."""
    rid, cid = conn.next_id, conn.next_id + 1
    conn.next_id += 2
    lines = [{"jsonrpc": "2.0", "id": rid, "method": method, "params": params},
             {"jsonrpc": "2.0", "id": cid, "method": "request.cancel", "params": {"id": rid}}]
    conn.send_raw(b"".join(json.dumps(m).encode() + b"\n" for m in lines))
    return rid, cid


def _expect_cancelled(msg, what):
    err = msg.get("error")
    expect(err is not None, "%s answered an error" % what, json.dumps(msg)[:300])
    expect_eq((err["code"], err.get("data", {}).get("reason")), (CANCELLED, "cancelled"),
              "%s: code and reason (%s)" % (what, err.get("message")))


def _not_found(world, name):
    msg = world.rpc("sandbox.get", {"name": name})
    return msg.get("error", {}).get("data", {}).get("reason") == "not_found"


def _layers(world):
    d = os.path.join(world.daemon.state_dir, "layers")
    return sorted(x for x in os.listdir(d)) if os.path.isdir(d) else []


def test_cancel_of_create_from_a_stalled_tarball_removes_everything(world):
    base, log = world.stall_server()
    name = world.name("cstall")
    url = "%s/%s.tar.gz" % (base, name)
    with world.daemon.connect(timeout=60) as conn:
        rid = conn.start("sandbox.create", {"name": name, "source": {"type": "tarball", "url": url}})
        # The download is under way (the server saw it) and stalls there.
        poll(lambda: "open /%s.tar.gz" % name in log(), 20, "the daemon to start the download")
        cancel = conn.call("request.cancel", {"id": rid}, 30)
        expect_eq(cancel.get("result"), {"cancelled": True}, "request.cancel's answer")
        _expect_cancelled(conn.wait(rid, 30), "the cancelled create")
    # Answered only once undone: no sandbox, no state, the download closed.
    expect(_not_found(world, name), "sandbox.get of the cancelled sandbox is not_found")
    expect("closed /%s.tar.gz" % name in log(), "the download connection was closed", log())
    leaks.check(world, name)
    expect(name not in [s["name"] for s in world.rpc_result("sandbox.list", {})["sandboxes"]],
           "sandbox.list does not show the cancelled sandbox")


def test_cancel_of_shallow_git_clone_from_a_stalled_server(world):
    """A shallow clone runs the git program: the cancel kills it."""
    base, log = world.stall_server()
    name = world.name("cgit")
    url = "%s/%s.git" % (base, name)
    with world.daemon.connect(timeout=60) as conn:
        rid = conn.start("sandbox.create", {"name": name, "source": {"type": "git", "url": url, "depth": 1}})
        poll(lambda: any(l.startswith("open /%s.git/" % name) for l in log()), 20, "git to reach the server")
        expect_eq(conn.call("request.cancel", {"id": rid}, 30).get("result"), {"cancelled": True},
                  "request.cancel's answer")
        _expect_cancelled(conn.wait(rid, 30), "the cancelled git create")
    expect(_not_found(world, name), "no sandbox after the cancel")
    poll(lambda: any(l.startswith("closed /%s.git/" % name) for l in log()), 10, "git's connection to close")
    leaks.check(world, name)


def test_cancel_of_create_with_network_undoes_the_session(world):
    """Cancelled while the session is being made (veth, rules, netd, init):
    every piece of it goes."""
    name = world.name("cnet")
    with world.daemon.connect(timeout=60) as conn:
        rid, cid = _send_both(conn, "sandbox.create", {"name": name, "networkPolicy": {"allow": ["api.public.test"]}})
        expect_eq(conn.wait(cid, 30).get("result"), {"cancelled": True}, "request.cancel's answer")
        _expect_cancelled(conn.wait(rid, 60), "the cancelled create")
    expect(_not_found(world, name), "no sandbox after the cancel")
    leaks.check(world, name)
    leaks.check(world, "all")


def test_cancel_of_snapshot_leaves_no_snapshot_and_no_layer(world):
    name = world.name("csnap")
    world.rpc_result("sandbox.create", {"name": name, "networkPolicy": "deny-all"})
    try:
        files = [{"path": "f%d" % i, "content": base64.b64encode(b"x" * 100).decode()} for i in range(200)]
        world.rpc_result("fs.write", {"sandbox": name, "files": files})
        before_layers = _layers(world)
        before = [s["id"] for s in world.rpc_result("snapshot.list", {})["snapshots"]]
        with world.daemon.connect(timeout=60) as conn:
            rid, cid = _send_both(conn, "sandbox.snapshot", {"name": name})
            expect_eq(conn.wait(cid, 30).get("result"), {"cancelled": True}, "request.cancel's answer")
            _expect_cancelled(conn.wait(rid, 60), "the cancelled snapshot")
        after = [s["id"] for s in world.rpc_result("snapshot.list", {})["snapshots"]]
        expect_eq(after, before, "snapshot.list after the cancelled snapshot")
        poll(lambda: _layers(world) == before_layers, 10, "no new layer in the state directory")
        expect(not [x for x in os.listdir(os.path.join(world.daemon.state_dir, "layers")) if x.endswith(".tmp")]
               if os.path.isdir(os.path.join(world.daemon.state_dir, "layers")) else True,
               "no partial copy left")
        # The sandbox was thawed and still runs commands.
        r = world.rpc_result("command.run", {"sandbox": name, "cmd": "cat", "args": ["/workspace/f7"]}, 30)
        expect_eq(r["exitCode"], 0, "a command after the cancelled snapshot")
        # And a snapshot that is not cancelled still works.
        snap = world.rpc_result("sandbox.snapshot", {"name": name}, 60)
        world.rpc_result("snapshot.delete", {"id": snap["id"]})
    finally:
        world.rpc("sandbox.delete", {"name": name}, 60)
    leaks.check(world, name)


def test_cancel_of_fork_leaves_no_fork(world):
    src = world.name("cfsrc")
    fork = world.name("cfork")
    world.rpc_result("sandbox.create", {"name": src, "networkPolicy": "deny-all"})
    try:
        before_layers = _layers(world)
        with world.daemon.connect(timeout=60) as conn:
            rid, cid = _send_both(conn, "sandbox.fork", {"sourceSandbox": src, "name": fork})
            expect_eq(conn.wait(cid, 30).get("result"), {"cancelled": True}, "request.cancel's answer")
            _expect_cancelled(conn.wait(rid, 60), "the cancelled fork")
        expect(_not_found(world, fork), "no fork after the cancel")
        poll(lambda: _layers(world) == before_layers, 10, "the fork's layer removed")
        leaks.check(world, fork)
        expect_eq(world.rpc_result("sandbox.get", {"name": src})["status"], "running", "the source runs on")
    finally:
        world.rpc("sandbox.delete", {"name": src}, 60)
    leaks.check(world, src)


def _processes(world, name):
    """Command lines of the processes in the sandbox other than init and
    the probe itself."""
    script = ("for p in /proc/[0-9]*; do n=${p#/proc/}; [ $n = 1 ] || [ $n = $$ ] || "
              "{ tr '\\0' ' ' < $p/cmdline 2>/dev/null; echo; }; done")
    with world.daemon.connect(timeout=60) as conn:
        r = conn.result("command.run", {"sandbox": name, "cmd": "sh", "args": ["-c", script]}, 30)
        out = conn.output(r["cmdId"]).decode()
    return [l for l in out.splitlines() if l.strip() and "/proc/" not in l]


def test_cancel_of_command_run_kills_its_process_group(world):
    name = world.name("ccmd")
    world.rpc_result("sandbox.create", {"name": name, "networkPolicy": "deny-all"})
    try:
        with world.daemon.connect(timeout=60) as conn:
            rid = conn.start("command.run", {"sandbox": name, "cmd": "sh", "args": ["-c",
                             "sleep 1000 & echo started; sleep 1001"]})
            note = conn.wait_note(lambda n: n.get("method") == "command.output", 30)
            cmd_id = note["params"]["cmdId"]
            expect_eq(conn.call("request.cancel", {"id": rid}, 30).get("result"), {"cancelled": True},
                      "request.cancel's answer")
            _expect_cancelled(conn.wait(rid, 30), "the cancelled command.run")
            # A second cancel of an answered request: nothing pending.
            expect_eq(conn.call("request.cancel", {"id": rid}, 30).get("result"), {"cancelled": False},
                      "a cancel of a request already answered")
        got = world.rpc_result("command.get", {"cmdId": cmd_id})
        expect(got.get("exitCode") is not None, "the command has exited", got)
        # The group's SIGKILL is sent; a killed process may still be in its
        # exit (its command line readable) for a moment under load.
        left = []
        deadline = time.monotonic() + 15
        while True:
            left = [l for l in _processes(world, name) if "sleep" in l]
            if not left or time.monotonic() > deadline:
                break
            time.sleep(0.1)  # polls the process list, bounded by the deadline
        expect_eq(left, [], "processes of the cancelled command left (its background child included)")
    finally:
        world.rpc("sandbox.delete", {"name": name}, 60)
    leaks.check(world, name)


def test_a_cancel_sent_right_after_command_run_kills_the_command(world):
    """The cancel may reach sandbox-init before the command's child has made
    itself a process group leader (init no longer waits for the child's
    exec): the kill must reach the child then too, or the command runs on
    and the cancelled request is never answered."""
    name = world.name("cnow")
    world.rpc_result("sandbox.create", {"name": name, "networkPolicy": "deny-all"})
    try:
        with world.daemon.connect(timeout=60) as conn:
            for i in range(30):
                rid = conn.start("command.run", {"sandbox": name, "cmd": "sleep", "args": ["1000"]})
                cid = conn.start("request.cancel", {"id": rid})
                expect_eq(conn.wait(cid, 30).get("result"), {"cancelled": True},
                          "round %d: request.cancel's answer" % i)
                _expect_cancelled(conn.wait(rid, 30), "round %d: the cancelled command.run" % i)
        left = [l for l in _processes(world, name) if "sleep" in l]
        expect_eq(left, [], "processes of the cancelled commands left")
    finally:
        world.rpc("sandbox.delete", {"name": name}, 60)
    leaks.check(world, name)


def test_cancel_answers_false_when_nothing_can_be_cancelled(world):
    name = world.name("cfalse")
    world.rpc_result("sandbox.create", {"name": name, "networkPolicy": "deny-all"})
    try:
        with world.daemon.connect(timeout=60) as conn:
            expect_eq(conn.result("request.cancel", {"id": 4242}), {"cancelled": False}, "no such request")
            # A detached command.run is answered at once: nothing pending,
            # and the command runs on.
            r = conn.result("command.run", {"sandbox": name, "cmd": "sleep", "args": ["30"], "detached": True})
            expect_eq(conn.result("request.cancel", {"id": conn.next_id - 1}), {"cancelled": False},
                      "a detached run")
            expect(world.rpc_result("command.get", {"cmdId": r["cmdId"]}).get("exitCode") is None,
                   "the detached command still runs")
            world.rpc_result("command.kill", {"cmdId": r["cmdId"], "signal": "SIGKILL"})
            # Requests of another connection cannot be cancelled.
            rid = conn.start("command.run", {"sandbox": name, "cmd": "sleep", "args": ["2"]})
            expect_eq(world.rpc_result("request.cancel", {"id": rid}), {"cancelled": False},
                      "a cancel from another connection")
            expect_eq(conn.wait(rid, 30).get("result", {}).get("exitCode"), 0,
                      "the run another connection tried to cancel finished")
            # Methods that are not cancellable answer false.
            rid, cid = _send_both(conn, "sandbox.get", {"name": name})
            expect_eq(conn.wait(cid, 30).get("result"), {"cancelled": False}, "sandbox.get is not cancellable")
            expect("result" in conn.wait(rid, 30), "the get answered normally")
            # Params are strict.
            bad = conn.call("request.cancel", {"id": "1"})
            expect_eq((bad.get("error", {}).get("code"), bad.get("error", {}).get("data", {}).get("field")),
                      (-32602, "id"), "a string id")
            bad = conn.call("request.cancel", {"id": 1, "x": 2})
            expect_eq(bad.get("error", {}).get("code"), -32602, "an unknown key")
    finally:
        world.rpc("sandbox.delete", {"name": name}, 60)
    leaks.check(world, name)


def _frozen(world, name):
    """Whether the session's cgroup says frozen (cgroup.freeze, else the v1
    freezer.state), read from the directories sandbox.get lists."""
    for d in world.rpc_result("sandbox.get", {"name": name})["session"]["cgroups"]:
        for f, yes in (("cgroup.freeze", "1"), ("freezer.state", "FROZEN")):
            p = os.path.join(d, f)
            if os.path.exists(p):
                with open(p) as fh:
                    return fh.read().strip() == yes
    return False


def _fill(world, name):
    """Enough files in the upper that a capture's copy takes a while."""
    script = "mkdir -p /workspace/d && cd /workspace/d && for i in $(seq 1 3000); do echo $i > f$i; done"
    r = world.rpc_result("command.run", {"sandbox": name, "cmd": "sh", "args": ["-c", script]}, 120)
    expect_eq(r["exitCode"], 0, "filling the sandbox")


def _cancel_then_again(world, method, first, second):
    """Sends `method` with params `first`, a request.cancel of it and the
    same method with `second` in one write: the second starts while the
    cancelled one's capture (freeze, copy, thaw) is under way. Returns the
    second's answer."""
    with world.daemon.connect(timeout=120) as conn:
        rid, cid = _send_both(conn, method, first)
        rid2 = conn.start(method, second)
        expect_eq(conn.wait(cid, 30).get("result"), {"cancelled": True}, "request.cancel's answer")
        _expect_cancelled(conn.wait(rid, 60), "the cancelled %s" % method)
        return conn.wait(rid2, 120)


def test_snapshot_right_after_a_cancelled_snapshot_succeeds(world):
    """A snapshot asked while a cancelled snapshot of the same sandbox still
    freezes, copies or thaws waits for it, never fails on the freeze, and
    the sandbox is thawed after each."""
    name = world.name("csnap2")
    world.rpc_result("sandbox.create", {"name": name, "networkPolicy": "deny-all"})
    try:
        _fill(world, name)
        for i in range(10):
            msg = _cancel_then_again(world, "sandbox.snapshot", {"name": name}, {"name": name})
            expect("result" in msg, "round %d: the snapshot after the cancelled one" % i, json.dumps(msg)[:300])
            world.rpc_result("snapshot.delete", {"id": msg["result"]["id"]})
            expect(not _frozen(world, name), "round %d: the sandbox is thawed" % i)
        r = world.rpc_result("command.run", {"sandbox": name, "cmd": "cat", "args": ["/workspace/d/f7"]}, 30)
        expect_eq(r["exitCode"], 0, "a command after the snapshots")
    finally:
        world.rpc("sandbox.delete", {"name": name}, 60)
    leaks.check(world, name)


def test_fork_right_after_a_cancelled_fork_succeeds(world):
    """As for snapshots: a fork asked while a cancelled fork of the same
    source still captures it waits for that capture and succeeds."""
    src = world.name("cfsrc2")
    world.rpc_result("sandbox.create", {"name": src, "networkPolicy": "deny-all"})
    try:
        _fill(world, src)
        for i in range(10):
            gone, fork = world.name("cfa%d" % i), world.name("cfb%d" % i)
            try:
                msg = _cancel_then_again(world, "sandbox.fork", {"sourceSandbox": src, "name": gone},
                                         {"sourceSandbox": src, "name": fork})
                expect("result" in msg, "round %d: the fork after the cancelled one" % i, json.dumps(msg)[:300])
                expect(_not_found(world, gone), "round %d: no cancelled fork" % i)
                expect(not _frozen(world, src), "round %d: the source is thawed" % i)
            finally:
                world.rpc("sandbox.delete", {"name": fork}, 60)
            leaks.check(world, gone)
            leaks.check(world, fork)
        expect_eq(world.rpc_result("sandbox.get", {"name": src})["status"], "running", "the source runs on")
    finally:
        world.rpc("sandbox.delete", {"name": src}, 60)
    leaks.check(world, src)
