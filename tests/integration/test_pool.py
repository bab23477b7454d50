"""The opt-in storage pool (daemon.json storage.pool, libcore/pool.h): each
sandbox's disk is a Btrfs subvolume with a quota of its diskMiB, forks and
snapshots are read-only snapshots, admission never commits more than the
pool holds, a restart keeps everything, and nothing is left behind (no
subvolume, mount or loop device)."""
import os
import subprocess

import world as W
from common import expect, expect_eq, poll

POOL_MIB = 1024
DISK_MIB = 64


def _loops_of(path):
    """Loop devices backed by `path` (losetup -j)."""
    p = subprocess.run(["losetup", "-n", "-O", "NAME", "-j", path], capture_output=True, text=True)
    return [line.strip() for line in p.stdout.splitlines() if line.strip()]


def _in_daemon(d, *argv):
    p = subprocess.run(["nsenter", "-t", str(d.pid), "-m", "--"] + list(argv), capture_output=True,
                       text=True, timeout=60)
    return p.returncode, p.stdout, p.stderr


def _pool_entries(d):
    """(subvolumes in sandboxes/, layers in layers/) of the pool, as the
    daemon's mount namespace sees them."""
    out = []
    for kind in ("sandboxes", "layers"):
        code, o, e = _in_daemon(d, "ls", "-A", os.path.join(d.state_dir, "pool", kind))
        expect_eq(code, 0, "ls the pool's %s (%s)" % (kind, e.strip()))
        out.append(sorted(o.split()))
    return tuple(out)


def _sh(d, name, script, timeout=120):
    return d.ctl("exec", name, "--", "sh", "-c", script, timeout=timeout)


def _sh_ok(d, name, script):
    code, out, err = _sh(d, name, script)
    expect_eq(code, 0, "exec %r in %s (%s %s)" % (script, name, out.strip()[:200], err.strip()[:300]))
    return out


class _Pool:
    """A daemon of its own with a storage pool; everything it made is
    deleted and the pool's loop device checked gone at the end, even on
    failure."""

    def __init__(self, world, tag, size_mib=POOL_MIB, **start):
        world.stop_sandboxd()  # one daemon per network namespace
        self.world = world
        self.d = world.add_sandboxd(config={"storage": {"pool": {"sizeMiB": size_mib}}, "diskMiB": DISK_MIB},
                                    tag=tag)
        self.sandboxes, self.snapshots = [], []
        self.image = os.path.join(self.d.state_dir, "pool.img")
        self.start = start

    def __enter__(self):
        self.d.start(**self.start)
        return self

    def create(self, tag, **params):
        name = self.world.name(tag)
        self.sandboxes.append(name)
        p = dict({"name": name, "networkPolicy": "deny-all"}, **params)
        return name, self.d.rpc("sandbox.create", p, 180)

    def create_ok(self, tag, **params):
        name, msg = self.create(tag, **params)
        expect("result" in msg, "create %s:" % name, msg.get("error"))
        return name

    def fork_ok(self, src, tag):
        name = self.world.name(tag)
        self.sandboxes.append(name)
        msg = self.d.rpc("sandbox.fork", {"sourceSandbox": src, "name": name}, 180)
        expect("result" in msg, "fork %s:" % src, msg.get("error"))
        return name

    def snapshot_ok(self, src):
        msg = self.d.rpc("sandbox.snapshot", {"name": src}, 180)
        expect("result" in msg, "snapshot %s:" % src, msg.get("error"))
        self.snapshots.append(msg["result"]["id"])
        return msg["result"]["id"]

    def pool_info(self):
        return self.d.rpc_result("daemon.info", {})["storage"]["pool"]

    def cleanup(self):
        d = self.d
        if not d.alive():
            d.start()
        for n in self.sandboxes:
            d.rpc("sandbox.delete", {"name": n}, 120)
        for s in self.snapshots:
            d.rpc("snapshot.delete", {"id": s}, 60)

    def __exit__(self, *exc):
        try:
            try:
                self.cleanup()
            finally:
                self.world.stop_sandboxd(self.d)
            # The pool's mount lived in the daemon's mount namespace, its
            # loop device detaches itself (LO_FLAGS_AUTOCLEAR) once the
            # last user is gone.
            poll(lambda: not _loops_of(self.image), 30, "the pool's loop device to go")
            with open("/proc/self/mountinfo") as f:
                left = [line for line in f if os.path.join(self.d.state_dir, "pool") in line]
            expect_eq(left, [], "pool mounts left on the host")
        finally:
            for dev in _loops_of(self.image):
                subprocess.run(["losetup", "-d", dev], capture_output=True)
            if os.path.exists(self.image):
                os.unlink(self.image)
            self.world.start_sandboxd()
        return False


def test_pool_disks_are_bounded_each_alone_and_reported(world):
    with _Pool(world, "pool") as p:
        a = p.create_ok("pa")
        b = p.create_ok("pb")
        info = p.pool_info()
        expect_eq((info["sizeBytes"], info["disks"]), (POOL_MIB << 20, 2), "daemon.info storage.pool")
        expect(info["committedBytes"] >= 2 * (DISK_MIB << 20), "committed counts both disks:", info)
        # A writes past its diskMiB: EDQUOT (or ENOSPC) for it alone.
        code, out, err = _sh(p.d, a, "dd if=/dev/zero of=/workspace/big bs=1M count=%d 2>&1; sync"
                             % (DISK_MIB * 2))
        expect(code != 0 or "quota" in out.lower() or "space" in out.lower(),
               "a write past diskMiB failed:", code, out[-300:], err[-200:])
        expect("Disk quota exceeded" in out or "No space left" in out,
               "the writer got EDQUOT or ENOSPC:", out[-300:])
        # B still writes and reads back; A keeps what it wrote and works.
        _sh_ok(p.d, b, "dd if=/dev/zero of=/workspace/f bs=1M count=16 2>/dev/null && sync && "
               "echo hello > /workspace/h")
        expect_eq(_sh_ok(p.d, b, "cat /workspace/h; stat -c %s /workspace/f"), "hello\n16777216\n",
                  "the other sandbox's files")
        used = p.d.rpc_result("sandbox.get", {"name": b})["usage"]["diskUsedBytes"]
        expect(16 << 20 <= used < DISK_MIB << 20, "diskUsedBytes of a pool disk after 16 MiB:", used)
        _sh_ok(p.d, a, "rm /workspace/big && echo again > /workspace/a")
        expect_eq(_sh_ok(p.d, a, "cat /workspace/a"), "again\n", "the writer after freeing its disk")
        subvols, _layers = _pool_entries(p.d)
        expect_eq(len(subvols), 2, "one subvolume per pool sandbox: %s" % subvols)
        for n in (a, b):
            msg = p.d.rpc("sandbox.delete", {"name": n}, 120)
            expect("result" in msg, "delete %s:" % n, msg.get("error"))
        p.sandboxes = []
        # The files go after delete has answered (session.c tombstone_work).
        poll(lambda: _pool_entries(p.d) == ([], []), 60, "the pool's subvolumes to go after the deletes")


test_pool_disks_are_bounded_each_alone_and_reported.timeout = 600


def test_pool_fork_and_snapshot_carry_files_and_survive_a_restart(world):
    with _Pool(world, "poolf") as p:
        src = p.create_ok("ps", persistent=True)
        _sh_ok(p.d, src, "echo one > /workspace/one && dd if=/dev/urandom of=/workspace/r bs=1M count=4 "
               "2>/dev/null && md5sum /workspace/r > /workspace/r.md5")
        # Running source: fork and snapshot (frozen, snapshotted, thawed).
        f1 = p.fork_ok(src, "pf1")
        s1 = p.snapshot_ok(src)
        _sh_ok(p.d, src, "echo two > /workspace/two")
        r1 = p.create_ok("pr1", source={"type": "snapshot", "snapshotId": s1})
        for n in (f1, r1):
            expect_eq(_sh_ok(p.d, n, "cat /workspace/one; md5sum -c /workspace/r.md5 >/dev/null && echo ok; "
                                     "test -e /workspace/two || echo no-two"),
                      "one\nok\nno-two\n", "files of %s (captured while the source ran)" % n)
        # Stopped source: same, and the source keeps its files.
        msg = p.d.rpc("sandbox.stop", {"name": src}, 120)
        expect("result" in msg, "stop:", msg.get("error"))
        f2 = p.fork_ok(src, "pf2")
        s2 = p.snapshot_ok(src)
        r2 = p.create_ok("pr2", source={"type": "snapshot", "snapshotId": s2})
        for n in (f2, r2, src):
            expect_eq(_sh_ok(p.d, n, "cat /workspace/one /workspace/two"), "one\ntwo\n",
                      "files of %s (captured while the source was stopped)" % n)
        # A pool layer exports like any other, and its import restores.
        path = os.path.join(p.d.dir, "pool-export.tar")
        code, _o, err = p.d.ctl("snapshots", "export", s2, path)
        expect_eq(code, 0, "export of a pool snapshot (%s)" % err.strip())
        imp = p.d.rpc_result("snapshot.import", {"path": path})["id"]
        p.snapshots.append(imp)
        os.unlink(path)
        r4 = p.create_ok("pr4", source={"type": "snapshot", "snapshotId": imp})
        expect_eq(_sh_ok(p.d, r4, "cat /workspace/one /workspace/two"), "one\ntwo\n", "a restore of the import")
        # The fork writes apart from its source.
        _sh_ok(p.d, f2, "echo mine > /workspace/one")
        expect_eq(_sh_ok(p.d, src, "cat /workspace/one"), "one\n", "the source after its fork wrote")
        _subvols, layers = _pool_entries(p.d)
        expect(len(layers) >= 4, "the captures are layers in the pool:", layers)
        # A restart keeps everything (running sessions are re-adopted).
        p.d.stop()
        p.d.start()
        for n in (f1, r1):
            expect_eq(_sh_ok(p.d, n, "cat /workspace/one"), "one\n", "%s after a restart" % n)
        expect_eq(_sh_ok(p.d, f2, "cat /workspace/one /workspace/two"), "mine\ntwo\n", "fork after a restart")
        r3 = p.create_ok("pr3", source={"type": "snapshot", "snapshotId": s2})
        expect_eq(_sh_ok(p.d, r3, "cat /workspace/two"), "two\n", "a restore after a restart")
        p.cleanup()
        p.sandboxes, p.snapshots = [], []
        poll(lambda: _pool_entries(p.d) == ([], []), 60, "the pool's subvolumes and layers to go")


test_pool_fork_and_snapshot_carry_files_and_survive_a_restart.timeout = 900


def test_pool_admission_refuses_past_its_size(world):
    with _Pool(world, "poola", size_mib=512) as p:
        free = p.pool_info()["freeBytes"]
        # What is free, less the 4 MiB each disk is given for the daemon's
        # writes at a start (pool.h CORE_POOL_RESERVE_BYTES).
        big = (free >> 20) - 4
        expect(big >= 256, "a 512 MiB pool leaves most of it free:", free)
        name, msg = p.create("pbig", resources={"diskMiB": big + 1})
        err = msg.get("error") or {}
        expect_eq(((err.get("data") or {}).get("reason"), (err.get("data") or {}).get("field")),
                  ("limit_exceeded", "resources.diskMiB"), "a disk past the pool: %s" % err)
        expect("free" in err.get("message", ""), "the refusal says what is free:", err)
        fit = p.create_ok("pfit", resources={"diskMiB": big})
        _sh_ok(p.d, fit, "dd if=/dev/zero of=/workspace/f bs=1M count=64 2>/dev/null && sync")
        _n2, msg = p.create("pmore", resources={"diskMiB": 16})
        expect_eq(((msg.get("error") or {}).get("data") or {}).get("reason"), "limit_exceeded",
                  "a second disk once the pool is committed")
        subvols, _l = _pool_entries(p.d)
        expect_eq(len(subvols), 1, "refused creates left no subvolume: %s" % subvols)
        # Once the deleted sandbox's subvolume is gone from the pool's
        # directory, a disk of the same size is admitted at once: admission
        # waits for the Btrfs cleaner to free what the deleted subvolume
        # still held rather than refusing until the next commit.
        expect("result" in p.d.rpc("sandbox.delete", {"name": fit}, 120), "delete the big sandbox")
        poll(lambda: _pool_entries(p.d)[0] == [], 60, "the deleted sandbox's subvolume to go")
        again = p.create_ok("pagain", resources={"diskMiB": big})
        _sh_ok(p.d, again, "echo ok > /workspace/ok")


test_pool_admission_refuses_past_its_size.timeout = 600


def test_pool_kill9_between_snapshot_and_record_leaves_no_subvolume(world):
    """kill -9 once the read-only snapshot exists and before any record
    names it (fault points snapshot.copied and fork.copied, the source
    still frozen): the restart deletes the orphan layer, thaws the source
    and keeps its files."""
    if not os.access(W.FAULTS_SANDBOXD, os.X_OK):
        raise W.Skip("build/faults/sandboxd is not built (make build/faults/sandboxd)")
    with _Pool(world, "poolk") as p:
        src = p.create_ok("pk", persistent=True)
        _sh_ok(p.d, src, "echo kept > /workspace/k")
        for point, method, params in (("snapshot.copied", "sandbox.snapshot", {"name": src}),
                                      ("fork.copied", "sandbox.fork",
                                       {"sourceSandbox": src, "name": world.name("pkf")})):
            p.d.stop()
            p.d.start(binary=W.FAULTS_SANDBOXD, env={"SANDBOXD_FAULT": point})
            try:
                p.d.rpc(method, params, 120)
            except Exception:
                pass  # the connection ends with the daemon
            p.d.proc.wait(60)
            expect_eq(p.d.proc.returncode, -9, "sandboxd killed at %s" % point)
            p.d.start()
            with open(p.d.log_path, errors="replace") as f:
                swept = f.read().count("storage pool: removed 1 subvolume(s) nothing refers to")
            expect_eq(swept, 1 + (method == "sandbox.fork"), "the restart after %s deleted the orphan "
                      "layer:\n%s" % (point, p.d.log_tail(20)))
            subvols, layers = _pool_entries(p.d)
            expect_eq((len(subvols), layers), (1, []), "the pool after a kill at %s: %s" % (point, subvols))
            expect_eq(_sh_ok(p.d, src, "cat /workspace/k"), "kept\n", "the source after a kill at %s" % point)
            expect("result" not in p.d.rpc("sandbox.get", {"name": params.get("name", "")}) or
                   method == "sandbox.snapshot", "no fork was recorded")
        expect_eq(p.d.rpc_result("snapshot.list", {}).get("snapshots"), [], "no snapshot was recorded")
        # Without storage.pool the state directory is refused, naming the
        # key and the sandbox; with it again everything is there.
        p.d.stop()
        pool_config = p.d.config
        p.d.config = {"diskMiB": DISK_MIB}
        try:
            p.d.start()
            started = True
        except W.WorldError:
            started = False
        finally:
            p.d.config = pool_config
        expect(not started, "a daemon without storage.pool started over pool sandboxes")
        with open(p.d.log_path, errors="replace") as f:
            log = f.read()
        expect("storage.pool: the disk of sandbox '%s'" % src in log, "the refusal names the key and the "
               "sandbox:", p.d.log_tail(5))
        p.d.start()
        expect_eq(_sh_ok(p.d, src, "cat /workspace/k"), "kept\n", "the source once storage.pool is back")


test_pool_kill9_between_snapshot_and_record_leaves_no_subvolume.timeout = 600


def test_pool_layers_are_counted_by_their_bytes_not_their_sources_disk(world):
    """A capture is a read-only snapshot, whose qgroup inherits the source's
    limit from Btrfs: counted as the source's whole diskMiB, three
    snapshots of a sandbox with 8 MiB written on a 256 MiB disk did not fit
    a 1 GiB pool. A layer never grows: it counts the bytes it references."""
    with _Pool(world, "pooll") as p:
        src = p.create_ok("pl", resources={"diskMiB": 256})
        _sh_ok(p.d, src, "head -c 8M /dev/urandom > /workspace/r && sync")
        before = p.pool_info()["committedBytes"]
        for _ in range(3):
            p.snapshot_ok(src)
        grown = p.pool_info()["committedBytes"] - before
        expect(grown < 3 * (32 << 20), "three layers of 8 MiB committed %d MiB" % (grown >> 20))
        f = p.fork_ok(src, "plf")
        expect_eq(_sh_ok(p.d, f, "stat -c %s /workspace/r"), "8388608\n", "the fork's file")


test_pool_layers_are_counted_by_their_bytes_not_their_sources_disk.timeout = 600
