"""Pod sandboxes (sandbox.create network.netns, docs/KUBERNETES.md "The pod
model" steps 2-4): a sandbox that joins a network namespace made for it, as
CNI makes a pod's, keeps that namespace's interface and address, is reached
there by another namespace ("another pod"), and has its policy enforced by a
table `inet sandboxd-pod` inside that namespace, which its root cannot
change; its DNS (port 53 to anywhere) is answered by the daemon's DNS filter
on the namespace's loopback. Who may name a namespace, and which paths, is
refused by field.

Each test makes its pod namespace ("sbxw-pod<tag>-<world>") with a veth to
the world's internet namespace, as CNI's bridge plugin would, and removes
both at the end. Run in both user-namespace modes (SANDBOXD_TEST_USERNS=0)."""
import contextlib
import json
import os
import signal
import subprocess

import leaks
import world as W
from common import expect, expect_eq, poll, sh
from test_policy_rules import NXDOMAIN, _blocked, _refused_fast, connect, dns
from test_tenants import NOGROUP

POD_TABLE = "sandboxd-pod"
ADMIN_UID = 4321  # tenants.localAdmins: admin, but not root
CONFIG = {"kubernetes": {"podCIDRs": ["10.99.0.0/16"], "serviceCIDRs": ["10.96.0.0/12"]},
          "socketGroup": "nogroup", "tenants": {"localAdmins": [ADMIN_UID]}}
LISTENER = r'''
import socket, sys
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("0.0.0.0", int(sys.argv[1]))); s.listen(8)
while True:
    c, a = s.accept(); c.sendall(b"pong " + a[0].encode() + b"\n"); c.close()
'''
PING = r'''
import socket, sys
try:
    s = socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=5); print(s.recv(100).decode().strip())
except OSError as e:
    print("error", e)
'''


def _run(argv, check=True):
    return subprocess.run(argv, capture_output=True, text=True, timeout=60, check=check)


@contextlib.contextmanager
def pod_netns(world, tag, net):
    """A network namespace /run/netns/sbxw-pod<tag>-<id> with eth0 at
    10.99.<net>.2/24 and a default route via its veth peer, 10.99.<net>.1 in
    the world's internet namespace (where the public test hosts live).
    Yields (name, pod address, peer address); removes both at the end."""
    ns = "sbxw-pod%s-%s" % (tag, world.id)
    peer_if = "pod%s" % tag
    addr, peer = "10.99.%d.2" % net, "10.99.%d.1" % net
    N = world.net_ns
    _run(["ip", "netns", "add", ns])
    world.netns_made.append(ns)
    try:
        _run(["ip", "-n", ns, "link", "add", "eth0", "type", "veth", "peer", "name", peer_if, "netns", N])
        _run(["ip", "-n", ns, "link", "set", "lo", "up"])
        _run(["ip", "-n", ns, "addr", "add", addr + "/24", "dev", "eth0"])
        _run(["ip", "-n", ns, "link", "set", "eth0", "up"])
        _run(["ip", "-n", N, "addr", "add", peer + "/24", "dev", peer_if])
        _run(["ip", "-n", N, "link", "set", peer_if, "up"])
        _run(["ip", "-n", ns, "route", "add", "default", "via", peer])
        yield ns, addr, peer
    finally:
        _run(["ip", "-n", N, "link", "del", peer_if], check=False)
        _run(["ip", "netns", "del", ns], check=False)
        if ns in world.netns_made:
            world.netns_made.remove(ns)


def _table(ns):
    """`nft list table inet sandboxd-pod` inside namespace ns: its text, or
    None when there is no such table."""
    p = _run(["ip", "netns", "exec", ns, "nft", "list", "table", "inet", POD_TABLE], check=False)
    return p.stdout if p.returncode == 0 else None


def _table_goes(ns):
    """The pod's table goes with its deleted sandbox: a delete answers once
    the session is fenced (its processes killed) and removes its kernel
    objects, this table included, right after."""
    W.World.wait_until(lambda: _table(ns) is None, 20, "the pod's table to go after the delete")


@contextlib.contextmanager
def pod_daemon(world):
    """A daemon of this file's config (kubernetes ranges, a non-root admin
    uid) as world.daemon; the default one again afterwards."""
    world.stop_sandboxd()
    d = world.start_sandboxd(CONFIG, tag="pod")
    try:
        yield d
    except BaseException:
        world.stop_sandboxd()
        raise
    # A clean exit (under ASan: no leak, no error).
    expect_eq(world.stop_sandboxd(), 0, "sandboxd's exit status on SIGTERM")


def _create(world, name, ns, policy, **extra):
    return world.rpc("sandbox.create", dict({"name": name, "networkPolicy": policy,
                                             "network": {"netns": "/run/netns/" + ns}}, **extra), 180)


def _delete(world, name):
    world.ctl("rm", name)


def _reason(msg):
    return ((msg.get("error") or {}).get("data") or {}).get("reason")


def _field(msg):
    return ((msg.get("error") or {}).get("data") or {}).get("field")


def test_a_pod_sandbox_keeps_the_pods_address_and_its_policy_holds_in_the_kernel(world):
    with pod_daemon(world) as d, pod_netns(world, "a", 1) as (ns, addr, peer):
        name = world.name("pod")
        m = _create(world, name, ns, {"allow": ["api.public.test"]})
        expect("result" in m, "create with network.netns:", json.dumps(m)[:500])
        try:
            sb = m["result"]
            expect_eq(sb.get("network"), {"netns": "/run/netns/" + ns}, "sandbox.create's answer shows network")
            got = world.rpc_result("sandbox.get", {"name": name})
            expect_eq(got.get("network"), {"netns": "/run/netns/" + ns}, "sandbox.get shows network")
            # The pod's interface and address, as CNI made them.
            code, out, err = sh(world, name, "ip -o -4 addr show dev eth0")
            expect(code == 0 and (" %s/24 " % addr) in out, "the pod's eth0 inside:", out, err)
            # Another namespace ("another pod") reaches a listener by that address.
            r = world.rpc_result("command.run", {"sandbox": name, "cmd": "python3", "args": ["-c", LISTENER, "8080"],
                                                 "detached": True})
            poll(lambda: world.run_in_net(["python3", "-c", PING, addr, "8080"]).stdout.startswith("pong"),
                 30, "a connection from the internet namespace to the pod's listener")
            world.rpc_result("command.kill", {"cmdId": r["cmdId"]})
            # The policy: one name resolves and connects, another is refused.
            expect_eq(dns(world, name, "api.public.test")["addrs"], [W.PUB_API_ADDR], "the allowed name resolves")
            expect(connect(world, name, W.PUB_API_ADDR)["ok"], "the allowed address connects")
            _blocked(dns(world, name, "other.public.test"), NXDOMAIN, "other.public.test")
            _refused_fast(connect(world, name, W.PUB_OTHER_ADDR), "a raw address the policy does not admit")
            # DNS to any resolver is the filter's (redirected inside the namespace).
            _blocked(dns(world, name, "other.public.test", server=W.DNS_ADDR), NXDOMAIN, "other.public.test")
            # The cluster's and the node's ranges are closed to a custom policy.
            _refused_fast(connect(world, name, peer), "the pod's gateway (a pod CIDR address)")
            _refused_fast(connect(world, name, W.HOST_ADDR), "the node's address")
            # Root inside cannot change the table (nftables' netlink is not
            # even open to it) nor anything else of the namespace's network:
            # it holds no CAP_NET_ADMIN over it (user namespace or dropped).
            code, out, err = sh(world, name, "nft flush ruleset; nft delete table inet %s" % POD_TABLE, "--sudo")
            expect(code != 0, "root in the sandbox ran nft:", out, err)
            code, out, err = sh(world, name, "ip addr add 10.99.1.200/32 dev lo", "--sudo")
            expect(code != 0 and "Operation not permitted" in out + err,
                   "root in the sandbox changed the pod's addresses, or failed for another reason:", code, out, err)
            expect(_table(ns) is not None, "the pod's table after root inside tried to flush it")
            _refused_fast(connect(world, name, W.PUB_OTHER_ADDR), "the refused address after the flush attempt")
            # A policy update takes effect at once, for open flows too.
            world.rpc_result("sandbox.update", {"name": name, "networkPolicy": {"allow": ["other.public.test"]}})
            expect_eq(dns(world, name, "other.public.test")["addrs"], [W.PUB_OTHER_ADDR], "the newly allowed name")
            expect(connect(world, name, W.PUB_OTHER_ADDR)["ok"], "the newly allowed address connects")
            _refused_fast(connect(world, name, W.PUB_API_ADDR), "the address only the old policy admitted")
            # kill -9 of the daemon: the pod, its table and its pins stay.
            pid = d.proc.pid
            os.kill(pid, signal.SIGKILL)
            d.proc.wait(10)
            expect(_table(ns) is not None, "the pod's table while the daemon is down")
            d.start()
            got = world.rpc_result("sandbox.get", {"name": name})
            expect_eq(got["status"], "running", "the pod's sandbox after a restart")
            expect(connect(world, name, W.PUB_OTHER_ADDR)["ok"], "the pinned address after a restart")
            _refused_fast(connect(world, name, W.PUB_API_ADDR), "a refused address after a restart")
            _blocked(dns(world, name, "api.public.test"), NXDOMAIN, "api.public.test")
            with open(d.log_path, errors="replace") as f:
                expect("re-adopted" in f.read(), "the new sandboxd re-adopted the pod's session")
        finally:
            _delete(world, name)
        _table_goes(ns)
        leaks.check(world, name)


def test_a_deny_all_pod_reaches_nothing_and_allow_all_keeps_the_node_closed(world):
    with pod_daemon(world), pod_netns(world, "b", 2) as (ns, _addr, peer):
        name = world.name("poddeny")
        # "Another pod" listening on the pod network, as a Service's backend.
        other = world.start_listener("net", peer, W.LISTEN_PORT)
        m = _create(world, name, ns, "deny-all")
        expect("result" in m, "create deny-all with network.netns:", json.dumps(m)[:500])
        try:
            _refused_fast(connect(world, name, W.PUB_API_ADDR), "deny-all: a public address")
            _refused_fast(connect(world, name, peer), "deny-all: another pod")
            expect_eq(other.connections(), [], "connections another pod saw from a deny-all pod")
            r = dns(world, name, "api.public.test")
            expect(r.get("addrs") == [] or "error" in r, "deny-all: DNS answers no address:", r)
            world.rpc_result("sandbox.update", {"name": name, "networkPolicy": "allow-all"})
            expect(connect(world, name, W.PUB_API_ADDR)["ok"], "allow-all: a public address")
            expect(connect(world, name, peer)["ok"], "allow-all: another pod (the pod CIDR is open to allow-all)")
            poll(lambda: len(other.connections()) == 1, 10, "another pod sees the allow-all pod's connection")
            # A custom policy reaches the pod CIDR only where subnets.allow says.
            world.rpc_result("sandbox.update", {"name": name, "networkPolicy": {
                "allow": ["api.public.test"], "subnets": {"allow": [peer + "/32"]}}})
            expect(connect(world, name, peer)["ok"], "custom: another pod that subnets.allow names")
            # No host has .3: only the table's reset answers there.
            r = connect(world, name, peer.rsplit(".", 1)[0] + ".3")
            expect_eq(r.get("error"), "ECONNREFUSED", "custom: the rest of the pod CIDR (%s)" % r)
            _refused_fast(connect(world, name, W.PUB_OTHER_ADDR), "custom: a public address it does not admit")
            _refused_fast(connect(world, name, W.HOST_ADDR), "allow-all: the node's address")
            expect_eq(dns(world, name, "api.public.test")["addrs"], [W.PUB_API_ADDR], "allow-all: DNS")
        finally:
            _delete(world, name)
        _table_goes(ns)
        leaks.check(world, name)


def test_network_netns_is_refused_for_other_paths_and_clients(world):
    with pod_daemon(world) as d, pod_netns(world, "c", 3) as (ns, _a, _p):
        def refused(params, field, what, reason=None):
            m = world.rpc("sandbox.create", dict({"name": world.name("podno"), "networkPolicy": "deny-all"},
                                                 **params), 60)
            expect("error" in m, "%s: created:" % what, json.dumps(m)[:300])
            expect_eq(_field(m), field, "%s: the field named (%s)" % (what, m["error"].get("message")))
            if reason:
                expect_eq(_reason(m), reason, "%s: reason" % what)
            return m["error"]["message"]
        refused({"network": {"netns": "/etc/hostname"}}, "network.netns", "a file that is not a namespace")
        refused({"network": {"netns": "/run/netns"}}, "network.netns", "a directory")
        refused({"network": {"netns": "/run/netns/" + world.host_ns}}, "network.netns", "the daemon's own namespace",
                "permission_denied")
        link = os.path.join(world.tmp, "podlink")
        os.symlink("/run/netns/" + ns, link)
        msg = refused({"network": {"netns": link}}, "network.netns", "a symlink")
        expect("symbolic link" in msg, "the refusal says why:", msg)
        refused({"network": {"netns": "/run/netns/" + ns, "bridge": "x"}}, "network.bridge", "an unknown key")
        refused({"network": {"netns": "/run/netns/" + ns},
                 "networkPolicy": {"allow": {"api.public.test": [{"transform": [{"headers": {"x-a": "b"}}]}]}}},
                "networkPolicy", "HTTP rules in a pod's policy")
        # Not root: a non-root admin and a tenant of the local socket.
        for uid in (ADMIN_UID, NOGROUP):
            p = subprocess.run(["python3", "-c", r'''
import json, socket, sys
s = socket.socket(socket.AF_UNIX); s.connect("sandboxd.sock"); f = s.makefile("rb")
s.sendall((json.dumps({"jsonrpc": "2.0", "id": 1, "method": "sandbox.create", "params": json.loads(sys.argv[1])}) + "\n").encode())
print(f.readline().decode())''', json.dumps({"name": world.name("podnr"), "networkPolicy": "deny-all",
                                              "network": {"netns": "/run/netns/" + ns}})],
                               cwd=d.dir, user=uid, group=NOGROUP, extra_groups=[], capture_output=True, text=True,
                               timeout=120)
            m = json.loads(p.stdout.strip() or "{}")
            expect_eq((_field(m), _reason(m)), ("network.netns", "permission_denied"),
                      "network.netns as uid %d: %s %s" % (uid, p.stdout[:300], p.stderr[-300:]))
        # One sandbox per pod namespace.
        name = world.name("podone")
        m = _create(world, name, ns, "deny-all")
        expect("result" in m, "create:", json.dumps(m)[:300])
        try:
            # What a pod's table cannot enforce yet is refused by update too.
            u = world.rpc("sandbox.update", {"name": name, "networkPolicy": {"allow": ["api.public.test:443"]}})
            expect_eq((_field(u), _reason(u)), ("networkPolicy", "invalid_policy"), "a port on a name for a pod: %s"
                      % json.dumps(u)[:300])
            expect_eq(world.rpc_result("sandbox.get", {"name": name})["networkPolicy"], "deny-all",
                      "the policy after a refused update")
            # getOrCreate of the pod's sandbox with the same namespace finds it.
            g = world.rpc("sandbox.getOrCreate", {"name": name, "network": {"netns": "/run/netns/" + ns}}, 120)
            expect("result" in g and g["result"]["sandbox"]["name"] == name and not g["result"]["created"]
                   and g["result"]["differs"] == [], "getOrCreate of the pod's sandbox:", json.dumps(g)[:300])
            m2 = _create(world, world.name("podtwo"), ns, "deny-all")
            expect_eq((_field(m2), _reason(m2)), ("network.netns", "already_exists"), "a second sandbox in the pod's")
            # A fork gets a namespace of its own, not the pod's.
            fork = world.name("podfork")
            f = world.rpc("sandbox.fork", {"sourceSandbox": name, "name": fork}, 180)
            expect("result" in f, "fork of a pod's sandbox:", json.dumps(f)[:300])
            try:
                expect("network" not in f["result"], "the fork's network:", f["result"].get("network"))
                code, out, _e = sh(world, fork, "ls /sys/class/net | tr '\\n' ' '")
                expect_eq(out.split(), ["lo"], "the fork's interfaces (deny-all, its own namespace)")
            finally:
                _delete(world, fork)
        finally:
            _delete(world, name)
        leaks.check(world, name)


def test_a_persistent_pod_resumes_in_its_namespace_and_not_in_another(world):
    with pod_daemon(world):
        name = world.name("podkeep")
        with pod_netns(world, "d", 4) as (ns, addr, _p):
            m = _create(world, name, ns, {"allow": ["api.public.test"]}, persistent=True)
            expect("result" in m, "create a persistent pod sandbox:", json.dumps(m)[:300])
            try:
                sh(world, name, "echo kept > /workspace/f")
                world.rpc_result("sandbox.stop", {"name": name})
                expect(_table(ns) is None, "the pod's table after stop")
                # Resumed by a command: the same namespace, its table again.
                code, out, err = sh(world, name, "cat /workspace/f; ip -o -4 addr show dev eth0")
                expect(code == 0 and "kept" in out and addr in out, "the resumed pod sandbox:", out, err)
                expect(_table(ns) is not None, "the pod's table after the resume")
                expect_eq(dns(world, name, "api.public.test")["addrs"], [W.PUB_API_ADDR], "DNS after the resume")
                expect(connect(world, name, W.PUB_API_ADDR)["ok"], "the allowed address after the resume")
                _refused_fast(connect(world, name, W.PUB_OTHER_ADDR), "a refused address after the resume")
                world.rpc_result("sandbox.stop", {"name": name})
            except BaseException:
                _delete(world, name)
                raise
        # The pod's namespace is gone; one of the same name is another one.
        try:
            with pod_netns(world, "d", 4) as (ns, _a, _p):
                m = world.rpc("sandbox.get", {"name": name, "resume": True}, 120)
                expect("error" in m, "a resume in another namespace of the same path:", json.dumps(m)[:300])
                expect_eq(_field(m), "network.netns", "the field named (%s)" % m["error"].get("message"))
                expect(_table(ns) is None, "no table in the other namespace")
            m = world.rpc("sandbox.get", {"name": name, "resume": True}, 120)
            expect("error" in m and _field(m) == "network.netns", "a resume with the namespace gone:",
                   json.dumps(m)[:300])
            sb = world.rpc_result("sandbox.get", {"name": name})
            expect_eq(sb["status"], "stopped", "the sandbox after refused resumes")
            expect_eq(sb.get("network"), {"netns": "/run/netns/" + ns}, "its recorded namespace")
            sd = os.path.join(world.daemon.state_dir, "sandboxes", name)
            expect(os.path.isdir(sd), "its state directory after refused resumes")
        finally:
            _delete(world, name)
        leaks.check(world, name)


SPOOF = r'''
import socket, struct, sys
pod, peer, P, Q = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
u.bind((pod, Q))
try:
    r = socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_RAW)
    udp = struct.pack("!HHHH", P, Q, 9, 0) + b"x"
    ip = struct.pack("!BBHHHBBH4s4s", 0x45, 0, 20 + len(udp), 1, 0, 64, 17, 0,
                     socket.inet_aton(peer), socket.inet_aton(pod)) + udp
    r.sendto(ip, (pod, 0))
    print("raw sent")
except OSError as e:
    print("raw:", e.strerror)
try:
    u.sendto(b"leak", (peer, P))
    print("udp sent")
except OSError as e:
    print("udp:", e.strerror)
'''
RECV = r'''
import socket, sys
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.bind((sys.argv[1], int(sys.argv[2])))
print("ready", flush=True)
s.settimeout(float(sys.argv[3]))
try:
    print(s.recvfrom(100)[0].decode(errors="replace"), flush=True)
except socket.timeout:
    print("nothing", flush=True)
'''


def test_a_pod_cannot_forge_an_inbound_flow_to_answer_through_it(world):
    """A flow that "came in" is admitted in its reply direction without
    judgement. Root inside (raw sockets, without a user namespace) sent
    itself a packet over loopback with another host's source: conntrack
    took it for a flow from that host, and a datagram to it then left as
    that flow's reply, past a deny-all policy. The table drops every new
    packet whose source is not an address of the pod."""
    with pod_daemon(world), pod_netns(world, "s", 4) as (ns, addr, peer):
        name = world.name("podspoof")
        m = _create(world, name, ns, "deny-all")
        expect("result" in m, "create deny-all with network.netns:", json.dumps(m)[:500])
        try:
            # The receiver waits a bounded time: nothing may arrive, and a
            # packet that did would come within it (one hop of a veth).
            recv = subprocess.Popen(["ip", "netns", "exec", world.net_ns, "python3", "-c", RECV, peer, "5353", "5"],
                                    stdout=subprocess.PIPE, text=True)
            try:
                expect_eq(recv.stdout.readline(), "ready\n", "the receiver in the internet namespace")
                code, out, err = sh(world, name, "python3 -c '%s' %s %s 5353 6000" % (SPOOF, addr, peer), "--sudo")
                got = recv.stdout.read()
            finally:
                recv.kill()
                recv.wait()
            expect_eq(code, 0, "the spoofing script ran (%s)" % err)
            expect_eq(got, "nothing\n", "what the other pod got from a deny-all pod (script: %s)" % out.strip())
        finally:
            _delete(world, name)
        _table_goes(ns)
        leaks.check(world, name)
