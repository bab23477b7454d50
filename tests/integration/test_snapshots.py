"""Fork and snapshots (DESIGN §3): copies that never share writable state,
a running source keeps running, snapshots outlive their sandbox."""
import json
import os

import leaks
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
