"""sandbox.pause / sandbox.resume (docs/API.md): the session's cgroup
frozen and thawed; a snapshot of a paused sandbox leaves it paused; a policy
update, commands and file requests are refused while paused; delete of a paused sandbox leaves nothing."""
import os

import leaks
from common import create, delete, expect, expect_eq, poll, rpc_ok, sh, sh_ok


def _freezer(world, name):
    sb = rpc_ok(world, "sandbox.get", {"name": name})
    for d in sb["session"]["cgroups"]:
        for f, yes in (("cgroup.freeze", "1"), ("freezer.state", "FROZEN")):
            p = os.path.join(d, f)
            if os.path.exists(p):
                with open(p) as fh:
                    return fh.read().strip() == yes, sb["session"]["paused"]
    raise AssertionError("no freezer among the session's cgroups %s" % sb["session"]["cgroups"])


def _counter(world, name):
    return int(sh(world, name, "cat /tmp/counter")[1])


def test_pause_freezes_and_resume_thaws(world):
    name, _c, _o, _e = create(world, "pause", "--allow", "api.public.test")
    try:
        world.ctl("exec", "--detach", name, "--", "sh", "-c",
                  "i=0; while :; do i=$((i+1)); echo $i > /tmp/counter.new; mv /tmp/counter.new /tmp/counter; "
                  "sleep 0.05; done", check=True)
        poll(lambda: sh(world, name, "cat /tmp/counter 2>/dev/null")[1].strip().isdigit(), 10, "the loop to count")
        expect_eq(_freezer(world, name), (False, False), "before pause: (frozen, session.paused)")
        sb = rpc_ok(world, "sandbox.pause", {"name": name})
        expect_eq(sb["session"]["paused"], True, "sandbox.pause answers the paused Sandbox")
        expect_eq(_freezer(world, name), (True, True), "after pause: (frozen, session.paused)")
        expect_eq(rpc_ok(world, "sandbox.pause", {"name": name})["session"]["paused"], True, "pause again: no-op")
        # A command or a file request sent while paused is refused at once
        # (it would wait unanswered for a resume; a daemon restart in that
        # wait lost its answer but not its effect).
        for method, params in (("command.run", {"sandbox": name, "cmd": "touch", "args": ["/tmp/ghost"]}),
                               ("fs.read", {"sandbox": name, "path": "/tmp/counter"}),
                               ("fs.list", {"sandbox": name, "path": "/tmp"})):
            r = world.rpc(method, params, timeout=10)
            err = r.get("error", {})
            expect(err.get("data", {}).get("reason") == "unavailable" and "sandbox.resume" in err.get("message", ""),
                   "%s on a paused sandbox is refused with unavailable naming sandbox.resume:" % method, r)
        r = world.rpc("sandbox.update", {"name": name, "networkPolicy": {"allow": ["other.public.test"]}})
        expect(r.get("error", {}).get("data", {}).get("reason") == "unavailable",
               "a policy update of a paused sandbox is refused with unavailable:", r)
        # A snapshot copies the frozen files and leaves it paused.
        snap = rpc_ok(world, "sandbox.snapshot", {"name": name}, timeout=120)
        expect_eq(_freezer(world, name), (True, True), "after a snapshot of the paused sandbox")
        rpc_ok(world, "snapshot.delete", {"id": snap["id"]})
        sb = rpc_ok(world, "sandbox.resume", {"name": name})
        expect_eq(sb["session"]["paused"], False, "sandbox.resume answers the running Sandbox")
        expect_eq(_freezer(world, name), (False, False), "after resume")
        expect_eq(sh(world, name, "test -e /tmp/ghost; echo $?")[1].strip(), "1",
                  "the refused command never ran")
        first = _counter(world, name)
        poll(lambda: _counter(world, name) > first, 10, "the loop to count again after resume")
        # Paused, then deleted: nothing is left (frozen or not).
        rpc_ok(world, "sandbox.pause", {"name": name})
    finally:
        delete(world, name)
    leaks.check(world, name)


def test_pause_of_unknown_or_stopped_sandbox(world):
    r = world.rpc("sandbox.pause", {"name": "no-such-sandbox-x"})
    expect_eq(r.get("error", {}).get("data", {}).get("reason"), "not_found", "pause of an unknown sandbox")
    r = world.rpc("sandbox.resume", {"name": "x", "extra": 1})
    expect_eq(r.get("error", {}).get("code"), -32602, "an unknown parameter of sandbox.resume")


def test_on_timeout_pause_pauses_at_the_expiry_and_resume_gives_a_new_timeout(world):
    """sandbox.setTimeout onTimeout "pause": the expiry freezes the session
    (kept, paused) instead of ending it; a resume after it gives a whole
    timeout from then; onTimeout "stop" ends it again."""
    name, _c, _o, _e = create(world, "autopause", "--deny-all", "--timeout", "10m")
    try:
        bad = world.rpc("sandbox.setTimeout", {"name": name, "timeout": 1000, "onTimeout": "sleep"})
        err = bad.get("error") or {}
        expect(err.get("code") == -32602 and (err.get("data") or {}).get("field") == "onTimeout",
               "onTimeout sleep is refused naming onTimeout:", bad)
        sb = rpc_ok(world, "sandbox.get", {"name": name})
        expect_eq(sb["session"]["onTimeout"], "stop", "session.onTimeout by default")
        sb = rpc_ok(world, "sandbox.setTimeout", {"name": name, "timeout": 1000, "onTimeout": "pause"})
        expect_eq(sb["session"]["onTimeout"], "pause", "session.onTimeout after setTimeout")
        poll(lambda: _freezer(world, name) == (True, True), 30, "the session to be paused at its expiry")
        expect_eq(rpc_ok(world, "sandbox.get", {"name": name})["status"], "running", "status of the paused sandbox")
        expired = rpc_ok(world, "sandbox.get", {"name": name})["expiresAt"]
        sb = rpc_ok(world, "sandbox.resume", {"name": name})
        expect_eq(sb["session"]["paused"], False, "resumed")
        expect(sb["expiresAt"] > expired, "a resume past the expiry gives a new end:", sb["expiresAt"], expired)
        expect_eq(sh_ok(world, name, "echo awake"), "awake\n", "a command after the resume")
        rpc_ok(world, "sandbox.setTimeout", {"name": name, "timeout": 1000, "onTimeout": "stop"})

        def ended():
            r = world.rpc("sandbox.get", {"name": name})
            if "error" in r:
                return "gone"
            return r["result"]["status"] in ("stopped", "failed") and r["result"]["status"]
        expect(poll(ended, 30, "the session to end at its expiry") in ("gone", "stopped"), "ended")
    finally:
        delete(world, name)
    leaks.check(world, name)


def test_a_session_paused_at_its_expiry_is_paused_again_after_a_daemon_restart(world):
    """onTimeout "pause" is kept in the session record: the restart thaws
    the session (as any paused one) and its past expiry pauses it again,
    rather than ending it."""
    name, _c, _o, _e = create(world, "autopause-restart", "--deny-all", "--timeout", "10m")
    try:
        rpc_ok(world, "sandbox.setTimeout", {"name": name, "timeout": 1000, "onTimeout": "pause"})
        poll(lambda: _freezer(world, name) == (True, True), 30, "the session to be paused at its expiry")
        d = world.daemon
        d.stop()
        d.start()
        poll(lambda: _freezer(world, name) == (True, True), 30, "the session paused again after the restart")
        sb = rpc_ok(world, "sandbox.get", {"name": name})
        expect_eq((sb["status"], sb["session"]["onTimeout"]), ("running", "pause"), "after the restart")
        rpc_ok(world, "sandbox.resume", {"name": name})
        expect_eq(sh_ok(world, name, "echo awake"), "awake\n", "a command after the resume")
    finally:
        delete(world, name)
    leaks.check(world, name)
