"""The keyed layout (docs/POLICY.md, nftables layout): every custom
session's ranges are elements of shared interval sets keyed by interface
name . address. One session's widest ranges (0.0.0.0/0 and ::/0, which run
to the top of the address space and carry into the name's last byte, and
which open every forbidden range through `opened4`/`opened6`) admit
nothing for another custom session, in either slot, before and after a
custom-to-custom update of either, and after the wide one is deleted and
its interface name is reused."""
import json
import os
import tempfile

import world as W
from common import expect, sandbox

PORT = W.LISTEN_PORT + 31

_PROBE = r'''
import socket, sys
out = []
for a in sys.argv[2:]:
    s = socket.socket(socket.AF_INET6 if ":" in a else socket.AF_INET)
    s.settimeout(4)
    try:
        s.connect((a, int(sys.argv[1])))
        out.append("ok")
    except OSError as e:
        out.append(type(e).__name__)
    s.close()
print(" ".join(out))
'''

# A private address on the fake internet (RFC 1918: forbidden for a custom
# policy unless subnets.allow opens it), added for these tests.
PRIV = "10.99.0.1"
PRIV6 = "fd99::1"  # unique local (fc00::/7), outside the IPv6 pool
TARGETS = [W.PUB_ATTACKER_ADDR, PRIV, W.PUB6_ATTACKER_ADDR, PRIV6]


def _priv(world):
    import subprocess
    subprocess.run(["ip", "-n", world.net_ns, "addr", "replace", PRIV + "/32", "dev", "lo"], check=True)
    subprocess.run(["ip", "-n", world.net_ns, "addr", "replace", PRIV6 + "/128", "dev", "lo", "nodad"], check=True)


def _unpriv(world):
    import subprocess
    subprocess.run(["ip", "-n", world.net_ns, "addr", "del", PRIV + "/32", "dev", "lo"], check=False)
    subprocess.run(["ip", "-n", world.net_ns, "addr", "del", PRIV6 + "/128", "dev", "lo"], check=False)
# Everything: the public space, and the forbidden ranges it names (a CIDR
# opens a forbidden range only when it lies inside it): ff00::/8 and
# 240.0.0.0/4 run (nearly) to the top of their address spaces.
WIDE = {"allow": ["api.public.test"], "subnets": {"allow": ["0.0.0.0/0", "::/0", "10.0.0.0/8", "240.0.0.0/4",
                                                            "fc00::/7", "ff00::/8"]}}
NARROW = {"allow": ["api.public.test"]}
TOP = {"allow": ["api.public.test"], "subnets": {"allow": ["255.255.255.0/24", "ffff::/16"]}}


def _pol(world, p):
    fd, path = tempfile.mkstemp(prefix="ks-", suffix=".json", dir=world.tmp)
    with os.fdopen(fd, "w") as f:
        json.dump(p, f)
    return path


def _probe(world, name, port=PORT):
    world.ctl("cp", "-", name + ":/tmp/ks.py", input=_PROBE.encode(), binary=True, check=True)
    code, out, err = world.ctl("exec", name, "--", "python3", "/tmp/ks.py", str(port), *TARGETS, timeout=60)
    return out.split()


def _narrow_denied(world, n, what, port=PORT):
    got = _probe(world, n, port)
    expect(len(got) == len(TARGETS) and "ok" not in got, "%s: the narrow session reached %s" % (what, got),
           world.run_in_host(["nft", "list", "table", "inet", "sandboxd"]).stdout[-4000:])


def test_one_sessions_wide_ranges_admit_nothing_for_another(world):
    _priv(world)
    for a in TARGETS:
        world.start_listener("net", a, PORT)
    try:
        _wide_vs_others(world)
    finally:
        _unpriv(world)


def _wide_vs_others(world):
    with sandbox(world, "ks-wide", "--policy", _pol(world, WIDE)) as wide:
        with sandbox(world, "ks-top", "--policy", _pol(world, TOP)) as top, \
                sandbox(world, "ks-narrow", "--policy", _pol(world, NARROW)) as narrow:
            got = _probe(world, wide)
            expect(got == ["ok"] * len(TARGETS), "the wide session reaches the world: %s" % got)
            _narrow_denied(world, narrow, "both in slot a")
            _narrow_denied(world, top, "top session, slot a")
            # Move each through the slots: wide to b, narrow to b, wide back to a.
            for who, pol, what in ((wide, WIDE, "wide in slot b"), (narrow, NARROW, "both in slot b"),
                                   (top, TOP, "top in slot b"), (wide, WIDE, "wide back in a")):
                expect(world.ctl("update", who, "--policy", _pol(world, pol))[0] == 0, "update %s" % who)
                _narrow_denied(world, narrow, what)
                _narrow_denied(world, top, what + " (top)")
        # The wide one alone left: a new narrow session may take a freed name.
        with sandbox(world, "ks-again", "--policy", _pol(world, NARROW)) as again:
            _narrow_denied(world, again, "a new session beside the wide one")
    # The wide one deleted: its name reused by a narrow session.
    with sandbox(world, "ks-reuse", "--policy", _pol(world, NARROW)) as reuse:
        _narrow_denied(world, reuse, "a reused name")


test_one_sessions_wide_ranges_admit_nothing_for_another.timeout = 400


def _ifname(world, name):
    _c, out, _e = world.ctl("exec", name, "--", "sh", "-c", "awk '/^nameserver/{print $2; exit}' /etc/resolv.conf")
    gw = out.strip()
    res = world.run_in_host(["ip", "-o", "-4", "addr", "show", "to", gw + "/32"])
    return res.stdout.split()[1] if res.stdout.split() else None


def test_names_that_are_prefixes_of_others_share_nothing(world):
    """sbx1 and sbx10, sbx11: the shorter name's wide ranges (to the top of
    the address space) admit nothing for the longer ones, and the other
    way round."""
    import contextlib
    _priv(world)
    for a in TARGETS:
        world.start_listener("net", a, PORT + 1)
    port = PORT + 1
    try:
        with contextlib.ExitStack() as st:
            by_if = {}
            for i in range(14):
                n = st.enter_context(sandbox(world, "ksp%d" % i, "--policy", _pol(world, NARROW)))
                by_if[_ifname(world, n)] = n
                if "sbx1" in by_if and "sbx10" in by_if and "sbx11" in by_if:
                    break
            if not all(k in by_if for k in ("sbx1", "sbx10", "sbx11")):
                raise W.Skip("no sbx1/sbx10/sbx11 (%s)" % sorted(by_if))
            for wide, narrows in (("sbx1", ("sbx10", "sbx11")), ("sbx10", ("sbx1", "sbx11"))):
                expect(world.ctl("update", by_if[wide], "--policy", _pol(world, WIDE))[0] == 0, "update")
                got = _probe(world, by_if[wide], port)
                expect(got == ["ok"] * len(TARGETS), "%s (wide) reaches the world: %s" % (wide, got))
                for nw in narrows:
                    _narrow_denied(world, by_if[nw], "%s beside wide %s" % (nw, wide), port)
                expect(world.ctl("update", by_if[wide], "--policy", _pol(world, NARROW))[0] == 0, "update back")
    finally:
        _unpriv(world)


test_names_that_are_prefixes_of_others_share_nothing.timeout = 500


_RESOLVE_CONNECT = r'''
import socket, sys
name, port = sys.argv[1], int(sys.argv[2])
try:
    a = socket.getaddrinfo(name, port, socket.AF_INET, socket.SOCK_STREAM)[0][4][0]
except OSError as e:
    a = None
out = [str(a)]
for addr in sys.argv[3:]:
    s = socket.socket()
    s.settimeout(4)
    try:
        s.connect((addr, port)); out.append("ok")
    except OSError as e:
        out.append(type(e).__name__)
    s.close()
print(" ".join(out))
'''


def test_a_sessions_dns_pins_admit_nothing_for_another(world):
    """The shared pins4 set: the address sbxA's DNS filter pinned is not
    reachable from sbxB, whose policy names another host, before and after
    an update of either moves it to the other slot."""
    port = PORT + 2
    world.start_listener("net", W.PUB_API_ADDR, port)
    a_pol = _pol(world, {"allow": ["api.public.test"]})
    b_pol = _pol(world, {"allow": ["other.public.test"]})
    with sandbox(world, "ks-pin-a", "--policy", a_pol) as a, sandbox(world, "ks-pin-b", "--policy", b_pol) as b:
        for n in (a, b):
            world.ctl("cp", "-", n + ":/tmp/rc.py", input=_RESOLVE_CONNECT.encode(), binary=True, check=True)
        for step in ("both slot a", "a in slot b", "b in slot b"):
            if step == "a in slot b":
                expect(world.ctl("update", a, "--policy", a_pol)[0] == 0, "update a")
            if step == "b in slot b":
                expect(world.ctl("update", b, "--policy", b_pol)[0] == 0, "update b")
            _c, out, _e = world.ctl("exec", a, "--", "python3", "/tmp/rc.py", "api.public.test", str(port),
                                    W.PUB_API_ADDR, timeout=60)
            expect(out.split() == [W.PUB_API_ADDR, "ok"], "%s: a resolves and reaches its pin: %s" % (step, out))
            _c, out, _e = world.ctl("exec", b, "--", "python3", "/tmp/rc.py", "other.public.test", str(port),
                                    W.PUB_API_ADDR, timeout=60)
            expect(len(out.split()) == 2 and out.split()[1] != "ok", "%s: b reached a's pinned address: %s" % (step, out))


def test_a_daemon_killed_mid_update_enforces_the_stored_policy_after_restart(world):
    """SIGKILL at several moments of a wide-to-narrow custom update (between
    its two batches among them): the restarted daemon enforces exactly the
    policy it stored, in both directions of the change, and a later update
    leaves nothing of the wide policy loaded."""
    import signal
    import time
    from test_restore import _restart
    port = PORT + 3
    _priv(world)
    try:
        for a in TARGETS:
            world.start_listener("net", a, port)
        for delay in (0.0, 0.002, 0.005, 0.01, 0.02, 0.05):
            with sandbox(world, "ks-kill", "--policy", _pol(world, WIDE)) as name:
                got = _probe(world, name, port)
                expect(got == ["ok"] * len(TARGETS), "wide reaches the world: %s" % got)
                c = world.daemon.connect()
                c.start("sandbox.update", {"name": name, "networkPolicy": NARROW})
                time.sleep(delay)
                d = world.daemon
                os.kill(d.proc.pid, signal.SIGKILL)
                d.proc.wait(10)
                c.close()
                d.start()
                stored = world.rpc("sandbox.get", {"name": name})["result"]["networkPolicy"]
                got = _probe(world, name, port)
                if stored == NARROW or (isinstance(stored, dict) and not stored.get("subnets")):
                    expect("ok" not in got, "delay %s: narrow stored, yet reached %s" % (delay, got),
                           world.run_in_host(["nft", "list", "table", "inet", "sandboxd"]).stdout[-3000:])
                else:
                    expect(got == ["ok"] * len(TARGETS), "delay %s: wide stored: %s" % (delay, got))
                expect(world.ctl("update", name, "--policy", _pol(world, NARROW))[0] == 0, "update again")
                got = _probe(world, name, port)
                expect("ok" not in got, "delay %s: after a later update, reached %s" % (delay, got))
    finally:
        _unpriv(world)


test_a_daemon_killed_mid_update_enforces_the_stored_policy_after_restart.timeout = 500


_LOOP = r'''
import json, socket, sys, time
port, end = int(sys.argv[1]), time.time() + float(sys.argv[2])
addrs = sys.argv[3:]
out = []
open("/tmp/loop-ready", "w").close()
held = []
while time.time() < end:
    # Each event is dated from before its attempt: a byte sent (or a
    # connect begun) before the update answered may complete after it,
    # and a busy machine may run this process late; what must not happen
    # is an attempt begun after the answer that succeeds.
    for a in addrs:
        s = socket.socket(socket.AF_INET6 if ":" in a else socket.AF_INET)
        s.settimeout(0.3)
        t0 = time.time()
        try:
            s.connect((a, port))
            out.append(["connect", a, t0])
            held.append((a, s))
        except OSError:
            s.close()
    for a, s in list(held):
        t0 = time.time()
        try:
            s.sendall(b"x")
            if s.recv(1) == b"x":
                out.append(["echo", a, t0])
        except OSError:
            held.remove((a, s))
    time.sleep(0.01)
print(json.dumps(out))
'''


def test_nothing_of_the_old_policy_passes_once_an_update_answers(world):
    """Connections opened in a loop, and bytes echoed on the open ones,
    while a custom-to-custom update (both slots) narrows the policy: once
    sandbox.update has answered, no connection to what only the old policy
    allowed is made and no byte of one moves (an attempt begun after the
    answer never succeeds; one begun before may finish after it: the
    event's time is its start, else a busy machine that ran the loop late
    failed the test with a byte echoed before the update)."""
    import subprocess
    import sys
    import time
    port = PORT + 4
    _priv(world)
    try:
        for a in TARGETS:
            world.start_listener("net", a, port)
        for rounds in (1, 2):  # the second narrowing leaves slot b
            with sandbox(world, "ks-loop", "--policy", _pol(world, WIDE)) as name:
                if rounds == 2:
                    expect(world.ctl("update", name, "--policy", _pol(world, WIDE))[0] == 0, "to slot b")
                world.ctl("cp", "-", name + ":/tmp/loop.py", input=_LOOP.encode(), binary=True, check=True)
                p = subprocess.Popen([W.SANDBOXCTL, "--socket", world.daemon.socket, "exec", name, "--",
                                      "python3", "/tmp/loop.py", str(port), "4", *TARGETS],
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE)
                from common import poll
                poll(lambda: world.ctl("exec", name, "--", "test", "-e", "/tmp/loop-ready")[0] == 0, 20, "loop")
                time.sleep(0.7)
                r = world.rpc("sandbox.update", {"name": name, "networkPolicy": NARROW})
                done = time.time()
                expect("result" in r, "update: %s" % r)
                out, err = p.communicate(timeout=60)
                ev = json.loads(out.decode().strip().splitlines()[-1])
                before = [e for e in ev if e[2] < done - 0.5]
                late = [e for e in ev if e[2] > done]
                expect(any(e[0] == "connect" for e in before), "the loop connected before the update: %s" % err)
                expect(not late, "round %d: after the update answered: %s" % (rounds, late[:5]))
    finally:
        _unpriv(world)


test_nothing_of_the_old_policy_passes_once_an_update_answers.timeout = 300
