#!/usr/bin/env python3
"""make bench-detail: sandboxd's costs beside bubblewrap and a plain fork+exec.

Measured in one run, in the test world (tests/integration/world.py), with a
private sandboxd:
  (a) create --deny-all + exec true + rm, through sandboxctl and through the
      raw JSON-RPC API
  (b) exec `true` in a running sandbox (sandboxctl and raw API)
  (c) bwrap --unshare-all ... true
  (d) fork+exec of true (subprocess)
and sandboxd's resident memory idle and with N idle sandboxes (the daemon's
VmRSS, and the daemon plus every sandbox-init it started). Prints p50/p90 and
ratios. No assertions on time: numbers are reported, never judged.

The operations compared in a ratio run in interleaved rounds (one of each per
round, the order rotating), so that a burst of load from elsewhere on the
machine slows both sides of a ratio alike instead of one block of runs.

    python3 tests/bench/bench.py [--iterations N] [--sandboxes N]
"""
import argparse
import os
import shutil
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "integration"))

import world as W  # noqa: E402

BWRAP = ["bwrap", "--unshare-all", "--dev", "/dev", "--proc", "/proc", "--ro-bind", "/usr", "/usr",
         "--symlink", "usr/bin", "/bin", "--symlink", "usr/lib", "/lib",
         "--symlink", "usr/lib64", "/lib64", "true"]


def pct(xs, p):
    xs = sorted(xs)
    if not xs:
        return float("nan")
    k = (len(xs) - 1) * p / 100.0
    lo, hi = int(k), min(int(k) + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (k - lo)


def interleaved(fns, n):
    """Runs each of fns once per round for n rounds, rotating which goes
    first; returns one list of milliseconds per function."""
    out = [[] for _ in fns]
    for i in range(n):
        for j in range(len(fns)):
            k = (i + j) % len(fns)
            t = time.perf_counter()
            fns[k](i)
            out[k].append((time.perf_counter() - t) * 1000.0)
    return out


def rss_kib(pid):
    try:
        with open("/proc/%d/status" % pid) as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


def pss_kib(pid):
    """Proportional set size: shared pages split among the processes that map them."""
    try:
        with open("/proc/%d/smaps_rollup" % pid) as f:
            for line in f:
                if line.startswith("Pss:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


def used_kib():
    """Memory in use on the machine, as free(1) counts it (total - free -
    buffers - page cache - reclaimable slab): includes the kernel's side of a
    sandbox (namespaces, mounts, page tables, cgroups)."""
    m = {}
    with open("/proc/meminfo") as f:
        for line in f:
            k, v = line.split(":", 1)
            m[k] = int(v.split()[0])
    return m["MemTotal"] - m["MemFree"] - m["Buffers"] - m["Cached"] - m["SReclaimable"]


def children_rss(daemon_pid):
    """(count, RSS KiB, PSS KiB) of sandbox-init processes descending from the daemon."""
    parents = {}
    for p in os.listdir("/proc"):
        if not p.isdigit():
            continue
        try:
            with open("/proc/%s/stat" % p) as f:
                s = f.read()
            parents[int(p)] = int(s[s.rindex(")") + 2:].split()[1])
        except (OSError, ValueError):
            continue
    count = kib = pss = 0
    for pid in parents:
        q, depth = pid, 0
        while q in parents and q != daemon_pid and depth < 32:
            q, depth = parents[q], depth + 1
        if q == daemon_pid and pid != daemon_pid:
            try:
                exe = os.readlink("/proc/%d/exe" % pid)
            except OSError:
                exe = ""
            if "sandbox-init" in exe:
                count += 1
                kib += rss_kib(pid)
                pss += pss_kib(pid)
    return count, kib, pss


def check_ok(code, what, err=""):
    if code != 0:
        raise SystemExit("bench: %s failed (exit %d): %s" % (what, code, str(err).strip()[:300]))


def main(argv):
    ap = argparse.ArgumentParser()
    ap.add_argument("--iterations", type=int, default=50)
    ap.add_argument("--sandboxes", type=int, default=100)
    ap.add_argument("--fork-sizes", type=int, nargs="*", default=[1, 100, 1024],
                    help="MiB written before fork/snapshot measurements")
    args = ap.parse_args(argv)
    n = args.iterations
    if os.geteuid() != 0:
        print("bench: needs root")
        return 1
    rows = []
    with W.World(quiet=False) as w:
        d = w.start_sandboxd()
        print("bench: %d iterations each, sandboxd pid %d" % (n, d.pid), flush=True)
        tag = w.id

        def cli_cycle(i):
            name = "b%s-c%d" % (tag, i)
            c, _o, e = d.ctl("create", "--name", name, "--deny-all")
            check_ok(c, "create", e)
            c, _o, e = d.ctl("exec", name, "--", "true")
            check_ok(c, "exec", e)
            c, _o, e = d.ctl("rm", name)
            check_ok(c, "rm", e)

        rpc = d.connect(120)

        def rpc_call(method, params):
            m = rpc.call(method, params, 120)
            if "error" in m:
                raise SystemExit("bench: %s: %s" % (method, m["error"]))
            return m["result"]

        def rpc_cycle(i):
            name = "b%s-r%d" % (tag, i)
            rpc_call("sandbox.create", {"name": name, "networkPolicy": "deny-all"})
            rpc_call("command.run", {"sandbox": name, "cmd": "true"})
            rpc_call("sandbox.delete", {"name": name})
            rpc.notes.clear()

        def bwrap(i):
            subprocess.run(BWRAP, check=True, stdin=subprocess.DEVNULL)

        def fork_exec(i):
            subprocess.run(["true"], check=True)

        have_bwrap = shutil.which("bwrap") is not None
        cycles = [cli_cycle, rpc_cycle] + ([bwrap] if have_bwrap else [])
        cyc = interleaved(cycles, n)
        rows.append(("create+exec+rm (sandboxctl)", cyc[0]))
        rows.append(("create+exec+rm (JSON-RPC)", cyc[1]))

        warm = "b%s-warm" % tag
        c, _o, e = d.ctl("create", "--name", warm, "--deny-all")
        check_ok(c, "create", e)

        def cli_exec(i):
            c, _o, e = d.ctl("exec", warm, "--", "true")
            check_ok(c, "exec", e)

        def rpc_exec(i):
            rpc_call("command.run", {"sandbox": warm, "cmd": "true"})
            rpc.notes.clear()

        for i in range(5):  # the sandbox's first commands fault in its files
            rpc_exec(i)
        ex = interleaved([cli_exec, rpc_exec, fork_exec], n)
        rows.append(("exec true (sandboxctl)", ex[0]))
        rows.append(("exec true (JSON-RPC)", ex[1]))
        d.ctl("rm", warm)

        if have_bwrap:
            rows.append(("bwrap --unshare-all true", cyc[2]))
        rows.append(("fork+exec true", ex[2]))

        # Fork, snapshot and resume against the size of what the sandbox wrote,
        # beside `cp -a` of the same tree on the host.
        lifecycle = []
        for mib in args.fork_sizes:
            src = "b%s-f%d" % (tag, mib)
            rpc_call("sandbox.create", {"name": src, "networkPolicy": "deny-all", "persistent": True,
                                        "timeout": 3600000})
            rpc_call("command.run", {"sandbox": src, "cmd": "sh", "args": ["-c",
                     "mkdir -p /workspace/data && head -c %dM /dev/urandom > /workspace/data/blob "
                     "&& for i in $(seq 200); do echo $i > /workspace/data/f$i; done" % mib]})
            rpc.notes.clear()
            # In the daemon's mount namespace, where the upper (its own
            # disk image) is mounted.
            upper = os.path.join(d.state_dir, "sandboxes", src, "upper")
            ns = ["nsenter", "-t", str(d.pid), "-m", "--"]
            t = time.perf_counter()
            subprocess.run(ns + ["cp", "-a", upper, upper + ".cp"], check=True)
            cp_ms = (time.perf_counter() - t) * 1000
            subprocess.run(ns + ["rm", "-rf", upper + ".cp"], check=True)
            t = time.perf_counter()
            rpc_call("sandbox.fork", {"sourceSandbox": src, "name": src + "-run"})
            fork_running = (time.perf_counter() - t) * 1000
            t = time.perf_counter()
            snap = rpc_call("sandbox.snapshot", {"name": src})["id"]
            snap_ms = (time.perf_counter() - t) * 1000
            rpc_call("sandbox.stop", {"name": src})
            t = time.perf_counter()
            rpc_call("sandbox.fork", {"sourceSandbox": src, "name": src + "-stop"})
            fork_stopped = (time.perf_counter() - t) * 1000
            t = time.perf_counter()
            rpc_call("sandbox.get", {"name": src, "resume": True})
            resume_ms = (time.perf_counter() - t) * 1000
            lifecycle.append((mib, cp_ms, fork_running, fork_stopped, snap_ms, resume_ms))
            for name in (src + "-run", src + "-stop", src):
                rpc_call("sandbox.delete", {"name": name})
            rpc_call("snapshot.delete", {"id": snap})

        # Memory: idle, then with N idle sandboxes.
        idle = rss_kib(d.pid)
        used_before = used_kib()
        names = []
        for i in range(args.sandboxes):
            name = "b%s-m%d" % (tag, i)
            rpc_call("sandbox.create", {"name": name, "networkPolicy": "deny-all"})
            names.append(name)
        loaded = rss_kib(d.pid)
        used_after = used_kib()
        inits, inits_kib, inits_pss = children_rss(d.pid)
        for name in names:
            rpc_call("sandbox.delete", {"name": name})
        after = rss_kib(d.pid)
        rpc.close()
        w.stop_sandboxd()

    base = {r[0]: pct(r[1], 50) for r in rows}
    fe = base.get("fork+exec true")
    bw = base.get("bwrap --unshare-all true")
    print()
    print("%-30s %9s %9s %9s %11s %9s" % ("operation", "p50 ms", "p90 ms", "runs",
                                         "x fork+exec", "x bwrap"))
    for label, xs in rows:
        p50 = pct(xs, 50)
        print("%-30s %9.2f %9.2f %9d %11s %9s" % (
            label, p50, pct(xs, 90), len(xs),
            "%.1f" % (p50 / fe) if fe else "-", "%.1f" % (p50 / bw) if bw else "-"))
    print()
    print("%-10s %10s %14s %14s %12s %10s   (ms, one run each)" % (
        "written", "cp -a", "fork running", "fork stopped", "snapshot", "resume"))
    for mib, cp_ms, fr, fs, sn, rs in lifecycle:
        print("%7d MiB %10.1f %14.1f %14.1f %12.1f %10.1f" % (mib, cp_ms, fr, fs, sn, rs))
    if len(lifecycle) > 1:
        print("  fork stopped, largest / smallest: %.2fx (flat in size when close to 1)"
              % (lifecycle[-1][3] / max(lifecycle[0][3], 0.001)))
    print()
    k = max(1, args.sandboxes)
    print("memory (VmRSS, KiB)")
    print("  sandboxd idle                      %8d" % idle)
    print("  sandboxd with %3d idle sandboxes   %8d   (+%.1f KiB per sandbox)"
          % (args.sandboxes, loaded, (loaded - idle) / k))
    print("  sandbox-init processes (%3d)       %8d   (%.1f KiB each)"
          % (inits, inits_kib, inits_kib / max(1, inits)))
    print("  sandbox-init PSS (%3d)             %8d   (%.1f KiB each: shared pages split)"
          % (inits, inits_pss, inits_pss / max(1, inits)))
    print("  host per sandbox, processes        %8.1f   (daemon delta + its sandbox-init PSS)"
          % ((loaded - idle + inits_pss) / k))
    print("  host per sandbox, machine-wide     %8.1f   (used memory delta incl. kernel objects)"
          % ((used_after - used_before) / k))
    print("  sandboxd after deleting them       %8d" % after)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
