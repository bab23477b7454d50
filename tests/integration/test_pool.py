"""The opt-in storage pool (daemon.json storage.pool, libcore/pool.h): each
sandbox's disk is a Btrfs subvolume with a quota of its diskMiB, forks and
snapshots are read-only snapshots, admission never commits more than the
pool holds, a restart keeps everything, and nothing is left behind (no
subvolume, mount or loop device)."""
import base64
import json
import os
import re
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


def test_pool_added_to_a_state_directory_keeps_serving_its_image_sandboxes(world):
    """storage.pool added to daemon.json over a state directory whose
    sandboxes have disk images: both kinds are served side by side. The
    image sandboxes keep their files, run, stop and resume, fork and
    snapshot (their copies' disks are the pool's), and a new sandbox's
    disk is the pool's."""
    with _Pool(world, "poolm") as p:
        pool_config = p.d.config
        p.d.stop()
        p.d.config = {"diskMiB": DISK_MIB}
        p.d.start()
        run = p.create_ok("pmr", persistent=True)
        stopped = p.create_ok("pms", persistent=True)
        for n in (run, stopped):
            _sh_ok(p.d, n, "echo %s > /workspace/mine && sync" % n)
        expect("result" in p.d.rpc("sandbox.stop", {"name": stopped}, 120), "stop %s" % stopped)
        p.d.stop()
        p.d.config = pool_config
        p.d.start()
        storage = p.d.rpc_result("daemon.info", {})["storage"]
        expect_eq((storage["disks"], storage["pool"]["disks"]), (2, 0),
                  "daemon.info: the image disks beside an empty pool: %s" % storage)
        for n in (run, stopped):
            expect_eq(_sh_ok(p.d, n, "cat /workspace/mine"), "%s\n" % n, "the image sandbox %s's file" % n)
            _sh_ok(p.d, n, "echo more > /workspace/more && sync")
        # The image sandbox stops and resumes on its image.
        expect("result" in p.d.rpc("sandbox.stop", {"name": run}, 120), "stop %s" % run)
        expect_eq(_sh_ok(p.d, run, "cat /workspace/mine /workspace/more"), "%s\nmore\n" % run,
                  "the image sandbox after a stop and a resume")
        f = p.fork_ok(run, "pmf")
        s = p.snapshot_ok(stopped)
        r = p.create_ok("pmres", source={"type": "snapshot", "snapshotId": s})
        fresh = p.create_ok("pmn")
        for n, want in ((f, "%s\nmore\n" % run), (r, "%s\nmore\n" % stopped)):
            expect_eq(_sh_ok(p.d, n, "cat /workspace/mine /workspace/more"), want, "the copy %s" % n)
        _sh_ok(p.d, f, "echo fork > /workspace/mine")
        expect_eq(_sh_ok(p.d, run, "cat /workspace/mine"), "%s\n" % run, "the image source after its fork wrote")
        storage = p.d.rpc_result("daemon.info", {})["storage"]
        expect_eq((storage["disks"], storage["pool"]["disks"]), (2, 3),
                  "daemon.info: two image disks and three pool disks: %s" % storage)
        subvols, _layers = _pool_entries(p.d)
        expect_eq(len(subvols), 3, "the fork, the restore and the new sandbox are the pool's: %s" % subvols)
        # A restart keeps both kinds.
        p.d.stop()
        p.d.start()
        for n, want in ((run, "%s\nmore\n" % run), (stopped, "%s\nmore\n" % stopped), (f, "fork\nmore\n")):
            expect_eq(_sh_ok(p.d, n, "cat /workspace/mine /workspace/more"), want, "%s after a restart" % n)
        _sh_ok(p.d, fresh, "true")
        p.cleanup()
        p.sandboxes, p.snapshots = [], []
        poll(lambda: _pool_entries(p.d) == ([], []), 60, "the pool's subvolumes and layers to go")
        # A delete answers once the sandbox is tombstoned (.NAME.del-*);
        # its directory goes in the background, later on a busy machine.
        sandboxes_dir = os.path.join(p.d.state_dir, "sandboxes")
        poll(lambda: os.listdir(sandboxes_dir) == [], 60, "the sandbox directories to go")


test_pool_added_to_a_state_directory_keeps_serving_its_image_sandboxes.timeout = 900


# Run as root inside a pool sandbox: every Btrfs ioctl that makes, deletes
# or snapshots a subvolume or changes quotas, on its root, its workspace
# and a file, must fail; so must writes to the pool's sysfs knobs. Prints
# one line per attempt that succeeded.
_IOCTLS = r'''
import errno, fcntl, glob, os, struct
def ioc(d, nr, size): return (d << 30) | (size << 16) | (0x94 << 8) | nr
W, R, WR = 1, 2, 3
vol = struct.pack("q4088s", 0, b"evil")
calls = [("SUBVOL_CREATE", ioc(W, 14, 4096), vol), ("SNAP_CREATE", ioc(W, 1, 4096), vol),
         ("SNAP_DESTROY", ioc(W, 15, 4096), vol),
         ("SNAP_CREATE_V2", ioc(W, 23, 4096), struct.pack("qQQQ4064s", 0, 0, 0, 0, b"evil")),
         ("SUBVOL_CREATE_V2", ioc(W, 24, 4096), struct.pack("qQQQ4064s", 0, 0, 0, 0, b"evil")),
         ("QGROUP_LIMIT", ioc(R, 43, 48), struct.pack("QQQQQQ", 0, 1, 1 << 40, 0, 0, 0)),
         ("QUOTA_CTL_DISABLE", ioc(WR, 40, 16), struct.pack("QQ", 2, 0)),
         ("QUOTA_RESCAN", ioc(W, 44, 64), bytes(64)),
         ("DEFAULT_SUBVOL", ioc(W, 19, 8), struct.pack("Q", 5)),
         ("SUBVOL_SETFLAGS", ioc(W, 26, 8), struct.pack("Q", 0))]
open("/workspace/f", "w").write("x")
got = []
for path in ("/", "/workspace", "/workspace/f"):
    fd = os.open(path, os.O_RDONLY)
    for name, req, arg in calls:
        try:
            fcntl.ioctl(fd, req, bytearray(arg))
            got.append("%s on %s succeeded" % (name, path))
        except OSError as e:
            pass
    os.close(fd)
# Extents shared by reference: each adds a back reference no quota counts.
src = os.open("/workspace/f", os.O_RDONLY)
dst = os.open("/workspace/g", os.O_CREAT | os.O_WRONLY)
for name, call in (("FICLONE", lambda: fcntl.ioctl(dst, ioc(W, 9, 4), src)),
                   ("FICLONERANGE", lambda: fcntl.ioctl(dst, ioc(W, 13, 32), struct.pack("qQQQ", src, 0, 0, 0))),
                   ("copy_file_range", lambda: os.copy_file_range(src, dst, 1, 0, 0))):
    try:
        call()
        got.append("%s succeeded" % name)
    except OSError:
        pass
for knob in glob.glob("/sys/fs/btrfs/*/qgroups/*") + glob.glob("/sys/fs/btrfs/*/*threshold"):
    try:
        with open(knob, "w") as f:
            f.write("8")
        got.append("wrote %s" % knob)
    except OSError:
        pass
for dev in glob.glob("/dev/loop*") + ["/dev/btrfs-control"]:
    if os.path.exists(dev):
        got.append("%s exists" % dev)
print("\n".join(got) or "none")
'''


def test_pool_sandbox_root_cannot_make_delete_or_unlimit_subvolumes(world):
    """The pool sandbox's root (with or without a user namespace) sees its
    disk through the overlay only: no Btrfs ioctl reaches the pool (no
    subvolume or snapshot made or deleted, no quota changed or turned off),
    the pool's sysfs knobs are not writable, no loop or btrfs-control
    device exists, and its limit still holds after the attempts."""
    with _Pool(world, "pooli") as p:
        a = p.create_ok("pia")
        victim = p.create_ok("piv")
        _sh_ok(p.d, victim, "echo mine > /workspace/mine && sync")
        before = _pool_entries(p.d)
        out = _sh_ok(p.d, a, "python3 -c '%s'" % _IOCTLS.replace("'", "'\\''"))
        expect_eq(out.strip(), "none", "Btrfs operations the sandbox could do")
        # A reflink copy is refused as on a filesystem without reflinks;
        # a plain copy copies the bytes.
        code, out, err = _sh(p.d, a, "cp --reflink=always /workspace/f /workspace/r 2>&1")
        expect(code != 0 and "not supported" in out.lower(), "cp --reflink=always:", code, out, err)
        expect_eq(_sh_ok(p.d, a, "cp /workspace/f /workspace/c && cat /workspace/c"), "x", "a plain cp")
        expect_eq(_pool_entries(p.d), before, "the pool's subvolumes after the attempts")
        code, out, _e = _sh(p.d, a, "dd if=/dev/zero of=/workspace/big bs=1M count=%d 2>&1; sync" % (DISK_MIB * 2))
        expect("Disk quota exceeded" in out or "No space left" in out, "the limit after the attempts:", out[-300:])
        expect_eq(_sh_ok(p.d, victim, "cat /workspace/mine"), "mine\n", "the other sandbox's file")


test_pool_sandbox_root_cannot_make_delete_or_unlimit_subvolumes.timeout = 600


_BTRFS_ERROR = re.compile(r"BTRFS (error|critical|warning)|forced readonly|Transaction aborted|"
                          r"I/O error|qgroup.*inconsistent", re.I)

# The filler's ways past a quota, each until it fails or its time is up
# (seconds, argv[1]): plain writes, fallocate, sparse writes far out,
# reflink copies of a fragmented file (each adds extent references Btrfs
# keeps outside the subvolume's tree), many small files, and xattrs.
_FILLER = r'''
import json, os, subprocess, sys, time
budget = float(sys.argv[1]); os.makedirs("/workspace/x", exist_ok=True); os.chdir("/workspace/x")
def until(step, secs):
    end = time.monotonic() + secs; n = 0
    try:
        while time.monotonic() < end:
            step(n); n += 1
    except OSError as e:
        return "%d then %s" % (n, os.strerror(e.errno))
    return "%d (time)" % n
out = {}
def w(n):
    with open("big", "ab") as f:
        f.write(b"\xa5" * (4 << 20)); f.flush(); os.fsync(f.fileno())
# Writes go on until the quota stops them: the time is only a bound (a
# busy machine writes the disk's few hundred MiB slowly, and a write that
# ran out of time proves nothing).
out["write"] = until(w, budget * 25)
os.unlink("big")
def fa(n):
    fd = os.open("fa%d" % n, os.O_CREAT | os.O_WRONLY); os.posix_fallocate(fd, 0, 64 << 20); os.close(fd)
out["fallocate"] = until(fa, budget)
for f in os.listdir("."): os.unlink(f)
def sp(n):
    with open("sparse", "r+b" if n else "wb") as f:
        f.seek((n * 1031) << 20); f.write(b"s" * 4096); os.fsync(f.fileno())
out["sparse"] = until(sp, budget)
os.unlink("sparse")
with open("frag", "wb") as f:
    for i in range(2048):
        f.seek(i * 8192); f.write(os.urandom(4096)); f.flush(); os.fsync(f.fileno())
def rl(n):
    r = subprocess.run(["cp", "--reflink=always", "frag", "c%d" % n], capture_output=True)
    if r.returncode: raise OSError(28, r.stderr.decode())
out["reflink"] = until(rl, budget)
for f in os.listdir("."): os.unlink(f)
def sm(n):
    d = "d%d" % (n // 1000)
    if n % 1000 == 0: os.mkdir(d)
    with open("%s/f%d" % (d, n), "w") as f: f.write("x" * 100)
out["files"] = until(sm, budget)
def xa(n):
    with open("xa%d" % n, "w"): pass
    for k in range(16): os.setxattr("xa%d" % n, "user.k%d" % k, os.urandom(3000))
out["xattrs"] = until(xa, budget)
print(json.dumps(out))
'''

# The victim: appends a numbered line and fsyncs it, forever; a line in
# the file was acknowledged (fsync returned).
_VICTIM = ("i=0; while :; do i=$((i+1)); echo $i >> /workspace/acked || exit 3; "
           "sync /workspace/acked || exit 4; sleep 0.05; done")


def test_pool_filler_cannot_hurt_another_sandbox(world):
    """One sandbox tries every way past its quota (writes, fallocate,
    sparse files, reflink copies of a fragmented file, many small files,
    xattrs) with the pool committed to the brim, while another appends and
    fsyncs a counter and a fork and a snapshot of it run: the victim keeps
    writing and every acknowledged line, stops and resumes, the copies
    work or are refused cleanly, and the kernel logs no Btrfs error."""
    with _Pool(world, "poolx", size_mib=768) as p:
        victim = p.create_ok("pxv", persistent=True)
        free = p.pool_info()["freeBytes"] >> 20
        # Everything else the pool holds, less what the victim's copies
        # need (a fork's disk and its reserve, its layers' bytes).
        filler = p.create_ok("pxf", resources={"diskMiB": free - DISK_MIB - 4 - 16})
        log_before = len(_kernel_log())
        cmd = p.d.rpc_result("command.run", {"sandbox": victim, "cmd": "sh", "args": ["-c", _VICTIM],
                                             "detached": True})["cmdId"]
        fill = p.d.connect(600)
        fid = fill.start("command.run", {"sandbox": filler, "cmd": "python3", "args": ["-c", _FILLER, "8"],
                                         "timeoutMs": 400000})
        # A fork and a snapshot of the victim race the filler.
        fork_name = world.name("pxvf")
        p.sandboxes.append(fork_name)
        fmsg = p.d.rpc("sandbox.fork", {"sourceSandbox": victim, "name": fork_name}, 180)
        smsg = p.d.rpc("sandbox.snapshot", {"name": victim}, 180)
        for what, msg in (("fork", fmsg), ("snapshot", smsg)):
            reason = ((msg.get("error") or {}).get("data") or {}).get("reason")
            expect("result" in msg or reason == "limit_exceeded", "the %s during the fill:" % what, msg)
        if "result" in smsg:
            p.snapshots.append(smsg["result"]["id"])
        res = fill.wait(fid, 600)
        fill.close()
        expect("result" in res, "the filler ran:", res)
        logs = p.d.rpc_result("command.logs", {"cmdId": res["result"]["cmdId"]})
        fout = base64.b64decode(logs["stdout"]).decode(errors="replace")
        expect(fout.strip(), "the filler's report:", res, logs)
        ways = json.loads(fout.strip().splitlines()[-1])
        for kind in ("write", "fallocate"):
            expect("quota" in ways[kind] or "space" in ways[kind],
                   "the filler's %s ended on EDQUOT or ENOSPC:" % kind, ways)
        # The victim still writes, and kept every line.
        _sh_ok(p.d, victim, "echo after > /workspace/after && sync")
        lines = _sh_ok(p.d, victim, "cat /workspace/acked").split()
        expect(len(lines) > 10 and lines == [str(i) for i in range(1, len(lines) + 1)],
               "the victim's acknowledged lines are whole and in order (%d)" % len(lines))
        expect("result" in p.d.rpc("sandbox.stop", {"name": victim}, 120), "stop the victim")
        after = _sh_ok(p.d, victim, "cat /workspace/after; wc -l < /workspace/acked").split()
        expect(after[0] == "after" and int(after[1]) >= len(lines), "the victim after a stop and a resume:", after)
        if "result" in fmsg:
            expect_eq(_sh_ok(p.d, fork_name, "head -1 /workspace/acked"), "1\n", "the fork's copy")
        errors = [line for line in _kernel_log()[log_before:] if _BTRFS_ERROR.search(line)]
        expect_eq(errors, [], "kernel Btrfs errors during the fill")
        print("filler:", ways)


test_pool_filler_cannot_hurt_another_sandbox.timeout = 900


def _kernel_log():
    p = subprocess.run(["dmesg"], capture_output=True, text=True)
    return p.stdout.splitlines()
