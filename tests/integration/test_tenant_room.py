"""A tenant at its limit is refused before a fork or snapshot copies.

The limits of a tenant (docs/SECURITY.md §4.2) were checked only where the
new sandbox or snapshot is registered, after the capture: a tenant at
maxSandboxes or maxSnapshots had its source frozen and its disk copied in
bytes onto the state filesystem, again for every request it sent, only to
be refused at the end. Now it is refused before the copy begins (the
check at registration still counts for concurrent requests).

The daemon here is the fault build with the capture gated
(capture.working): a copy that began would reach the gate and wait."""
import json
import os
import subprocess
import tempfile

import world as W
from common import expect, expect_eq

NOGROUP = 65534
TENANT = 2001

_CLIENT = r"""
import json, socket, sys
reqs = json.loads(sys.argv[1])
s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
s.settimeout(60)
s.connect("sandboxd.sock")
f = s.makefile("rb")
out = []
for i, r in enumerate(reqs):
    s.sendall(json.dumps(dict(r, jsonrpc="2.0", id=i + 1)).encode() + b"\n")
    while True:
        m = json.loads(f.readline())
        if m.get("id") == i + 1:
            out.append(m)
            break
print(json.dumps(out), flush=True)
"""


def _as(d, reqs):
    p = subprocess.run(["python3", "-c", _CLIENT, json.dumps(reqs)], cwd=d.dir, user=TENANT, group=NOGROUP,
                       extra_groups=[], capture_output=True, text=True, timeout=120)
    expect(p.returncode == 0, "client as uid %d:" % TENANT, p.stdout[-300:], p.stderr[-500:])
    return json.loads(p.stdout.strip().splitlines()[-1])


def test_a_tenant_at_its_limit_is_refused_before_a_fork_or_snapshot_copies(world):
    world.stop_sandboxd()
    d = world.start_sandboxd({"socketGroup": "nogroup", "tenants": {"names": {
        "uid:%d" % TENANT: {"maxSandboxes": 1, "maxSnapshots": 0}}}}, tag="room")
    gate = tempfile.mkdtemp(prefix="gate-", dir=world.tmp)
    name = world.name("room")
    try:
        expect_eq(d.stop(), 0, "sandboxd exit status on SIGTERM (idle)")
        d.start(binary=W.FAULTS_SANDBOXD, env={"SANDBOXD_FAULT_STALL": "capture.working",
                                               "SANDBOXD_FAULT_GATE": gate})
        r = _as(d, [{"method": "sandbox.create", "params": {"name": name, "networkPolicy": "deny-all"}}])[0]
        expect("result" in r, "the tenant's sandbox:", str(r)[:300])
        snap, fork = _as(d, [{"method": "sandbox.snapshot", "params": {"name": name}},
                             {"method": "sandbox.fork", "params": {"sourceSandbox": name,
                                                                  "name": world.name("roomf")}}])
        for what, m, limit in (("snapshot", snap, "maxSnapshots 0"), ("fork", fork, "maxSandboxes 1")):
            err = m.get("error") or {}
            expect_eq((err.get("data") or {}).get("reason"), "limit_exceeded", "%s: %s" % (what, json.dumps(m)[:300]))
            expect(limit in err.get("message", ""), what + " names the limit:", err.get("message"))
        expect(not os.path.exists(os.path.join(gate, "capture.working.reached")),
               "a copy of the source began for a tenant at its limit")
    finally:
        open(os.path.join(gate, "capture.working.open"), "w").close()
        d.rpc("sandbox.delete", {"name": name}, 60)
        world.stop_sandboxd(d)
        world.start_sandboxd()
test_a_tenant_at_its_limit_is_refused_before_a_fork_or_snapshot_copies.timeout = 300
