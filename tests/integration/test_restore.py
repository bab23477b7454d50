"""Live restore (DESIGN §2, §7): a restart of sandboxd, by SIGTERM or by
SIGKILL, keeps every running session and its detached commands: the
sandbox still runs, a detached command keeps going and its id still works,
the policy still applies, and a delete afterwards leaves nothing behind."""
import base64
import json
import os
import re
import signal
import subprocess

import leaks
import world as W
from common import create, delete, expect, expect_eq, get, poll, rpc_ok, sandbox, sh, sh_ok
from test_policy_rules import _policy_file, connect, dns

# Renamed into place: `echo $i > n` empties the file before it writes,
# and a cat in between read nothing.
COUNTER = "i=0; while :; do i=$((i+1)); echo $i > /workspace/n.t; mv /workspace/n.t /workspace/n; echo tick-$i; sleep 0.1; done"


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


def test_a_waited_for_command_survives_sigterm_of_the_daemon(world):
    """A command.run whose caller is still waiting when the daemon exits
    is not hung up (the caller's connection closes only because the daemon
    goes): it runs on and the next daemon reports its exit."""
    name, _c, _o, _e = create(world, "rstw", "--deny-all")
    try:
        with world.daemon.connect() as conn:
            conn.start("command.run", {"sandbox": name, "cmd": "sh", "args": ["-c",
                       "echo up; while [ ! -e /tmp/go ]; do sleep 0.05; done; exit 6"]})
            started = conn.wait_note(lambda n: n.get("method") == "command.started", 30)
            cmd_id = started["params"]["cmdId"]
            conn.wait_note(lambda n: n.get("method") == "command.output", 30)
            _restart(world, "term")
        expect_eq(rpc_ok(world, "command.get", {"cmdId": cmd_id})["exitCode"], None,
                  "the waited-for command after the restart")
        sh_ok(world, name, "touch /tmp/go")
        fin = rpc_ok(world, "command.wait", {"cmdId": cmd_id}, timeout=30)
        expect_eq(fin["exitCode"], 6, "its exit code, reported by the next daemon")
    finally:
        delete(world, name)
    leaks.check(world, name)


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


def _root_names(world, name):
    return {e["name"] for e in rpc_ok(world, "fs.list", {"sandbox": name, "path": "/"})["entries"]}


def test_a_host_runtime_sandbox_that_ran_nothing_keeps_its_root_across_restarts(world):
    # Nothing runs in the sandbox before the restarts: no lookup has cached
    # a dentry of its lower layer, so a runtime replaced under the running
    # overlay shows at once (exit 127, an empty root).
    for how in ("term", "kill"):
        name, _c, _o, _e = create(world, "hrt", "--deny-all")
        try:
            _restart(world, how)
            _restart(world, how)
            code, out, err = world.ctl("exec", name, "--", "/bin/sh", "-c", "echo ok")
            expect_eq((code, out), (0, "ok\n"), "exec /bin/sh after two restarts (%s): %s" % (how, err.strip()))
            names = _root_names(world, name)
            expect({"bin", "etc", "usr", "workspace", "tmp"} <= names, "fs.list / after restarts (%s)" % how,
                   sorted(names))
        finally:
            _finish(world, name)


def test_unused_host_runtime_versions_are_removed_at_start(world):
    host = os.path.join(world.daemon.state_dir, "runtimes", "host")
    versions = [v for v in os.listdir(host) if not v.startswith(".")]
    expect_eq(len(versions), 1, "host runtime versions with no sandbox (%s)" % versions)
    stale = os.path.join(host, "0123456789abcdef")
    os.makedirs(os.path.join(stale, "etc"))
    name, _c, _o, _e = create(world, "hrv", "--deny-all")
    try:
        _restart(world, "kill")
        expect(not os.path.exists(stale), "a host runtime version nothing uses is removed at start")
        expect_eq(os.listdir(host), versions, "the version in use stays")
        expect_eq(sh(world, name, "echo ok")[:2], (0, "ok\n"), "exec after the restart")
    finally:
        _finish(world, name)


def test_a_session_on_the_unversioned_host_runtime_survives_the_upgrade_and_its_tree_goes_after(world):
    # The layout before versions: runtimes/host held the tree itself, and
    # session records named no version. Made here from a running session's
    # own tree (renames move nothing under its overlay).
    name, _c, _o, _e = create(world, "hlg", "--deny-all")
    try:
        d = world.daemon
        expect_eq(d.stop(), 0, "sandboxd exit status on SIGTERM")
        rt = os.path.join(d.state_dir, "runtimes")
        host = os.path.join(rt, "host")
        (ver,) = [v for v in os.listdir(host) if not v.startswith(".")]
        os.rename(os.path.join(host, ver), os.path.join(rt, "old-layout"))
        os.rmdir(host)
        os.rename(os.path.join(rt, "old-layout"), host)
        rec_path = os.path.join(d.run_dir, "sandboxes", name, "session.json")
        rec = _session_record(world, name)
        rec.pop("runtimeVersion", None)
        with open(rec_path, "w") as f:
            json.dump(rec, f)
        # What that layout left when killed between its swap and cleanup.
        os.makedirs(os.path.join(rt, "host.old", "etc"))
        os.makedirs(os.path.join(rt, "host.new", "etc"))
        d.start()
        expect_eq(sorted(os.listdir(host)), sorted(["legacy", "legacy-old", ver]),
                  "host runtime versions after the upgrade")
        expect_eq(sorted(f for f in os.listdir(rt) if f.startswith("host")), ["host"], "host.* leftovers")
        code, out, err = world.ctl("exec", name, "--", "/bin/sh", "-c", "echo ok")
        expect_eq((code, out), (0, "ok\n"), "exec in the old session after the upgrade: %s" % err.strip())
        expect({"bin", "etc", "usr", "workspace"} <= _root_names(world, name), "fs.list / of the old session")
        with sandbox(world, "hlgnew", "--deny-all") as other:
            expect_eq(sh(world, other, "echo ok")[:2], (0, "ok\n"), "a new sandbox on the current version")
    finally:
        _finish(world, name)
    poll(lambda: not os.path.exists(os.path.join(host, "legacy")), 10,
         "the unversioned tree is removed once its last session ended")
    expect(not os.path.exists(os.path.join(host, "legacy-old")), "and so is the tree the old layout left")
    expect_eq(os.listdir(host), [ver], "host runtime versions after the old session ended")


def _counter_now(world, name):
    # Bounded: a frozen sandbox never answers.
    try:
        code, out, _e = world.ctl("exec", name, "--", "cat", "/workspace/n", timeout=10)
    except Exception:
        return -1
    return int(out.strip()) if code == 0 and out.strip().isdigit() else -1


def _crash_at(world, point, method, params, before_start=None):
    """Restarts sandboxd armed with fault `point` (libcore/fault.h), makes
    the request that reaches it, checks that the daemon died there by
    SIGKILL, calls before_start() if given, and starts the plain daemon
    again on the same state."""
    d = world.daemon
    expect_eq(d.stop(), 0, "sandboxd exit status on SIGTERM")
    d.start(binary=W.FAULTS_SANDBOXD, env={"SANDBOXD_FAULT": point})
    msg = None
    try:
        msg = world.rpc(method, params, timeout=60)
    except (ConnectionError, OSError):
        pass
    expect(msg is None, "fault point %s was not reached: %s answered %s" % (point, method, msg))
    d.proc.wait(30)
    expect_eq(d.proc.returncode, -signal.SIGKILL, "sandboxd killed at fault point %s" % point)
    if before_start:
        before_start()
    d.start()


def _state_entries(world, sub):
    """Entries of the state dir's `sub`, less the tombstones of deletes that
    answered and finish in the background (libcore/util.c core_tombstone)."""
    p = os.path.join(world.daemon.state_dir, sub)
    return sorted(e for e in os.listdir(p) if not re.match(r"^\..*\.del-[0-9a-f]{16}$", e)) if os.path.isdir(p) else []


def _frozen(cgroups):
    """Whether a session's cgroups say frozen (cgroup.freeze, else the v1
    freezer)."""
    for d in cgroups:
        for f, yes in (("cgroup.freeze", "1"), ("freezer.state", "FROZEN")):
            try:
                with open(os.path.join(d, f)) as fh:
                    return fh.read().strip() == yes
            except OSError:
                continue
    raise AssertionError("no freezer among the session's cgroups %s" % cgroups)


def _crash_while_frozen(world, point, method, params_of):
    name, _c, _o, _e = create(world, "frz", "--deny-all")
    try:
        rpc_ok(world, "command.run", {"sandbox": name, "cmd": "sh", "args": ["-c", COUNTER], "detached": True})
        poll(lambda: _counter(world, name) > 0, 30, "the counter starts")
        layers, snaps = _state_entries(world, "layers"), _state_entries(world, "snapshots")
        sandboxes = _state_entries(world, "sandboxes")
        cgroups = rpc_ok(world, "sandbox.get", {"name": name})["session"]["cgroups"]
        # The premise of the thaw check below, seen while no daemon runs:
        # the killed one left the session frozen (a tool that thaws other
        # runs' sessions would make the check below fail for nothing).
        _crash_at(world, point, method, params_of(name),
                  before_start=lambda: expect(_frozen(cgroups), "the killed sandboxd left the sandbox frozen:",
                                              cgroups))
        sb, code, err = get(world, name)
        expect(sb is not None and sb["status"] == "running", "the sandbox runs after the restart", code, err)
        n0 = _counter_now(world, name)
        expect(n0 > 0, "a command runs in the sandbox after the restart (it is not frozen)")
        poll(lambda: _counter_now(world, name) > n0, 30, "the counter rises after the restart")
        with open(world.daemon.log_path, errors="replace") as f:
            expect("thawed" in f.read(), "the log says the sandbox was thawed")
        expect_eq(_state_entries(world, "layers"), layers, "layers on disk after the crash")
        expect_eq(_state_entries(world, "snapshots"), snaps, "snapshot records on disk after the crash")
        expect_eq(_state_entries(world, "sandboxes"), sandboxes, "sandbox directories after the crash")
        return name
    except BaseException:
        delete(world, name)
        raise


def test_a_crash_during_fork_of_a_running_sandbox_leaves_it_thawed_and_no_partial_fork(world):
    fork = world.name("frzf")
    name = _crash_while_frozen(world, "fork.frozen", "sandbox.fork",
                               lambda n: {"sourceSandbox": n, "name": fork})
    try:
        listed = [s["name"] for s in rpc_ok(world, "sandbox.list", {})["sandboxes"]]
        expect(fork not in listed, "the interrupted fork is not listed", listed)
        expect_eq(get(world, fork)[1], 4, "sandboxctl get of the interrupted fork: not found")
    finally:
        _finish(world, name)


def test_a_crash_during_snapshot_of_a_running_sandbox_leaves_it_thawed_and_no_partial_snapshot(world):
    name = _crash_while_frozen(world, "snapshot.frozen", "sandbox.snapshot", lambda n: {"name": n})
    try:
        snaps = [s for s in rpc_ok(world, "snapshot.list", {})["snapshots"] if s["sandbox"] == name]
        expect_eq(snaps, [], "snapshots of the sandbox after the interrupted snapshot")
    finally:
        _finish(world, name)


def _session_record(world, name):
    with open(os.path.join(world.daemon.run_dir, "sandboxes", name, "session.json")) as f:
        return json.load(f)


def _resolves(world, name, qname, want):
    try:
        return dns(world, name, qname).get("addrs") == want
    except AssertionError:
        return False


def test_a_killed_netd_is_started_again_evented_and_counted(world):
    pol = _policy_file(world, {"allow": ["api.public.test"]})
    name, _c, _o, _e = create(world, "netdk", "--policy", pol)
    c = world.daemon.connect(30)
    try:
        expect("result" in c.call("events.subscribe", {"sandbox": name, "kinds": ["netd_restarted"]}, 30),
               "subscribe to netd_restarted")
        expect(_resolves(world, name, "api.public.test", [W.PUB_API_ADDR]), "DNS works before the kill")
        sb, _c, _e = get(world, name)
        expect_eq(sb["session"]["netdRestarts"], 0, "netdRestarts of a new session")
        # By the pid the daemon recorded (and that is the daemon's child), never by name.
        pid = _session_record(world, name)["netdPid"]
        with open("/proc/%d/status" % pid) as f:
            ppid = [int(l.split()[1]) for l in f if l.startswith("PPid:")][0]
        expect_eq(ppid, world.daemon.pid, "the recorded netd is the daemon's child")
        os.kill(pid, signal.SIGKILL)
        poll(lambda: _resolves(world, name, "api.public.test", [W.PUB_API_ADDR]), 20,
             "DNS works again after sandbox-netd was killed")
        ev = c.wait_note(lambda n: n.get("method") == "event" and n["params"].get("kind") == "netd_restarted", 20)
        expect_eq((ev["params"]["sandbox"], ev["params"]["restarts"]), (name, 1), "the netd_restarted event")
        sb, _c, _e = get(world, name)
        expect_eq((sb["status"], sb["session"]["netdRestarts"]), ("running", 1), "status and netdRestarts")
        new_pid = _session_record(world, name)["netdPid"]
        expect(new_pid != pid and os.path.exists("/proc/%d" % new_pid), "the record names the new netd")
        expect(connect(world, name, W.PUB_API_ADDR)["ok"], "the allowed address connects after the restart")
        expect(not connect(world, name, W.PUB_OTHER_ADDR)["ok"], "the policy still applies after the restart")
        # HTTP goes through the restarted netd's egress proxy.
        code, out, err = sh(world, name, "curl -sS -m 10 -o /dev/null -w '%{http_code}' http://api.public.test/")
        expect_eq((code, out), (0, "200"), "HTTP through the proxy after the restart (%s)" % err.strip()[:200])
    finally:
        c.close()
        _finish(world, name)


def _start_time(pid):
    """Start time of a live process; None once it has exited (a zombie
    waiting for a reaper that is not ours holds no socket)."""
    try:
        with open("/proc/%d/stat" % pid) as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return None if fields[0] in ("Z", "X") else int(fields[19])
    except (OSError, IndexError, ValueError):
        return None


def _helper_records(helpers, owner):
    out = []
    for f in sorted(os.listdir(helpers)):
        with open(os.path.join(helpers, f)) as fh:
            if json.load(fh).get("owner") == owner:
                out.append(f)
    return out


def test_a_netd_started_but_not_recorded_is_ended_at_the_next_start(world):
    doc = {"allow": ["api.public.test"]}
    name = world.name("orph")
    helpers = os.path.join(world.daemon.run_dir, "helpers")
    left = []

    def note_helpers():
        # The helper records the killed daemon left (written at the spawn).
        for f in os.listdir(helpers) if os.path.isdir(helpers) else []:
            with open(os.path.join(helpers, f)) as fh:
                left.append(json.load(fh))

    made = []
    try:
        _crash_at(world, "netd.started", "sandbox.create", {"name": name, "networkPolicy": doc},
                  before_start=note_helpers)
        owner = "sandbox-netd of sandbox '%s'" % name
        expect_eq([r["owner"] for r in left], [owner], "the killed daemon's helper records")
        for rec in left:
            expect(_start_time(rec["pid"]) != rec["startTime"], "the orphan sandbox-netd is gone after the start")
        expect_eq(_helper_records(helpers, owner), [], "helper records of the interrupted create after the start")
        expect_eq(get(world, name)[1], 4, "the interrupted create is not a sandbox")
        leaks.check(world, name)
        # The next custom-policy sandboxes get the same gateway addresses.
        pol = _policy_file(world, doc)
        for i in range(2):
            other, _c, _o, _e = create(world, "orph%d" % i, "--policy", pol)
            made.append(other)
            expect_eq(dns(world, other, "api.public.test")["addrs"], [W.PUB_API_ADDR],
                      "DNS in a custom-policy sandbox created after the crash")
    finally:
        delete(world, name)
        for other in made:
            _finish(world, other)


def test_recorded_helpers_are_ended_by_pid_and_start_time_at_start(world):
    """The sweep itself, whatever the helper does on its own: a live process
    whose record matches is ended; one whose pid is recorded with another
    start time (the pid was reused) is left alone."""
    helpers = os.path.join(world.daemon.run_dir, "helpers")
    owned = subprocess.Popen(["sleep", "600"])
    reused = subprocess.Popen(["sleep", "600"])
    try:
        for p, st in ((owned, _start_time(owned.pid)), (reused, _start_time(reused.pid) + 1)):
            with open(os.path.join(helpers, "%d.json" % p.pid), "w") as f:
                json.dump({"pid": p.pid, "startTime": st, "owner": "test"}, f)
        d = world.daemon
        expect_eq(d.stop(), 0, "sandboxd exit status on SIGTERM")
        d.start()
        poll(lambda: owned.poll() is not None, 10, "the recorded helper is ended")
        expect_eq(owned.returncode, -signal.SIGKILL, "how the recorded helper ended")
        expect(reused.poll() is None, "a process whose start time does not match the record is left alone")
        expect_eq(_helper_records(helpers, "test"), [], "the planted helper records after the start")
    finally:
        for p in (owned, reused):
            if p.poll() is None:
                p.kill()
            p.wait()


def _crash_during_stopped_captures(world, points):
    for point, method in points:
        name, _c, _o, _e = create(world, "stc", "--deny-all", "--persistent")
        fork = world.name("stcf")
        try:
            sh_ok(world, name, "echo kept > /workspace/keep")
            code, _o, err = world.ctl("stop", name)
            expect_eq(code, 0, "stop (%s)" % err.strip())
            params = {"name": name} if method == "sandbox.snapshot" else {"sourceSandbox": name, "name": fork}
            _crash_at(world, point, method, params)
            sb, code, err = get(world, name)
            expect(sb is not None and sb["status"] == "stopped", "the stopped sandbox after the restart", code, err)
            code, out, err = sh(world, name, "cat /workspace/keep")
            expect_eq((code, out), (0, "kept\n"), "its file after a crash at %s (%s)" % (point, err.strip()))
            snaps = [s for s in rpc_ok(world, "snapshot.list", {})["snapshots"] if s["sandbox"] == name]
            expect_eq(snaps, [], "snapshots after the interrupted %s" % method)
            expect_eq(get(world, fork)[1], 4, "no fork after the interrupted %s" % method)
            expect_eq([f for f in _state_entries(world, "layers") if f.startswith(".")], [],
                      "capture intents left in layers/")
        finally:
            delete(world, fork)
            _finish(world, name)


def test_a_crash_during_snapshot_of_a_stopped_sandbox_keeps_its_files(world):
    # A stopped sandbox on its own disk image (diskMiB) is copied, as a
    # running one: killed after the copy, before the record, it keeps its
    # files and nothing half-made is listed.
    _crash_during_stopped_captures(world, (("snapshot.copied", "sandbox.snapshot"), ("fork.copied", "sandbox.fork")))
    # Without disk images (diskMiB 0) the capture moves the stopped
    # sandbox's upper into layers/ before its config names the new layer:
    # killed in between, the layer is the only copy of its files.
    d = world.daemon
    old = d.config
    try:
        d.config = dict(old or {}, diskMiB=0)
        d.stop()
        d.start()
        _crash_during_stopped_captures(world, (("snapshot.stopped", "sandbox.snapshot"),
                                               ("fork.stopped", "sandbox.fork")))
    finally:
        d.config = old
        d.stop()
        d.start()


def test_a_netd_that_keeps_dying_is_restarted_with_backoff(world):
    pol = _policy_file(world, {"allow": ["api.public.test"]})
    name, _c, _o, _e = create(world, "netdl", "--policy", pol)
    try:
        for i in range(1, 7):
            pid = _session_record(world, name)["netdPid"]
            os.kill(pid, signal.SIGKILL)
            poll(lambda: get(world, name)[0]["session"]["netdRestarts"] == i, 20,
                 "restart %d of a netd killed again and again" % i)
        with open(world.daemon.log_path, errors="replace") as f:
            delays = [int(l.rsplit(" in ", 1)[1].split()[0]) for l in f
                      if name in l and "starting it again in" in l]
        expect_eq(delays, [0, 0, 0, 0, 0, 1000], "delays before each restart (5 at once, then backoff)")
        expect(_resolves(world, name, "api.public.test", [W.PUB_API_ADDR]), "DNS works after the crash loop")
    finally:
        _finish(world, name)


def test_an_imported_runtime_under_a_running_sandbox_stays_across_restarts(world):
    from test_runtimes import _tiny_rootfs_tar, _write_tmp
    rt = world.name("rtrst")
    path = _write_tmp(world, _tiny_rootfs_tar(rt))
    code, _o, err = world.ctl("runtime", "import", rt, path)
    expect_eq(code, 0, "import (%s)" % err.strip())
    name = None
    try:
        name, _c, _o, _e = create(world, "rtu", "--deny-all", "--runtime", rt)
        _restart(world, "kill")
        code, _o, err = world.ctl("runtime", "rm", rt)
        expect(code == 5 and "in use" in err and name in err, "rm under a running sandbox after a restart:",
               code, err.strip())
        code, _o, err = world.ctl("runtime", "import", rt, path)
        expect(code == 5 and "already exists" in err, "re-import under a running sandbox:", code, err.strip())
        code, out, err = world.ctl("exec", name, "--", "/bin/sh", "-c", "cat /etc/runtime-marker")
        expect_eq((code, out), (0, rt + "\n"), "the sandbox still sees its runtime (%s)" % err.strip())
    finally:
        if name:
            _finish(world, name)
        world.ctl("runtime", "rm", rt)


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


def test_commands_of_a_readopted_session_are_never_not_found_before_init_lists_them(world):
    """After a restart the daemon knows a session's commands only once its
    init answers the "list" request. A command.* call in between waits for
    that answer instead of saying not_found (which a client would take as
    final): with the session's init stopped (SIGSTOP) across the restart,
    command.get, command.write and command.wait answer for the command as
    soon as init runs again."""
    name, _c, _o, _e = create(world, "rstlst", "--deny-all")
    pid = None
    try:
        r = rpc_ok(world, "command.run", {"sandbox": name, "cmd": "sh", "detached": True,
                                         "args": ["-c", "read x; exit 6"]})
        cmd_id = r["cmdId"]
        pid = _session_record(world, name)["pid"]
        expect_eq(world.daemon.stop(), 0, "sandboxd exit status on SIGTERM")
        os.kill(pid, signal.SIGSTOP)
        world.daemon.start()
        with world.daemon.connect(30) as c:
            got = c.start("command.get", {"cmdId": cmd_id})
            wrote = c.start("command.write", {"cmdId": cmd_id, "data": base64.b64encode(b"go\n").decode()})
            waited = c.start("command.wait", {"cmdId": cmd_id})
            # Requests of a connection start in order: once this one is
            # answered, the three above were read (and, before the fix,
            # answered not_found). The daemon answers everything else meanwhile.
            probe = c.wait(c.start("sandbox.get", {"name": name}), 30)
            expect_eq(probe.get("result", {}).get("status"), "running",
                      "the sandbox while its init has not listed its commands: %s" % probe)
            os.kill(pid, signal.SIGCONT)
            pid = None
            msg = c.wait(got, 30)
            expect_eq(msg.get("result", {}).get("cmdId"), cmd_id, "command.get before init listed: %s" % msg)
            msg = c.wait(wrote, 30)
            expect("error" not in msg, "command.write before init listed", msg)
            msg = c.wait(waited, 30)
            expect_eq(msg.get("result", {}).get("exitCode"), 6, "command.wait before init listed: %s" % msg)
        # An id that is no command is not_found at once once the lists are in.
        msg = world.rpc("command.get", {"cmdId": "cmd-0000000000000000"}, 10)
        expect_eq(msg.get("error", {}).get("data", {}).get("reason"), "not_found", "an unknown cmdId: %s" % msg)
    finally:
        if pid is not None:
            os.kill(pid, signal.SIGCONT)
        _finish(world, name)
