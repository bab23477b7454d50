"""Persistent sandboxes, resume, getOrCreate and update (DESIGN §3)."""
import json
import os
import signal
import socket
import threading

import leaks
from common import create, delete, expect, expect_eq, get, poll, sandbox, sh, sh_ok


def test_persistent_sandbox_keeps_files_across_stop_and_resumes_on_exec(world):
    name, _c, _o, _e = create(world, "keep", "--deny-all", "--persistent")
    try:
        sh_ok(world, name, "echo kept > /workspace/k && echo home > $HOME/h")
        code, _o, err = world.ctl("stop", name)
        expect_eq(code, 0, "stop exit code (%s)" % err.strip())
        sb, code, _e = get(world, name)
        expect(sb is not None, "a stopped persistent sandbox is still there, exit", code)
        expect_eq(sb["status"], "stopped", "status after stop")
        # Any command on a stopped persistent sandbox starts a new session on it.
        code, out, err = sh(world, name, "cat /workspace/k $HOME/h")
        expect_eq((code, out), (0, "kept\nhome\n"), "files after resume (%s)" % err.strip())
        sb, _c, _e = get(world, name)
        expect_eq((sb["status"], len(sb["sessions"])), ("running", 2), "status and sessions after resume")
    finally:
        delete(world, name)
    leaks.check(world, name)


def test_get_with_resume_starts_a_session(world):
    name, _c, _o, _e = create(world, "resume", "--deny-all", "--persistent")
    try:
        world.ctl("stop", name, check=True)
        sb = world.rpc_result("sandbox.get", {"name": name, "resume": True})
        expect_eq(sb.get("status"), "running", "status from get with resume")
        expect(sb.get("expiresAt") is not None, "a resumed session has an expiry")
    finally:
        delete(world, name)


def test_get_with_resume_on_a_running_sandbox_just_answers(world):
    with sandbox(world, "noresume", "--deny-all") as name:
        r = world.rpc("sandbox.get", {"name": name, "resume": True})
        expect_eq(r.get("result", {}).get("status"), "running", "get resume on a running sandbox")


def test_persistent_sandbox_survives_daemon_restart(world):
    name, _c, _o, _e = create(world, "restart", "--deny-all", "--persistent")
    try:
        sh_ok(world, name, "echo before-restart > /workspace/r")
        d = world.daemon
        d.stop()
        d.start()
        sb, code, err = get(world, name)
        expect(sb is not None, "persistent sandbox after restart: exit", code, err)
        # Live restore: the running session was re-adopted (test_restore.py).
        expect_eq(sb["status"], "running", "status of a running sandbox after a daemon restart")
        world.ctl("stop", name, check=True)
        d.stop()
        d.start()
        sb, code, err = get(world, name)
        expect(sb is not None, "stopped persistent sandbox after restart: exit", code, err)
        expect_eq(sb["status"], "stopped", "status of a stopped sandbox after a daemon restart")
        code, out, err = sh(world, name, "cat /workspace/r")
        expect_eq((code, out), (0, "before-restart\n"), "file after restart (%s)" % err.strip())
    finally:
        delete(world, name)
    leaks.check(world, name)


def test_non_persistent_sandbox_is_gone_when_its_session_ended_while_the_daemon_was_down(world):
    name, _c, _o, _e = create(world, "gone", "--deny-all")
    d = world.daemon
    with open(os.path.join(d.run_dir, "sandboxes", name, "session.json")) as f:
        pid = json.load(f)["pid"]
    os.kill(d.proc.pid, signal.SIGKILL)
    d.proc.wait(10)
    # The sandbox's init (started for this test), by its recorded pid.
    os.kill(pid, signal.SIGKILL)
    poll(lambda: not os.path.exists("/proc/%d/ns" % pid), 10, "the sandbox's init exits")
    d.start()
    _sb, code, _e = get(world, name)
    expect_eq(code, 4, "get of a non-persistent sandbox whose session ended: exit code")
    leaks.check(world, name)


def test_get_or_create_creates_for_exactly_one_of_20_racing_clients(world):
    name = world.name("race")
    results = []
    lock = threading.Lock()
    socket_path = world.daemon.socket

    def client():
        s = socket.socket(socket.AF_UNIX)
        s.settimeout(120)
        s.connect(socket_path)
        f = s.makefile("rwb")
        f.write((json.dumps({"jsonrpc": "2.0", "id": 1, "method": "sandbox.getOrCreate",
                             "params": {"name": name, "networkPolicy": "deny-all"}}) + "\n").encode())
        f.flush()
        r = json.loads(f.readline())
        s.close()
        with lock:
            results.append(r)

    threads = [threading.Thread(target=client) for _ in range(20)]
    try:
        for t in threads:
            t.start()
        for t in threads:
            t.join(150)
        errors = [r for r in results if "error" in r]
        expect(not errors, "getOrCreate errors:", errors[:2])
        created = [r["result"]["created"] for r in results]
        expect_eq((len(created), created.count(True)), (20, 1), "answers and created:true count")
        ids = {r["result"]["sandbox"]["id"] for r in results}
        expect_eq(len(ids), 1, "every caller got the same sandbox")
    finally:
        delete(world, name)
    leaks.check(world, name)


def test_get_or_create_resumes_a_stopped_persistent_sandbox(world):
    name, _c, _o, _e = create(world, "gocres", "--deny-all", "--persistent")
    try:
        sh_ok(world, name, "echo kept > /workspace/k")
        world.ctl("stop", name, check=True)
        r = world.rpc_result("sandbox.getOrCreate", {"name": name, "networkPolicy": "deny-all",
                                                     "persistent": True})
        sb = r["sandbox"]
        expect_eq((r["created"], sb["status"], len(sb["sessions"]), r.get("differs")),
                  (False, "running", 2, []), "getOrCreate of a stopped persistent sandbox: created, status, sessions, differs")
        expect(sb.get("expiresAt") is not None, "the resumed session has an expiry")
        code, out, err = sh(world, name, "cat /workspace/k")
        expect_eq((code, out), (0, "kept\n"), "files of the resumed sandbox (%s)" % err.strip())
    finally:
        delete(world, name)
    leaks.check(world, name)


def test_get_or_create_names_the_params_that_differ(world):
    name, _c, _o, _e = create(world, "gocdiff", "--deny-all", "--timeout", "5m", "--env", "A=1", "--tag", "t=a")
    try:
        r = world.rpc_result("sandbox.getOrCreate", {
            "name": name, "networkPolicy": "allow-all", "timeout": 600000, "env": {"A": "1"},
            "tags": {"t": "b"}, "resources": {"vcpus": 1}, "persistent": False})
        expect_eq((r["created"], sorted(r.get("differs") or [])), (False, ["networkPolicy", "tags", "timeout"]),
                  "created and differs")
        sb = r["sandbox"]
        expect_eq((sb["timeout"], sb["networkPolicy"], sb["tags"]), (300000, "deny-all", {"t": "a"}),
                  "the existing sandbox is answered as it is, unchanged")
        r = world.rpc_result("sandbox.getOrCreate", {"name": name, "networkPolicy": "deny-all", "timeout": 300000})
        expect_eq(r.get("differs"), [], "the same params differ in nothing")
        r = world.rpc_result("sandbox.getOrCreate", {"name": name})
        expect_eq(r.get("differs"), [], "params not given are no difference")
    finally:
        delete(world, name)


def test_update_changes_env_tags_and_extends_timeout(world):
    with sandbox(world, "upd", "--deny-all", "--timeout", "5m") as name:
        before = world.rpc_result("sandbox.get", {"name": name})
        sb = world.rpc_result("sandbox.update", {"name": name, "timeout": 600000,
                                                 "env": {"GREETING": "hi"}, "tags": {"team": "b"}})
        expect_eq((sb["timeout"], sb["env"], sb["tags"]), (600000, {"GREETING": "hi"}, {"team": "b"}),
                  "updated fields")
        expect(sb["expiresAt"] > before["expiresAt"], "a timeout increase extends the running session:",
               before["expiresAt"], sb["expiresAt"])
        code, out, _e = sh(world, name, 'echo "$GREETING"')
        expect_eq((code, out), (0, "hi\n"), "new commands see the updated env")


def test_update_env_replaces_it_and_removed_variables_are_gone(world):
    with sandbox(world, "updenv", "--deny-all", "--env", "TOKEN=secret") as name:
        code, out, _e = sh(world, name, 'echo "[$TOKEN]"')
        expect_eq((code, out), (0, "[secret]\n"), "the env given at create")
        code, _o, err = world.ctl("update", name, "--env", "OTHER=1")
        expect_eq(code, 0, "update --env exit code (%s)" % err.strip())
        code, out, _e = sh(world, name, 'echo "[${TOKEN-unset}] [$OTHER]"')
        expect_eq((code, out), (0, "[unset] [1]\n"), "a variable the update removed is gone from new commands")


def test_update_rejects_bad_values_naming_the_field(world):
    with sandbox(world, "updbad", "--deny-all") as name:
        cases = [({"timeout": 5}, "timeout"),
                 ({"tags": {"a": "1", "b": "2", "c": "3", "d": "4", "e": "5", "f": "6"}}, "tags"),
                 ({"env": {"A": 1}}, "env.A"),
                 ({"networkPolicy": "allow-most"}, "networkPolicy")]
        for params, field in cases:
            params = dict(params, name=name)
            r = world.rpc("sandbox.update", params)
            e = r.get("error") or {}
            expect_eq((e.get("data") or {}).get("field"), field, "data.field for %r" % params)
        sb = world.rpc_result("sandbox.get", {"name": name})
        expect_eq(sb["tags"], {}, "nothing stored after rejected updates")


def test_sandboxctl_update_sets_tags_and_timeout(world):
    with sandbox(world, "updcli", "--deny-all") as name:
        code, _o, err = world.ctl("update", name, "--tag", "team=c", "--timeout", "10m")
        expect_eq(code, 0, "update exit code (%s)" % err.strip())
        sb = world.rpc_result("sandbox.get", {"name": name})
        expect_eq((sb["tags"], sb["timeout"]), ({"team": "c"}, 600000), "tags and timeout after update")
        code, _o, _e = world.ctl("update", world.name("ghost"), "--tag", "a=b")
        expect_eq(code, 4, "update of a missing sandbox: exit code")
