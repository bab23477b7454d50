#!/usr/bin/env python3
"""make bench-detail: directory copies in and out of a sandbox (issue #12 item 7).

Measured in the test world (tests/integration/world.py) with a private
sandboxd: `sandboxctl cp -r` of a tree holding one large file (--mib, 1 GiB
by default) and --files small files, host -> sandbox (fs.writeTar) and
sandbox -> host (fs.readTar), beside `cp -a` of the same tree on the host
(the peer: what the disk and page cache allow without sandboxd). Prints MB/s
(10^6 bytes per second) of each, the median of --runs, and the ratio to
cp -a. The target is 200 MB/s each way. No assertions.

    python3 tests/bench/bench_copy.py [--runs N] [--mib N] [--files N]
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


def make_tree(root, mib, files):
    os.makedirs(os.path.join(root, "small"))
    block = os.urandom(16 << 20)
    with open(os.path.join(root, "big.bin"), "wb") as f:
        left = mib << 20
        while left > 0:
            n = min(left, len(block))
            f.write(block[:n])
            left -= n
    for i in range(files):
        with open(os.path.join(root, "small", "f%05d.txt" % i), "wb") as f:
            f.write(block[i * 100:i * 100 + 1000])
    return (mib << 20) + files * 1000


def timed(argv):
    t = time.monotonic()
    subprocess.run(argv, check=True, stdout=subprocess.DEVNULL)
    return time.monotonic() - t


def median(xs):
    xs = sorted(xs)
    return xs[len(xs) // 2]


def main(argv):
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--mib", type=int, default=1024)
    ap.add_argument("--files", type=int, default=1000)
    a = ap.parse_args(argv)
    if os.geteuid() != 0:
        print("bench_copy: needs root")
        return 1
    res = {"up": [], "down": [], "cp -a": []}
    with W.World(quiet=False) as w:
        d = w.start_sandboxd()
        src = os.path.join(w.tmp, "bench-src")
        nbytes = make_tree(src, a.mib, a.files)
        print("bench_copy: a tree of %d MiB + %d small files, %d runs, sandboxd pid %d"
              % (a.mib, a.files, a.runs, d.pid), flush=True)
        name = w.name("bench-copy")
        ctl = [W.SANDBOXCTL, "--socket", d.socket]
        d.ctl("create", "--name", name, "--deny-all", check=True)
        try:
            for i in range(a.runs):
                dst = os.path.join(w.tmp, "bench-down")
                peer = os.path.join(w.tmp, "bench-peer")
                res["up"].append(timed(ctl + ["cp", "-r", src, "%s:/workspace/up%d" % (name, i)]))
                res["down"].append(timed(ctl + ["cp", "-r", "%s:/workspace/up%d" % (name, i), dst]))
                res["cp -a"].append(timed(["cp", "-a", src, peer]))
                d.ctl("exec", name, "--", "rm", "-rf", "/workspace/up%d" % i, check=True, timeout=600)
                shutil.rmtree(dst)
                shutil.rmtree(peer)
        finally:
            d.ctl("rm", name)
    peer_rate = nbytes / median(res["cp -a"]) / 1e6
    print()
    print("%-8s %10s %10s %10s %10s" % ("copy", "s (p50)", "MB/s", "x cp -a", "target"))
    for k in ("up", "down", "cp -a"):
        rate = nbytes / median(res[k]) / 1e6
        print("%-8s %10.2f %10.1f %9.2fx %10s" % (k, median(res[k]), rate, rate / peer_rate,
                                                 "" if k == "cp -a" else ">= 200"))
    print()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
