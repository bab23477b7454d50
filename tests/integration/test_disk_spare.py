"""The spare disk (libcore/diskimg.c): one image of the daemon's default
size is made ahead, mounted detached, and taken by the next create. Each
create still gets a disk of its own (its own filesystem identity, files
no other sandbox sees), a create of another size makes its own, and a
daemon killed with its spare ready leaves only the spare's image, which
the next start removes."""
import os
import signal
import subprocess

import leaks
import world as W
from common import expect, expect_eq, poll, rpc_ok, sh, sh_ok


def _spare_dir(d):
    return os.path.join(d.state_dir, "disk-spare")


def _loops_backed_below(path):
    out = []
    for dev in os.listdir("/sys/block"):
        try:
            with open("/sys/block/%s/loop/backing_file" % dev) as f:
                backing = f.read().strip()
        except OSError:
            continue
        if backing.startswith(path + "/"):
            out.append((dev, backing))
    return out


def _spare_ready(d):
    """The spare's image once a loop device backs it (made, attached)."""
    spare = _spare_dir(d)
    imgs = os.listdir(spare) if os.path.isdir(spare) else []
    backed = [b for _dev, b in _loops_backed_below(spare)]
    ready = [os.path.join(spare, x) for x in imgs if os.path.join(spare, x) in backed]
    return ready[0] if ready else None


def _uuid(path):
    p = subprocess.run(["blkid", "-p", "-o", "value", "-s", "UUID", path], capture_output=True, text=True)
    expect_eq(p.returncode, 0, "blkid %s (%s)" % (path, p.stderr.strip()))
    return p.stdout.strip()


def test_creates_from_the_spare_get_disks_of_their_own(world):
    d = world.daemon
    names = [world.name("spare%d" % i) for i in range(3)]
    try:
        for i, n in enumerate(names):
            poll(lambda: _spare_ready(d), 60, "a spare disk is ready")
            rpc_ok(world, "sandbox.create", {"name": n, "networkPolicy": "deny-all"}, 120)
            sh_ok(world, n, "echo %d > /workspace/mine" % i)
        uuids = set()
        for i, n in enumerate(names):
            code, out, _ = sh(world, n, "cat /workspace/mine; ls /workspace")
            expect_eq((code, out), (0, "%d\nmine\n" % i), "the files of %s" % n)
            img = os.path.join(d.state_dir, "sandboxes", n, "disk.img")
            expect_eq(os.stat(img).st_size, W.WORLD_DISK_MIB << 20, "the size of %s's disk" % n)
            uuids.add(_uuid(img))
        expect_eq(len(uuids), len(names), "distinct filesystem UUIDs of the disks: %s" % uuids)
    finally:
        for n in names:
            world.rpc("sandbox.delete", {"name": n}, 60)
    for n in names:
        leaks.check(world, n)


def test_a_create_of_another_size_makes_its_own_disk(world):
    d = world.daemon
    n = world.name("sparesz")
    poll(lambda: _spare_ready(d), 60, "a spare disk is ready")
    spare = _spare_ready(d)
    try:
        rpc_ok(world, "sandbox.create", {"name": n, "networkPolicy": "deny-all",
                                     "resources": {"diskMiB": W.WORLD_DISK_MIB + 16}}, 120)
        img = os.path.join(d.state_dir, "sandboxes", n, "disk.img")
        expect_eq(os.stat(img).st_size, (W.WORLD_DISK_MIB + 16) << 20, "the size of the disk")
        expect_eq(_spare_ready(d), spare, "the spare of the default size after the create of another")
        sh_ok(world, n, "echo x > /workspace/f")
    finally:
        world.rpc("sandbox.delete", {"name": n}, 60)
    leaks.check(world, n)


def test_a_killed_daemon_leaves_only_its_spare_image_which_the_next_start_removes(world):
    d = world.daemon
    poll(lambda: _spare_ready(d), 60, "a spare disk is ready")
    old = _spare_ready(d)
    os.kill(d.proc.pid, signal.SIGKILL)
    d.proc.wait(10)
    # Its mount went with the process, and the loop device clears itself
    # once the mount is gone: only the image is left.
    poll(lambda: not _loops_backed_below(_spare_dir(d)), 30, "the dead daemon's spare loop device goes")
    expect(os.path.exists(old), "the dead daemon's spare image is left for the next start")
    d.start()
    expect(not os.path.exists(old), "the next start removed the dead daemon's spare image %s" % old)
    poll(lambda: _spare_ready(d), 60, "a new spare disk is ready")
    n = world.name("sparek")
    try:
        rpc_ok(world, "sandbox.create", {"name": n, "networkPolicy": "deny-all"}, 120)
        sh_ok(world, n, "echo x > /workspace/f")
    finally:
        world.rpc("sandbox.delete", {"name": n}, 60)
    leaks.check(world, n)
