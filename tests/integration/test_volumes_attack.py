"""Attacks on named volumes (docs/API.md "Volumes", docs/SECURITY.md
"Volumes") by root inside a sandbox that mounts one: leaving the volume's
bound, making a read-only mount writable, and planting setuid files or
file capabilities for another sandbox. Runs in the suite's user-namespace
mode (SANDBOXD_TEST_USERNS)."""
import json
import os
import subprocess

from common import expect, expect_eq, sh, sh_ok
from test_volumes import _sandboxes, _volume

# Root inside tries every way it has to get a writable view of the
# read-only mount at /data, each on its own (python3 ctypes: raw syscalls,
# x86_64 numbers). Prints NAME=ok for each that succeeded, NAME=errno
# otherwise.
REMOUNT = r"""
import ctypes, errno, os
libc = ctypes.CDLL(None, use_errno=True)
def sc(name, nr, *a):
    r = libc.syscall(nr, *a)
    print("%s=%s" % (name, "ok" if r >= 0 else errno.errorcode.get(ctypes.get_errno(), "?")), flush=True)
    return r
class Attr(ctypes.Structure):
    _fields_ = [("set", ctypes.c_uint64), ("clr", ctypes.c_uint64),
                ("prop", ctypes.c_uint64), ("userns", ctypes.c_uint64)]
MOUNT_ATTR_RDONLY = 1
AT_EMPTY_PATH = 0x1000
OPEN_TREE_CLONE = 1
# mount_setattr(442) clearing RDONLY on the mount itself
a = Attr(0, MOUNT_ATTR_RDONLY, 0, 0)
sc("mount_setattr", 442, -100, b"/data", 0, ctypes.byref(a), ctypes.sizeof(a))
# mount(2) remount,bind rw
sc("mount", 165, b"none", b"/data", None, 0x20 | 0x1000, None)
# open_tree(428) clone, then mount_setattr on the clone
fd = sc("open_tree", 428, -100, b"/data", OPEN_TREE_CLONE)
# fspick(433) of the volume's superblock
sc("fspick", 433, -100, b"/data", 0)
# unshare(272) a user and mount namespace
sc("unshare", 272, 0x10000000 | 0x00020000)
# re-open a read-only fd of a file through /proc/self/fd for writing
try:
    f = os.open("/data/f", os.O_RDONLY)
    w = os.open("/proc/self/fd/%d" % f, os.O_RDWR)
    os.write(w, b"x")
    print("reopen=ok")
except OSError as e:
    print("reopen=%s" % errno.errorcode.get(e.errno, "?"))
for name, fn in [("chmod", lambda: os.chmod("/data/f", 0o777)),
                 ("create", lambda: open("/data/new", "w").close()),
                 ("utime", lambda: os.utime("/data/f")),
                 ("setxattr", lambda: os.setxattr("/data/f", "user.x", b"1"))]:
    try:
        fn()
        print("%s=ok" % name)
    except OSError as e:
        print("%s=%s" % (name, errno.errorcode.get(e.errno, "?")))
"""


def test_root_inside_cannot_make_a_read_only_mount_writable_by_any_means(world):
    with _volume(world, "varo") as vol, \
            _sandboxes(world, ("varw", {"volumes": [{"name": vol, "path": "/data"}]}),
                       ("varo", {"volumes": [{"name": vol, "path": "/data", "readOnly": True}]})) as (rw, ro):
        sh_ok(world, rw, "echo hi > /data/f")
        code, out, err = sh(world, ro, "python3 -c '%s'" % REMOUNT.replace("'", "'\\''"), "--sudo")
        results = dict(line.split("=", 1) for line in out.split() if "=" in line)
        expect(len(results) >= 10, "every attempt ran:", code, out, err[-500:])
        for name, res in sorted(results.items()):
            expect(res != "ok", "%s made the read-only volume writable or gave a new mount: %s" % (name, out))
        expect_eq(sh_ok(world, rw, "cat /data/f").strip(), "hi", "the volume's file")
        out = sh_ok(world, ro, "grep ' /data ' /proc/self/mountinfo")
        expect(" ro," in out or " ro " in out, "still read-only:", out)
test_root_inside_cannot_make_a_read_only_mount_writable_by_any_means.timeout = 300


# Root inside plants, for the sandbox user of another sandbox: a setuid-root
# copy of python3, the same with file capabilities (cap_setuid+ep through
# security.capability v2), a hard link of it and a fifo. The other
# sandbox's user runs them: none may give it another uid.
PLANT = r"""
set -e
cp "$(readlink -f "$(command -v python3)")" /data/suid
chown 0:0 /data/suid && chmod 4755 /data/suid
cp /data/suid /data/fcap && chmod 0755 /data/fcap
python3 -c '
import os, struct
# VFS_CAP_REVISION_2 | effective, permitted = CAP_SETUID (7)
os.setxattr("/data/fcap", "security.capability", struct.pack("<IIIII", 0x02000001, 1 << 7, 0, 0, 0))
' && echo FCAP-SET || echo FCAP-REFUSED
ln /data/suid /data/hard
mkfifo /data/fifo
ls -ln /data
"""

ESCALATE = r"""
echo "me=$(id -u)"
for b in suid fcap hard; do
  /data/$b -c 'import os
try:
    os.setuid(0)
except OSError:
    pass
print("%s euid=%d uid=%d" % ("'$b'", os.geteuid(), os.getuid()))' || echo "$b failed"
done
"""


def test_setuid_files_and_file_capabilities_in_a_volume_are_inert_in_another_sandbox(world):
    with _volume(world, "vsuid") as vol, \
            _sandboxes(world, ("vpl", {"volumes": [{"name": vol, "path": "/data"}]}),
                       ("vvi", {"volumes": [{"name": vol, "path": "/v2"}]})) as (planter, victim):
        out = sh_ok(world, planter, PLANT, "--sudo")
        # Every mount of the volume is nosuid and nodev: each sandbox's,
        # whatever runs there (no_new_privs aside), and the daemon's own,
        # where a host process could otherwise run what a sandbox planted.
        for sb, path in ((planter, "/data"), (victim, "/v2")):
            line = sh_ok(world, sb, "grep ' %s ' /proc/self/mountinfo" % path)
            opts = line.split()[5].split(",")
            expect("nosuid" in opts and "nodev" in opts, "the mount in %s: %s" % (sb, opts))
            # ... and names no path of the host's (its root is the
            # volume's tree in its own filesystem).
            expect(world.daemon.state_dir not in line and vol not in line, "mountinfo inside:", line)
        where = os.path.join(world.daemon.state_dir, "volumes", vol)
        with open("/proc/%d/mountinfo" % world.daemon.proc.pid) as f:
            mine = [line.split() for line in f if where in line]
        expect(mine, "the daemon mounts the volume")
        for fields in mine:
            opts = fields[5].split(",")
            expect("nosuid" in opts and "nodev" in opts, "the daemon's mount:", " ".join(fields))
        for sb, script in ((victim, ESCALATE.replace("/data/", "/v2/")), (planter, ESCALATE)):
            out = sh_ok(world, sb, script)
            me = out.split("me=", 1)[1].split()[0]
            expect(me != "0", "the sandbox user is not root:", out)
            for b in ("suid", "fcap", "hard"):
                expect("%s euid=%s uid=%s" % (b, me, me) in out,
                       "%s gave another uid to the sandbox user of %s: %s" % (b, sb, out))
test_setuid_files_and_file_capabilities_in_a_volume_are_inert_in_another_sandbox.timeout = 300


# BTRFS_IOC_SUBVOL_CREATE (_IOW(0x94, 14, struct btrfs_ioctl_vol_args)),
# BTRFS_IOC_SNAP_CREATE (1), and the _V2 forms (24, 23) that take a
# struct btrfs_ioctl_vol_args_v2 (4096 bytes as well): a new subvolume
# has a qgroup of its own, outside the volume's limit.
SUBVOL = r"""
import errno, fcntl, os, struct, sys
d = os.open(sys.argv[1], os.O_RDONLY | os.O_DIRECTORY)
def ioc(nr):
    return (1 << 30) | (4096 << 16) | (0x94 << 8) | nr
for name, nr, v2 in [("subvol", 14, False), ("subvol_v2", 24, True), ("snap", 1, False), ("snap_v2", 23, True)]:
    if v2:  # fd, transid, flags, unused[4], name[4040]
        buf = bytearray(struct.pack("<qQQ32s4040s", d, 0, 0, b"", name.encode()))
    else:   # fd, name[4088]
        buf = bytearray(struct.pack("<q4088s", d, name.encode()))
    try:
        fcntl.ioctl(d, ioc(nr), buf)
        print("%s=ok" % name)
    except OSError as e:
        print("%s=%s" % (name, errno.errorcode.get(e.errno, "?")))
"""


def test_a_pool_volume_cannot_be_left_through_a_nested_subvolume(world):
    import test_pool as P
    with P._Pool(world, "vapool") as p:
        vol = world.name("vasv")
        msg = p.d.rpc("volume.create", {"name": vol, "sizeMiB": 32}, 120)
        expect("result" in msg, "volume.create in the pool:", msg.get("error"))
        try:
            a = p.create_ok("vasa", volumes=[{"name": vol, "path": "/data"}])
            P._sh_ok(p.d, a, "cat > /tmp/subvol.py <<'EOF'\n%s\nEOF" % SUBVOL)
            code, out, err = P._sh(p.d, a, "python3 /tmp/subvol.py /data; python3 /tmp/subvol.py /workspace",
                                   timeout=60)
            res = [line for line in out.split() if "=" in line]
            expect(len(res) == 8, "every ioctl was tried:", out, err[-300:])
            expect(not [r for r in res if r.endswith("=ok")], "root inside made a subvolume: %s" % out)
            # Whatever it made, nothing under /data holds more than sizeMiB.
            code, out, err = P._sh(p.d, a, "for d in /data/subvol /data/subvol_v2 /data; do "
                                   "[ -d $d ] && dd if=/dev/zero of=$d/big bs=1M count=96 2>&1; done; sync; "
                                   "du -sm /data", timeout=120)
            used = int(out.split()[-2])
            expect(used <= 40, "the volume holds %d MiB past its 32: %s" % (used, out[-300:]))
            p.d.rpc("sandbox.delete", {"name": a}, 120)
            p.sandboxes = []
        finally:
            msg = p.d.rpc("volume.delete", {"name": vol}, 120)
        expect("result" in msg, "volume.delete:", json.dumps(msg)[:300])
        P.poll(lambda: P._pool_entries(p.d) == ([], []), 60, "the pool's subvolumes to go after the deletes")
test_a_pool_volume_cannot_be_left_through_a_nested_subvolume.timeout = 600


def test_an_inode_count_the_size_cannot_hold_is_refused_naming_inodes(world):
    import os
    for size, inodes in ((16, 4294967295), (16, 1 << 20), (64, 3000000)):
        name = world.name("vino")
        msg = world.rpc("volume.create", {"name": name, "sizeMiB": size, "inodes": inodes}, 120)
        try:
            err = msg.get("error") or {}
            expect_eq(((err.get("data") or {}).get("field"), err.get("code")), ("inodes", -32602),
                      "sizeMiB %d inodes %d: %s" % (size, inodes, json.dumps(msg)[:400]))
            expect("sizeMiB" in err.get("message", ""), "the message says what bounds it:", err.get("message"))
            expect(not os.path.exists(os.path.join(world.daemon.state_dir, "volumes", name)), "its directory is gone")
        finally:
            if "result" in msg:
                world.rpc("volume.delete", {"name": name}, 120)
    # The largest count that fits is made.
    with _volume(world, "vinomax", size=16, inodes=16 * 256) as vol:
        v = world.rpc("volume.get", {"name": vol})["result"]
        expect(v["inodes"] >= 4096, "the volume's inodes:", v)


def test_a_symlink_planted_above_a_mount_point_while_running_does_not_redirect_the_resume(world):
    """Root inside renames an ancestor of the mount point aside (the
    mount goes with it) and puts a symlink to /etc in its place; the
    resume must not follow it."""
    with _volume(world, "vres") as vol:
        name = world.name("vres")
        try:
            from common import rpc_ok
            rpc_ok(world, "sandbox.create", {"name": name, "networkPolicy": "deny-all", "persistent": True,
                                             "volumes": [{"name": vol, "path": "/srv/a/data"}]}, 180)
            sh_ok(world, name, "echo v > /srv/a/data/f && mv /srv/a /srv/b && ln -s /etc /srv/a && "
                               "cat /srv/b/data/f", "--sudo")
            rpc_ok(world, "sandbox.stop", {"name": name}, 120)
            msg = world.rpc("sandbox.get", {"name": name, "resume": True}, 180)
            err = (msg.get("error") or {}).get("message", "")
            expect("error" in msg and "symbolic link" in err, "the resume over a planted symlink:",
                   json.dumps(msg)[:400])
            # Nothing was mounted over /etc: the sandbox's files, made
            # sound again by a fork that drops the volume, show /etc as it was.
            fork = world.name("vresf")
            try:
                rpc_ok(world, "sandbox.fork", {"sourceSandbox": name, "name": fork,
                                               "overrides": {"volumes": []}}, 180)
                out = sh_ok(world, fork, "ls /etc/passwd && test ! -e /etc/data && echo CLEAN; "
                                         "grep -c -e ' /etc ' -e ' /etc/data ' /proc/self/mountinfo || true")
                expect("passwd" in out and "CLEAN" in out and out.split()[-1] == "0", "the fork's /etc:", out)
            finally:
                world.rpc("sandbox.delete", {"name": fork}, 120)
        finally:
            world.rpc("sandbox.delete", {"name": name}, 120)
test_a_symlink_planted_above_a_mount_point_while_running_does_not_redirect_the_resume.timeout = 400


def test_ids_root_inside_gives_in_a_volume_are_seen_alike_or_refused(world):
    import os
    userns = os.environ.get("SANDBOXD_TEST_USERNS", "1") != "0"
    with _volume(world, "vids") as vol, \
            _sandboxes(world, ("vida", {"volumes": [{"name": vol, "path": "/data"}]}),
                       ("vidb", {"volumes": [{"name": vol, "path": "/data"}]})) as (a, b):
        sh_ok(world, a, "touch /data/f")
        code, out, err = sh(world, a, "touch /data/r && chown 0:0 /data/r && chown 1234:1234 /data/f; "
                                      "echo rc=$?", "--sudo")
        me, f, r = sh_ok(world, b, "echo $(id -u):$(id -g); stat -c %u:%g /data/f /data/r").split()
        expect_eq(r, "0:0", "root's file in the other sandbox")
        if userns:
            expect("rc=0" in out, "root inside a user namespace gives its own ids:", out, err)
            expect_eq(f, "1234:1234", "the other sandbox sees the same sandbox ids")
        else:
            expect("rc=1" in out and "Value too large" in err, "an id the volume's map has not is refused:",
                   out, err)
            expect_eq(f, me, "the sandbox user's file, unchanged, in the other sandbox")
        # As the sandbox user, b cannot touch root's file, whatever a made.
        code, out, err = sh(world, b, "echo x > /data/r")
        expect(code != 0 and "Permission denied" in err, "the sandbox user writes root's file:", code, err)
test_ids_root_inside_gives_in_a_volume_are_seen_alike_or_refused.timeout = 300


def test_after_a_kill_9_the_daemon_still_refuses_to_delete_a_mounted_volume(world):
    import os
    import signal
    from common import rpc_ok
    from test_volumes import _volume_leaks
    vol = world.name("vk9")
    rpc_ok(world, "volume.create", {"name": vol, "sizeMiB": 16})
    sb = world.name("vk9s")
    try:
        rpc_ok(world, "sandbox.create", {"name": sb, "networkPolicy": "deny-all",
                                         "volumes": [{"name": vol, "path": "/data"}]}, 180)
        sh_ok(world, sb, "echo kept > /data/k")
        d = world.daemon
        os.kill(d.proc.pid, signal.SIGKILL)
        d.proc.wait()
        d.start()
        msg = world.rpc("volume.delete", {"name": vol}, 120)
        expect_eq(((msg.get("error") or {}).get("data") or {}).get("reason"), "in_use",
                  "delete after the restart: " + json.dumps(msg)[:300])
        sh_ok(world, sb, "echo more >> /data/k && cat /data/k")
        rpc_ok(world, "sandbox.delete", {"name": sb}, 120)
        rpc_ok(world, "volume.delete", {"name": vol}, 120)
        expect_eq(_volume_leaks(world, vol), [], "leaks of the volume")
    finally:
        world.rpc("sandbox.delete", {"name": sb}, 120)
        world.rpc("volume.delete", {"name": vol}, 120)
test_after_a_kill_9_the_daemon_still_refuses_to_delete_a_mounted_volume.timeout = 400



def test_a_pool_volume_whose_record_cannot_be_read_keeps_its_files_across_a_restart(world):
    """volume.c keeps a volume with an unreadable volume.json for the
    operator (files kept); the pool's start-up sweep must not take its
    subvolume either."""
    import signal
    import test_pool as P
    with P._Pool(world, "vakeep") as p:
        vol = world.name("vakv")
        msg = p.d.rpc("volume.create", {"name": vol, "sizeMiB": 32}, 120)
        expect("result" in msg, "volume.create in the pool:", msg.get("error"))
        try:
            a = p.create_ok("vaka", volumes=[{"name": vol, "path": "/data"}])
            P._sh_ok(p.d, a, "echo precious > /data/p && sync")
            p.d.rpc("sandbox.delete", {"name": a}, 120)
            p.sandboxes = []
            rec = os.path.join(p.d.state_dir, "volumes", vol, "volume.json")

            def restart():
                os.kill(p.d.proc.pid, signal.SIGKILL)
                p.d.proc.wait()
                p.d.start()
            with open(rec) as f:
                good = f.read()
            with open(rec, "w") as f:
                f.write("{")
            restart()
            expect_eq(((p.d.rpc("volume.get", {"name": vol}).get("error") or {}).get("data") or {}).get("reason"),
                      "not_found", "a volume whose record is unreadable is not loaded")
            with open(rec, "w") as f:
                f.write(good)
            restart()
            b = p.create_ok("vakb", volumes=[{"name": vol, "path": "/data"}])
            expect_eq(P._sh_ok(p.d, b, "cat /data/p").strip(), "precious", "the volume's file after the restarts")
            p.d.rpc("sandbox.delete", {"name": b}, 120)
            p.sandboxes = []
        finally:
            msg = p.d.rpc("volume.delete", {"name": vol}, 120)
        expect("result" in msg, "volume.delete:", json.dumps(msg)[:300])
        P.poll(lambda: P._pool_entries(p.d) == ([], []), 60, "the pool's subvolumes to go after the deletes")
test_a_pool_volume_whose_record_cannot_be_read_keeps_its_files_across_a_restart.timeout = 600


def test_sizes_past_every_bound_are_refused_naming_the_field(world):
    """Values that overflow size math (sizeMiB << 20, inodes × 4096) or are
    not whole numbers never reach the filesystem."""
    import os
    cases = [({"sizeMiB": 1e20}, "sizeMiB"), ({"sizeMiB": 16777217}, "sizeMiB"), ({"sizeMiB": 16.5}, "sizeMiB"),
             ({"sizeMiB": "16"}, "sizeMiB"), ({"sizeMiB": True}, "sizeMiB"), ({"sizeMiB": -16}, "sizeMiB"),
             ({"sizeMiB": 2 ** 64 + 16}, "sizeMiB"), ({"sizeMiB": 16, "inodes": -1}, "inodes"),
             ({"sizeMiB": 16, "inodes": 2 ** 64 + 4096}, "inodes"), ({"sizeMiB": 16, "inodes": 1e19}, "inodes"),
             ({"sizeMiB": 16, "inodes": 4096.5}, "inodes"), ({"sizeMiB": 16, "inodes": None}, "inodes")]
    for params, field in cases:
        name = world.name("vbnd")
        msg = world.rpc("volume.create", dict({"name": name}, **params), 120)
        try:
            err = msg.get("error") or {}
            expect_eq(((err.get("data") or {}).get("field"), err.get("code")), (field, -32602),
                      "%s: %s" % (json.dumps(params), json.dumps(msg)[:300]))
            expect(not os.path.exists(os.path.join(world.daemon.state_dir, "volumes", name)), "its directory")
        finally:
            if "result" in msg:
                world.rpc("volume.delete", {"name": name}, 120)


def _reason(msg):
    return ((msg.get("error") or {}).get("data") or {}).get("reason")


def test_a_delete_and_a_create_that_mounts_it_pipelined_never_leave_a_sandbox_without_its_volume(world):
    """Requests on one connection, sent before any answer: whichever the
    daemon takes first wins whole; a sandbox never runs (or is stored)
    naming a volume that is gone, and five creates of one name make one."""
    from common import rpc_ok
    from test_volumes import _volume_leaks
    vol = world.name("vrace")
    made = []
    try:
        with world.daemon.connect(120) as c:
            ids = [c.start("volume.create", {"name": vol, "sizeMiB": 16}) for _ in range(5)]
            got = [c.wait(i, 120) for i in ids]
        expect_eq(sum("result" in m for m in got), 1, "five creates of one name: %s" % [_reason(m) for m in got])
        expect_eq(sorted(_reason(m) for m in got if "error" in m), ["already_exists"] * 4, "the others")
        # A create that mounts it, then the delete.
        sb = world.name("vrs1")
        made.append(sb)
        with world.daemon.connect(180) as c:
            a = c.start("sandbox.create", {"name": sb, "networkPolicy": "deny-all",
                                           "volumes": [{"name": vol, "path": "/data"}]})
            b = c.start("volume.delete", {"name": vol})
            ra, rb = c.wait(a, 180), c.wait(b, 180)
        expect("result" in ra, "the create:", json.dumps(ra)[:300])
        expect_eq(_reason(rb), "in_use", "the delete behind it: " + json.dumps(rb)[:300])
        sh_ok(world, sb, "echo ok > /data/ok")
        # The last user's delete, then the volume's: refused while the
        # sandbox is still going, or done once it is gone, never both.
        with world.daemon.connect(180) as c:
            a = c.start("sandbox.delete", {"name": sb})
            b = c.start("volume.delete", {"name": vol})
            ra, rb = c.wait(a, 180), c.wait(b, 180)
        expect("result" in ra, "the sandbox's delete:", json.dumps(ra)[:300])
        expect(_reason(rb) == "in_use" or "result" in rb, "the volume's delete:", json.dumps(rb)[:300])
        if "result" in rb:
            rpc_ok(world, "volume.create", {"name": vol, "sizeMiB": 16})
        # The delete, then a create that mounts it.
        sb2 = world.name("vrs2")
        made.append(sb2)
        with world.daemon.connect(180) as c:
            b = c.start("volume.delete", {"name": vol})
            a = c.start("sandbox.create", {"name": sb2, "networkPolicy": "deny-all",
                                           "volumes": [{"name": vol, "path": "/data"}]})
            rb, ra = c.wait(b, 180), c.wait(a, 180)
        expect("result" in rb, "the delete:", json.dumps(rb)[:300])
        expect_eq(_reason(ra), "not_found", "the create behind it: " + json.dumps(ra)[:300])
        expect_eq(_reason(world.rpc("sandbox.get", {"name": sb2})), "not_found", "no sandbox was made")
        expect_eq(_volume_leaks(world, vol), [], "leaks of the deleted volume")
    finally:
        for n in made:
            world.rpc("sandbox.delete", {"name": n}, 120)
        world.rpc("volume.delete", {"name": vol}, 120)
test_a_delete_and_a_create_that_mounts_it_pipelined_never_leave_a_sandbox_without_its_volume.timeout = 400


_PIPELINED = r"""
import json, socket, sys
reqs = json.loads(sys.argv[1])
s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
s.settimeout(300)
s.connect("sandboxd.sock")
s.sendall(b"".join(json.dumps(dict(r, jsonrpc="2.0", id=i + 1)).encode() + b"\n" for i, r in enumerate(reqs)))
f = s.makefile("rb")
out = {}
while len(out) < len(reqs):
    m = json.loads(f.readline())
    if "id" in m:
        out[m["id"]] = m
print(json.dumps([out[i + 1] for i in range(len(reqs))]), flush=True)
"""


def test_a_tenant_flooding_volume_creates_gets_its_room_and_no_more(world):
    import subprocess
    import test_tenant_room as T
    from test_volumes import TENANT

    def pipelined(d, reqs):
        p = subprocess.run(["python3", "-c", _PIPELINED, json.dumps(reqs)], cwd=d.dir, user=TENANT,
                           group=T.NOGROUP, extra_groups=[], capture_output=True, text=True, timeout=600)
        expect(p.returncode == 0, "client:", p.stdout[-300:], p.stderr[-500:])
        return json.loads(p.stdout.strip().splitlines()[-1])
    world.stop_sandboxd()
    d = world.start_sandboxd({"socketGroup": "nogroup", "tenants": {"names": {
        "uid:%d" % TENANT: {"maxDiskMiB": 64}}}}, tag="vflood")
    names = [world.name("vfl%d" % i) for i in range(12)]
    try:
        got = pipelined(d, [{"method": "volume.create", "params": {"name": n, "sizeMiB": 16}} for n in names])
        ok = [n for n, m in zip(names, got) if "result" in m]
        expect_eq(len(ok), 4, "creates within maxDiskMiB 64: %s" % [_reason(m) for m in got])
        expect_eq(sorted({_reason(m) for m in got if "error" in m}), ["limit_exceeded"], "the others")
        listed = pipelined(d, [{"method": "volume.list", "params": {}}])[0]["result"]["volumes"]
        expect_eq(sorted(v["name"] for v in listed), sorted(ok), "the tenant's volumes")
        got = pipelined(d, [{"method": "volume.delete", "params": {"name": n}} for n in names])
        expect_eq(sum("result" in m for m in got), 4, "deletes")
        for n in names:
            expect(not os.path.exists(os.path.join(d.state_dir, "volumes", n)), "volume %s left" % n)
    finally:
        for n in names:
            world.rpc("volume.delete", {"name": n}, 120)
        world.stop_sandboxd(d)
        world.start_sandboxd()
test_a_tenant_flooding_volume_creates_gets_its_room_and_no_more.timeout = 600


def test_a_volume_the_state_filesystem_cannot_back_is_refused_before_anything_is_formatted(world):
    """A refused create leaves nothing: no volume directory, and no disk
    template formatted at the refused size (templates are kept, counted
    nowhere, and mkfs of a huge image writes hundreds of MiB)."""
    import time
    tdir = os.path.join(world.daemon.state_dir, "disk-templates")

    def templates():
        try:
            return {f: os.stat(os.path.join(tdir, f)).st_blocks * 512 for f in os.listdir(tdir)}
        except FileNotFoundError:
            return {}
    before = templates()
    st = os.statvfs(world.daemon.state_dir)
    for size in (((st.f_bavail * st.f_frsize) >> 20) + 64, 16777216):
        name = world.name("vhuge")
        t0 = time.monotonic()
        msg = world.rpc("volume.create", {"name": name, "sizeMiB": size}, 600)
        took = time.monotonic() - t0
        try:
            err = msg.get("error") or {}
            expect_eq(((err.get("data") or {}).get("reason"), (err.get("data") or {}).get("field")),
                      ("limit_exceeded", "sizeMiB"), "sizeMiB %d: %s" % (size, json.dumps(msg)[:300]))
        finally:
            if "result" in msg:
                world.rpc("volume.delete", {"name": name}, 120)
        new = {f: b for f, b in templates().items() if f not in before}
        expect_eq(new, {}, "templates formatted for the refused sizeMiB %d (%.1fs)" % (size, took))


def test_a_tenant_is_told_no_host_path_of_the_daemons_state(world):
    """An error that names a path under the state directory (here a volume
    whose filesystem an operator unmounted behind the daemon's back) reads
    <stateDir> in its place for a tenant; an admin reads the path itself."""
    import test_tenant_room as T
    world.stop_sandboxd()
    d = world.start_sandboxd({"socketGroup": "nogroup"}, tag="vpath")
    vol = world.name("vpath")
    upper = None
    try:
        made = T._as(d, [{"method": "volume.create", "params": {"name": vol, "sizeMiB": 16}}])[0]
        expect("result" in made, "the tenant's volume:", json.dumps(made)[:300])
        upper = os.path.join(d.state_dir, "volumes", vol, "upper")
        source = os.path.join(d.state_dir, "volumes", vol, "disk", "upper")
        ns = ["nsenter", "-t", str(d.pid), "-m", "--"]  # the daemon's mount namespace
        subprocess.run(ns + ["test", "-d", source], check=True)
        subprocess.run(ns + ["umount", "-l", upper], check=True)
        params = {"networkPolicy": "deny-all", "volumes": [{"name": vol, "path": "/data"}]}
        mine = T._as(d, [{"method": "sandbox.create", "params": dict(params, name=world.name("vpt"))}])[0]
        msg = (mine.get("error") or {}).get("message", "")
        expect(msg, "the tenant's create fails:", json.dumps(mine)[:300])
        expect(d.state_dir not in msg and "<stateDir>/volumes/" + vol in msg,
               "the tenant reads <stateDir>, not the host path:", msg)
        admin = d.rpc("sandbox.create", dict(params, name=world.name("vpa")))
        amsg = (admin.get("error") or {}).get("message", "")
        expect(d.state_dir in amsg, "the admin reads the path itself:", amsg)
        subprocess.run(ns + ["mount", "--bind", source, upper], check=True)
        upper = None
        expect("result" in T._as(d, [{"method": "volume.delete", "params": {"name": vol}}])[0], "deleted")
    finally:
        if upper:
            subprocess.run(ns + ["mount", "--bind", os.path.join(os.path.dirname(upper), "disk", "upper"), upper])
        d.rpc("volume.delete", {"name": vol})
        world.stop_sandboxd(d)
        world.start_sandboxd()
test_a_tenant_is_told_no_host_path_of_the_daemons_state.timeout = 300
