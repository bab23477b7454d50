"""A full state filesystem: a change that cannot be saved is refused and
changes nothing, and sandboxd still starts on it and re-adopts its running
sandboxes (issue: starting must need no free space)."""
import contextlib
import os
import signal
import subprocess
import tempfile

import world as W
from common import expect, expect_eq


@contextlib.contextmanager
def _small_tmpfs(world, size="48m"):
    d = tempfile.mkdtemp(prefix="statefs-", dir=world.tmp)
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=%s,mode=0755" % size, "tmpfs", d], check=True)
    try:
        yield d
    finally:
        subprocess.run(["umount", "-l", d], capture_output=True)
        os.rmdir(d)


def _fill(directory):
    """Writes a file until the filesystem is full; returns its path."""
    path = os.path.join(directory, "filler")
    block = b"\0" * (1 << 20)
    with open(path, "wb", buffering=0) as f:
        try:
            while True:
                f.write(block)
        except OSError:
            pass
        try:
            while True:
                f.write(b"\0" * 512)
        except OSError:
            pass
    return path


def test_full_state_filesystem_refuses_updates_and_still_starts(world):
    world.stop_sandboxd()  # one daemon per network namespace
    try:
        _full_state(world)
    finally:
        world.start_sandboxd()


def _full_state(world):
    with _small_tmpfs(world) as fs:
        state = os.path.join(fs, "state")
        d = world.add_sandboxd(tag="full", state_dir=state)
        d.start()
        name = world.name("full")
        filler = None
        try:
            d.rpc_result("sandbox.create", {"name": name, "networkPolicy": "deny-all",
                                            "tags": {"team": "a"}}, 120)
            d.rpc_result("sandbox.create", {"name": name + "-p", "networkPolicy": "deny-all",
                                            "persistent": True}, 120)
            filler = _fill(fs)
            e = d.rpc("sandbox.update", {"name": name, "tags": {"team": "b"}, "env": {"X": "1"}}).get("error")
            expect(e is not None, "update on a full state filesystem answered success")
            expect("nothing changed" in e.get("message", ""), "the error says nothing changed:", e)
            sb = d.rpc_result("sandbox.get", {"name": name})
            expect_eq((sb["tags"], sb["env"]), ({"team": "a"}, {}), "tags and env after the refused update")
            e = d.rpc("sandbox.create", {"name": name + "-2", "networkPolicy": "deny-all"}, 120).get("error")
            expect(e is not None, "create on a full state filesystem answered success")
            names = [x["name"] for x in d.rpc_result("sandbox.list", {})["sandboxes"]]
            expect_eq(sorted(names), [name, name + "-p"], "sandboxes after the refused create")
            # A restart (kill -9) on the full filesystem starts and
            # re-adopts the running sandbox.
            os.kill(d.proc.pid, signal.SIGKILL)
            d.proc.wait(10)
            d.start()
            with open(d.log_path, errors="replace") as f:
                log = f.read()
            # The host runtime's version is unchanged, so it is used as it
            # is (nothing written); a changed one falls back to the newest
            # existing version.
            expect("re-adopted" in log, "the restart on a full disk re-adopted:", d.log_tail(15))
            sb = d.rpc_result("sandbox.get", {"name": name})
            expect_eq((sb["status"], sb["tags"]), ("running", {"team": "a"}), "the sandbox after the restart")
            for n in (name, name + "-p"):
                code, out, err = d.ctl("exec", n, "--", "echo", "alive")
                expect_eq((code, out), (0, "alive\n"), "exec in %s after a restart on a full disk (%s)"
                          % (n, err.strip()))
            # With room again the update goes through.
            os.unlink(filler)
            filler = None
            sb = d.rpc_result("sandbox.update", {"name": name, "tags": {"team": "b"}})
            expect_eq(sb["tags"], {"team": "b"}, "tags after an update with room")
        finally:
            if filler:
                os.unlink(filler)
            if d.alive():
                for n in (name, name + "-p"):
                    d.rpc("sandbox.delete", {"name": n}, 60)
            world.stop_sandboxd(d)


def _disk_reserve(world, name):
    """(free blocks, ext4's own reserved clusters, the root reserve in
    blocks) of the sandbox's disk image, as the daemon sees it."""
    mnt = os.path.join(world.daemon.state_dir, "sandboxes", name, "disk")

    def in_daemon_ns(*argv):
        p = subprocess.run(["nsenter", "-t", str(world.daemon.pid), "-m", "--"] + list(argv),
                           capture_output=True, text=True, timeout=30)
        expect_eq(p.returncode, 0, "%s (%s)" % (" ".join(argv), p.stderr.strip()))
        return p.stdout
    dev = in_daemon_ns("findmnt", "-n", "-o", "SOURCE", mnt).strip()
    bfree = int(in_daemon_ns("stat", "-f", "-c", "%f", mnt))
    with open("/sys/fs/ext4/%s/reserved_clusters" % os.path.basename(dev)) as f:
        resv = int(f.read())
    sb = dict(line.split(":", 1) for line in in_daemon_ns("dumpe2fs", "-h", dev).splitlines() if ":" in line)
    return bfree, resv, int(sb["Reserved block count"])


def test_the_sandbox_user_cannot_use_the_disk_reserve_without_a_user_namespace(world):
    # Finding: without a user namespace the overlay wrote the upper layer
    # with host root's credentials (CAP_SYS_RESOURCE, fsuid 0 = ext4's
    # resuid), so the sandbox user filling $HOME took the image's root
    # reserve too, and the next resume failed writing /etc/hosts: "No
    # space left on device", forever.
    _fill_stop_resume(world, False)


def test_the_sandbox_user_cannot_use_the_disk_reserve_with_a_user_namespace(world):
    u = world.rpc_result("daemon.info").get("capabilities", {}).get("userns") or {}
    if not u.get("available"):
        raise W.Skip("user namespaces are not available here")
    _fill_stop_resume(world, True)


def _fill_stop_resume(world, userns):
    name = world.name("resv")
    world.rpc_result("sandbox.create", {"name": name, "persistent": True, "userns": userns,
                                        "resources": {"diskMiB": 16}, "networkPolicy": "deny-all"}, 120)
    try:
        code, out, err = world.ctl("exec", name, "--", "sh", "-c",
                                   "cd; i=0; while [ $i -lt 200 ]; do touch t$i || break; i=$((i+1)); done; "
                                   "dd if=/dev/zero of=fill bs=64k 2>&1; dd if=/dev/zero of=fill2 bs=1k 2>&1; "
                                   "id -u", timeout=120)
        expect("No space left on device" in out, "the fill as the sandbox user ended on ENOSPC:", code, out[-300:],
               err[-300:])
        expect(out.split()[-1:] != ["0"], "the fill ran as root:", out[-100:])
        # statfs's free blocks count ext4's own reserved clusters and the
        # root reserve (CORE_DISK_RESERVE_PCT of the blocks): both must be
        # whole after the sandbox user filled the disk.
        bfree, resv, r_blocks = _disk_reserve(world, name)
        expect(r_blocks > 0, "the image has no root reserve")
        expect(bfree >= resv + r_blocks, "the sandbox user used the disk's root reserve: %d blocks free, "
               "%d reserved by ext4, %d for root" % (bfree, resv, r_blocks))
        code, _o, err = world.ctl("stop", name, timeout=120)
        expect_eq(code, 0, "stop of the full sandbox (%s)" % err.strip())
        code, out, err = world.ctl("exec", name, "--", "cat", "/etc/hostname", timeout=120)
        expect_eq((code, out.strip()), (0, name), "resume of the full sandbox (%s)" % err.strip()[-300:])
    finally:
        world.ctl("rm", name, timeout=120)
