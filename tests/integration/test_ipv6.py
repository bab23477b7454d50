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
