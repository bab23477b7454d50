"""Commands: exit codes, streams, stdin, a pty, detached commands, timeouts."""
import base64
import fcntl
import hashlib
import os
import pty
import select
import signal
import struct
import termios
import time

import world as W
from common import expect, expect_eq, rpc_ok, sandbox, sh, sh_ok


def test_exit_code_is_passed_through(world):
    with sandbox(world, "exit", "--deny-all") as name:
        code, _o, _e = sh(world, name, "exit 7")
        expect_eq(code, 7, "sandboxctl exit code for `exit 7`")
        code, _o, _e = sh(world, name, "true")
        expect_eq(code, 0, "sandboxctl exit code for `true`")


def test_killed_command_exit_code_is_128_plus_signal(world):
    with sandbox(world, "sig", "--deny-all") as name:
        code, _o, _e = sh(world, name, "kill -TERM $$")
        expect_eq(code, 128 + 15, "exit code of a command killed by SIGTERM")


def test_stdout_and_stderr_kept_apart(world):
    with sandbox(world, "streams", "--deny-all") as name:
        code, out, err = sh(world, name, "echo to-out; echo to-err >&2; echo more-out")
        expect_eq(code, 0, "exit code")
        expect_eq(out, "to-out\nmore-out\n", "stdout")
        expect("to-err" in err and "to-out" not in err, "stderr:", repr(err))


def test_missing_command_fails_cleanly(world):
    with sandbox(world, "nocmd", "--deny-all") as name:
        code, _o, err = world.ctl("exec", name, "--", "/no/such/binary")
        expect(code != 0, "running a missing binary should fail")
        # The sandbox keeps working afterwards.
        expect_eq(sh_ok(world, name, "echo ok").strip(), "ok", "next command")


def test_stdin_with_i(world):
    data = os.urandom(200 * 1024)
    with sandbox(world, "stdin", "--deny-all") as name:
        code, out, err = world.ctl("exec", "-i", name, "--", "sha256sum", input=data)
        expect_eq(code, 0, "exit code (%s)" % err.strip()[:200])
        expect_eq(out.split()[0], hashlib.sha256(data).hexdigest(), "sha256 of stdin seen inside")
        code, out, _e = world.ctl("exec", "-i", name, "--", "tr", "a-z", "A-Z", input="hello\n")
        expect_eq(out, "HELLO\n", "tr output")


def test_stdin_closed_without_i(world):
    with sandbox(world, "nostdin", "--deny-all") as name:
        code, out, _e = sh(world, name, "cat; echo eof")
        expect_eq((code, out), (0, "eof\n"), "cat without -i sees EOF at once")


def _run_pty(argv, rows, cols, react, timeout=60):
    """Runs argv on a new pty of rows x cols; react(output_so_far, master_fd)
    is called on each read. Returns (exit status, output)."""
    pid, fd = pty.fork()
    if pid == 0:  # child: size the terminal, then exec
        try:
            fcntl.ioctl(0, termios.TIOCSWINSZ, struct.pack("HHHH", rows, cols, 0, 0))
            os.execv(argv[0], argv)
        finally:
            os._exit(127)
    out = b""
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline:
            r, _, _ = select.select([fd], [], [], max(0.0, deadline - time.monotonic()))
            if not r:
                break
            try:
                chunk = os.read(fd, 4096)
            except OSError:
                break
            if not chunk:
                break
            out += chunk
            react(out, fd)
    finally:
        if time.monotonic() >= deadline:
            os.kill(pid, signal.SIGKILL)
        _, status = os.waitpid(pid, 0)
        os.close(fd)
    return os.waitstatus_to_exitcode(status), out.decode(errors="replace")


def test_tty_gets_a_pty_and_sees_resize(world):
    script = ('tty; stty size; echo READY; i=0; '
              'while [ "$(stty size)" != "40 120" ] && [ $i -lt 100 ]; do sleep 0.1; i=$((i+1)); done; '
              'stty size; echo DONE')
    state = {"resized": False}

    def react(out, fd):
        if not state["resized"] and b"READY" in out:
            fcntl.ioctl(fd, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 120, 0, 0))
            state["resized"] = True

    with sandbox(world, "tty", "--deny-all") as name:
        argv = [W.SANDBOXCTL, "--socket", world.daemon.socket, "exec", "-t", name, "--",
                "sh", "-c", script]
        code, out = _run_pty(argv, 30, 100, react)
        expect_eq(code, 0, "exit code (output %r)" % out[-300:])
        expect("/dev/pts/" in out, "tty inside should be a /dev/pts device:", repr(out[:300]))
        expect("30 100" in out, "initial pty size 30x100 not seen:", repr(out[:300]))
        expect(state["resized"] and "40 120" in out, "resize to 40x120 not seen:", repr(out[-300:]))
        expect("DONE" in out, "command did not finish:", repr(out[-300:]))


def test_detached_command_wait_and_kill(world):
    with sandbox(world, "detach", "--deny-all") as name:
        with world.daemon.connect() as c:
            r = c.result("command.run", {"sandbox": name, "cmd": "sh",
                                         "args": ["-c", "echo started; exit 3"], "detached": True})
            expect("cmdId" in r, "detached command.run should return a Command:", r)
        # Waiting from another connection, after the starter went away.
        fin = rpc_ok(world, "command.wait", {"cmdId": r["cmdId"]})
        expect_eq(fin.get("exitCode"), 3, "exitCode from command.wait")
        r = rpc_ok(world, "command.run", {"sandbox": name, "cmd": "sleep", "args": ["60"],
                                          "detached": True})
        cmd_id = r["cmdId"]
        expect_eq(r.get("exitCode"), None, "exitCode of a running command")
        got = rpc_ok(world, "command.get", {"cmdId": cmd_id})
        expect_eq(got.get("exitCode"), None, "command.get exitCode while running")
        rpc_ok(world, "command.kill", {"cmdId": cmd_id, "signal": "TERM"})
        fin = rpc_ok(world, "command.wait", {"cmdId": cmd_id}, timeout=30)
        expect_eq(fin.get("exitCode"), 128 + 15, "exitCode after command.kill TERM")
        r = rpc_ok(world, "command.run", {"sandbox": name, "cmd": "sleep", "args": ["60"],
                                          "detached": True})
        rpc_ok(world, "command.kill", {"cmdId": r["cmdId"]})
        fin = rpc_ok(world, "command.wait", {"cmdId": r["cmdId"]}, timeout=30)
        expect_eq(fin.get("exitCode"), 137, "exitCode after command.kill (default KILL)")


def test_detached_stdin_write_and_logs(world):
    with sandbox(world, "dstdin", "--deny-all") as name:
        r = rpc_ok(world, "command.run", {"sandbox": name, "cmd": "tr", "args": ["a-z", "A-Z"],
                                          "detached": True})
        cmd_id = r["cmdId"]
        rpc_ok(world, "command.write", {"cmdId": cmd_id,
                                        "data": base64.b64encode(b"abc\n").decode()})
        rpc_ok(world, "command.closeStdin", {"cmdId": cmd_id})
        fin = rpc_ok(world, "command.wait", {"cmdId": cmd_id}, timeout=30)
        expect_eq(fin.get("exitCode"), 0, "exit code")
        logs = rpc_ok(world, "command.logs", {"cmdId": cmd_id})
        expect_eq(base64.b64decode(logs.get("stdout", "")), b"ABC\n", "command.logs stdout")


def test_output_streams_as_notifications(world):
    with sandbox(world, "notes", "--deny-all") as name:
        with world.daemon.connect() as c:
            rid = c.start("command.run", {"sandbox": name, "cmd": "sh",
                                          "args": ["-c", "echo a; echo b >&2; exit 5"]})
            msg = c.wait(rid, 60)
            expect("result" in msg, "command.run failed:", msg)
            cmd_id = msg["result"]["cmdId"]
            expect_eq(msg["result"].get("exitCode"), 5, "CommandFinished exitCode")
            ex = c.wait_note(lambda n: n.get("method") == "command.exit", 10)
            expect_eq(ex["params"].get("exitCode"), 5, "command.exit exitCode")
            expect_eq(c.output(cmd_id, "stdout"), b"a\n", "command.output stdout")
            expect_eq(c.output(cmd_id, "stderr"), b"b\n", "command.output stderr")


def test_command_started_names_the_request_before_any_output(world):
    """Two runs in flight on one connection: each one's command.started
    {cmdId, requestId} comes before its output, so output is attributable
    before the answers."""
    with sandbox(world, "started", "--deny-all") as name:
        with world.daemon.connect() as c:
            r1 = c.start("command.run", {"sandbox": name, "cmd": "sh", "args": ["-c", "echo one; sleep 0.2"]})
            r2 = c.start("command.run", {"sandbox": name, "cmd": "sh", "args": ["-c", "echo two; sleep 0.2"]})
            m1, m2 = c.wait(r1, 60), c.wait(r2, 60)
            ids = {r1: m1["result"]["cmdId"], r2: m2["result"]["cmdId"]}
            started = [n for n in c.notes if n.get("method") == "command.started"]
            expect_eq(sorted((n["params"]["requestId"], n["params"]["cmdId"]) for n in started),
                      sorted(ids.items()), "command.started notifications")
            for rid, cmd_id in ids.items():
                order = [n.get("method") for n in c.notes if n.get("params", {}).get("cmdId") == cmd_id]
                expect_eq(order[0], "command.started", "the first notification of %s" % cmd_id)
            expect_eq(c.output(ids[r1]), b"one\n", "output of the first run")
            expect_eq(c.output(ids[r2]), b"two\n", "output of the second run")


def test_command_timeout_kills_with_137(world):
    with sandbox(world, "cmdto", "--deny-all") as name:
        t = time.monotonic()
        fin = rpc_ok(world, "command.run", {"sandbox": name, "cmd": "sleep", "args": ["60"],
                                            "timeoutMs": 500}, timeout=30)
        expect_eq(fin.get("exitCode"), 137, "exitCode after timeoutMs")
        expect(time.monotonic() - t < 20, "timeoutMs did not stop the command in time")


def test_finished_commands_are_forgotten_oldest_first_past_the_bound(world):
    """sandboxd keeps the last 4096 finished commands (and at most a batch of
    64 more until it prunes): past that, the oldest answer not_found to
    command.get, the newest are still there with their exit codes, and a
    command still running is never the one forgotten."""
    with sandbox(world, "bound", "--deny-all") as name:
        with world.daemon.connect() as c:
            first = c.result("command.run", {"sandbox": name, "cmd": "sh", "args": ["-c", "exit 3"]})["cmdId"]
            running = c.result("command.run", {"sandbox": name, "cmd": "sleep", "args": ["600"],
                                               "detached": True})["cmdId"]
            ids = []
            for i in range(0, 4096 + 64 + 2, 16):
                rids = [c.start("command.run", {"sandbox": name, "cmd": "true"}) for _ in range(16)]
                for rid in rids:
                    m = c.wait(rid, 60)
                    expect("result" in m, "command.run:", m)
                    ids.append(m["result"]["cmdId"])
                c.notes.clear()
            m = c.call("command.get", {"cmdId": first})
            expect_eq(m.get("error", {}).get("data", {}).get("reason"), "not_found",
                      "the oldest finished command past the bound: %s" % m)
            m = c.call("command.get", {"cmdId": ids[0]})
            expect_eq(m.get("error", {}).get("data", {}).get("reason"), "not_found",
                      "the second oldest past the bound: %s" % m)
            for cmd_id in (ids[-4000], ids[-1]):
                got = c.result("command.get", {"cmdId": cmd_id})
                expect_eq(got["exitCode"], 0, "a command within the bound: %s" % got)
            got = c.result("command.get", {"cmdId": running})
            expect_eq(got["exitCode"], None, "the running command is kept: %s" % got)
            c.result("command.kill", {"cmdId": running})


def test_command_lookup_follows_execvpe(world):
    # init finds and starts the program itself (raw execve, no libc in the
    # child that shares its memory): the search must behave as execvpe(3)
    # does. PATH in order, an unreadable directory or a non-executable
    # match skipped for a later one, a script without #! run by /bin/sh,
    # a missing name 127, a match that cannot run (only EACCES seen) 126,
    # each with its error.
    with sandbox(world, "lookup", "--deny-all") as name:
        sh_ok(world, name, "mkdir -p /tmp/a /tmp/b /tmp/c && chmod 000 /tmp/c && "
              "printf 'echo from-a\\n' > /tmp/a/prog && "
              "printf 'echo from-b \"$@\"\\n' > /tmp/b/prog && chmod +x /tmp/b/prog && "
              "printf 'echo only-readable\\n' > /tmp/a/noexec")
        code, out, err = world.ctl("exec", "--env", "PATH=/tmp/c:/tmp/a:/tmp/b", name, "--", "prog", "x", "y")
        expect_eq((code, out), (0, "from-b x y\n"), "the executable match after a non-executable one (%s)"
                  % err.strip())
        code, out, err = world.ctl("exec", "--env", "PATH=/tmp/a:/tmp/b", name, "--", "noexec")
        expect_eq(code, 126, "a match that is not executable (%s %s)" % (out, err))
        expect("permission denied" in err.lower(), "its error:", err)
        code, out, err = world.ctl("exec", "--env", "PATH=/tmp/a:/tmp/b", name, "--", "no-such-prog")
        expect_eq(code, 127, "a name found nowhere (%s %s)" % (out, err))
        expect("no-such-prog" in err and "no such file" in err.lower(), "its error:", err)
        code, out, err = world.ctl("exec", name, "--", "/tmp/b/prog", "z")
        expect_eq((code, out), (0, "from-b z\n"), "a script without #! by its path (%s)" % err.strip())


def test_init_stays_exempt_from_the_oom_killer_while_commands_start(world):
    # Each command's child sets its own oom_score_adj to 0 (init's -1000
    # must not be inherited); a child that shares init's memory must not
    # change init's with it (proc(5): a write to oom_score_adj reaches
    # every process sharing the address space, unless the writer is a
    # vfork child). init's score is set from the host here to a value no
    # command has: -1000 where the host may (CAP_SYS_RESOURCE; inside a
    # user namespace init cannot lower its own), else 500 (raising needs
    # no privilege).
    with sandbox(world, "oomadj", "--deny-all") as name:
        pid = world.rpc_result("sandbox.get", {"name": name})["session"]["initPid"]
        want = "-1000"
        try:
            with open("/proc/%d/oom_score_adj" % pid, "w") as f:
                f.write(want)
        except PermissionError:
            want = "500"
            with open("/proc/%d/oom_score_adj" % pid, "w") as f:
                f.write(want)
        for _ in range(3):
            code, out, err = world.ctl("exec", "--sudo", name, "--", "sh", "-c",
                                       "cat /proc/1/oom_score_adj /proc/self/oom_score_adj")
            expect_eq((code, out.split()), (0, [want, "0"]), "init's and a command's oom_score_adj (%s)"
                      % err.strip())
        with open("/proc/%d/oom_score_adj" % pid) as f:
            expect_eq(f.read().strip(), want, "init's oom_score_adj seen from the host after the commands")
