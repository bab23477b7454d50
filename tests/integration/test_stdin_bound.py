"""A command's stdin is never lost behind a success.

sandbox-init queues at most 16 MiB of stdin for a command that has not
read it (agent.h AGENT_STDIN_MAX). Before, command.write answered {} as
soon as the daemon had passed the bytes on, and init dropped whatever did
not fit: a client that wrote 24 MiB to a command busy elsewhere was told
all went well, and the command read 16 MiB, then EOF. A command.run
`stdin` over 16 MiB (possible with a larger maxLineBytes) was cut the same
way. Now a write is taken whole or refused whole with `limit_exceeded`
naming the limit, and a stdin or data over the limit is -32602 on
arrival."""
import base64
import hashlib
import os
import signal

import world as W
from common import expect, expect_eq, rpc_ok, sandbox

MIB = 1 << 20
# Waits until /tmp/go exists (made by the test), then counts its stdin.
WAIT_THEN_COUNT = "while [ ! -e /tmp/go ]; do sleep 0.1; done; wc -c"


def _write(conn, cmd, nbytes):
    return conn.call("command.write", {"cmdId": cmd, "data": base64.b64encode(b"x" * nbytes).decode()}, 120)


def test_a_write_to_a_command_that_reads_no_stdin_is_refused_whole_never_dropped(world):
    with sandbox(world, "stdin", "--deny-all") as name, world.daemon.connect(120) as c:
        cmd = c.result("command.run", {"sandbox": name, "cmd": "sh", "detached": True,
                                       "args": ["-c", WAIT_THEN_COUNT]})["cmdId"]
        for i in range(2):
            m = _write(c, cmd, 8 * MIB)
            expect_eq(m.get("result"), {}, "write %d of 8 MiB (%s)" % (i, str(m)[:300]))
        # The third does not fit what init keeps for a command that has
        # read nothing: refused, with a reason and a message naming the
        # limit, and none of it taken.
        m = _write(c, cmd, 8 * MIB)
        err = m.get("error") or {}
        expect_eq((err.get("data") or {}).get("reason"), "limit_exceeded", "the third write's refusal: %s"
                  % str(m)[:300])
        expect("not reading its stdin" in err.get("message", "") and "16 MiB" in err.get("message", ""),
               "the refusal names the cause and the limit:", err.get("message"))
        world.ctl("exec", name, "--", "touch", "/tmp/go", check=True)
        # Once the command reads, the same write is taken (retried while
        # the command has not read enough yet).
        def taken():
            r = _write(c, cmd, 8 * MIB)
            if "result" in r:
                return True
            expect_eq((r["error"].get("data") or {}).get("reason"), "limit_exceeded", "a retried write: %s"
                      % str(r)[:300])
            return False
        W.World.wait_until(taken, 60, "the command reads and the write is taken")
        expect_eq(c.call("command.closeStdin", {"cmdId": cmd}).get("result"), {}, "closeStdin")
        expect_eq(c.result("command.wait", {"cmdId": cmd}, 120)["exitCode"], 0, "the command's exit")
        out = base64.b64decode(rpc_ok(world, "command.logs", {"cmdId": cmd})["stdout"])
        expect_eq(out.strip(), str(24 * MIB).encode(), "bytes the command read: every byte of the taken writes")
test_a_write_to_a_command_that_reads_no_stdin_is_refused_whole_never_dropped.timeout = 300


def test_a_write_to_a_closed_stdin_or_an_ended_command_is_an_error(world):
    with sandbox(world, "stdin", "--deny-all") as name, world.daemon.connect(120) as c:
        cmd = c.result("command.run", {"sandbox": name, "cmd": "sh", "detached": True,
                                       "args": ["-c", WAIT_THEN_COUNT]})["cmdId"]
        expect_eq(c.call("command.closeStdin", {"cmdId": cmd}).get("result"), {}, "closeStdin")
        m = _write(c, cmd, 10)
        expect("error" in m and "closed" in m["error"].get("message", ""),
               "a write after closeStdin says stdin is closed:", str(m)[:300])
        world.ctl("exec", name, "--", "touch", "/tmp/go", check=True)
        expect_eq(c.result("command.wait", {"cmdId": cmd}, 120)["exitCode"], 0, "the command's exit")
        out = base64.b64decode(rpc_ok(world, "command.logs", {"cmdId": cmd})["stdout"])
        expect_eq(out.strip(), b"0", "the refused write reached nothing")


def test_stdin_over_what_a_command_takes_at_once_is_refused_on_arrival(world):
    world.stop_sandboxd()
    d = world.start_sandboxd({"maxLineBytes": 40 * MIB}, tag="stdinbig")
    name = world.name("stdinbig")
    try:
        d.ctl("create", "--name", name, "--deny-all", check=True)
        big = base64.b64encode(b"y" * (24 * MIB)).decode()
        m = d.rpc("command.run", {"sandbox": name, "cmd": "wc", "args": ["-c"], "stdin": big}, 120)
        err = m.get("error") or {}
        expect_eq((err.get("code"), (err.get("data") or {}).get("field")), (-32602, "stdin"),
                  "command.run with 24 MiB of stdin: %s" % str(m)[:300])
        expect("16 MiB" in err.get("message", ""), "the message names the limit:", err.get("message"))
        with d.connect(120) as c:
            cmd = c.result("command.run", {"sandbox": name, "cmd": "wc", "args": ["-c"], "detached": True})["cmdId"]
            m = c.call("command.write", {"cmdId": cmd, "data": big}, 120)
            err = m.get("error") or {}
            expect_eq((err.get("code"), (err.get("data") or {}).get("field")), (-32602, "data"),
                      "command.write of 24 MiB: %s" % str(m)[:300])
            # 16 MiB exactly is one write, taken whole.
            m = c.call("command.write", {"cmdId": cmd, "data": base64.b64encode(b"z" * (16 * MIB)).decode()}, 120)
            expect_eq(m.get("result"), {}, "a write of 16 MiB: %s" % str(m)[:300])
            c.result("command.closeStdin", {"cmdId": cmd})
            expect_eq(c.result("command.wait", {"cmdId": cmd}, 120)["exitCode"], 0, "wc's exit")
        out = base64.b64decode(d.rpc_result("command.logs", {"cmdId": cmd})["stdout"])
        expect_eq(out.strip(), str(16 * MIB).encode(), "bytes wc read")
    finally:
        d.rpc("sandbox.delete", {"name": name}, 120)
        world.stop_sandboxd(d)
        world.start_sandboxd()
test_stdin_over_what_a_command_takes_at_once_is_refused_on_arrival.timeout = 300


def test_exec_i_delivers_all_of_a_large_stdin_to_a_slow_reader(world):
    # `tar c . | sandboxctl exec -i NAME -- tar x`, the command slower than
    # the pipe: sandboxctl sent its stdin as fast as it read it and
    # ignored the answers, so what passed init's 16 MiB was lost and the
    # command saw a short input ending in EOF. The command here starts
    # reading late (it sleeps first: a slow reader, whatever the timing);
    # every byte must arrive, in order.
    data = os.urandom(1 << 20) * 48
    with sandbox(world, "stdincli", "--deny-all") as name:
        code, out, err = world.ctl("exec", "-i", name, "--", "sh", "-c", "sleep 2; sha256sum",
                                   input=data, binary=True, timeout=300)
        expect_eq(code, 0, "exec -i's exit (%s)" % err[-400:])
        expect_eq(out.split()[0].decode(), hashlib.sha256(data).hexdigest(),
                  "the digest of what the command read (48 MiB sent)")
test_exec_i_delivers_all_of_a_large_stdin_to_a_slow_reader.timeout = 300


def test_a_write_to_a_paused_sandbox_is_refused_at_once(world):
    # A frozen init reads nothing: each write waited in the daemon's
    # memory for a resume (96 MiB of writes grew it by 250 MiB), as
    # command.run and fs.* already knew not to.
    with sandbox(world, "stdinp", "--deny-all") as name, world.daemon.connect(120) as c:
        cmd = c.result("command.run", {"sandbox": name, "cmd": "wc", "args": ["-c"], "detached": True})["cmdId"]
        rpc_ok(world, "sandbox.pause", {"name": name})
        m = _write(c, cmd, 1 * MIB)
        err = m.get("error") or {}
        expect_eq((err.get("data") or {}).get("reason"), "unavailable", "a write while paused: %s" % str(m)[:300])
        expect("paused" in err.get("message", ""), "the refusal says why:", err.get("message"))
        rpc_ok(world, "sandbox.resume", {"name": name})
        expect_eq(_write(c, cmd, 5).get("result"), {}, "a write once resumed")
        c.result("command.closeStdin", {"cmdId": cmd})
        expect_eq(c.result("command.wait", {"cmdId": cmd}, 120)["exitCode"], 0, "wc's exit")
        out = base64.b64decode(rpc_ok(world, "command.logs", {"cmdId": cmd})["stdout"])
        expect_eq(out.strip(), b"5", "only the write made once resumed reached the command")


def test_input_for_an_init_that_reads_nothing_is_bounded_and_refused_legibly(world):
    # An init that reads nothing from the daemon (stopped here from the
    # host, as a starved or wedged one would be): writes for its commands
    # were queued in the daemon without bound, outside any cgroup. Past
    # 64 MiB queued for it they are refused, naming the limit; what was
    # taken is all answered once it reads again, and a write answered {}
    # reached the command whole.
    with sandbox(world, "stdinq", "--deny-all") as name, world.daemon.connect(300) as c:
        cmd = c.result("command.run", {"sandbox": name, "cmd": "wc", "args": ["-c"], "detached": True})["cmdId"]
        init_pid = rpc_ok(world, "sandbox.get", {"name": name})["session"]["initPid"]
        os.kill(init_pid, signal.SIGSTOP)
        try:
            data = base64.b64encode(b"w" * (8 * MIB)).decode()
            ids = [c.start("command.write", {"cmdId": cmd, "data": data}) for _ in range(12)]
            # The last ones are refused while init still reads nothing.
            last = c.wait(ids[-1], 120)
            err = last.get("error") or {}
            expect_eq((err.get("data") or {}).get("reason"), "limit_exceeded",
                      "the 12th write of 8 MiB to an init that reads nothing: %s" % str(last)[:300])
            expect("is not taking input" in err.get("message", "") and "64 MiB" in err.get("message", ""),
                   "the refusal names the cause and the limit:", err.get("message"))
        finally:
            os.kill(init_pid, signal.SIGCONT)
        taken = 0
        for rid in ids[:-1]:
            m = c.wait(rid, 120)
            if "result" in m:
                taken += 8 * MIB
            else:
                expect_eq((m["error"].get("data") or {}).get("reason"), "limit_exceeded",
                          "a write not taken: %s" % str(m)[:300])
        expect(taken > 0, "some writes were taken")
        c.result("command.closeStdin", {"cmdId": cmd})
        expect_eq(c.result("command.wait", {"cmdId": cmd}, 120)["exitCode"], 0, "wc's exit")
        out = base64.b64decode(rpc_ok(world, "command.logs", {"cmdId": cmd})["stdout"])
        expect_eq(out.strip(), str(taken).encode(), "bytes wc read: those of the writes answered {}")
test_input_for_an_init_that_reads_nothing_is_bounded_and_refused_legibly.timeout = 300


def test_a_command_re_adopted_after_sigkill_takes_acked_writes(world):
    # A re-adopted session's init says in its command list that it answers
    # writes: they are answered (not held, not dropped) after a restart,
    # and a refused one is still refused whole.
    with sandbox(world, "stdinr", "--deny-all") as name:
        cmd = rpc_ok(world, "command.run", {"sandbox": name, "cmd": "sh", "detached": True,
                                            "args": ["-c", WAIT_THEN_COUNT]})["cmdId"]
        d = world.daemon
        os.kill(d.proc.pid, signal.SIGKILL)
        d.proc.wait(10)
        d.start()
        with d.connect(120) as c:
            for i in range(2):
                expect_eq(_write(c, cmd, 8 * MIB).get("result"), {}, "write %d after the restart" % i)
            # (The pipe holds 64 KiB of the 16 MiB: 1 MiB more does not fit.)
            m = _write(c, cmd, 1 * MIB)
            expect_eq(((m.get("error") or {}).get("data") or {}).get("reason"), "limit_exceeded",
                      "a write past the queue after the restart: %s" % str(m)[:300])
            world.ctl("exec", name, "--", "touch", "/tmp/go", check=True)
            c.result("command.closeStdin", {"cmdId": cmd})
            expect_eq(c.result("command.wait", {"cmdId": cmd}, 120)["exitCode"], 0, "the command's exit")
        out = base64.b64decode(rpc_ok(world, "command.logs", {"cmdId": cmd})["stdout"])
        expect_eq(out.strip(), str(16 * MIB).encode(), "bytes the command read")
test_a_command_re_adopted_after_sigkill_takes_acked_writes.timeout = 300
