"""Command output across a daemon restart (docs/API.md "Daemon restarts
(live restore)"): sandbox-init keeps the bounded log of each command's
output, so after a SIGKILL or a SIGTERM of sandboxd, command.logs of the
next daemon returns what it would have without the restart: every byte
of stdout and stderr apart and in order, for running and finished
commands, the retained tail of one over the bound, the output of a command
that ended while no daemon ran, and a follower resumes without a byte twice
or missing."""
import asyncio
import base64
import os
import signal
import sys

import world as W
from common import create, delete, expect, expect_eq, poll, rpc_ok
from test_restore import _procs_with, _restart

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "sdk", "python", "src"))


def _logs(world, cmd_id):
    r = rpc_ok(world, "command.logs", {"cmdId": cmd_id})
    return base64.b64decode(r["stdout"]), base64.b64decode(r["stderr"]), r["truncated"]


def _brief(logs):
    """A comparable summary of big logs: (length, first and last 40 bytes) per
    stream, and the flags."""
    if isinstance(logs, dict):
        return {k: _brief((base64.b64decode(v),)) if k in ("stdout", "stderr") else v for k, v in logs.items()}
    return tuple((len(x), x[:40], x[-40:]) if isinstance(x, bytes) else x for x in logs)


def _run(world, name, script, detached=True):
    r = rpc_ok(world, "command.run", {"sandbox": name, "cmd": "sh", "args": ["-c", script], "detached": detached})
    return r["cmdId"]


# Waits (inside the sandbox) until /workspace/go exists: the test says when
# the second half of the output may come, after the restart.
GATED = ("echo out-before-1; echo err-before-1 >&2; echo out-before-2; echo err-before-2 >&2; "
         "while [ ! -e /workspace/go-%s ]; do sleep 0.05; done; "
         "echo out-after; echo err-after >&2; exit 3")


def _logs_survive(world, how):
    name, _c, _o, _e = create(world, "rlog", "--deny-all")
    try:
        done = _run(world, name, "printf 'fin-out-1\\n'; printf 'fin-err\\n' >&2; printf 'fin-out-2'; exit 4",
                    detached=False)
        running = _run(world, name, GATED % how)
        want = (b"out-before-1\nout-before-2\n", b"err-before-1\nerr-before-2\n", False)
        poll(lambda: _logs(world, running) == want, 30, "the running command's first output")
        before_done = _logs(world, done)
        expect_eq(before_done, (b"fin-out-1\nfin-out-2", b"fin-err\n", False), "the finished command's logs")
        _restart(world, how)
        expect_eq(_logs(world, done), before_done, "the finished command's logs after a restart (%s)" % how)
        expect_eq(rpc_ok(world, "command.get", {"cmdId": done})["exitCode"], 4,
                  "the finished command's exit code after a restart (%s)" % how)
        expect_eq(_logs(world, running), want, "the running command's logs after a restart (%s)" % how)
        rpc_ok(world, "fs.write", {"sandbox": name, "files": [{"path": "/workspace/go-" + how, "content": ""}]})
        fin = rpc_ok(world, "command.wait", {"cmdId": running}, timeout=30)
        expect_eq(fin["exitCode"], 3, "the running command's exit after the restart")
        expect_eq(_logs(world, running), (want[0] + b"out-after\n", want[1] + b"err-after\n", False),
                  "the whole output of a command that ran across a restart (%s)" % how)
        # A second restart: still the same.
        _restart(world, "kill")
        expect_eq(_logs(world, done), before_done, "the finished command's logs after two restarts")
        expect_eq(_logs(world, running)[:2], (want[0] + b"out-after\n", want[1] + b"err-after\n"),
                  "the other command's logs after two restarts")
    finally:
        delete(world, name)


def test_logs_of_running_and_finished_commands_survive_sigkill_of_the_daemon(world):
    _logs_survive(world, "kill")


def test_logs_of_running_and_finished_commands_survive_sigterm_of_the_daemon(world):
    _logs_survive(world, "term")


def test_output_read_by_init_but_never_by_the_killed_daemon_is_kept(world):
    """The daemon is stopped (it reads nothing), the command writes more and
    ends, then the daemon is killed with that output unread in its socket;
    a second command ends while no daemon runs at all."""
    d = world.daemon
    name, _c, _o, _e = create(world, "rlogdown", "--deny-all")
    try:
        marker = "down-marker-%d" % os.getpid()
        cmd = _run(world, name, ": %s; echo first; echo e-first >&2; sleep 1; echo second; "
                                "echo e-second >&2; exit 6" % marker)
        poll(lambda: _logs(world, cmd)[0] == b"first\n", 30, "the first line")
        os.kill(d.proc.pid, signal.SIGSTOP)
        try:
            poll(lambda: not _procs_with(marker), 30, "the command exits while the daemon is stopped")
        finally:
            os.kill(d.proc.pid, signal.SIGKILL)
            d.proc.wait(10)
        d.start()
        poll(lambda: rpc_ok(world, "command.get", {"cmdId": cmd}).get("exitCode") is not None, 30,
             "the exit arrives after the restart")
        expect_eq(rpc_ok(world, "command.get", {"cmdId": cmd})["exitCode"], 6, "the exit code after the restart")
        expect_eq(_logs(world, cmd), (b"first\nsecond\n", b"e-first\ne-second\n", False),
                  "output the killed daemon never read")

        marker2 = marker + "-2"
        cmd2 = _run(world, name, ": %s; echo up; sleep 1; echo down; echo e-down >&2; exit 9" % marker2)
        poll(lambda: _logs(world, cmd2)[0] == b"up\n", 30, "the first line of the second command")
        os.kill(d.proc.pid, signal.SIGKILL)
        d.proc.wait(10)
        poll(lambda: not _procs_with(marker2), 30, "the command exits while no daemon runs")
        d.start()
        poll(lambda: rpc_ok(world, "command.get", {"cmdId": cmd2}).get("exitCode") is not None, 30,
             "the exit arrives after the restart")
        expect_eq(rpc_ok(world, "command.get", {"cmdId": cmd2})["exitCode"], 9, "exit code of a command that ended "
                  "while no daemon ran")
        expect_eq(_logs(world, cmd2), (b"up\ndown\n", b"e-down\n", False),
                  "output of a command that ended while no daemon ran")
    finally:
        delete(world, name)


def test_the_retained_tail_of_a_command_over_the_bound_survives_a_restart(world):
    """commandLogBytes per stream: the newest bytes, truncated, the same
    before and after; a running command's tail goes on from there."""
    bound = 1 << 20
    name, _c, _o, _e = create(world, "rlogbig", "--deny-all")
    try:
        big = _run(world, name, "seq 1 400000; seq 1 300000 >&2", detached=False)
        b_out, b_err, b_tr = _logs(world, big)
        expect(b_tr and len(b_out) == bound and len(b_err) == bound, "over the bound before the restart:",
               len(b_out), len(b_err), b_tr)
        expect(b_out.endswith(b"\n399999\n400000\n") and b_err.endswith(b"\n300000\n"), "the tail is kept")
        live = _run(world, name, "seq 1 200000; while [ ! -e /workspace/go ]; do sleep 0.05; done; echo last")
        poll(lambda: _logs(world, live)[0].endswith(b"\n200000\n"), 30, "the running command's output")
        l_out = _logs(world, live)
        expect(l_out[2] and len(l_out[0]) == bound, "the running one is over the bound", len(l_out[0]))
        for how in ("kill", "term"):
            _restart(world, how)
            expect_eq(_brief(_logs(world, big)), _brief((b_out, b_err, True)),
                      "the retained tail after a restart (%s)" % how)
            expect_eq(_brief(_logs(world, live)), _brief(l_out), "the running command's tail after a restart (%s)" % how)
        rpc_ok(world, "fs.write", {"sandbox": name, "files": [{"path": "/workspace/go", "content": ""}]})
        rpc_ok(world, "command.wait", {"cmdId": live}, timeout=30)
        want = (l_out[0] + b"last\n")[-bound:]
        expect_eq(_brief(_logs(world, live)), _brief((want, b"", True)),
                  "the tail once the command went on after the restarts")
    finally:
        delete(world, name)


def test_the_budget_cut_of_the_old_daemon_holds_after_a_restart(world):
    """logBudgetMiB: the older finished command's log was dropped for the
    newer one; after a restart it is still dropped and the newer one whole."""
    world.stop_sandboxd()
    d = world.start_sandboxd({"logBudgetMiB": 1}, tag="rlogbudget")
    try:
        name = world.name("rlogb")
        d.ctl("create", "--name", name, "--deny-all", check=True)
        script = "head -c 700000 /dev/zero | tr '\\0' %s"
        ids = [_run(world, name, script % ch, detached=False) for ch in "ab"]
        before = [rpc_ok(world, "command.logs", {"cmdId": i}) for i in ids]
        expect(before[0].get("evicted") and before[0]["truncated"], "the older log is dropped:", before[0]["truncated"])
        expect_eq(base64.b64decode(before[1]["stdout"]), b"b" * 700000, "the newer log whole")
        # Two running commands over the budget: each stream cut to an equal
        # share (a quarter of 1 MiB), newest bytes kept.
        share = (1 << 20) // 4
        run = [_run(world, name, (script % ch) + "; exec sleep 600") for ch in "cd"]

        def shared():
            # Cut, and all 700000 bytes written (the offset says where the
            # kept ones begin), so nothing moves before the restart.
            logs = [rpc_ok(world, "command.logs", {"cmdId": i}) for i in run]
            return all(len(base64.b64decode(r["stdout"])) == share and r["truncated"] and
                       r["stdoutOffset"] + share == 700000 for r in logs) and logs
        cut = W.World.wait_until(shared, 60, "both running commands' logs cut to %d bytes" % share)
        ids += run
        # The newer finished command's log went too now (finished logs go
        # first): what the daemon answers right before the restart.
        before = [rpc_ok(world, "command.logs", {"cmdId": i}) for i in ids]
        expect(before[1].get("evicted") and all(_brief(x) == _brief(y) for x, y in zip(before[2:], cut)),
               "the finished logs are dropped, the running ones cut:", [_brief(x) for x in before])
        _restart(world, "kill")
        after = [rpc_ok(world, "command.logs", {"cmdId": i}) for i in ids]
        for i, (b, a) in enumerate(zip(before, after)):
            expect_eq(_brief(a), _brief(b), "command %d's logs after a restart" % i)
        info = rpc_ok(world, "daemon.info", {})
        expect(info["limits"]["logBytesInUse"] <= 1 << 20, "log bytes in use after the restart:", info["limits"])
        d.ctl("rm", name)
    finally:
        world.stop_sandboxd(d)
        world.start_sandboxd()


def test_a_follower_resumes_after_a_restart_without_duplicates_or_gaps(world):
    """The Python SDK's Command.logs() across a SIGKILL of the daemon: the
    followed bytes are exactly the command's output, once each, including
    what init relayed to the daemon just before it died (the daemon was
    stopped, so it never read it)."""
    from sandboxd import AsyncSandbox, AsyncSandboxClient  # noqa: E402

    d = world.daemon
    name, _c, _o, _e = create(world, "rlogfol", "--deny-all")
    marker = "follow-marker-%d" % os.getpid()
    script = (": %s; i=0; while [ $i -lt 40 ]; do i=$((i+1)); echo line-$i; echo err-$i >&2; "
              "if [ $i -eq 20 ]; then while [ ! -e /workspace/go ]; do sleep 0.05; done; sleep 1; fi; done"
              % marker)
    want_out = b"".join(b"line-%d\n" % i for i in range(1, 41))
    want_err = b"".join(b"err-%d\n" % i for i in range(1, 41))

    def restart_with_output_unread():
        rpc_ok(world, "fs.write", {"sandbox": name, "files": [{"path": "/workspace/go", "content": ""}]})
        os.kill(d.proc.pid, signal.SIGSTOP)
        try:
            poll(lambda: not _procs_with(marker), 30, "the command ends while the daemon is stopped")
        finally:
            os.kill(d.proc.pid, signal.SIGKILL)
            d.proc.wait(10)
        d.start()

    async def follow():
        client = AsyncSandboxClient(d.socket)
        sb = await AsyncSandbox.get(name, client=client)
        try:
            cmd = await sb.run_command("sh", ["-c", script], detached=True)
            got = {"stdout": b"", "stderr": b""}
            restarted = False
            async for item in cmd.logs():
                got[item["stream"]] += item["data"]
                if not restarted and got["stdout"].endswith(b"line-20\n") and got["stderr"].endswith(b"err-20\n"):
                    restarted = True
                    await asyncio.get_running_loop().run_in_executor(None, restart_with_output_unread)
            return restarted, got
        finally:
            await client.close()

    try:
        restarted, got = asyncio.run(asyncio.wait_for(follow(), 120))
        expect(restarted, "the daemon was restarted while following")
        expect_eq((got["stdout"], got["stderr"]), (want_out, want_err), "the followed output")
    finally:
        delete(world, name)
