"""A denied connect fails at once with the policy's answer and is reported,
whatever the host's routes (docs/POLICY.md, "nftables layout": chain
`unrouted`). On a host with no default route, a sandbox's packet to an
address the host cannot route never reaches the forward chain: routing
drops it first and answers "network unreachable". The policy must judge it
before that, so a denial is still a TCP reset (ECONNREFUSED) or ICMP
admin-prohibited (EHOSTUNREACH over IPv4, EACCES over IPv6), never
ENETUNREACH or a hang, and still a `denied` event naming the policy's
rule; what the policy allows goes on as before where a route exists.

The world host's default routes are removed for the test and put back
after it, whatever happens."""
import contextlib
import errno

import world as W
from common import expect, expect_eq, sandbox
from test_policy_rules import _policy_file, _py, connect

# A UDP datagram sent on a connected socket inside the sandbox; the ICMP
# error it draws is reported on the next recv (python3 -c UDP HOST PORT):
# JSON {ok, error, errno}. Silence (no error within 3 s) is "timeout".
UDP = r'''
import errno, json, socket, sys
host, port = sys.argv[1], int(sys.argv[2])
fam = socket.AF_INET6 if ":" in host else socket.AF_INET
s = socket.socket(fam, socket.SOCK_DGRAM); s.settimeout(3)
try:
    s.connect((host, port)); s.send(b"probe"); s.recv(64); r = {"ok": True}
except socket.timeout:
    r = {"ok": False, "error": "timeout", "errno": None}
except OSError as e:
    r = {"ok": False, "error": errno.errorcode.get(e.errno, str(e.errno)), "errno": e.errno}
print(json.dumps(r))
'''

DENIED_PORT = 5432


@contextlib.contextmanager
def _no_default_route(world):
    """The world host without its IPv4 and IPv6 default routes (and so
    without any route to the fake internet's public hosts), restored on
    exit."""
    saved = {}
    for fam in ("-4", "-6"):
        out = world.run_in_host(["ip", fam, "route", "show", "default"], check=True).stdout
        saved[fam] = [line.split() for line in out.splitlines() if line.strip()]
    try:
        for fam, routes in saved.items():
            for r in routes:
                world.run_in_host(["ip", fam, "route", "del"] + r, check=True)
        for fam, addr in (("-4", W.PUB_OTHER_ADDR), ("-6", W.PUB6_OTHER_ADDR)):
            r = world.run_in_host(["ip", fam, "route", "get", addr])
            expect(r.returncode != 0, "the world host has no route to %s any more:" % addr, r.stdout, r.stderr)
        yield
    finally:
        for fam, routes in saved.items():
            for r in routes:
                world.run_in_host(["ip", fam, "route", "replace"] + r)


def _expect_denied(world, c, name, addr, proto, got, want_errno, pol):
    what = "%s %s:%d" % (proto, addr, DENIED_PORT)
    expect(not got["ok"], "%s: the policy denies it, yet it got through:" % what, got)
    expect_eq(got["errno"], want_errno, "%s: errno of the denial (%s)" % (what, got))
    note = c.wait_note(lambda n: n.get("method") == "event" and n["params"].get("layer") == "nftables"
                       and n["params"].get("destination") == addr, 20)
    p = note["params"]
    check = world.rpc_result("policy.check", {"networkPolicy": pol, "host": addr, "port": DENIED_PORT,
                                              "protocol": proto})
    expect_eq(check["decision"], "deny", "policy.check of %s" % what)
    expect_eq((p["sandbox"], p.get("port"), p.get("policyLayer"), p.get("rule")),
              (name, DENIED_PORT, check["layer"], check["detail"]), "%s: the denial event" % what)


def test_a_denied_connect_is_refused_by_the_policy_and_reported_on_a_host_without_routes(world):
    doc = {"allow": ["api.public.test"], "subnets": {"allow": [W.HTTP_ADDR + "/32"]}}
    pol = _policy_file(world, doc)
    with sandbox(world, "noroute", "--policy", pol) as name, _no_default_route(world):
        c = world.daemon.connect(30)
        try:
            r = c.call("events.subscribe", {"sandbox": name, "kinds": ["denied"]}, 30)
            expect("result" in r, "subscribe:", r)
            cases = [
                (W.PUB_OTHER_ADDR, "tcp", connect(world, name, W.PUB_OTHER_ADDR, DENIED_PORT), errno.ECONNREFUSED),
                (W.PUB6_OTHER_ADDR, "tcp", connect(world, name, W.PUB6_OTHER_ADDR, DENIED_PORT), errno.ECONNREFUSED),
            ]
            for addr, proto, got, want in cases:
                _expect_denied(world, c, name, addr, proto, got, want, doc)
            for addr, want in ((W.PUB_OTHER_ADDR, errno.EHOSTUNREACH), (W.PUB6_OTHER_ADDR, errno.EACCES)):
                _expect_denied(world, c, name, addr, "udp", _py(world, name, UDP, addr, DENIED_PORT), want, doc)
            # What the policy allows, where the host still has a route (the
            # world's own segment), is forwarded as before.
            before = len(world.inet_listener.connections())
            got = connect(world, name, W.HTTP_ADDR, W.LISTEN_PORT)
            expect(got["ok"], "an allowed address the host has a route to:", got)
            W.World.wait_until(lambda: len(world.inet_listener.connections()) > before, 10,
                               "the listener to log the allowed connection")
        finally:
            c.close()
