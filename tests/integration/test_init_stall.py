"""Code in a sandbox cannot wedge its sandbox-init.

Each fs.* operation runs in a child of sandbox-init that takes the sandbox
user's uid (docs/SECURITY.md), and init waited for its answer with a
blocking read. The sandbox user may signal its own uid's processes, so a
command running `kill -STOP -1` in a loop stopped the child of the next
fs.* call and held init forever: that call and every later request of the
sandbox (exec, fs.*, output of running commands, from any client) got no
answer at all. Now init ends a stopped child and the call is answered
with an error that says so; the sandbox goes on. The same for the
children of copies (`cp -r`, fs.writeTar: the copy hung forever) and of
fs.watch (the watch went silent): ended, the copy answered with the
reason, the watch ended as for a watcher the sandbox killed."""
import os

import world as W
from common import expect, expect_eq, rpc_ok, sandbox

# The sandbox user's only other processes are the fs.* children (kill -1
# spares the caller and init); it stops whichever it finds, again and again.
STOPPER = "while :; do kill -STOP -1 2>/dev/null; done"


def _stopped_fs_call(world, name):
    """fs.stat calls until one comes back refused for the stop (each must
    come back at all). Returns that error."""
    found = []

    def one():
        m = world.daemon.rpc("fs.stat", {"sandbox": name, "path": "/workspace"}, timeout=60)
        if "error" in m:
            found.append(m["error"])
            return True
        return False
    W.World.wait_until(one, 120, "an fs.stat whose child the sandbox stopped", interval=0)
    return found[0]


def _check(world, userns_flag):
    with sandbox(world, "stall", "--deny-all", userns_flag) as name, world.daemon.connect(120) as c:
        stopper = c.result("command.run", {"sandbox": name, "cmd": "sh", "args": ["-c", STOPPER],
                                           "detached": True})["cmdId"]
        try:
            err = _stopped_fs_call(world, name)
            expect("stopped the file operation" in err.get("message", "") and "STOP" in err.get("message", ""),
                   "the refusal names the stop:", str(err)[:300])
        finally:
            c.result("command.kill", {"cmdId": stopper})
        c.result("command.wait", {"cmdId": stopper}, 60)
        # The sandbox goes on: files, commands, from another client.
        code, out, e = world.ctl("exec", name, "--", "echo", "alive", timeout=60)
        expect_eq((code, out), (0, "alive\n"), "exec after the stop (%s)" % e.strip())
        r = rpc_ok(world, "fs.stat", {"sandbox": name, "path": "/workspace"})
        expect_eq(r.get("type"), "directory", "fs.stat after the stop")


def test_a_stopped_file_operation_never_wedges_init_without_a_user_namespace(world):
    _check(world, "--no-userns")
test_a_stopped_file_operation_never_wedges_init_without_a_user_namespace.timeout = 300


def test_a_stopped_file_operation_never_wedges_init_with_a_user_namespace(world):
    u = world.rpc_result("daemon.info").get("capabilities", {}).get("userns") or {}
    if not u.get("available"):
        raise W.Skip("user namespaces are not available here")
    _check(world, "--userns")
test_a_stopped_file_operation_never_wedges_init_with_a_user_namespace.timeout = 300


def _with_stopper(world, name, conn):
    return conn.result("command.run", {"sandbox": name, "cmd": "sh", "args": ["-c", STOPPER],
                                       "detached": True})["cmdId"]


def test_a_copy_whose_child_the_sandbox_stops_is_answered_with_the_reason(world):
    src = os.path.join(world.tmp, "stall-tree")
    os.makedirs(src, exist_ok=True)
    for i in range(64):
        with open(os.path.join(src, "f%d" % i), "wb") as f:
            f.write(os.urandom(64 << 10))
    with sandbox(world, "stallcp", "--deny-all") as name, world.daemon.connect(120) as c:
        stopper = _with_stopper(world, name, c)
        try:
            code, _o, err = world.ctl("cp", "-r", src, "%s:/workspace/t" % name, timeout=120)
            expect_eq(code, 1, "cp -r while the sandbox stops its copy (%s)" % err.strip())
            expect("stopped the copy" in err and "STOP" in err, "the error names the stop:", err.strip())
        finally:
            c.result("command.kill", {"cmdId": stopper})
        c.result("command.wait", {"cmdId": stopper}, 60)
        code, _o, err = world.ctl("cp", "-r", src, "%s:/workspace/t2" % name, timeout=120)
        expect_eq(code, 0, "cp -r once nothing stops it (%s)" % err.strip())
test_a_copy_whose_child_the_sandbox_stops_is_answered_with_the_reason.timeout = 300


def test_a_watch_whose_watcher_the_sandbox_stops_ends(world):
    with sandbox(world, "stallw", "--deny-all") as name, world.daemon.connect(120) as c:
        rid = c.start("fs.watch", {"sandbox": name, "path": "/workspace", "recursive": False})
        c.wait_note(lambda n: n.get("method") == "fs.watchStarted" and n["params"].get("requestId") == rid,
                    timeout=60)
        stopper = _with_stopper(world, name, c)
        try:
            ans = c.wait(rid, timeout=60)
            expect_eq(ans.get("result", {}).get("reason"), "ended", "the watch once its watcher was stopped: %s"
                      % str(ans)[:300])
        finally:
            c.result("command.kill", {"cmdId": stopper})
test_a_watch_whose_watcher_the_sandbox_stops_ends.timeout = 300
