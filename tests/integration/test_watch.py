"""fs.watch: file change notifications from inside a sandbox (inotify in a
child of sandbox-init confined as the sandbox user), streamed as
fs.watchEvent notifications until request.cancel or the sandbox stops."""
import json
import os
import signal
import socket
import subprocess
import time

import world as W
from common import (MANY_FILES_DISK_MIB, create, delete, expect, expect_eq, sandbox, sandbox_rpc, sandbox_user_ids,
                    sh_ok)


def _start(conn, name, path, recursive=True):
    """Starts a watch on conn and waits until its watches are in place."""
    rid = conn.start("fs.watch", {"sandbox": name, "path": path, "recursive": recursive})
    started = conn.wait_note(lambda n: n.get("method") == "fs.watchStarted"
                             and n["params"].get("requestId") == rid, timeout=60)
    return rid, started["params"]["watchId"]


def _events(conn, wid):
    return [n["params"] for n in conn.notes
            if n.get("method") == "fs.watchEvent" and n["params"].get("watchId") == wid]


def _wait_event(conn, wid, pred, what, timeout=60):
    """Waits for an event of watch wid matching pred (every message stays in
    conn.notes; each is looked at once)."""
    for e in _events(conn, wid):
        if pred(e):
            return e
    deadline = time.monotonic() + timeout
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            raise AssertionError("no %s; events so far: %s" % (what, json.dumps(_events(conn, wid)[-20:])[:1500]))
        try:
            msg = conn.read_msg(left)
        except TimeoutError:
            continue  # the deadline above says what was missing
        if msg is None:
            raise AssertionError("sandboxd closed the connection waiting for %s" % what)
        if isinstance(msg, dict) and "id" in msg and ("result" in msg or "error" in msg):
            conn.responses[msg["id"]] = msg
            continue
        conn.notes.append(msg)
        if msg.get("method") == "fs.watchEvent" and msg["params"].get("watchId") == wid and pred(msg["params"]):
            return msg["params"]


def _has(t, path, is_dir=None, old=None):
    return lambda e: e["type"] == t and e.get("path") == path and (is_dir is None or e["isDir"] == is_dir) \
        and (old is None or e.get("oldPath") == old)


def _sees_changes(world, *create_args):
    with sandbox(world, "watch", "--deny-all", *create_args) as name:
        with world.daemon.connect() as conn:
            rid, wid = _start(conn, name, "/workspace")
            sh_ok(world, name, "echo hi > /workspace/a.txt")
            _wait_event(conn, wid, _has("created", "/workspace/a.txt", False), "created a.txt")
            _wait_event(conn, wid, _has("modified", "/workspace/a.txt", False), "modified a.txt")
            sh_ok(world, name, "mv /workspace/a.txt /workspace/b.txt")
            _wait_event(conn, wid, _has("renamed", "/workspace/b.txt", False, "/workspace/a.txt"),
                        "renamed a.txt to b.txt")
            sh_ok(world, name, "rm /workspace/b.txt")
            _wait_event(conn, wid, _has("deleted", "/workspace/b.txt", False), "deleted b.txt")
            # Files made right after mkdir are reported: the new directory is
            # scanned once its watch is in place.
            sh_ok(world, name, "mkdir -p /workspace/d/e && echo x > /workspace/d/e/f.txt")
            _wait_event(conn, wid, _has("created", "/workspace/d", True), "created d")
            _wait_event(conn, wid, _has("created", "/workspace/d/e/f.txt", False), "created d/e/f.txt")
            sh_ok(world, name, "echo y > /workspace/d/e/g.txt")
            _wait_event(conn, wid, _has("created", "/workspace/d/e/g.txt", False), "created d/e/g.txt later")
            sh_ok(world, name, "mv /workspace/d /workspace/d2 && echo z > /workspace/d2/e/h.txt")
            _wait_event(conn, wid, _has("renamed", "/workspace/d2", True, "/workspace/d"), "renamed d to d2")
            _wait_event(conn, wid, _has("created", "/workspace/d2/e/h.txt", False),
                        "created in the renamed directory, under its new path")
            for e in _events(conn, wid):
                expect(e.get("path", "/").startswith("/workspace") or e["type"] == "overflow",
                       "every path is the sandbox's own:", e)
            cancel = conn.call("request.cancel", {"id": rid})
            expect_eq(cancel.get("result"), {"cancelled": True}, "request.cancel of the watch")
            ans = conn.wait(rid, timeout=60)
            expect_eq(ans.get("error", {}).get("code"), -32800, "the cancelled watch's answer: %s" % ans)
            # Its watcher is gone: nothing more comes for it.
            n = len(_events(conn, wid))
            sh_ok(world, name, "touch /workspace/after-cancel")
            probe = conn.call("daemon.info", {})
            expect("result" in probe, "daemon.info after the cancel")
            expect_eq(len(_events(conn, wid)), n, "events after the cancel")


def test_watch_sees_create_write_rename_delete_and_new_subdirectories(world):
    _sees_changes(world)


def test_watch_in_a_sandbox_with_and_without_a_user_namespace(world):
    if not world.rpc_result("daemon.info")["capabilities"]["userns"].get("available", True):
        raise W.Skip("no user namespaces here")
    for flag in ("--userns", "--no-userns"):
        with sandbox(world, "watchu", "--deny-all", flag) as name:
            with world.daemon.connect() as conn:
                rid, wid = _start(conn, name, "/workspace", recursive=False)
                sh_ok(world, name, "touch /workspace/u.txt")
                _wait_event(conn, wid, _has("created", "/workspace/u.txt", False), "created u.txt (%s)" % flag)
                # The watcher runs as the sandbox user: a directory only
                # root may read cannot be watched.
                sh_ok(world, name, "mkdir /workspace/private && chmod 700 /workspace/private", "--sudo")
                bad = conn.call("fs.watch", {"sandbox": name, "path": "/workspace/private/x"})
                expect("error" in bad, "watching under a root-only directory fails (%s):" % flag, bad)
                conn.call("request.cancel", {"id": rid})
                expect_eq(conn.wait(rid)["error"]["code"], -32800, "cancel (%s)" % flag)


def test_watch_ends_with_a_final_answer_when_the_sandbox_stops(world):
    name, _c, _o, _e = create(world, "watchstop", "--deny-all", "--persistent")
    try:
        with world.daemon.connect() as conn:
            rid, wid = _start(conn, name, "/workspace")
            sh_ok(world, name, "touch /workspace/before-stop")
            _wait_event(conn, wid, _has("created", "/workspace/before-stop"), "created before-stop")
            code, _o, err = world.ctl("stop", name)
            expect_eq(code, 0, "stop (%s)" % err.strip())
            ans = conn.wait(rid, timeout=60)
            expect_eq(ans.get("result", {}).get("reason"), "sandbox_stopped", "the final answer: %s" % ans)
            expect(ans["result"]["events"] >= 1, "the final answer counts the events:", ans)
    finally:
        delete(world, name)


def test_watch_errors_and_limits(world):
    with sandbox(world, "watchbad", "--deny-all") as name:
        with world.daemon.connect() as conn:
            msg = conn.call("fs.watch", {"sandbox": name, "path": "/workspace/missing"})
            expect_eq(msg.get("error", {}).get("data", {}).get("reason"), "not_found", "a missing path: %s" % msg)
            msg = conn.call("fs.watch", {"sandbox": name, "path": "/workspace", "recursiv": True})
            expect_eq(msg.get("error", {}).get("data", {}).get("field"), "recursiv", "an unknown key: %s" % msg)
            msg = conn.call("fs.watch", {"sandbox": name, "path": "x" * 5000})
            expect_eq(msg.get("error", {}).get("code"), -32602, "a path too long: %s" % msg)
            rids = [_start(conn, name, "/workspace", recursive=False)[0] for _ in range(16)]
            msg = conn.call("fs.watch", {"sandbox": name, "path": "/workspace"})
            expect_eq(msg.get("error", {}).get("data", {}).get("reason"), "limit_exceeded",
                      "the 17th watch of a sandbox: %s" % msg)
            for rid in rids:
                conn.call("request.cancel", {"id": rid})
            for rid in rids:
                expect_eq(conn.wait(rid)["error"]["code"], -32800, "cancel of each watch")
            _start(conn, name, "/workspace", recursive=False)  # room again


def test_watch_reports_overflow_when_the_client_does_not_keep_up(world):
    with sandbox_rpc(world, "watchflood", resources={"diskMiB": MANY_FILES_DISK_MIB}) as name:
        conn = world.daemon.connect()
        try:
            conn.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
            rid, wid = _start(conn, name, "/workspace")
            # Long names make each event about 300 bytes: 40000 of them are
            # far more than the connection's 4 MiB high-water mark while this
            # client reads nothing.
            flood = ("import os\n"
                     "os.mkdir('/workspace/flood')\n"
                     "for i in range(40000):\n"
                     "    open('/workspace/flood/%06d-' % i + 'x' * 200, 'w').close()\n")
            code, _o, err = world.ctl("exec", name, "--", "python3", "-c", flood, timeout=300)
            expect_eq(code, 0, "the flood (%s)" % err.strip()[:300])
            ov = _wait_event(conn, wid, lambda e: e["type"] == "overflow", "an overflow event", timeout=120)
            expect(ov.get("reason") in ("client", "queue", "kernel"), "overflow reason:", ov)
            # Once this client reads again, the watch goes on as before.
            sh_ok(world, name, "touch /workspace/after-flood")
            _wait_event(conn, wid, _has("created", "/workspace/after-flood"), "an event after the overflow",
                        timeout=120)
            conn.call("request.cancel", {"id": rid})
            expect_eq(conn.wait(rid, timeout=60)["error"]["code"], -32800, "cancel after the flood")
        finally:
            conn.close()


def test_sandboxctl_fs_watch_prints_lines_until_interrupted(world):
    with sandbox(world, "watchcli", "--deny-all") as name:
        argv = [W.SANDBOXCTL, "--socket", world.daemon.socket, "fs", "watch", name + ":/workspace", "-r"]
        for json_mode in (False, True):
            p = subprocess.Popen(argv[:3] + (["--json"] if json_mode else []) + argv[3:],
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE)
            try:
                # Once its watches are in place fs watch says so on stderr.
                first = p.stderr.readline().decode()
                expect(first.startswith("watching "), "first line of fs watch on stderr:", first)
                sh_ok(world, name, "touch /workspace/cli-%d.txt" % json_mode)
                want = "/workspace/cli-%d.txt" % json_mode
                line = ""
                deadline = time.monotonic() + 60
                while want not in line and time.monotonic() < deadline:
                    line = p.stdout.readline().decode()
                    if not line:
                        break
                if json_mode:
                    obj = json.loads(line)
                    expect_eq((obj["type"], obj["path"], obj["isDir"]), ("created", want, False), "--json line")
                else:
                    expect_eq(line, "created file %s\n" % want, "the line of fs watch")
                p.send_signal(signal.SIGINT)
                expect_eq(p.wait(30), 130, "fs watch exits 130 on Ctrl-C")
            finally:
                if p.poll() is None:
                    p.kill()
                    p.wait()


def _watchers(world, name):
    """Processes of the sandbox named like sandbox-init (exec'd from a
    memfd: "memfd:sandbox-i") other than PID 1: the watcher children (a
    forked copy of init, confined)."""
    out = sh_ok(world, name, "for p in /proc/[0-9]*; do [ \"${p#/proc/}\" = 1 ] || "
                "cat $p/comm 2>/dev/null; done")
    return sum(1 for c in out.split() if "sandbox-i" in c)


def test_a_cancel_or_a_daemon_restart_leaves_no_watcher_running(world):
    name, _c, _o, _e = create(world, "watchgone", "--deny-all")
    try:
        with world.daemon.connect() as conn:
            rid, _wid = _start(conn, name, "/workspace")
            expect_eq(_watchers(world, name), 1, "one watcher while the watch runs")
            # It runs as the sandbox user, not root.
            uid = sandbox_user_ids(world)[0]
            ids = sh_ok(world, name, "for p in /proc/[0-9]*; do [ \"${p#/proc/}\" = 1 ] || "
                        "{ grep -q sandbox-i $p/comm 2>/dev/null && grep '^Uid:' $p/status; }; done; true").split()
            expect_eq(ids, ["Uid:"] + [str(uid)] * 4, "the watcher's real, effective, saved and fs uid")
            conn.call("request.cancel", {"id": rid})
            expect_eq(conn.wait(rid)["error"]["code"], -32800, "the cancelled watch")
        W.World.wait_until(lambda: _watchers(world, name) == 0, 30, "the watcher gone after the cancel")
        conn = world.daemon.connect()
        try:
            _start(conn, name, "/workspace")
            d = world.daemon
            os.kill(d.proc.pid, signal.SIGKILL)
            d.proc.wait(10)
            d.start()
            expect(conn.read_msg(30) is None, "the watch's connection closed with the daemon")
        finally:
            conn.close()
        W.World.wait_until(lambda: _watchers(world, name) == 0, 30, "the watcher gone after the restart")
        with world.daemon.connect() as conn2:
            _start(conn2, name, "/workspace")  # watches work with the new daemon
    finally:
        delete(world, name)


def test_a_watched_file_reports_writes_and_the_watch_ends_when_it_is_deleted(world):
    with sandbox(world, "watchfile", "--deny-all") as name:
        sh_ok(world, name, "echo 1 > /workspace/f.txt")
        with world.daemon.connect() as conn:
            rid, wid = _start(conn, name, "f.txt", recursive=False)  # relative: under /workspace
            sh_ok(world, name, "echo 2 >> /workspace/f.txt")
            _wait_event(conn, wid, _has("modified", "/workspace/f.txt", False), "modified f.txt")
            sh_ok(world, name, "rm /workspace/f.txt")
            _wait_event(conn, wid, _has("deleted", "/workspace/f.txt", False), "deleted f.txt")
            ans = conn.wait(rid, timeout=60)
            expect_eq(ans.get("result", {}).get("reason"), "deleted", "the answer once the path went: %s" % ans)


def _children(pid):
    """Host pids of pid's children (from every /proc/P/stat's ppid)."""
    out = set()
    for p in os.listdir("/proc"):
        if not p.isdigit():
            continue
        try:
            with open("/proc/%s/stat" % p) as f:
                st = f.read()
        except OSError:
            continue
        if int(st[st.rindex(")") + 2:].split()[1]) == pid:
            out.add(int(p))
    return out


def _state(pid):
    try:
        with open("/proc/%d/stat" % pid) as f:
            st = f.read()
    except OSError:
        return None
    return st[st.rindex(")") + 2:].split()[0]


def test_a_watcher_and_another_child_ending_in_one_wakeup_of_init(world):
    """sandbox-init handles a batch of ready events in one go: when the
    batch's SIGCHLD reaps a watcher whose pipe is also in the batch, the
    watch ends once, with its final answer, and init goes on serving (it
    once freed the watch under the pipe's pending event and crashed). The
    order is made by stopping init (SIGSTOP) while a command, then the
    watcher, are killed from the host."""
    with sandbox(world, "watchbatch", "--deny-all") as name:
        init_pid = world.rpc_result("sandbox.get", {"name": name})["session"]["initPid"]
        with world.daemon.connect() as conn:
            before = _children(init_pid)
            rid, _wid = _start(conn, name, "/workspace", recursive=False)
            watcher = _children(init_pid) - before
            expect_eq(len(watcher), 1, "new children of init with the watch (%s)" % watcher)
            ran = conn.result("command.run", {"sandbox": name, "cmd": "sleep", "args": ["600"], "detached": True})
            world.wait_until(lambda: len(_children(init_pid) - before - watcher) == 1, 60, "the sleep command's process")
            (cmd,) = _children(init_pid) - before - watcher
            (watcher,) = watcher
            os.kill(init_pid, signal.SIGSTOP)
            try:
                world.wait_until(lambda: _state(init_pid) == "T", 60, "sandbox-init stopped")
                os.kill(cmd, signal.SIGKILL)
                world.wait_until(lambda: _state(cmd) == "Z", 60, "the command a zombie")
                os.kill(watcher, signal.SIGKILL)
                world.wait_until(lambda: _state(watcher) == "Z", 60, "the watcher a zombie")
            finally:
                os.kill(init_pid, signal.SIGCONT)
            ans = conn.wait(rid, timeout=60)
            expect_eq(ans.get("result", {}).get("reason"), "ended", "the killed watcher's answer: %s" % ans)
            ex = conn.result("command.wait", {"cmdId": ran["cmdId"]}, timeout=60)
            expect_eq(ex.get("exitCode"), 137, "the killed command's exit: %s" % ex)
        expect_eq(sh_ok(world, name, "echo alive"), "alive\n", "a command after the batch")
        with world.daemon.connect() as conn:
            _start(conn, name, "/workspace")


def test_a_watch_is_answered_when_sandbox_init_dies(world):
    """A sandbox whose init dies unexpectedly (killed from the host) ends
    its watches with a final answer, like a stop: none is left waiting."""
    with sandbox(world, "watchdie", "--deny-all") as name:
        init_pid = world.rpc_result("sandbox.get", {"name": name})["session"]["initPid"]
        with world.daemon.connect() as conn:
            rid, _wid = _start(conn, name, "/workspace")
            other = _start(conn, name, "/workspace", recursive=False)[0]
            conn.call("request.cancel", {"id": other})
            os.kill(init_pid, signal.SIGKILL)
            ans = conn.wait(rid, timeout=60)
            expect_eq(ans.get("result", {}).get("reason"), "sandbox_stopped", "the watch's answer: %s" % ans)
            ans = conn.wait(other, timeout=60)
            expect_eq(ans.get("error", {}).get("code"), -32800, "the cancelled watch's answer: %s" % ans)

def test_a_watch_whose_watcher_the_sandbox_kills_ends_with_reason_ended(world):
    """The watcher runs as the sandbox user, so that user can kill it: the
    watch then answers {"reason": "ended"} (docs/API.md fs.watch)."""
    with sandbox(world, "watchkill", "--deny-all") as name:
        with world.daemon.connect() as conn:
            rid, _wid = _start(conn, name, "/workspace", recursive=False)
            sh_ok(world, name, "for p in /proc/[0-9]*; do n=${p#/proc/}; [ $n = 1 ] && continue; "
                  "grep -q sandbox-i $p/comm 2>/dev/null && kill $n; done; true")
            ans = conn.wait(rid, timeout=60)
            expect_eq(ans.get("result", {}).get("reason"), "ended", "the answer once the watcher died: %s" % ans)


def test_watch_events_carry_the_exact_bytes_of_names_that_are_not_utf8(world):
    """Two names that differ only in bytes that are not UTF-8 read the same
    once those bytes are U+FFFD: pathBytes (base64) tells them apart."""
    import base64
    with sandbox(world, "watchutf", "--deny-all") as name:
        sh_ok(world, name, "mkdir -p /workspace/w")
        with world.daemon.connect() as conn:
            _rid, wid = _start(conn, name, "/workspace/w", recursive=False)
            sh_ok(world, name, "cd /workspace/w && touch \"$(printf 'a\\377')\" \"$(printf 'a\\376')\" ok.txt && "
                  "mv \"$(printf 'a\\377')\" \"$(printf 'b\\375')\"")
            want = {b"/workspace/w/a\xff", b"/workspace/w/a\xfe"}
            got = set()
            for raw in sorted(want):
                e = _wait_event(conn, wid, lambda e, raw=raw: e["type"] == "created" and "pathBytes" in e
                                and base64.b64decode(e["pathBytes"]) == raw, "created %r" % raw)
                expect_eq(e["path"], "/workspace/w/a\ufffd", "the path as text, ill-formed byte replaced")
                got.add(base64.b64decode(e["pathBytes"]))
            expect_eq(got, want, "exact bytes of both names")
            e = _wait_event(conn, wid, lambda e: e["type"] == "renamed", "renamed")
            expect_eq(base64.b64decode(e["pathBytes"]), b"/workspace/w/b\xfd", "renamed: new name's bytes")
            expect_eq(base64.b64decode(e["oldPathBytes"]), b"/workspace/w/a\xff", "renamed: old name's bytes")
            e = _wait_event(conn, wid, _has("created", "/workspace/w/ok.txt"), "created ok.txt")
            expect("pathBytes" not in e, "a UTF-8 name has no pathBytes: %s" % e)


HOLD_INOTIFY = r'''
import ctypes, os, sys, time
libc = ctypes.CDLL(None, use_errno=True)
fds = []
while len(fds) < 100000:
    fd = libc.inotify_init1(0)
    if fd < 0:
        break
    fds.append(fd)
open("/tmp/held.tmp", "w").write("%d %d" % (os.getpid(), len(fds)))
os.rename("/tmp/held.tmp", "/tmp/held")
time.sleep(600)
'''


def test_a_watch_refused_by_the_kernels_inotify_limit_says_so_not_limit_exceeded(world):
    """limit_exceeded is the sandbox's 16 watches; the kernel's per-user
    inotify limit is "failed" with a message naming it. Only in a sandbox
    with a user namespace: there the limit counts for its own users alone."""
    import threading
    with sandbox(world, "watchino", "--deny-all") as name:
        if not world.rpc_result("sandbox.get", {"name": name}).get("userns"):
            print("SKIP: no user namespace; holding the host uid's inotify instances would touch other sandboxes")
            return
        res = {}
        th = threading.Thread(target=lambda: res.update(r=world.ctl(
            "exec", name, "--", "python3", "-c", HOLD_INOTIFY, timeout=700)))
        th.start()
        try:
            W.World.wait_until(lambda: sh_ok(world, name, "cat /tmp/held 2>/dev/null; true").strip() != "", 120,
                               "the inotify instances held")
            with world.daemon.connect() as conn:
                msg = conn.call("fs.watch", {"sandbox": name, "path": "/workspace"})
                err = msg.get("error", {})
                expect_eq(err.get("data", {}).get("reason"), "failed", "fs.watch at the inotify limit: %s" % msg)
                expect("inotify limit" in err.get("message", ""), "the message names the limit: %s" % msg)
        finally:
            sh_ok(world, name, "kill $(cut -d' ' -f1 /tmp/held) 2>/dev/null; true")
            th.join(120)


def test_a_watched_path_resolves_as_the_sandbox_user_would_resolve_it(world):
    """A symlink is followed with the sandbox user's permissions: a link to
    a directory watches that directory; /proc/1/root starts only when that
    user may list it (ls)."""
    from common import sh
    with sandbox(world, "watchlnk", "--deny-all") as name:
        sh_ok(world, name, "mkdir -p /workspace/d && ln -s /workspace/d /workspace/lnk")
        with world.daemon.connect() as conn:
            _rid, wid = _start(conn, name, "/workspace/lnk", recursive=False)
            sh_ok(world, name, "touch /workspace/d/f")
            _wait_event(conn, wid, _has("created", "/workspace/lnk/f", False), "created f through the link")
            code = sh(world, name, "ls /proc/1/root >/dev/null")[0]
            msg = conn.call("fs.watch", {"sandbox": name, "path": "/proc/1/root", "recursive": False}) \
                if code != 0 else None
            if msg is not None:
                expect_eq(msg.get("error", {}).get("data", {}).get("reason"), "failed",
                          "a watch on /proc/1/root the sandbox user cannot list: %s" % msg)
            else:
                _start(conn, name, "/proc/1/root", recursive=False)


def test_a_recursive_watch_never_misses_a_change_silently_deep_or_long(world):
    """A change the watch cannot report as an event (in a directory nested
    deeper than the scan goes, or under a path longer than the API's 4096
    bytes) is an overflow event naming where, never nothing: the sandbox
    cannot hide a change from a recursive watch by nesting it."""
    deep = "/workspace/deep" + "/d" * 70
    seg = "s" * 200
    long_dir = "/workspace/long/" + "/".join([seg] * 20)   # 4035 bytes
    long_file = long_dir + "/" + "f" * 250                 # 4286 bytes: past 4096
    with sandbox(world, "watchdeep", "--deny-all") as name:
        sh_ok(world, name, "mkdir -p %s %s" % (deep, long_dir))
        with world.daemon.connect() as conn:
            rid, wid = _start(conn, name, "/workspace")
            # inotify keeps the order of one watcher's events: whatever the
            # deep and the long change give comes before the marker's event.
            sh_ok(world, name, "touch %s/hidden && (cd %s && touch %s) && touch /workspace/marker"
                  % (deep, long_dir, "f" * 250))
            _wait_event(conn, wid, _has("created", "/workspace/marker"), "created marker")
            evs = _events(conn, wid)
            upto = next(i for i, e in enumerate(evs) if e.get("path") == "/workspace/marker")
            before = evs[:upto]
            expect(any(e.get("path") == deep + "/hidden" or
                       (e["type"] == "overflow" and deep.startswith(e.get("path", "-"))) for e in before),
                   "the change 70 levels down is an event or an overflow naming a directory above it:",
                   json.dumps(before)[:1500])
            expect(any(e["type"] == "overflow" and long_file.startswith(e.get("path", "-") + "/")
                       and e.get("reason") for e in before),
                   "the change under a path past 4096 bytes is an overflow naming a directory above it:",
                   json.dumps(before)[:1500])
            for e in evs:
                expect(len(e.get("path", "").encode()) <= 4096, "every path relayed fits the API:", e.get("type"))
            conn.call("request.cancel", {"id": rid})
            expect_eq(conn.wait(rid, timeout=60)["error"]["code"], -32800, "cancel")
