"""Inbound (DESIGN §5): nothing outside a sandbox starts a connection to it,
under any policy. A neighbour that routes the sandbox pool via the world
host (World.neighbour()) and the world host's own processes get nothing
from a TCP or UDP listener inside, nor from the gateway services (DNS
filter, egress proxy) on the host side of its veth; the sandbox's own flows,
the ICMP errors about them, and exposed ports (through the relay) still
work."""
import json
import os
import re
import sys

import world as W
from common import expect, expect_eq, get, poll, sandbox, sh, sh_ok

PORT = 8123

# Listens on 0.0.0.0:PORT for TCP and UDP, logs "tcp|udp <peer>" for each
# connection or datagram (and answers it), touches LOG.ready once bound.
LISTENER = r"""
import socket, sys, threading
port, log = int(sys.argv[1]), sys.argv[2]
def note(what):
    with open(log, "a") as f:
        f.write(what + "\n")
t = socket.socket(); t.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
t.bind(("0.0.0.0", port)); t.listen(16)
u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); u.bind(("0.0.0.0", port))
def udp():
    while True:
        d, a = u.recvfrom(2048); note("udp %s" % a[0]); u.sendto(b"hello\n", a)
threading.Thread(target=udp, daemon=True).start()
open(log + ".ready", "w").close()
while True:
    c, a = t.accept(); note("tcp %s" % a[0])
    try:
        c.sendall(b"hello\n")
    except OSError:
        pass
    c.close()
"""

# From outside: one TCP connect and one UDP exchange with each ADDR:PORT
# given, concurrently, each waiting at most 2 s for an answer (for TCP, a
# completed handshake); prints one JSON object {"tcp ADDR:PORT": result,
# "udp ADDR:PORT": result} where result is "answered", "refused <errno>"
# or "timeout".
KNOCK = r"""
import json, socket, sys, threading
res = {}
def tcp(a, p):
    s = socket.socket(); s.settimeout(2)
    try:
        s.connect((a, p)); res["tcp %s:%d" % (a, p)] = "answered"  # a SYN-ACK came back
    except socket.timeout:
        res["tcp %s:%d" % (a, p)] = "timeout"
    except OSError as e:
        res["tcp %s:%d" % (a, p)] = "refused %s" % e.errno
def udp(a, p):
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.settimeout(2)
    try:
        s.connect((a, p))
        # A DNS query, so the DNS filter would answer it too.
        s.send(bytes.fromhex("1234010000010000000000000661706907707562" "6c696304746573740000010001"))
        s.recv(2048); res["udp %s:%d" % (a, p)] = "answered"
    except socket.timeout:
        res["udp %s:%d" % (a, p)] = "timeout"
    except OSError as e:
        res["udp %s:%d" % (a, p)] = "refused %s" % e.errno
ts = []
for arg in sys.argv[1:]:
    a, p = arg.rsplit(":", 1)
    for fn in (tcp, udp):
        ts.append(threading.Thread(target=fn, args=(a, int(p)))); ts[-1].start()
for t in ts:
    t.join()
print(json.dumps(res, sort_keys=True))
"""


def _policy_file(world, doc):
    path = os.path.join(world.tmp, "inbound-policy-%d.json" % (len(os.listdir(world.tmp))))
    with open(path, "w") as f:
        json.dump(doc, f)
    return path


def _addr(world, name):
    out = sh_ok(world, name, "ip -4 -o addr show dev eth0")
    m = re.search(r"inet (\d+\.\d+\.\d+\.\d+)/", out)
    expect(m, "no IPv4 address on eth0 inside:", out)
    return m.group(1)


def _gateway(world, name):
    out = sh_ok(world, name, "ip -4 route show default")
    m = re.search(r"via (\d+\.\d+\.\d+\.\d+)", out)
    expect(m, "no default route inside:", out)
    return m.group(1)


def _listen(world, name):
    world.ctl("exec", "--detach", name, "--", "python3", "-c", LISTENER, str(PORT), "/tmp/inbound.log",
              check=True)
    poll(lambda: sh(world, name, "test -e /tmp/inbound.log.ready")[0] == 0, 15, "the listener inside")


def _seen(world, name):
    _c, out, _e = sh(world, name, "cat /tmp/inbound.log 2>/dev/null")
    return out.split("\n")


def _knock(run, *targets):
    r = run([sys.executable, "-c", KNOCK] + ["%s:%d" % t for t in targets], timeout=30)
    expect(r.returncode == 0, "knock: exit %d:" % r.returncode, r.stdout.strip(), r.stderr.strip()[-400:])
    return json.loads(r.stdout.strip().splitlines()[-1])


def _self_check(world, name, addr):
    """The listener answers on the sandbox's own address from inside: it
    is up, bound to 0.0.0.0, and every earlier packet has been logged."""
    code, out, err = world.ctl("exec", name, "--", "python3", "-c", KNOCK, "%s:%d" % (addr, PORT))
    res = json.loads(out.strip().splitlines()[-1]) if code == 0 else {}
    expect_eq(res.get("tcp %s:%d" % (addr, PORT)), "answered", "TCP to the listener from inside (%s)" % err.strip())
    expect_eq(res.get("udp %s:%d" % (addr, PORT)), "answered", "UDP to the listener from inside")


def _assert_closed(world, nb, name, what, gateway_services):
    addr, gw = _addr(world, name), _gateway(world, name)
    _listen(world, name)
    targets = [(addr, PORT)]
    if gateway_services:
        targets += [(gw, 53), (gw, 3128)]
    res = _knock(nb.run, *targets)
    for k, v in sorted(res.items()):
        expect(v != "answered", "%s: the neighbour got an answer from %s" % (what, k), res)
    host = _knock(world.run_in_host, *targets)
    for k, v in sorted(host.items()):
        expect(v != "answered", "%s: a process of the world host got an answer from %s" % (what, k), host)
    # The host's own attempt is refused at once (the deny chain's reset),
    # not left to time out.
    expect(host["tcp %s:%d" % (addr, PORT)].startswith("refused"),
           "%s: TCP from the world host into the sandbox was not refused at once:" % what, host)
    _self_check(world, name, addr)
    seen = [l for l in _seen(world, name) if l.strip()]
    expect_eq([l for l in seen if not l.endswith(" " + addr)], [],
              "%s: peers the listener inside saw besides the sandbox itself" % what)


def test_neighbour_routing_the_pool_gets_nothing_from_inside_under_any_policy(world):
    allowlist = _policy_file(world, {"allow": ["allowed.test:443"]})
    # Outbound to the neighbour's own subnet is allowed here: inbound from
    # it must still be refused.
    to_neighbour = _policy_file(world, {"allow": ["allowed.test:443"],
                                        "subnets": {"allow": [W.NEIGHBOUR_NET]}})
    with world.neighbour() as nb:
        # The neighbour reaches the world host itself: the route is real.
        r = _knock(nb.run, (W.HOST_ADDR, W.LISTEN_PORT))
        expect_eq(r["tcp %s:%d" % (W.HOST_ADDR, W.LISTEN_PORT)], "answered",
                  "the neighbour's TCP to the world host's listener")
        cases = [("allow-all", ("--allow-all",), False),
                 ("allowlist", ("--policy", allowlist), True),
                 ("subnets.allow of the neighbour", ("--policy", to_neighbour), True)]
        u = world.rpc_result("daemon.info").get("capabilities", {}).get("userns") or {}
        if u.get("available"):
            cases.append(("allowlist, user namespace", ("--policy", allowlist, "--userns"), True))
        for what, args, services in cases:
            with sandbox(world, "inb", *args) as name:
                _assert_closed(world, nb, name, what, services)


def test_sandbox_flows_and_their_icmp_errors_still_come_back(world):
    to_neighbour = _policy_file(world, {"allow": ["allowed.test:443"],
                                        "subnets": {"allow": [W.NEIGHBOUR_NET]}})
    with world.neighbour() as nb:
        for what, args in (("allow-all", ("--allow-all",)), ("subnets.allow", ("--policy", to_neighbour))):
            with sandbox(world, "inbout", *args) as name:
                # A flow the sandbox begins to the neighbour: answered; a UDP
                # datagram to a closed port there: the neighbour's ICMP port
                # unreachable comes back as ECONNREFUSED at once.
                script = (
                    "import socket,time\n"
                    "s=socket.socket(socket.AF_INET,socket.SOCK_DGRAM); s.settimeout(3)\n"
                    "s.connect(('%s',9)); t=time.monotonic()\n"
                    "s.send(b'x')\n"
                    "try:\n s.recv(16); print('answered')\n"
                    "except socket.timeout: print('timeout')\n"
                    "except OSError as e: print('refused', e.errno, round(time.monotonic()-t,2))\n"
                ) % W.NEIGHBOUR_ADDR
                code, out, err = world.ctl("exec", name, "--", "python3", "-c", script)
                expect(out.startswith("refused 111"),
                       "%s: UDP to a closed port of the neighbour (ICMP port unreachable back):" % what,
                       out.strip(), err.strip()[-300:])
                code, out, err = world.ctl("exec", name, "--", "sh", "-c",
                                           "timeout 5 bash -c 'echo > /dev/tcp/%s/%d'; echo $?"
                                           % (W.NEIGHBOUR_ADDR, 9))
                expect_eq(out.strip().splitlines()[-1:], ["1"],
                          "%s: TCP to a closed port of the neighbour is reset, not left hanging (%s)"
                          % (what, err.strip()[-200:]))


def test_denied_udp_of_a_custom_policy_still_fails_at_once(world):
    # The host's own ICMP admin-prohibited for a denied datagram leaves
    # through the output chain towards the veth: it must not be taken for
    # a host-begun flow.
    pol = _policy_file(world, {"allow": ["api.public.test"]})
    with sandbox(world, "inbudp", "--policy", pol) as name:
        script = (
            "import socket,time\n"
            "s=socket.socket(socket.AF_INET,socket.SOCK_DGRAM); s.settimeout(3)\n"
            "s.connect(('%s',443)); t=time.monotonic()\n"
            "s.send(b'x')\n"
            "try:\n s.recv(16); print('answered')\n"
            "except socket.timeout: print('timeout')\n"
            "except OSError as e: print('refused', e.errno, round(time.monotonic()-t,2))\n"
        ) % W.PUB_API_ADDR
        code, out, err = world.ctl("exec", name, "--", "python3", "-c", script)
        expect(out.startswith("refused"), "UDP 443 (QUIC) to an allowed address is refused at once:",
               out.strip(), err.strip()[-300:])


def test_exposed_port_still_reaches_a_listener_on_all_addresses(world):
    for policy in ("--allow-all", "--deny-all"):
        with sandbox(world, "inbport", policy, "--port", str(PORT)) as name:
            _listen(world, name)
            sb, _c, _e = get(world, name)
            endpoint = {p["port"]: p["endpoint"] for p in sb["ports"]}[PORT]
            host, port = endpoint.rsplit(":", 1)
            res = poll(lambda: (lambda r: r.get("tcp %s:%s" % (host, port)) == "answered" and r)(
                _knock(world.run_in_host, (host, int(port)))), 15, "the relay to answer at %s" % endpoint)
            expect(res, "relay")
            expect("tcp 127.0.0.1" in _seen(world, name), "the listener saw the relay's connection from "
                   "inside:", _seen(world, name))


# Sends one UDP datagram with a forged IPv4 source: FORGED_SRC SPORT -> DST DPORT.
FORGE = r"""
import socket, struct, sys
src, sport, dst, dport = sys.argv[1], int(sys.argv[2]), sys.argv[3], int(sys.argv[4])
payload = b"forged\n"
udp = struct.pack("!HHHH", sport, dport, 8 + len(payload), 0) + payload  # checksum 0: none (RFC 768)
ip = struct.pack("!BBHHHBBH4s4s", 0x45, 0, 20 + len(udp), 1, 0, 64, 17, 0,
                 socket.inet_aton(src), socket.inet_aton(dst))
s = socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_RAW)  # the kernel fills the IP checksum
s.sendto(ip + udp, (dst, 0))
print("sent")
"""


def test_forged_sandbox_source_does_not_open_a_reply_path_inward(world):
    # The neighbour forges a datagram "from" the sandbox's listener to an
    # unused pool address, which the host routes back out upstream and
    # masquerades: conntrack would see the sandbox begin a flow, mapped to
    # the host's own address. Then it sends the "reply" of that flow to
    # the host's address, which the mapping would carry in to the listener.
    # A pool source on the upstream interface is dropped before conntrack
    # confirms anything, so the listener sees nothing.
    with world.neighbour() as nb:
        with sandbox(world, "inbspoof", "--allow-all") as name:
            addr = _addr(world, name)
            _listen(world, name)
            other = addr.rsplit(".", 2)[0] + ".255.254"
            for argv in ((addr, PORT, other, 40000), (other, 40000, W.HOST_ADDR, PORT)):
                r = nb.run([sys.executable, "-c", FORGE] + [str(a) for a in argv])
                expect_eq((r.returncode, r.stdout.strip()), (0, "sent"), "forged datagram %s (%s)"
                          % (argv, r.stderr.strip()[-200:]))
            _self_check(world, name, addr)
            expect_eq([l for l in _seen(world, name) if l.strip() and not l.endswith(" " + addr)], [],
                      "peers the listener inside saw besides the sandbox itself")
