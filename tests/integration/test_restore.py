"""Live restore (DESIGN §2, §7): a restart of sandboxd, by SIGTERM or by
SIGKILL, keeps every running session and its detached commands: the
sandbox still runs, a detached command keeps going and its id still works,
the policy still applies, and a delete afterwards leaves nothing behind."""
import base64
import os
import signal

import leaks
import world as W
from common import create, delete, expect, expect_eq, get, poll, rpc_ok, sh
from test_policy_rules import _policy_file, connect, dns

COUNTER = "i=0; while :; do i=$((i+1)); echo $i > /workspace/n; echo tick-$i; sleep 0.1; done"


def _counter(world, name):
    code, out, _e = sh(world, name, "cat /workspace/n")
    return int(out.strip()) if code == 0 and out.strip().isdigit() else -1


def _restart(world, how):
    d = world.daemon
    old = rpc_ok(world, "daemon.info", {})["pid"]
    if how == "kill":
        os.kill(d.proc.pid, signal.SIGKILL)
        d.proc.wait(10)
    else:
        expect_eq(d.stop(), 0, "sandboxd exit status on SIGTERM")
    d.start()
    expect(rpc_ok(world, "daemon.info", {})["pid"] != old, "a new sandboxd answers")
    with open(d.log_path, errors="replace") as f:
        expect("re-adopted" in f.read(), "the new sandboxd re-adopted the session")


def _survives(world, how, *create_args):
    name, _c, _o, _e = create(world, "rst", *create_args)
    try:
        r = rpc_ok(world, "command.run", {"sandbox": name, "cmd": "sh", "args": ["-c", COUNTER],
                                         "detached": True})
        cmd_id = r["cmdId"]
        poll(lambda: _counter(world, name) > 0, 30, "the counter starts")
        before_sb, _c, _e = get(world, name)
        _restart(world, how)
        sb, code, err = get(world, name)
        expect(sb is not None, "the sandbox after a restart (%s): exit" % how, code, err)
        expect_eq(sb["status"], "running", "status after a restart (%s)" % how)
        expect_eq(sb["sessions"][-1]["id"], before_sb["sessions"][-1]["id"], "the same session")
        expect_eq(sb["expiresAt"], before_sb["expiresAt"], "the same expiry")
        n0 = _counter(world, name)
        poll(lambda: _counter(world, name) > n0, 30, "the counter keeps increasing after the restart")
        code, out, err = sh(world, name, "echo exec-ok")
        expect_eq((code, out), (0, "exec-ok\n"), "exec after the restart (%s)" % err.strip())
        got = rpc_ok(world, "command.get", {"cmdId": cmd_id})
        expect_eq((got["cmdId"], got["exitCode"]), (cmd_id, None), "command.get of the old id")
        poll(lambda: b"tick-" in base64.b64decode(rpc_ok(world, "command.logs", {"cmdId": cmd_id}).get("stdout", "")),
             30, "command.logs of the old id shows new output")
        rpc_ok(world, "command.kill", {"cmdId": cmd_id, "signal": "TERM"})
        fin = rpc_ok(world, "command.wait", {"cmdId": cmd_id}, timeout=30)
        expect_eq(fin["exitCode"], 128 + 15, "exit code of the old command killed after the restart")
        return name
    except BaseException:
        delete(world, name)
        raise


def _finish(world, name):
    code, _o, err = delete(world, name)
    expect_eq(code, 0, "delete after the restart (%s)" % err.strip())
    leaks.check(world, name)


def test_detached_command_survives_sigterm_of_the_daemon(world):
    _finish(world, _survives(world, "term", "--deny-all"))


def test_persistent_sandbox_keeps_running_across_sigkill_of_the_daemon(world):
    _finish(world, _survives(world, "kill", "--deny-all", "--persistent"))


def test_custom_policy_applies_after_restarts(world):
    pol = _policy_file(world, {"allow": ["api.public.test"]})
    for how in ("term", "kill"):
        name = _survives(world, how, "--policy", pol)
        try:
            expect_eq(dns(world, name, "api.public.test")["addrs"], [W.PUB_API_ADDR],
                      "the allowed name resolves after a restart (%s)" % how)
            expect(connect(world, name, W.PUB_API_ADDR)["ok"], "the allowed address connects (%s)" % how)
            expect(not connect(world, name, W.PUB_OTHER_ADDR)["ok"],
                   "an address the policy does not allow is refused (%s)" % how)
        finally:
            _finish(world, name)


def test_commands_do_not_inherit_the_listening_socket_and_its_path_is_root_only(world):
    name, _c, _o, _e = create(world, "rstfd", "--deny-all")
    try:
        # The glob's own directory fd is closed by the time the loop runs.
        code, out, err = sh(world, name, 'for f in /proc/$$/fd/*; do [ -e "$f" ] && echo "${f##*/}"; done; :',
                            "--sudo")
        expect_eq((code, out.split()), (0, ["0", "1", "2"]), "fds of a command (%s)" % err.strip())
        path = os.path.join(world.daemon.run_dir, "sandboxes", name, "agent.sock")
        st = os.stat(path)
        expect_eq((st.st_uid, st.st_mode & 0o777), (0, 0o600), "owner and mode of agent.sock")
        code, _o, _e = sh(world, name, "test -e '%s'" % path, "--sudo")
        expect_eq(code, 1, "the sandbox cannot see agent.sock's path")
    finally:
        _finish(world, name)


def _procs_with(marker):
    pids = []
    for p in os.listdir("/proc"):
        if not p.isdigit():
            continue
        try:
            with open("/proc/%s/cmdline" % p, "rb") as f:
                if marker.encode() in f.read():
                    pids.append(int(p))
        except OSError:
            pass
    return pids


def _exit_survives(world, name, stop_first):
    d = world.daemon
    marker = "exit-marker-%d-%d" % (os.getpid(), int(stop_first))
    r = rpc_ok(world, "command.run", {"sandbox": name, "cmd": "sh", "detached": True,
                                     "args": ["-c", ": %s; sleep 1; exit 7" % marker]})
    cmd_id = r["cmdId"]
    poll(lambda: _procs_with(marker), 10, "the command runs")
    if stop_first:
        # The daemon cannot read: init sends the exit into its socket,
        # then the daemon dies with the event unread.
        os.kill(d.proc.pid, signal.SIGSTOP)
    else:
        os.kill(d.proc.pid, signal.SIGKILL)
    try:
        poll(lambda: not _procs_with(marker), 10, "the command exits")
    finally:
        os.kill(d.proc.pid, signal.SIGKILL)
        d.proc.wait(10)
    d.start()
    got = rpc_ok(world, "command.get", {"cmdId": cmd_id})
    if got.get("exitCode") is None:
        poll(lambda: rpc_ok(world, "command.get", {"cmdId": cmd_id}).get("exitCode") is not None, 10,
             "the exit status arrives after the restart")
        got = rpc_ok(world, "command.get", {"cmdId": cmd_id})
    expect_eq(got.get("exitCode"), 7, "command.get exitCode after the restart")
    fin = rpc_ok(world, "command.wait", {"cmdId": cmd_id}, timeout=30)
    expect_eq(fin.get("exitCode"), 7, "command.wait after the restart")


def test_an_exit_the_killed_daemon_never_read_is_kept_by_init(world):
    name, _c, _o, _e = create(world, "rstexit", "--deny-all")
    try:
        _exit_survives(world, name, True)
        _exit_survives(world, name, False)
        # Finished commands stay known across further restarts: init keeps
        # them until the daemon forgets them.
        first = rpc_ok(world, "command.run", {"sandbox": name, "cmd": "sh", "args": ["-c", "exit 3"]})
        _restart(world, "kill")
        _restart(world, "term")
        got = rpc_ok(world, "command.get", {"cmdId": first["cmdId"]})
        expect_eq(got.get("exitCode"), 3, "a command that finished before two restarts")
        code, out, err = sh(world, name, "echo ok")
        expect_eq((code, out), (0, "ok\n"), "exec after the restarts (%s)" % err.strip())
    finally:
        delete(world, name)


def test_a_command_with_long_arguments_is_still_known_after_a_restart(world):
    name, _c, _o, _e = create(world, "rstlong", "--deny-all")
    try:
        r = rpc_ok(world, "command.run", {"sandbox": name, "cmd": "sh", "detached": True,
                                         "args": ["-c", "sleep 0.5; exit 5", "sh"] + ["a" * 1000] * 8})
        _restart(world, "kill")
        fin = rpc_ok(world, "command.wait", {"cmdId": r["cmdId"]}, timeout=30)
        expect_eq(fin.get("exitCode"), 5, "command.wait of an 8 KB command after a restart")
    finally:
        delete(world, name)
