#!/usr/bin/env python3
"""make bench-detail: output relay fairness (issue #10 item 7, output).

Measured in the test world with a private sandboxd: the latency of
`command.run true` (raw JSON-RPC) in sandbox B while idle, then while
sandbox A runs --floods detached `cat /dev/zero` whose stdout streams to a
client that reads and discards it as fast as it can (so the whole flood goes
through the daemon's relay), then idle again. Prints p50/p90, the ratio of
the flooded p50 to the idle one (the target is at most 2x) and the relay's
throughput. No assertions on time: numbers are reported, never judged.

    python3 tests/bench/bench_flood.py [--iterations N] [--floods N] [--seconds S]
"""
import argparse
import os
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "integration"))

import world as W  # noqa: E402

# The flood's client, in a process of its own so that its reading does not
# share an interpreter lock with the measuring client: starts the commands,
# prints "started" once all have, then reads and discards until killed,
# printing the byte count on SIGTERM.
FLOOD_CLIENT = r"""
import json, signal, socket, sys
path, name, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
s.connect(path)
for i in range(n):
    s.sendall((json.dumps({"jsonrpc": "2.0", "id": i + 1, "method": "command.run",
               "params": {"sandbox": name, "cmd": "cat", "args": ["/dev/zero"], "detached": True}}) + "\n").encode())
total = 0
buf = b""
answered = 0
while answered < n:
    chunk = s.recv(1 << 20)
    if not chunk:
        sys.exit("flood: connection closed")
    total += len(chunk)
    buf += chunk
    lines = buf.split(b"\n")
    buf = lines.pop()
    for line in lines:
        if b'"method"' not in line[:80]:
            answered += 1
            if b'"error"' in line[:200]:
                sys.exit("flood: " + line[:300].decode(errors="replace"))
print("started", flush=True)
def done(*_):
    print(total, flush=True)
    sys.exit(0)
signal.signal(signal.SIGTERM, done)
while True:
    chunk = s.recv(1 << 20)
    if not chunk:
        done()
    total += len(chunk)
"""


def pct(xs, p):
    xs = sorted(xs)
    if not xs:
        return float("nan")
    k = (len(xs) - 1) * p / 100.0
    lo, hi = int(k), min(int(k) + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (k - lo)


def main(argv):
    ap = argparse.ArgumentParser()
    ap.add_argument("--iterations", type=int, default=200)
    ap.add_argument("--floods", type=int, default=30)
    args = ap.parse_args(argv)
    if os.geteuid() != 0:
        print("bench_flood: needs root")
        return 1
    with W.World(quiet=False) as w:
        d = w.start_sandboxd()
        a, b = "fa%s" % w.id, "fb%s" % w.id
        rpc = d.connect(120)
        for name in (a, b):
            rpc.result("sandbox.create", {"name": name, "networkPolicy": "deny-all", "timeout": 3600000})

        def exec_b(n):
            out = []
            for _ in range(n):
                t = time.perf_counter()
                m = rpc.call("command.run", {"sandbox": b, "cmd": "true"}, 120)
                out.append((time.perf_counter() - t) * 1000.0)
                if "error" in m or m["result"]["exitCode"] != 0:
                    raise SystemExit("bench_flood: exec in B: %s" % m)
                rpc.notes.clear()
            return out

        exec_b(10)  # B's first commands fault in its files
        idle = exec_b(args.iterations)
        flood = subprocess.Popen([sys.executable, "-c", FLOOD_CLIENT,
                                  d.socket, a, str(args.floods)],
                                 stdout=subprocess.PIPE, text=True)
        try:
            if flood.stdout.readline().strip() != "started":
                raise SystemExit("bench_flood: the flood did not start")
            t0 = time.perf_counter()
            flooded = exec_b(args.iterations)
            secs = time.perf_counter() - t0
        finally:
            flood.terminate()
            out, _ = flood.communicate(timeout=30)
        relayed = int(out.strip() or 0)
        rpc.result("sandbox.stop", {"name": a}, 120)
        after = exec_b(args.iterations)
        for name in (a, b):
            rpc.call("sandbox.delete", {"name": name}, 120)
        rpc.close()
        w.stop_sandboxd()
    print()
    print("%-44s %9s %9s %6s" % ("exec true in B (JSON-RPC)", "p50 ms", "p90 ms", "runs"))
    for label, xs in (("idle", idle), ("while A floods (%d x cat /dev/zero)" % args.floods, flooded),
                      ("idle again, A stopped", after)):
        print("%-44s %9.2f %9.2f %6d" % (label, pct(xs, 50), pct(xs, 90), len(xs)))
    base = pct(idle + after, 50)
    print("flooded p50 / idle p50: %.2fx (target: at most 2x)" % (pct(flooded, 50) / base))
    print("relayed to the flood's client: %.0f MiB/s over %.1f s" % (relayed / secs / (1 << 20), secs))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
