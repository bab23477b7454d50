"""What a command used: `usage: {cpuMs, memoryPeakBytes}` of a finished
command (wait4 in sandbox-init: CPU time of its process tree, the largest
resident set of one of its processes), in command.run, command.wait,
command.get and `sandboxctl command get`, kept across a daemon restart."""
import json
import os
import signal

from common import create, delete, expect, expect_eq, poll, rpc_ok, sandbox

MIB = 1024 * 1024

# About one second of CPU time (process time, not wall time: the machine may
# be loaded) in a child of sh, with 100 MiB written so that its pages are
# resident.
BURN = ("import time\n"
        "b = bytearray(b'x' * (100 << 20))\n"
        "while time.process_time() < 1.0:\n"
        "    b[0] = (b[0] + 1) & 255\n")


def _burn_params(name, **extra):
    p = {"sandbox": name, "cmd": "sh", "args": ["-c", "python3 -c \"$0\"; true", BURN]}
    p.update(extra)
    return p


def _expect_burn_usage(usage, what):
    expect(isinstance(usage, dict), what + ": usage is an object:", usage)
    expect(500 <= usage["cpuMs"] <= 5000, what + ": cpuMs of ~1 s of CPU in a child of sh:", usage)
    expect(95 * MIB <= usage["memoryPeakBytes"] < 1024 * MIB,
           what + ": memoryPeakBytes of a process that wrote 100 MiB:", usage)


def test_a_command_reports_the_cpu_and_memory_of_its_process_tree(world):
    with sandbox(world, "usage", "--deny-all") as name:
        fin = rpc_ok(world, "command.run", _burn_params(name), timeout=120)
        expect_eq(fin["exitCode"], 0, "exit code of the burner")
        _expect_burn_usage(fin.get("usage"), "command.run")
        _expect_burn_usage(rpc_ok(world, "command.wait", {"cmdId": fin["cmdId"]})["usage"], "command.wait")
        got = rpc_ok(world, "command.get", {"cmdId": fin["cmdId"]})
        _expect_burn_usage(got["usage"], "command.get")
        code, out, err = world.ctl("command", "get", fin["cmdId"])
        expect_eq(code, 0, "sandboxctl command get (%s)" % err.strip())
        expect("usage.cpuMs: %d" % got["usage"]["cpuMs"] in out, "command get prints usage.cpuMs:", out)
        expect("usage.memoryPeakBytes: " in out, "command get prints usage.memoryPeakBytes:", out)


def test_true_reports_small_figures_and_a_running_command_none(world):
    with sandbox(world, "usage-true", "--deny-all") as name:
        fin = rpc_ok(world, "command.run", {"sandbox": name, "cmd": "true"})
        u = fin.get("usage")
        expect(isinstance(u, dict), "usage of true:", fin)
        expect(0 <= u["cpuMs"] < 300, "cpuMs of true:", u)
        expect(0 < u["memoryPeakBytes"] < 64 * MIB, "memoryPeakBytes of true:", u)
        r = rpc_ok(world, "command.run", {"sandbox": name, "cmd": "sleep", "args": ["100"], "detached": True})
        got = rpc_ok(world, "command.get", {"cmdId": r["cmdId"]})
        expect_eq(got["usage"], None, "usage of a running command")
        rpc_ok(world, "command.kill", {"cmdId": r["cmdId"]})
        fin = rpc_ok(world, "command.wait", {"cmdId": r["cmdId"]})
        expect_eq(fin["exitCode"], 128 + signal.SIGKILL, "exit code of the killed sleep")
        expect(isinstance(fin["usage"], dict), "a killed command reports its usage too:", fin)


def test_usage_of_a_finished_command_survives_a_daemon_restart(world):
    name, _c, _o, _e = create(world, "usage-rst", "--deny-all")
    try:
        r = rpc_ok(world, "command.run", _burn_params(name, detached=True))
        fin = rpc_ok(world, "command.wait", {"cmdId": r["cmdId"]}, timeout=120)
        _expect_burn_usage(fin["usage"], "before the restart")
        d = world.daemon
        os.kill(d.proc.pid, signal.SIGKILL)
        d.proc.wait(10)
        d.start()
        got = {}

        def known():
            got.update(rpc_ok(world, "command.get", {"cmdId": r["cmdId"]}))
            return got.get("exitCode") is not None
        poll(known, 30, "the finished command is known again after the restart")
        expect_eq(got["usage"], fin["usage"], "usage after a kill -9 and restart of the daemon")
        code, out, err = world.ctl("--json", "command", "get", r["cmdId"])
        expect_eq(code, 0, "sandboxctl command get after the restart (%s)" % err.strip())
        expect_eq(json.loads(out)["usage"], fin["usage"], "sandboxctl --json command get: usage")
    finally:
        delete(world, name)
