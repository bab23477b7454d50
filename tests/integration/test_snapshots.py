"""Fork and snapshots (DESIGN §3): copies that never share writable state,
a running source keeps running, snapshots outlive their sandbox."""
import json
import os

import leaks
import world as W
from common import create, delete, expect, expect_eq, get, poll, sh, sh_ok


def _layers(world):
    d = os.path.join(world.daemon.state_dir, "layers")
    return sorted(os.listdir(d)) if os.path.isdir(d) else []


def test_fork_of_running_sandbox_copies_files_and_keeps_source_running(world):
    src, _c, _o, _e = create(world, "fsrc", "--deny-all")
    fork = world.name("fork")
    try:
        sh_ok(world, src, "echo before > /workspace/a && mkdir -p /workspace/d && echo deep > /workspace/d/f")
        world.ctl("exec", "--detach", src, "--", "sh", "-c",
                  # Renamed into place, so a reader never sees a half-written file.
                  "i=0; while :; do i=$((i+1)); echo $i > /tmp/counter.new; mv /tmp/counter.new /tmp/counter; "
                  "sleep 0.05; done", check=True)
        poll(lambda: sh(world, src, "cat /tmp/counter 2>/dev/null")[1].strip().isdigit(), 10,
             "the source's loop to start counting")
        code, out, err = world.ctl("fork", src, "--name", fork)
        expect_eq((code, out), (0, fork + "\n"), "fork exit and output (%s)" % err.strip())
        code, out, _e = sh(world, fork, "cat /workspace/a /workspace/d/f; hostname")
        expect_eq((code, out), (0, "before\ndeep\n%s\n" % fork), "files and hostname in the fork")
        # Writes diverge both ways.
        sh_ok(world, fork, "echo fork > /workspace/a")
        sh_ok(world, src, "echo src > /workspace/b")
        expect_eq(sh(world, src, "cat /workspace/a")[1], "before\n", "source unchanged by the fork's write")
        expect_eq(sh(world, fork, "ls /workspace/b 2>/dev/null; echo end")[1], "end\n",
                  "the fork does not see the source's later write")
        # The source's command survived the freeze and still counts.
        first = int(sh(world, src, "cat /tmp/counter")[1])
        poll(lambda: int(sh(world, src, "cat /tmp/counter")[1]) > first, 10,
                   "the source's loop to keep counting after the fork")
    finally:
        delete(world, fork)
        delete(world, src)
    leaks.check(world, src)
    leaks.check(world, fork)


def test_a_fork_with_an_invalid_parameter_fails_before_the_source_is_copied_or_frozen(world):
    """sandbox.fork checks its name and overrides as sandbox.create would
    before the capture: with the test build set to die when a fork freezes
    its source (core_fault "fork.frozen"), each invalid fork is refused with
    the error create gives, naming the field, and the daemon is still there, the source
    running and no layer made."""
    d = world.daemon
    expect_eq(d.stop(), 0, "sandboxd exit status on SIGTERM")
    d.start(binary=W.FAULTS_SANDBOXD, env={"SANDBOXD_FAULT": "fork.frozen"})
    src = None
    try:
        src, _c, _o, _e = create(world, "fbad", "--deny-all")
        before = _layers(world)
        # The code and field sandbox.create gives for each.
        cases = [({"name": "bad.name"}, -32602, "name"),
                 ({"overrides": {"timeout": "soon"}}, -32602, "timeout"),
                 ({"overrides": {"resources": {"vcpus": 0}}}, -32602, "resources.vcpus"),
                 ({"overrides": {"networkPolicy": {"mode": "nonsense"}}}, -32000, "networkPolicy")]
        for extra, want, field in cases:
            params = dict({"sourceSandbox": src}, **extra)
            msg = d.rpc("sandbox.fork", params, timeout=60)
            err = msg.get("error") or {}
            expect_eq(err.get("code"), want, "fork %s: %s" % (extra, msg))
            expect(((err.get("data") or {}).get("field") or "").startswith(field), "the field named:", err)
            expect(d.proc.poll() is None, "the daemon reached the freeze of the source for %s" % extra)
        code, out, err = world.ctl("fork", src, "--name", "bad.name")
        expect(code != 0 and "is not valid" in err, "sandboxctl fork --name bad.name:", code, err)
        expect(d.proc.poll() is None, "the daemon reached the freeze for sandboxctl fork --name bad.name")
        expect_eq(_layers(world), before, "layers made by the refused forks")
        expect_eq(get(world, src)[0].get("status"), "running", "the source's status")
    finally:
        if src:
            delete(world, src)
        d.stop()
        d.start()


def test_fork_of_stopped_persistent_sandbox_and_both_resume(world):
    src, _c, _o, _e = create(world, "psrc", "--deny-all", "--persistent")
    fork = world.name("pfork")
    try:
        sh_ok(world, src, "echo kept > /workspace/k")
        world.ctl("stop", src, check=True)
        code, _o, err = world.ctl("fork", src, "--name", fork)
        expect_eq(code, 0, "fork of a stopped sandbox (%s)" % err.strip())
        expect_eq(sh(world, fork, "cat /workspace/k")[1], "kept\n", "file in the fork")
        sh_ok(world, fork, "echo changed > /workspace/k")
        expect_eq(sh(world, src, "cat /workspace/k")[1], "kept\n", "source resumes with its own files")
        sb, _c, _e = get(world, fork)
        expect_eq(sb["persistent"], True, "the fork copies the source's config")
    finally:
        delete(world, fork)
        delete(world, src)
    expect_eq(_layers(world), [], "layers left after deleting both")


def test_snapshot_keeps_sandbox_running_and_restores_into_a_new_one(world):
    src, _c, _o, _e = create(world, "ssrc", "--deny-all")
    third = world.name("restored")
    snap = None
    try:
        sh_ok(world, src, "echo v1 > /workspace/v")
        code, out, err = world.ctl("snapshot", src)
        expect_eq(code, 0, "snapshot exit code (%s)" % err.strip())
        snap = out.strip()
        expect(snap.startswith("snap-"), "snapshot id:", snap)
        sb, _c, _e = get(world, src)
        expect_eq(sb["status"], "running", "the source keeps running")
        sh_ok(world, src, "echo v2 > /workspace/v")
        code, _o, err = world.ctl("create", "--name", third, "--deny-all", "--snapshot", snap)
        expect_eq(code, 0, "create from snapshot (%s)" % err.strip())
        expect_eq(sh(world, third, "cat /workspace/v")[1], "v1\n", "the snapshot's content, not later writes")
        code, out, _e = world.ctl("--json", "snapshots")
        expect(snap in out, "snapshots lists it:", out[:300])
        # Deleting the sandbox keeps its snapshot; deleting the snapshot keeps
        # the sandbox made from it whole.
        delete(world, src)
        expect_eq(world.rpc_result("snapshot.get", {"id": snap})["id"], snap, "snapshot after its sandbox is gone")
        code, _o, err = world.ctl("snapshots", "rm", snap)
        expect_eq(code, 0, "snapshots rm (%s)" % err.strip())
        snap = None
        expect_eq(sh(world, third, "cat /workspace/v")[1], "v1\n", "restored sandbox after its snapshot is deleted")
    finally:
        if snap:
            world.ctl("snapshots", "rm", snap)
        delete(world, third)
        delete(world, src)
    expect_eq(_layers(world), [], "layers left after deleting everything")


def test_create_from_snapshot_and_fork_keep_the_config_unless_overridden(world):
    src, _c, _o, _e = create(world, "cfgsrc", "--deny-all", "--env", "A=1", "--tag", "team=x", "--port", "8000")
    restored, overridden, fork = world.name("cfgsnap"), world.name("cfgover"), world.name("cfgfork")
    snap = None
    try:
        code, out, err = world.ctl("snapshot", src)
        expect_eq(code, 0, "snapshot exit code (%s)" % err.strip())
        snap = out.strip()
        # No policy given: the snapshot's deny-all, never the allow-all default.
        code, _o, err = world.ctl("create", "--name", restored, "--snapshot", snap)
        expect_eq(code, 0, "create from snapshot (%s)" % err.strip())
        sb, _c, _e = get(world, restored)
        expect_eq((sb["networkPolicy"], sb["env"], sb["tags"], [p["port"] for p in sb["ports"]]),
                  ("deny-all", {"A": "1"}, {"team": "x"}, [8000]), "config restored from the snapshot")
        code, _o, err = world.ctl("create", "--name", overridden, "--snapshot", snap, "--env", "B=2")
        expect_eq(code, 0, "create from snapshot with --env (%s)" % err.strip())
        sb, _c, _e = get(world, overridden)
        expect_eq((sb["env"], sb["networkPolicy"]), ({"B": "2"}, "deny-all"), "a given key overrides only itself")
        code, _o, err = world.ctl("fork", src, "--name", fork)
        expect_eq(code, 0, "fork (%s)" % err.strip())
        sb, _c, _e = get(world, fork)
        expect_eq([p["port"] for p in sb["ports"]], [8000], "the fork exposes the source's ports")
    finally:
        for n in (fork, overridden, restored, src):
            delete(world, n)
        if snap:
            world.ctl("snapshots", "rm", snap)
    for n in (fork, overridden, restored, src):
        leaks.check(world, n)


def test_unknown_snapshot_is_an_error_never_a_fallback(world):
    name = world.name("nosnap")
    code, _o, err = world.ctl("create", "--name", name, "--snapshot", "snap-0000")
    expect_eq(code, 4, "create from an unknown snapshot: exit code (%s)" % err.strip())
    expect("snap-0000" in err, "the error names the snapshot:", err.strip())
    r = world.rpc("sandbox.get", {"name": name})
    expect_eq((r.get("error") or {}).get("data", {}).get("reason"), "not_found", "no sandbox was made")


def test_snapshots_survive_a_daemon_restart(world):
    src, _c, _o, _e = create(world, "rsnap", "--deny-all")
    try:
        sh_ok(world, src, "echo persisted > /workspace/p")
        snap = world.rpc_result("sandbox.snapshot", {"name": src})["id"]
    finally:
        delete(world, src)
    d = world.daemon
    d.stop()
    d.start()
    restored = world.name("rrest")
    try:
        world.rpc_result("sandbox.create", {"name": restored, "networkPolicy": "deny-all",
                                            "source": {"type": "snapshot", "snapshotId": snap}})
        expect_eq(sh(world, restored, "cat /workspace/p")[1], "persisted\n", "file from a snapshot after restart")
    finally:
        delete(world, restored)
        world.rpc("snapshot.delete", {"id": snap})
    expect_eq(_layers(world), [], "layers left")


def _snapshot_get(world, sid):
    """snapshot.get: (result or None, error reason or None)."""
    r = world.rpc("snapshot.get", {"id": sid})
    if "result" in r:
        return r["result"], None
    return None, ((r.get("error") or {}).get("data") or {}).get("reason")


def test_expired_snapshot_is_deleted_by_the_daemon(world):
    src, _c, _o, _e = create(world, "exps", "--deny-all")
    try:
        sh_ok(world, src, "echo kept > /workspace/f")
        code, out, err = world.ctl("--json", "snapshot", src, "--expire", "1500")
        expect_eq(code, 0, "snapshot --expire 1500 (%s)" % err.strip())
        snap = json.loads(out)
        expect(snap.get("expiresAt") and snap["expiresAt"] > snap["createdAt"] and snap["expired"] is False,
               "expiresAt after createdAt, not expired yet:", snap)
        code, out, _e = world.ctl("snapshots")
        expect(snap["id"] in out and snap["expiresAt"] in out, "sandboxctl snapshots shows the expiry:", out)
        # Polled, with a deadline far above the 1.5 s it is given.
        poll(lambda: _snapshot_get(world, snap["id"])[1] == "not_found", 20,
             "the expired snapshot to be deleted")
        expect(not os.path.exists(os.path.join(world.daemon.state_dir, "snapshots", snap["id"] + ".json")),
               "the snapshot's record is gone")
        expect_eq(sh(world, src, "cat /workspace/f")[1], "kept\n", "the source sandbox is untouched")
        # One without an expiration stays.
        code, out, _e = world.ctl("--json", "snapshot", src)
        plain = json.loads(out)
        expect_eq(plain.get("expiresAt", "absent"), None, "expiresAt of a snapshot without --expire")
        world.ctl("snapshots", "rm", plain["id"], check=True)
    finally:
        delete(world, src)
    leaks.check(world, src)


def test_expired_snapshot_a_sandbox_stands_on_waits_for_it(world):
    src, _c, _o, _e = create(world, "expw", "--deny-all")
    child = None
    try:
        sh_ok(world, src, "echo from-snapshot > /workspace/f")
        snap = json.loads(world.ctl("--json", "snapshot", src, "--expire", "1500", check=True)[1])
        child, _c, _o, _e = create(world, "expc", "--deny-all", "--snapshot", snap["id"])
        poll(lambda: (_snapshot_get(world, snap["id"])[0] or {}).get("expired") is True, 20,
             "snapshot.get to report the snapshot expired while a sandbox stands on it")
        expect_eq(sh(world, child, "cat /workspace/f")[1], "from-snapshot\n", "the sandbox on it keeps its files")
        code, _o, err = world.ctl("create", "--name", world.name("expn"), "--deny-all", "--snapshot", snap["id"])
        expect(code == 4 and "expired" in err, "creating from an expired snapshot is refused:", code, err.strip())
        delete(world, child)
        poll(lambda: _snapshot_get(world, snap["id"])[1] == "not_found", 20,
             "the snapshot to go once no sandbox stands on it")
        leaks.check(world, child)
        child = None
    finally:
        if child:
            delete(world, child)
        delete(world, src)
    leaks.check(world, src)


def test_snapshot_expiration_is_validated(world):
    src, _c, _o, _e = create(world, "expv", "--deny-all")
    try:
        for bad in (-1, 366 * 24 * 3600 * 1000, "1h", 1.5):
            r = world.rpc("sandbox.snapshot", {"name": src, "expiration": bad})
            err = r.get("error") or {}
            expect(err.get("code") == -32602 and (err.get("data") or {}).get("field") == "expiration",
                   "expiration=%r is refused naming the field:" % (bad,), r)
        code, _o, err = world.ctl("snapshot", src, "--expire", "soon")
        expect_eq(code, 2, "sandboxctl snapshot --expire soon is a usage error (%s)" % err.strip())
        code, out, _e = world.ctl("--json", "snapshot", src, "--expire", "1h")
        snap = json.loads(out)
        expect(snap.get("expiresAt"), "a 1h snapshot has expiresAt:", snap)
        world.ctl("snapshots", "rm", snap["id"], check=True)
    finally:
        delete(world, src)


def test_snapshot_tags_label_it_filter_the_list_and_survive_a_restart(world):
    """sandbox.snapshot tags: shown in Snapshot, snapshot.list's tags filter
    keeps those with every given tag, checked as a sandbox's tags, kept
    across a daemon restart."""
    src, _c, _o, _e = create(world, "stag", "--deny-all")
    snaps = []
    try:
        a = world.rpc_result("sandbox.snapshot", {"name": src, "tags": {"e2b.name": "one", "team": "a"}})
        snaps.append(a["id"])
        expect_eq(a.get("tags"), {"e2b.name": "one", "team": "a"}, "tags of the snapshot")
        b = world.rpc_result("sandbox.snapshot", {"name": src})
        snaps.append(b["id"])
        expect_eq(b.get("tags"), {}, "tags of a snapshot without them")
        for bad in ({"k": 5}, ["a"], {"k%d" % i: "v" for i in range(6)}):
            r = world.rpc("sandbox.snapshot", {"name": src, "tags": bad})
            err = r.get("error") or {}
            expect(err.get("code") == -32602 and "tags" in ((err.get("data") or {}).get("field") or ""),
                   "tags=%r is refused naming tags:" % (bad,), r)

        def listed(tags):
            got = world.rpc_result("snapshot.list", {"sandbox": src, "tags": tags})["snapshots"]
            return sorted(x["id"] for x in got)
        expect_eq(listed({"e2b.name": "one"}), [a["id"]], "list by e2b.name=one")
        expect_eq(listed({"e2b.name": "one", "team": "b"}), [], "list by a tag that does not match")
        expect_eq(listed({}), sorted(snaps), "list with no tags")
        d = world.daemon
        d.stop()
        d.start()
        expect_eq(listed({"team": "a"}), [a["id"]], "list by team=a after a restart")
    finally:
        delete(world, src)
        for sid in snaps:
            world.rpc("snapshot.delete", {"id": sid})


def test_snapshot_that_expired_while_the_daemon_was_down_is_deleted_at_start(world):
    import time
    src, _c, _o, _e = create(world, "expd", "--deny-all")
    try:
        snap = json.loads(world.ctl("--json", "snapshot", src, "--expire", "1500", check=True)[1])
    finally:
        delete(world, src)
    d = world.daemon
    d.stop()
    record = os.path.join(d.state_dir, "snapshots", snap["id"] + ".json")
    expect(os.path.exists(record), "the record is still there while the daemon is down")
    # Wait (polled) until the wall clock is past expiresAt, the daemon still down.
    deadline = time.monotonic() + 20
    while time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(time.time() - 1)) < snap["expiresAt"][:19]:
        expect(time.monotonic() < deadline, "the clock to pass expiresAt")
        time.sleep(0.1)
    d.start()
    poll(lambda: _snapshot_get(world, snap["id"])[1] == "not_found", 10,
         "the snapshot that expired during the downtime to be deleted at start")
    expect(not os.path.exists(record), "its record is gone")
    # Its layers go on a worker thread after the record.
    poll(lambda: _layers(world) == [], 10, "the expired snapshot's layers to be removed")


def test_a_sandbox_on_many_layers_runs_with_and_without_a_user_namespace(world):
    # Each snapshot of a stopped sandbox puts its upper below it as a layer:
    # eight layers make an overlayfs lowerdir well over the 256 bytes one
    # fsconfig(2) string may hold.
    for userns in (False, True):
        name = world.name("deep")
        r = world.rpc("sandbox.create", {"name": name, "networkPolicy": "deny-all", "persistent": True,
                                         "userns": userns}, timeout=120)
        if "error" in r and userns and r["error"].get("data", {}).get("reason") == "unavailable":
            continue
        expect("result" in r, "create (userns %s):" % userns, r.get("error"))
        try:
            for i in range(8):
                sh_ok(world, name, "echo %d > /workspace/f%d" % (i, i))
                world.ctl("stop", name, check=True)
                code, _o, err = world.ctl("snapshot", name)
                expect_eq(code, 0, "snapshot %d (%s)" % (i, err.strip()))
            code, out, err = sh(world, name, "cat /workspace/f0 /workspace/f7")
            expect_eq((code, out), (0, "0\n7\n"), "files on 8 layers (userns %s): %s" % (userns, err.strip()))
        finally:
            for s in world.rpc_result("snapshot.list", {"sandbox": name})["snapshots"]:
                world.ctl("snapshots", "rm", s["id"])
            delete(world, name)
