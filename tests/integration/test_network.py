"""Network policy at the packet level: deny-all, allow-all, and the host
itself never reachable (DESIGN §5.1 rules 2 and 5)."""
import world as W
from common import expect, expect_eq, sandbox, sh

# A connect from inside the sandbox. A refusal (a reset, an ICMP error, no
# route) ends it at once with bash's message naming the error; a packet
# dropped without an answer leaves the SYN to be retried for minutes, so
# `timeout` stops it first with 124 and no message. Which of the two
# happened is what "fails at once" means, whatever the machine's load.
PROBE = "timeout 20 bash -c 'echo hi > /dev/tcp/%s/%d' 2>&1; echo \"rc=$?\""
TIMED_OUT = 124


def _connect(world, name, addr, port):
    """(exit status of the connect, bash's error message) inside the sandbox:
    (0, "") when it connected, (124, "") when it was dropped (timed out)."""
    code, out, err = sh(world, name, PROBE % (addr, port))
    expect_eq(code, 0, "probe script (%s)" % err.strip()[:200])
    lines = out.strip().splitlines()
    expect(lines and lines[-1].startswith("rc="), "probe output:", out)
    return int(lines[-1][3:]), " ".join(lines[:-1]).strip()


def _refused(rc, msg, what):
    """The connect failed with an error from the network stack, not by
    being dropped until it timed out."""
    expect(rc != 0, "%s: the connect succeeded" % what)
    expect(rc != TIMED_OUT and msg, "%s: the connect was dropped (timed out), not refused at once:" % what,
           rc, msg)


def _any_host_listener(world):
    if not hasattr(world, "_any_listener"):
        world._any_listener = world.start_listener("host", "0.0.0.0", W.LISTEN_PORT + 1)
    return world._any_listener


def test_deny_all_connect_fails_at_once(world):
    before = len(world.inet_listener.connections())
    with sandbox(world, "deny", "--deny-all") as name:
        _refused(*_connect(world, name, W.HTTP_ADDR, 80), "deny-all: connect to %s:80" % W.HTTP_ADDR)
        _refused(*_connect(world, name, W.HTTP_ADDR, W.LISTEN_PORT), "deny-all: connect to the listener")
    expect_eq(len(world.inet_listener.connections()), before, "connections seen by the internet")


def test_deny_all_has_only_loopback(world):
    with sandbox(world, "denylo", "--deny-all") as name:
        code, out, _e = sh(world, name, "ls /sys/class/net | tr '\\n' ' '")
        expect_eq(out.split(), ["lo"], "interfaces of a deny-all sandbox")


def test_allow_all_reaches_the_internet(world):
    before = len(world.inet_listener.connections())
    with sandbox(world, "allow", "--allow-all") as name:
        rc, msg = _connect(world, name, W.HTTP_ADDR, W.LISTEN_PORT)
        expect_eq((rc, msg), (0, ""), "allow-all: connect to %s:%d" % (W.HTTP_ADDR, W.LISTEN_PORT))
        code, out, err = sh(world, name, "curl -sS -m 10 -o /dev/null -w '%%{http_code}' http://%s/"
                            % W.HTTP_ADDR)
        expect_eq((code, out), (0, "200"), "allow-all: HTTP GET (%s)" % err.strip()[:200])
    conns = world.inet_listener.connections()
    expect(len(conns) > before, "the internet listener saw no connection")
    # Masqueraded: the internet sees the world host's address, not the pool's.
    expect(conns[-1].startswith(W.HOST_ADDR + ":"), "source address seen upstream:", conns[-1])


def test_host_itself_unreachable_from_allow_all(world):
    anyl = _any_host_listener(world)
    before = (len(world.host_listener.connections()), len(anyl.connections()))
    with sandbox(world, "nohost", "--allow-all") as name:
        code, gw, _e = sh(world, name, "ip route show default | awk '{print $3}'")
        gw = gw.strip()
        targets = [(W.HOST_ADDR, W.LISTEN_PORT), (W.HOST_ADDR, W.LISTEN_PORT + 1)]
        if gw:
            targets.append((gw, W.LISTEN_PORT + 1))
        for addr, port in targets:
            _refused(*_connect(world, name, addr, port), "allow-all: connect to the world host at %s:%d"
                     % (addr, port))
    after = (len(world.host_listener.connections()), len(anyl.connections()))
    expect_eq(after, before, "connections seen by the world host's listeners")


def test_host_itself_unreachable_from_deny_all(world):
    before = len(world.host_listener.connections())
    with sandbox(world, "nohost2", "--deny-all") as name:
        rc, _msg = _connect(world, name, W.HOST_ADDR, W.LISTEN_PORT)
        expect(rc != 0, "deny-all reached the world host")
    expect_eq(len(world.host_listener.connections()), before, "world host listener connections")


def test_two_sandboxes_cannot_reach_each_other(world):
    with sandbox(world, "peer-a", "--allow-all") as a, sandbox(world, "peer-b", "--allow-all") as b:
        code, addr_b, _e = sh(world, b, "ip -4 -o addr show eth0 | awk '{print $4}' | cut -d/ -f1")
        addr_b = addr_b.strip()
        expect(addr_b, "sandbox b has no eth0 address")
        world.ctl("exec", "--detach", b, "--", "timeout", "30", "nc", "-l", "-p", "7100", check=True)
        W.World.wait_until(lambda: ":7100" in sh(world, b, "ss -ltn")[1], 10, "nc to listen in b")
        rc, _msg = _connect(world, b, addr_b, 7100)
        expect_eq(rc, 0, "sandbox b reaching its own listener (the probe itself must work)")
        world.ctl("exec", "--detach", b, "--", "timeout", "30", "nc", "-l", "-p", "7100", check=True)
        W.World.wait_until(lambda: ":7100" in sh(world, b, "ss -ltn")[1], 10, "nc to listen in b")
        rc, _msg = _connect(world, a, addr_b, 7100)
        expect(rc != 0, "sandbox a reached sandbox b at %s" % addr_b)
