"""A stop (SIGTERM, as `systemctl stop` or `restart` sends) answers every
request in flight before its connection closes (docs/API.md, "Daemon
restarts"): an operation that finishes within the shutdown grace gets its
result; one that does not is rolled back and answered `unavailable` with
data.completed false; a caller waiting on a command gets `unavailable`
with the cmdId, and the command runs on; a request that arrives meanwhile
is refused `unavailable` (completed false). The state after the restart
agrees with every answer.

Operations are held in flight with the fault build's gates
(SANDBOXD_FAULT_STALL + SANDBOXD_FAULT_GATE, libcore/fault.h): the worker
waits at the named point until the test opens the gate, so nothing here
depends on timing."""
import base64
import os
import signal
import tempfile

import leaks
import world as W
from common import expect, expect_eq, poll, rpc_ok, sh_ok

UNAVAILABLE = -32000


class _Faulty:
    """world.daemon restarted as the fault build with `point` gated; the
    normal daemon is back (same state and run directories) on exit."""

    def __init__(self, world, point, grace_ms=None):
        self.world, self.point = world, point
        self.d = world.daemon
        self.gate = tempfile.mkdtemp(prefix="gate-", dir=world.tmp)
        self.env = {"SANDBOXD_FAULT_STALL": point, "SANDBOXD_FAULT_GATE": self.gate}
        if grace_ms is not None:
            self.env["SANDBOXD_FAULT_STOP_GRACE_MS"] = str(grace_ms)
        self.log_from = 0

    def __enter__(self):
        expect_eq(self.d.stop(), 0, "sandboxd exit status on SIGTERM (idle)")
        self.d.start(binary=W.FAULTS_SANDBOXD, env=self.env)
        return self

    def __exit__(self, *exc):
        self.open_gate()
        if self.d.alive():
            self.d.stop(60)
        self.d.start()
        self.world.daemon = self.d

    def reached(self):
        poll(lambda: os.path.exists(os.path.join(self.gate, self.point + ".reached")), 60,
             "the operation to reach %s" % self.point)

    def open_gate(self):
        open(os.path.join(self.gate, self.point + ".open"), "w").close()

    def log(self):
        with open(self.d.log_path, errors="replace") as f:
            f.seek(self.log_from)
            return f.read()

    def sigterm(self):
        self.log_from = os.path.getsize(self.d.log_path)
        os.kill(self.d.proc.pid, signal.SIGTERM)
        poll(lambda: "shutting down" in self.log(), 30, "the daemon to begin its stop")

    def exited(self):
        expect_eq(self.d.proc.wait(90), 0, "sandboxd exit status after the stop")


def _unavailable(msg, what, completed=False):
    err = msg.get("error")
    expect(err is not None, "%s is answered with an error" % what, str(msg)[:300])
    data = err.get("data", {})
    expect_eq((err["code"], data.get("reason"), data.get("completed")), (UNAVAILABLE, "unavailable", completed),
              "%s: code, reason and completed (%s)" % (what, err.get("message")))
    return data


def _reason(world, method, params):
    return world.rpc(method, params).get("error", {}).get("data", {}).get("reason")


def test_a_create_that_finishes_within_the_grace_is_answered_its_result_and_exists_after_the_restart(world):
    name = world.name("tcreate")
    with _Faulty(world, "create.working") as f:
        with f.d.connect(timeout=90) as conn:
            rid = conn.start("sandbox.create", {"name": name, "networkPolicy": "deny-all"})
            f.reached()
            f.sigterm()
            # Meanwhile a new request is refused: it was not started.
            with f.d.connect(timeout=30) as other:
                _unavailable(other.call("sandbox.get", {"name": name}, 30), "a request sent while stopping")
            f.open_gate()
            msg = conn.wait(rid, 90)
            expect("result" in msg, "the create in flight is answered its result", str(msg)[:300])
            expect_eq(msg["result"]["name"], name, "the created sandbox's name")
        f.exited()
    try:
        sb = rpc_ok(world, "sandbox.get", {"name": name})
        expect_eq(sb["status"], "running", "the sandbox answered as created, after the restart")
    finally:
        world.rpc("sandbox.delete", {"name": name}, 60)
    leaks.check(world, name)


def test_a_create_still_running_after_the_grace_is_rolled_back_and_answered_not_completed(world):
    name = world.name("tcrback")
    with _Faulty(world, "create.working", grace_ms=200) as f:
        with f.d.connect(timeout=90) as conn:
            rid = conn.start("sandbox.create", {"name": name, "networkPolicy": "deny-all"})
            f.reached()
            f.sigterm()
            poll(lambda: "rolling back" in f.log(), 30, "the daemon to roll back what is still in flight")
            f.open_gate()
            _unavailable(conn.wait(rid, 90), "the create rolled back at the stop")
        f.exited()
    expect_eq(_reason(world, "sandbox.get", {"name": name}), "not_found",
              "the create answered completed: false does not exist after the restart")
    leaks.check(world, name)


def test_a_snapshot_and_an_export_in_flight_are_answered_and_recorded(world):
    name = world.name("tsnap")
    rpc_ok(world, "sandbox.create", {"name": name, "networkPolicy": "deny-all"})
    try:
        sh_ok(world, name, "echo kept > /workspace/f")
        with _Faulty(world, "capture.working") as f:
            with f.d.connect(timeout=90) as conn:
                rid = conn.start("sandbox.snapshot", {"name": name})
                f.reached()
                f.sigterm()
                f.open_gate()
                msg = conn.wait(rid, 90)
                expect("result" in msg, "the snapshot in flight is answered its result", str(msg)[:300])
                snap = msg["result"]["id"]
            f.exited()
        expect_eq(rpc_ok(world, "snapshot.get", {"id": snap})["id"], snap,
                  "the snapshot answered as made, after the restart")
        path = os.path.join(world.tmp, "%s.tar.zst" % name)
        with _Faulty(world, "export.working") as f:
            with f.d.connect(timeout=90) as conn:
                rid = conn.start("snapshot.export", {"id": snap, "path": path})
                f.reached()
                f.sigterm()
                f.open_gate()
                msg = conn.wait(rid, 90)
                expect("result" in msg, "the export in flight is answered its result", str(msg)[:300])
            f.exited()
        expect_eq(os.path.getsize(path), msg["result"]["bytes"], "the exported file, as answered")
        world.rpc("snapshot.delete", {"id": snap})
    finally:
        world.rpc("sandbox.delete", {"name": name}, 60)
    leaks.check(world, name)


def test_a_fork_still_running_after_the_grace_is_rolled_back_and_absent_after_the_restart(world):
    src, fork = world.name("tfsrc"), world.name("tfork")
    rpc_ok(world, "sandbox.create", {"name": src, "networkPolicy": "deny-all"})
    try:
        with _Faulty(world, "capture.working", grace_ms=200) as f:
            with f.d.connect(timeout=90) as conn:
                rid = conn.start("sandbox.fork", {"sourceSandbox": src, "name": fork})
                f.reached()
                f.sigterm()
                poll(lambda: "rolling back" in f.log(), 30, "the daemon to roll back what is still in flight")
                f.open_gate()
                _unavailable(conn.wait(rid, 90), "the fork rolled back at the stop")
            f.exited()
        expect_eq(_reason(world, "sandbox.get", {"name": fork}), "not_found",
                  "the fork answered completed: false does not exist after the restart")
        expect_eq(rpc_ok(world, "sandbox.get", {"name": src})["status"], "running", "its source runs on")
    finally:
        world.rpc("sandbox.delete", {"name": src}, 60)
    leaks.check(world, src)
    leaks.check(world, fork)


def test_callers_waiting_on_commands_get_unavailable_with_the_cmd_id_and_the_commands_run_on(world):
    name = world.name("tcmd")
    d = world.daemon
    rpc_ok(world, "sandbox.create", {"name": name, "networkPolicy": "deny-all"})
    try:
        script = "echo up; while [ ! -e /tmp/go%s ]; do sleep 0.05; done; exit %d"
        with d.connect(timeout=60) as runc, d.connect(timeout=60) as waitc:
            rid = runc.start("command.run", {"sandbox": name, "cmd": "sh", "args": ["-c", script % (1, 6)]})
            run_id = runc.wait_note(lambda n: n.get("method") == "command.started", 30)["params"]["cmdId"]
            out = runc.wait_note(lambda n: n.get("method") == "command.output", 30)
            expect_eq(base64.b64decode(out["params"]["data"]), b"up\n", "the run's output before the stop")
            det = waitc.result("command.run", {"sandbox": name, "cmd": "sh", "args": ["-c", script % (2, 7)],
                                               "detached": True}, 30)
            wid = waitc.start("command.wait", {"cmdId": det["cmdId"]})
            # The wait is registered once a later request on its connection is answered.
            waitc.result("command.get", {"cmdId": det["cmdId"]}, 30)
            os.kill(d.proc.pid, signal.SIGTERM)
            data = _unavailable(runc.wait(rid, 60), "the streaming command.run")
            expect_eq(data.get("cmdId"), run_id, "the run's answer names its command")
            data = _unavailable(waitc.wait(wid, 60), "the command.wait")
            expect_eq(data.get("cmdId"), det["cmdId"], "the wait's answer names its command")
        expect_eq(d.proc.wait(60), 0, "sandboxd exit status after the stop")
        d.start()
        for cmd_id, n, code in ((run_id, 1, 6), (det["cmdId"], 2, 7)):
            expect_eq(rpc_ok(world, "command.get", {"cmdId": cmd_id})["exitCode"], None,
                      "command %s runs on after the restart" % cmd_id)
            sh_ok(world, name, "touch /tmp/go%d" % n)
            expect_eq(rpc_ok(world, "command.wait", {"cmdId": cmd_id}, 30)["exitCode"], code,
                      "its exit code, from the next daemon")
    finally:
        if not d.alive():
            d.proc.wait(60)
            d.start()
        world.rpc("sandbox.delete", {"name": name}, 60)
    leaks.check(world, name)


def test_open_watches_and_parked_get_or_creates_are_answered_at_once_not_after_the_grace(world):
    """A watch and a getOrCreate parked for another caller's setup wait for
    nothing the stop could finish: they are answered `unavailable`
    (completed false) when the stop begins. The stop's grace is set far
    beyond the connections' timeouts, so a stop that waited for it would
    fail here."""
    name = world.name("twait")
    with _Faulty(world, "create.never-reached", grace_ms=600000) as f:
        d = f.d
        with d.connect(timeout=60) as owner, d.connect(timeout=60) as watchc, d.connect(timeout=60) as waitc:
            goc = {"name": name, "networkPolicy": "deny-all", "setup": True}
            r = owner.result("sandbox.getOrCreate", goc, 120)
            expect_eq((r["created"], r["setup"]), (True, True), "the first caller holds the setup")
            wrid = watchc.start("fs.watch", {"sandbox": name, "path": "/workspace", "recursive": True})
            watchc.wait_note(lambda n: n.get("method") == "fs.watchStarted"
                             and n["params"].get("requestId") == wrid, 60)
            grid = waitc.start("sandbox.getOrCreate", goc)
            poll(lambda: rpc_ok(world, "sandbox.get", {"name": name})["setup"]["waiters"] == 1, 30,
                 "the second caller parked for the setup")
            f.sigterm()
            data = _unavailable(watchc.wait(wrid, 60), "the open watch")
            expect(data.get("watchId"), "the watch's answer names it:", data)
            _unavailable(waitc.wait(grid, 60), "the parked getOrCreate")
        f.exited()
    try:
        expect_eq(rpc_ok(world, "sandbox.get", {"name": name})["ready"], False,
                  "the sandbox is kept, not ready, after the restart")
    finally:
        world.rpc("sandbox.delete", {"name": name}, 60)
    leaks.check(world, name)


def test_a_command_logs_parked_for_the_log_hand_over_is_answered_at_once(world):
    """After a restart, command.logs of a re-adopted command waits until
    sandbox-init has handed its logs back. An init that never finishes the
    hand-over (held here by the fault build) must not hold the stop: the
    parked read is answered `unavailable` (completed false) when the stop
    begins, not after the grace (set far beyond the connection's timeout)."""
    name = world.name("tlogs")
    rpc_ok(world, "sandbox.create", {"name": name, "networkPolicy": "deny-all"})
    try:
        det = rpc_ok(world, "command.run", {"sandbox": name, "cmd": "sh", "args": ["-c", "echo kept; sleep 600"],
                                            "detached": True})
        poll(lambda: b"kept" in base64.b64decode(
            rpc_ok(world, "command.logs", {"cmdId": det["cmdId"]}).get("stdout", "") or ""), 30,
            "the command's first line in its log")
        f = _Faulty(world, "create.never-reached", grace_ms=600000)
        f.env["SANDBOXD_FAULT_HOLD_LOGS_DONE"] = "1"
        with f:
            with f.d.connect(timeout=60) as c:
                # The command list is in once command.get answers; its logs
                # are still being handed over, for good.
                poll(lambda: c.call("command.get", {"cmdId": det["cmdId"]}, 30).get("result") is not None, 30,
                     "the re-adopted command's listing")
                lid = c.start("command.logs", {"cmdId": det["cmdId"]})
                c.result("sandbox.get", {"name": name}, 30)
                f.sigterm()
                _unavailable(c.wait(lid, 30), "the parked command.logs")
            f.exited()
    finally:
        world.rpc("sandbox.delete", {"name": name}, 60)
    leaks.check(world, name)
