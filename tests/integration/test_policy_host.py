"""The host itself is never reachable from a sandbox, whatever its policy
says (docs/SECURITY.md §3.8, docs/POLICY.md): not its loopback or 0.0.0.0
through the egress proxy, which dials from the host's network namespace,
not an address the host gains while the session runs; and a policy update
leaves no DNS pin of the old policy behind (rule 9), even while the sandbox
floods its DNS filter with queries for the name the update drops."""
import json
import os
import subprocess
import tempfile

import world as W
from common import expect, expect_eq, get, poll, sandbox, sh

CONNECT = r'''
import errno, json, socket, sys, time
host, port = sys.argv[1], int(sys.argv[2])
s = socket.socket(); s.settimeout(3)
t = time.monotonic()
try:
    s.connect((host, port)); r = {"ok": True}
except socket.timeout:
    r = {"ok": False, "error": "timeout"}
except OSError as e:
    r = {"ok": False, "error": errno.errorcode.get(e.errno, str(e.errno))}
r["ms"] = (time.monotonic() - t) * 1000
print(json.dumps(r))
'''

# Resolves NAME from THREADS threads as fast as the filter answers, until
# STOP exists: the flood of pin requests a policy update must not let
# through.
FLOOD = r'''
import os, socket, sys, threading, time
name, stop, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
end = time.monotonic() + 120
def run():
    while not os.path.exists(stop) and time.monotonic() < end:
        try:
            socket.getaddrinfo(name, 7000, socket.AF_INET, socket.SOCK_STREAM)
        except OSError:
            pass
ts = [threading.Thread(target=run) for _ in range(n)]
for t in ts: t.start()
for t in ts: t.join()
'''


def _policy_file(world, doc):
    fd, path = tempfile.mkstemp(prefix="policy-", suffix=".json", dir=world.tmp)
    with os.fdopen(fd, "w") as f:
        json.dump(doc, f)
    return path


def _connect(world, name, host, port):
    rc, out, err = world.ctl("exec", name, "--", "python3", "-c", CONNECT, host, str(port))
    expect(rc == 0 and out.strip(), "python3 in the sandbox: exit %d:" % rc, out.strip(), err.strip()[:300])
    return json.loads(out.strip().splitlines()[-1])


def _curl(world, name, url, *flags):
    """curl through the sandbox's egress proxy (HTTPS_PROXY, no exceptions):
    (exit code, HTTP status or 0, stdout+stderr)."""
    script = ('curl -sS -m 8 --noproxy "" -x "$HTTPS_PROXY" %s -o /tmp/body -w "%%{http_code}" "%s"; rc=$?; '
              'echo; cat /tmp/body 2>/dev/null; exit $rc' % (" ".join(flags), url))
    code, out, err = sh(world, name, script)
    first = out.split("\n", 1)[0].strip()
    return code, int(first) if first.isdigit() else 0, out + err


def _check(world, name, host, port):
    return world.rpc_result("policy.check", {"sandbox": name, "host": host, "port": port})


def test_host_loopback_and_this_network_are_never_reachable_even_when_subnets_allow_names_them(world):
    lo = world.start_listener("host", "127.0.0.1", 7777)
    cases = (
        (["0.0.0.0/32"], "0.0.0.0", 7777),
        (["0.0.0.0/8"], "0.0.0.0", 7777),
        (["127.0.0.0/8"], "127.0.0.2", 7777),
        (["127.0.0.0/8"], "127.0.0.1", 7777),
    )
    for subnets, host, port in cases:
        pol = _policy_file(world, {"allow": ["allowed.test"], "subnets": {"allow": subnets}})
        with sandbox(world, "hostlo", "--policy", pol) as name:
            v = _check(world, name, host, port)
            expect_eq((v["decision"], v["layer"]), ("deny", "never"),
                      "policy.check %s:%d under subnets.allow %s" % (host, port, subnets))
            seen = len(lo.connections())
            # Plain HTTP through the proxy, and a CONNECT tunnel.
            code, status, out = _curl(world, name, "http://%s:%d/" % (host, port))
            expect(status in (403, 502), "curl http://%s:%d/ through the proxy:" % (host, port), code, out[:300])
            code, status, out = _curl(world, name, "http://%s:%d/" % (host, port), "-p")
            expect(status != 200, "curl -p (CONNECT) %s:%d through the proxy:" % (host, port), code, out[:300])
            # Direct, through nftables: the kernel path agrees.
            got = _connect(world, name, host, port)
            expect(not got["ok"], "direct connect to %s:%d:" % (host, port), got)
            expect_eq(len(lo.connections()), seen, "connections the host's loopback listener saw")


def test_an_address_the_host_gains_while_the_session_runs_is_never_reachable(world):
    addr, port = "198.51.100.8", 7779
    pol = _policy_file(world, {"allow": ["allowed.test"], "subnets": {"allow": ["198.51.100.0/24"]}})
    with sandbox(world, "hostnew", "--policy", pol) as name:
        world.run_in_host(["ip", "addr", "add", addr + "/32", "dev", "lo"], check=True)
        try:
            lst = world.start_listener("host", addr, port)
            v = _check(world, name, addr, port)
            expect_eq((v["decision"], v["layer"]), ("deny", "never"), "policy.check of the new host address")
            # From the moment the address exists the proxy never dials it
            # (it asks the kernel before each connect) ...
            code, status, out = _curl(world, name, "http://%s:%d/" % (addr, port))
            expect(status in (403, 502), "curl to the new host address:", code, out[:300])
            # ... and netd is told the new never list, so it refuses it by
            # policy (403, layer never), as policy.check does.
            last = []

            def refused_by_never():
                _c, st, o = _curl(world, name, "http://%s:%d/" % (addr, port))
                last[:] = [st, o[:300]]
                return st == 403 and "is in 198.51.100.8/32 (the host" in o
            try:
                poll(refused_by_never, 10, "the proxy to refuse the new host address by its never list")
            except W.WorldError as e:
                raise AssertionError("%s; last answer: %r" % (e, last))
            # A policy update carries the current list too.
            r = world.rpc("sandbox.update", {"name": name, "networkPolicy": {
                "allow": ["allowed.test", "other.public.test"], "subnets": {"allow": ["198.51.100.0/24"]}}})
            expect("result" in r, "update:", r)
            _c, status, out = _curl(world, name, "http://%s:%d/" % (addr, port))
            expect(status == 403 and "is in 198.51.100.8/32 (the host" in out, "after the update:", status, out[:300])
            got = _connect(world, name, addr, port)
            expect(not got["ok"], "direct connect to the new host address:", got)
            expect_eq(len(lst.connections()), 0, "connections the new address's listener saw")
        finally:
            world.run_in_host(["ip", "addr", "del", addr + "/32", "dev", "lo"])


def test_the_never_list_follows_each_host_address_change_at_once(world):
    # The daemon keeps the never list between reads; every change of the
    # host's addresses must show in the very next answer, added or removed,
    # however quickly the next question follows it.
    addr, port = "198.51.100.9", 7780
    pol = _policy_file(world, {"allow": ["allowed.test"], "subnets": {"allow": ["198.51.100.0/24"]}})
    with sandbox(world, "hostflip", "--policy", pol) as name:
        v = _check(world, name, addr, port)
        expect_eq(v["decision"], "allow", "policy.check before the host has the address")
        try:
            for i in range(3):
                world.run_in_host(["ip", "addr", "add", addr + "/32", "dev", "lo"], check=True)
                v = _check(world, name, addr, port)
                expect_eq((v["decision"], v["layer"]), ("deny", "never"), "round %d: the address added" % i)
                r = world.rpc("sandbox.update", {"name": name, "networkPolicy": {
                    "allow": ["allowed.test", "x%d.test" % i], "subnets": {"allow": ["198.51.100.0/24"]}}})
                expect("result" in r, "round %d: update:" % i, r)
                v = _check(world, name, addr, port)
                expect_eq((v["decision"], v["layer"]), ("deny", "never"), "round %d: after an update" % i)
                world.run_in_host(["ip", "addr", "del", addr + "/32", "dev", "lo"], check=True)
                v = _check(world, name, addr, port)
                expect_eq(v["decision"], "allow", "round %d: the address removed" % i)
        finally:
            world.run_in_host(["ip", "addr", "del", addr + "/32", "dev", "lo"])


def test_update_leaves_no_pin_of_the_old_policy_under_a_dns_flood(world):
    old = {"allow": ["allowed.test"]}
    new = {"allow": ["other.public.test"]}
    pol = _policy_file(world, old)
    with sandbox(world, "pinflood", "--policy", pol) as name:
        world.ctl("exec", "--detach", name, "--", "python3", "-c", FLOOD, "allowed.test", "/tmp/flood.stop", "8",
                  check=True)
        try:
            for i in range(6):
                # The flood pins allowed.test (PUB_API_ADDR) again under the
                # old policy ...
                poll(lambda: _connect(world, name, W.PUB_API_ADDR, W.LISTEN_PORT)["ok"], 20,
                     "the flood to pin allowed.test (round %d)" % i)
                r = world.rpc("sandbox.update", {"name": name, "networkPolicy": new})
                expect("result" in r, "update %d:" % i, r)
                # ... and the moment the update returns, the address only the
                # old policy allowed is refused, and stays refused.
                for k in range(3):
                    got = _connect(world, name, W.PUB_API_ADDR, W.LISTEN_PORT)
                    expect(not got["ok"] and got["error"] != "timeout",
                           "round %d, connect %d after the update: the old policy's address:" % (i, k), got)
                r = world.rpc("sandbox.update", {"name": name, "networkPolicy": old})
                expect("result" in r, "update back %d:" % i, r)
        finally:
            sh(world, name, "touch /tmp/flood.stop")


# Sends UDP to the metadata address as fast as the kernel takes it, until
# STOP exists: every packet is denied (and would be logged).
UDP_FLOOD = r'''
import os, socket, sys, time
stop = sys.argv[1]
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
end = time.monotonic() + 120
n = 0
while not os.path.exists(stop) and time.monotonic() < end:
    try:
        s.sendto(b"x", ("169.254.169.254", 9))
    except OSError:
        pass
    n += 1
'''


def test_one_sandbox_flooding_denials_hides_none_of_another_sandboxs(world):
    pol = _policy_file(world, {"allow": ["api.public.test"]})
    with sandbox(world, "flooder", "--allow-all") as a, sandbox(world, "victim", "--policy", pol) as c:
        world.ctl("exec", "--detach", a, "--", "python3", "-c", UDP_FLOOD, "/tmp/udp.stop", check=True)
        conn = world.daemon.connect(30)
        try:
            # The flood is on once the flooder's own counter runs past what
            # one bucket's burst would allow.
            start = get(world, a)[0]["denials"]
            poll(lambda: get(world, a)[0]["denials"] > start + 150, 20, "the flood's denials to be counted")
            r = conn.call("events.subscribe", {"sandbox": c, "kinds": ["denied"]}, 30)
            expect("result" in r, "subscribe:", r)
            before = get(world, c)[0]["denials"]
            ports = list(range(W.LISTEN_PORT + 1, W.LISTEN_PORT + 21))
            for p in ports:
                got = _connect(world, c, W.PUB_OTHER_ADDR, p)
                expect(not got["ok"], "the victim's connect to port %d:" % p, got)
            seen = set()

            def note_port(n):
                q = n.get("params", {})
                if n.get("method") == "event" and q.get("layer") == "nftables" and q.get("sandbox") == c:
                    seen.add(q.get("port"))
                return set(ports) <= seen
            try:
                conn.wait_note(note_port, 10)
            except TimeoutError:
                pass
            expect_eq(sorted(set(ports) - seen), [], "the victim's denials with no event during the flood")
            expect(get(world, c)[0]["denials"] >= before + len(ports), "the victim's counter:",
                   get(world, c)[0]["denials"], before)
        finally:
            conn.close()
            sh(world, a, "touch /tmp/udp.stop")
