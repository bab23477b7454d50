#!/usr/bin/env python3
"""make bench-detail: the egress proxy's costs (DESIGN §5.2, issue #4 item 7).

Measured in the test world (tests/integration/world.py) with a private
sandboxd, from inside three sandboxes, with curl against the world's HTTPS
echo server (api.public.test, GET /bytes/N):
  - direct:     allow-all, no proxy (the baseline);
  - splice:     {"allow": ["api.public.test"]}: the proxy checks CONNECT
                and SNI, then splices; TLS is end to end (the client is
                given the world CA);
  - terminated: the same domain with one rule (that never matches): the
                proxy terminates TLS with the session CA and re-encrypts
                upstream.
For each: the throughput of a 100 MiB download (median of --runs), and the
connection setup time (curl's time_appconnect: name resolution, TCP, the
proxy's CONNECT where there is one, and the TLS handshake) over --connects
small requests. Prints one table with the ratios to direct and the targets.
No assertions.

    python3 tests/bench/bench_proxy.py [--runs N] [--connects N] [--mib N]
"""
import argparse
import base64
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "integration"))

import world as W  # noqa: E402

CA_INSIDE = "/tmp/world-ca.crt"
BUNDLE_INSIDE = "/tmp/bundle.crt"


def pct(xs, p):
    xs = sorted(xs)
    if not xs:
        return float("nan")
    k = (len(xs) - 1) * p / 100.0
    lo, hi = int(k), min(int(k) + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (k - lo)


def sh(w, name, script):
    rc, out, err = w.ctl("exec", name, "--", "sh", "-c", script, timeout=600)
    if rc != 0:
        raise SystemExit("bench_proxy: %r in %s: exit %d: %s %s" % (script[:60], name, rc, out[-200:], err[-300:]))
    return out


def curl_args(path):
    # Every client loads a one-certificate file: the world CA (direct and
    # spliced) or the session CA (terminated). OpenSSL 3.0 takes tens of ms
    # to parse a full system bundle, which would bury the proxy's own cost.
    return "--cacert %s" % BUNDLE_INSIDE


def download(w, name, path, nbytes, runs):
    """MiB/s of each run."""
    script = ("for i in $(seq %d); do curl -sS -o /dev/null -w '%%{speed_download} %%{size_download}\\n' %s "
              "https://api.public.test/bytes/%d; done" % (runs, curl_args(path), nbytes))
    out = []
    for line in sh(w, name, script).split("\n"):
        if line.strip():
            speed, size = line.split()
            if int(float(size)) != nbytes:
                raise SystemExit("bench_proxy: %s: %s bytes, expected %d" % (path, size, nbytes))
            out.append(float(speed) / (1 << 20))
    return out


def setup_times(w, name, path, n):
    """ms from the start of a request to TLS established, per request."""
    script = ("for i in $(seq %d); do curl -sS -o /dev/null -w '%%{time_appconnect}\\n' %s "
              "https://api.public.test/x; done" % (n, curl_args(path)))
    return [float(x) * 1000 for x in sh(w, name, script).split() if x.strip()]


def main(argv):
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--connects", type=int, default=40)
    ap.add_argument("--mib", type=int, default=100)
    a = ap.parse_args(argv)
    if os.geteuid() != 0:
        print("bench_proxy: needs root")
        return 1
    nbytes = a.mib << 20
    policies = {
        "direct": "allow-all",
        "splice": {"allow": ["api.public.test"]},
        "terminated": {"allow": {"api.public.test": [
            {"match": {"path": {"exact": "/never-requested"}}, "transform": [{"headers": {"X-Bench": "1"}}]}]}},
    }
    res = {}
    with W.World(quiet=False) as w:
        d = w.start_sandboxd()
        with open(w.ca_cert, "rb") as f:
            ca = base64.b64encode(f.read()).decode()
        print("bench_proxy: %d MiB download x %d, %d connection setups per path, sandboxd pid %d"
              % (a.mib, a.runs, a.connects, d.pid), flush=True)
        with d.connect(timeout=300) as c:
            names = {}
            try:
                for path, pol in policies.items():
                    names[path] = w.name("bench-" + path)
                    c.result("sandbox.create", {"name": names[path], "networkPolicy": pol})
                    c.result("fs.write", {"sandbox": names[path], "files": [{"path": CA_INSIDE, "content": ca}]})
                    if path == "terminated":
                        # The session CA is the last certificate of the
                        # sandbox's system bundle.
                        sh(w, names[path], "awk '/BEGIN CERTIFICATE/{b=\"\"} {b=b $0 \"\\n\"} END{printf \"%%s\", b}' "
                                           "/etc/ssl/certs/ca-certificates.crt > %s" % BUNDLE_INSIDE)
                    else:
                        sh(w, names[path], "cp %s %s" % (CA_INSIDE, BUNDLE_INSIDE))
                    setup_times(w, names[path], path, 2)  # warm-up: first exec, caches
                # Interleaved, so a slow moment of the machine hits every path.
                for path in policies:
                    res[path] = {"mibs": download(w, names[path], path, nbytes, a.runs),
                                 "setup": setup_times(w, names[path], path, a.connects)}
            finally:
                for name in names.values():
                    c.call("sandbox.delete", {"name": name})

    base_t, base_s = pct(res["direct"]["mibs"], 50), pct(res["direct"]["setup"], 50)
    targets = {"direct": "", "splice": ">= 0.80x", "terminated": ">= 0.50x"}
    print()
    print("%-12s %12s %10s %10s %14s %14s %12s" % ("path", "MiB/s (p50)", "x direct", "target",
                                                 "setup p50 ms", "setup p90 ms", "added p50"))
    for path in policies:
        t, s = pct(res[path]["mibs"], 50), res[path]["setup"]
        print("%-12s %12.1f %9.2fx %10s %14.3f %14.3f %+11.3f"
              % (path, t, t / base_t, targets[path], pct(s, 50), pct(s, 90), pct(s, 50) - base_s))
    print()
    print("targets: splice >= 0.8x direct, terminated >= 0.5x direct, splice adds <= 1 ms to connection setup")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
