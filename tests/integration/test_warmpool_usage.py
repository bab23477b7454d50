"""A sandbox adopted from the warm pool counts its usage from the adoption:
nothing its pooled session used while it was made and waited (the refill)
shows in sandbox.get's activeCpuUsageMs or memoryPeakBytes."""
import json
import os
import subprocess
import sys

import leaks
import world as W
from common import expect, expect_eq, poll

# What the stand-in for a refill's work uses inside the pooled session's
# cgroups: well above anything an idle, just adopted sandbox shows.
BURN_MIB = 96
BURN_CPU_S = 0.4

_BURNER = r"""
import sys, time
sys.stdin.readline()                    # moved into the pooled cgroups
buf = b"\x01" * (%d << 20)              # touched: charged to the cgroup
t = time.process_time()
while time.process_time() - t < %f:
    pass
print(len(buf), flush=True)
""" % (BURN_MIB, BURN_CPU_S)


def _info(d):
    return d.rpc("daemon.info", {})["result"]["warmPool"]


def _rpc(d, method, params):
    msg = d.rpc(method, params, timeout=120)
    expect("error" not in msg, "%s: %s" % (method, json.dumps(msg.get("error"))))
    return msg["result"]


def _pooled_leaves(world):
    """The cgroup directories (one per hierarchy) holding the processes of
    the one pooled session."""
    leaves = []
    for mnt in world.cgroup_dirs:
        for root, dirs, _files in W.walk(mnt):
            if not os.path.basename(root).startswith("_pool-"):
                continue
            for sub, _d, _f in W.walk(root):
                try:
                    with open(os.path.join(sub, "cgroup.procs")) as f:
                        if f.read().strip():
                            leaves.append(sub)
                            break
                except OSError:
                    pass
            dirs[:] = []
    return leaves


def _use_in_pooled_session(world):
    """Runs a process in the pooled session's cgroups that takes BURN_MIB of
    memory and BURN_CPU_S of CPU there, as a refill's work would, and waits
    for it to end."""
    leaves = _pooled_leaves(world)
    expect(leaves, "cgroups of the pooled session below %s" % world.cgroup_dirs)
    p = subprocess.Popen([sys.executable, "-c", _BURNER], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        for leaf in leaves:
            with open(os.path.join(leaf, "cgroup.procs"), "w") as f:
                f.write(str(p.pid))
        out, _ = p.communicate("go\n", timeout=60)
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    expect_eq(out.strip(), str(BURN_MIB << 20), "the burner ran")


def test_adopted_sandbox_counts_usage_from_its_adoption(world):
    world.stop_sandboxd()  # one daemon per network namespace
    d = world.start_sandboxd({"warmPool": {"size": 1}}, tag="poolu")
    name = world.name("wpu")
    try:
        poll(lambda: _info(d)["ready"] == 1, 60, "the pool fills")
        _use_in_pooled_session(world)
        sb = _rpc(d, "sandbox.create", {"name": name})
        expect_eq(_info(d)["adopted"], 1, "the create was served from the pool")
        expect_eq(sb["status"], "running", "status")
        got = _rpc(d, "sandbox.get", {"name": name})
        cpu, peak = got["activeCpuUsageMs"], got["memoryPeakBytes"]
        expect(peak is None or peak < (BURN_MIB << 20) // 2,
               "memoryPeakBytes right after adoption is the sandbox's own, not the refill's: %r" % peak)
        expect(cpu is not None and cpu < BURN_CPU_S * 1000 / 2,
               "activeCpuUsageMs right after adoption is the sandbox's own, not the refill's: %r" % cpu)
        # A restarted daemon re-adopts the session with the same base.
        expect_eq(d.stop(), 0, "sandboxd exit status on SIGTERM")
        d.start()
        again = _rpc(d, "sandbox.get", {"name": name})
        expect(again["activeCpuUsageMs"] is not None and again["activeCpuUsageMs"] < BURN_CPU_S * 1000 / 2,
               "activeCpuUsageMs after a daemon restart: %r" % again["activeCpuUsageMs"])
        expect(again["memoryPeakBytes"] is None or again["memoryPeakBytes"] < (BURN_MIB << 20) // 2,
               "memoryPeakBytes after a daemon restart: %r" % again["memoryPeakBytes"])
        peak = again["memoryPeakBytes"]
        cpu = again["activeCpuUsageMs"]
        # The figures still count what the sandbox does.
        code, _out, err = d.ctl("exec", name, "--", "sh", "-c",
                                'x=$(head -c 40000000 /dev/zero | tr "\\0" a); echo ${#x}', timeout=120)
        expect_eq(code, 0, "exit of the command (%s)" % err.strip()[:300])
        after = _rpc(d, "sandbox.get", {"name": name})
        if peak is not None:
            expect(after["memoryPeakBytes"] >= 32 << 20,
                   "memoryPeakBytes counts the sandbox's own use: %r" % after["memoryPeakBytes"])
        expect(after["activeCpuUsageMs"] >= cpu, "activeCpuUsageMs never goes back: %r then %r"
               % (cpu, after["activeCpuUsageMs"]))
        _rpc(d, "sandbox.delete", {"name": name})
    finally:
        expect_eq(world.stop_sandboxd(d), 0, "sandboxd exit status")
    problems = leaks.find(world, "all", d)
    expect(not problems, "left behind: %s" % "; ".join(problems[:8]))
