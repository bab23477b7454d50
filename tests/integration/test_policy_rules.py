"""The rules of the policy document (DESIGN §5.1, rules 1-9) as a sandbox
sees them: what resolves, what the DNS filter answers and with which
Extended DNS Error, what never reaches the upstream resolver, what connects
and how fast a refused connect fails. Each test named test_ruleN_... proves
rule N; the others prove the limits docs/POLICY.md states (IPv6)."""
import json
import os
import secrets
import tempfile
import time

import world as W
from common import expect, expect_eq, get, poll, sandbox, sh

# A DNS client run inside the sandbox (python3 -c DNSQ SERVER NAME [QTYPE]):
# one UDP query with EDNS, printed back as JSON {rcode, tc, addrs, ttls,
# ede: [[code, text]], ms} or {error}. Raw packets, because the rcode and
# the EDE text are what a user's resolver library would see and getent
# shows neither.
DNSQ = r'''
import json, random, socket, struct, sys, time
def q(name, qtype):
    qid = random.randrange(65536)
    b = struct.pack(">HHHHHH", qid, 0x0100, 1, 0, 0, 1)
    for l in name.rstrip(".").split("."):
        b += bytes([len(l)]) + l.encode()
    return qid, b + b"\0" + struct.pack(">HH", qtype, 1) + b"\0" + struct.pack(">HHIH", 41, 1232, 0, 0)
def skip(b, i):
    while True:
        l = b[i]
        if l == 0: return i + 1
        if l & 0xC0 == 0xC0: return i + 2
        i += 1 + l
def parse(b):
    _id, fl, qd, an, ns, ar = struct.unpack(">HHHHHH", b[:12])
    i = 12
    for _ in range(qd): i = skip(b, i) + 4
    r = {"rcode": fl & 15, "tc": bool(fl & 0x200), "addrs": [], "ttls": [], "ede": []}
    for n in range(an + ns + ar):
        i = skip(b, i)
        t, _c, ttl, rl = struct.unpack(">HHIH", b[i:i + 10]); i += 10
        rd = b[i:i + rl]; i += rl
        if n < an and t in (1, 28):
            r["addrs"].append(socket.inet_ntop(socket.AF_INET if t == 1 else socket.AF_INET6, rd))
            r["ttls"].append(ttl)
        if t == 41:
            j = 0
            while j + 4 <= len(rd):
                oc, ol = struct.unpack(">HH", rd[j:j + 4]); od = rd[j + 4:j + 4 + ol]; j += 4 + ol
                if oc == 15: r["ede"].append([struct.unpack(">H", od[:2])[0], od[2:].decode("utf-8", "replace")])
    return r
server, name = sys.argv[1], sys.argv[2]
qtype = int(sys.argv[3]) if len(sys.argv) > 3 else 1
try:
    qid, pkt = q(name, qtype)
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.settimeout(3)
    t = time.monotonic(); s.sendto(pkt, (server, 53))
    while True:
        b, _a = s.recvfrom(65535)
        if b[:2] == struct.pack(">H", qid): break
    r = parse(b); r["ms"] = (time.monotonic() - t) * 1000
    print(json.dumps(r))
except OSError as e:
    print(json.dumps({"error": "%s: %s" % (type(e).__name__, e)}))
'''

# A TCP connect timed inside the sandbox (python3 -c CONNECT HOST PORT):
# JSON {ok, error, errno, ms}. A policy refusal must be an error (a reset
# or an ICMP admin-prohibited), never a timeout. The timeout is long enough
# that only a dropped SYN (retried by TCP for minutes) reaches it, however
# busy the machine's CPUs.
CONNECT = r'''
import errno, json, socket, sys, time
host, port = sys.argv[1], int(sys.argv[2])
fam = socket.AF_INET6 if ":" in host else socket.AF_INET
s = socket.socket(fam, socket.SOCK_STREAM); s.settimeout(20)
t = time.monotonic()
try:
    s.connect((host, port)); r = {"ok": True}
except socket.timeout:
    r = {"ok": False, "error": "timeout", "errno": None}
except OSError as e:
    r = {"ok": False, "error": errno.errorcode.get(e.errno, str(e.errno)), "errno": e.errno}
r["ms"] = (time.monotonic() - t) * 1000
print(json.dumps(r))
'''

NXDOMAIN, REFUSED = 3, 5
EDE_BLOCKED = 15


def _policy_file(world, doc):
    fd, path = tempfile.mkstemp(prefix="policy-", suffix=".json", dir=world.tmp)
    with os.fdopen(fd, "w") as f:
        json.dump(doc, f)
    return path


def _py(world, name, code, *args):
    rc, out, err = world.ctl("exec", name, "--", "python3", "-c", code, *[str(a) for a in args])
    expect(rc == 0 and out.strip(), "python3 in the sandbox: exit %d:" % rc, out.strip(), err.strip()[:300])
    return json.loads(out.strip().splitlines()[-1])


def _gateway(world, name):
    """The sandbox's resolver: the DNS filter on the host side of its veth."""
    _c, out, _e = world.ctl("exec", name, "--", "cat", "/etc/resolv.conf")
    for line in out.splitlines():
        if line.startswith("nameserver"):
            return line.split()[1]
    raise AssertionError("no nameserver in the sandbox's resolv.conf: %r" % out)


def dns(world, name, qname, qtype=1, server=None):
    return _py(world, name, DNSQ, server or _gateway(world, name), qname, qtype)


def connect(world, name, host, port=W.LISTEN_PORT):
    return _py(world, name, CONNECT, host, port)


def _dnsmasq_log(world):
    with open(os.path.join(world.tmp, "dnsmasq.log"), errors="replace") as f:
        return f.read()


def _blocked(r, rcode, *words):
    """The reply is a policy denial: rcode, no address, EDE 15 whose text
    holds every word."""
    expect("error" not in r, "the DNS filter answered:", r)
    expect_eq(r["rcode"], rcode, "rcode of %s" % r)
    expect_eq(r["addrs"], [], "addresses in a denial")
    edes = [t for c, t in r["ede"] if c == EDE_BLOCKED]
    expect(edes, "an EDE 15 (Blocked) in the denial:", r)
    for w in words:
        expect(w in edes[0], "the EDE text names %r:" % w, edes[0])


def _refused_fast(r, what):
    """The connect failed at once: with an error (refused, unreachable,
    prohibited), not dropped until it timed out. Told by how it failed,
    not by r["ms"], which a loaded machine stretches."""
    expect(not r["ok"], "%s: the connect succeeded" % what)
    expect(r["error"] != "timeout", "%s: a refusal, not a timeout:" % what, r)


# ---------------------------------------------------------------- rule 1

def test_rule1_default_is_allow_all_and_a_custom_policy_denies_the_rest(world):
    with sandbox(world, "r1def") as name:
        sb, _c, _e = get(world, name)
        expect_eq(sb["networkPolicy"], "allow-all", "the policy of a sandbox made without one")
        expect(connect(world, name, W.PUB_OTHER_ADDR)["ok"], "allow-all reaches a public address")
        expect(connect(world, name, W.HTTP_ADDR)["ok"], "allow-all reaches a documentation-range address")
    pol = _policy_file(world, {"allow": ["api.public.test"]})
    with sandbox(world, "r1cus", "--policy", pol) as name:
        expect_eq(dns(world, name, "api.public.test")["addrs"], [W.PUB_API_ADDR], "the allowed name")
        expect(connect(world, name, W.PUB_API_ADDR)["ok"], "the allowed name's address")
        _blocked(dns(world, name, "other.public.test"), NXDOMAIN, "other.public.test")
        _refused_fast(connect(world, name, W.PUB_OTHER_ADDR), "an address the policy does not allow")


# ---------------------------------------------------------------- rule 2

def test_rule2_deny_all_denies_dns_too(world):
    qname = "r2-%s.public.test" % secrets.token_hex(4)
    with sandbox(world, "r2", "--deny-all") as name:
        r = dns(world, name, qname, server=W.DNS_ADDR)
        expect("error" in r, "a DNS query from a deny-all sandbox fails:", r)
        code, out, _e = sh(world, name, "getent ahostsv4 api.public.test")
        expect(code != 0 and not out.strip(), "a deny-all sandbox resolves nothing:", code, out)
    expect(qname not in _dnsmasq_log(world), "the deny-all query reached the upstream resolver")


# ---------------------------------------------------------------- rule 3

def test_rule3_a_name_not_allowed_gets_nxdomain_and_never_reaches_the_upstream(world):
    pol = _policy_file(world, {"allow": ["api.public.test"]})
    tag = secrets.token_hex(4)
    denied, allowed = "nope-%s.public.test" % tag, "api.public.test"
    with sandbox(world, "r3nx", "--policy", pol) as name:
        _blocked(dns(world, name, denied), NXDOMAIN, denied, "networkPolicy.allow")
        # The same name through getent, as a program would ask.
        code, _o, _e = sh(world, name, "getent ahostsv4 %s" % denied)
        expect(code != 0, "getent of the denied name fails:", code)
        before = _dnsmasq_log(world).count("query[A] %s " % allowed)
        expect_eq(dns(world, name, allowed)["addrs"], [W.PUB_API_ADDR], "the allowed name")
    log = _dnsmasq_log(world)
    expect(log.count("query[A] %s " % allowed) > before,
           "the allowed name's query is in dnsmasq's log (so the log is the right witness)")
    expect(tag not in log, "the denied name reached the upstream resolver")


def test_rule3_wildcard_matches_subdomains_at_any_depth_but_not_the_apex(world):
    pol = _policy_file(world, {"allow": ["*.public.test"]})
    with sandbox(world, "r3wc", "--policy", pol) as name:
        expect_eq(dns(world, name, "api.public.test")["addrs"], [W.PUB_API_ADDR], "one label below")
        expect_eq(dns(world, name, "a.b.public.test")["addrs"], [W.PUB_OTHER_ADDR], "two labels below")
        expect_eq(dns(world, name, "A.B.Public.Test.")["addrs"], [W.PUB_OTHER_ADDR],
                  "case and one trailing dot are normalised")
        expect(connect(world, name, W.PUB_OTHER_ADDR)["ok"], "connect to a.b.public.test's address")
        # public.test resolves upstream (world.py), so only the policy refuses it.
        _blocked(dns(world, name, "public.test"), NXDOMAIN, "public.test is not in networkPolicy.allow")
        _blocked(dns(world, name, "public.test.evil.test"), NXDOMAIN)


def test_rule3_port_pattern_resolves_the_name_and_policy_check_judges_the_port(world):
    doc = {"allow": ["api.public.test:%d" % W.LISTEN_PORT]}
    pol = _policy_file(world, doc)
    with sandbox(world, "r3port", "--policy", pol) as name:
        # A DNS question carries no port: the name is allowed on some port.
        expect_eq(dns(world, name, "api.public.test")["addrs"], [W.PUB_API_ADDR], "the name with a port")
        expect(connect(world, name, W.PUB_API_ADDR)["ok"], "connect to the allowed port")
        for port, want in ((W.LISTEN_PORT, "allow"), (W.LISTEN_PORT + 1, "deny"), (443, "deny")):
            v = world.rpc_result("policy.check", {"sandbox": name, "host": "api.public.test", "port": port})
            expect_eq(v["decision"], want, "policy.check of port %d (%s)" % (port, v.get("message")))
        v = world.rpc_result("policy.check", {"networkPolicy": doc, "url": "https://api.public.test/"})
        expect_eq((v["decision"], v["port"]), ("deny", 443), "policy.check of an https URL (%s)" % v.get("message"))


def test_rule3_an_ip_literal_question_is_judged_as_an_address(world):
    pol = _policy_file(world, {"allow": ["api.public.test"]})
    with sandbox(world, "r3lit", "--policy", pol) as name:
        for q in ("0x7f.1", "2130706433", "169.254.169.254"):
            r = dns(world, name, q)
            expect_eq((r.get("rcode"), r.get("addrs")), (NXDOMAIN, []), "the question %s (%s)" % (q, r))
    expect("0x7f.1" not in _dnsmasq_log(world), "an IP-literal question was forwarded")


# ---------------------------------------------------------------- rule 4

def test_rule4_subnet_deny_beats_an_allowed_name(world):
    pol = _policy_file(world, {"allow": ["*.public.test"], "subnets": {"deny": [W.PUB_API_ADDR + "/32"]}})
    with sandbox(world, "r4", "--policy", pol) as name:
        _blocked(dns(world, name, "api.public.test"), REFUSED, "subnets.deny")
        _refused_fast(connect(world, name, W.PUB_API_ADDR), "an address in subnets.deny")
        expect_eq(dns(world, name, "other.public.test")["addrs"], [W.PUB_OTHER_ADDR],
                  "an allowed name outside the denied subnet")
        expect(connect(world, name, W.PUB_OTHER_ADDR)["ok"], "connect outside the denied subnet")


def test_rule4_deny_beats_allow_between_two_cidrs(world):
    pol = _policy_file(world, {"subnets": {"allow": ["5.5.5.0/24"], "deny": [W.PUB_OTHER_ADDR + "/32"]}})
    with sandbox(world, "r4c", "--policy", pol) as name:
        expect(connect(world, name, W.PUB_API_ADDR)["ok"], "an address only subnets.allow holds")
        _refused_fast(connect(world, name, W.PUB_OTHER_ADDR), "an address both hold")


# ---------------------------------------------------------------- rule 5

def test_rule5_ip_literal_of_a_world_address_is_refused_within_100ms(world):
    pol = _policy_file(world, {"allow": ["api.public.test"]})
    with sandbox(world, "r5lit", "--policy", pol) as name:
        seen = len(world.inet_listener.connections())
        # Documentation space (a custom policy never reaches it), a public
        # address nobody resolved, and the host itself.
        for addr in (W.HTTP_ADDR, W.PUB_OTHER_ADDR, W.HOST_ADDR):
            _refused_fast(connect(world, name, addr), "connect to %s" % addr)
        expect_eq(len(world.inet_listener.connections()), seen, "connections the world listener saw")


def test_rule5_allowed_name_with_a_private_answer_is_refused(world):
    pol = _policy_file(world, {"allow": ["private.public.test"]})
    with sandbox(world, "r5prv", "--policy", pol) as name:
        _blocked(dns(world, name, "private.public.test"), REFUSED, W.PRIVATE_ANSWER_ADDR, "private")
        code, _o, _e = sh(world, name, "getent ahostsv4 private.public.test")
        expect(code != 0, "getent of a name with a private answer fails:", code)
        v = world.rpc_result("policy.check", {"sandbox": name, "host": W.PRIVATE_ANSWER_ADDR})
        expect_eq((v["decision"], v["layer"]), ("deny", "forbidden-range"), "policy.check of the answer")


def test_rule5_subnets_allow_naming_a_forbidden_range_opens_it(world):
    pol = _policy_file(world, {"subnets": {"allow": [W.HTTP_ADDR + "/32"]}})
    with sandbox(world, "r5open", "--policy", pol) as name:
        expect(connect(world, name, W.HTTP_ADDR)["ok"], "the documentation address subnets.allow names")
        _refused_fast(connect(world, name, W.SPARE_ADDR), "its neighbour in the same /24")
        _refused_fast(connect(world, name, W.HOST_ADDR), "the host (never opened by a policy)")


# ---------------------------------------------------------------- rule 6

def test_rule6_mixed_public_and_loopback_answer_is_refused_whole(world):
    pol = _policy_file(world, {"allow": ["mixed.public.test"]})
    with sandbox(world, "r6mix", "--policy", pol) as name:
        _blocked(dns(world, name, "mixed.public.test"), REFUSED, "127.0.0.1")
        # Nothing of the answer was pinned: its public half stays shut.
        _refused_fast(connect(world, name, W.PUB_API_ADDR), "the public address of the refused answer")


def _pins(world):
    """{interface: text of its pins} of the world host's shared IPv4 pin set
    (`"sbx<n>" . <address> timeout ... expires ...`, one element each)."""
    import re
    out = world.run_in_host(["nft", "list", "set", "inet", "sandboxd", "pins4"]).stdout
    pins = {}
    for ifname, text in re.findall(r'"(sbx\d+)" \. ([^,}]*)', out):
        pins[ifname] = pins.get(ifname, "") + text.strip() + " "
    return pins


def test_rule6_accepted_answer_is_pinned_with_the_ttl_floor(world):
    pol = _policy_file(world, {"allow": ["api.public.test"]})
    with sandbox(world, "r6pin", "--policy", pol) as name:
        _refused_fast(connect(world, name, W.PUB_API_ADDR), "before the name is resolved")
        r = dns(world, name, "api.public.test")
        expect_eq(r["addrs"], [W.PUB_API_ADDR], "the allowed name")
        expect(connect(world, name, W.PUB_API_ADDR)["ok"], "the pinned address after the answer")
        pinned = [t for t in _pins(world).values() if W.PUB_API_ADDR in t]
        expect_eq(len(pinned), 1, "sets pinning %s (%s)" % (W.PUB_API_ADDR, _pins(world)))
        # dnsmasq answers its --address names with TTL 0: the pin gets the floor.
        expect("timeout 30s" in pinned[0], "the pin's timeout is the 30 s floor:", pinned[0])
        expect(all(t <= 30 for t in r["ttls"]), "the client's TTL never outlives the pin:", r["ttls"])


# ---------------------------------------------------------------- rule 7

def test_rule7_first_matching_rule_applies_methods_ored_matchers_anded_no_match_unmodified(world):
    doc = {"allow": {"api.public.test": [
        {"match": {"method": ["POST", "PUT"], "path": {"startsWith": "/w"}},
         "transform": [{"headers": {"X-Rule": "0"}}]},
        {"match": {"path": {"startsWith": "/w"}}, "transform": [{"headers": {"X-Rule": "1"}}]},
        {"match": {"headers": [{"key": {"exact": "x-a"}, "value": {"exact": "1"}}],
                   "queryString": [{"key": {"exact": "q"}}]},
         "transform": [{"headers": {"X-Rule": "2"}}]},
    ]}}
    pol = _policy_file(world, doc)
    with sandbox(world, "r7", "--policy", pol) as name:
        n = len(world.web_log("api"))
        for req in ("-X PUT https://api.public.test/w1", "https://api.public.test/w2",
                    "-H 'x-a: 1' 'https://api.public.test/z3?q=1'", "'https://api.public.test/z4?q=1'",
                    "-H 'x-a: 1' https://api.public.test/z5"):
            code, _o, err = sh(world, name, "curl -sS -m 10 -o /dev/null " + req)
            expect_eq(code, 0, "curl %s (%s)" % (req, err.strip()[:200]))
        seen = [(e["path"], [v for k, v in e["headers"] if k.lower() == "x-rule"])
                for e in world.web_log("api")[n:]]
        expect_eq(seen, [("/w1", ["0"]), ("/w2", ["1"]), ("/z3?q=1", ["2"]), ("/z4?q=1", []), ("/z5", [])],
                  "the rule each request met")


# ---------------------------------------------------------------- rule 8

def test_rule8_an_invalid_update_names_the_field_and_keeps_the_old_policy(world):
    pol = _policy_file(world, {"allow": ["api.public.test"]})
    with sandbox(world, "r8", "--policy", pol) as name:
        for doc, field in (({"allow": ["*.com"]}, "networkPolicy.allow[0]"),
                           ({"subnets": {"allow": ["5.5.5.10/8"]}}, "networkPolicy.subnets.allow[0]"),
                           ({"alow": []}, "networkPolicy.alow")):
            r = world.rpc("sandbox.update", {"name": name, "networkPolicy": doc})
            data = r.get("error", {}).get("data", {})
            expect_eq((data.get("reason"), data.get("field")), ("invalid_policy", field), "update to %s" % doc)
        sb, _c, _e = get(world, name)
        expect_eq(sb["networkPolicy"], {"allow": ["api.public.test"]}, "the stored policy")
        expect_eq(dns(world, name, "api.public.test")["addrs"], [W.PUB_API_ADDR], "the old policy still applies")
        _blocked(dns(world, name, "other.public.test"), NXDOMAIN)


# ---------------------------------------------------------------- rule 9

# Connects to HOST:PORT in a loop until the file STOP exists (at most 60 s),
# then writes {"ok": N, "failed": N, "errors": [...]} to OUT.
LOOP = r'''
import json, os, socket, sys, time
host, port, stop, out = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
ok = failed = 0; errors = []
end = time.monotonic() + 60
while not os.path.exists(stop) and time.monotonic() < end:
    s = socket.socket(); s.settimeout(2)
    try:
        s.connect((host, port)); ok += 1
    except OSError as e:
        failed += 1; errors.append(str(e))
    s.close()
with open(out + ".tmp", "w") as f:
    json.dump({"ok": ok, "failed": failed, "errors": errors[:5]}, f)
os.rename(out + ".tmp", out)
'''


def test_rule9_update_swaps_the_policy_with_no_window_where_neither_applies(world):
    a, b = W.PUB_API_ADDR + "/32", W.PUB_OTHER_ADDR + "/32"
    pol = _policy_file(world, {"subnets": {"allow": [a]}})
    with sandbox(world, "r9", "--policy", pol) as name:
        world.ctl("exec", "--detach", name, "--", "python3", "-c", LOOP, W.PUB_API_ADDR,
                  str(W.LISTEN_PORT), "/tmp/r9.stop", "/tmp/r9.json", check=True)
        seen = len(world.pub_api_listener.connections())
        poll(lambda: len(world.pub_api_listener.connections()) > seen + 20, 20, "the connect loop to run")
        # Address a is allowed by both policies: each swap must keep it open.
        for i in range(10):
            subnets = {"allow": [a, b]} if i % 2 == 0 else {"allow": [a]}
            r = world.rpc("sandbox.update", {"name": name, "networkPolicy": {"subnets": subnets}})
            expect("result" in r, "update %d:" % i, r)
            # ... and the moment update returns, only the new policy applies.
            got = connect(world, name, W.PUB_OTHER_ADDR)
            if i % 2 == 0:
                expect(got["ok"], "after update %d, the newly allowed address:" % i, got)
            else:
                _refused_fast(got, "after update %d, the address it dropped" % i)
        sh(world, name, "touch /tmp/r9.stop")
        poll(lambda: sh(world, name, "test -s /tmp/r9.json")[0] == 0, 20, "the connect loop to stop")
        res = json.loads(sh(world, name, "cat /tmp/r9.json")[1])
        expect(res["ok"] > 20, "connects made during the swaps:", res)
        expect_eq((res["failed"], res["errors"]), (0, []), "connects to the address both policies allow")


# LOOP that stops only at its STOP file (the cap is a safety net, far
# beyond any run) and says whether it did. Three such loops can fill the
# single-threaded listener's accept queue while the machine is loaded, and
# a SYN it drops is only resent after a second: each connect gets 10 s. A
# denial is a reset (refused at once); a dropped reply is resent too.
LOOP_UNTIL_STOP = LOOP.replace("time.monotonic() + 60", "time.monotonic() + 1800").replace(
    "s.settimeout(2)", "s.settimeout(10)").replace(
    '{"ok": ok, "failed": failed, "errors": errors[:5]}',
    '{"ok": ok, "failed": failed, "errors": errors[:5], "stopped": os.path.exists(stop)}')


def test_rule9_many_updates_under_several_connect_loops_never_deny_what_both_allow(world):
    # Rule 9 under stress: 100 swaps while three loops connect to the
    # address both policies allow. A swap that let a packet meet the new
    # chain before its address sets were filled denied a few of them.
    a, b = W.PUB_API_ADDR + "/32", W.PUB_OTHER_ADDR + "/32"
    pol = _policy_file(world, {"subnets": {"allow": [a]}})
    loops = 3
    with sandbox(world, "r9s", "--policy", pol) as name:
        for j in range(loops):
            world.ctl("exec", "--detach", name, "--", "python3", "-c", LOOP_UNTIL_STOP, W.PUB_API_ADDR,
                      str(W.LISTEN_PORT), "/tmp/r9s.stop", "/tmp/r9s-%d.json" % j, check=True)
        seen = len(world.pub_api_listener.connections())
        poll(lambda: len(world.pub_api_listener.connections()) > seen + 30, 30, "the connect loops to run")
        for i in range(100):
            subnets = {"allow": [a, b]} if i % 2 == 0 else {"allow": [a]}
            r = world.rpc("sandbox.update", {"name": name, "networkPolicy": {"subnets": subnets}})
            expect("result" in r, "update %d:" % i, r)
            # The loops keep connecting between the swaps too.
            seen = len(world.pub_api_listener.connections())
            poll(lambda: len(world.pub_api_listener.connections()) >= seen + loops, 30,
                 "connects after update %d" % i)
        # The last update allows [a] only: b is refused from then on.
        _refused_fast(connect(world, name, W.PUB_OTHER_ADDR), "after the last update, the address it dropped")
        sh(world, name, "touch /tmp/r9s.stop")
        res = []
        for j in range(loops):
            out = "/tmp/r9s-%d.json" % j
            poll(lambda: sh(world, name, "test -s " + out)[0] == 0, 60, "connect loop %d to stop" % j)
            res.append(json.loads(sh(world, name, "cat " + out)[1]))
        expect(all(r["stopped"] for r in res), "every loop ran until the swaps were done:", res)
        expect(sum(r["ok"] for r in res) >= 300, "connects made during the swaps:", res)
        expect_eq([(r["failed"], r["errors"]) for r in res], [(0, [])] * loops,
                  "connects to the address both policies allow")


# ---------------------------------------------------------------- IPv6
# IPv6 has its own file: test_ipv6.py.
