"""The output budget picks whom to drop by peer (attack2 finding).

Past outputBudgetMiB the daemon dropped the connection whose client had
taken no byte for the longest time. A tenant that holds most of the
budget on connections it reads a little from now and then (a trickle keeps
each one "fresh") made every other client the longest-stalled one: a root
client reading a large answer, one that read less recently than the
attacker's trickle, was disconnected while the tenant kept its queues.
Now the connection dropped is the longest-stalled one of the peer (uid, or
TLS tenant) holding the most queued output."""
import base64
import json
import os
import socket
import subprocess

import world as W
from common import expect

NOGROUP = 65534
TENANT = 2000
FILE_BYTES = 2600 * 1024  # base64 ~3.4 MiB: each answer's queue is 4 MiB as allocated

_ATTACKER = r"""
import json, socket, sys
conns = {}
def rpc1(method, params):
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(120)
    s.connect("sandboxd.sock")
    s.sendall(json.dumps({"jsonrpc": "2.0", "id": 1, "method": method, "params": params}).encode() + b"\n")
    f = s.makefile("rb")
    m = json.loads(f.readline())
    s.close()
    return m
for line in sys.stdin:
    cmd = line.split()
    if cmd[0] == "rpc":
        m = rpc1(cmd[1], json.loads(" ".join(cmd[2:])))
        print(json.dumps(m)[:300], flush=True)
    elif cmd[0] == "open":
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        s.settimeout(120)
        s.connect("sandboxd.sock")
        s.sendall(json.dumps({"jsonrpc": "2.0", "id": 1, "method": "fs.read",
                              "params": {"sandbox": cmd[2], "path": "/workspace/big"}}).encode() + b"\n")
        assert s.recv(1)
        conns[cmd[1]] = s
        print("ok", flush=True)
    elif cmd[0] == "read":
        s, want, got = conns[cmd[1]], int(cmd[2]), 0
        while got < want:
            b = s.recv(min(65536, want - got))
            if not b:
                print("closed", flush=True)
                break
            got += len(b)
        else:
            print("ok", flush=True)
"""


def _victim_open(d, name):
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    s.settimeout(120)
    s.connect(d.socket)
    s.sendall(json.dumps({"jsonrpc": "2.0", "id": 1, "method": "fs.read",
                          "params": {"sandbox": name, "path": "/workspace/big"}}).encode() + b"\n")
    first = s.recv(1)
    expect(first, "the victim's answer begins")
    return s, first


def test_a_tenant_that_holds_the_budget_cannot_get_a_reading_admin_dropped(world):
    world.stop_sandboxd()
    d = world.start_sandboxd({"outputBudgetMiB": 16, "socketGroup": "nogroup"}, tag="budgetpeers")
    att = None
    victim = None
    vname, aname = world.name("budgetv"), world.name("budgeta")
    try:
        content = base64.b64encode(os.urandom(FILE_BYTES)).decode()
        d.ctl("create", "--name", vname, "--deny-all", check=True)
        expect("result" in d.rpc("fs.write", {"sandbox": vname, "files": [{"path": "/workspace/big",
                                                                          "content": content}]}, timeout=120), "fs.write")
        att = subprocess.Popen(["python3", "-c", _ATTACKER], cwd=d.dir, user=TENANT, group=NOGROUP,
                               extra_groups=[], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)

        def say(line):
            att.stdin.write(line + "\n")
            att.stdin.flush()
            return att.stdout.readline().strip()
        r = say("rpc sandbox.create " + json.dumps({"name": aname, "networkPolicy": "deny-all"}))
        expect('"result"' in r, "the tenant's create:", r)
        # Its file, written by root into the tenant's own sandbox (the
        # tenant could as well; this keeps the request line short).
        expect("result" in d.rpc("fs.write", {"sandbox": aname, "files": [{"path": "/workspace/big",
                                                                          "content": content}]}, timeout=120), "fs.write")
        # 4 MiB queued for the tenant, then 4 MiB for the root client.
        expect(say("open a1 " + aname) == "ok", "the tenant's first read")
        victim, head = _victim_open(d, vname)
        # The victim reads (slowly, but it reads) ...
        head += victim.recv(65536)
        # ... and the tenant reads more often: a trickle of its queues.
        expect(say("read a1 1048576") == "ok", "the tenant reads from a1")
        expect(say("open a2 " + aname) == "ok", "the tenant's second read")
        expect(say("read a2 1048576") == "ok", "the tenant reads from a2")
        expect(say("read a1 65536") == "ok", "the tenant reads from a1 again")
        expect(say("open a3 " + aname) == "ok", "the tenant's third read")
        expect(say("read a3 1048576") == "ok", "the tenant reads from a3")
        expect(say("read a1 65536") == "ok", "the tenant reads from a1 again")
        expect(say("read a2 65536") == "ok", "the tenant reads from a2 again")
        # A fourth answer passes the 16 MiB budget: someone is dropped.
        say("open a4 " + aname)
        # The victim, which holds a quarter of the queued output, reads
        # its whole answer.
        f = victim.makefile("rb")
        line = f.readline()
        expect(line.endswith(b"\n"), "the reading root client was dropped for a tenant's queues (%d bytes read)"
               % len(line))
        m = json.loads(head + line)
        expect("result" in m, "the victim's answer:", str(m)[:200])
        with open(d.log_path, "rb") as lf:
            log = lf.read()
        expect(b"passed the output budget" in log, "the budget was passed")
    finally:
        if victim:
            victim.close()
        if att:
            att.stdin.close()
            att.kill()
            att.wait()
        # This daemon's state goes with it: its sessions must not outlive
        # it (they would run on, live-restore style, past every later test).
        for n in (vname, aname):
            d.rpc("sandbox.delete", {"name": n}, 120)
        world.stop_sandboxd(d)
        world.start_sandboxd()
test_a_tenant_that_holds_the_budget_cannot_get_a_reading_admin_dropped.timeout = 300
