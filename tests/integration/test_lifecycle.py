"""Sandbox lifecycle: create/get/list, timeout, stop, delete leaves nothing."""
import json

import leaks
from common import create, delete, expect, expect_eq, get, poll, sandbox, sh_ok


def test_create_get_list_delete(world):
    name, _c, out, _e = create(world, "basic", "--deny-all", "--tag", "team=a")
    try:
        sb = json.loads(out)
        expect_eq((sb.get("name"), sb.get("status")), (name, "running"), "create result")
        expect_eq(sb.get("networkPolicy"), "deny-all", "networkPolicy")
        got, code, err = get(world, name)
        expect(got is not None, "get failed:", code, err)
        expect_eq(got.get("id"), sb.get("id"), "id from get")
        code, out, err = world.ctl("--json", "ls")
        expect_eq(code, 0, "ls exit code (%s)" % err.strip())
        expect(name in out, "ls does not list", name)
    finally:
        code, _o, err = delete(world, name)
    expect_eq(code, 0, "rm exit code (%s)" % err.strip())
    _g, code, _e = get(world, name)
    expect_eq(code, 4, "get after rm: exit code (not found)")
    leaks.check(world, name)


def test_create_duplicate_name_conflicts(world):
    with sandbox(world, "dup", "--deny-all") as name:
        code, _o, err = world.ctl("create", "--name", name, "--deny-all")
        expect_eq(code, 5, "exit code of a second create with the same name (%s)" % err.strip())


def test_unknown_sandbox_is_not_found(world):
    code, _o, _e = world.ctl("exec", world.name("ghost"), "--", "true")
    expect_eq(code, 4, "exec into a missing sandbox: exit code")


def test_sandbox_timeout_stops_session(world):
    name, _c, _o, _e = create(world, "timeout", "--deny-all", "--timeout", "2s")
    try:
        def stopped():
            sb, code, _err = get(world, name)
            if sb is None:
                return code == 4 and "gone"  # non-persistent: deleted when its session ends
            return sb.get("status") in ("stopped", "failed") and sb["status"]
        state = poll(stopped, 30, "sandbox %s to stop after its 2 s timeout" % name)
        expect(state in ("gone", "stopped"), "state after timeout:", state)
        code, _o, _e = world.ctl("exec", name, "--", "true")
        expect(code != 0, "exec after the timeout should fail")
    finally:
        delete(world, name)
    leaks.check(world, name)


def test_set_timeout_moves_the_end_earlier_and_later(world):
    """sandbox.setTimeout: the running session ends `timeout` ms from now,
    before the end it had (which sandbox.update's timeout and
    extendTimeout never do) or after it."""
    name, _c, out, _e = create(world, "settimeout", "--deny-all", "--timeout", "10m")
    try:
        first = json.loads(out)["expiresAt"]
        later = world.rpc_result("sandbox.setTimeout", {"name": name, "timeout": 1200000})
        expect(later["expiresAt"] > first, "setTimeout 20m: expiresAt", later["expiresAt"], "not after", first)
        expect_eq(later.get("timeout"), json.loads(out).get("timeout"), "the sandbox's own timeout (unchanged)")
        bad = world.rpc("sandbox.setTimeout", {"name": name, "timeout": 500})
        expect_eq((bad.get("error") or {}).get("code"), -32602, "setTimeout 500 ms: error")
        expect("timeout" in json.dumps(bad["error"]), "the error names timeout:", bad["error"])
        sooner = world.rpc_result("sandbox.setTimeout", {"name": name, "timeout": 1000})
        expect(sooner["expiresAt"] < first, "setTimeout 1 s: expiresAt", sooner["expiresAt"], "not before", first)

        def ended():
            sb, code, _err = get(world, name)
            if sb is None:
                return code == 4 and "gone"
            return sb.get("status") in ("stopped", "failed") and sb["status"]
        state = poll(ended, 30, "sandbox %s to end 1 s after setTimeout" % name)
        expect(state in ("gone", "stopped"), "state after the new end:", state)
        gone = world.rpc("sandbox.setTimeout", {"name": name, "timeout": 60000})
        expect((gone.get("error") or {}).get("data", {}).get("reason") in ("not_found", "sandbox_stopped"),
               "setTimeout of an ended sandbox:", gone)
    finally:
        delete(world, name)
    leaks.check(world, name)


def test_delete_with_running_commands_leaves_nothing(world):
    name, _c, _o, _e = create(world, "leak", "--allow-all")
    try:
        world.ctl("exec", "--detach", name, "--", "sleep", "300", check=True)
        world.ctl("exec", "--detach", name, "--", "sh", "-c", "sleep 300 & sleep 300", check=True)
        sh_ok(world, name, "echo x > /workspace/f")
    finally:
        code, _o, err = delete(world, name)
    expect_eq(code, 0, "rm exit code (%s)" % err.strip())
    leaks.check(world, name)


def test_stop_then_get(world):
    name, _c, _o, _e = create(world, "stop", "--deny-all")
    try:
        code, _o, err = world.ctl("stop", name)
        expect_eq(code, 0, "stop exit code (%s)" % err.strip())
        sb, code, _e = get(world, name)
        expect(sb is None or sb.get("status") in ("stopped", "failed"),
               "status after stop:", sb and sb.get("status"))
    finally:
        delete(world, name)
    leaks.check(world, name)


def test_lifecycle_changes_are_events(world):
    name = world.name("lifeevents")
    c = world.daemon.connect(30)
    try:
        r = c.call("events.subscribe", {"sandbox": name, "kinds": ["sandbox"]}, 30)
        expect("result" in r, "subscribe:", r)
        code, _o, err = world.ctl("create", "--name", name, "--deny-all")
        expect_eq(code, 0, "create (%s)" % err.strip())
        seen = []

        def status(want):
            return lambda n: (n.get("method") == "event" and
                              (seen.append(n["params"].get("status")) or n["params"].get("status") == want))
        c.wait_note(status("running"), 10)
        delete(world, name)
        c.wait_note(status("deleted"), 10)
        expect("stopped" in seen, "a stopped event before deleted:", seen)
    finally:
        c.close()
        delete(world, name)


def test_delete_answers_then_the_name_is_free_and_its_files_go(world):
    """Delete answers once the sandbox is renamed aside (its files are
    removed after, in the background): a create of the same name right after
    the answer gets a fresh sandbox that holds nothing of the old one, and the
    old one's tombstone and disk image go."""
    import os
    import re
    name = world.name("reuse")
    state = os.path.join(world.daemon.state_dir, "sandboxes")
    tomb = re.compile(r"^\.%s\.del-[0-9a-f]{16}$" % re.escape(name))
    with world.daemon.connect(120) as c:
        c.result("sandbox.create", {"name": name, "networkPolicy": "deny-all", "persistent": True})
        try:
            r = c.result("command.run", {"sandbox": name, "cmd": "sh", "args": ["-c",
                         "head -c 8M /dev/zero > /workspace/old && echo kept > /workspace/mark"]})
            expect_eq(r.get("exitCode"), 0, "writing the first sandbox's files")
            c.result("sandbox.delete", {"name": name})
            c.result("sandbox.create", {"name": name, "networkPolicy": "deny-all"})
            c.notes.clear()
            r = c.result("command.run", {"sandbox": name, "cmd": "sh", "args": ["-c",
                         "ls -A /workspace; test ! -e /workspace/mark"]})
            expect_eq(r.get("exitCode"), 0, "the new sandbox of the same name holds none of the old one's files")
        finally:
            c.call("sandbox.delete", {"name": name})
    poll(lambda: not [e for e in os.listdir(state) if e == name or tomb.match(e)], 30,
         "the deleted sandboxes' directories and tombstones to go")
    leaks.check(world, name)


def test_recreate_at_once_gets_a_whole_session(world):
    """Delete answers before the session's cgroup, nftables objects and veth
    are gone (they go in the background): a create of the same name right
    after the answer, again and again, gets a session of its own that keeps
    running and reaches the network its policy allows; the old session's
    removal never takes a piece of the new one, and nothing is left."""
    import os
    name = world.name("again")
    with world.daemon.connect(120) as c:
        try:
            for i in range(6):
                c.result("sandbox.create", {"name": name, "networkPolicy": "allow-all"})
                c.notes.clear()
                # A command that runs while the previous session's removal
                # may still be under way, then one after it.
                r = c.result("command.run", {"sandbox": name, "cmd": "sh", "args": ["-c",
                             "echo %d > /workspace/n && cat /workspace/n" % i]})
                c.notes.clear()
                expect_eq(r.get("exitCode"), 0, "round %d: a command in the new session" % i)
                got = c.result("sandbox.get", {"name": name})
                expect_eq(got.get("status"), "running", "round %d: the new session's status" % i)
                # Its cgroup (the host's view): there, with its init in it.
                sess = got.get("session") or {}
                dirs = sess.get("cgroups") or []
                expect(dirs, "round %d: no cgroups in sandbox.get: %r" % (i, got))
                for d in dirs:
                    with open(os.path.join(d, "cgroup.procs")) as f:
                        procs = f.read().split()
                    expect(str(sess.get("initPid")) in procs,
                           "round %d: init %s is not in its cgroup %s (%r)" % (i, sess.get("initPid"), d, procs))
                c.result("sandbox.delete", {"name": name})
        finally:
            c.call("sandbox.delete", {"name": name})
    leaks.check(world, name)
