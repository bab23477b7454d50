#!/usr/bin/env python3
"""The kill -9 matrix: sandboxd killed by SIGKILL at each fault point
(libcore/fault.h: SANDBOXD_FAULT=<op>.<step>), restarted on the same state
without the fault, and checked.

    python3 tests/faults/run.py              every point (make faults)
    python3 tests/faults/run.py --sample     one or two points per operation (make check)
    python3 tests/faults/run.py fork.        the points whose name contains "fork."

For each point, in a test world with a daemon of its own:
  1. a daemon without the fault creates a running "witness" sandbox with a
     detached counting command, and whatever the operation needs (a
     stopped persistent sandbox, a snapshot, an export file, a tarball);
  2. that daemon is stopped (SIGTERM; sessions live on) and started again
     with SANDBOXD_FAULT=<point>; the operation is sent and the daemon must
     die of SIGKILL (the point was reached);
  3. it is started again without the fault, on the same state, and then:
     - the witness's command still runs and its counter rises; a new
       command runs; command.logs and command.wait work on the old command;
     - the half-done operation is complete or absent: sandbox.list and
       snapshot.list agree with the state directory, every listed running
       sandbox runs a command, an export path holds nothing or a file that
       imports;
     - nothing is frozen (cgroup.freeze of every session's cgroup);
     - after deleting everything, nothing leaks (tests/integration/leaks.py:
       mounts, links, cgroups, nftables objects, sandbox-init processes,
       state directories), no sandbox-netd of this daemon is left, no layer
       and no temporary file is left in the state directory.

KNOWN lists the points expected to fail because of a known open defect,
with the item of issue #11 that fixes it: such a point is reported as
XFAIL (and as XPASS, not an error, once it passes). A label with a variant
("create.session_started[allowlist]") is looked up as written; one without
("fork.frozen") by its point.
"""
import argparse
import base64
import json
import os
import signal
import subprocess
import sys
import tarfile
import io
import time
import traceback

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "integration"))
import leaks  # noqa: E402
import world as W  # noqa: E402

# Renamed into place: `echo $i > c` empties the file before it writes,
# and a read in between saw nothing.
COUNTER = "i=0; while :; do i=$((i+1)); echo $i > /workspace/c.t; mv /workspace/c.t /workspace/c; sleep 0.1; done"
ALLOWLIST = {"allow": ["api.public.test"]}

# Points expected to fail until the named item of issue #11 is merged.
KNOWN = {
}


class Fail(Exception):
    pass


def expect(cond, what):
    if not cond:
        raise Fail(what)


def poll(pred, secs, what, interval=0.1):
    deadline = time.monotonic() + secs
    last = None
    while time.monotonic() < deadline:
        try:
            last = pred()
            if last:
                return last
        except Exception as e:  # keep polling; report the last error
            last = e
        time.sleep(interval)
    raise Fail("timed out after %ss: %s (last: %r)" % (secs, what, last))


def res(d, method, params=None, timeout=60):
    msg = d.rpc(method, params or {}, timeout)
    if "error" in msg:
        raise Fail("%s %s: %s" % (method, json.dumps(params)[:200], json.dumps(msg["error"])[:300]))
    return msg["result"]


def counter(d, name):
    r = d.rpc("fs.read", {"sandbox": name, "path": "/workspace/c"}, 30)
    if "error" in r:
        return -1
    text = base64.b64decode(r["result"]["content"]).decode().strip()
    return int(text) if text.isdigit() else -1


# ---------------------------------------------------------------- scenarios
# Each scenario: setup(w, d) -> ctx (with a fault-free daemon), then
# trigger(w, d, ctx) sends the operation to the faulted daemon.

def make_tarball(w, tag):
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as t:
        data = b"from a tarball\n"
        ti = tarfile.TarInfo("hello.txt")
        ti.size = len(data)
        t.addfile(ti, io.BytesIO(data))
    name = "%s.tar.gz" % tag
    w.add_http_file(name, buf.getvalue())
    return w.http_url(name)


def s_create(source=None, policy="allow-all"):
    def setup(w, d):
        ctx = {"target": w.name("tgt")}
        if source == "git":
            ctx["source"] = {"type": "git", "url": w.git_url}
        elif source == "tarball":
            ctx["source"] = {"type": "tarball", "url": make_tarball(w, ctx["target"])}
        elif source == "snapshot":
            base = w.name("base")
            res(d, "sandbox.create", {"name": base})
            res(d, "fs.write", {"sandbox": base, "files": [{"path": "f", "content": base64.b64encode(b"snap").decode()}]})
            used(d, base)
            ctx["source"] = {"type": "snapshot", "snapshotId": res(d, "sandbox.snapshot", {"name": base})["id"]}
        return ctx

    def trigger(w, d, ctx):
        p = {"name": ctx["target"], "networkPolicy": policy}
        if "source" in ctx:
            p["source"] = ctx["source"]
        conn = d.connect(timeout=120)
        conn.start("sandbox.create", p)
        return conn
    return setup, trigger


def s_pool_create(policy="allow-all"):
    """A create the warm pool serves, sent once the faulted daemon's pool
    has a ready session (its adoption reaches the pool.* points)."""
    def setup(w, d):
        return {"target": w.name("tgt")}

    def trigger(w, d, ctx):
        poll(lambda: res(d, "daemon.info")["warmPool"]["ready"] >= 1, 60, "the faulted daemon's pool fills")
        conn = d.connect(timeout=120)
        conn.start("sandbox.create", {"name": ctx["target"], "networkPolicy": policy})
        return conn
    return setup, trigger


def pool_config(label):
    """The daemon.json of a pool.* point's first two daemons (the one after
    the crash runs without a pool: what is left must go without it)."""
    if not label.startswith("pool.") and "[pool refill]" not in label:
        return None
    policy = "custom" if "[allowlist]" in label else "allow-all"
    if "deny-all pool" in label:
        policy = "deny-all"
    return {"warmPool": {"size": 1, "policy": policy}}


# The storage pool (daemon.json storage.pool, libcore/pool.h): a point
# whose label says "[storage pool" runs all three daemons with one, so the
# sandboxes' disks are subvolumes and their copies read-only snapshots.
STORAGE_POOL = {"storage": {"pool": {"sizeMiB": 1024}}, "diskMiB": 64}


def daemon_config(label):
    """The daemon.json of a point's first two daemons."""
    if "[storage pool" in label:
        return dict(STORAGE_POOL)
    return pool_config(label)


def spare_leftovers(d):
    """What is left of a dead daemon's spare disk (libcore/diskimg.c): an
    image in <state>/disk-spare not named for the running daemon's pid, or
    a loop device backed by an image there that no longer exists."""
    spare = os.path.join(d.state_dir, "disk-spare")
    out = ["image %s" % x for x in (os.listdir(spare) if os.path.isdir(spare) else [])
           if not x.startswith("spare-%d-" % d.pid)]
    for dev in os.listdir("/sys/block"):
        try:
            with open("/sys/block/%s/loop/backing_file" % dev) as f:
                backing = f.read().strip()
        except OSError:
            continue
        if backing.startswith(spare + "/") and (backing.endswith(" (deleted)") or not os.path.exists(backing)):
            out.append("loop device %s: %s" % (dev, backing))
    return out


def check_spare(d, problems):
    """After a restart nothing of the dead daemon's spare disk is left (its
    loop device clears itself just after the process goes: polled)."""
    try:
        W.World.wait_until(lambda: not spare_leftovers(d), 30, "the dead daemon's spare disk to go")
    except W.WorldError:
        problems.append("the dead daemon's spare disk was left: %s" % spare_leftovers(d)[:4])


def check_pool_empty(d, problems):
    """After every sandbox and snapshot is deleted: no subvolume is left
    in the storage pool (the daemon's mount namespace has it mounted)."""
    def entries():
        out = []
        for kind in ("sandboxes", "layers"):
            p = subprocess.run(["nsenter", "-t", str(d.pid), "-m", "--", "ls", "-A",
                                os.path.join(d.state_dir, "pool", kind)], capture_output=True, text=True)
            out += ["%s/%s" % (kind, x) for x in p.stdout.split()]
        return out
    try:
        poll(lambda: not entries(), 60, "the storage pool's subvolumes to go")
    except Fail:
        problems.append("storage pool subvolumes left: %s" % entries()[:6])


def s_running(extra=None, big=False):
    """A running sandbox to operate on (ctx["target"]). big: with 16 MiB
    in its upper, so that a pre-copy makes a second live pass."""
    def setup(w, d):
        t = w.name("tgt")
        p = {"name": t, "networkPolicy": ALLOWLIST}
        p.update(extra or {})
        res(d, "sandbox.create", p)
        res(d, "fs.write", {"sandbox": t, "files": [{"path": "data", "content": base64.b64encode(b"x" * 100000).decode()}]})
        used(d, t)
        if big:
            r = res(d, "command.run", {"sandbox": t, "cmd": "sh", "args": ["-c", "head -c 16M /dev/zero > /var/tmp/big"]}, 60)
            expect(r.get("exitCode") == 0, "setup command in %s: %r" % (t, r))
        return {"target": t}
    return setup


def used(d, name):
    """Runs a command in the sandbox, as any real sandbox has before a
    restart (one that never ran one loses its root at a restart: #11.1,
    which the create points show)."""
    r = res(d, "command.run", {"sandbox": name, "cmd": "sh", "args": ["-c", "echo used"]}, 60)
    expect(r.get("exitCode") == 0, "setup command in %s: %r" % (name, r))


def s_stopped(w, d):
    t = w.name("tgt")
    res(d, "sandbox.create", {"name": t, "persistent": True})
    used(d, t)
    res(d, "fs.write", {"sandbox": t, "files": [{"path": "data", "content": base64.b64encode(b"kept").decode()}]})
    res(d, "sandbox.stop", {"name": t}, 120)
    return {"target": t}


def send(method, params_of):
    def trigger(w, d, ctx):
        # The connection stays open until the daemon dies: a request whose
        # client is gone may be dropped before it reaches the point.
        conn = d.connect(timeout=120)
        conn.start(method, params_of(w, ctx))
        return conn
    return trigger


def s_create_cancelled(w, d):
    """A create from a tarball whose server stalls, for request.cancel."""
    t = w.name("tgt")
    base, _log = w.stall_server()
    return {"target": t, "source": {"type": "tarball", "url": "%s/%s.tar.gz" % (base, t)}}


def send_create_and_cancel(w, d, ctx):
    # Both lines in one write: the cancel finds the create pending.
    conn = d.connect(timeout=120)
    lines = [{"jsonrpc": "2.0", "id": 1, "method": "sandbox.create",
              "params": {"name": ctx["target"], "source": ctx["source"]}},
             {"jsonrpc": "2.0", "id": 2, "method": "request.cancel", "params": {"id": 1}}]
    conn.send_raw(b"".join(json.dumps(m).encode() + b"\n" for m in lines))
    conn.next_id = 3
    return conn


def s_snapshot_of_running(w, d):
    ctx = s_running()(w, d)
    ctx["snap"] = res(d, "sandbox.snapshot", {"name": ctx["target"]})["id"]
    return ctx


def s_export_file(w, d):
    ctx = s_snapshot_of_running(w, d)
    ctx["export"] = os.path.join(w.tmp, "exp-%s.tar.zst" % ctx["target"])
    res(d, "snapshot.export", {"id": ctx["snap"], "path": ctx["export"]}, 120)
    return ctx


def s_logged(w, d):
    """A sandbox with a finished and a running command, both with output on
    stdout and stderr; their command.logs must be the same after the
    restart (the faulted daemon dies while init replays them)."""
    t = w.name("tgt")
    res(d, "sandbox.create", {"name": t, "networkPolicy": "deny-all"})
    script = "seq 1 30000; seq 1 20000 >&2; "
    fin = res(d, "command.run", {"sandbox": t, "cmd": "sh", "args": ["-c", script + "exit 5"]}, 60)["cmdId"]
    run = res(d, "command.run", {"sandbox": t, "cmd": "sh", "args": ["-c", script + "exec sleep 600"],
                                 "detached": True})["cmdId"]
    poll(lambda: res(d, "command.logs", {"cmdId": run})["stderr"] == res(d, "command.logs", {"cmdId": fin})["stderr"],
         30, "the running command's output")
    return {"target": t, "dies_at_start": True,
            "logs": {i: res(d, "command.logs", {"cmdId": i}) for i in (fin, run)}}


def s_volume(w, d):
    """A volume named ctx["volume"] (made here for a delete; for a create
    only named), mounted by no sandbox."""
    return {"volume": w.name("vol")}


def s_volume_made(w, d):
    ctx = s_volume(w, d)
    res(d, "volume.create", {"name": ctx["volume"], "sizeMiB": 16}, 120)
    return ctx


def s_mounting(kind):
    """A volume (ctx["mounted"], holding the file "w") for a sandbox that
    mounts it at /data: kind "create" only names the target (the trigger
    creates it), "running" and "stopped" make it (persistent when
    stopped). check_mounted looks at both after the restart."""
    def setup(w, d):
        ctx = {"target": w.name("tgt"), "mounted": w.name("mvol")}
        res(d, "volume.create", {"name": ctx["mounted"], "sizeMiB": 16}, 120)
        if kind == "create":
            return ctx
        ctx["mounted_file"] = "/data/w"
        res(d, "sandbox.create", {"name": ctx["target"], "persistent": kind == "stopped",
                                  "volumes": [{"name": ctx["mounted"], "path": "/data"}]})
        r = res(d, "command.run", {"sandbox": ctx["target"], "cmd": "sh", "args": ["-c", "echo w > /data/w"]}, 60)
        expect(r.get("exitCode") == 0, "setup command in %s: %r" % (ctx["target"], r))
        if kind == "stopped":
            res(d, "sandbox.stop", {"name": ctx["target"]}, 120)
        return ctx
    return setup


def create_mounting(w, d, ctx):
    conn = d.connect(timeout=120)
    conn.start("sandbox.create", {"name": ctx["target"], "volumes": [{"name": ctx["mounted"], "path": "/data"}]})
    return conn


def check_mounted(d, ctx, listed, problems):
    """A volume mounted across the cut is there after the restart; delete
    refuses it while the target (if it came back) names it, and a running
    target reads it; once the target is gone (delete_everything), the
    volume's delete leaves nothing (check_clean)."""
    vol = ctx.get("mounted")
    if not vol:
        return
    if vol not in {v["name"] for v in res(d, "volume.list")["volumes"]}:
        problems.append("volume %s, mounted across the cut, is gone" % vol)
        return
    t = listed.get(ctx["target"])
    r = d.rpc("volume.delete", {"name": vol}, 120)
    reason = ((r.get("error") or {}).get("data") or {}).get("reason")
    if t and reason != "in_use":
        problems.append("volume %s: delete while sandbox %s (%s) names it: %s"
                        % (vol, ctx["target"], t.get("status"), json.dumps(r)[:200]))
    if not t and "error" in r:
        problems.append("volume %s: delete with no sandbox naming it: %s" % (vol, json.dumps(r)[:200]))
    if t and t.get("status") == "running":
        script = "grep -q ' /data ' /proc/self/mountinfo && %s" % (
            "cat " + ctx["mounted_file"] if ctx.get("mounted_file") else "touch /data/new")
        r = d.rpc("command.run", {"sandbox": ctx["target"], "cmd": "sh", "args": ["-c", script]}, 60)
        if (r.get("result") or {}).get("exitCode") != 0:
            problems.append("sandbox %s no longer reads its volume: %s" % (ctx["target"], json.dumps(r)[:200]))


def s_watched(w, d):
    """A running sandbox to watch; the trigger opens fs.watch on it and the
    daemon dies once the watch is sent to init. check_watch wants no
    watcher left in the sandbox after the restart and a new watch to
    work."""
    ctx = s_running()(w, d)
    ctx["watch"] = True
    return ctx


def watchers(d, name):
    """sandbox-init's watcher children in the sandbox (named like init:
    "memfd:sandbox-i"), PID 1 aside."""
    r = res(d, "command.run", {"sandbox": name, "cmd": "sh", "args": [
        "-c", 'for p in /proc/[0-9]*; do [ "${p#/proc/}" = 1 ] || cat $p/comm 2>/dev/null; done']}, 60)
    return sum(1 for c in r.get("stdout", "").split() if "sandbox-i" in c)


def check_watch(d, ctx, listed, problems):
    if not ctx.get("watch") or ctx["target"] not in listed:
        return
    try:
        poll(lambda: watchers(d, ctx["target"]) == 0, 30, "no watcher left in %s after the restart" % ctx["target"])
    except Fail as e:
        problems.append(str(e))
        return
    conn = d.connect(timeout=60)
    try:
        rid = conn.start("fs.watch", {"sandbox": ctx["target"], "path": "/tmp"})
        conn.wait_note(lambda n: n.get("method") == "fs.watchStarted" and n["params"].get("requestId") == rid,
                       timeout=60)
    except Exception as e:
        problems.append("a watch on %s after the restart: %s" % (ctx["target"], e))
    finally:
        conn.close()


def at_start(w, d, ctx):
    """No request: the point is reached while the daemon adopts."""
    return None


def check_logs(d, ctx, problems):
    for cmd_id, want in ctx.get("logs", {}).items():
        got = res(d, "command.logs", {"cmdId": cmd_id})
        if got != want:
            problems.append("command.logs of %s after the restart: %d/%d bytes of stdout/stderr, %d/%d before"
                            % (cmd_id, len(got.get("stdout", "")), len(got.get("stderr", "")),
                               len(want["stdout"]), len(want["stderr"])))


def s_runtime_tar(w, d):
    from test_runtimes import _tiny_rootfs_tar
    rt = w.name("rt")
    path = os.path.join(w.tmp, "%s.tar.gz" % rt)
    with open(path, "wb") as f:
        f.write(_tiny_rootfs_tar(rt))
    return {"runtime": rt, "path": path}


def s_container():
    """A running sandbox with a container "a" (on the host runtime) and a
    command running in it."""
    def setup(w, d):
        ctx = s_running()(w, d)
        res(d, "container.create", {"sandbox": ctx["target"], "name": "a", "runtime": "host"}, 60)
        res(d, "command.run", {"sandbox": ctx["target"], "container": "a", "cmd": "sleep", "args": ["600"],
                               "detached": True})
        return ctx
    return setup


SCENARIOS = {
    # point: (setup, trigger)
    # Containers (sandboxd/container.c): init made it, the daemon has no
    # record yet; init forgot it, the record is still there.
    "container.cgroup_made": (s_running(), send("container.create", lambda w, c: {"sandbox": c["target"], "name": "b",
                                                                                     "runtime": "host"})),
    "container.made": (s_running(), send("container.create", lambda w, c: {"sandbox": c["target"], "name": "b",
                                                                              "runtime": "host"})),
    "container.init_deleted": (s_container(), send("container.delete", lambda w, c: {"sandbox": c["target"],
                                                                                      "name": "a"})),
    "create.cloned[git]": s_create("git"),
    "create.cloned[tarball]": s_create("tarball"),
    "create.cloned[snapshot]": s_create("snapshot"),
    "create.configured": s_create("tarball"),
    "create.disk_backed": s_create(),
    # The spare disk (libcore/diskimg.c), made by a thread at start and
    # after each create: killed once it is mounted, before a create took it.
    "disk.spare_mounted": (lambda w, d: {"target": w.name("tgt"), "dies_at_start": True}, at_start),
    "create.session_started": s_create(),
    "create.recorded": s_create(),
    "netd.started": s_create(policy=ALLOWLIST),
    "create.session_started[allowlist]": s_create(policy=ALLOWLIST),
    "create.recorded[allowlist]": s_create(policy=ALLOWLIST),
    "create.session_started[deny-all]": s_create(policy="deny-all"),
    # sandbox-init cloned into its user namespace, waiting for its maps.
    "spawn.init_waiting": s_create(policy="deny-all"),
    # request.cancel of a create: killed as the cancelled worker starts to undo it.
    "create.cancelled": (s_create_cancelled, send_create_and_cancel),
    "fork.frozen": (s_running(), send("sandbox.fork", lambda w, c: {"sourceSandbox": c["target"], "name": c["target"] + "-f"})),
    "fork.copied": (s_running(), send("sandbox.fork", lambda w, c: {"sourceSandbox": c["target"], "name": c["target"] + "-f"})),
    # A stopped sandbox on its own disk image is copied (its upper cannot
    # be renamed onto the state filesystem): the copy's fault points apply.
    "fork.copied[stopped]": (s_stopped, send("sandbox.fork", lambda w, c: {"sourceSandbox": c["target"], "name": c["target"] + "-f"})),
    # Pre-copy of a running sandbox (sandboxd/snapshot.c): killed after
    # the first live pass and after a later one, the source never frozen.
    "fork.precopy_copied": (s_running(), send("sandbox.fork", lambda w, c: {"sourceSandbox": c["target"], "name": c["target"] + "-f"})),
    "fork.precopy_repeated": (s_running(big=True), send("sandbox.fork", lambda w, c: {"sourceSandbox": c["target"], "name": c["target"] + "-f"})),
    "snapshot.precopy_copied": (s_running(), send("sandbox.snapshot", lambda w, c: {"name": c["target"]})),
    "snapshot.precopy_repeated": (s_running(big=True), send("sandbox.snapshot", lambda w, c: {"name": c["target"]})),
    "snapshot.frozen": (s_running(), send("sandbox.snapshot", lambda w, c: {"name": c["target"]})),
    "snapshot.copied": (s_running(), send("sandbox.snapshot", lambda w, c: {"name": c["target"]})),
    "snapshot.recorded": (s_running(), send("sandbox.snapshot", lambda w, c: {"name": c["target"]})),
    "snapshot.copied[stopped]": (s_stopped, send("sandbox.snapshot", lambda w, c: {"name": c["target"]})),
    # The first record written after the restart: its temporary file is
    # left behind, and the next start must remove it.
    "write.temp_written:snapshots[snapshot of stopped]": (s_stopped, send("sandbox.snapshot", lambda w, c: {"name": c["target"]})),
    "export.writing": (s_snapshot_of_running, send("snapshot.export", lambda w, c: {
        "id": c["snap"], "path": c.setdefault("export", os.path.join(w.tmp, "exp-%s.tar.zst" % c["target"]))})),
    "export.written": (s_snapshot_of_running, send("snapshot.export", lambda w, c: {
        "id": c["snap"], "path": c.setdefault("export", os.path.join(w.tmp, "exp-%s.tar.zst" % c["target"]))})),
    "import.extracted": (s_export_file, send("snapshot.import", lambda w, c: {"path": c["export"]})),
    "import.recorded": (s_export_file, send("snapshot.import", lambda w, c: {"path": c["export"]})),
    "update.ports_applied": (s_running({"ports": [8000]}), send("sandbox.update", lambda w, c: {"name": c["target"], "ports": [8000, 9000]})),
    "update.resources_applied": (s_running(), send("sandbox.update", lambda w, c: {"name": c["target"], "resources": {"vcpus": 2}})),
    "update.policy_applied": (s_running(), send("sandbox.update", lambda w, c: {"name": c["target"], "networkPolicy": {"allow": ["other.public.test"]}})),
    # A resources change cut before or after its record: after the restart
    # the cgroup's CPU quota and memory limit are what sandbox.get says.
    "update.resources_applied[vcpus 3]": (s_running(), send("sandbox.update", lambda w, c: {"name": c["target"], "resources": {"vcpus": 3}})),
    "update.recorded[vcpus 3]": (s_running(), send("sandbox.update", lambda w, c: {"name": c["target"], "resources": {"vcpus": 3}})),
    "update.recorded": (s_running(), send("sandbox.update", lambda w, c: {"name": c["target"], "tags": {"k": "v"}})),
    "stop.signalled": (s_running({"persistent": True}), send("sandbox.stop", lambda w, c: {"name": c["target"]})),
    "stop.torn_down": (s_running({"persistent": True}), send("sandbox.stop", lambda w, c: {"name": c["target"]})),
    "delete.torn_down": (s_running(), send("sandbox.delete", lambda w, c: {"name": c["target"]})),
    "delete.removed": (s_running(), send("sandbox.delete", lambda w, c: {"name": c["target"]})),
    # A delete cut while files are going (here: after the disk image, before
    # the rest): the sandbox must not come back with part of its files.
    "delete.removing[persistent stopped]": (s_stopped, send("sandbox.delete", lambda w, c: {"name": c["target"]})),
    "delete.removing[persistent running]": (s_running({"persistent": True}), send("sandbox.delete", lambda w, c: {"name": c["target"]})),
    "delete.tombstoned[persistent stopped]": (s_stopped, send("sandbox.delete", lambda w, c: {"name": c["target"]})),
    # Delete answers once the sandbox is renamed aside; its files go after
    # (in the background): a crash there leaves a tombstone that start-up
    # finishes, and the sandbox never comes back.
    "delete.answered": (s_running(), send("sandbox.delete", lambda w, c: {"name": c["target"]})),
    # Delete answers once the session is fenced (its processes gone) and
    # its directories are renamed aside; its nftables objects, veth and
    # cgroup go after, in the background: a crash there must leave none of
    # them after the restart, and the sandbox must not come back.
    "delete.fenced": (s_running(), send("sandbox.delete", lambda w, c: {"name": c["target"]})),
    "delete.fenced[persistent running]": (s_running({"persistent": True}), send("sandbox.delete", lambda w, c: {"name": c["target"]})),
    "delete.fenced[stop of not persistent]": (s_running(), send("sandbox.stop", lambda w, c: {"name": c["target"]})),
    "delete.answered[persistent stopped]": (s_stopped, send("sandbox.delete", lambda w, c: {"name": c["target"]})),
    "delete.torn_down[stopped]": (s_stopped, send("sandbox.delete", lambda w, c: {"name": c["target"]})),
    "stop.signalled[not persistent]": (s_running(), send("sandbox.stop", lambda w, c: {"name": c["target"]})),
    # A stop of a sandbox that is not persistent ends it: the delete path.
    "delete.removed[stop of not persistent]": (s_running(), send("sandbox.stop", lambda w, c: {"name": c["target"]})),
    "create.configured[fork]": (s_running(), send("sandbox.fork", lambda w, c: {"sourceSandbox": c["target"], "name": c["target"] + "-f"})),
    "create.disk_backed[fork]": (s_running(), send("sandbox.fork", lambda w, c: {"sourceSandbox": c["target"], "name": c["target"] + "-f"})),
    "create.session_started[fork of stopped]": (s_stopped, send("sandbox.fork", lambda w, c: {"sourceSandbox": c["target"], "name": c["target"] + "-f"})),
    "resume.session_started": (s_stopped, send("command.run", lambda w, c: {"sandbox": c["target"], "cmd": "true"})),
    "resume.recorded": (s_stopped, send("command.run", lambda w, c: {"sandbox": c["target"], "cmd": "true"})),
    # A change of mode cut at each step of session_apply_policy: after the
    # restart the session enforces the stored policy (check_mode).
    "update.netd_stopped[allowlist to deny-all]": (s_running(), send("sandbox.update", lambda w, c: {"name": c["target"], "networkPolicy": "deny-all"})),
    "update.conntrack_flushed[allowlist to deny-all]": (s_running(), send("sandbox.update", lambda w, c: {"name": c["target"], "networkPolicy": "deny-all"})),
    "update.veth_created[deny-all to allowlist]": (s_running({"networkPolicy": "deny-all"}), send("sandbox.update", lambda w, c: {"name": c["target"], "networkPolicy": ALLOWLIST})),
    "update.rules_replaced[deny-all to allowlist]": (s_running({"networkPolicy": "deny-all"}), send("sandbox.update", lambda w, c: {"name": c["target"], "networkPolicy": ALLOWLIST})),
    "update.conntrack_flushed[deny-all to allow-all]": (s_running({"networkPolicy": "deny-all"}), send("sandbox.update", lambda w, c: {"name": c["target"], "networkPolicy": "allow-all"})),
    "update.policy_applied[deny-all to allow-all]": (s_running({"networkPolicy": "deny-all"}), send("sandbox.update", lambda w, c: {"name": c["target"], "networkPolicy": "allow-all"})),
    "update.rules_replaced[allowlist to allow-all]": (s_running(), send("sandbox.update", lambda w, c: {"name": c["target"], "networkPolicy": "allow-all"})),
    "update.netd_stopped[allow-all to allowlist]": (s_running({"networkPolicy": "allow-all"}), send("sandbox.update", lambda w, c: {"name": c["target"], "networkPolicy": ALLOWLIST})),
    "runtime_import.extracted": (s_runtime_tar, send("runtime.import", lambda w, c: {"name": c["runtime"], "path": c["path"]})),
    # Killed while init replays its kept command logs after the restart.
    "adopt.logs_replaying": (s_logged, at_start),
    # The warm pool's adoption (sandboxd/warmpool.c): cut before the state
    # directory's rename nothing is left; after it, the new sandbox runs.
    "pool.relabeled": s_pool_create(),
    "pool.network": s_pool_create(),
    "pool.network[allowlist]": s_pool_create(ALLOWLIST),
    "pool.recorded": s_pool_create(),
    "pool.run_renamed": s_pool_create(),
    "pool.run_renamed[allowlist]": s_pool_create(ALLOWLIST),
    "pool.committed": s_pool_create(),
    "pool.committed[allowlist]": s_pool_create(ALLOWLIST),
    "pool.adopted": s_pool_create(),
    # A deny-all pool's session taking a networked policy at adoption (its
    # CA made and bound, the address's flows forgotten), or a deny-all one
    # of an allow-all pool (its CA's bind removed).
    "pool.network[allowlist of a deny-all pool]": s_pool_create(ALLOWLIST),
    "pool.committed[allow-all of a deny-all pool]": s_pool_create(),
    "pool.relabeled[deny-all]": s_pool_create("deny-all"),
    "pool.committed[deny-all]": s_pool_create("deny-all"),
    # Killed while the daemon refills its pool (a pooled session's start
    # reaches the create points): nothing of it may be left.
    "create.session_started[pool refill]": (lambda w, d: {"target": w.name("tgt"), "dies_at_start": True}, at_start),
    "create.recorded[pool refill]": (lambda w, d: {"target": w.name("tgt"), "dies_at_start": True}, at_start),
    "runtime.renamed": (s_runtime_tar, send("runtime.import", lambda w, c: {"name": c["runtime"], "path": c["path"]})),
    # A watch just sent to init: after the restart no watcher is left in
    # the sandbox and a new watch works.
    "watch.sent": (s_watched, send("fs.watch", lambda w, c: {"sandbox": c["target"], "path": "/tmp",
                                                              "recursive": True})),
    # A volume's filesystem made, its record not yet written: after the
    # restart the volume is absent and nothing of it is left; a delete
    # cut after its record went: the volume never comes back.
    "volume.create": (s_volume, send("volume.create", lambda w, c: {"name": c["volume"], "sizeMiB": 16})),
    "volume.delete": (s_volume_made, send("volume.delete", lambda w, c: {"name": c["volume"]})),
    # A sandbox that mounts a volume, cut while it is made, resumed or
    # deleted: the volume stays, delete refuses it while a sandbox names
    # it, and nothing of the mount is left once both are gone.
    "create.session_started[volume]": (s_mounting("create"), create_mounting),
    "create.recorded[volume]": (s_mounting("create"), create_mounting),
    "resume.session_started[volume]": (s_mounting("stopped"), send("command.run", lambda w, c: {"sandbox": c["target"], "cmd": "true"})),
    "delete.torn_down[volume]": (s_mounting("running"), send("sandbox.delete", lambda w, c: {"name": c["target"]})),
    "delete.answered[volume]": (s_mounting("running"), send("sandbox.delete", lambda w, c: {"name": c["target"]})),
    # The storage pool's steps: a subvolume made before anything names it
    # (create, fork, restore), a layer snapshotted before its record (fork
    # and snapshot, running and stopped), a subvolume deleted before its
    # marker (delete, running and stopped).
    "storage.subvolume_made[storage pool]": s_create(),
    "storage.subvolume_made[storage pool fork]": (s_running(), send("sandbox.fork", lambda w, c: {"sourceSandbox": c["target"], "name": c["target"] + "-f"})),
    "storage.subvolume_made[storage pool restore]": s_create("snapshot"),
    "fork.frozen[storage pool]": (s_running(), send("sandbox.fork", lambda w, c: {"sourceSandbox": c["target"], "name": c["target"] + "-f"})),
    "fork.copied[storage pool]": (s_running(), send("sandbox.fork", lambda w, c: {"sourceSandbox": c["target"], "name": c["target"] + "-f"})),
    "fork.copied[storage pool stopped]": (s_stopped, send("sandbox.fork", lambda w, c: {"sourceSandbox": c["target"], "name": c["target"] + "-f"})),
    "create.session_started[storage pool fork of stopped]": (s_stopped, send("sandbox.fork", lambda w, c: {"sourceSandbox": c["target"], "name": c["target"] + "-f"})),
    "snapshot.copied[storage pool]": (s_running(), send("sandbox.snapshot", lambda w, c: {"name": c["target"]})),
    "snapshot.recorded[storage pool]": (s_running(), send("sandbox.snapshot", lambda w, c: {"name": c["target"]})),
    "snapshot.copied[storage pool stopped]": (s_stopped, send("sandbox.snapshot", lambda w, c: {"name": c["target"]})),
    "storage.subvolume_deleted[storage pool]": (s_running(), send("sandbox.delete", lambda w, c: {"name": c["target"]})),
    "storage.subvolume_deleted[storage pool stopped]": (s_stopped, send("sandbox.delete", lambda w, c: {"name": c["target"]})),
    "delete.removing[storage pool stopped]": (s_stopped, send("sandbox.delete", lambda w, c: {"name": c["target"]})),
}

# make check: every operation once, in well under 3 minutes.
SAMPLE = ["container.made", "container.init_deleted", "create.disk_backed", "disk.spare_mounted", "create.cloned[git]", "create.cloned[tarball]", "create.cloned[snapshot]", "create.session_started",
          "create.recorded", "netd.started", "resume.session_started", "fork.frozen", "fork.copied[stopped]",
          "snapshot.copied", "snapshot.copied[stopped]", "snapshot.precopy_copied", "fork.precopy_repeated", "export.writing", "import.extracted", "update.ports_applied",
          "update.resources_applied", "update.policy_applied", "update.recorded", "stop.signalled",
          "update.veth_created[deny-all to allowlist]",
          "delete.torn_down", "delete.answered", "delete.fenced", "runtime_import.extracted", "create.cancelled", "adopt.logs_replaying",
          "pool.run_renamed", "pool.committed", "volume.create", "volume.delete", "watch.sent",
          "storage.subvolume_made[storage pool fork]", "fork.copied[storage pool stopped]",
          "storage.subvolume_deleted[storage pool]"]


# ---------------------------------------------------------------- checks

def session_cgroups(w):
    """Every cgroup directory of a session of this world's daemons (below a
    sandboxd-sessions* dir inside the world's own cgroups). Never the whole
    machine: another test run's sessions are none of this run's business,
    and thawing them (frozen_cgroups' caller does) broke that run's own
    checks of a session left frozen by a killed daemon."""
    out = []
    # Without cgroups of its own (none could be made) the world's daemons
    # nest under this runner's cgroups: those, still not the machine's.
    tops = w.cgroup_dirs or [os.path.join(mnt, own.lstrip("/")) for mnt, own in W._cgroup_hierarchies()]
    for mnt in tops:
        for root, dirs, _files in W.walk(mnt):
            base = os.path.basename(root)
            if base.startswith("sandboxd-sessions"):
                out += [os.path.join(root, x) for x in dirs]
                dirs[:] = []
    return out


def frozen_cgroups(w):
    """Frozen session cgroups of world `w` (other worlds on the machine,
    other runs' included, are none of this run's business)."""
    bad = []
    for cg in session_cgroups(w):
        for f, want in (("cgroup.freeze", "0"), ("freezer.state", "THAWED")):
            try:
                with open(os.path.join(cg, f)) as fh:
                    v = fh.read().strip()
            except OSError:
                continue
            if v != want:
                bad.append("%s/%s = %s" % (cg, f, v))
    return bad


def cgroup_key(d, name):
    """The key naming sandbox `name`'s session cgroup: the "cgroup" its
    session record (<runDir>/sandboxes/<name>/session.json) keeps, which a
    sandbox adopted from the warm pool has from its refill (a cgroup
    cannot be renamed); else its name. None when the record is missing or
    unreadable: a running sandbox has one."""
    try:
        with open(os.path.join(d.run_dir, "sandboxes", name, "session.json")) as f:
            rec = json.load(f)
    except (OSError, ValueError):
        return None
    key = rec.get("cgroup") if isinstance(rec, dict) else None
    return key if isinstance(key, str) and key else name


def cgroup_dirs_of(w, key):
    """The session cgroup directories (one per hierarchy) named `key`."""
    return [cg for cg in session_cgroups(w) if os.path.basename(cg) == key]


def memory_max_bytes(w, name):
    """The memory limit of the session cgroup named `name` (its cgroup_key)
    in bytes, from memory.max (v2) or memory.limit_in_bytes (v1); None if
    not found."""
    for cg in cgroup_dirs_of(w, name):
        for f in ("memory.max", "memory.limit_in_bytes"):
            try:
                with open(os.path.join(cg, f)) as fh:
                    v = fh.read().strip()
                if v != "max":
                    return int(v)
            except (OSError, ValueError):
                pass
    return None


def cpu_quota_vcpus(w, name):
    """The CPU quota of a session cgroup, in vCPUs (quota /
    period), from cpu.max (v2) or cpu.cfs_quota_us (v1); None if not found.
    `name` is the cgroup's key (cgroup_key)."""
    for cg in cgroup_dirs_of(w, name):
        try:
            with open(os.path.join(cg, "cpu.max")) as f:
                q, per = f.read().split()
            if q != "max":
                return int(q) / int(per)
        except (OSError, ValueError):
            pass
        try:
            with open(os.path.join(cg, "cpu.cfs_quota_us")) as f:
                q = int(f.read())
            with open(os.path.join(cg, "cpu.cfs_period_us")) as f:
                per = int(f.read())
            if q > 0:
                return q / per
        except (OSError, ValueError):
            pass
    return None


def netd_processes(d):
    """pids of sandbox-netd processes of this build started under this daemon's run dir."""
    exe = os.path.realpath(os.path.join(W.BUILD, "sandbox-netd"))
    pids = []
    for p in os.listdir("/proc"):
        if not p.isdigit():
            continue
        try:
            if os.path.realpath("/proc/%s/exe" % p) != exe:
                continue
            with open("/proc/%s/cmdline" % p, "rb") as f:
                if d.run_dir.encode() in f.read():
                    pids.append(int(p))
        except OSError:
            continue
    return pids


def state_entries(d, sub):
    try:
        return sorted(os.listdir(os.path.join(d.state_dir, sub)))
    except FileNotFoundError:
        return []


def check_consistent(w, d, ctx, problems):
    listed = {s["name"]: s for s in res(d, "sandbox.list")["sandboxes"]}
    on_disk = set(state_entries(d, "sandboxes"))
    if set(listed) != on_disk:
        problems.append("sandbox.list %s != state dir %s" % (sorted(listed), sorted(on_disk)))
    for name, s in listed.items():
        if s["status"] == "running":
            try:
                r = d.rpc("command.run", {"sandbox": name, "cmd": "sh", "args": ["-c", "echo ok"]}, 30)
            except Exception as e:
                r = {"error": repr(e)}
            if "error" in r or r["result"].get("exitCode") != 0:
                problems.append("sandbox %s is listed running but runs no command: %s" % (name, json.dumps(r)[:300]))
            # Every port get shows has its endpoint listening.
            for port in s.get("ports") or []:
                ep = port.get("endpoint")
                if not ep:
                    problems.append("sandbox %s: port %s has no endpoint" % (name, port.get("port")))
                    continue
                host, _, num = ep.rpartition(":")
                r = w.run_in_host(["python3", "-c", "import socket,sys; socket.create_connection((sys.argv[1], int(sys.argv[2])), 5)",
                                   host, num], timeout=30)
                if r.returncode != 0:
                    problems.append("sandbox %s: port %s endpoint %s refuses connections" % (name, port.get("port"), ep))
            # What get says is what the kernel enforces.
            want = (s.get("resources") or {}).get("vcpus")
            # Its cgroup by the key its record names (an adopted pooled
            # session's is the pool's): one not found fails the check
            # rather than skipping it.
            key = cgroup_key(d, name)
            if key is None:
                problems.append("sandbox %s is listed running but has no readable session record" % name)
                continue
            if want is not None and not cgroup_dirs_of(w, key):
                problems.append("sandbox %s: no session cgroup named %s (its record's key) to check its limits" % (name, key))
                continue
            got = cpu_quota_vcpus(w, key)
            if want is not None and got is not None and abs(got - want) > 0.01:
                problems.append("sandbox %s: get says %s vCPUs, its cgroup's CPU quota is %.2f" % (name, want, got))
            # ... and its memory limit (vcpus x 2048 MiB, docs/API.md).
            mem = memory_max_bytes(w, key)
            if want is not None and mem is not None and mem != want * 2048 * 1024 * 1024:
                problems.append("sandbox %s: get says %s vCPUs, its cgroup's memory limit is %d bytes (want %d)"
                                % (name, want, mem, want * 2048 * 1024 * 1024))
        elif s["status"] not in ("stopped",):
            problems.append("sandbox %s is %s after the restart" % (name, s["status"]))
    vols = {v["name"] for v in res(d, "volume.list")["volumes"]}
    on_disk = set(state_entries(d, "volumes"))
    if vols != on_disk:
        problems.append("volume.list %s != state dir %s" % (sorted(vols), sorted(on_disk)))
    if ctx.get("volume") in vols:
        problems.append("a %s cut at its fault point left volume %s" % (
            "delete" if "delete" in ctx.get("label", "") else "create", ctx["volume"]))
    snaps = {s["id"] for s in res(d, "snapshot.list")["snapshots"]}
    on_disk = {f[:-5] for f in state_entries(d, "snapshots") if f.endswith(".json")}
    if snaps != on_disk:
        problems.append("snapshot.list %s != state dir %s" % (sorted(snaps), sorted(on_disk)))
    rts = {r["name"] for r in res(d, "runtime.list")["runtimes"]}
    # Only the runtimes this matrix imports (named "...-rt"): the daemon's
    # own (host) may be kept under other names.
    on_disk = {e for e in state_entries(d, "runtimes") if "-rt" in e and not e.endswith(".json")
               and os.path.isdir(os.path.join(d.state_dir, "runtimes", e))}
    if not on_disk <= rts | {"host"}:
        problems.append("runtime directories nothing lists: %s" % sorted(on_disk - rts))
    exp = ctx.get("export")
    if exp and os.path.lexists(exp) and not ctx.get("export_preexisting"):
        r = d.rpc("snapshot.import", {"path": exp}, 120)
        if "error" in r:
            problems.append("the export left %s (%d bytes), which does not import: %s"
                            % (exp, os.path.getsize(exp), json.dumps(r["error"])[:200]))
    return listed


def check_mode(d, name, problems):
    """What the sandbox's stored policy says is what it gets: deny-all
    reaches nothing, allow-all and the allowlist resolve api.public.test
    and reach it; only allow-all resolves other names."""
    r = d.rpc("sandbox.get", {"name": name}, 30)
    if "error" in r or r["result"]["status"] != "running":
        return
    pol = r["result"]["networkPolicy"]
    t0 = time.monotonic()
    script = ("getent ahostsv4 api.public.test >/dev/null && echo api-resolves; "
              "getent ahostsv4 other.public.test >/dev/null && echo other-resolves; "
              "timeout 5 bash -c 'echo > /dev/tcp/%s/%d' 2>/dev/null && echo api-reached; true"
              % (W.PUB_API_ADDR, W.LISTEN_PORT))
    r = d.rpc("command.run", {"sandbox": name, "cmd": "sh", "args": ["-c", script]}, 60)
    out = ""
    if "result" in r:
        logs = d.rpc("command.logs", {"cmdId": r["result"]["cmdId"]}, 30)
        out = base64.b64decode(logs.get("result", {}).get("stdout") or "").decode()
    got = set(out.split())
    if isinstance(pol, str):
        want = set() if pol == "deny-all" else {"api-resolves", "other-resolves", "api-reached"}
    else:
        allowed = set(pol.get("allow") or [])
        want = ({"api-resolves", "api-reached"} if "api.public.test" in allowed else set()) | \
            ({"other-resolves"} if "other.public.test" in allowed else set())
    if os.environ.get("FAULTS_DEBUG"):
        print("check_mode %s: %s in %.1fs" % (name, sorted(got), time.monotonic() - t0))
    if got != want:
        problems.append("sandbox %s under %s: the session shows %s, want %s" % (name, json.dumps(pol), sorted(got),
                                                                                  sorted(want)))


def check_witness(d, name, cmd_id, problems):
    try:
        n0 = counter(d, name)
        poll(lambda: counter(d, name) > max(n0, 0), 30, "the witness's counter rises")
        r = res(d, "command.run", {"sandbox": name, "cmd": "sh", "args": ["-c", "echo alive"]}, 30)
        expect(r.get("exitCode") == 0, "a new command in the witness exits 0: %r" % r)
        got = res(d, "command.get", {"cmdId": cmd_id})
        expect(got.get("exitCode") is None, "the witness's command is still running: %r" % got)
        logs = res(d, "command.logs", {"cmdId": cmd_id})
        expect("stdout" in logs, "command.logs answers: %r" % logs)
        short = res(d, "command.run", {"sandbox": name, "cmd": "sh", "args": ["-c", "exit 3"], "detached": True})
        fin = res(d, "command.wait", {"cmdId": short["cmdId"]}, 30)
        expect(fin.get("exitCode") == 3, "command.wait of a new command: %r" % fin)
        res(d, "command.kill", {"cmdId": cmd_id, "signal": "TERM"})
        fin = res(d, "command.wait", {"cmdId": cmd_id}, 30)
        expect(fin.get("exitCode") == 128 + 15, "command.wait of the witness's command: %r" % fin)
    except Fail as e:
        problems.append("witness: %s" % e)


def delete_everything(d, problems):
    for s in res(d, "sandbox.list")["sandboxes"]:
        r = d.rpc("sandbox.delete", {"name": s["name"]}, 120)
        if "error" in r:
            problems.append("delete %s: %s" % (s["name"], json.dumps(r["error"])[:200]))
    for s in res(d, "snapshot.list")["snapshots"]:
        r = d.rpc("snapshot.delete", {"id": s["id"]}, 120)
        if "error" in r:
            problems.append("snapshot.delete %s: %s" % (s["id"], json.dumps(r["error"])[:200]))
    for rt in res(d, "runtime.list")["runtimes"]:
        if rt["name"] != "host":
            d.rpc("runtime.delete", {"name": rt["name"]}, 120)
    for v in res(d, "volume.list")["volumes"]:
        r = d.rpc("volume.delete", {"name": v["name"]}, 120)
        if "error" in r:
            problems.append("volume.delete %s: %s" % (v["name"], json.dumps(r["error"])[:200]))


def check_clean(w, d, problems):
    try:
        leaks.check(w, "all", d)
    except AssertionError as e:
        problems.append(str(e))
    left = netd_processes(d)
    if left:
        problems.append("sandbox-netd left running: pids %s" % left)
    layers = state_entries(d, "layers")
    if layers:
        problems.append("layers left in the state dir: %s" % layers[:5])
    # Delete answers before the run directory (renamed aside) is removed,
    # as leaks.check allows for the rest: polled, with a deadline.
    def run_entries():
        try:
            return sorted(os.listdir(os.path.join(d.run_dir, "sandboxes")))
        except FileNotFoundError:
            return []
    try:
        poll(lambda: not run_entries(), 20, "run directories removed")
    except Fail:
        pass
    run_left = run_entries()
    if run_left:
        problems.append("run directories left: %s" % run_left[:5])
    if state_entries(d, "volumes"):
        problems.append("volume directories left: %s" % state_entries(d, "volumes")[:5])
    for sub in ("runtimes", "snapshots", "layers", "disk-templates", "volumes"):
        tmp = [e for e in state_entries(d, sub) if ".tmp" in e]
        if tmp:
            problems.append("temporary files left in %s: %s" % (sub, tmp))


def end_leftovers(d):
    """After a failed check: end the netd processes this daemon left (by pid)."""
    for pid in netd_processes(d):
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def run_point(w, label):
    point = label.split("[")[0]
    setup, trigger = SCENARIOS[label]
    problems = []
    d = w.start_sandboxd(daemon_config(label), tag="f")
    try:
        witness = w.name("wit")
        res(d, "sandbox.create", {"name": witness})
        cmd_id = res(d, "command.run", {"sandbox": witness, "cmd": "sh", "args": ["-c", COUNTER],
                                        "detached": True})["cmdId"]
        poll(lambda: counter(d, witness) > 0, 30, "the witness's counter starts")
        ctx = setup(w, d)
        ctx["label"] = label
        if ctx.get("export"):
            ctx["export_preexisting"] = True
        expect(d.stop() == 0, "the fault-free daemon stops with status 0")
        try:
            d.start(binary=W.FAULTS_SANDBOXD, env={"SANDBOXD_FAULT": point})
        except W.WorldError:
            # A point reached while adopting may come before the socket
            # accepts.
            if not (ctx.get("dies_at_start") and d.proc.returncode == -signal.SIGKILL):
                raise
        conn = trigger(w, d, ctx) if d.proc.poll() is None else None
        try:
            d.proc.wait(90)
        except Exception:
            raise Fail("the daemon did not reach %s (still running after 90 s)" % point)
        finally:
            if conn:
                conn.close()
        expect(d.proc.returncode == -signal.SIGKILL,
               "the daemon died of SIGKILL at %s (status %s)" % (point, d.proc.returncode))
        if ctx.get("export_preexisting") and point.startswith("export."):
            ctx["export_preexisting"] = False
        if pool_config(label):
            d.config = None
        d.start()
        frozen = frozen_cgroups(w)
        if frozen:
            problems.append("frozen after the restart: %s" % frozen[:4])
            for cg in frozen:  # thaw, so that deletes can finish
                path = cg.split(" = ")[0]
                try:
                    with open(path, "w") as f:
                        f.write("0" if path.endswith("cgroup.freeze") else "THAWED")
                except OSError:
                    pass
        listed = {}
        try:
            listed = check_consistent(w, d, ctx, problems)
            if point in ("delete.tombstoned", "delete.answered", "delete.fenced", "delete.removing",
                         "storage.subvolume_deleted") and ctx["target"] in listed:
                problems.append("a delete cut at %s brought sandbox %s back (%s)"
                                % (point, ctx["target"], listed[ctx["target"]].get("status")))
            if point.startswith("pool."):
                want = point in ("pool.committed", "pool.adopted")
                got = listed.get(ctx["target"], {}).get("status")
                if (got == "running") != want or (not want and got is not None):
                    problems.append("a create cut at %s left sandbox %s %s (want %s)"
                                    % (point, ctx["target"], got or "absent", "running" if want else "absent"))
        except Fail as e:
            problems.append(str(e))
        if point.startswith("update.") or point.startswith("pool."):
            check_mode(d, ctx["target"], problems)
        check_logs(d, ctx, problems)
        try:
            check_mounted(d, ctx, listed, problems)
        except Fail as e:
            problems.append(str(e))
        check_watch(d, ctx, listed, problems)
        check_witness(d, witness, cmd_id, problems)
        check_spare(d, problems)
        delete_everything(d, problems)
        if "[storage pool" in label:
            check_pool_empty(d, problems)
        check_clean(w, d, problems)
    except Fail as e:
        problems.append(str(e))
    except Exception:
        problems.append(traceback.format_exc(limit=3))
    finally:
        if problems:
            problems.append("daemon log tail:\n" + d.log_tail(25))
        if d.alive():
            try:
                delete_everything(d, [])
            except Exception:
                pass
        end_leftovers(d)
        w.stop_sandboxd(d)
    return problems


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--sample", action="store_true", help="the make check sample")
    ap.add_argument("filter", nargs="*", help="substrings of point names")
    a = ap.parse_args()
    labels = SAMPLE if a.sample else list(SCENARIOS)
    if a.filter:
        labels = [l for l in labels if any(f in l for f in a.filter)]
    failed, xfail, xpass = [], [], []
    t0 = time.monotonic()
    with W.World() as w:
        for label in labels:
            t = time.monotonic()
            problems = run_point(w, label)
            point = label.split("[")[0]
            known = KNOWN.get(label) or (KNOWN.get(point) if "[" not in label else None)
            took = time.monotonic() - t
            if problems and known:
                xfail.append(label)
                print("XFAIL %-28s %5.1fs  known: %s\n      %s" % (label, took, known, problems[0][:300]))
            elif problems:
                failed.append(label)
                print("FAIL  %-28s %5.1fs" % (label, took))
                for p in problems:
                    print("      " + p.replace("\n", "\n      "))
            elif known:
                xpass.append(label)
                print("XPASS %-28s %5.1fs  (listed in KNOWN as %s: remove the mark)" % (label, took, known))
            else:
                print("ok    %-28s %5.1fs" % (label, took))
            sys.stdout.flush()
    print("faults: %d points, %d ok, %d failed, %d expected failures, %d unexpected passes, %.0fs"
          % (len(labels), len(labels) - len(failed) - len(xfail) - len(xpass), len(failed), len(xfail),
             len(xpass), time.monotonic() - t0))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
