"""Live policy changes between any two modes (docs/POLICY.md, Live update):
each of the twelve transitions among allow-all, deny-all, an allowlist and
an allowlist with rules, on a running sandbox, as its user sees it: name
resolution where the new mode allows it, an allowed target reachable, a
denied one refused at once (a custom policy's refusal names the policy), a
long-running command and its output untouched, and established flows that
the new mode denies cut. The same for IPv6 (docs/POLICY.md, IPv6): a mode
with network access gives the sandbox its IPv6 address and route (a session
started under deny-all too) and allows and refuses IPv6 as it does IPv4;
deny-all cuts IPv6 flows and refuses IPv6 at once, its IPv6 gateway
included. Also across a daemon restart after a live change."""
import base64
import json
import os
import re
import signal
import sys
import time

import world as W
from common import expect, expect_eq, poll, sandbox, sh

ALLOWLIST = {"allow": ["api.public.test", "api6.public.test"]}
RULES = {"allow": {"api.public.test": [{"transform": [{"headers": {"x-sandbox-test": "live"}}]}],
                   "api6.public.test": []}}
POOL6 = "fd5b:d0c5:6a1e:"  # the default ipv6Pool
# The IPv6 gateway of each sandbox seen with network access, so deny-all
# can be asked to refuse it too.
_GW6 = {}
MODES = {"allow-all": "allow-all", "deny-all": "deny-all", "allowlist": ALLOWLIST, "rules": RULES}
CLI_FLAGS = {"allow-all": ["--allow-all"], "deny-all": ["--deny-all"]}
FLOW_PORT = W.LISTEN_PORT + 2

# The world's server side of a long flow: accepts and reads until closed.
_HOLD = r'''
import socket, sys, threading
s = socket.socket(socket.AF_INET6 if ":" in sys.argv[1] else socket.AF_INET)
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind((sys.argv[1], int(sys.argv[2]))); s.listen(16)
print("ready", flush=True)
def handle(c):
    while True:
        try:
            if not c.recv(4096):
                break
        except OSError:
            break
    c.close()
while True:
    c, _p = s.accept()
    threading.Thread(target=handle, args=(c,), daemon=True).start()
'''

# Inside the sandbox: one connection sending a line every 100 ms; its log
# says how it ended.
_FLOW = r'''
import socket, sys, time
log = open(sys.argv[3], "w", buffering=1)
s = socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=5)
log.write("connected\n")
try:
    while True:
        s.sendall(b"tick\n")
        time.sleep(0.1)
except OSError as e:
    log.write("broken %d\n" % e.errno)
'''


# Inside the sandbox: ten DNS queries in a row to the IPv6 gateway (more
# than the burst of 6 the kernel's ICMPv6 rate limit lets through), each on
# a connected UDP socket; how each ended and how long it took.
_DNS6 = r'''
import errno, json, socket, sys, time
out = []
for i in range(10):
    s = socket.socket(socket.AF_INET6, socket.SOCK_DGRAM); s.settimeout(2)
    t = time.monotonic()
    try:
        s.connect((sys.argv[1], 53))
        s.send(bytes([0x12, i, 1, 0, 0, 1, 0, 0, 0, 0, 0, 0]) + b"\x03api\x06public\x04test\x00\x00\x1c\x00\x01")
        s.recv(512); r = "answer"
    except socket.timeout:
        r = "timeout"
    except OSError as e:
        r = errno.errorcode.get(e.errno, str(e.errno))
    out.append([r, (time.monotonic() - t) * 1000]); s.close()
print(json.dumps(out))
'''


def _policy_args(world, mode):
    if mode in CLI_FLAGS:
        return CLI_FLAGS[mode]
    import json
    import tempfile
    fd, path = tempfile.mkstemp(prefix="live-", suffix=".json", dir=world.tmp)
    with os.fdopen(fd, "w") as f:
        json.dump(MODES[mode], f)
    return ["--policy", path]


def _resolve(world, name, host):
    """(address or None, seconds)."""
    t = time.monotonic()
    code, out, _e = sh(world, name, "timeout 10 getent ahostsv4 %s | head -1" % host)
    return (out.split()[0] if code == 0 and out.strip() else None), time.monotonic() - t


def _connect(world, name, host, port=W.LISTEN_PORT):
    """(exit status, bash's error message) of a TCP connect from the
    sandbox: (0, "") when it connected, 124 when nothing answered before
    the timeout (a dropped SYN, which TCP retries for minutes)."""
    code, out, _e = sh(world, name, "timeout 20 bash -c 'echo > /dev/tcp/%s/%d' 2>&1" % (host, port))
    return code, out.strip()


def _fails_at_once(code, msg, what):
    """The connect was refused (a reset, an ICMP error, no route: bash names
    the error), not dropped until it timed out. Told by how it failed, not
    by the seconds the exec took, which a loaded machine stretches."""
    expect(code not in (0, 124) and msg, "%s fails at once (refused, not dropped):" % what, code, msg)


def _connect6(world, name, addr, port=W.LISTEN_PORT):
    """(ok, error, ms) of a TCP connect to [addr]:port from the sandbox."""
    from test_policy_rules import connect
    r = connect(world, name, addr, port)
    return r["ok"], r.get("error"), r["ms"]


def _expect_ipv6(world, name, mode):
    """IPv6 as a user of the sandbox sees it under `mode`."""
    if mode == "deny-all":
        ok, err, ms = _connect6(world, name, W.PUB6_API_ADDR)
        expect(not ok and err != "timeout", "deny-all: an IPv6 connect fails at once:", err, ms)
        gw6 = _GW6.get(name)
        if gw6:
            # Fenced: its IPv6 gateway answers nothing, and every query
            # fails at once (not only the first, before ICMPv6 rate limits).
            _c, out, err = world.ctl("exec", name, "--", "python3", "-c", _DNS6, gw6)
            res = json.loads(out.strip().splitlines()[-1]) if out.strip() else None
            expect(res and all(r not in ("answer", "timeout") for r, _ms in res),
                   "deny-all: DNS to the IPv6 gateway %s fails at once, every time:" % gw6, res, err[:200])
        return
    _c, out, _e = sh(world, name, "ip -6 -o addr show dev eth0 scope global; ip -6 route show default; "
                     "cd /proc/sys/net/ipv6/conf/eth0 && cat accept_ra autoconf accept_redirects disable_ipv6")
    addrs = re.findall(r"inet6 ([0-9a-f:]+)/127", out)
    gws = re.findall(r"default via ([0-9a-f:]+) dev eth0", out)
    expect(len(addrs) == 1 and addrs[0].startswith(POOL6) and len(gws) == 1 and gws[0].startswith(POOL6),
           "%s: an IPv6 address of the pool and a default route via eth0:" % mode, out)
    expect("tentative" not in out and "nodad" in out, "%s: the IPv6 address is usable at once (no DAD):" % mode, out)
    host = world.run_in_host(["ip", "-6", "-o", "addr", "show"]).stdout
    expect((" %s/127" % gws[0]) in host, "%s: the host side of the veth has the IPv6 gateway address:" % mode,
           gws[0], host)
    expect_eq(out.split()[-4:], ["0", "0", "0", "0"], "%s: accept_ra, autoconf, accept_redirects, disable_ipv6" % mode)
    _GW6[name] = gws[0]
    code, got, _e = sh(world, name, "timeout 10 getent ahostsv6 api6.public.test | head -1")
    expect_eq(got.split()[:1], [W.PUB6_API_ADDR], "%s: an allowed IPv6 name resolves (AAAA)" % mode)
    ok, err, _ms = _connect6(world, name, W.PUB6_API_ADDR)
    expect(ok, "%s: connect to the allowed name's IPv6 address:" % mode, err)
    if mode == "allow-all":
        before = len(world.pub6_other_listener.connections())
        ok, err, _ms = _connect6(world, name, W.PUB6_OTHER_ADDR)
        expect(ok, "allow-all reaches any public IPv6 address:", err)
        poll(lambda: len(world.pub6_other_listener.connections()) > before, 10,
             "the IPv6 listener of %s to see the connection" % W.PUB6_OTHER_ADDR)
        return
    t = time.monotonic()
    code, got, _e = sh(world, name, "timeout 10 getent ahostsv6 other6.public.test | head -1")
    expect(not got.strip() and time.monotonic() - t < 3, "%s: an IPv6 name not allowed does not resolve, at once:"
           % mode, got)
    ok, err, ms = _connect6(world, name, W.PUB6_OTHER_ADDR)
    expect(not ok and err != "timeout", "%s: a connect to a denied IPv6 address fails at once:" % mode,
           err, ms)


def _logs(world, cmd_id):
    r = world.rpc("command.logs", {"cmdId": cmd_id})
    return base64.b64decode(r["result"]["stdout"]).decode(errors="replace")


def _expect_mode(world, name, mode):
    """What a user of the sandbox sees under `mode`."""
    if mode == "deny-all":
        addr, secs = _resolve(world, name, "api.public.test")
        expect(addr is None and secs < 3, "deny-all resolves nothing, at once:", addr, secs)
        _fails_at_once(*_connect(world, name, W.PUB_API_ADDR), "deny-all: a connect")
        _fails_at_once(*_connect(world, name, W.HTTP_ADDR), "deny-all: a connect to any address")
        _expect_ipv6(world, name, mode)
        return
    _expect_ipv6(world, name, mode)
    addr, _s = _resolve(world, name, "api.public.test")
    expect_eq(addr, W.PUB_API_ADDR, "%s: an allowed name resolves" % mode)
    code, _t = _connect(world, name, "api.public.test")
    expect_eq(code, 0, "%s: connect to the allowed name" % mode)
    if mode == "allow-all":
        addr, _s = _resolve(world, name, "other.public.test")
        expect_eq(addr, W.PUB_OTHER_ADDR, "allow-all resolves any name")
        code, _t = _connect(world, name, W.HTTP_ADDR)
        expect_eq(code, 0, "allow-all reaches any public address")
        return
    addr, secs = _resolve(world, name, "other.public.test")
    expect(addr is None and secs < 3, "%s: a name not allowed does not resolve, at once:" % mode, addr, secs)
    _fails_at_once(*_connect(world, name, W.PUB_OTHER_ADDR), "%s: a connect to a denied address" % mode)
    # HTTP that bypasses the proxy variables is intercepted; the refusal
    # names the host and the policy.
    code, out, err = sh(world, name, "curl -sS -m 5 -D - --noproxy '*' --resolve other.public.test:80:%s "
                        "http://other.public.test/ -o /dev/null" % W.PUB_OTHER_ADDR)
    low = out.lower()
    expect(out.startswith("HTTP/1.1 403") and "x-sandbox-policy:" in low and "other.public.test" in low,
           "%s: a denied host gets the policy's 403:" % mode, out[:300], err[:200])


def _expect_rules_apply(world, name, started):
    """HTTPS to the host with rules: its transform reaches the server when
    the session has a CA (started networked); a session started under
    deny-all has none, and the proxy refuses that host, never passes it
    untransformed."""
    n = len(world.web_log("api"))
    path = "/live-%s" % started
    code, out, err = sh(world, name, "curl -sS -m 10 --noproxy '*' https://api.public.test%s" % path)
    got = [e for e in world.web_log("api")[n:] if e.get("path") == path]
    if started == "deny-all":
        expect(code != 0 and got == [], "rules after a start under deny-all: refused, nothing upstream:", code,
               got, err[:200])
        return
    expect_eq(code, 0, "HTTPS to the host with rules (%s)" % err.strip()[:300])
    hdrs = {k.lower(): v for k, v in got[0].get("headers") or []} if got else {}
    expect_eq(hdrs.get("x-sandbox-test"), "live", "the rule's header at the server")


def _flow_survives(old, new):
    """Whether a flow to api.public.test made under `old` outlives the
    change: the new mode must admit it, and a custom one admits only an
    address its DNS filter pinned (allow-all resolved it elsewhere)."""
    if new == "deny-all":
        return False
    if new == "allow-all":
        return True
    return old in ("allowlist", "rules")


def _transition(world, old, new):
    servers = []
    try:
        for addr in (W.PUB_API_ADDR, W.PUB_OTHER_ADDR, W.PUB6_API_ADDR, W.PUB6_OTHER_ADDR):
            servers.append(world._spawn("live-hold-%s" % addr, "net",
                                        [sys.executable, "-c", _HOLD, addr, str(FLOW_PORT)], ready=True))
        with sandbox(world, "live", *_policy_args(world, old)) as name:
            _expect_mode(world, name, old)
            # A long-running command whose output keeps flowing.
            r = world.rpc("command.run", {"sandbox": name, "cmd": "sh", "detached": True,
                                          "args": ["-c", "i=0; while :; do i=$((i+1)); echo tick $i; "
                                                   "sleep 0.1; done"]})
            ticker = r["result"]["cmdId"]
            flows = {}
            if old != "deny-all":
                world.ctl("cp", "-", name + ":/tmp/flow.py", input=_FLOW.encode(), binary=True, check=True)
                targets = [("api", "api.public.test"), ("api6", "api6.public.test")]
                if old == "allow-all":
                    targets += [("other", "other.public.test"), ("other6", W.PUB6_OTHER_ADDR)]
                for tag, host in targets:
                    world.ctl("exec", "--detach", name, "--", "python3", "/tmp/flow.py", host, str(FLOW_PORT),
                              "/tmp/flow-%s.log" % tag, check=True)
                    flows[tag] = lambda tag=tag: sh(world, name, "cat /tmp/flow-%s.log 2>/dev/null" % tag)[1]
                    poll(lambda f=flows[tag]: "connected" in f(), 10, "the %s flow to connect" % tag)
            before = len(_logs(world, ticker).splitlines())

            if new in CLI_FLAGS:
                code, out, err = world.ctl("update", name, *CLI_FLAGS[new])
            else:
                code, out, err = world.ctl("update", name, *_policy_args(world, new))
            expect_eq(code, 0, "sandboxctl update %s -> %s (%s)" % (old, new, err.strip()))

            # Flows first: a lookup under the new mode would pin the address
            # again and let a cut flow's retry through.
            for tag, f in flows.items():
                if not (_flow_survives(old, new) and tag in ("api", "api6")):
                    ended = poll(lambda f=f: "broken" in f() and f(), 5,
                                 "%s -> %s: the %s flow the new mode denies to be cut" % (old, new, tag))
                    expect("broken" in ended, "the flow was cut:", ended)
            _expect_mode(world, name, new)
            if new == "rules":
                _expect_rules_apply(world, name, old)
            for tag, f in flows.items():
                if _flow_survives(old, new) and tag in ("api", "api6"):
                    expect("broken" not in f(), "%s -> %s: the %s flow keeps running:" % (old, new, tag), f())
            poll(lambda: len(_logs(world, ticker).splitlines()) > before + 3, 10,
                 "the long-running command's output to keep flowing")
            g = world.rpc("command.get", {"cmdId": ticker})["result"]
            expect(g.get("exitCode") is None, "the long-running command still runs:", g)
    finally:
        for srv in servers:
            os.killpg(srv.pid, signal.SIGKILL)
            srv.wait(5)


def test_live_allow_all_to_deny_all(world):
    _transition(world, "allow-all", "deny-all")


def test_live_allow_all_to_allowlist(world):
    _transition(world, "allow-all", "allowlist")


def test_live_allow_all_to_rules(world):
    _transition(world, "allow-all", "rules")


def test_live_deny_all_to_allow_all(world):
    _transition(world, "deny-all", "allow-all")


def test_live_deny_all_to_allowlist(world):
    _transition(world, "deny-all", "allowlist")


def test_live_deny_all_to_rules(world):
    _transition(world, "deny-all", "rules")


def test_live_allowlist_to_allow_all(world):
    _transition(world, "allowlist", "allow-all")


def test_live_allowlist_to_deny_all(world):
    _transition(world, "allowlist", "deny-all")


def test_live_allowlist_to_rules(world):
    _transition(world, "allowlist", "rules")


def test_live_rules_to_allow_all(world):
    _transition(world, "rules", "allow-all")


def test_live_rules_to_deny_all(world):
    _transition(world, "rules", "deny-all")


def test_live_rules_to_allowlist(world):
    _transition(world, "rules", "allowlist")


def test_resolv_conf_names_one_resolver_in_every_mode(world):
    """The resolver the sandbox is given never changes with the mode."""
    with sandbox(world, "resolv", "--deny-all") as name:
        first = sh(world, name, "cat /etc/resolv.conf")[1]
        expect("nameserver " in first, "deny-all names its resolver too:", first)
        for mode in ("allow-all", "allowlist", "deny-all", "rules", "allow-all"):
            code, _o, err = world.ctl("update", name, *_policy_args(world, mode))
            expect_eq(code, 0, "update to %s (%s)" % (mode, err.strip()))
            expect_eq(sh(world, name, "cat /etc/resolv.conf")[1], first, "resolv.conf under %s" % mode)


def test_a_mode_changed_live_is_kept_across_daemon_restarts(world):
    """Live restore adopts the session with the mode it was switched to,
    its veth and its resolv.conf, after SIGTERM and after SIGKILL."""
    from test_restore import _restart
    for how in ("term", "kill"):
        with sandbox(world, "lrst", "--deny-all") as name:
            resolv = sh(world, name, "cat /etc/resolv.conf")[1]
            r = world.rpc("command.run", {"sandbox": name, "cmd": "sh", "detached": True,
                                          "args": ["-c", "while :; do echo tick; sleep 0.1; done"]})
            ticker = r["result"]["cmdId"]
            for mode in ("allowlist", "deny-all", "allow-all", "rules"):
                code, _o, err = world.ctl("update", name, *_policy_args(world, mode))
                expect_eq(code, 0, "update to %s (%s)" % (mode, err.strip()))
                _restart(world, how)
                _expect_mode(world, name, mode)
                expect_eq(sh(world, name, "cat /etc/resolv.conf")[1], resolv,
                          "resolv.conf after a restart (%s) under %s" % (how, mode))
            g = world.rpc("command.get", {"cmdId": ticker})["result"]
            expect(g.get("exitCode") is None, "the command started before the changes still runs:", g)


def _probe_loop(world, name, script):
    r = world.rpc("command.run", {"sandbox": name, "cmd": "bash", "detached": True, "args": ["-c", script]})
    return r["result"]["cmdId"]


def test_rapid_and_concurrent_mode_changes_let_nothing_out_that_no_mode_allows(world):
    """While updates flip the mode back and forth (two clients at once), a
    loop inside keeps trying what none of the modes allows: the host, an
    address no allowed name resolves to, a name no policy allows. None of
    it ever arrives."""
    import threading
    import uuid
    leak_name = "leak-%s.public.test" % uuid.uuid4().hex[:12]
    host_before = len(world.host_listener.connections())
    other_before = len(world.pub_other_listener.connections())
    with sandbox(world, "flip", "--deny-all") as name:
        probe = ("while :; do timeout 1 bash -c 'echo > /dev/tcp/%s/%d' 2>/dev/null; "
                 "timeout 1 bash -c 'echo > /dev/tcp/%s/%d' 2>/dev/null; "
                 "timeout 2 getent ahostsv4 %s >/dev/null; echo probe; done"
                 % (W.HOST_ADDR, W.LISTEN_PORT, W.PUB_OTHER_ADDR, W.LISTEN_PORT, leak_name))
        cmd = _probe_loop(world, name, probe)
        seq = ["allowlist", "deny-all", "rules", "allowlist", "deny-all", "rules", "deny-all"] * 3
        errors = []

        done = threading.Event()

        # Rounds of the sequence until the probe loop has gone round a few
        # times under them (updates take milliseconds, a probe round up to
        # seconds), each round ending in the same mode.
        def flip(modes):
            for m in modes:
                r = world.rpc("sandbox.update", {"name": name, "networkPolicy": MODES[m]})
                if "error" in r:
                    errors.append(r["error"])

        def flip_rounds(modes):
            while not done.is_set():
                flip(modes)

        threads = [threading.Thread(target=flip_rounds, args=(seq,)),
                   threading.Thread(target=flip_rounds, args=(seq[::-1],))]
        for t in threads:
            t.start()
        try:
            poll(lambda: len(_logs(world, cmd).splitlines()) > 3, 120, "the probe loop goes round during the changes")
        finally:
            done.set()
            for t in threads:
                t.join(300)
        expect_eq(errors, [], "errors of the updates")
        # The last word decides: what get says is what is enforced.
        last = world.rpc("sandbox.get", {"name": name})["result"]["networkPolicy"]
        mode = [k for k, v in MODES.items() if v == last][0]
        _expect_mode(world, name, mode)
        expect(len(_logs(world, cmd).splitlines()) > 3, "the probe loop ran during the changes")
        expect_eq(world.pub_other_listener.connections()[other_before:], [],
                  "connections to an address no allowed name resolves to")
        with open(os.path.join(world.tmp, "dnsmasq.log"), errors="replace") as f:
            expect(leak_name not in f.read(), "a name no policy allows reached the upstream resolver")
        # allow-all in the mix: the host stays unreachable whatever the order.
        flip(["allow-all", "deny-all", "allow-all", "allowlist", "allow-all", "deny-all", "allow-all"])
        expect_eq(errors, [], "errors of the updates")
        poll(lambda: len(world.pub_other_listener.connections()) > other_before, 10,
             "the probe to reach the public address under allow-all (so it ran)")
    expect_eq(world.host_listener.connections()[host_before:], [], "connections that reached the host")


def test_a_deny_all_session_started_on_a_full_pool_says_why_it_cannot_get_network(world):
    """Every session holds a pool slot, deny-all too; one that found the pool
    full starts without an address, stays deny-all, and an update that
    would give it network access names the field and the way out."""
    world.stop_sandboxd()
    d = world.start_sandboxd({"networkPool": "10.203.0.0/30"}, tag="pool")
    names = [world.name(t) for t in ("pa", "pb", "pc", "pd")]
    try:
        for n in names[:2]:
            r = d.rpc("sandbox.create", {"name": n, "networkPolicy": "deny-all"}, 120)
            expect("result" in r, "create %s with a free slot:" % n, r)
        r = d.rpc("sandbox.create", {"name": names[2], "networkPolicy": "deny-all"}, 120)
        expect("result" in r, "a deny-all sandbox starts on a full pool:", r)
        r = d.rpc("sandbox.create", {"name": names[3], "networkPolicy": "allow-all"}, 120)
        expect("error" in r and r["error"]["data"].get("reason") == "limit_exceeded",
               "a networked sandbox on a full pool:", r)
        r = d.rpc("sandbox.update", {"name": names[0], "networkPolicy": ALLOWLIST}, 60)
        expect("result" in r, "a deny-all session with a slot gets network:", r)
        r = d.rpc("sandbox.update", {"name": names[2], "networkPolicy": "allow-all"}, 60)
        e = r.get("error") or {}
        expect_eq((e.get("data") or {}).get("field"), "networkPolicy", "field of the refusal (%s)" % r)
        expect("stop the sandbox and start it again" in e.get("message", ""), "the way out:", e.get("message"))
        expect_eq(d.rpc("sandbox.get", {"name": names[2]})["result"]["networkPolicy"], "deny-all",
                  "the refused update changed nothing")
    finally:
        for n in names:
            d.rpc("sandbox.delete", {"name": n}, 120)
        world.stop_sandboxd(d)
        world.start_sandboxd()
