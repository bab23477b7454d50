"""The `unrouted` prerouting chain (docs/POLICY.md, "nftables
layout") rejects before the routing decision, and so before strict
reverse-path filtering (docs/SECURITY.md §3.8) drops a packet with a
forged source. Root inside a sandbox (CAP_NET_RAW) that sends a denied
packet to a destination the host has no route to, with another sandbox's
address as source, makes the host send the deny chain's TCP reset or ICMP
admin-prohibited (quoting the forged packet's bytes) to that other
sandbox: a channel between sandboxes, and a reflector to any address the
host routes. Expected: a forged source gets nothing, routes or not."""
import threading
import time

import world as W
from common import create, delete, expect
from test_no_route import _no_default_route

SEND = r'''
import socket, struct, sys
src, dst, proto = sys.argv[1], sys.argv[2], sys.argv[3]
def csum(b):
    if len(b) % 2: b += b"\0"
    s = sum(struct.unpack("!%dH" % (len(b)//2), b)); s = (s >> 16) + (s & 0xffff); s += s >> 16
    return (~s) & 0xffff
S, D = socket.inet_aton(src), socket.inet_aton(dst)
if proto == "tcp":
    tcp = struct.pack("!HHIIBBHHH", 40000, 5432, 12345, 0, 5 << 4, 0x02, 65535, 0, 0)
    c = csum(S + D + struct.pack("!BBH", 0, 6, len(tcp)) + tcp)
    l4 = tcp[:16] + struct.pack("!H", c) + tcp[18:]; p = 6
else:
    data = b"SPOOFED-PAYLOAD"
    l4 = struct.pack("!HHHH", 40001, 5432, 8 + len(data), 0) + data; p = 17
ip = struct.pack("!BBHHHBBH4s4s", 0x45, 0, 20 + len(l4), 1, 0, 64, p, 0, S, D)
s = socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_RAW)
for i in range(5):
    s.sendto(ip + l4, (dst, 0))
print("sent")
'''

# Root inside the victim: every TCP segment and ICMP message that reaches
# it within the time given, one line each.
RECV = r'''
import socket, sys, time, select
socks = [socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_TCP),
         socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_ICMP)]
end = time.time() + float(sys.argv[1])
print("ready", flush=True)
while time.time() < end:
    r, _, _ = select.select(socks, [], [], 0.5)
    for s in r:
        d, a = s.recvfrom(2048)
        if d[9] == 6 and int.from_bytes(d[20:22], "big") == 5432:
            print("GOT tcp from %s flags=%#x" % (a[0], d[33]), flush=True)
        elif d[9] == 1:
            print("GOT icmp from %s type=%d code=%d" % (a[0], d[20], d[21]), flush=True)
'''


def _addr(world, name):
    _c, out, _e = world.ctl("exec", name, "--", "sh", "-c", "ip -4 -o addr show eth0")
    return out.split("inet ")[1].split("/")[0]


def test_forged_source_to_unrouted_destination_reaches_no_other_sandbox(world):
    attacker, *_ = create(world, "spa", "--allow", "example.com")
    victim, *_ = create(world, "spv", "--allow-all")
    try:
        vip = _addr(world, victim)
        with _no_default_route(world):
            for proto in ("tcp", "udp"):
                got = {}

                def recv():
                    got["r"] = world.ctl("exec", "--sudo", victim, "--", "python3", "-c", RECV, "6", timeout=60)
                t = threading.Thread(target=recv)
                t.start()
                time.sleep(2.5)
                code, out, err = world.ctl("exec", "--sudo", attacker, "--", "python3", "-c", SEND, vip,
                                           W.PUB_OTHER_ADDR, proto)
                t.join()
                expect(code == 0 and "sent" in out, "the forged packets were sent:", out, err)
                hits = [ln for ln in got["r"][1].splitlines() if ln.startswith("GOT")]
                expect(not hits, "a %s packet forged with the victim's source (%s) to an unrouted address "
                       "drew the host's answer into the victim:" % (proto, vip), hits[:3])
    finally:
        delete(world, attacker)
        delete(world, victim)


def test_forged_source_to_a_blackhole_route_reflects_nothing_to_the_internet(world):
    """The host keeps its default route but has a blackhole route (bogon
    filtering, a withdrawn prefix): a custom policy that allows nothing
    outside must not let the sandbox send its bytes to an internet host,
    here inside the host's ICMP error about a packet forged with that
    host's address as source."""
    import subprocess
    attacker, *_ = create(world, "spb", "--allow", "example.com")
    world.run_in_host(["ip", "route", "add", "blackhole", "198.51.100.0/24"], check=True)
    rc = None
    try:
        rc = subprocess.Popen(["ip", "netns", "exec", world.net_ns, "python3", "-c", RECV, "8"],
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        time.sleep(2.5)
        for proto in ("tcp", "udp"):
            world.ctl("exec", "--sudo", attacker, "--", "python3", "-c", SEND, W.PUB_OTHER_ADDR,
                      "198.51.100.7", proto)
        out = rc.communicate(timeout=30)[0]
        rc = None
        hits = [ln for ln in out.splitlines() if ln.startswith("GOT")]
        expect(not hits, "packets forged with an internet host's source (%s) to a blackholed address "
               "drew the host's answer to that internet host:" % W.PUB_OTHER_ADDR, hits[:3])
    finally:
        if rc:
            rc.kill()
            rc.wait()
        world.run_in_host(["ip", "route", "del", "blackhole", "198.51.100.0/24"])
        delete(world, attacker)
