"""Tenants on the Unix socket (docs/SECURITY.md §4): a non-root member of
the socket group is the tenant uid:N (as incus gives each unprivileged user
a project of its own) unless daemon.json tenants.localAdmins names it; root
is admin. A tenant sees, lists, subscribes to and touches only what it
owns; ownership is recorded by the daemon at creation and survives a
restart; tags are labels; daemon.json tenants limits what each may take.

The daemon of this file runs with socketGroup nogroup; its clients are
processes of uids 65534, 2000, 2001 and 4321, all of gid 65534 (nogroup).
"""
import json
import os
import shutil
import subprocess
import tempfile

import world as W
from common import expect, expect_eq

NOGROUP = 65534
ALICE, BOB, CAROL, ADMIN = 65534, 2000, 2001, 4321
DAVE = 2002  # maxDiskMiB alone
ERIN = 2003  # imports and exports, as uid:2000 (BOB) may, and local sources
FRANK = 2004  # imports under maxDiskMiB 24
GATEWAY = 2005  # tenants.gateways: acts as the remote tenants gwa, gwb (roots of their own) and gwc (none)
METRICS_PORT = 19474

_state = {}
_IMPORTS = {"allowRuntimeImport": True, "allowSnapshotImport": True, "allowSnapshotExport": True}

_CLIENT = r"""
import json, socket, sys
reqs = json.loads(sys.argv[1])
s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
s.settimeout(120)
s.connect("sandboxd.sock")
f = s.makefile("rb")
def answer(i):
    while True:
        line = f.readline()
        if not line:
            raise SystemExit("connection closed")
        m = json.loads(line)
        if m.get("id") == i:
            return m
if isinstance(reqs, dict):
    # Events: subscribe, say so, then every event until one of sandbox
    # `wait` (with status `status`, when given).
    s.sendall(b'{"jsonrpc":"2.0","id":1,"method":"events.subscribe","params":{}}\n')
    print(json.dumps({"subscribed": answer(1)}), flush=True)
    events = []
    while True:
        m = json.loads(f.readline())
        if m.get("method") == "event":
            events.append(m["params"])
            if m["params"].get("sandbox") == reqs["wait"] and \
                    m["params"].get("status") == reqs.get("status", m["params"].get("status")):
                break
    print(json.dumps(events), flush=True)
else:
    out = []
    for i, r in enumerate(reqs):
        s.sendall(json.dumps(dict(r, jsonrpc="2.0", id=i + 1)).encode() + b"\n")
        out.append(answer(i + 1))
    print(json.dumps(out), flush=True)
"""

_METRICS = r"""
import os, socket, sys
s = socket.create_connection(("127.0.0.1", int(sys.argv[1])), 10)
s.settimeout(10)
s.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
d = b""
while True:
    b = s.recv(65536)
    if not b:
        break
    d += b
sys.stdout.write(d.decode())
"""


def _setup(world):
    """This file's daemon (started once): nogroup may connect; uid 4321 is a
    local admin; uid:2001 has tight limits, every other tenant none."""
    if _state.get("daemon") and _state["daemon"].alive():
        return _state["daemon"]
    world.stop_sandboxd()  # one daemon per network namespace; the runner restores the default
    extra = {}
    try:
        from test_runtimes import _cache_dir
        extra["runtimeCache"] = _cache_dir()  # the debootstrap trees test_runtimes fills
    except W.Skip:
        pass
    # The remote tenants' own localSourceRoots: existing directories.
    roots = [os.path.join(world.tmp, world.name("roots-gwa")), os.path.join(world.tmp, world.name("roots-gwb"))]
    for r in roots:
        os.makedirs(r, 0o755, exist_ok=True)
    _state["roots"] = roots
    local = dict(_IMPORTS, allowLocalSources=True)
    d = world.start_sandboxd(dict(extra, **{
        "socketGroup": "nogroup",
        "metricsListen": "127.0.0.1:%d" % METRICS_PORT,
        "tenants": {
            "localAdmins": [ADMIN],
            "gateways": [GATEWAY],
            "names": {"uid:%d" % CAROL: {"maxSandboxes": 2, "maxVcpus": 3, "maxSnapshots": 1,
                                          "maxDiskMiB": 1024, "networkModes": ["deny-all", "custom"]},
                      "uid:%d" % DAVE: {"maxDiskMiB": 512},
                      "uid:%d" % BOB: _IMPORTS, "uid:%d" % ERIN: dict(_IMPORTS, maxRuntimes=1, allowLocalSources=True),
                      "uid:%d" % FRANK: dict(_IMPORTS, maxDiskMiB=24),
                      "gwa": dict(local, localSourceRoots=[roots[0]]),
                      "gwb": dict(local, localSourceRoots=[roots[1]]),
                      "gwc": local},
        },
    }), tag="tenants")
    _state["cache"] = extra.get("runtimeCache")
    _state["daemon"] = d
    return d


def _as(d, uid, reqs, timeout=180):
    """Runs the requests on one connection as `uid` (gid nogroup, no
    supplementary groups); returns the answers."""
    p = subprocess.run(["python3", "-c", _CLIENT, json.dumps(reqs)], cwd=d.dir, user=uid, group=NOGROUP,
                       extra_groups=[], capture_output=True, text=True, timeout=timeout)
    expect(p.returncode == 0, "client as uid %d:" % uid, p.stdout[-500:], p.stderr[-800:])
    return json.loads(p.stdout.strip().splitlines()[-1])


def _one(d, uid, method, params=None):
    return _as(d, uid, [{"method": method, "params": params or {}}])[0]


def _ok(d, uid, method, params=None):
    m = _one(d, uid, method, params)
    expect("result" in m, "%s as uid %d:" % (method, uid), json.dumps(m)[:500])
    return m["result"]


def _refused(m, what, reason="permission_denied"):
    err = m.get("error") or {}
    expect_eq((err.get("data") or {}).get("reason"), reason, "%s: %s" % (what, json.dumps(m)[:500]))
    return err.get("message", "")


def _ctl_as(d, uid, *args):
    p = subprocess.run([W.SANDBOXCTL, "--socket", "sandboxd.sock"] + list(args), cwd=d.dir, user=uid,
                       group=NOGROUP, extra_groups=[], capture_output=True, text=True, timeout=120)
    expect(p.returncode == 0, "sandboxctl %s as uid %d:" % (" ".join(args), uid), p.stdout[-300:], p.stderr[-500:])
    return p.stdout


def _names(result):
    return [x["name"] for x in result["sandboxes"]]


def _cleanup(d, names=(), snaps=()):
    """Deletes what a test made, and then everything else this file's daemon
    holds (it serves these tests alone): a create a failing test did not
    expect to succeed must not outlive it, since its session would run on
    past this daemon (live restore) and be left behind for every later test."""
    for n in names:
        if n:
            d.rpc("sandbox.delete", {"name": n})
    for i in snaps:
        d.rpc("snapshot.delete", {"id": i})
    for s in (d.rpc("sandbox.list", {}).get("result") or {}).get("sandboxes", []):
        d.rpc("sandbox.delete", {"name": s["name"]})
    for s in (d.rpc("snapshot.list", {}).get("result") or {}).get("snapshots", []):
        d.rpc("snapshot.delete", {"id": s["id"]})


def test_a_second_local_user_cannot_see_or_touch_the_first_users_sandboxes(world):
    d = _setup(world)
    a, b = world.name("ua"), world.name("ub")
    snaps = []
    try:
        ra = _ok(d, ALICE, "sandbox.create", {"name": a, "tags": {"team": "b"}, "networkPolicy": "deny-all"})
        expect_eq(ra["owner"], "uid:%d" % ALICE, "a local user's sandbox is its own")
        rb = _ok(d, BOB, "sandbox.create", {"name": b, "networkPolicy": "deny-all"})
        expect_eq(rb["owner"], "uid:%d" % BOB, "owner of the second user's")
        snap = _ok(d, ALICE, "sandbox.snapshot", {"name": a})["id"]
        snaps.append(snap)
        cmd = _ok(d, ALICE, "command.run", {"sandbox": a, "cmd": "true"})["cmdId"]
        # The second user: lists only its own, and everything of the first
        # is refused as if it did not exist.
        answers = _as(d, BOB, [{"method": "sandbox.list", "params": {}},
                               {"method": "sandbox.list", "params": {"tags": {"team": "b"}}},
                               {"method": "snapshot.list", "params": {}}])
        expect(all("result" in m for m in answers), "lists as the second user:", answers)
        expect(a not in _names(answers[0]["result"]) and b in _names(answers[0]["result"]), "ls of its own only")
        expect(a not in _names(answers[1]["result"]), "a tag is no key to another's sandbox")
        expect(snap not in [x["id"] for x in answers[2]["result"]["snapshots"]], "snapshot.list of its own only")
        for req in ({"method": "sandbox.get", "params": {"name": a}},
                    {"method": "sandbox.update", "params": {"name": a, "tags": {}}},
                    {"method": "sandbox.delete", "params": {"name": a}},
                    {"method": "sandbox.fork", "params": {"sourceSandbox": a}},
                    {"method": "sandbox.snapshot", "params": {"name": a}},
                    {"method": "command.run", "params": {"sandbox": a, "cmd": "true"}},
                    {"method": "command.logs", "params": {"cmdId": cmd}},
                    {"method": "fs.list", "params": {"sandbox": a, "path": "/"}},
                    {"method": "snapshot.get", "params": {"id": snap}},
                    {"method": "snapshot.delete", "params": {"id": snap}},
                    {"method": "sandbox.create", "params": {"source": {"type": "snapshot", "snapshotId": snap}}},
                    {"method": "events.subscribe", "params": {"sandbox": a}},
                    {"method": "runtime.delete", "params": {"name": "host"}}):
            _refused(_one(d, BOB, req["method"], req["params"]), "%s as the second user" % req["method"])
        msg = _refused(_one(d, BOB, "sandbox.getOrCreate", {"name": a}), "getOrCreate of another's", "already_exists")
        expect(str(ALICE) not in msg, "the refusal does not say whose:", msg)
        # The CLI as the second user: ls and top show its own only.
        out = _ctl_as(d, BOB, "--json", "ls")
        names = [x["name"] for x in json.loads(out)["sandboxes"]] if out.strip().startswith("{") else \
            [x["name"] for x in json.loads(out)]
        expect(b in names and a not in names, "sandboxctl ls as the second user:", out[:300])
        out = _ctl_as(d, BOB, "top", "--json")
        expect(b in out and a not in out, "sandboxctl top as the second user:", out[:300])
        # A local admin and root see both, with their owners.
        for uid in (ADMIN, 0):
            got = {x["name"]: x["owner"] for x in _ok(d, uid, "sandbox.list")["sandboxes"]}
            expect(got.get(a) == "uid:%d" % ALICE and got.get(b) == "uid:%d" % BOB, "uid %d sees both:" % uid, got)
        # The first user's own are intact.
        expect_eq(_ok(d, ALICE, "sandbox.get", {"name": a})["tags"], {"team": "b"}, "its sandbox is untouched")
    finally:
        _cleanup(d, (a, b), snaps)


def test_a_local_tenant_hears_and_scrapes_only_its_own(world):
    d = _setup(world)
    a, b = world.name("ea"), world.name("eb")
    try:
        _ok(d, ALICE, "sandbox.create", {"name": a, "networkPolicy": "deny-all"})
        _ok(d, BOB, "sandbox.create", {"name": b, "networkPolicy": "deny-all"})
        # Metrics (over TCP the peer's groups come from its account: uid
        # 65534's): its own series only, and none of the daemon's requests.
        body = _scrape_as(d, ALICE)
        expect('sandbox="%s"' % a in body, "its own sandbox's series")
        expect('sandbox="%s"' % b not in body, "no series of another tenant's sandbox")
        expect("sandboxd_rpc_requests_total" not in body, "no daemon-wide request counts for a tenant")
        # Nor the disks of others, summed: another tenant's creates and
        # their sizes showed in the committed bytes.
        committed = [l.split()[1] for l in body.splitlines() if l.startswith("sandboxd_storage_committed_bytes ")]
        expect_eq(committed, [str(W.WORLD_DISK_MIB << 20)], "a tenant's committed disk bytes are its own sandbox's")
        body = _scrape_as(d, 0)
        expect('sandbox="%s"' % b in body and "sandboxd_rpc_requests_total" in body, "root sees everything")
        ev = subprocess.Popen(["python3", "-c", _CLIENT, json.dumps({"wait": b, "status": "deleted"})],
                              cwd=d.dir, user=BOB,
                              group=NOGROUP, extra_groups=[], stdout=subprocess.PIPE, text=True)
        try:
            first = json.loads(ev.stdout.readline())
            expect("result" in first["subscribed"], "subscribed:", first)
            _ok(d, 0, "sandbox.stop", {"name": a})  # not persistent: gone once stopped
            _ok(d, 0, "sandbox.delete", {"name": b})
            events = json.loads(ev.communicate(timeout=90)[0].strip().splitlines()[-1])
        finally:
            if ev.poll() is None:
                ev.kill()
                ev.wait()
        seen = {e.get("sandbox") for e in events}
        expect(b in seen and a not in seen and None not in seen, "events of its own only:", events)
        # "deleted" comes once the sandbox has left the registry: its owner
        # still hears it.
        expect(any(e.get("sandbox") == b and e.get("status") == "deleted" for e in events),
               "its own sandbox's deleted event:", events)
    finally:
        _cleanup(d, (a, b))


def _scrape_as(d, uid):
    # Modules first: root's Python library may not be readable after the drop.
    code = "import encodings.idna, os, socket, sys\n" + \
        ("os.setgroups([]); os.setgid(%d); os.setuid(%d)\n" % (NOGROUP, uid) if uid else "") + _METRICS
    p = subprocess.run(["nsenter", "--net=/run/netns/" + d.netns, "python3", "-c", code, str(METRICS_PORT)],
                       capture_output=True, text=True, timeout=30)
    expect(p.stdout.startswith("HTTP/1.1 200"), "scrape as %d: %r %r" % (uid, p.stdout[:200], p.stderr[-300:]))
    return p.stdout


def test_ownership_survives_a_restart(world):
    """The owner is kept in the sandbox's config and the snapshot's record:
    after a restart the first user still owns both and the second sees
    neither; state written before owners existed is admin-owned."""
    d = _setup(world)
    a, old = world.name("ra"), world.name("rold")
    snaps = []
    try:
        _ok(d, ALICE, "sandbox.create", {"name": a, "networkPolicy": "deny-all", "persistent": True})
        _ok(d, ALICE, "sandbox.create", {"name": old, "networkPolicy": "deny-all", "persistent": True})
        snaps.append(_ok(d, ALICE, "sandbox.snapshot", {"name": a})["id"])
        d.stop()
        # A config from before owners existed: no "owner" key.
        conf = os.path.join(d.state_dir, "sandboxes", old, "config.json")
        with open(conf) as f:
            c = json.load(f)
        expect_eq(c.pop("owner", None), "uid:%d" % ALICE, "the owner is kept in the sandbox's config")
        with open(conf, "w") as f:
            json.dump(c, f)
        d.start()
        _refused(_one(d, ALICE, "sandbox.get", {"name": old}), "a config without an owner is admin-owned")
        expect(_ok(d, 0, "sandbox.get", {"name": old})["owner"] is None, "admin-owned, owner null")
        expect_eq(_ok(d, ALICE, "sandbox.get", {"name": a})["owner"], "uid:%d" % ALICE, "owner after restart")
        expect_eq(_ok(d, ALICE, "snapshot.get", {"id": snaps[0]})["owner"], "uid:%d" % ALICE, "snapshot owner")
        _refused(_one(d, BOB, "sandbox.get", {"name": a}), "the second user after a restart")
        expect(a not in _names(_ok(d, BOB, "sandbox.list")), "not listed to the second user after a restart")
    finally:
        _cleanup(d, (a, old), snaps)


def test_tenant_limits_name_the_limit_and_the_tenant(world):
    d = _setup(world)
    carol = "uid:%d" % CAROL
    made, snaps = [], []
    try:
        # Network modes: allow-all is not among uid:2001's.
        msg = _refused(_one(d, CAROL, "sandbox.create", {"networkPolicy": "allow-all"}), "allow-all for uid:2001")
        expect("networkModes" in msg and carol in msg, "names the limit and the tenant:", msg)
        # userns false: never by default.
        msg = _refused(_one(d, ALICE, "sandbox.create", {"userns": False}), "userns false for a local tenant")
        expect("allowNoUserns" in msg and "uid:%d" % ALICE in msg, "names the limit and the tenant:", msg)
        # Local sources: not by default, though localSourceRoots has them.
        msg = _refused(_one(d, ALICE, "sandbox.create", {"networkPolicy": "deny-all", "source": {
            "type": "tarball", "path": os.path.join(world.tmp, "x.tgz")}}), "a host path source")
        expect("allowLocalSources" in msg, "names the limit:", msg)
        # Disk: a tenant under maxDiskMiB needs a bounded disk within it.
        msg = _refused(_one(d, CAROL, "sandbox.create", {"networkPolicy": "deny-all",
                                                         "resources": {"diskMiB": 2048}}),
                       "a 2 GiB disk over maxDiskMiB 1024", "limit_exceeded")
        expect("maxDiskMiB" in msg and carol in msg, "names the limit and the tenant:", msg)
        # vCPUs: 3 in all.
        msg = _refused(_one(d, CAROL, "sandbox.create", {"networkPolicy": "deny-all",
                                                         "resources": {"vcpus": 4, "diskMiB": 256}}),
                       "4 vCPUs over maxVcpus 3", "limit_exceeded")
        expect("maxVcpus" in msg and carol in msg, "names the limit and the tenant:", msg)
        r = _ok(d, CAROL, "sandbox.create", {"networkPolicy": "deny-all", "resources": {"vcpus": 2, "diskMiB": 256}})
        made.append(r["name"])
        msg = _refused(_one(d, CAROL, "sandbox.update", {"name": r["name"], "networkPolicy": "allow-all"}),
                       "update to allow-all")
        expect("networkModes" in msg, "names the limit:", msg)
        r2 = _ok(d, CAROL, "sandbox.create", {"networkPolicy": "deny-all", "resources": {"vcpus": 1, "diskMiB": 256}})
        made.append(r2["name"])
        # Sandboxes: 2. A fork counts as one more.
        msg = _refused(_one(d, CAROL, "sandbox.create", {"networkPolicy": "deny-all",
                                                         "resources": {"diskMiB": 256}}),
                       "a third sandbox over maxSandboxes 2", "limit_exceeded")
        expect("maxSandboxes" in msg and carol in msg, "names the limit and the tenant:", msg)
        _refused(_one(d, CAROL, "sandbox.fork", {"sourceSandbox": r["name"]}), "a fork over maxSandboxes",
                 "limit_exceeded")
        # Snapshots: 1.
        snaps.append(_ok(d, CAROL, "sandbox.snapshot", {"name": r["name"]})["id"])
        msg = _refused(_one(d, CAROL, "sandbox.snapshot", {"name": r["name"]}), "a second snapshot",
                       "limit_exceeded")
        expect("maxSnapshots" in msg and carol in msg, "names the limit and the tenant:", msg)
        # Another tenant is not bound by uid:2001's limits; admin by none.
        r3 = _ok(d, BOB, "sandbox.create", {"networkPolicy": "allow-all"})
        made.append(r3["name"])
    finally:
        _cleanup(d, made, snaps)


def test_snapshots_count_against_the_tenants_disk_limit(world):
    """A snapshot holds up to its source's disk on the state filesystem: with
    maxDiskMiB and no maxSnapshots, snapshot after snapshot of one sandbox
    filled the host's disk (five of a 256 MiB sandbox under a 256 MiB
    limit). Each snapshot now counts its source's diskMiB against the
    limit, with the tenant's sandboxes, and a refusal names the limit."""
    d = _setup(world)
    made, snaps = [], []
    try:
        r = _ok(d, DAVE, "sandbox.create", {"networkPolicy": "deny-all", "resources": {"diskMiB": 256}})
        made.append(r["name"])
        snaps.append(_ok(d, DAVE, "sandbox.snapshot", {"name": r["name"]})["id"])
        msg = _refused(_one(d, DAVE, "sandbox.snapshot", {"name": r["name"]}),
                       "a snapshot past maxDiskMiB 512", "limit_exceeded")
        expect("maxDiskMiB" in msg and "uid:%d" % DAVE in msg, "names the limit and the tenant:", msg)
        msg = _refused(_one(d, DAVE, "sandbox.create", {"networkPolicy": "deny-all", "resources": {"diskMiB": 256}}),
                       "a sandbox past maxDiskMiB with a snapshot held", "limit_exceeded")
        expect("maxDiskMiB" in msg, "names the limit:", msg)
        d.rpc("snapshot.delete", {"id": snaps.pop()})
        snaps.append(_ok(d, DAVE, "sandbox.snapshot", {"name": r["name"]})["id"])
    finally:
        _cleanup(d, made, snaps)


def test_a_local_tenant_cannot_take_every_event_subscription(world):
    """A local tenant is capped as a remote client is: 16 subscriptions on
    one connection (and tenants with TLS clients 192 of the daemon's 256),
    so root can always subscribe."""
    d = _setup(world)
    answers = _as(d, ALICE, [{"method": "events.subscribe", "params": {}}] * 17)
    expect(all("result" in m for m in answers[:16]), "16 subscriptions:", answers[:16])
    msg = _refused(answers[16], "the 17th on one tenant connection", "limit_exceeded")
    expect("per connection" in msg, "names the limit:", msg)
    expect("result" in d.rpc("events.subscribe", {}), "root subscribes")


def _runtime_names(d, uid):
    return {r["name"]: r for r in _ok(d, uid, "runtime.list")["runtimes"]}


def test_a_tenants_runtime_is_its_own_and_shared_runtimes_stay_everyones(world):
    """runtime.import as a tenant with allowRuntimeImport: the runtime is
    recorded as its own (kept across a restart); another tenant neither
    lists, uses nor deletes it, each answered as for a missing runtime, and
    a name taken by another is refused without saying whose. Admin-owned
    runtimes (host, an admin's import) stay listed and usable for every
    tenant, and no tenant deletes them."""
    from test_runtimes import _tiny_rootfs_tar
    d = _setup(world)
    rt, shared, missing = world.name("trt"), world.name("tshared"), world.name("tnone")
    erin_rt = world.name("terin")
    path = os.path.join(world.tmp, rt + ".tar.gz")
    with open(path, "wb") as f:
        f.write(_tiny_rootfs_tar(rt))
    made = []
    try:
        got = _ok(d, BOB, "runtime.import", {"name": rt, "path": path})
        expect_eq(got["owner"], "uid:%d" % BOB, "a tenant's import is its own")
        expect("result" in d.rpc("runtime.import", {"name": shared, "path": path}), "admin imports a shared one")
        # Lists: the owner and admin see it, another tenant does not; the
        # shared ones are everyone's.
        expect(rt in _runtime_names(d, BOB) and shared in _runtime_names(d, BOB), "the owner's list")
        erin = _runtime_names(d, ERIN)
        expect(rt not in erin and shared in erin and "host" in erin, "another tenant's list:", sorted(erin))
        expect_eq(_runtime_names(d, 0)[rt]["owner"], "uid:%d" % BOB, "admin sees the owner")
        expect(_runtime_names(d, 0)[shared]["owner"] is None, "an admin import is admin-owned")
        expect("path" not in erin[shared]["source"] and _runtime_names(d, 0)[shared]["source"]["path"] == path,
               "a shared runtime's host path shows to admin only:", erin[shared])
        # Use: the owner creates on it; another tenant gets what a missing
        # runtime gets.
        r = _ok(d, BOB, "sandbox.create", {"networkPolicy": "deny-all", "runtime": rt})
        made.append(r["name"])
        other = _one(d, ERIN, "sandbox.create", {"networkPolicy": "deny-all", "runtime": rt})
        none = _one(d, ERIN, "sandbox.create", {"networkPolicy": "deny-all", "runtime": missing})
        _refused(other, "create on another tenant's runtime", "not_found")
        expect_eq(other["error"]["message"].replace(rt, "X"), none["error"]["message"].replace(missing, "X"),
                  "another's runtime answers as a missing one")
        r2 = _ok(d, ERIN, "sandbox.create", {"networkPolicy": "deny-all", "runtime": shared})
        made.append(r2["name"])
        # maxRuntimes: uid:2003 may hold one.
        _ok(d, ERIN, "runtime.import", {"name": erin_rt, "path": path})
        msg = _refused(_one(d, ERIN, "runtime.import", {"name": missing, "path": path}), "a second runtime",
                       "limit_exceeded")
        expect("maxRuntimes" in msg and "uid:%d" % ERIN in msg, "names the limit and the tenant:", msg)
        _ok(d, ERIN, "runtime.delete", {"name": erin_rt})
        # Names: one name space, the refusal says nothing of whose.
        msg = _refused(_one(d, ERIN, "runtime.import", {"name": rt, "path": path}), "a name another tenant holds",
                       "already_exists")
        expect(str(BOB) not in msg and "pick another name" in msg, "says that it is taken, not by whom:", msg)
        # Delete: another tenant's is refused as a missing one; a shared
        # one (host, admin's) by no tenant.
        other = _refused(_one(d, ERIN, "runtime.delete", {"name": rt}), "delete of another tenant's runtime")
        none = _refused(_one(d, ERIN, "runtime.delete", {"name": missing}), "delete of a missing runtime")
        expect_eq(other.replace(rt, "X"), none.replace(missing, "X"), "another's runtime answers as a missing one")
        for name in (shared, "host"):
            msg = _refused(_one(d, BOB, "runtime.delete", {"name": name}), "a tenant deletes %s" % name)
            expect("admin" in msg and "uid:%d" % BOB in msg, "says why and names the tenant:", msg)
        # In use: not deleted, and the refusal names only its own users.
        msg = _refused(_one(d, BOB, "runtime.delete", {"name": rt}), "a runtime in use", "in_use")
        expect(made[0] in msg, "names the owner's sandbox:", msg)
        _cleanup(d, made)
        made = []
        # Kept across a restart.
        d.stop()
        d.start()
        expect_eq(_runtime_names(d, BOB).get(rt, {}).get("owner"), "uid:%d" % BOB, "owner after a restart")
        expect(rt not in _runtime_names(d, ERIN), "still hidden from another tenant after a restart")
        _ok(d, BOB, "runtime.delete", {"name": rt})
        expect(rt not in _runtime_names(d, 0), "the owner deleted it")
    finally:
        _cleanup(d, made)
        for name in (rt, shared, erin_rt, missing):
            d.rpc("runtime.delete", {"name": name})
        os.unlink(path)


def test_imports_and_exports_are_permissions_confined_to_local_source_roots(world):
    """runtime.import, runtime.bootstrap, snapshot.import and snapshot.export
    are off for a tenant unless its limits allow them, the refusal naming
    the limit and the tenant. With them, every host path is confined like a
    local source: under localSourceRoots, never through a symlink or '..';
    nothing is read or written outside (a path outside, a symlinked
    directory pointing out, '..' out of a root). An export belongs to the
    local tenant and an import is its importer's."""
    d = _setup(world)
    alice = "uid:%d" % ALICE
    outside = tempfile.mkdtemp(prefix="sbx-tenant-out-", dir="/var/tmp")  # not under any root
    os.chmod(outside, 0o755)
    link = os.path.join(world.tmp, world.name("outlink"))
    os.symlink(outside, link)
    secret = os.path.join(outside, "secret.tar")
    with open(secret, "wb") as f:
        f.write(b"\0" * 1024)
    made, snaps = [], []
    try:
        # Off by default.
        for method, params, limit in (
                ("runtime.import", {"name": world.name("x"), "path": secret}, "allowRuntimeImport"),
                ("runtime.bootstrap", {"name": world.name("x")}, "allowRuntimeImport"),
                ("snapshot.import", {"path": secret}, "allowSnapshotImport")):
            msg = _refused(_one(d, ALICE, method, params), "%s as a tenant without %s" % (method, limit))
            expect(limit in msg and alice in msg, "names the limit and the tenant:", msg)
        r = _ok(d, BOB, "sandbox.create", {"networkPolicy": "deny-all"})
        made.append(r["name"])
        snap = _ok(d, BOB, "sandbox.snapshot", {"name": r["name"]})["id"]
        snaps.append(snap)
        a = _ok(d, ALICE, "sandbox.create", {"networkPolicy": "deny-all"})
        made.append(a["name"])
        asnap = _ok(d, ALICE, "sandbox.snapshot", {"name": a["name"]})["id"]
        snaps.append(asnap)
        msg = _refused(_one(d, ALICE, "snapshot.export", {"id": asnap, "path": os.path.join(world.tmp, "a.tar")}),
                       "export without allowSnapshotExport")
        expect("allowSnapshotExport" in msg and alice in msg, "names the limit and the tenant:", msg)
        # Another tenant's snapshot: as a missing one.
        _refused(_one(d, ERIN, "snapshot.export", {"id": snap, "path": os.path.join(world.tmp, "e.tar")}),
                 "export of another tenant's snapshot")
        # Bootstrap from a mirror of the tenant's choosing: refused.
        msg = _refused(_one(d, BOB, "runtime.bootstrap", {"name": world.name("x"),
                                                          "mirror": "http://deb.example/debian"}), "a tenant's mirror")
        expect("mirror" in msg, "names the field:", msg)
        # Confinement: outside the roots, through a symlink, with '..'.
        for path in (secret, os.path.join(link, "secret.tar"),
                     os.path.join(world.tmp, "..", os.path.relpath(secret, "/"))):
            for method, params in (("runtime.import", {"name": world.name("x"), "path": path}),
                                   ("snapshot.import", {"path": path})):
                m = _one(d, BOB, method, params)
                msg = (m.get("error") or {}).get("message", "")
                expect(any(w in msg for w in ("localSourceRoots", "symlink", "'..'")),
                       "%s of %s refused as outside the roots:" % (method, path), json.dumps(m)[:400])
        for path in (os.path.join(outside, "x.tar"), os.path.join(link, "x.tar"),
                     os.path.join(world.tmp, "..", os.path.relpath(outside, "/"), "y.tar")):
            m = _one(d, BOB, "snapshot.export", {"id": snap, "path": path})
            msg = (m.get("error") or {}).get("message", "")
            expect(any(w in msg for w in ("localSourceRoots", "symlink", "'..'")),
                   "export to %s refused as outside the roots:" % path, json.dumps(m)[:400])
        expect_eq(sorted(os.listdir(outside)), ["secret.tar"], "nothing written outside the roots")
        # Within the roots, in a directory the tenant may write: exported as
        # the tenant's file, imported as its own.
        bdir = os.path.join(world.tmp, world.name("bdir"))
        os.mkdir(bdir, 0o755)
        os.chown(bdir, BOB, NOGROUP)
        out = os.path.join(bdir, world.name("bexp") + ".tar")
        got = _ok(d, BOB, "snapshot.export", {"id": snap, "path": out})
        expect(got["bytes"] > 0 and os.stat(out).st_uid == BOB, "the export belongs to the local tenant")
        m = _one(d, BOB, "snapshot.export", {"id": snap, "path": out})
        expect((m.get("error") or {}).get("code") == -32602 and "exists" in m["error"]["message"],
               "a file there is never replaced:", json.dumps(m)[:300])
        os.chmod(out, 0o644)  # its owner lets others read it
        imp = _ok(d, ERIN, "snapshot.import", {"path": out})
        snaps.append(imp["id"])
        expect_eq(imp["owner"], "uid:%d" % ERIN, "an import is its importer's")
        expect(imp["id"] not in [x["id"] for x in _ok(d, BOB, "snapshot.list")["snapshots"]],
               "not listed to another tenant")
        os.unlink(out)
    finally:
        _cleanup(d, made, snaps)
        os.unlink(link)
        shutil.rmtree(outside)
        shutil.rmtree(os.path.join(world.tmp, "bdir"), ignore_errors=True)


def _gw(d, tenant, reqs):
    """Runs the requests on one gateway connection acting as the remote
    tenant `tenant` (session.actAs); returns their answers."""
    out = _as(d, GATEWAY, [{"method": "session.actAs", "params": {"tenant": tenant}}] + reqs)
    expect("result" in out[0], "session.actAs %s:" % tenant, json.dumps(out[0])[:300])
    return out[1:]


def _gw_ok(d, tenant, method, params=None):
    m, = _gw(d, tenant, [{"method": method, "params": params or {}}])
    expect("result" in m, "%s as %s:" % (method, tenant), json.dumps(m)[:500])
    return m["result"]


def test_remote_tenants_host_paths_are_each_beneath_their_own_roots(world):
    """Issue #25: remote tenants (TLS, a gateway's session.actAs) have no
    host identity, and all shared daemon.json localSourceRoots with the
    daemon's root access: tenant B imported tenant A's export (root's,
    0600) by name, and the "exists" refusal of an export told B which names
    A had used. Now a remote tenant's host paths lie beneath its own
    tenants.names.NAME.localSourceRoots: B is refused A's directory as
    outside its roots, the same for a file that is there and one that is
    not, and writes nothing there; a remote tenant without roots of its
    own has no host paths, the refusal naming the key to set."""
    d = _setup(world)
    ra, rb = _state["roots"]
    made, snaps = [], []
    try:
        for t in ("gwa", "gwb"):
            made.append(_gw_ok(d, t, "sandbox.create", {"networkPolicy": "deny-all"})["name"])
            snaps.append(_gw_ok(d, t, "sandbox.snapshot", {"name": made[-1]})["id"])
        asnap, bsnap = snaps
        aexp, bexp = os.path.join(ra, "a.tar"), os.path.join(rb, "b.tar")
        expect(_gw_ok(d, "gwa", "snapshot.export", {"id": asnap, "path": aexp})["bytes"] > 0, "gwa exports")
        expect(_gw_ok(d, "gwb", "snapshot.export", {"id": bsnap, "path": bexp})["bytes"] > 0, "gwb exports")
        # Its own roots: its own export imports, as its own.
        imp = _gw_ok(d, "gwa", "snapshot.import", {"path": aexp})
        snaps.append(imp["id"])
        expect_eq(imp["owner"], "gwa", "an import is its importer's")
        # Another's: refused as outside its roots, a file there or not alike.
        for me, other_root, there in (("gwb", ra, aexp), ("gwa", rb, bexp)):
            missing = os.path.join(other_root, "none.tar")
            for method, params in (("snapshot.import", {}), ("runtime.import", {"name": world.name("rt")})):
                got = _gw(d, me, [{"method": method, "params": dict(params, path=there)},
                                  {"method": method, "params": dict(params, path=missing)}])
                msgs = [(m.get("error") or {}).get("message", "") for m in got]
                expect(all("result" not in m for m in got), "%s of another tenant's file refused:" % method,
                       json.dumps(got)[:500])
                expect("not under a directory listed in localSourceRoots" in msgs[0],
                       "refused as outside its roots:", msgs[0])
                expect_eq(msgs[0].replace(there, "X"), msgs[1].replace(missing, "X"),
                          "%s: a file that is there answers as one that is not" % method)
            mine = bsnap if me == "gwb" else asnap
            got = _gw(d, me, [{"method": "snapshot.export", "params": {"id": mine, "path": there}},
                              {"method": "snapshot.export", "params": {"id": mine, "path": missing}}])
            msgs = [(m.get("error") or {}).get("message", "") for m in got]
            expect("exists" not in msgs[0] and "not under a directory listed in localSourceRoots" in msgs[0],
                   "an export into another's roots does not say what is there:", msgs[0])
            expect_eq(msgs[0].replace(there, "X"), msgs[1].replace(missing, "X"), "export: the same either way")
        expect_eq(sorted(os.listdir(ra)), ["a.tar"], "nothing written in gwa's roots by gwb")
        expect_eq(sorted(os.listdir(rb)), ["b.tar"], "nothing written in gwb's roots by gwa")
        # No roots of its own: no host paths at all, naming the key.
        c = _gw_ok(d, "gwc", "sandbox.create", {"networkPolicy": "deny-all"})["name"]
        made.append(c)
        csnap = _gw_ok(d, "gwc", "sandbox.snapshot", {"name": c})["id"]
        snaps.append(csnap)
        for method, params in (("snapshot.import", {"path": aexp}),
                               ("runtime.import", {"name": world.name("rt"), "path": aexp}),
                               ("snapshot.export", {"id": csnap, "path": os.path.join(world.tmp, "c.tar")}),
                               ("sandbox.create", {"networkPolicy": "deny-all",
                                                   "source": {"type": "tarball", "path": aexp}})):
            m, = _gw(d, "gwc", [{"method": method, "params": params}])
            msg = _refused(m, "%s by a remote tenant without roots" % method)
            expect("tenants.names.gwc.localSourceRoots" in msg, "names the key to set:", msg)
        expect(not os.path.exists(os.path.join(world.tmp, "c.tar")), "nothing exported")
    finally:
        _cleanup(d, made, snaps)
        for p in (os.path.join(ra, "a.tar"), os.path.join(rb, "b.tar")):
            if os.path.exists(p):
                os.unlink(p)


def test_a_local_tenant_reads_and_writes_host_paths_only_as_its_own_uid(world):
    """A local tenant's host paths are opened with its own uid, gid and
    groups (SO_PEERCRED, SO_PEERGROUPS), not the daemon's root: it imports
    only what it could read itself and exports only where it could create
    a file itself. Found: uid:2003 imported the export uid:2000 had just
    made (mode 0600, uid:2000's: its snapshot's files, secrets included)
    and a root-only file under the root, and exported into a directory of
    uid:2000's and into the root's own directory, none of which it may
    read or write."""
    from test_runtimes import _tiny_rootfs_tar
    d = _setup(world)
    bdir = os.path.join(world.tmp, world.name("bpriv"))
    os.mkdir(bdir, 0o755)
    os.chown(bdir, BOB, NOGROUP)
    rootonly = os.path.join(world.tmp, world.name("rootonly") + ".tar")
    with open(rootonly, "wb") as f:
        f.write(_tiny_rootfs_tar("x"))
    os.chmod(rootonly, 0o600)
    made, snaps, rts = [], [], []
    try:
        r = _ok(d, BOB, "sandbox.create", {"networkPolicy": "deny-all"})
        made.append(r["name"])
        _ok(d, BOB, "fs.write", {"sandbox": r["name"], "files": [{"path": "/workspace/secret",
                                                                  "content": "Ym9iJ3Mgc2VjcmV0"}]})
        snap = _ok(d, BOB, "sandbox.snapshot", {"name": r["name"]})["id"]
        snaps.append(snap)
        out = os.path.join(bdir, "mine.tar")
        _ok(d, BOB, "snapshot.export", {"id": snap, "path": out})
        expect_eq((os.stat(out).st_uid, os.stat(out).st_mode & 0o777), (BOB, 0o600), "the export is BOB's, 0600")
        # Reading what it may not read: refused, nothing made.
        before = {x["id"] for x in _ok(d, 0, "snapshot.list")["snapshots"]}
        for path in (out, rootonly):
            m = _one(d, ERIN, "snapshot.import", {"path": path})
            expect("error" in m and "ermission denied" in m["error"]["message"],
                   "snapshot.import of %s (not readable by uid %d):" % (path, ERIN), json.dumps(m)[:400])
            name = world.name("steal")
            m = _one(d, ERIN, "runtime.import", {"name": name, "path": path})
            rts.append(name)
            expect("error" in m and "ermission denied" in m["error"]["message"],
                   "runtime.import of %s (not readable by uid %d):" % (path, ERIN), json.dumps(m)[:400])
        expect_eq({x["id"] for x in _ok(d, 0, "snapshot.list")["snapshots"]}, before, "no snapshot imported")
        expect(not any(n in _runtime_names(d, 0) for n in rts), "no runtime imported")
        # A local source (allowLocalSources) the same: read as the tenant.
        for path in (out, rootonly):
            m = _one(d, ERIN, "sandbox.create", {"networkPolicy": "deny-all",
                                                 "source": {"type": "tarball", "path": path}})
            if "result" in m:
                made.append(m["result"]["name"])
            expect("error" in m and "ermission denied" in m["error"]["message"],
                   "a source at %s (not readable by uid %d):" % (path, ERIN), json.dumps(m)[:400])
        os.chmod(rootonly, 0o644)
        m = _ok(d, ERIN, "sandbox.create", {"networkPolicy": "deny-all", "source": {"type": "tarball",
                                                                                    "path": rootonly}})
        made.append(m["name"])
        # Writing where it may not write: refused, nothing made.
        esnap = None
        e = _ok(d, ERIN, "sandbox.create", {"networkPolicy": "deny-all"})
        made.append(e["name"])
        esnap = _ok(d, ERIN, "sandbox.snapshot", {"name": e["name"]})["id"]
        snaps.append(esnap)
        for path in (os.path.join(bdir, "planted.tar"), os.path.join(world.tmp, world.name("planted") + ".tar")):
            m = _one(d, ERIN, "snapshot.export", {"id": esnap, "path": path})
            expect("error" in m and "ermission denied" in m["error"]["message"],
                   "export to %s (not writable by uid %d):" % (path, ERIN), json.dumps(m)[:400])
            expect(not os.path.exists(path), "nothing written at", path)
        expect_eq(sorted(os.listdir(bdir)), ["mine.tar"], "nothing planted in BOB's directory")
        # A shared drop directory (sticky, as /tmp): the export's clean-up
        # of hidden files an interrupted export left removes the
        # exporter's own only (found: it removed another user's file of
        # that name, which the exporter could not have removed itself).
        drop = os.path.join(bdir, "drop")
        os.mkdir(drop)
        os.chmod(drop, 0o1777)
        bobs = os.path.join(drop, ".shared.tar.export-0123456789abcdef")
        with open(bobs, "wb") as f:
            f.write(b"bob's")
        os.chown(bobs, BOB, NOGROUP)
        erins = os.path.join(drop, ".shared.tar.export-fedcba9876543210")
        with open(erins, "wb") as f:
            f.write(b"erin's leftover")
        os.chown(erins, ERIN, NOGROUP)
        _ok(d, ERIN, "snapshot.export", {"id": esnap, "path": os.path.join(drop, "shared.tar")})
        expect(os.path.exists(bobs), "another user's file in a sticky directory is kept")
        expect(not os.path.exists(erins), "the exporter's own leftover is removed")
        # The owner's own file stays its to import.
        imp = _ok(d, BOB, "snapshot.import", {"path": out})
        snaps.append(imp["id"])
        # Odd bytes in a name: a file like any, and never a line of the
        # daemon's log of its own (found: the path was logged raw).
        forged = "x\n<0>sandboxd: forged by a tenant\n.tar"
        odd = os.path.join(bdir, forged)
        _ok(d, BOB, "snapshot.export", {"id": snap, "path": odd})
        expect(os.stat(odd).st_uid == BOB, "exported under the odd name")
        imp = _ok(d, BOB, "snapshot.import", {"path": odd})
        snaps.append(imp["id"])
        m = _one(d, BOB, "runtime.import", {"name": world.name("odd"), "path": odd + "\n<0>sandboxd: forged again"})
        expect("error" in m, "a missing file with odd bytes is refused:", json.dumps(m)[:300])
        with open(d.log_path, "rb") as f:
            forged_lines = [l for l in f.read().splitlines() if l.startswith(b"<0>sandboxd: forged")]
        expect_eq(forged_lines, [], "no log line forged by a tenant's path")
    finally:
        _cleanup(d, made, snaps)
        for n in rts:
            d.rpc("runtime.delete", {"name": n})
        shutil.rmtree(bdir, ignore_errors=True)
        os.unlink(rootonly)


def _filler_tar(path, mib):
    """A gzip tarball of one file of `mib` MiB of zeros (a few KiB packed)."""
    import io
    import tarfile
    with tarfile.open(path, "w:gz") as t:
        ti = tarfile.TarInfo("./filler")
        ti.size, ti.mode = mib << 20, 0o644
        t.addfile(ti, io.BytesIO(b"\0" * (mib << 20)))
    os.chmod(path, 0o644)


def test_imported_runtimes_count_against_the_tenants_disk_limit(world):
    """An imported runtime's tree lies on the state filesystem like a
    snapshot's layers: under maxDiskMiB it unpacks at most what the tenant
    has left, and counts with its sandboxes' disks and its snapshots'.
    Found: a tenant with maxDiskMiB 24 imported a 30 MiB runtime, and any
    number more, each up to maxSourceBytes (4 GiB), none of it counted."""
    d = _setup(world)
    frank = "uid:%d" % FRANK
    big, small, mid = (os.path.join(world.tmp, world.name(n) + ".tar.gz") for n in ("big", "small", "mid"))
    _filler_tar(big, 30)
    _filler_tar(small, 2)
    _filler_tar(mid, 22)
    names = [world.name("rbig"), world.name("rsmall"), world.name("rmid")]
    made = []
    try:
        msg = _refused(_one(d, FRANK, "runtime.import", {"name": names[0], "path": big}), "30 MiB under 24",
                       "limit_exceeded")
        expect("maxDiskMiB" in msg and frank in msg, "names the limit and the tenant:", msg)
        got = _ok(d, FRANK, "runtime.import", {"name": names[1], "path": small})
        expect(got["sizeBytes"] >= 2 << 20, "the small one is imported:", got)
        usage = _ok(d, FRANK, "daemon.info")["tenant"]["usage"]
        expect(usage["diskMiB"] >= 3, "its disk is counted:", usage)
        msg = _refused(_one(d, FRANK, "runtime.import", {"name": names[2], "path": mid}), "22 MiB more",
                       "limit_exceeded")
        expect("maxDiskMiB" in msg and frank in msg, "names the limit and the tenant:", msg)
        m = _one(d, FRANK, "sandbox.create", {"networkPolicy": "deny-all", "resources": {"diskMiB": 22}})
        if "result" in m:
            made.append(m["result"]["name"])
        msg = _refused(m, "a 22 MiB disk beside the runtime", "limit_exceeded")
        expect("maxDiskMiB" in msg and "runtimes" in msg, "says runtimes count:", msg)
        expect_eq(sorted(n for n in names if n in _runtime_names(d, 0)), [names[1]], "only the small one is kept")
        _ok(d, FRANK, "runtime.delete", {"name": names[1]})
        made.append(_ok(d, FRANK, "sandbox.create", {"networkPolicy": "deny-all",
                                                     "resources": {"diskMiB": 22}})["name"])
    finally:
        _cleanup(d, made)
        for n in names:
            d.rpc("runtime.delete", {"name": n})
        for p in (big, small, mid):
            os.unlink(p)


def test_a_snapshot_import_unpacks_no_more_than_the_tenants_disk_has_left(world):
    """snapshot.import of a tenant under maxDiskMiB: its layers are unpacked
    onto the state filesystem, so at most what the tenant has left is,
    and the refusal names the limit and the tenant. Found: a file of any
    size up to maxSourceBytes (4 GiB) was unpacked whole, to be refused
    only at the end, again and again."""
    import io
    import tarfile
    d = _setup(world)
    path = os.path.join(world.tmp, world.name("bigsnap") + ".tar.gz")
    with tarfile.open(path, "w:gz") as t:
        rec = json.dumps({"sandbox": "x", "createdAt": "2026-01-01T00:00:00Z",
                          "config": {"resources": {"diskMiB": 64}}}).encode()
        ti = tarfile.TarInfo("snapshot.json")
        ti.size = len(rec)
        t.addfile(ti, io.BytesIO(rec))
        for n in ("layers/0/workspace",):
            ti = tarfile.TarInfo(n)
            ti.type, ti.mode = tarfile.DIRTYPE, 0o755
            t.addfile(ti)
        ti = tarfile.TarInfo("layers/0/workspace/filler")
        ti.size, ti.mode = 30 << 20, 0o644
        t.addfile(ti, io.BytesIO(b"\0" * (30 << 20)))
    os.chmod(path, 0o644)
    try:
        before = _ok(d, 0, "snapshot.list")["snapshots"]
        msg = _refused(_one(d, FRANK, "snapshot.import", {"path": path, "config": True}),
                       "a 30 MiB snapshot under maxDiskMiB 24", "limit_exceeded")
        expect("maxDiskMiB" in msg and "uid:%d" % FRANK in msg and "left" in msg,
               "refused while unpacking, naming the limit and the tenant:", msg)
        expect_eq(_ok(d, 0, "snapshot.list")["snapshots"], before, "nothing imported")
    finally:
        os.unlink(path)


def test_a_tenants_daemon_info_shows_its_own_and_nothing_of_others(world):
    """daemon.info for a local tenant: the version, limits, capabilities and
    its own counts, limits and usage; no other tenant's sandbox, count or
    name and no host path. Admin keeps the whole of it."""
    d = _setup(world)
    made = []
    try:
        made.append(_ok(d, ALICE, "sandbox.create", {"networkPolicy": "deny-all"})["name"])
        theirs = _ok(d, CAROL, "sandbox.create", {"networkPolicy": "deny-all", "resources": {"diskMiB": 256}})
        made.append(theirs["name"])
        info = _ok(d, ALICE, "daemon.info")
        expect(info.get("version") and "maxTimeoutMs" in info.get("limits", {}), "version and limits:", info)
        expect_eq(info["tenant"]["name"], "uid:%d" % ALICE, "its tenant")
        expect_eq(info["tenant"]["usage"]["sandboxes"], 1, "its own sandboxes")
        expect_eq(info["sandboxes"], 1, "the count is its own")
        expect_eq(info["tenant"]["limits"]["allowRuntimeImport"], False, "its permissions")
        carol = _ok(d, CAROL, "daemon.info")["tenant"]
        expect_eq((carol["limits"]["maxSandboxes"], carol["usage"]["sandboxes"]), (2, 1), "a limited tenant's")
        text = json.dumps(info)
        for leak in (theirs["name"], "uid:%d" % CAROL, d.state_dir, d.dir, "stateDir", "runDir", "socket",
                     "warmPool", "storage", "logBytesInUse"):
            expect(leak not in text, "a tenant's daemon.info shows nothing of %r:" % leak, text[:600])
        full = _ok(d, 0, "daemon.info")
        expect(full["stateDir"] == d.state_dir and full["sandboxes"] >= 2 and "tenant" not in full,
               "admin's daemon.info is whole:", json.dumps(full)[:300])
    finally:
        _cleanup(d, made)


def test_a_tenants_bootstrap_is_its_own_and_from_the_daemons_mirror(world):
    """runtime.bootstrap as a tenant with allowRuntimeImport: from the
    daemon's own mirror (the debootstrap cache test_runtimes fills; no
    network here), recorded as the tenant's, hidden from another tenant."""
    import hashlib
    from test_runtimes import _apt_mirror
    d = _setup(world)
    mirror, cache = _apt_mirror(), _state.get("cache")
    if not mirror or not cache or not os.path.isdir(os.path.join(
            cache, "bookworm-" + hashlib.sha256(mirror.encode()).hexdigest()[:16])):
        raise W.Skip("no debootstrap cache of bookworm from this machine's mirror (test_runtimes makes it)")
    rt = world.name("tboot")
    try:
        got = _as(d, BOB, [{"method": "runtime.bootstrap", "params": {"name": rt}}], timeout=600)[0]
        expect("result" in got, "bootstrap as a tenant:", json.dumps(got)[:400])
        expect_eq((got["result"]["owner"], got["result"]["cached"], got["result"]["source"]["mirror"]),
                  ("uid:%d" % BOB, True, mirror), "the tenant's, from the cache of the daemon's mirror")
        expect(rt not in _runtime_names(d, ERIN), "hidden from another tenant")
        _ok(d, BOB, "runtime.delete", {"name": rt})
    finally:
        d.rpc("runtime.delete", {"name": rt})
test_a_tenants_bootstrap_is_its_own_and_from_the_daemons_mirror.timeout = 600
