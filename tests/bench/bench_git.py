#!/usr/bin/env python3
"""make bench-detail: shallow git sources (issue #12 item 6).

In the test world (tests/integration/world.py) with a private sandboxd: a
repository of --commits commits (5,000 by default, each changing one of a
few hundred files, made with git fast-import) served by the world's git
daemon, cloned as a sandbox source with `depth: 1` (the git program) and
with the full history (libgit2). Prints the median time of sandbox.create
for each over --runs, and the commits each clone holds. No assertions.

    python3 tests/bench/bench_git.py [--runs N] [--commits N]
"""
import argparse
import os
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "integration"))

import world as W  # noqa: E402


def make_repo(path, commits):
    subprocess.run(["git", "init", "-q", "--bare", path], check=True)
    lines = []
    for i in range(1, commits + 1):
        body = ("file %d of commit %d\n" % (i % 300, i)) * 20
        msg = "commit %d\n" % i
        lines.append("commit refs/heads/main\nmark :%d\ncommitter Bench <b@x> %d +0000\ndata %d\n%s"
                     % (i, 1700000000 + i, len(msg), msg))
        if i > 1:
            lines.append("from :%d\n" % (i - 1))
        lines.append("M 644 inline f%03d.txt\ndata %d\n%s\n" % (i % 300, len(body), body))
    subprocess.run(["git", "-C", path, "fast-import", "--quiet"], input="".join(lines).encode(), check=True)
    subprocess.run(["git", "-C", path, "symbolic-ref", "HEAD", "refs/heads/main"], check=True)


def main(argv):
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--commits", type=int, default=5000)
    a = ap.parse_args(argv)
    if os.geteuid() != 0:
        print("bench_git: needs root")
        return 1
    res = {"depth 1": [], "full": []}
    counts = {}
    with W.World(quiet=False) as w:
        d = w.start_sandboxd()
        make_repo(os.path.join(w.git_dir, "bench.git"), a.commits)
        url = "git://%s/bench.git" % W.GIT_ADDR
        print("bench_git: %d commits at %s, %d runs, sandboxd pid %d" % (a.commits, url, a.runs, d.pid),
              flush=True)
        for i in range(a.runs):
            for kind, extra in (("depth 1", ["--depth", "1"]), ("full", [])):
                name = w.name("bench-git")
                t = time.monotonic()
                d.ctl("create", "--name", name, "--deny-all", "--git", url, *extra, check=True, timeout=900)
                res[kind].append(time.monotonic() - t)
                rc, out, _e = d.ctl("exec", name, "--", "git", "-C", "/workspace", "rev-list", "--count", "HEAD")
                counts[kind] = out.strip()
                d.ctl("rm", name)
    print()
    print("%-8s %12s %10s" % ("clone", "create s p50", "commits"))
    for k in res:
        xs = sorted(res[k])
        print("%-8s %12.2f %10s" % (k, xs[len(xs) // 2], counts.get(k)))
    print()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
