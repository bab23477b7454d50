#!/usr/bin/env python3
"""Load suite: many clients issuing mixed JSON-RPC calls to one sandboxd in
the test world, then many sandboxes alive at once.

    python3 tests/load/run.py            full size (make bench-detail): 32 clients x
                                         1000 RPCs over 30 sandboxes, then
                                         200 sandboxes alive at once
    python3 tests/load/run.py --short    the make check size: 8 x 100 over
                                         6, then 30 alive

Phase 1 creates the sandboxes with the three kinds of policy in turn
(allow-all, deny-all, an allowlist) and runs the clients, each on its own
connection, each call picked from a fixed mix (get, list, command.run,
fs.write, fs.read, fs.stat, policy.check, daemon.info). Phase 2 creates
the second set of sandboxes all at once, runs one command in each while all
are alive, and deletes them. Reported: errors, p50/p99 latency per method,
the daemon's RSS and open fds before, at the peak and after.

Asserted (both sizes): no call failed, and after the deletes nothing is
left: the daemon's fd count is back to its baseline (polled with a
deadline) and leaks.check("all") finds no mount, link, cgroup, nftables
object, process or state directory. Time is reported, never asserted.
"""
import argparse
import base64
import os
import random
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "integration"))
import leaks  # noqa: E402
import world as W  # noqa: E402

POLICIES = ["allow-all", "deny-all", {"allow": ["api.public.test", "*.public.test:443"]}]


# The daemon keeps up to this many NETLINK_NETFILTER sockets open for
# reuse (libcore/nft.c NL_CACHE_MAX: closing one after a commit waits for
# an RCU grace period); they are counted apart, and bounded.
NL_KEPT_MAX = 32
NETLINK_NETFILTER = 12


def kept_netfilter_sockets(pid):
    """Inodes of the daemon's netfilter netlink sockets that subscribe to
    no group (the kept ones; the nftables monitor has a group)."""
    kept = set()
    with open("/proc/%d/net/netlink" % pid) as f:
        next(f)
        for line in f:
            col = line.split()
            if int(col[1]) == NETLINK_NETFILTER and int(col[3], 16) == 0:
                kept.add(col[-1])
    return kept


def proc_status(pid):
    """RSS in bytes and the count of open fds, the kept netfilter sockets
    left out (checked against their bound instead)."""
    rss = 0
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith("VmRSS:"):
                rss = int(line.split()[1]) * 1024
    kept = kept_netfilter_sockets(pid)
    fds, n_kept = 0, 0
    for fd in os.listdir("/proc/%d/fd" % pid):
        try:
            target = os.readlink("/proc/%d/fd/%s" % (pid, fd))
        except OSError:
            continue
        if target.startswith("socket:[") and target[8:-1] in kept:
            n_kept += 1
        else:
            fds += 1
    if n_kept > NL_KEPT_MAX:
        fds += n_kept - NL_KEPT_MAX  # past the cache's bound: a leak
    return rss, fds


def pct(values, p):
    if not values:
        return 0.0
    v = sorted(values)
    return v[min(len(v) - 1, int(round(p / 100.0 * (len(v) - 1))))]


class Stats:
    def __init__(self):
        self.lock = threading.Lock()
        self.lat = {}
        self.errors = []

    def add(self, method, secs, error=None):
        with self.lock:
            self.lat.setdefault(method, []).append(secs)
            if error is not None:
                self.errors.append("%s: %s" % (method, error))


def timed(conn, stats, method, params):
    t = time.monotonic()
    try:
        msg = conn.call(method, params, timeout=120)
    except Exception as e:  # a dropped connection or a timeout is an error too
        stats.add(method, time.monotonic() - t, repr(e))
        raise
    err = msg.get("error")
    stats.add(method, time.monotonic() - t, err and "%s %s" % (err.get("code"), err.get("message", "")[:200]))
    return msg.get("result")


def one_call(conn, stats, rnd, names, client, i):
    name = rnd.choice(names)
    k = rnd.random()
    if k < 0.20:
        timed(conn, stats, "sandbox.get", {"name": name})
    elif k < 0.28:
        timed(conn, stats, "sandbox.list", {})
    elif k < 0.48:
        r = timed(conn, stats, "command.run", {"sandbox": name, "cmd": "sh",
                                                "args": ["-c", "echo %d-%d" % (client, i)]})
        if r is not None and r.get("exitCode") != 0:
            stats.add("command.run", 0, "exit %r" % r.get("exitCode"))
    elif k < 0.60:
        data = base64.b64encode(os.urandom(rnd.randint(1, 4096))).decode()
        timed(conn, stats, "fs.write", {"sandbox": name, "files": [
            {"path": "/workspace/load-%d" % client, "content": data}]})
    elif k < 0.72:
        timed(conn, stats, "fs.read", {"sandbox": name, "path": "/etc/hostname"})
    elif k < 0.80:
        timed(conn, stats, "fs.stat", {"sandbox": name, "path": "/workspace"})
    elif k < 0.92:
        timed(conn, stats, "policy.check", {"sandbox": name, "host": "api.public.test", "port": 443})
    else:
        timed(conn, stats, "daemon.info", {})


def client_main(d, stats, names, client, n, seed):
    rnd = random.Random(seed)
    try:
        with d.connect(timeout=120) as conn:
            for i in range(n):
                try:
                    one_call(conn, stats, rnd, names, client, i)
                except Exception:
                    return  # recorded; this connection is unusable
    except OSError as e:
        stats.add("connect", 0, repr(e))


def create_all(d, stats, names, policies, parallel):
    def make(i):
        with d.connect(timeout=300) as conn:
            timed(conn, stats, "sandbox.create", {"name": names[i], "networkPolicy": policies[i % len(policies)]})
    with ThreadPoolExecutor(parallel) as ex:
        list(ex.map(make, range(len(names))))


def delete_all(d, stats, names, parallel):
    def rm(name):
        with d.connect(timeout=300) as conn:
            timed(conn, stats, "sandbox.delete", {"name": name})
    with ThreadPoolExecutor(parallel) as ex:
        list(ex.map(rm, names))


def settle_fds(d, baseline, secs=30.0):
    """The daemon's fd count once it is back at (or under) baseline, or the
    last count seen when the deadline passes."""
    deadline = time.monotonic() + secs
    while True:
        _rss, fds = proc_status(d.pid)
        if fds <= baseline or time.monotonic() > deadline:
            return fds
        time.sleep(0.1)


def report(title, stats, wall):
    print("%s: %d calls in %.1f s, %d errors" % (title, sum(len(v) for v in stats.lat.values()), wall,
                                                  len(stats.errors)))
    print("  %-16s %7s %9s %9s" % ("method", "calls", "p50 ms", "p99 ms"))
    for m in sorted(stats.lat):
        v = stats.lat[m]
        print("  %-16s %7d %9.1f %9.1f" % (m, len(v), pct(v, 50) * 1000, pct(v, 99) * 1000))
    for e in stats.errors[:10]:
        print("  error: " + e)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--short", action="store_true", help="the make check size")
    ap.add_argument("--clients", type=int)
    ap.add_argument("--rpcs", type=int, help="calls per client")
    ap.add_argument("--sandboxes", type=int)
    ap.add_argument("--alive", type=int, help="sandboxes alive at once in phase 2")
    a = ap.parse_args()
    clients = a.clients or (8 if a.short else 32)
    rpcs = a.rpcs or (100 if a.short else 1000)
    nsb = a.sandboxes or (6 if a.short else 30)
    alive = a.alive or (30 if a.short else 200)
    failures = []
    with W.World() as w:
        d = w.start_sandboxd()
        # A warm-up sandbox of each policy kind, created, used and deleted,
        # so that what the daemon opens once for its life (sd-event opens a
        # timerfd per clock on first use, the runtime, the seccomp filter) is
        # in the baseline and not counted as a leak or in the latencies.
        for i, pol in enumerate(POLICIES):
            n = w.name("warm%d" % i)
            d.rpc_result("sandbox.create", {"name": n, "networkPolicy": pol}, timeout=300)
            d.rpc_result("command.run", {"sandbox": n, "cmd": "true"})
            d.rpc_result("sandbox.delete", {"name": n}, timeout=300)
        leaks.check(w, "all", d)
        rss0, fds0 = proc_status(d.pid)
        print("daemon before: RSS %.1f MiB, %d fds" % (rss0 / 2**20, fds0))

        # ---- phase 1: mixed calls
        names = [w.name("ld%d" % i) for i in range(nsb)]
        setup = Stats()
        create_all(d, setup, names, POLICIES, 4)
        stats = Stats()
        t = time.monotonic()
        threads = [threading.Thread(target=client_main, args=(d, stats, names, c, rpcs, 1000 + c))
                   for c in range(clients)]
        for th in threads:
            th.start()
        for th in threads:
            th.join()
        wall = time.monotonic() - t
        rss1, fds1 = proc_status(d.pid)
        delete_all(d, setup, names, 4)
        report("phase 1 (%d clients x %d calls over %d sandboxes)" % (clients, rpcs, nsb), stats, wall)
        report("phase 1 setup (create, delete)", setup, 0)
        fds_after1 = settle_fds(d, fds0)
        rss_after1, _ = proc_status(d.pid)
        print("daemon at peak: RSS %.1f MiB, %d fds; after delete: RSS %.1f MiB, %d fds"
              % (rss1 / 2**20, fds1, rss_after1 / 2**20, fds_after1))
        failures += stats.errors + setup.errors
        if fds_after1 > fds0:
            failures.append("phase 1: %d fds after the deletes, %d before" % (fds_after1, fds0))
        # Polled: delete answers before its files are gone (the tombstone's
        # removal finishes in the background).
        try:
            leaks.check(w, "all", d)
            problems = []
        except AssertionError as e:
            problems = [str(e)]
        failures += ["phase 1 leak: " + p for p in problems]

        # ---- phase 2: many alive at once
        many = [w.name("al%d" % i) for i in range(alive)]
        st2 = Stats()
        t = time.monotonic()
        create_all(d, st2, many, POLICIES, 8)
        with d.connect(timeout=300) as conn:
            r = timed(conn, st2, "sandbox.list", {})
            running = sum(1 for s in (r or {}).get("sandboxes", []) if s.get("name") in many
                          and s.get("status") == "running")
        if running != alive:
            st2.errors.append("sandbox.list: %d of %d running" % (running, alive))

        def touch(name):
            with d.connect(timeout=300) as conn:
                res = timed(conn, st2, "command.run", {"sandbox": name, "cmd": "true"})
                if res is not None and res.get("exitCode") != 0:
                    st2.add("command.run", 0, "exit %r" % res.get("exitCode"))
        with ThreadPoolExecutor(8) as ex:
            list(ex.map(touch, many))
        rss2, fds2 = proc_status(d.pid)
        delete_all(d, st2, many, 8)
        wall = time.monotonic() - t
        report("phase 2 (%d sandboxes alive at once)" % alive, st2, wall)
        fds_after2 = settle_fds(d, fds0)
        rss_after2, _ = proc_status(d.pid)
        print("daemon with %d alive: RSS %.1f MiB, %d fds; after delete: RSS %.1f MiB, %d fds"
              % (alive, rss2 / 2**20, fds2, rss_after2 / 2**20, fds_after2))
        failures += st2.errors
        if fds_after2 > fds0:
            failures.append("phase 2: %d fds after the deletes, %d before" % (fds_after2, fds0))
        try:
            leaks.check(w, "all", d)
        except AssertionError as e:
            failures.append("phase 2 leak: %s" % e)
        if not d.alive():
            failures.append("sandboxd died:\n" + d.log_tail())
    if failures:
        print("load: FAILED (%d problems)" % len(failures))
        for f in failures[:30]:
            print("  " + f)
        return 1
    print("load: ok")
    return 0


if __name__ == "__main__":
    sys.exit(main())
