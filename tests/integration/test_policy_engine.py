"""The egress policy engine end to end (DESIGN §5): DNS filter, pinned
addresses, subnets precedence, live update, repair of a flushed table."""
import json
import os
import tempfile
import time

import world as W
from common import create, delete, expect, expect_eq, get, poll, sandbox, sh


def _policy_file(world, doc):
    fd, path = tempfile.mkstemp(prefix="policy-", suffix=".json", dir=world.tmp)
    with os.fdopen(fd, "w") as f:
        json.dump(doc, f)
    return path


def _connect(world, name, host, port=W.LISTEN_PORT):
    """(exit code, seconds) of a TCP connect from inside the sandbox."""
    t = time.monotonic()
    code, _o, _e = sh(world, name, "timeout 5 bash -c 'echo > /dev/tcp/%s/%d'" % (host, port))
    return code, time.monotonic() - t


def _resolves(world, name, host):
    code, out, _e = sh(world, name, "getent ahostsv4 %s | head -1" % host)
    return out.split()[0] if code == 0 and out.strip() else None


def test_custom_policy_resolves_and_reaches_only_allowed_names(world):
    pol = _policy_file(world, {"allow": ["api.public.test"]})
    with sandbox(world, "pol", "--policy", pol) as name:
        expect_eq(_resolves(world, name, "api.public.test"), W.PUB_API_ADDR, "allowed name resolves")
        code, _t = _connect(world, name, "api.public.test")
        expect_eq(code, 0, "connect to the allowed name")
        expect_eq(_resolves(world, name, "other.public.test"), None, "a name not allowed does not resolve")
        code, secs = _connect(world, name, W.PUB_OTHER_ADDR)
        expect(code != 0 and secs < 1.0, "a direct connect to an address nobody resolved fails fast:", code, secs)
        code, secs = _connect(world, name, W.HOST_ADDR)
        expect(code != 0 and secs < 1.0, "the host itself stays unreachable:", code, secs)
        sb, _c, _e = get(world, name)
        expect(sb["denials"] >= 1, "the denied question is counted:", sb.get("denials"))


def test_direct_dns_to_another_resolver_is_refused(world):
    pol = _policy_file(world, {"allow": ["api.public.test"]})
    with sandbox(world, "dns", "--policy", pol) as name:
        script = ("import socket,sys\n"
                  "s=socket.socket(socket.AF_INET,socket.SOCK_DGRAM); s.settimeout(2)\n"
                  "s.connect(('%s',53))\n"
                  "q=bytes.fromhex('12340100000100000000000003617069067075626c69630474657374000001000"
                  "1')\n"
                  "try:\n s.send(q); s.recv(512); print('answered')\n"
                  "except OSError as e: print('refused', e.errno)\n") % W.DNS_ADDR
        code, out, err = sh(world, name, "python3 -c \"%s\"" % script.replace('"', '\\"'))
        expect(out.startswith("refused"), "a query to the world's resolver directly:", out.strip(), err.strip())


def test_denied_subnet_beats_an_allowed_name(world):
    pol = _policy_file(world, {"allow": ["api.public.test"], "subnets": {"deny": ["5.5.5.0/24"]}})
    with sandbox(world, "deny", "--policy", pol) as name:
        expect_eq(_resolves(world, name, "api.public.test"), None,
                  "an allowed name whose address is in a denied subnet")
        code, secs = _connect(world, name, W.PUB_API_ADDR)
        expect(code != 0 and secs < 1.0, "connect into the denied subnet:", code, secs)


def test_name_resolving_to_metadata_is_refused_whole(world):
    pol = _policy_file(world, {"allow": ["metadata.public.test"]})
    with sandbox(world, "meta", "--policy", pol) as name:
        expect_eq(_resolves(world, name, "metadata.public.test"), None, "a name that resolves to 169.254.169.254")


def test_subnets_allow_admits_addresses_without_a_name(world):
    pol = _policy_file(world, {"allow": [], "subnets": {"allow": [W.PUB_OTHER_ADDR + "/32"]}})
    with sandbox(world, "sub", "--policy", pol) as name:
        code, _t = _connect(world, name, W.PUB_OTHER_ADDR)
        expect_eq(code, 0, "connect to an address subnets.allow names")
        code, secs = _connect(world, name, W.PUB_API_ADDR)
        expect(code != 0 and secs < 1.0, "another address:", code, secs)


def test_live_update_swaps_the_policy_and_commands_keep_running(world):
    pol = _policy_file(world, {"allow": ["api.public.test"]})
    with sandbox(world, "live", "--policy", pol) as name:
        world.ctl("exec", "--detach", name, "--", "sleep", "300", check=True)
        expect_eq(_resolves(world, name, "other.public.test"), None, "before the update")
        r = world.rpc("sandbox.update", {"name": name, "networkPolicy": {"allow": ["other.public.test"]}})
        expect("result" in r, "update:", r)
        expect_eq(_resolves(world, name, "other.public.test"), W.PUB_OTHER_ADDR, "after the update")
        code, _t = _connect(world, name, "other.public.test")
        expect_eq(code, 0, "connect after the update")
        expect_eq(_resolves(world, name, "api.public.test"), None, "the old name after the update")
        code, out, _e = sh(world, name, "pgrep -c sleep")
        expect_eq(out.strip(), "1", "the detached command survived the update")


def test_invalid_policy_names_the_field_and_nothing_is_created(world):
    name = world.name("badpol")
    pol = _policy_file(world, {"allow": ["www*.com"]})
    code, _o, err = world.ctl("create", "--name", name, "--policy", pol)
    expect_eq(code, 3, "exit code for an invalid policy (%s)" % err.strip())
    expect("networkPolicy.allow[0]" in err, "the error names the field:", err.strip())
    _sb, code, _e = get(world, name)
    expect_eq(code, 4, "nothing was created")


def test_flushed_ruleset_is_repaired_and_sandboxes_stay_contained(world):
    with sandbox(world, "flush", "--allow-all") as name:
        world.run_in_host(["nft", "flush", "ruleset"])
        poll(lambda: "table inet sandboxd" in world.run_in_host(["nft", "list", "tables"], check=False).stdout,
             10, "sandboxd to re-install its table")
        code, secs = _connect(world, name, W.HOST_ADDR)
        expect(code != 0 and secs < 1.0, "the host after the repair:", code, secs)
        code, _t = _connect(world, name, W.HTTP_ADDR)
        expect_eq(code, 0, "allow-all still reaches the internet after the repair")


def test_denied_connect_is_an_event_naming_the_address_and_a_counter(world):
    pol = _policy_file(world, {"allow": ["api.public.test"]})
    with sandbox(world, "nflog", "--policy", pol) as name:
        c = world.daemon.connect(30)
        try:
            r = c.call("events.subscribe", {"sandbox": name, "kinds": ["denied"]}, 30)
            expect("result" in r, "subscribe:", r)
            before = get(world, name)[0]["denials"]
            code, _t = _connect(world, name, W.PUB_OTHER_ADDR)
            expect(code != 0, "the connect is refused")
            note = c.wait_note(lambda n: n.get("method") == "event" and
                               n["params"].get("layer") == "nftables", 10)
            p = note["params"]
            expect_eq((p["sandbox"], p["destination"], p.get("port")), (name, W.PUB_OTHER_ADDR, W.LISTEN_PORT),
                      "event fields")
            expect("blocked by sandbox policy" in p["message"], "message:", p["message"])
            expect(get(world, name)[0]["denials"] > before, "the counter grew")
        finally:
            c.close()


_SPOOF = r'''
import socket, struct, sys
def csum(b):
    if len(b) % 2: b += b"\0"
    s = sum(struct.unpack("!%dH" % (len(b) // 2), b)); s = (s >> 16) + (s & 0xffff); s += s >> 16
    return ~s & 0xffff
def query(name):
    q = b"".join(bytes([len(l)]) + l.encode() for l in name.split(".")) + b"\0"
    return struct.pack("!HHHHHH", 0x4242, 0x0100, 1, 0, 0, 0) + q + struct.pack("!HH", 1, 1)
src, dst, name = sys.argv[1], sys.argv[2], sys.argv[3]
payload = query(name)
udp = struct.pack("!HHHH", 7000, 53, 8 + len(payload), 0) + payload
ip = struct.pack("!BBHHHBBH4s4s", 0x45, 0, 20 + len(udp), 1, 0, 64, 17, 0,
                 socket.inet_aton(src), socket.inet_aton(dst))
ip = ip[:10] + struct.pack("!H", csum(ip)) + ip[12:]
s = socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_RAW)
s.sendto(ip + udp, (dst, 0))
print("sent")
'''


def test_forged_source_addresses_are_dropped_before_anything_answers(world):
    """Root inside forges its source: the DNS filter must never answer (or
    reflect bytes) to an address that is not the sandbox's own."""
    pol = _policy_file(world, {"allow": ["api.public.test"]})
    with sandbox(world, "spoof", "--policy", pol) as name:
        gw = sh(world, name, "awk '/nameserver/ {print $2}' /etc/resolv.conf")[1].strip()
        world.ctl("cp", "-", name + ":/tmp/spoof.py", input=_SPOOF.encode(), binary=True, check=True)
        c = world.daemon.connect(30)
        try:
            c.call("events.subscribe", {"sandbox": name, "kinds": ["denied"]}, 30)
            code, out, err = world.ctl("exec", "--sudo", name, "--", "python3", "/tmp/spoof.py",
                                       W.PUB_OTHER_ADDR, gw, "forged-source.denied.test")
            expect_eq(code, 0, "raw send as root (%s)" % (err or b"").strip()[:200] if isinstance(err, bytes) else err)
            # A query with the sandbox's real source, sent after the forged one:
            # its denial event comes; the forged one's must not have come first.
            sh(world, name, "getent hosts real-source.denied.test")
            seen = []
            note = c.wait_note(lambda n: n.get("method") == "event" and
                               (seen.append(n["params"].get("host")) or
                                n["params"].get("host") == "real-source.denied.test"), 10)
            expect(note is not None, "the real query's denial event")
            expect("forged-source.denied.test" not in seen, "the forged query was answered:", seen)
        finally:
            c.close()


# A server that keeps every connection open and reads until the peer goes
# away, logging each peer once its first bytes arrive (the world's listener
# echoes once and closes, which would end the flow by itself).
_HOLD_SERVER = r'''
import socket, sys, threading
addr, port, log = sys.argv[1], int(sys.argv[2]), sys.argv[3]
s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind((addr, port))
s.listen(16)
print("ready", flush=True)
def handle(c, peer):
    first = True
    while True:
        try:
            d = c.recv(4096)
        except OSError:
            break
        if not d:
            break
        if first:
            with open(log, "a") as f:
                f.write("%s:%d\n" % peer)
            first = False
    c.close()
while True:
    c, peer = s.accept()
    threading.Thread(target=handle, args=(c, peer), daemon=True).start()
'''

# Inside the sandbox: one long connection sending a line every 100 ms,
# reporting to /tmp/flow.log how it ended.
_LONG_FLOW = r'''
import socket, sys, time
log = open("/tmp/flow.log", "w", buffering=1)
s = socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=5)
log.write("connected\n")
deadline = time.monotonic() + 60
try:
    while time.monotonic() < deadline:
        s.sendall(b"tick\n")
        time.sleep(0.1)
    log.write("alive\n")
except OSError as e:
    log.write("broken %d\n" % e.errno)
'''


def test_update_cuts_established_flows_the_new_policy_denies(world):
    """An established connection is judged again by the new policy after
    sandbox.update: one the new policy denies is reset, not kept alive by
    its conntrack entry."""
    import errno
    import signal
    import sys
    port = W.LISTEN_PORT + 1
    log = os.path.join(world.tmp, "hold-%d.log" % port)
    open(log, "w").close()
    srv = world._spawn("hold-%d" % port, "net", [sys.executable, "-c", _HOLD_SERVER, W.PUB_API_ADDR,
                                                 str(port), log], ready=True)
    pol = _policy_file(world, {"allow": ["api.public.test"]})
    try:
        with sandbox(world, "cut", "--policy", pol) as name:
            world.ctl("cp", "-", name + ":/tmp/flow.py", input=_LONG_FLOW.encode(), binary=True, check=True)
            world.ctl("exec", "--detach", name, "--", "python3", "/tmp/flow.py", "api.public.test", str(port),
                      check=True)
            flow = lambda: sh(world, name, "cat /tmp/flow.log 2>/dev/null")[1]
            poll(lambda: open(log).read().strip(), 10, "the long flow's first bytes at the server")
            expect_eq(flow().strip(), "connected", "the flow runs under the first policy")

            r = world.rpc("sandbox.update", {"name": name, "networkPolicy": {"allow": ["other.public.test"]}})
            expect("result" in r, "update:", r)
            ended = poll(lambda: (lambda t: t if "broken" in t or "alive" in t else None)(flow()), 5,
                         "the established flow to a name the new policy denies to end")
            errno_ = int(ended.split()[-1]) if "broken" in ended else None
            expect(errno_ in (errno.ECONNRESET, errno.EPIPE), "the denied flow was reset:", ended.strip())
            code, _t = _connect(world, name, "other.public.test")
            expect_eq(code, 0, "a new connection the new policy allows")
    finally:
        os.killpg(srv.pid, signal.SIGKILL)
        srv.wait(5)


def test_live_update_keeps_the_pins_the_new_policy_still_allows(world):
    pol = _policy_file(world, {"allow": ["api.public.test"]})
    with sandbox(world, "pinkeep", "--policy", pol) as name:
        expect_eq(_resolves(world, name, "api.public.test"), W.PUB_API_ADDR, "resolved (and pinned)")
        # Widen: api.public.test is still allowed, so its pin is carried
        # over and its address is reachable without resolving again.
        r = world.rpc("sandbox.update", {"name": name,
                                         "networkPolicy": {"allow": ["api.public.test", "other.public.test"]}})
        expect("result" in r, "update:", r)
        code, _t = _connect(world, name, W.PUB_API_ADDR)
        expect_eq(code, 0, "the still-allowed name's address after the update, without a new lookup")
        # Narrow: api.public.test is no longer allowed, so its pin goes.
        r = world.rpc("sandbox.update", {"name": name, "networkPolicy": {"allow": ["other.public.test"]}})
        expect("result" in r, "update:", r)
        code, secs = _connect(world, name, W.PUB_API_ADDR)
        expect(code != 0 and secs < 1.0, "the no longer allowed address is refused at once:", code, secs)


# Sends one packet per case from inside a sandbox: TCP connect, or one UDP
# datagram and a wait for the answer. Prints one JSON line per case:
# {proto, addr, port, errno} (0: connected / answered).
_PROBE = r'''
import errno, json, socket, sys
for spec in sys.argv[1:]:
    proto, addr, port = spec.split(":")
    port = int(port)
    kind = socket.SOCK_STREAM if proto == "tcp" else socket.SOCK_DGRAM
    s = socket.socket(socket.AF_INET, kind)
    s.settimeout(3)
    err = 0
    try:
        s.connect((addr, port))
        if proto == "udp":
            s.send(b"x")
            s.recv(64)
    except socket.timeout:
        err = errno.ETIMEDOUT
    except OSError as e:
        err = e.errno
    s.close()
    print(json.dumps({"proto": proto, "addr": addr, "port": port, "errno": err}))
'''


def test_denial_events_and_policy_check_name_the_same_rule(world):
    """Every nftables denial event names the step that decided it, and
    policy.check answers the same decision, layer and rule for the same
    packet (DESIGN §5.2; the packet table in policy/match.c)."""
    pol = {"allow": ["other.public.test"],
           "subnets": {"allow": [W.PUB_API_ADDR + "/32"], "deny": [W.PUB_FORWARD_ADDR + "/32"]}}
    # (protocol, address, port, want decision, want layer, a substring of the rule)
    cases = [
        ("tcp", W.PUB_API_ADDR, 853, "deny", "port", "tcp dport 853 (DNS over TLS)"),
        ("udp", W.PUB_API_ADDR, 853, "deny", "port", "udp dport 853"),
        ("udp", W.PUB_API_ADDR, 53, "deny", "port", "udp dport 53 (DNS)"),
        ("tcp", W.PUB_API_ADDR, 53, "deny", "port", "tcp dport 53 (DNS)"),
        ("udp", W.PUB_OTHER_ADDR, 443, "deny", "port", "udp dport 443 (QUIC"),
        ("tcp", W.PUB_ATTACKER_ADDR, W.LISTEN_PORT, "deny", "default-deny", "not resolved through the DNS filter"),
        ("tcp", W.PUB_FORWARD_ADDR, W.LISTEN_PORT, "deny", "subnets.deny", "subnets.deny[0]"),
        ("tcp", "169.254.169.254", W.LISTEN_PORT, "deny", "forbidden-range", "link-local"),
        # Not denials: QUIC and any other port to the admitted address arrive
        # (the closed port answers: ECONNREFUSED, not admin-prohibited).
        ("udp", W.PUB_API_ADDR, 443, "allow", "subnets.allow", "subnets.allow[0]"),
    ]
    with sandbox(world, "why", "--policy", _policy_file(world, pol)) as name:
        # other.public.test resolved: its address is pinned (the QUIC case
        # then meets the udp 443 step, not the default).
        expect_eq(_resolves(world, name, "other.public.test"), W.PUB_OTHER_ADDR, "allowed name resolves")
        c = world.daemon.connect(30)
        try:
            r = c.call("events.subscribe", {"sandbox": name, "kinds": ["denied"]}, 30)
            expect("result" in r, "subscribe:", r)
            specs = ["%s:%s:%d" % (p, a, port) for p, a, port, *_ in cases]
            code, out, err = world.ctl("exec", name, "--", "python3", "-c", _PROBE, *specs)
            expect_eq(code, 0, "probe (%s)" % err.strip()[:300])
            sent = {(x["proto"], x["addr"], x["port"]): x["errno"] for x in map(json.loads, out.splitlines())}
            for proto, addr, port, decision, layer, rule in cases:
                what = "%s %s:%d" % (proto, addr, port)
                check = c.result("policy.check", {"sandbox": name, "host": addr, "port": port, "protocol": proto})
                expect_eq((check["decision"], check["layer"]), (decision, layer), "policy.check %s (%s)" % (what, check))
                expect(rule in check["detail"], "policy.check %s names the rule:" % what, check)
                if decision == "allow":
                    expect_eq(sent[(proto, addr, port)], 111, "%s arrives (port unreachable)" % what)
                    continue
                note = c.wait_note(lambda n: n.get("method") == "event" and n["params"].get("layer") == "nftables"
                                   and n["params"].get("destination") == addr and n["params"].get("port") == port
                                   and n["params"].get("protocol") == proto, 10)
                ev = note["params"]
                expect_eq((ev.get("policyLayer"), ev.get("rule")), (check["layer"], check["detail"]),
                          "the denial event of %s and policy.check agree" % what)
                expect(rule in ev["message"], "the event message of %s names the rule:" % what, ev)
        finally:
            c.close()
