"""Flows established before a live policy update (docs/POLICY.md, Live
update): with no conntrack flush, every flow the new policy denies stops
passing packets in both directions as soon as sandbox.update answers, for
TCP, UDP and ICMP, over IPv4 and IPv6, and every flow it still allows keeps
passing, unbroken. Also across the modes: allow-all to a narrower custom
policy, and a custom policy to deny-all."""
import json
import os
import signal
import sys

import world as W
from common import expect, expect_eq, poll, sandbox

PORT = W.LISTEN_PORT + 7

# The world's side: a TCP echo server and a UDP server on one address; the
# UDP server echoes each datagram, and after b"push" sends a datagram back
# every 50 ms for a minute, so the reply direction can be watched alone.
_SERVER = r'''
import socket, sys, threading, time
addr, port = sys.argv[1], int(sys.argv[2])
fam = socket.AF_INET6 if ":" in addr else socket.AF_INET
t = socket.socket(fam); t.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
t.bind((addr, port)); t.listen(16)
u = socket.socket(fam, socket.SOCK_DGRAM); u.bind((addr, port))
def tcp(c):
    while True:
        try:
            b = c.recv(4096)
        except OSError:
            break
        if not b:
            break
        try:
            c.sendall(b)
        except OSError:
            break
def push(peer):
    for i in range(1200):
        try:
            u.sendto(b"p%d" % i, peer)
        except OSError:
            pass
        time.sleep(0.05)
def udp():
    while True:
        b, peer = u.recvfrom(4096)
        if b == b"push":
            threading.Thread(target=push, args=(peer,), daemon=True).start()
        else:
            u.sendto(b, peer)
threading.Thread(target=udp, daemon=True).start()
print("ready", flush=True)
while True:
    c, _p = t.accept()
    threading.Thread(target=tcp, args=(c,), daemon=True).start()
'''

# Inside the sandbox: per target address, a TCP connection, a connected UDP
# socket (echo) and one that receives the server's pushes, and an ICMP echo
# socket; one echo round on each ("before"), then "ready", then it waits
# for /tmp/gen-go and does the same again ("after"): each socket's result
# (ok, or the error) and, for the push socket, how many datagrams arrived
# in the second after the update. Prints one JSON line.
_CLIENT = r'''
import errno, json, os, select, socket, struct, sys, time
port = int(sys.argv[1])
addrs = sys.argv[2:]
def fam(a):
    return socket.AF_INET6 if ":" in a else socket.AF_INET
def icmp_sock(a):
    v6 = ":" in a
    proto = socket.IPPROTO_ICMPV6 if v6 else socket.IPPROTO_ICMP
    for kind in (socket.SOCK_DGRAM, socket.SOCK_RAW):
        try:
            s = socket.socket(fam(a), kind, proto)
            s.connect((a, 0))
            return s
        except OSError:
            pass
    return None
def csum(b):
    if len(b) % 2:
        b += b"\0"
    s = sum(struct.unpack("!%dH" % (len(b) // 2), b))
    s = (s >> 16) + (s & 0xffff); s += s >> 16
    return ~s & 0xffff
def ping(s, a, seq):
    try:
        return ping1(s, a, seq)
    except OSError as e:
        return errno.errorcode.get(e.errno, str(e.errno))
def ping1(s, a, seq):
    v6 = ":" in a
    typ = 128 if v6 else 8
    body = struct.pack("!HH", 0x5bd0, seq) + b"gen"
    hdr = struct.pack("!BBH", typ, 0, 0) + body
    if not v6:
        hdr = struct.pack("!BBH", typ, 0, csum(hdr)) + body
    s.send(hdr)
    end = time.monotonic() + 1.0
    while time.monotonic() < end:
        r, _w, _x = select.select([s], [], [], max(0, end - time.monotonic()))
        if not r:
            break
        b = s.recv(4096)
        if s.type == socket.SOCK_RAW and not v6:
            b = b[(b[0] & 15) * 4:]
        if b and b[0] == (129 if v6 else 0) and b[6:8] == struct.pack("!H", seq):
            return "ok"
    return "timeout"
def echo(s, msg):
    s.settimeout(1.0)
    try:
        s.send(msg)
        got = b""
        while len(got) < len(msg):
            b = s.recv(4096)
            if not b:
                return "closed"
            got += b
            if s.type == socket.SOCK_DGRAM:
                break
        return "ok" if got == msg else "wrong"
    except socket.timeout:
        return "timeout"
    except OSError as e:
        return errno.errorcode.get(e.errno, str(e.errno))
socks = {}
for a in addrs:
    t = socket.create_connection((a, port), timeout=5)
    u = socket.socket(fam(a), socket.SOCK_DGRAM); u.connect((a, port))
    p = socket.socket(fam(a), socket.SOCK_DGRAM); p.connect((a, port)); p.send(b"push")
    socks[a] = (t, u, p, icmp_sock(a))
def pushes(p, secs):
    n, end = 0, time.monotonic() + secs
    p.setblocking(False)
    while time.monotonic() < end:
        r, _w, _x = select.select([p], [], [], max(0, end - time.monotonic()))
        if r:
            try:
                p.recv(4096); n += 1
            except OSError:
                pass
    return n
def round_(tag, seq):
    out = {}
    for a, (t, u, p, i) in socks.items():
        out[a] = {"tcp": echo(t, b"%s-tcp" % tag), "udp": echo(u, b"%s-udp" % tag),
                  "icmp": ping(i, a, seq) if i else "unsupported", "push": pushes(p, 1.0)}
    return out
before = round_(b"before", 1)
open("/tmp/gen-ready", "w").close()
while not os.path.exists("/tmp/gen-go"):
    time.sleep(0.02)
for a, (t, u, p, i) in socks.items():
    p.setblocking(False)
    while True:  # what arrived while waiting for the go
        try:
            p.recv(4096)
        except OSError:
            break
after = round_(b"after", 2)
print(json.dumps({"before": before, "after": after}))
'''


def _run(world, old, new, allowed, denied):
    """Runs the client under `old` against every address, updates to `new`
    and returns (before, after) per address."""
    servers = []
    try:
        for a in allowed + denied:
            servers.append(world._spawn("gen-%s" % a, "net", [sys.executable, "-c", _SERVER, a, str(PORT)],
                                        ready=True))
        args = ["--allow-all"] if old == "allow-all" else ["--policy", _policy_file(world, old)]
        with sandbox(world, "gen", *args) as name:
            # ICMP echo sockets for the sandbox's processes (a setting of
            # its own network namespace only, made from the host).
            pid = world.rpc("sandbox.get", {"name": name})["result"]["session"]["initPid"]
            import subprocess
            subprocess.run(["nsenter", "-t", str(pid), "-n", "--", "sysctl", "-q", "-w",
                            "net.ipv4.ping_group_range=0 2147483647"], check=True)
            world.ctl("cp", "-", name + ":/tmp/gen.py", input=_CLIENT.encode(), binary=True, check=True)
            r = world.rpc("command.run", {"sandbox": name, "cmd": "python3", "detached": True,
                                          "args": ["/tmp/gen.py", str(PORT)] + allowed + denied})
            expect("result" in r, "start the client:", r)
            cmd = r["result"]["cmdId"]
            poll(lambda: world.ctl("exec", name, "--", "test", "-e", "/tmp/gen-ready")[0] == 0, 20,
                 "the client's flows to be established")
            r = world.rpc("sandbox.update", {"name": name, "networkPolicy": new})
            expect("result" in r, "update:", r)
            world.ctl("exec", name, "--", "touch", "/tmp/gen-go", check=True)
            if os.environ.get("GEN_DEBUG"):
                print(world.run_in_host(["nft", "list", "table", "inet", "sandboxd"]).stdout[-6000:])
            poll(lambda: world.rpc("command.get", {"cmdId": cmd})["result"].get("exitCode") is not None, 30,
                 "the client to finish")
            import base64
            logs = world.rpc("command.logs", {"cmdId": cmd})["result"]
            out = base64.b64decode(logs["stdout"]).decode(errors="replace").strip()
            expect(out, "the client's report:", base64.b64decode(logs.get("stderr") or b"").decode()[-500:])
            rep = json.loads(out.splitlines()[-1])
            return rep["before"], rep["after"]
    finally:
        for srv in servers:
            os.killpg(srv.pid, signal.SIGKILL)
            srv.wait(5)


def _policy_file(world, pol):
    import tempfile
    fd, path = tempfile.mkstemp(prefix="gen-", suffix=".json", dir=world.tmp)
    with os.fdopen(fd, "w") as f:
        json.dump(pol, f)
    return path


def _expect(before, after, allowed, denied, what):
    for a in allowed + denied:
        b = before[a]
        for proto in ("tcp", "udp"):
            expect_eq(b[proto], "ok", "%s: %s %s before the update" % (what, proto, a))
        expect(b["push"] > 0, "%s: the server's datagrams reach the sandbox from %s before the update:" % (what, a),
               b)
        expect_eq(b["icmp"], "ok", "%s: ICMP echo %s before the update" % (what, a))
    for a in allowed:
        x = after[a]
        for proto in ("tcp", "udp"):
            expect_eq(x[proto], "ok", "%s: the allowed %s flow to %s keeps passing" % (what, proto, a))
        expect(x["push"] > 0, "%s: the allowed reply-direction flow from %s keeps passing:" % (what, a), x)
        expect_eq(x["icmp"], "ok", "%s: the allowed ICMP echo flow to %s keeps passing" % (what, a))
    for a in denied:
        x = after[a]
        expect(x["tcp"] in ("ECONNRESET", "EPIPE"),
               "%s: the denied TCP flow to %s is reset at once:" % (what, a), x)
        expect(x["udp"] != "ok", "%s: the denied UDP flow to %s passes nothing:" % (what, a), x)
        expect_eq(x["push"], 0, "%s: datagrams of the denied flow from %s after the update" % (what, a))
        expect(x["icmp"] != "ok", "%s: the denied ICMP echo flow to %s passes nothing:" % (what, a), x)


def test_a_narrowing_update_cuts_each_denied_flow_at_once_and_keeps_the_allowed_ones(world):
    allowed, denied = [W.PUB_API_ADDR, W.PUB6_API_ADDR], [W.PUB_OTHER_ADDR, W.PUB6_OTHER_ADDR]
    old = {"subnets": {"allow": [a + ("/128" if ":" in a else "/32") for a in allowed + denied]}}
    new = {"subnets": {"allow": [a + ("/128" if ":" in a else "/32") for a in allowed]}}
    before, after = _run(world, old, new, allowed, denied)
    _expect(before, after, allowed, denied, "custom -> narrower custom")


def test_allow_all_to_a_custom_policy_cuts_the_flows_it_denies_and_keeps_the_others(world):
    allowed, denied = [W.PUB_API_ADDR, W.PUB6_API_ADDR], [W.PUB_OTHER_ADDR, W.PUB6_OTHER_ADDR]
    new = {"subnets": {"allow": [a + ("/128" if ":" in a else "/32") for a in allowed]}}
    before, after = _run(world, "allow-all", new, allowed, denied)
    _expect(before, after, allowed, denied, "allow-all -> custom")


def test_deny_all_cuts_every_flow_a_custom_policy_admitted(world):
    addrs = [W.PUB_API_ADDR, W.PUB6_API_ADDR]
    old = {"subnets": {"allow": [a + ("/128" if ":" in a else "/32") for a in addrs]}}
    before, after = _run(world, old, "deny-all", [], addrs)
    _expect(before, after, [], addrs, "custom -> deny-all")


# Inside the sandbox: one DNS query for api.public.test (A) to the gateway
# from a fixed source port; prints "answer", "timeout" or the error.
_QUERY = r'''
import errno, socket, sys
gw, port = sys.argv[1], int(sys.argv[2])
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("0.0.0.0", port)); s.settimeout(3)
try:
    s.connect((gw, 53))
    s.send(bytes([0x5b, 1, 1, 0, 0, 1, 0, 0, 0, 0, 0, 0]) + b"\x03api\x06public\x04test\x00\x00\x01\x00\x01")
    s.recv(512); print("answer")
except socket.timeout:
    print("timeout")
except OSError as e:
    print(errno.errorcode.get(e.errno, str(e.errno)))
'''


def _addr_and_gw(world, name):
    from common import sh
    _c, out, _e = sh(world, name, "ip -4 -o addr show dev eth0; cat /etc/resolv.conf")
    addr = out.split("inet ")[1].split("/")[0]
    gw = [l.split()[1] for l in out.splitlines() if l.startswith("nameserver")][0]
    return addr, gw


def test_a_sandbox_on_a_reused_address_gets_nothing_of_the_flows_of_the_one_before(world):
    """No conntrack flush at updates: the flows a sandbox leaves when it
    ends are removed before its address goes to another. A DNS flow to the
    gateway's filter from a fixed port, then an allow-all sandbox on the
    same address querying from that port: its query is forwarded to the
    resolver like any other (not taken for the old flow to a filter that
    is gone)."""
    sport = 40053
    with sandbox(world, "reuse-a", "--policy", _policy_file(world, {"allow": ["api.public.test"]})) as a:
        world.ctl("cp", "-", a + ":/tmp/q.py", input=_QUERY.encode(), binary=True, check=True)
        addr_a, gw = _addr_and_gw(world, a)
        _c, out, _e = world.ctl("exec", a, "--", "python3", "/tmp/q.py", gw, str(sport))
        expect_eq(out.strip(), "answer", "the DNS filter answers the first sandbox")
    # Its address comes back to the pool once its flows are gone (on a
    # worker thread, after delete answered): the lowest free one is taken.
    for _attempt in range(10):
        with sandbox(world, "reuse-b", "--allow-all") as b:
            addr_b, gw_b = _addr_and_gw(world, b)
            if addr_b != addr_a:
                continue
            world.ctl("cp", "-", b + ":/tmp/q.py", input=_QUERY.encode(), binary=True, check=True)
            _c, out, _e = world.ctl("exec", b, "--", "python3", "/tmp/q.py", gw_b, str(sport))
            expect_eq(out.strip(), "answer", "allow-all on the same address (%s): the query from the same port" %
                      addr_b)
            return
    raise AssertionError("no later sandbox got the first one's address %s in 10 tries" % addr_a)


def _chain_marks(world):
    """The generation of each custom session: its element of the host
    table's `gens` set (`"sbx<n>" . <mark>`), which its chains check."""
    import re
    out = world.run_in_host(["nft", "list", "set", "inet", "sandboxd", "gens"]).stdout
    return {"s_" + c: int(m, 16) for c, m in re.findall(r'"(sbx\d+)" \. (0x[0-9a-f]+)', out)}


def test_generations_are_never_handed_out_twice_across_restarts(world):
    """<stateDir>/ct-mark reserves generations before they are used: after a
    restart every re-applied session chain has a generation above every one
    used before it (a flow marked under an old policy can never pass a new
    one unjudged), and a malformed file stops the daemon, naming it."""
    from test_restore import _restart
    pol = _policy_file(world, {"allow": ["api.public.test"]})
    with sandbox(world, "genrst", "--policy", pol) as name:
        for _ in range(3):
            expect_eq(world.ctl("update", name, "--policy", pol)[0], 0, "update")
        before = _chain_marks(world)
        expect(before, "a session chain with its generation:", before)
        _restart(world, "kill")
        after = _chain_marks(world)
        expect(after and min(after.values()) > max(before.values()),
               "after a restart every generation is new:", before, after)
    d = world.daemon
    path = os.path.join(d.state_dir, "ct-mark")
    with open(path) as f:
        good = f.read()
    expect(int(good) > max(after.values()), "the store holds the first unreserved generation:", good, after)
    d.stop()
    try:
        with open(path, "w") as f:
            f.write("not a number\n")
        try:
            d.start(deadline_s=10)
            started = True
        except W.WorldError:
            started = False
        with open(d.log_path, errors="replace") as f:
            log = f.read()
        expect(not started and path in log, "a malformed %s stops the daemon, naming it:" % path, log[-500:])
    finally:
        with open(path, "w") as f:
            f.write(good)
        if not d.alive():
            d.start()
