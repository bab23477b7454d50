"""IPv6 parity (DESIGN §5: "the same for IPv6 from a configurable ULA pool
(NAT66): every rule below holds for both families"). A network-enabled
session has an address of the ipv6Pool and a default route through its
gateway, masqueraded when it leaves the world host; what IPv4 keeps
unreachable stays unreachable in every IPv6 form (the host's addresses,
link-local with a scope id, loopback, other sandboxes, the IPv4-mapped,
NAT64, 6to4 and IPv4-compatible forms of forbidden IPv4 addresses); AAAA
answers are judged and pinned as A answers are; subnets.allow/deny take
IPv6 CIDRs; the egress proxy dials IPv6 upstreams; policy.check answers
IPv6 addresses; nothing from outside starts a connection to a sandbox
over IPv6."""
import json
import re

import world as W
from common import expect, expect_eq, poll, sandbox, sh
from test_policy_rules import (CONNECT, NXDOMAIN, REFUSED, _blocked, _policy_file, _py, _refused_fast,
                               connect, dns)

POOL6 = "fd5b:d0c5:6a1e:"  # the default ipv6Pool fd5b:d0c5:6a1e::/64


def _addr6(world, name):
    """The sandbox's global IPv6 address on eth0 and its default gateway."""
    _c, out, _e = sh(world, name, "ip -6 -o addr show dev eth0 scope global; ip -6 route show default")
    addrs = re.findall(r"inet6 ([0-9a-f:]+)/127", out)
    gw = re.findall(r"default via ([0-9a-f:]+) dev eth0", out)
    expect(len(addrs) == 1 and len(gw) == 1, "one /127 address and a default route via eth0:", out)
    return addrs[0], gw[0]


def _host_side(world, name):
    """(ifname, link-local address) of the host side of the sandbox's veth."""
    addr, gw = _addr6(world, name)
    out = world.run_in_host(["ip", "-6", "-o", "addr", "show"]).stdout
    ifname = None
    for line in out.splitlines():
        if (" %s/127" % gw) in line:
            ifname = line.split()[1]
    expect(ifname, "the host side of %s in the world host:" % gw, out)
    out = world.run_in_host(["ip", "-6", "-o", "addr", "show", "dev", ifname, "scope", "link"]).stdout
    ll = re.findall(r"inet6 (fe80::[0-9a-f:]+)/64", out)
    return ifname, ll[0] if ll else None


def _connect_ok(r, what):
    expect(r["ok"], "%s: connected:" % what, r)


# ---------------------------------------------------------------- allow-all

def test_an_allow_all_sandbox_has_an_ipv6_address_of_the_pool_and_a_default_route(world):
    with sandbox(world, "v6aa", "--allow-all") as name:
        addr, gw = _addr6(world, name)
        expect(addr.startswith(POOL6) and gw.startswith(POOL6), "address and gateway in ipv6Pool:", addr, gw)
        # Nothing the sandbox could learn a route from: no RA, no SLAAC.
        _c, out, _e = sh(world, name, "cat /proc/sys/net/ipv6/conf/eth0/accept_ra /proc/sys/net/ipv6/conf/eth0/autoconf")
        expect_eq(out.split(), ["0", "0"], "accept_ra and autoconf on eth0")


def test_an_allow_all_sandbox_reaches_a_public_ipv6_host_through_nat66(world):
    with sandbox(world, "v6nat", "--allow-all") as name:
        before = len(world.pub6_api_listener.connections())
        _connect_ok(connect(world, name, W.PUB6_API_ADDR), "allow-all to [%s]:%d" % (W.PUB6_API_ADDR, W.LISTEN_PORT))
        poll(lambda: len(world.pub6_api_listener.connections()) > before, 10, "the IPv6 listener to log the connection")
        peer = world.pub6_api_listener.connections()[-1]
        expect(peer.startswith(W.HOST_ADDR6 + ":"), "the upstream sees the world host's address (NAT66), not the pool:", peer)


def test_an_allow_all_sandbox_never_reaches_the_host_or_an_ipv6_form_of_a_forbidden_address(world):
    with sandbox(world, "v6aaf", "--allow-all") as name, sandbox(world, "v6aag", "--allow-all") as other:
        _ifname, ll = _host_side(world, name)
        other_addr, other_gw = _addr6(world, other)
        own_addr, gw = _addr6(world, name)
        targets = [
            W.HOST_ADDR6,                   # the world host's own upstream address
            gw,                             # the host side of the veth
            other_addr, other_gw,           # another sandbox and its gateway
            "::ffff:169.254.169.254",       # IPv4-mapped metadata
            "::ffff:" + W.HOST_ADDR,        # IPv4-mapped host
            "64:ff9b::a9fe:a9fe",           # NAT64 of metadata (RFC 6052)
            "64:ff9b::7f00:1",              # NAT64 of loopback
            "64:ff9b:1::a9fe:a9fe",         # local-use NAT64 (RFC 8215)
            "2002:a9fe:a9fe::1",            # 6to4 of metadata (RFC 3056)
            "2002:7f00:1::1",               # 6to4 of loopback
            "::a9fe:a9fe",                  # IPv4-compatible metadata
            "::7f00:1",                     # IPv4-compatible loopback
        ]
        if ll:
            targets.append(ll + "%eth0")    # the host side's link-local, with a scope id
        for t in targets:
            _refused_fast(connect(world, name, t), "allow-all to [%s]:%d" % (t, W.LISTEN_PORT))
        expect_eq(world.host6_listener.connections(), [], "connections the world host's IPv6 listener saw")


# ---------------------------------------------------------------- custom policies

AAAA = 28


def test_a_custom_policy_pins_the_aaaa_answer_of_an_allowed_name_and_nothing_else(world):
    pol = _policy_file(world, {"allow": ["api6.public.test", "dual.public.test"]})
    with sandbox(world, "v6pin", "--policy", pol) as name:
        addr, _gw = _addr6(world, name)
        expect(addr.startswith(POOL6), "a custom-policy session has an IPv6 address of the pool:", addr)
        # Not resolved yet: not pinned, refused at once.
        _refused_fast(connect(world, name, W.PUB6_API_ADDR), "before the AAAA answer")
        r = dns(world, name, "api6.public.test", qtype=AAAA)
        expect_eq((r.get("rcode"), r.get("addrs")), (0, [W.PUB6_API_ADDR]), "AAAA of an allowed name: %s" % r)
        _connect_ok(connect(world, name, W.PUB6_API_ADDR), "the pinned IPv6 address")
        # An unresolved address of the same network stays refused.
        _refused_fast(connect(world, name, W.PUB6_OTHER_ADDR), "an IPv6 address no allowed name resolved to")
        r = dns(world, name, "dual.public.test", qtype=AAAA)
        expect_eq(r.get("addrs"), [W.PUB6_API_ADDR], "AAAA of a dual-stack name: %s" % r)
        _blocked(dns(world, name, "other6.public.test", qtype=AAAA), NXDOMAIN, "other6.public.test")


def test_a_custom_policy_refuses_aaaa_answers_that_rebind_to_forbidden_addresses(world):
    pol = _policy_file(world, {"allow": ["*.public.test"]})
    with sandbox(world, "v6rb", "--policy", pol) as name:
        for qname in ("loop6", "mapped6", "meta6", "nat64meta", "sixtofour", "ll6", "ula6", "mixed6"):
            r = dns(world, name, qname + ".public.test", qtype=AAAA)
            _blocked(r, REFUSED)
        # Nothing of them was pinned: ::1 and the mapped loopback stay refused.
        for host in ("::ffff:127.0.0.1", "64:ff9b::a9fe:a9fe", "2002:7f00:1::1"):
            _refused_fast(connect(world, name, host), "to [%s] after its AAAA was refused" % host)


def test_subnets_allow_and_deny_take_ipv6_cidrs_and_never_open_what_they_do_not_name(world):
    pol = _policy_file(world, {"allow": [], "subnets": {"allow": ["::/0", W.PUB6_NET]}})
    with sandbox(world, "v6sa", "--policy", pol) as name:
        _connect_ok(connect(world, name, W.PUB6_API_ADDR), "an address in subnets.allow")
        _gw_addr, gw = _addr6(world, name)
        _ifname, ll = _host_side(world, name)
        for host in (W.HOST_ADDR6, gw, "64:ff9b::a9fe:a9fe", "64:ff9b::7f00:1", "2002:a9fe:a9fe::1",
                     "::a9fe:a9fe", "::7f00:1") + ((ll + "%eth0",) if ll else ()):
            _refused_fast(connect(world, name, host), "::/0 in subnets.allow to [%s]" % host)
    pol = _policy_file(world, {"allow": ["api6.public.test"],
                               "subnets": {"allow": [W.PUB6_NET], "deny": [W.PUB6_API_ADDR + "/128"]}})
    with sandbox(world, "v6sd", "--policy", pol) as name:
        before = len(world.pub6_api_listener.connections())
        _refused_fast(connect(world, name, W.PUB6_API_ADDR), "an IPv6 address in subnets.deny")
        r = dns(world, name, "api6.public.test", qtype=AAAA)
        _blocked(r, REFUSED, "subnets.deny")
        expect_eq(len(world.pub6_api_listener.connections()), before, "connections the denied address saw")


def test_the_egress_proxy_serves_ipv6_http_and_refuses_a_name_the_policy_does_not_allow(world):
    pol = _policy_file(world, {"allow": ["api6.public.test"]})
    with sandbox(world, "v6px", "--policy", pol) as name:
        before = len(world.web_log("api"))
        code, out, err = sh(world, name, "curl -sS -6 -m 10 --noproxy '*' http://api6.public.test/over-v6")
        expect(code == 0, "curl over IPv6 through the transparent proxy: exit %d:" % code, out, err)
        seen = [l for l in world.web_log("api")[before:] if l.get("path") == "/over-v6"]
        expect(seen, "the IPv6 echo server got the request:", world.web_log("api")[before:])
        attacker = len(world.web_log("attacker"))
        code, out, err = sh(world, name, "curl -sS -m 10 --noproxy '*' -o /dev/null -w '%%{http_code}' "
                                         "--resolve blocked6.test:80:[%s] http://blocked6.test/" % W.PUB6_ATTACKER_ADDR)
        expect_eq(out.strip(), "403", "HTTP over IPv6 to a name the policy does not allow (%s)" % err.strip())
        expect_eq(len(world.web_log("attacker")), attacker, "connections the attacker's IPv6 server saw")


def test_policy_check_judges_ipv6_addresses_as_the_rules_do(world):
    def check(pol, host, port=443):
        return world.rpc_result("policy.check", {"networkPolicy": pol, "host": host, "port": port})
    cases = [
        ("allow-all", W.PUB6_API_ADDR, True),
        ("allow-all", "::1", False),
        ("allow-all", "fe80::1", False),
        ("allow-all", "::ffff:169.254.169.254", False),
        ("allow-all", "64:ff9b::a9fe:a9fe", False),
        ("allow-all", "2002:a9fe:a9fe::1", False),
        ("allow-all", POOL6 + ":5", False),
        ({"allow": [], "subnets": {"allow": [W.PUB6_NET]}}, W.PUB6_API_ADDR, True),
        # A CIDR opens a forbidden range only where it names it (rule 5).
        ({"allow": [], "subnets": {"allow": ["::/0"]}}, "fd00::1", False),
        ({"allow": [], "subnets": {"allow": ["fd00::/8"]}}, "fd00::1", True),
        ({"allow": [], "subnets": {"allow": ["::/0"]}}, "::1", False),
        ({"allow": [], "subnets": {"allow": ["::/0"], "deny": [W.PUB6_NET]}}, W.PUB6_API_ADDR, False),
        ({"allow": ["x.test"]}, W.PUB6_API_ADDR, False),
    ]
    for pol, host, allow in cases:
        r = check(pol, host)
        expect_eq(r.get("decision") == "allow", allow, "policy.check %s under %s: %s" % (host, json.dumps(pol), r))


# ---------------------------------------------------------------- inbound

LISTEN6 = r"""
import socket, sys
s = socket.socket(socket.AF_INET6); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("::", int(sys.argv[1]))); s.listen(8); open(sys.argv[2], "w").close()
while True:
    c, a = s.accept(); open(sys.argv[2], "a").write("tcp %s\n" % a[0]); c.close()
"""


def test_nothing_outside_starts_an_ipv6_connection_into_a_sandbox(world):
    with sandbox(world, "v6in", "--allow-all") as name:
        addr, gw = _addr6(world, name)
        code, _o, err = world.ctl("exec", "--detach", name, "--", "python3", "-c", LISTEN6, "8124", "/tmp/in6.log")
        expect(code == 0, "start the IPv6 listener inside:", err)
        poll(lambda: sh(world, name, "test -e /tmp/in6.log")[0] == 0, 10, "the listener inside to bind")
        # The internet routes the pool via the world host, as a neighbour would.
        world.run_in_net(["ip", "-6", "route", "add", POOL6 + ":/64", "via", W.HOST_ADDR6])
        try:
            r = world.run_in_net(["python3", "-c", CONNECT, addr, "8124"])
            got = json.loads(r.stdout.strip().splitlines()[-1])
            expect(not got["ok"], "a connection from the internet to [%s]:8124:" % addr, got)
        finally:
            world.run_in_net(["ip", "-6", "route", "del", POOL6 + ":/64", "via", W.HOST_ADDR6])
        r = world.run_in_host(["python3", "-c", CONNECT, addr, "8124"])
        got = json.loads(r.stdout.strip().splitlines()[-1])
        expect(not got["ok"], "a connection from the world host to [%s]:8124:" % addr, got)
        _c, log, _e = sh(world, name, "cat /tmp/in6.log")
        expect_eq(log.strip(), "", "connections the listener inside saw")


# A TCP connect to HOST whose packets carry an IPv6 segment routing header
# (RFC 8754) listing VIA as the next segment: the packets are sent to VIA,
# which an SRv6 router would send on to HOST. Set as a sticky option (no
# privilege needed).
RTHDR_CONNECT = r'''
import json, socket, struct, sys, time
host, port, via = sys.argv[1], int(sys.argv[2]), sys.argv[3]
s = socket.socket(socket.AF_INET6, socket.SOCK_STREAM); s.settimeout(3)
segs = [socket.inet_pton(socket.AF_INET6, "::"), socket.inet_pton(socket.AF_INET6, via)]
rh = struct.pack("BBBBBBH", 0, 2 * len(segs), 4, 1, 1, 0, 0) + b"".join(segs)
s.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_RTHDR, rh)
t = time.monotonic()
try:
    s.connect((host, port)); r = {"ok": True}
except socket.timeout:
    r = {"ok": False, "error": "timeout"}
except OSError as e:
    r = {"ok": False, "error": str(e.errno)}
r["ms"] = (time.monotonic() - t) * 1000
print(json.dumps(r))
'''


# Counts, for SECS seconds, the IPv6 packets on the internet namespace's
# veth whose first extension header is a routing header (next header 43).
RH_SNIFF = r'''
import socket, struct, sys, time
s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(0x86dd))
s.bind(("inet0", 0)); s.settimeout(0.2); print("ready", flush=True)
n, end = 0, time.monotonic() + float(sys.argv[1])
while time.monotonic() < end:
    try:
        f = s.recv(2048)
    except socket.timeout:
        continue
    if len(f) > 54 and f[12:14] == b"\x86\xdd" and f[20] == 43:
        n += 1
print(n, flush=True)
'''


def test_a_routing_header_never_leaves_the_host(world):
    import subprocess
    import sys
    pol = _policy_file(world, {"allow": [], "subnets": {"allow": [W.PUB6_NET]}})
    for args in (("--allow-all",), ("--policy", pol)):
        with sandbox(world, "v6rh", *args) as name:
            sniff = subprocess.Popen(["ip", "netns", "exec", world.net_ns, sys.executable, "-c", RH_SNIFF, "5"],
                                     stdout=subprocess.PIPE, text=True)
            try:
                expect_eq(sniff.stdout.readline().strip(), "ready", "the sniffer in the internet namespace")
                _py(world, name, RTHDR_CONNECT, W.HOST_ADDR6, W.LISTEN_PORT, W.PUB6_API_ADDR)
                seen = sniff.communicate(timeout=20)[0].strip()
            finally:
                if sniff.poll() is None:
                    sniff.kill()
                    sniff.wait()
            expect_eq(seen, "0", "%s: packets with a routing header that left the world host" % args[0])


def test_an_update_cuts_established_ipv6_flows_the_new_policy_denies(world):
    import errno
    import os
    import signal
    import sys
    from test_policy_engine import _HOLD_SERVER, _LONG_FLOW
    port = W.LISTEN_PORT + 2
    log = os.path.join(world.tmp, "hold6-%d.log" % port)
    open(log, "w").close()
    server = _HOLD_SERVER.replace("socket.AF_INET,", "socket.AF_INET6,").replace("% peer)", "% peer[:2])")
    srv = world._spawn("hold6-%d" % port, "net", [sys.executable, "-c", server, W.PUB6_API_ADDR, str(port), log],
                       ready=True)
    pol = _policy_file(world, {"allow": [], "subnets": {"allow": [W.PUB6_NET]}})
    try:
        with sandbox(world, "cut6", "--policy", pol) as name:
            world.ctl("cp", "-", name + ":/tmp/flow.py", input=_LONG_FLOW.encode(), binary=True, check=True)
            world.ctl("exec", "--detach", name, "--", "python3", "/tmp/flow.py", W.PUB6_API_ADDR, str(port),
                      check=True)
            flow = lambda: sh(world, name, "cat /tmp/flow.log 2>/dev/null")[1]
            poll(lambda: open(log).read().strip(), 10, "the long IPv6 flow's first bytes at the server")
            expect_eq(flow().strip(), "connected", "the flow runs under the first policy")
            r = world.rpc("sandbox.update", {"name": name, "networkPolicy": {"allow": ["other.public.test"]}})
            expect("result" in r, "update:", r)
            ended = poll(lambda: (lambda t: t if "broken" in t or "alive" in t else None)(flow()), 5,
                         "the established IPv6 flow the new policy denies to end")
            errno_ = int(ended.split()[-1]) if "broken" in ended else None
            expect(errno_ in (errno.ECONNRESET, errno.EPIPE), "the denied IPv6 flow was reset:", ended.strip())
    finally:
        os.killpg(srv.pid, signal.SIGKILL)
        srv.wait(5)


def test_a_denied_ipv6_connect_is_an_event_naming_the_address(world):
    pol = _policy_file(world, {"allow": ["api6.public.test"]})
    with sandbox(world, "v6ev", "--policy", pol) as name:
        c = world.daemon.connect(30)
        try:
            r = c.call("events.subscribe", {"sandbox": name, "kinds": ["denied"]}, 30)
            expect("result" in r, "subscribe:", r)
            _refused_fast(connect(world, name, W.PUB6_OTHER_ADDR), "an unresolved IPv6 address")
            note = c.wait_note(lambda n: n.get("method") == "event" and n["params"].get("layer") == "nftables", 10)
            p = note["params"]
            expect_eq((p["destination"], p.get("port")), (W.PUB6_OTHER_ADDR, W.LISTEN_PORT), "event fields")
            expect("not resolved through the DNS filter" in p["rule"], "the rule the event names:", p)
        finally:
            c.close()


def test_ipv6_pool_off_gives_sessions_no_ipv6(world):
    world.stop_sandboxd()  # one daemon per network namespace
    d = world.start_sandboxd({"ipv6Pool": "off"}, tag="nov6")
    try:
        with sandbox(world, "nov6", "--allow-all") as name:
            _c, out, _e = sh(world, name, "ip -6 addr show; ip -6 route show")
            expect_eq(out.strip(), "", "IPv6 addresses or routes in the sandbox with ipv6Pool off")
            _refused_fast(connect(world, name, "64:ff9b::505:50a"), "IPv6 with ipv6Pool off")
    finally:
        world.stop_sandboxd(d)
        world.start_sandboxd()


# Root inside sends one raw IPv6 UDP datagram with a forged source
# (IPV6_HDRINCL, CAP_NET_RAW of the default set): SRC -> DST port 9.
SPOOF6 = r'''
import socket, struct, sys
src, dst, mark = sys.argv[1], sys.argv[2], sys.argv[3]
payload = mark.encode()
udp = struct.pack("!HHHH", 40000, 9, 8 + len(payload), 0) + payload
hdr = struct.pack("!IHBB", 6 << 28, len(udp), 17, 64) + socket.inet_pton(socket.AF_INET6, src) + \
      socket.inet_pton(socket.AF_INET6, dst)
s = socket.socket(socket.AF_INET6, socket.SOCK_RAW, socket.IPPROTO_RAW)
s.setsockopt(socket.IPPROTO_IPV6, 36, 1)  # IPV6_HDRINCL
s.sendto(hdr + udp, (dst, 0))
print("sent")
'''

# Counts, for SECS seconds, IPv6 packets on the internet namespace's veth
# that carry the marker MARK (whatever source NAT66 gave them).
SRC_SNIFF = r'''
import socket, sys, time
mark, control = sys.argv[2].encode(), sys.argv[3].encode()
s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(0x86dd))
s.bind(("inet0", 0)); s.settimeout(0.2); print("ready", flush=True)
n, got_control, end = 0, 0, time.monotonic() + float(sys.argv[1])
while time.monotonic() < end:
    try:
        f = s.recv(2048)
    except socket.timeout:
        continue
    if f[12:14] != b"\x86\xdd":
        continue
    if control in f:
        got_control = 1
        break
    if mark in f:
        n += 1
print(n, got_control, flush=True)
'''


def test_a_forged_ipv6_source_never_leaves_the_host(world):
    import subprocess
    import sys
    with sandbox(world, "v6spoof", "--allow-all") as name, sandbox(world, "v6victim", "--allow-all") as other:
        other_addr, _ = _addr6(world, other)
        _own, gw = _addr6(world, name)
        for i, forged in enumerate(("2a05:5::99", other_addr, gw, _own)):
            mark = "forged-%d-%s" % (i, world.id)
            # The control datagram, from the sandbox's own address, is sent
            # after the forged one on the same path: once the sniffer has
            # seen it, the forged one would have arrived before it.
            control = "control-%d-%s" % (i, world.id)
            sniff = subprocess.Popen(["ip", "netns", "exec", world.net_ns, sys.executable, "-c", SRC_SNIFF, "120",
                                      mark, control], stdout=subprocess.PIPE, text=True)
            try:
                expect_eq(sniff.stdout.readline().strip(), "ready", "the sniffer in the internet namespace")
                for src, m in ((forged, mark), (_own, control)):
                    code, out, err = world.ctl("exec", "--sudo", name, "--", "python3", "-c", SPOOF6, src,
                                               W.PUB6_API_ADDR, m)
                    expect(code == 0 and "sent" in out, "raw IPv6 send as root inside: exit %d:" % code,
                           err.strip()[:300])
                seen = sniff.communicate(timeout=150)[0].strip()
            finally:
                if sniff.poll() is None:
                    sniff.kill()
                    sniff.wait()
            # The sandbox's own address (last) is the control: its datagram
            # leaves, masqueraded. A forged source must not leave at all.
            want = "1 1" if forged == _own else "0 1"
            expect_eq(seen, want, "datagrams from source %s that reached the internet, and the control" % forged)


def test_the_egress_proxy_refuses_a_name_whose_aaaa_answer_rebinds_to_the_host(world):
    pol = _policy_file(world, {"allow": ["*.public.test"]})
    with sandbox(world, "v6pxrb", "--policy", pol) as name:
        for qname in ("loop6.public.test", "mixed6.public.test", "nat64meta.public.test"):
            before = len(world.web_log("api"))
            code, out, err = sh(world, name, "curl -sS -m 10 --noproxy '*' -o /dev/null -w '%%{http_code}' "
                                             "--resolve %s:80:[%s] http://%s/rebind" % (qname, W.PUB6_API_ADDR, qname))
            expect_eq(out.strip(), "403", "the proxy on a name whose AAAA answer holds a forbidden address "
                                          "(%s; %s)" % (qname, err.strip()))
            expect_eq(len(world.web_log("api")), before, "requests the upstream saw for %s" % qname)


# One UDP datagram carrying MARK to ADDR port 9 (IPv6), as the sandbox user.
UNICAST_SEND = r'''
import socket, sys
s = socket.socket(socket.AF_INET6, socket.SOCK_DGRAM)
s.sendto(sys.argv[1].encode(), (sys.argv[2], 9))
print("sent")
'''


# UDP datagrams carrying MARK to each multicast group given, as the sandbox
# user (scope id eth0 for link-local groups).
MCAST_SEND = r'''
import socket, sys
mark = sys.argv[1].encode()
for g in sys.argv[2:]:
    s = socket.socket(socket.AF_INET6, socket.SOCK_DGRAM)
    s.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_MULTICAST_HOPS, 8)
    try:
        s.sendto(mark, (g, 9, 0, socket.if_nametoindex("eth0")))
    except OSError as e:
        print("send %s: %s" % (g, e))
print("sent")
'''


def test_ipv6_multicast_from_a_sandbox_never_leaves_the_host(world):
    import subprocess
    import sys
    pol = _policy_file(world, {"allow": [], "subnets": {"allow": ["::/0"]}})
    for args in (("--allow-all",), ("--policy", pol)):
        with sandbox(world, "v6mc", *args) as name:
            mark = "mcast-%s-%s" % (args[0].strip("-"), world.id)
            # A unicast control datagram after the multicast ones, on the
            # same way out: once the sniffer has seen it, a multicast
            # datagram that left would have arrived before it.
            control = "mcast-control-%s-%s" % (args[0].strip("-"), world.id)
            sniff = subprocess.Popen(["ip", "netns", "exec", world.net_ns, sys.executable, "-c", SRC_SNIFF, "120",
                                      mark, control], stdout=subprocess.PIPE, text=True)
            try:
                expect_eq(sniff.stdout.readline().strip(), "ready", "the sniffer in the internet namespace")
                code, out, err = world.ctl("exec", name, "--", "python3", "-c", MCAST_SEND, mark,
                                           "ff02::1", "ff05::1", "ff0e::1")
                expect(code == 0 and "sent" in out, "multicast sends: exit %d:" % code, out, err)
                code, out, err = world.ctl("exec", name, "--", "python3", "-c", UNICAST_SEND, control,
                                           W.PUB6_API_ADDR)
                expect(code == 0 and "sent" in out, "the control send: exit %d:" % code, out, err)
                seen = sniff.communicate(timeout=150)[0].strip()
            finally:
                if sniff.poll() is None:
                    sniff.kill()
                    sniff.wait()
            expect_eq(seen, "0 1", "%s: multicast datagrams that reached the internet, and the control" % args[0])


# ---------------------------------------------------------------- the resolver

_DNS6_QUERY = r'''
import errno, json, random, socket, struct, sys, time
server, name = sys.argv[1], sys.argv[2]
qid = random.randrange(65536)
pkt = struct.pack(">HHHHHH", qid, 0x0100, 1, 0, 0, 0)
for l in name.split("."):
    pkt += bytes([len(l)]) + l.encode()
pkt += b"\0" + struct.pack(">HH", 28, 1)
s = socket.socket(socket.AF_INET6, socket.SOCK_DGRAM); s.settimeout(2)
t = time.monotonic()
try:
    s.connect((server, 53)); s.send(pkt); s.recv(4096); r = "answer"
except socket.timeout:
    r = "timeout"
except OSError as e:
    r = errno.errorcode.get(e.errno, str(e.errno))
print(json.dumps({"result": r, "ms": (time.monotonic() - t) * 1000}))
'''


def test_the_resolver_is_the_ipv4_gateway_and_the_ipv6_gateway_answers_no_dns(world):
    """resolv.conf names one resolver, the IPv4 gateway, in every mode
    (docs/POLICY.md, The resolver): AAAA answers come through it. The IPv6
    gateway answers no DNS and forwards none, under allow-all (whose
    translation to the host's resolver is for the IPv4 gateway only) and
    under a custom policy (its DNS filter listens on the IPv4 gateway)."""
    import secrets
    pol = _policy_file(world, {"allow": ["api6.public.test", "*.public.test"]})
    for args in (["--allow-all"], ["--policy", pol]):
        with sandbox(world, "v6res", *args) as name:
            _c, resolv, _e = sh(world, name, "cat /etc/resolv.conf")
            servers = re.findall(r"^nameserver\s+(\S+)", resolv, re.M)
            expect(len(servers) == 1 and ":" not in servers[0], "%s: one IPv4 nameserver:" % args[0], resolv)
            code, out, _e = sh(world, name, "timeout 10 getent ahostsv6 api6.public.test | head -1")
            expect_eq(out.split()[:1], [W.PUB6_API_ADDR], "%s: AAAA through the IPv4 resolver" % args[0])
            _addr, gw6 = _addr6(world, name)
            qname = "v6gw-%s.public.test" % secrets.token_hex(6)
            r = _py(world, name, _DNS6_QUERY, gw6, qname)
            expect(r["result"] != "answer", "%s: the IPv6 gateway answered DNS:" % args[0], r)
            _refused_fast(connect(world, name, gw6, 53), "%s: TCP DNS to the IPv6 gateway" % args[0])
            with open(world.tmp + "/dnsmasq.log", errors="replace") as f:
                expect(qname not in f.read(), "%s: a query to the IPv6 gateway reached the upstream resolver"
                       % args[0])


# A connect to a link-local address with its scope id (the CONNECT helper of
# test_policy_rules passes the host text to connect(), which has no scope).
_CONNECT_SCOPED = r'''
import errno, json, socket, sys, time
host, port, ifname = sys.argv[1], int(sys.argv[2]), sys.argv[3]
s = socket.socket(socket.AF_INET6, socket.SOCK_STREAM); s.settimeout(20)
t = time.monotonic()
try:
    s.connect((host, port, 0, socket.if_nametoindex(ifname))); r = {"ok": True}
except socket.timeout:
    r = {"ok": False, "error": "timeout", "errno": None}
except OSError as e:
    r = {"ok": False, "error": errno.errorcode.get(e.errno, str(e.errno)), "errno": e.errno}
r["ms"] = (time.monotonic() - t) * 1000
print(json.dumps(r))
'''


def test_every_port_of_the_gateways_link_local_address_is_refused_at_once(world):
    """A connect to the host side's link-local address (scope eth0) is
    refused as fast as the same port on its ULA, in every mode and on every
    port: the gateway's services (53, 3128), the redirected web ports and
    any other. (A TCP reset to the sandbox's link-local source left by
    another link: the connect hung for its whole timeout.)"""
    pol = _policy_file(world, {"allow": ["api6.public.test"]})
    ports = (22, 53, 80, 443, 853, 3128, W.LISTEN_PORT, 8080)
    for mode in (["--allow-all"], ["--policy", pol]):
        with sandbox(world, "v6ll", *mode) as name:
            _ifname, ll = _host_side(world, name)
            expect(ll, "the host side of the veth has a link-local address")
            # Had the sandbox a link-local address of its own, it would be
            # tentative for a while (DAD) and connect() would fail locally
            # (EINVAL) without sending anything: wait until it is not.
            poll(lambda: "tentative" not in sh(world, name, "ip -6 addr show dev eth0 scope link")[1], 10,
                 "the sandbox's link-local address (if any) to be usable")
            for port in ports:
                r = _py(world, name, _CONNECT_SCOPED, ll, port, "eth0")
                expect(r.get("error") != "EINVAL", "the connect reached the network:", r)
                _refused_fast(r, "%s to [%s%%eth0]:%d" % (mode[0], ll, port))


_CONNECT_VIA_PROXY = r'''
import os, socket, sys
ph, pp = os.environ["HTTPS_PROXY"].split("//")[1].rstrip("/").rsplit(":", 1)
s = socket.create_connection((ph, int(pp)), timeout=5)
s.sendall(("CONNECT [%s]:443 HTTP/1.1\r\nHost: [%s]:443\r\n\r\n" % (sys.argv[1], sys.argv[1])).encode())
data = b""
while b"\r\n\r\n" not in data:
    c = s.recv(4096)
    if not c:
        break
    data += c
print(data.split(b"\r\n")[0].decode() if data else "closed")
'''


def test_subnets_allow_of_link_local_never_opens_the_hosts_own_link_local_addresses(world):
    """subnets.allow ["fe80::/10"] opens the link-local forbidden range for
    what it names, but every link-local address a sandbox can name is on
    one of the host's own links: the policy layer refuses them as never,
    not only the proxy's route check. The world host's uplink link-local
    address: policy.check says deny (never), and a CONNECT to it through
    the proxy is refused with 403 before any dial."""
    out = world.run_in_host(["ip", "-6", "-o", "addr", "show", "scope", "link"]).stdout
    lls = [ln.split()[3].split("/")[0] for ln in out.splitlines() if not ln.split()[1].startswith("sbx")]
    expect(lls, "the world host has an uplink link-local address:", out)
    pol = {"allow": ["api6.public.test"], "subnets": {"allow": ["fe80::/10"]}}
    for ll in lls:
        r = world.rpc_result("policy.check", {"networkPolicy": pol, "host": ll, "port": 443})
        expect(r.get("decision") != "allow" and "never" in json.dumps(r), "policy.check of the host's %s:" % ll, r)
    with sandbox(world, "v6llnever", "--policy", _policy_file(world, pol)) as name:
        for ll in lls:
            code, out, err = world.ctl("exec", name, "--", "python3", "-c", _CONNECT_VIA_PROXY, ll)
            expect(" 403 " in out + " ", "CONNECT [%s]:443 through the proxy is refused by the policy:" % ll, out, err)


_ETH0_V6 = ("for k in addr_gen_mode accept_ra autoconf accept_redirects disable_ipv6 accept_dad; do "
            "printf '%s=' $k; cat /proc/sys/net/ipv6/conf/eth0/$k; done; "
            "ip -6 -o addr show dev eth0 scope link")


def test_a_veth_given_on_leaving_deny_all_is_configured_as_at_create(world):
    """Finding: after `create --deny-all` and `update --allow-all` (or a
    custom policy) eth0 had a link-local address (addr_gen_mode 0), where
    a sandbox created with network has none. Both paths configure eth0's
    IPv6 with one function: same sysctls, no link-local address."""
    pol = _policy_file(world, {"allow": ["api6.public.test"]})
    with sandbox(world, "v6ref", "--allow-all") as ref:
        _c, want, _e = sh(world, ref, _ETH0_V6)
    expect("addr_gen_mode=1" in want and "fe80" not in want, "eth0 of a sandbox created with network:", want)
    for mode in (["--allow-all"], ["--policy", pol]):
        with sandbox(world, "v6upd", "--deny-all") as name:
            code, _o, err = world.ctl("update", name, *mode)
            expect_eq(code, 0, "update %s to %s (%s)" % (name, mode[0], err.strip()))
            _addr6(world, name)
            _c, got, _e = sh(world, name, _ETH0_V6)
            expect_eq(got, want, "eth0's IPv6 after deny-all then %s, against a sandbox created with network"
                      % mode[0])
