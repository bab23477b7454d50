"""Live custom-to-custom updates and the egress proxy (docs/POLICY.md rule 9
and "Live update"): once sandbox.update returns, no connection the proxy
carries still works under the old policy. Each case, for IPv4 and IPv6, as a
sandbox sees it: a CONNECT tunnel, keep-alive absolute-form HTTP through the
proxy, TLS to port 443 redirected to the proxy and spliced, a CONNECT
answered before the update whose first bytes come after it, and a
connection whose header rule was changed or removed. Flows the new policy
decides the same way (a CONNECT tunnel to a name allowed in both) keep
working, and new connections get the new rules."""
import json
import os
import tempfile

import world as W
from common import expect, expect_eq, poll, sandbox, sh

FAMILIES = {
    # (denied after the update, host with a header rule, allowed in both)
    "v4": ("allowed.test", "api.public.test", "forward.public.test"),
    "v6": ("gone6.public.test", "api6.public.test", "keep6.public.test"),
}

# Inside the sandbox: opens every kind of proxied connection, makes one
# request on each, writes {"before": ...} to OUT, waits for the file GO, then
# makes one more request on each (and does the TLS handshake of a CONNECT
# granted before) and writes {"before": ..., "after": ...}.
_FLOWS = r'''
import json, os, socket, ssl, sys, time
D, H, K, out, go = sys.argv[1:6]
ph, pp = os.environ["HTTPS_PROXY"].split("//")[1].rstrip("/").rsplit(":", 1)
pp = int(pp)
ctx = ssl.create_default_context()
ctx.check_hostname = False
ctx.verify_mode = ssl.CERT_NONE

def connect_proxy(target):
    s = socket.create_connection((ph, pp), timeout=5)
    s.sendall(("CONNECT %s:443 HTTP/1.1\r\nHost: %s:443\r\n\r\n" % (target, target)).encode())
    head = b""
    while b"\r\n\r\n" not in head:
        c = s.recv(1)
        if not c:
            raise OSError("the proxy closed the CONNECT")
        head += c
    if head.split()[1] != b"200":
        raise OSError(head.split(b"\r\n")[0].decode())
    return s

def tls(s, host):
    return ctx.wrap_socket(s, server_hostname=host)

class Conn:
    def __init__(self, s, absolute=False):
        self.s, self.f, self.absolute = s, s.makefile("rb"), absolute
    def get(self, host):
        target = "http://%s/live" % host if self.absolute else "/live"
        self.s.sendall(("GET %s HTTP/1.1\r\nHost: %s\r\n\r\n" % (target, host)).encode())
        line = self.f.readline()
        if not line:
            raise OSError("closed")
        status, n = int(line.split()[1]), 0
        while True:
            h = self.f.readline()
            if not h:
                raise OSError("closed in the head")
            if h in (b"\r\n", b"\n"):
                break
            k, _, v = h.decode().partition(":")
            if k.strip().lower() == "content-length":
                n = int(v)
        body = self.f.read(n)
        if len(body) < n:
            raise OSError("short body")
        return status, body

def result(c, host):
    try:
        st, body = c.get(host)
    except Exception as e:
        return "cut: %s: %s" % (type(e).__name__, e)
    if st != 200:
        return "status %d" % st
    try:
        hdrs = json.loads(body).get("headers", [])
    except ValueError:
        hdrs = []
    sec = [v for k, v in hdrs if k.lower() == "x-secret"]
    return "ok" + (" x-secret=" + sec[0] if sec else "")

def fresh(fn, host):
    try:
        return result(Conn(fn()), host)
    except Exception as e:
        return "cut: %s: %s" % (type(e).__name__, e)

def write(doc):
    with open(out + ".tmp", "w") as f:
        json.dump(doc, f)
    os.rename(out + ".tmp", out)

conns = {
    "tunnel": (Conn(tls(connect_proxy(D), D)), D),
    "http": (Conn(socket.create_connection((ph, pp), timeout=5), absolute=True), D),
    "splice": (Conn(tls(socket.create_connection((D, 443), timeout=5), D)), D),
    "rule": (Conn(tls(socket.create_connection((H, 443), timeout=5), H)), H),
    "keep": (Conn(tls(connect_proxy(K), K)), K),
}
pre = connect_proxy(D)
before = {k: result(c, h) for k, (c, h) in conns.items()}
write({"before": before})
while not os.path.exists(go):
    time.sleep(0.05)
after = {k: result(c, h) for k, (c, h) in conns.items()}
after["pre"] = fresh(lambda: tls(pre, D), D)
after["rule_new"] = fresh(lambda: tls(socket.create_connection((H, 443), timeout=5), H), H)
after["keep_new"] = fresh(lambda: tls(connect_proxy(K), K), K)
write({"before": before, "after": after})
'''


def _policy(world, doc):
    fd, path = tempfile.mkstemp(prefix="livep-", suffix=".json", dir=world.tmp)
    with os.fdopen(fd, "w") as f:
        json.dump(doc, f)
    return path


def _rule(secret):
    return [{"transform": [{"headers": {"x-secret": secret}}]}]


def _read(world, name):
    _c, out, _e = sh(world, name, "cat /tmp/flows.json 2>/dev/null")
    try:
        return json.loads(out)
    except ValueError:
        return None


def _cut(v):
    return v.startswith("cut") or v == "status 403"


def _run(world, fam, new_rule):
    """The flows of FAMILIES[fam] under a policy allowing all three hosts
    (the rule host's header "old"), then a live update that drops the first
    host and gives the rule host new_rule (a list of rules)."""
    d, h, k = FAMILIES[fam]
    old = _policy(world, {"allow": {d: [], h: _rule("old"), k: []}})
    new = _policy(world, {"allow": {h: new_rule, k: []}})
    with sandbox(world, "lp" + fam, "--policy", old) as name:
        world.ctl("cp", "-", name + ":/tmp/flows.py", input=_FLOWS.encode(), binary=True, check=True)
        world.ctl("exec", "--detach", name, "--", "python3", "/tmp/flows.py", d, h, k, "/tmp/flows.json",
                  "/tmp/flows.go", check=True)
        doc = poll(lambda: _read(world, name), 30, "the flows' first requests")
        expect_eq(doc["before"], {"tunnel": "ok", "http": "ok", "splice": "ok", "rule": "ok x-secret=old",
                                  "keep": "ok"}, "every flow works under the first policy")
        code, out, err = world.ctl("update", name, "--policy", new)
        expect(code == 0, "update:", out, err)
        # Everything below happens after update returned.
        sh(world, name, "touch /tmp/flows.go")
        doc = poll(lambda: (lambda d_: d_ if d_ and "after" in d_ else None)(_read(world, name)), 30,
                   "the flows' requests after the update")
        return doc["after"]


def _check(after, want_new_rule):
    for k in ("tunnel", "http", "splice", "pre"):
        expect(_cut(after[k]), "%s to the host the new policy denies is cut or refused:" % k, after)
    expect(_cut(after["rule"]), "the connection whose header rule changed is cut:", after)
    expect_eq(after["rule_new"], want_new_rule, "a new connection gets the new rule")
    expect_eq(after["keep"], "ok", "a tunnel the new policy still allows keeps working")
    expect_eq(after["keep_new"], "ok", "a new tunnel the new policy allows works")


def test_an_update_cuts_every_proxied_ipv4_flow_it_denies_and_a_changed_header_rule(world):
    _check(_run(world, "v4", _rule("new")), "ok x-secret=new")


def test_an_update_cuts_every_proxied_ipv6_flow_it_denies_and_a_changed_header_rule(world):
    _check(_run(world, "v6", _rule("new")), "ok x-secret=new")


def test_an_update_that_removes_a_header_rule_cuts_the_ipv4_connections_that_carried_it(world):
    _check(_run(world, "v4", []), "ok")


def test_an_update_that_removes_a_header_rule_cuts_the_ipv6_connections_that_carried_it(world):
    _check(_run(world, "v6", []), "ok")
