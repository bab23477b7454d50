#!/usr/bin/env python3
"""make bench-detail: the egress policy engine's costs (DESIGN §5.2: per-packet and
per-change cost must not grow with the number of sandboxes).

Measured in the test world (tests/integration/world.py) with a private
sandboxd, with 1, 100 and 1000 sessions' rules loaded in the world host's
`inet sandboxd` table:
  - policy update: `sandbox.update` with a new networkPolicy on a running
    custom-policy sandbox, one JSON-RPC round trip on an open connection;
  - new connection: a TCP connect from inside a custom-policy sandbox to an
    address its subnets.allow holds (timed inside the sandbox);
  - DNS through the filter: a query for an allowed name from inside that
    sandbox to its DNS filter, beside the same query straight to dnsmasq
    from an allow-all sandbox (same path, minus the filter).
The 100 and 1000 columns add 48 real custom-policy sandboxes and make up
the rest with sessions made by `nft -f` in the shape policy/nftgen.c gives
them (two chains and four sets each, elements in the `sessions` and
`sessions_input` maps) for interfaces that do not exist, removed at the end.
Prints one table with p50/p90 and ratios. No assertions on time.

    python3 tests/bench/bench_policy.py [--iterations N]
"""
import argparse
import json
import os
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "integration"))

import world as W  # noqa: E402

REAL_EXTRA = 48    # real custom-policy sandboxes added for the 100 and 1000 levels
FAKE_BASE = 20000  # interface numbers of the nft-made sessions (sbx20000...)

# Runs inside a sandbox: N timed TCP connects, or N timed DNS queries; prints
# a JSON list of milliseconds.
CONNECTS = r'''
import json, socket, sys, time
host, port, n = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
out = []
for _ in range(n):
    s = socket.socket(); s.settimeout(3)
    t = time.perf_counter(); s.connect((host, port)); out.append((time.perf_counter() - t) * 1000)
    s.close()
print(json.dumps(out))
'''

QUERIES = r'''
import json, random, socket, struct, sys, time
server, name, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.settimeout(3)
qn = b"".join(bytes([len(l)]) + l.encode() for l in name.split(".")) + b"\0"
out = []
for _ in range(n):
    qid = random.randrange(65536)
    q = struct.pack(">HHHHHH", qid, 0x0100, 1, 0, 0, 0) + qn + struct.pack(">HH", 1, 1)
    t = time.perf_counter(); s.sendto(q, (server, 53))
    while True:
        b = s.recv(4096)
        if b[:2] == q[:2]: break
    if b[3] & 15: raise SystemExit("rcode %d" % (b[3] & 15))
    out.append((time.perf_counter() - t) * 1000)
print(json.dumps(out))
'''


def pct(xs, p):
    xs = sorted(xs)
    if not xs:
        return float("nan")
    k = (len(xs) - 1) * p / 100.0
    lo, hi = int(k), min(int(k) + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (k - lo)


def in_sandbox(w, name, code, *args):
    rc, out, err = w.ctl("exec", name, "--", "python3", "-c", code, *[str(a) for a in args], timeout=300)
    if rc != 0:
        raise SystemExit("bench_policy: %s in %s: exit %d: %s" % (code.split()[1], name, rc, err.strip()[:300]))
    return json.loads(out.strip().splitlines()[-1])


def gateway(w, name):
    _c, out, _e = w.ctl("exec", name, "--", "cat", "/etc/resolv.conf")
    return [l.split()[1] for l in out.splitlines() if l.startswith("nameserver")][0]


def fake_sessions_script(first, count, op):
    """nft -f input that adds (op "add") or deletes (op "delete") `count`
    sessions shaped like policy/nftgen.c's custom ones."""
    forbid = ("0.0.0.0/8, 10.0.0.0/8, 100.64.0.0/10, 127.0.0.0/8, 169.254.0.0/16, 172.16.0.0/12, "
              "192.0.0.0/24, 192.0.2.0/24, 192.88.99.0/24, 192.168.0.0/16, 198.18.0.0/15, "
              "198.51.100.0/24, 203.0.113.0/24, 224.0.0.0/3")
    t = "inet sandboxd"
    lines = []
    for i in range(first, first + count):
        s = "s_sbx%d" % i
        ic = "i_sbx%d" % i
        gw = "10.202.%d.%d" % ((i * 2) // 256 % 256, (i * 2) % 256)
        if op == "delete":
            lines += ['delete element %s sessions { "sbx%d" }' % (t, i),
                      'delete element %s sessions_input { "sbx%d" }' % (t, i),
                      'delete element %s sessions_reply { "sbx%d" }' % (t, i),
                      "delete chain %s %s" % (t, s), "delete chain %s %s" % (t, ic), "delete chain %s r_sbx%d" % (t, i)]
            lines += ["delete set %s %s_%s" % (t, s, x) for x in ("allow4", "deny4", "forbid4", "dns4")]
            continue
        lines += ["add set %s %s_allow4 { type ipv4_addr; flags interval; }" % (t, s),
                  "add set %s %s_deny4 { type ipv4_addr; flags interval; elements = { 5.5.4.0/24 } }" % (t, s),
                  "add set %s %s_forbid4 { type ipv4_addr; flags interval; elements = { %s } }" % (t, s, forbid),
                  "add set %s %s_dns4 { type ipv4_addr; flags timeout; }" % (t, s),
                  "add chain %s %s" % (t, s),
                  "add rule %s %s ct mark %d accept" % (t, s, i + 1),
                  "add rule %s %s ip daddr @%s_deny4 goto deny" % (t, s, s),
                  "add rule %s %s ip daddr @%s_forbid4 goto deny" % (t, s, s)]
        lines += ["add rule %s %s %s dport %d goto deny" % (t, s, p, port)
                  for port in (53, 853) for p in ("tcp", "udp")]
        lines += ["add rule %s %s ip daddr @%s_allow4 accept" % (t, s, s),
                  "add rule %s %s ip daddr @%s_dns4 accept" % (t, s, s),
                  "add rule %s %s goto deny" % (t, s),
                  "add chain %s %s" % (t, ic),
                  "add rule %s %s ip daddr %s udp dport 53 accept" % (t, ic, gw),
                  "add rule %s %s ip daddr %s tcp dport 53 accept" % (t, ic, gw),
                  "add rule %s %s goto deny" % (t, ic),
                  'add element %s sessions { "sbx%d" : goto %s }' % (t, i, s),
                  'add element %s sessions_input { "sbx%d" : jump %s }' % (t, i, ic),
                  # The reply direction of a flow of an older generation.
                  "add chain %s r_sbx%d" % (t, i),
                  "add rule %s r_sbx%d ct mark %d accept" % (t, i, i + 1),
                  "add rule %s r_sbx%d ip saddr @%s_allow4 ct mark set %d accept" % (t, i, s, i + 1),
                  "add rule %s r_sbx%d ip saddr @%s_dns4 ct mark set %d accept" % (t, i, s, i + 1),
                  "add rule %s r_sbx%d drop" % (t, i),
                  'add element %s sessions_reply { "sbx%d" : goto r_sbx%d }' % (t, i, i)]
    return "\n".join(lines) + "\n"


def nft_file(w, text):
    fd, path = tempfile.mkstemp(prefix="bench-nft-", suffix=".nft", dir=w.tmp)
    with os.fdopen(fd, "w") as f:
        f.write(text)
    p = w.run_in_host(["nft", "-f", path], timeout=300)
    if p.returncode != 0:
        raise SystemExit("bench_policy: nft -f: %s" % p.stderr.strip()[:400])


def count_sessions(w):
    out = w.run_in_host(["nft", "list", "map", "inet", "sandboxd", "sessions"]).stdout
    return out.count('"sbx')


def measure(w, conn, probe, direct, n):
    """{metric: [ms]} at the current load."""
    res = {}
    pols = [{"subnets": {"allow": [W.PUB_API_ADDR + "/32"]}, "allow": ["api.public.test"]},
            {"subnets": {"allow": [W.PUB_API_ADDR + "/32", W.PUB_OTHER_ADDR + "/32"]},
             "allow": ["api.public.test", "other.public.test"]}]
    upd = []
    for i in range(n):
        t = time.perf_counter()
        conn.result("sandbox.update", {"name": probe, "networkPolicy": pols[i % 2]})
        upd.append((time.perf_counter() - t) * 1000)
    res["policy update (sandbox.update)"] = upd
    # The update restarted the DNS filter: wait until it answers again.
    W.World.wait_until(lambda: w.ctl("exec", probe, "--", "getent", "ahostsv4", "api.public.test")[0] == 0,
                       10, "the DNS filter after the updates")
    res["new TCP connection, allowed"] = in_sandbox(w, probe, CONNECTS, W.PUB_API_ADDR, W.LISTEN_PORT, 4 * n)
    gw = gateway(w, probe)
    res["DNS query through the filter"] = in_sandbox(w, probe, QUERIES, gw, "api.public.test", 4 * n)
    res["DNS query straight to dnsmasq"] = in_sandbox(w, direct, QUERIES, W.DNS_ADDR, "api.public.test", 4 * n)
    return res


def main(argv):
    ap = argparse.ArgumentParser()
    ap.add_argument("--iterations", type=int, default=60)
    a = ap.parse_args(argv)
    n = max(50, a.iterations)
    if os.geteuid() != 0:
        print("bench_policy: needs root")
        return 1
    levels, counts = {}, {}
    with W.World(quiet=False) as w:
        d = w.start_sandboxd()
        print("bench_policy: %d updates, %d connects and queries per level, sandboxd pid %d"
              % (n, 4 * n, d.pid), flush=True)
        with d.connect(timeout=300) as c:
            probe, direct = w.name("probe"), w.name("direct")
            c.result("sandbox.create", {"name": probe, "networkPolicy": {"allow": ["api.public.test"]}})
            c.result("sandbox.create", {"name": direct, "networkPolicy": "allow-all"})
            # Warm-up: first exec, first connect, dnsmasq's cache.
            in_sandbox(w, probe, QUERIES, gateway(w, probe), "api.public.test", 5)
            in_sandbox(w, direct, QUERIES, W.DNS_ADDR, "api.public.test", 5)
            counts[1] = count_sessions(w)
            levels[1] = measure(w, c, probe, direct, n)
            # Real sandboxes only up to 50: sandbox-netd takes at most 64
            # --never entries and the host gains addresses with every
            # session, so past about 59 custom sessions a new one fails.
            extra = [w.name("load%d" % i) for i in range(REAL_EXTRA)]
            for k in range(0, len(extra), 25):  # 25 at a time: each starts a DNS filter
                ids = [c.start("sandbox.create", {"name": x, "networkPolicy": {
                    "allow": ["other.public.test"], "subnets": {"deny": ["5.5.4.%d/32" % i]}}})
                    for i, x in enumerate(extra[k:k + 25], k)]
                for i in ids:
                    r = c.wait(i, 300)
                    if "error" in r:
                        raise SystemExit("bench_policy: create: %s" % r["error"])
            fake = 0
            try:
                for lv in (100, 1000):
                    want = lv - 2 - REAL_EXTRA - fake  # the probe and the allow-all one count too
                    nft_file(w, fake_sessions_script(FAKE_BASE + fake, want, "add"))
                    fake += want
                    counts[lv] = count_sessions(w)
                    levels[lv] = measure(w, c, probe, direct, n)
            finally:
                if fake:
                    nft_file(w, fake_sessions_script(FAKE_BASE, fake, "delete"))
            for x in extra:
                c.call("sandbox.delete", {"name": x})
            c.call("sandbox.delete", {"name": probe})
            c.call("sandbox.delete", {"name": direct})

    print()
    print("elements of the `sessions` verdict map per level: %s (real sandboxes: 2, then %d; the rest "
          "nft-made)" % (", ".join("%d" % counts[lv] for lv in sorted(counts)), 2 + REAL_EXTRA))
    hdr = "%-34s" % "operation (ms)"
    for lv in (1, 100, 1000):
        hdr += " %8s %8s" % ("p50@%d" % lv, "p90@%d" % lv)
    print(hdr + " %10s" % "1000/1 p50")
    for metric in levels[1]:
        row = "%-34s" % metric
        for lv in (1, 100, 1000):
            xs = levels[lv][metric]
            row += " %8.3f %8.3f" % (pct(xs, 50), pct(xs, 90))
        row += " %9.2fx" % (pct(levels[1000][metric], 50) / pct(levels[1][metric], 50))
        print(row)
    print()
    for lv in (1, 100, 1000):
        f, s = levels[lv]["DNS query through the filter"], levels[lv]["DNS query straight to dnsmasq"]
        print("DNS filter adds at %4d sessions: p50 %+.3f ms, p90 %+.3f ms (%.2fx)"
              % (lv, pct(f, 50) - pct(s, 50), pct(f, 90) - pct(s, 90), pct(f, 50) / pct(s, 50)))
    print("targets: update <= 2 ms; 1000-session figures <= 1.2x the 1-session ones; DNS filter adds <= 0.3 ms")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
