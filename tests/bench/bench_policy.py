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
the rest with sessions made by `nft -f` for interfaces that do not exist,
copies of the probe's own (SessionTemplate: the sets, chains and map
elements policy/nftgen.c made for it, as `nft list` shows them), removed
at the end.
Prints one table with p50/p90 and ratios. No assertions on time.

    python3 tests/bench/bench_policy.py [--iterations N]
"""
import argparse
import json
import os
import re
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


def _blocks(listing):
    """{("set"|"map"|"chain", name): [statement, ...]} of `nft list table`
    output: a statement is a line two tabs deep with its continuation
    lines (deeper, as nft wraps long element lists) joined on."""
    out, cur = {}, None
    for line in listing.splitlines():
        m = re.match(r"^\t(set|map|chain) (\S+) \{$", line)
        if m:
            cur = out.setdefault((m.group(1), m.group(2)), [])
        elif line == "\t}":
            cur = None
        elif cur is not None and line.strip():
            if cur and re.match(r"^\t\t[\t ]", line):
                cur[-1] += " " + line.strip()
            else:
                cur.append(line.strip())
    return out


def _elements(stmts):
    """The elements of a set or map, one string each."""
    for st in stmts:
        if st.startswith("elements = {"):
            return [e.strip() for e in st[len("elements = {"):].rstrip("}").split(",") if e.strip()]
    return []


CHUNK = 500
RANGE_SETS = tuple(b + s for b in ("allow4", "deny4", "opened4", "allow6", "deny6", "opened6") for s in ("", "_b"))


class SessionTemplate:
    """The nftables elements policy/nftgen.c gave one custom-policy
    session, read from the table (`nft list`), to be copied for interfaces
    that do not exist. Read, not written out here, so the copies have
    whatever shape nftgen gives a session now: no chain or set of its own,
    only elements of the shared sets and maps, those keyed by its interface
    name (sessions, sessions_input, sessions_reply, proxied, gens,
    genmark, gw4, ...) and those of the keyed range sets (allow4, ...,
    allow4_b, ...), whose keys nft prints as big-endian integers: the
    name's 16 bytes, then the address."""

    def __init__(self, listing, ifname):
        self.ifname = ifname
        self.shared, self.ranges = [], []
        for (kind, name), stmts in sorted(_blocks(listing).items()):
            if kind == "chain":
                continue
            if any(st.startswith("flags") and "timeout" in st for st in stmts):
                continue  # the shared DNS pin sets: timeouts, not copied
            if name in RANGE_SETS:
                mine = [e for e in _elements(stmts) if self._key_ifname(name, e) == ifname]
                if mine:
                    self.ranges.append((name, mine))
                continue
            mine = [e for e in _elements(stmts) if self._mentions(e)]
            if mine:
                self.shared.append((name, mine))
        if not self.shared or not self.ranges:
            raise SystemExit("bench_policy: no nftables session for %s in the table" % ifname)

    @staticmethod
    def _klen(set_name):
        return 16 + (16 if "6" in set_name else 4)

    def _key_ifname(self, set_name, elem):
        m = re.search(r"\d{30,}", elem)
        if not m:
            return None
        return int(m.group(0)).to_bytes(self._klen(set_name), "big")[:16].rstrip(b"\0").decode("ascii", "replace")

    def _mentions(self, text):
        return re.search(r"(?<![0-9A-Za-z])%s(?![0-9])" % re.escape(self.ifname), text) is not None

    def _rename(self, text, ifname):
        return re.sub(r"(?<![0-9A-Za-z])%s(?![0-9])" % re.escape(self.ifname), ifname, text)

    def _rekey(self, set_name, elem, ifname):
        klen, name = self._klen(set_name), ifname.encode().ljust(15, b"\0")

        def one(m):
            key = int(m.group(0)).to_bytes(klen, "big")
            return str(int.from_bytes(name + key[15:], "big"))
        return re.sub(r"\d{30,}", one, elem)

    def script(self, ifnames, op, listing=None):
        """nft -f input that adds (op "add") or deletes (op "delete") a
        copy of the session for each interface name. A delete needs the
        table's `listing` as it is now: nft deletes interval elements in
        time quadratic in the set's size (minutes at 1000 sessions), so the
        keyed range sets are flushed and given back the elements of every
        other interface instead, in the same transaction."""
        t = "inet sandboxd"
        out = []
        if op == "delete":
            gone = set(ifnames)
            blocks = _blocks(listing)
            for m in RANGE_SETS:
                keep = [e for e in _elements(blocks.get(("set", m), [])) if self._key_ifname(m, e) not in gone]
                out.append("flush set %s %s" % (t, m))
                for k in range(0, len(keep), CHUNK):
                    out.append("add element %s %s { %s }" % (t, m, ", ".join(keep[k:k + CHUNK])))
        for m, els in (self.ranges if op == "add" else []):
            copies = [self._rekey(m, e, i) for i in ifnames for e in els]
            for k in range(0, len(copies), CHUNK):
                out.append("%s element %s %s { %s }" % (op, t, m, ", ".join(copies[k:k + CHUNK])))
        for m, els in self.shared:
            copies = [self._rename(e, i) if op == "add" else self._rename(e, i).split(" : ")[0]
                      for i in ifnames for e in els]
            for k in range(0, len(copies), CHUNK):
                out.append("%s element %s %s { %s }" % (op, t, m, ", ".join(copies[k:k + CHUNK])))
        return "\n".join(out) + "\n"


def custom_session_ifname(listing):
    """The interface of the one custom-policy session in the table (the
    one the `sessions` map sends to the shared chain `custom`)."""
    found = set(re.findall(r'"(sbx\d+)" : goto custom', listing))
    if len(found) != 1:
        raise SystemExit("bench_policy: expected one custom-policy session, found %s" % sorted(found))
    return found.pop()


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
            # The probe is the one custom-policy session yet: the shape the
            # nft-made sessions copy.
            listing = w.run_in_host(["nft", "list", "table", "inet", "sandboxd"]).stdout
            template = SessionTemplate(listing, custom_session_ifname(listing))
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
                    nft_file(w, template.script(["sbx%d" % i for i in range(FAKE_BASE + fake,
                                                                           FAKE_BASE + fake + want)], "add"))
                    fake += want
                    counts[lv] = count_sessions(w)
                    levels[lv] = measure(w, c, probe, direct, n)
            finally:
                if fake:
                    nft_file(w, template.script(["sbx%d" % i for i in range(FAKE_BASE, FAKE_BASE + fake)],
                                                "delete", w.run_in_host(["nft", "list", "table", "inet",
                                                                         "sandboxd"]).stdout))
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
