#!/usr/bin/env python3
"""E2B's published JS SDK (the `e2b` npm package, pinned by
tests/e2b/package-lock.json) against sandboxd-e2b and sandboxd in the test
world (tests/integration/world.py, DESIGN §8).

    python3 tests/e2b/run.py [program.mjs ...]

Opens a world, starts sandboxd with daemon.json tenants.gateways naming
the gateway's uid, adds two API keys (tenants e2b-a and e2b-b) with
`sandboxd-e2b key add`, starts sandboxd-e2b as that uid (gid nogroup) on
127.0.0.1 in the world host's network namespace, and runs each program
with node there, its environment naming the server only through
E2B_API_URL, E2B_SANDBOX_URL and E2B_API_KEY (E2B_API_KEY_B: the second
key, for the isolation check); agent.mjs runs once more over HTTPS
(--tls-cert, a CA of `sandboxctl certs init` that node is told to trust),
envd.py (python3: envd calls the JS SDK does not make, on the wire),
verbs.py (python3: every /sandboxes/{id}/VERB route
with another tenant's id, and the head's limits in pieces), caps.py
(python3) against a third gateway with a small connection
table (CAPS_ARGS), and E2B's own JS SDK tests (e2b-sdk-tests/, vitest),
which print N of M passed and fail the run when a test not listed in
docs/E2B.md fails or a listed one passes. E2B_TEST_TIMEOUT (s, default
300) bounds each program; E2B_VITEST_ARGS adds vitest arguments (e.g.
-t NAME); E2B_VITEST_JSON keeps vitest's JSON report at that path.
Every process it starts is stopped, and
the world torn down, on every exit. Exit status: 0 when every program
passed.
"""
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(REPO, "tests", "integration"))

import world as W  # noqa: E402

GATEWAY_UID = 2100
NOGROUP = 65534
PORT = 49983  # envd's port; any free loopback port of the world would do
TLS_PORT = 49984  # the same gateway's HTTPS listener (--tls-cert)
# caps.py's gateway: a small connection table, so filling it is cheap.
CAPS_PORT = 49985
CAPS_ARGS = ("--max-conns", "8", "--max-conns-per-addr", "4")
# E2B's own JS SDK tests (e2b-sdk-tests/SOURCE.md), run by vitest.
SDK_TESTS = "e2b-sdk-tests"
DOC = os.path.join(REPO, "docs", "E2B.md")
# E2B's sandbox domain of the gateways (--domain): a sandbox's exposed
# port N is https://N-ID.e2b.test:49984 (the SDK's getHost()), served by
# the HTTPS gateway; the world's host namespace resolves every name under
# it to 127.0.0.1 (a dnsmasq of its own at DNS_ADDR, the resolv.conf the
# programs see).
DOMAIN = "e2b.test"
DNS_ADDR = "127.0.0.53"
# SANDBOXD_E2B: another build of the gateway (e.g. one with ASan).
GATEWAY = os.environ.get("SANDBOXD_E2B") or os.path.join(REPO, "build", "sandboxd-e2b")
PROGRAMS = ["agent.mjs", "more.mjs", "isolation.mjs", "envd.py", "caps.py", "connects.py", "verbs.py", SDK_TESTS]
# Run again over HTTPS (E2B_API_URL=https://...), trusting the test CA.
TLS_PROGRAMS = ["agent.mjs"]
NODE_TIMEOUT = int(os.environ.get("E2B_TEST_TIMEOUT", "300"))


def start_dns(world, d):
    """A resolver for the programs: every name under DOMAIN is 127.0.0.1
    (E2B's wildcard DNS for PORT-ID.DOMAIN), nothing else is answered.
    Returns the resolv.conf to bind over /etc/resolv.conf for them."""
    world._spawn("e2b-dns", "host", [
        "dnsmasq", "--no-daemon", "--conf-file=/dev/null", "--no-resolv", "--no-hosts", "--pid-file=",
        "--listen-address=" + DNS_ADDR, "--bind-interfaces", "--address=/%s/127.0.0.1" % DOMAIN])
    resolv = os.path.join(d.dir, "e2b-resolv.conf")
    with open(resolv, "w") as f:
        f.write("nameserver %s\n" % DNS_ADDR)
    world.wait_until(lambda: "127.0.0.1" in subprocess.run(
        in_world(world, resolv, ["getent", "ahostsv4", "1-x." + DOMAIN]), capture_output=True, text=True).stdout,
        10, "the e2b.test resolver answers")
    return resolv


def in_world(world, resolv, argv):
    """argv in the world host's network namespace, in a mount namespace of
    its own where /etc/resolv.conf is `resolv`."""
    return ["nsenter", "--net=/run/netns/" + world.host_ns, "--",
            "unshare", "--mount", "--propagation", "slave", "--",
            "sh", "-c", 'mount --bind "$0" /etc/resolv.conf && exec "$@"', resolv] + argv


def add_key(keys, tenant):
    p = subprocess.run([GATEWAY, "key", "add", tenant, "--keys", keys], check=True, capture_output=True, text=True)
    key = p.stdout.strip()
    if not key.startswith("e2b_"):
        raise W.WorldError("key add printed %r" % p.stdout)
    return key


def start_gateway(world, d, keys, port=PORT, tls=(), extra=()):
    log = open(os.path.join(d.dir, "sandboxd-e2b.log"), "ab")
    argv = ["nsenter", "--net=/run/netns/" + world.host_ns, "--",
            "setpriv", "--reuid=%d" % GATEWAY_UID, "--regid=%d" % NOGROUP, "--clear-groups", "--",
            GATEWAY, "--socket", d.socket, "--listen", "127.0.0.1:%d" % port, "--keys", keys,
            "--domain", "%s:%d" % (DOMAIN, TLS_PORT)] + list(tls) + list(extra)
    proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=log, stderr=log, start_new_session=True)
    log.close()
    # Ready when it accepts (start-up, not a test's synchronisation).
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            with open(os.path.join(d.dir, "sandboxd-e2b.log"), errors="replace") as f:
                raise W.WorldError("sandboxd-e2b exited with %s at start: %s" % (proc.returncode, f.read()[-800:]))
        r = subprocess.run(["nsenter", "--net=/run/netns/" + world.host_ns, "--", "python3", "-c",
                            "import socket; socket.create_connection(('127.0.0.1', %d), 1).close()" % port],
                           capture_output=True)
        if r.returncode == 0:
            return proc
        time.sleep(0.05)
    stop(proc)
    raise W.WorldError("sandboxd-e2b did not accept on 127.0.0.1:%d" % port)


def known_failures():
    """The E2B SDK tests docs/E2B.md lists as failing or skipped: the set of
    "FILE > TEST NAME" of its "- `FILE` > `NAME`: reason" lines."""
    known = set()
    with open(DOC) as f:
        for line in f:
            m = re.match(r"- `([^`]+)` > `([^`]+)`", line)
            if m:
                known.add("%s > %s" % (m.group(1), m.group(2)))
    return known


def run_sdk_tests(world, resolv, env, out):
    """Runs E2B's SDK tests with vitest (its JSON report to OUT), prints
    N of M, and returns 0 when every test that failed or was skipped is
    listed in docs/E2B.md, and every listed one still fails (a listed
    test that passes is to be taken off the list)."""
    argv = in_world(world, resolv, ["node",
            os.path.join(HERE, "node_modules", "vitest", "vitest.mjs"), "run",
            "--root", os.path.join(HERE, SDK_TESTS), "--reporter=default", "--reporter=json",
            "--outputFile.json=" + out] + os.environ.get("E2B_VITEST_ARGS", "").split())
    subprocess.run(argv, cwd=os.path.join(HERE, SDK_TESTS), env=env, timeout=NODE_TIMEOUT)
    with open(out) as f:
        report = json.load(f)
    if os.environ.get("E2B_VITEST_JSON"):
        shutil.copy(out, os.environ["E2B_VITEST_JSON"])
    root = os.path.join(HERE, SDK_TESTS, "tests") + "/"
    passed, other = [], []
    for tf in report.get("testResults", []):
        name = tf["name"][len(root):] if tf["name"].startswith(root) else tf["name"]
        if not tf.get("assertionResults"):
            other.append(("%s > (file)" % name, tf.get("message", "")[:200]))
        for t in tf.get("assertionResults", []):
            key = "%s > %s" % (name, " ".join(t.get("ancestorTitles", []) + [t["title"]]))
            if t["status"] == "passed":
                passed.append(key)
            else:
                other.append((key, t["status"] + ": " + " ".join(t.get("failureMessages", []))[:200]))
    total = len(passed) + len(other)
    print("E2B JS SDK tests: %d of %d passed" % (len(passed), total), flush=True)
    known = known_failures()
    rc = 0
    for key, why in other:
        if key not in known:
            print("  not listed in docs/E2B.md: %s: %s" % (key, why.replace("\n", " ")), flush=True)
            rc = 1
    for key in sorted(known & set(passed)):
        print("  listed in docs/E2B.md but passes: %s" % key, flush=True)
        rc = 1
    return rc


def stop(proc):
    if proc and proc.poll() is None:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(10)


def main(argv):
    if os.geteuid() != 0:
        print("e2b-test: needs root (the test world)", file=sys.stderr)
        return 1
    if not all(os.path.isdir(os.path.join(HERE, "node_modules", p)) for p in ("e2b", "vitest")):
        print("e2b-test: the e2b and vitest packages are not installed (tests/e2b/package-lock.json); "
              "run scripts/install-deps", file=sys.stderr)
        return 1
    programs = [(p, False) for p in (argv or PROGRAMS)] + [(p, True) for p in (TLS_PROGRAMS if not argv else [])]
    with W.World() as world:
        d = world.start_sandboxd(config={"socketGroup": "nogroup", "tenants": {"gateways": [GATEWAY_UID]}})
        keys = os.path.join(d.dir, "e2b-keys")
        key_a, key_b = add_key(keys, "e2b-a"), add_key(keys, "e2b-b")
        os.chown(keys, GATEWAY_UID, NOGROUP)
        certs = os.path.join(d.dir, "e2b-certs")
        subprocess.run([W.SANDBOXCTL, "certs", "init", certs, "--name", "127.0.0.1", "--name", "*." + DOMAIN],
                       check=True, capture_output=True)
        resolv = start_dns(world, d)
        # The gateway's own files: its certificate and key (0600, its own).
        os.chmod(certs, 0o711)
        for f in ("server.pem", "server-key.pem"):
            os.chown(os.path.join(certs, f), GATEWAY_UID, NOGROUP)
        gws = []
        rc = 0
        try:
            gws.append(start_gateway(world, d, keys))
            gws.append(start_gateway(world, d, keys, TLS_PORT,
                                     ("--tls-cert", os.path.join(certs, "server.pem"),
                                      "--tls-key", os.path.join(certs, "server-key.pem"))))
            gws.append(start_gateway(world, d, keys, CAPS_PORT, extra=CAPS_ARGS))
            for prog, tls in programs:
                url = ("https://127.0.0.1:%d" % TLS_PORT) if tls else ("http://127.0.0.1:%d" % PORT)
                if prog == "caps.py":
                    url = "http://127.0.0.1:%d" % CAPS_PORT
                env = {k: v for k, v in os.environ.items() if not k.startswith("E2B_")}
                env.update(E2B_API_URL=url, E2B_SANDBOX_URL=url, E2B_API_KEY=key_a, E2B_API_KEY_B=key_b)
                # The HTTPS gateway's CA: for E2B_API_URL over HTTPS and for
                # every sandbox URL (https://PORT-ID.DOMAIN, getHost()).
                env["NODE_EXTRA_CA_CERTS"] = os.path.join(certs, "ca.pem")
                name = prog + (" (HTTPS)" if tls else "")
                print("# %s" % name, flush=True)
                if prog == SDK_TESTS:
                    rc = run_sdk_tests(world, resolv, env, os.path.join(d.dir, "vitest.json")) or rc
                    print("%s %s" % ("PASS" if rc == 0 else "FAIL", name), flush=True)
                    continue
                interp = "python3" if prog.endswith(".py") else "node"
                p = subprocess.run(in_world(world, resolv, [interp, prog]), cwd=HERE, env=env, timeout=NODE_TIMEOUT)
                print("%s %s" % ("PASS" if p.returncode == 0 else "FAIL", name), flush=True)
                rc = rc or p.returncode
        except subprocess.TimeoutExpired:
            print("e2b-test: a program took longer than %ds" % NODE_TIMEOUT, file=sys.stderr)
            rc = 1
        finally:
            for gw in gws:
                stop(gw)
        # Every program kills what it made: nothing may be left (a kill the
        # gateway answered without doing would show here).
        left = [x["name"] for x in d.rpc_result("sandbox.list").get("sandboxes", [])]
        if left:
            print("FAIL sandboxes left behind: %s" % ", ".join(left), flush=True)
            rc = 1
        if rc != 0:
            with open(os.path.join(d.dir, "sandboxd-e2b.log"), errors="replace") as f:
                print("--- sandboxd-e2b log (tail) ---\n" + "".join(f.readlines()[-30:]), file=sys.stderr)
            print("--- sandboxd log (tail) ---\n" + d.log_tail(30), file=sys.stderr)
    if getattr(world, "teardown_errors", None):
        print("FAIL world teardown: %s" % "; ".join(world.teardown_errors), flush=True)
        rc = 1
    print("e2b-test: %s" % ("passed" if rc == 0 else "failed"))
    return rc


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
