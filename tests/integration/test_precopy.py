"""Pre-copy of a running sandbox's files (sandbox.snapshot, sandbox.fork):
copied while it runs, then frozen only to copy what changed meanwhile. The
result must be exactly what a copy made while frozen gives, whatever the
sandbox did during the copy."""
import json
import os
import re
import subprocess
import tempfile

import leaks
import world as W
from common import delete, expect, expect_eq, poll, sh, sh_ok

# Runs inside the sandbox (python3 of the runtime). `mutate ROOT LOG READY`
# builds a tree under ROOT and then changes it all along, one change per
# step (a single system call, or a store into a shared mapping), at most
# RATE steps a second, and after each step appends one byte to LOG. `check ROOT LOG` (in a copy)
# replays the first k steps and the first k+1 (k = size of LOG: the step
# after the last logged one may have been made before the freeze) into
# fresh trees and prints whether ROOT equals one of them: content, modes,
# owners, user xattrs, hard links, symlinks, removed and renamed entries,
# times set with utimensat.

# The sandboxes that write a ballast of up to 512 MiB ask for a disk of
# their own size: every disk holds its blocks on the host, so the test
# world's default is small (world.WORLD_DISK_MIB).
BALLAST_DISK_MIB = 1024

MUTATOR = r'''
import ctypes, hashlib, json, mmap, os, random, resource, sys, time
SEED = 1616
# Steps a second the mutator makes at most: far more than the frozen
# pass needs to have something to copy, and bounded so that the check's
# replay (every step again, twice) costs seconds of CPU, not as many
# minutes as a loaded machine made the captures last (unpaced, it made
# tens of thousands a second and a check took up to 20 minutes).
RATE = 2000
DIRS = ["", "d0", "d1", "d0/d1"]
NAMES = ["f0", "f1", "f2", "f3", "d0", "d1", "l0"]
POOL = [(d + "/" if d else "") + n for d in DIRS for n in NAMES]
# Readable by all and directories searchable by all: root in a sandbox
# may lack CAP_DAC_OVERRIDE, and the check must read everything.
MODES = [0o644, 0o604, 0o755, 0o666, 0o2755]
# Renames move directories below others, so the tree would grow deeper
# without bound (and past PATH_MAX); a rename that would put an entry
# deeper than this below ROOT is not made.
MAX_DEPTH = 24
libc = ctypes.CDLL(None, use_errno=True)
libc.fallocate.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_long, ctypes.c_long]

def setup(root):
    rng = random.Random(SEED)
    os.mkdir(root)
    for d in ("d0", "d1"):
        os.mkdir(os.path.join(root, d))
    for f in ("f0", "d0/f1", "d1/f2"):
        with open(os.path.join(root, f), "wb") as o:
            o.write(rng.randbytes(1 << 20))
    fd = os.open(os.path.join(root, "mm"), os.O_RDWR | os.O_CREAT, 0o644)
    os.ftruncate(fd, 1 << 18)
    m = mmap.mmap(fd, 1 << 18)
    os.close(fd)
    return rng, m

def walk(top):
    """(dirpath, dirnames, filenames) for top and each directory below it,
    without recursion (os.walk recurses once per level), symlinks not
    followed; dirnames lists only real directories."""
    stack = [top]
    while stack:
        d = stack.pop()
        dirs, files = [], []
        with os.scandir(d) as it:
            for e in it:
                (dirs if e.is_dir(follow_symlinks=False) else files).append(e.name)
        yield d, dirs, files
        stack += [os.path.join(d, x) for x in dirs]

def height(p):
    """Levels of entries below p (0: not a directory, or empty)."""
    if os.path.islink(p) or not os.path.isdir(p):
        return 0
    return max(d.count("/") - p.count("/") + (1 if dirs or files else 0)
               for d, dirs, files in walk(p))

def step(rng, root, m):
    k = rng.randrange(17)
    p = os.path.join(root, rng.choice(POOL))
    q = os.path.join(root, rng.choice(POOL))
    off = rng.randrange(1 << 18)
    n = rng.randrange(1, 4096)
    data = rng.randbytes(n)
    mode = rng.choice(MODES)
    uid = rng.choice([0, 1000, 1001])
    v = rng.randbytes(8)
    try:
        if k in (0, 1, 2, 3):
            fd = os.open(p, os.O_WRONLY | os.O_NOFOLLOW)
            try:
                if k < 2:
                    os.pwrite(fd, data, off)
                elif k == 2:
                    os.ftruncate(fd, off * 2)
                else:
                    libc.fallocate(fd, 3, off, n * 16)  # PUNCH_HOLE | KEEP_SIZE
            finally:
                os.close(fd)
        elif k == 4:
            if os.path.relpath(q, root).count("/") + 1 + height(p) <= MAX_DEPTH:
                os.rename(p, q)
        elif k == 5:
            os.link(p, q, follow_symlinks=False)
        elif k == 6:
            os.unlink(p)
        elif k == 7:
            os.mkdir(p, 0o755)
        elif k == 8:
            os.rmdir(p)
        elif k == 9:
            if not os.path.islink(p):
                os.chmod(p, mode | 0o755 if os.path.isdir(p) else mode)
        elif k == 10:
            os.setxattr(p, "user.k%d" % (n % 2), v, follow_symlinks=False)
        elif k == 11:
            os.removexattr(p, "user.k%d" % (n % 2), follow_symlinks=False)
        elif k == 12:
            os.chown(p, uid, uid, follow_symlinks=False)
        elif k == 13:
            os.utime(p, ns=(5 * 10**9, n * 10**9), follow_symlinks=False)  # mtime set back
        elif k == 14:
            os.symlink("f%d" % (n % 4), p)
        elif k == 15:
            os.close(os.open(p, os.O_CREAT | os.O_EXCL | os.O_WRONLY, mode))
        else:
            o = off & ~7
            m[o:o + 8] = v
    except OSError:
        pass

def manifest(root):
    out, inodes = {}, {}
    for dirpath, dirs, files in walk(root):
        for name in dirs + files + ([""] if dirpath == root else []):
            p = os.path.join(dirpath, name) if name else dirpath
            rel = os.path.relpath(p, root)
            st = os.lstat(p)
            e = {"mode": st.st_mode, "uid": st.st_uid, "gid": st.st_gid,
                 "mtime": st.st_mtime_ns if st.st_mtime_ns < 10**17 else "recent",
                 "xattrs": sorted((x, os.getxattr(p, x, follow_symlinks=False).hex())
                                  for x in os.listxattr(p, follow_symlinks=False) if x.startswith("user."))}
            if os.path.islink(p):
                e["target"] = os.readlink(p)
            elif not os.path.isdir(p):
                with open(p, "rb") as f:
                    e["sha256"] = hashlib.sha256(f.read()).hexdigest()
                e["size"] = st.st_size
                e["nlink"] = st.st_nlink
                inodes.setdefault(st.st_ino, []).append(rel)
            out[rel] = e
    for group in inodes.values():
        for rel in group:
            out[rel]["links"] = sorted(group)
    return out

def run(root, steps, log=None, ready=None):
    rng, m = setup(root)
    fd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644) if log else -1
    cpu = os.open(log + ".cpu", os.O_WRONLY | os.O_CREAT, 0o644) if log else -1
    if ready:
        with open(ready, "w") as f:
            f.write(str(os.getpid()))
    i = 0
    t0 = time.monotonic()
    while steps is None or i < steps:
        if steps is None:
            # Evenly, never more than 1 ms ahead: a pause of tens of ms
            # (pacing in bursts) let a capture's last live pass and its
            # freeze fall in a gap, and the frozen pass had nothing to copy.
            ahead = i / RATE - (time.monotonic() - t0)
            if ahead > 0.001:
                time.sleep(ahead)
        step(rng, root, m)
        if fd >= 0:
            os.write(fd, b".")
            if i % 256 == 0:
                t = os.times()
                os.pwrite(cpu, ("%.2f" % (t.user + t.system)).encode().ljust(24), 0)
        i += 1

if sys.argv[1] == "mutate":
    run(sys.argv[2], None, sys.argv[3], sys.argv[4])
else:
    root, k = sys.argv[2], os.path.getsize(sys.argv[3])
    # The replay does the steps the mutator did (twice at most) and reads
    # two trees: a few times the CPU the mutator had used by the freeze
    # (written every 256 steps) is its bound, whatever the load.
    with open(sys.argv[3] + ".cpu") as f:
        used = float(f.read().split()[0])
    budget = int(4 * used) + 60
    resource.setrlimit(resource.RLIMIT_CPU, (budget, budget))
    got = manifest(root)
    res = {"steps": k}
    for extra in (0, 1):
        # On /tmp, a tmpfs: the replay waits for no disk, however busy
        # the host's is; what it costs is CPU, which is bounded above.
        r = "/tmp/replay-%d" % extra
        run(r, k + extra)
        want = manifest(r)
        if want == got:
            res["match"] = k + extra
            break
        res["diff%d" % extra] = {
            x: {f: [(got.get(x) or {}).get(f), (want.get(x) or {}).get(f)]
                for f in set(got.get(x) or {}) | set(want.get(x) or {})
                if (got.get(x) or {}).get(f) != (want.get(x) or {}).get(f)}
            for x in sorted(set(got) | set(want)) if got.get(x) != want.get(x)}
    print(json.dumps(res))
'''

ROOT = "/var/tmp/m"
LOG = "/var/tmp/m.log"
# How long a capture (sandbox.snapshot, sandbox.fork) may take to answer:
# its copy yields the CPU and the disk to everything else (docs/API.md),
# so on a loaded machine it takes as long as the load leaves it.
CAPTURE_S = 500
# The exactness tests' sandboxes live as long as the test may run (the
# default lifetime, 5 minutes, ended the source mid-test under load).
LIFETIME_MS = 1200 * 1000


def _capture(world, method, params):
    """The result of capture `method` (sandbox.snapshot, sandbox.fork).
    One not answered within CAPTURE_S is cancelled (request.cancel) and its
    answer awaited before the test fails: given up on and left alone, a
    fork finished after the test's cleanup had looked for it, and its
    sandbox outlived the test (every later test of that daemon failed its
    leak check on the fork's cgroups)."""
    with world.daemon.connect(timeout=CAPTURE_S) as conn:
        rid = conn.start(method, params)
        try:
            msg = conn.wait(rid, CAPTURE_S)
        except TimeoutError:
            conn.start("request.cancel", {"id": rid})
            late = conn.wait(rid, 120)  # cancelled, or done just before
            if method == "sandbox.snapshot" and "result" in late:
                world.rpc("snapshot.delete", {"id": late["result"]["id"]})
            raise  # a fork done just before: the test's cleanup deletes it by name
    expect("result" in msg, "%s:" % method, json.dumps(msg.get("error"))[:1000])
    return msg["result"]


def _check(world, name, what):
    """The replay of the mutator's steps takes as long as the steps did,
    and the mutator ran as long as the captures took: minutes on a busy
    machine. So its bound is CPU time (RLIMIT_CPU, from the CPU the
    mutator used, `check` in MUTATOR; SIGXCPU past it), not a wall-clock
    limit; the runner's per-test limit stays the guard against a hang."""
    code, out, err = sh(world, name, "python3 /var/tmp/mutator.py check %s %s" % (ROOT, LOG), timeout=None)
    expect(code != 128 + 24, "the check in %s used more than 4 times the mutator's CPU time" % what)
    expect_eq(code, 0, "the check in %s (%s)" % (what, err.strip()[-2000:]))
    res = json.loads(out)
    expect("match" in res, "%s: the copy is the source's tree after step %d or %d"
           % (what, res["steps"], res["steps"] + 1), json.dumps(res)[:4000])
    return res["steps"]


def test_precopy_while_the_sandbox_writes_hard_equals_a_frozen_copy(world):
    _precopy_exact(world, False)


def test_precopy_of_a_userns_sandbox_writing_hard_equals_a_frozen_copy(world):
    _precopy_exact(world, True)


# Two captures of a tree changing all along, a sandbox made from one and a
# replay of every step in each copy. The live passes run at SCHED_BATCH,
# nice 19 (docs/API.md): on a machine whose CPUs are busy, the mutator's
# own loop among them, they get a sliver of a CPU and take minutes.
test_precopy_while_the_sandbox_writes_hard_equals_a_frozen_copy.timeout = 1200
test_precopy_of_a_userns_sandbox_writing_hard_equals_a_frozen_copy.timeout = 1200


def _precopy_exact(world, userns):
    src = world.name("pcsrc")
    r = world.rpc("sandbox.create", {"name": src, "networkPolicy": "deny-all", "userns": userns,
                                     "timeout": LIFETIME_MS, "resources": {"diskMiB": BALLAST_DISK_MIB}}, 120)
    if "error" in r and userns and r["error"].get("data", {}).get("reason") == "unavailable":
        print("SKIP: no user namespace range on this host (%s)" % r["error"].get("message"))
        return
    expect("result" in r, "create (userns %s):" % userns, r.get("error"))
    fork = world.name("pcfork")
    restored = world.name("pcrest")
    snap = None
    try:
        code, _o, err = sh(world, src, "cat > /var/tmp/mutator.py", "-i", input=MUTATOR)
        expect_eq(code, 0, "the mutator copied in (%s)" % err)
        # Enough data that the first pass takes a while, with the mutator
        # changing the tree all along.
        sh_ok(world, src, "head -c 256M /dev/urandom > /var/tmp/ballast")
        world.ctl("exec", "--detach", src, "--", "python3", "/var/tmp/mutator.py", "mutate", ROOT, LOG,
                  "/var/tmp/m.ready", check=True)
        poll(lambda: sh(world, src, "test -s /var/tmp/m.ready")[0] == 0, 30, "the mutator to start")
        snap = _capture(world, "sandbox.snapshot", {"name": src})["id"]
        _capture(world, "sandbox.fork", {"sourceSandbox": src, "name": fork, "overrides": {"timeout": LIFETIME_MS}})
        log = open(world.daemon.log_path, errors="replace").read()
        expect(log.count("'%s': snapshot pre-copied" % src) == 1 and log.count("'%s': fork pre-copied" % src) == 1,
               "both captures were pre-copied", world.daemon.log_tail())
        # And the frozen pass had changes to copy: the mutator's, made
        # during the last live pass.
        frozen = re.findall(r"'%s': \w+ pre-copied in \d+ live pass(?:es)?; while frozen (\d+) of" % re.escape(src), log)
        expect(len(frozen) == 2 and all(int(n) > 0 for n in frozen),
               "the frozen passes rewrote what changed during the live ones", frozen)
        # The source ran on: it still counts steps. Then it stops, so that
        # the checks below do not share the machine with it.
        size = lambda: int(sh(world, src, "stat -c %%s %s" % LOG)[1] or 0)
        now = size()
        poll(lambda: size() > now, 30, "the source's mutator to keep running")
        sh_ok(world, src, "kill $(cat /var/tmp/m.ready)")
        world.rpc_result("sandbox.create", {"name": restored, "networkPolicy": "deny-all", "userns": userns,
                                             "timeout": LIFETIME_MS,
                                             "source": {"type": "snapshot", "snapshotId": snap}}, 120)
        at_snapshot = _check(world, restored, "the sandbox created from the snapshot")
        at_fork = _check(world, fork, "the fork")
        expect(at_fork > at_snapshot > 0, "the mutator ran during the captures (%d, %d steps)"
               % (at_snapshot, at_fork))
    finally:
        delete(world, restored)
        delete(world, fork)
        delete(world, src)
        if snap:
            world.rpc_result("snapshot.delete", {"id": snap})
    for n in (src, fork, restored):
        leaks.check(world, n)


CANCELLED = -32800


def _frozen(d, name):
    """Whether the session's cgroup says frozen (cgroup.freeze, else the v1
    freezer.state)."""
    for c in d.rpc_result("sandbox.get", {"name": name})["session"]["cgroups"]:
        for f, yes in (("cgroup.freeze", "1"), ("freezer.state", "FROZEN")):
            p = os.path.join(c, f)
            if os.path.exists(p):
                with open(p) as fh:
                    return fh.read().strip() == yes
    return False


def _temps(d):
    layers = os.path.join(d.state_dir, "layers")
    return [x for x in os.listdir(layers) if x.endswith(".tmp")] if os.path.isdir(layers) else []


def _no_capture_left(d, name, before_snaps, what):
    after = [s["id"] for s in d.rpc_result("snapshot.list", {})["snapshots"]]
    expect_eq(after, before_snaps, "snapshot.list after %s" % what)
    poll(lambda: not _temps(d), 10, "no partial copy left after %s" % what)
    expect(not _frozen(d, name), "the source is not frozen after %s" % what)
    with open(d.log_path, errors="replace") as f:
        expect("'%s': snapshot pre-copied" % name not in f.read(),
               "the source was never frozen for the copy (%s)" % what)


def test_cancel_during_the_live_copy_never_freezes_the_source(world):
    d = world.daemon
    name = world.name("pccancel")
    world.rpc_result("sandbox.create", {"name": name, "networkPolicy": "deny-all",
                                        "resources": {"diskMiB": BALLAST_DISK_MIB}})
    try:
        # Long enough a first pass to cancel it while it runs (seconds:
        # data, and many entries).
        sh_ok(world, name, "head -c 512M /dev/zero > /var/tmp/ballast && mkdir /var/tmp/many && "
              "python3 -c \"import os\nfor i in range(20000): open('/var/tmp/many/%d' % i, 'w').close()\" && sync")
        before = [s["id"] for s in d.rpc_result("snapshot.list", {})["snapshots"]]
        with d.connect(timeout=60) as conn:
            rid = conn.start("sandbox.snapshot", {"name": name})
            poll(lambda: _temps(d), 30, "the live copy to begin", interval=0.005)
            expect(not _frozen(d, name), "the source runs during the live copy")
            cid = conn.start("request.cancel", {"id": rid})
            expect_eq(conn.wait(cid, 30).get("result"), {"cancelled": True}, "request.cancel's answer")
            msg = conn.wait(rid, 60)
        err = msg.get("error") or {}
        expect_eq((err.get("code"), err.get("data", {}).get("reason")), (CANCELLED, "cancelled"),
                  "the cancelled snapshot's error (%s)" % json.dumps(msg)[:300])
        _no_capture_left(d, name, before, "the cancel")
        expect_eq(sh(world, name, "stat -c %s /var/tmp/ballast")[1], "%d\n" % (512 << 20),
                  "the source's files after the cancel")
    finally:
        delete(world, name)
    leaks.check(world, name)


def test_full_state_filesystem_during_the_live_copy_fails_cleanly(world):
    world.stop_sandboxd()  # one daemon per network namespace
    try:
        _full_during_copy(world)
    finally:
        world.start_sandboxd()


def _full_during_copy(world):
    fs = tempfile.mkdtemp(prefix="statefs-", dir=world.tmp)
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=160m,mode=0755", "tmpfs", fs], check=True)
    filler = os.path.join(fs, "filler")
    d = world.add_sandboxd(tag="pcfull", state_dir=os.path.join(fs, "state"))
    name = world.name("pcfull")
    try:
        d.start()
        d.rpc_result("sandbox.create", {"name": name, "networkPolicy": "deny-all",
                                        "resources": {"diskMiB": 64}}, 120)
        code, out, err = d.ctl("exec", name, "--", "sh", "-c",
                               "head -c 24M /dev/urandom > /var/tmp/data && sync && sha256sum /var/tmp/data")
        expect_eq(code, 0, "the data written (%s)" % err)
        # The image's blocks all allocated, so the sandbox's own writes
        # never meet the full filesystem; then room for a third of the copy.
        img = os.path.join(d.state_dir, "sandboxes", name, "disk.img")
        subprocess.run(["fallocate", "-l", str(os.path.getsize(img)), img], check=True)
        with open(filler, "wb", buffering=0) as f:
            try:
                while True:
                    f.write(b"\0" * (1 << 20))
            except OSError:
                pass
            f.truncate(max(0, f.tell() - (8 << 20)))
        before = [s["id"] for s in d.rpc_result("snapshot.list", {})["snapshots"]]
        e = d.rpc("sandbox.snapshot", {"name": name}, CAPTURE_S).get("error")
        expect(e is not None and "No space left" in e.get("message", ""),
               "the snapshot on a full state filesystem fails naming it:", e)
        _no_capture_left(d, name, before, "the failed snapshot")
        code, out2, err = d.ctl("exec", name, "--", "sha256sum", "/var/tmp/data")
        expect_eq((code, out2), (0, out.splitlines()[-1] + "\n"), "the source's data after the failure (%s)" % err)
        # With room again, the snapshot is taken.
        os.unlink(filler)
        snap = d.rpc_result("sandbox.snapshot", {"name": name}, CAPTURE_S)
        d.rpc_result("snapshot.delete", {"id": snap["id"]})
    finally:
        if os.path.exists(filler):
            os.unlink(filler)
        if d.alive():
            d.rpc("sandbox.delete", {"name": name}, 60)
        world.stop_sandboxd(d)
        subprocess.run(["umount", "-l", fs], capture_output=True)
        os.rmdir(fs)


def _allocated(path):
    """Bytes allocated under path (st_blocks), each inode once."""
    total, seen = 0, set()
    for root, dirs, files in W.walk(path):
        for n in dirs + files:
            st = os.lstat(os.path.join(root, n))
            if (st.st_dev, st.st_ino) not in seen:
                seen.add((st.st_dev, st.st_ino))
                total += st.st_blocks * 512
    return total


def _bytes_read(pid):
    """Bytes process pid, its threads and the children it reaped have read
    (rchar of /proc/PID/io: read(2), copy_file_range(2), sendfile(2) alike)."""
    with open("/proc/%d/io" % pid) as f:
        return int(re.search(r"^rchar: (\d+)$", f.read(), re.M).group(1))


def test_a_sparse_file_stays_sparse_in_a_snapshot_and_a_fork(world):
    d = world.daemon
    name, child = world.name("pcsparse"), world.name("pcsparsef")
    world.rpc_result("sandbox.create", {"name": name, "networkPolicy": "deny-all"})
    snap = None
    try:
        sh_ok(world, name, "truncate -s 10G /var/tmp/S && printf abc | dd of=/var/tmp/S bs=1 seek=5368709120 "
              "conv=notrunc 2>/dev/null && sync")
        layers = os.path.join(d.state_dir, "layers")
        before = set(os.listdir(layers)) if os.path.isdir(layers) else set()
        read0 = _bytes_read(d.pid)
        snap = d.rpc_result("sandbox.snapshot", {"name": name}, CAPTURE_S)
        read = _bytes_read(d.pid) - read0
        new = [x for x in os.listdir(layers) if x not in before]
        expect_eq(len(new), 1, "one layer made by the snapshot: %s" % new)
        used = _allocated(os.path.join(layers, new[0]))
        expect(used < (8 << 20), "the snapshot's layer takes %d bytes on the host for 3 bytes of data" % used)
        # Only the data was read, not the 10 GiB of holes (the time that
        # takes depends on the machine's load; the bytes read do not).
        expect(read < (1 << 30), "the snapshot of a sparse 10 GiB file read %d bytes" % read)
        world.rpc_result("sandbox.fork", {"sourceSandbox": name, "name": child}, CAPTURE_S)
        code, out, err = d.ctl("exec", child, "--", "sh", "-c",
                               "stat -c %s /var/tmp/S; dd if=/var/tmp/S bs=1 skip=5368709117 count=6 2>/dev/null "
                               "| od -An -c | tr -s ' '")
        expect_eq((code, out), (0, "10737418240\n \\0 \\0 \\0 a b c\n"), "the fork's file (%s)" % err)
        after = [x for x in os.listdir(layers) if x not in before and x != new[0]]
        used = sum(_allocated(os.path.join(layers, x)) for x in after)
        expect(used < (8 << 20), "the fork's layer takes %d bytes on the host" % used)
    finally:
        delete(world, child)
        if snap:
            d.rpc_result("snapshot.delete", {"id": snap["id"]})
        delete(world, name)
    leaks.check(world, name)


def _low_priority_threads(pid):
    """Threads of pid at SCHED_BATCH, nice 19: {tid: ioprio}."""
    import ctypes
    libc = ctypes.CDLL(None, use_errno=True)
    found = {}
    for tid in os.listdir("/proc/%d/task" % pid):
        try:
            with open("/proc/%d/task/%s/stat" % (pid, tid)) as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        # After the command: field 19 is nice, 41 the policy (proc(5)).
        if int(fields[16]) == 19 and int(fields[38]) == 3:  # SCHED_BATCH
            found[int(tid)] = libc.syscall(252, 1, int(tid))  # ioprio_get(IOPRIO_WHO_PROCESS, tid)
    return found


def test_the_live_copy_runs_at_low_io_and_cpu_priority(world):
    d = world.daemon
    name = world.name("pcprio")
    world.rpc_result("sandbox.create", {"name": name, "networkPolicy": "deny-all",
                                        "resources": {"diskMiB": BALLAST_DISK_MIB}})
    try:
        sh_ok(world, name, "head -c 512M /dev/urandom > /var/tmp/ballast && mkdir /var/tmp/many && "
              "python3 -c \"import os\nfor i in range(20000): open('/var/tmp/many/%d' % i, 'w').close()\" && sync")
        expect_eq(_low_priority_threads(d.pid), {}, "threads at low priority before the copy")
        seen = {}
        with d.connect(timeout=120) as conn:
            rid = conn.start("sandbox.snapshot", {"name": name})
            poll(lambda: _temps(d), 30, "the live copy to begin", interval=0.005)

            def low():
                seen.update(_low_priority_threads(d.pid))
                return seen or not _temps(d)
            poll(low, 30, "a thread at low priority during the copy", interval=0.005)
            msg = conn.wait(rid, 120)
        expect("result" in msg, "the snapshot (%s)" % json.dumps(msg)[:300])
        expect_eq(sorted(set(seen.values())), [(2 << 13) | 7],
                  "the copy's thread: SCHED_BATCH, nice 19 and I/O best-effort level 7 (%s)" % seen)
        expect_eq(_low_priority_threads(d.pid), {}, "threads at low priority after the copy")
        d.rpc_result("snapshot.delete", {"id": msg["result"]["id"]})
    finally:
        delete(world, name)
    leaks.check(world, name)
