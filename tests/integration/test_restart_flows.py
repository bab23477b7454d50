"""A daemon restart (SIGKILL or SIGTERM, then start) keeps the table
`inet sandboxd` the last daemon left when it is intact: the established
flows of a custom-policy sandbox that its policy still allows keep
passing in both directions (no TCP reset), and the rules of
sessions that are gone are removed before the new daemon serves."""
import base64
import json
import os
import re
import signal
import sys

import world as W
from common import expect, expect_eq, poll, sandbox
from test_policy_generations import PORT, _SERVER, _policy_file
from test_policy_rules import connect, dns
from test_restore import _restart


# Inside the sandbox: one TCP connection to the echo server, a round trip
# every millisecond from before the restart (/tmp/rsf-ready after the first) until
# a second after /tmp/rsf-go appears, so packets cross the restart in both
# directions; prints the number of rounds and the first error (or "ok").
_LOOP = r'''
import errno, json, os, socket, sys, time
s = socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=5)
s.settimeout(2.0)
n, err, end = 0, "ok", None
while end is None or time.monotonic() < end:
    msg = b"r%d." % n
    try:
        s.sendall(msg)
        got = b""
        while len(got) < len(msg):
            b = s.recv(4096)
            if not b:
                raise OSError(errno.ECONNABORTED, "closed")
            got += b
        if got != msg:
            err = "wrong"
            break
    except socket.timeout:
        err = "timeout"
        break
    except OSError as e:
        err = errno.errorcode.get(e.errno, str(e.errno))
        break
    n += 1
    if n == 1:
        open("/tmp/rsf-ready", "w").close()
    if end is None and os.path.exists("/tmp/rsf-go"):
        end = time.monotonic() + 1.0
    time.sleep(0.001)
print(json.dumps({"rounds": n, "error": err}))
'''


def _tcp_across_restart(world, how, addr):
    srv = world._spawn("rsf-%s" % addr, "net", [sys.executable, "-c", _SERVER, addr, str(PORT)], ready=True)
    try:
        pol = {"subnets": {"allow": [addr + ("/128" if ":" in addr else "/32")]}}
        with sandbox(world, "rsf", "--policy", _policy_file(world, pol)) as name:
            world.ctl("cp", "-", name + ":/tmp/rsf.py", input=_LOOP.encode(), binary=True, check=True)
            r = world.rpc("command.run", {"sandbox": name, "cmd": "python3", "detached": True,
                                          "args": ["/tmp/rsf.py", addr, str(PORT)]})
            expect("result" in r, "start the client:", r)
            cmd = r["result"]["cmdId"]
            poll(lambda: world.ctl("exec", name, "--", "test", "-e", "/tmp/rsf-ready")[0] == 0, 20,
                 "the client's connection to be established")
            _restart(world, how)
            world.ctl("exec", name, "--", "touch", "/tmp/rsf-go", check=True)
            poll(lambda: world.rpc("command.get", {"cmdId": cmd})["result"].get("exitCode") is not None, 30,
                 "the client to finish")
            logs = world.rpc("command.logs", {"cmdId": cmd})["result"]
            out = base64.b64decode(logs["stdout"]).decode(errors="replace").strip()
            expect(out, "the client's report:", base64.b64decode(logs.get("stderr") or b"").decode()[-500:])
            return json.loads(out.splitlines()[-1])
    finally:
        os.killpg(srv.pid, signal.SIGKILL)
        srv.wait(5)


def test_an_allowed_tcp_flow_of_a_custom_policy_survives_a_sigkill_restart(world):
    for addr in (W.PUB_API_ADDR, W.PUB6_API_ADDR):
        rep = _tcp_across_restart(world, "kill", addr)
        expect_eq(rep["error"], "ok", "the TCP connection to %s across a SIGKILL restart (%r)" % (addr, rep))


def test_an_allowed_tcp_flow_of_a_custom_policy_survives_a_sigterm_restart(world):
    rep = _tcp_across_restart(world, "term", W.PUB_API_ADDR)
    expect_eq(rep["error"], "ok", "the TCP connection across a SIGTERM restart (%r)" % rep)


def _session_objects(world):
    """{interface: [objects]}: session chains, sets and map elements in the table."""
    out = world.run_in_host(["nft", "list", "table", "inet", "sandboxd"], check=True).stdout
    objs = {}
    for kind, ifname, suffix in re.findall(r"(?:chain|set) ([sinr])_(sbx\d+)(_\w+)?\s", out):
        objs.setdefault(ifname, []).append(kind + suffix)
    for ifname in re.findall(r'"(sbx\d+)"', out):
        objs.setdefault(ifname, []).append("element")
    return objs


def test_rules_of_a_session_that_died_while_the_daemon_was_down_are_removed_at_start(world):
    pol = _policy_file(world, {"allow": ["api.public.test"]})
    with sandbox(world, "rsfkeep", "--policy", pol) as keep:
        with sandbox(world, "rsfgone", "--policy", pol) as gone:
            objs_before = _session_objects(world)
            expect(len(objs_before) >= 2, "session objects of both sandboxes:", objs_before)
            gone_pid = world.rpc("sandbox.get", {"name": gone})["result"]["session"]["initPid"]
            keep_pid = world.rpc("sandbox.get", {"name": keep})["result"]["session"]["initPid"]
            d = world.daemon
            os.kill(d.proc.pid, signal.SIGKILL)
            d.proc.wait(10)
            # What the dead session left: its rules, in the kept table.
            os.kill(gone_pid, signal.SIGKILL)

            def dead():
                try:
                    with open("/proc/%d/stat" % gone_pid) as f:
                        return f.read().split(")")[-1].split()[0] in ("Z", "X")
                except FileNotFoundError:
                    return True
            poll(dead, 10, "the session's init to end")
            d.start()
            objs_after = _session_objects(world)
            expect_eq(len(objs_after), 1, "one session's objects after the start (%r, before %r)" %
                      (objs_after, objs_before))
            ifname = list(objs_after)[0]
            expect_eq(sorted(objs_after[ifname]), sorted(objs_before[ifname]),
                      "the adopted session's objects, unchanged in kind")
            expect_eq(world.rpc("sandbox.get", {"name": keep})["result"]["session"]["initPid"], keep_pid,
                      "the kept sandbox is the same session")


def test_a_table_that_cannot_be_cleaned_is_replaced_and_the_sessions_reapplied(world):
    """An element in a session map that names no session interface (not
    the daemon's) makes the cleanup fail: the table is replaced, the
    element is gone and the adopted session's rules are applied again."""
    pol = _policy_file(world, {"allow": ["api.public.test"]})
    with sandbox(world, "rsfbad", "--policy", pol) as name:
        d = world.daemon
        os.kill(d.proc.pid, signal.SIGKILL)
        d.proc.wait(10)
        world.run_in_host(["nft", "add", "element", "inet", "sandboxd", "sessions", '{ "foreign0" : accept }'],
                          check=True)
        d.start()
        out = world.run_in_host(["nft", "list", "table", "inet", "sandboxd"], check=True).stdout
        expect("foreign0" not in out, "the foreign element is gone after the start")
        with open(d.log_path, errors="replace") as f:
            expect("replacing the table" in f.read(), "the daemon says it replaced the table")
        expect_eq(len(_session_objects(world)), 1, "the adopted session's rules are in place")
        expect_eq(dns(world, name, "api.public.test")["addrs"], [W.PUB_API_ADDR], "the allowed name resolves")
        expect(connect(world, name, W.PUB_API_ADDR)["ok"], "the allowed address connects")
        expect(not connect(world, name, W.PUB_OTHER_ADDR)["ok"], "an address the policy does not allow is refused")
