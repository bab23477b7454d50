"""A full state filesystem: a change that cannot be saved is refused and
changes nothing, and sandboxd still starts on it and re-adopts its running
sandboxes (issue: starting must need no free space)."""
import contextlib
import os
import re
import signal
import subprocess
import tempfile
import threading

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
    with _small_tmpfs(world, "96m") as fs:
        state = os.path.join(fs, "state")
        # Each disk image holds its blocks (docs/SECURITY.md "Disk space"):
        # two of the smallest fit the small filesystem.
        d = world.add_sandboxd(config={"diskMiB": 16}, tag="full", state_dir=state)
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


# ---------------------------------------------------------------- a writer past the host's space

@contextlib.contextmanager
def _small_ext4(world, mib):
    """A state filesystem of `mib` MiB: ext4 on a loop device (autoclear:
    it goes with the unmount), in a file of the world's."""
    d = tempfile.mkdtemp(prefix="statefs-", dir=world.tmp)
    img = d + ".img"
    with open(img, "wb") as f:
        f.truncate(mib << 20)
    subprocess.run(["mkfs.ext4", "-q", "-E", "nodiscard", img], check=True)
    subprocess.run(["mount", "-o", "loop", img, d], check=True)
    try:
        yield d
    finally:
        subprocess.run(["umount", "-l", d], capture_output=True)
        os.rmdir(d)
        os.unlink(img)


_FS_ERROR = re.compile(r"EXT4-fs error|aborted journal|Remounting filesystem read-only|"
                       r"I/O error|Buffer I/O error|blk_update_request", re.I)


def _kernel_log():
    p = subprocess.run(["dmesg"], capture_output=True, text=True)
    return p.stdout.splitlines()


def _loop_of(d, path):
    """The block device mounted at `path` in the daemon's mount namespace."""
    p = subprocess.run(["nsenter", "-t", str(d.pid), "-m", "--", "findmnt", "-n", "-o", "SOURCE", path],
                       capture_output=True, text=True, timeout=30)
    expect_eq(p.returncode, 0, "findmnt %s (%s)" % (path, p.stderr.strip()))
    return os.path.basename(p.stdout.strip())


def test_a_writer_past_the_host_space_gets_enospc_alone_without_a_user_namespace(world):
    _writer_past_host(world, False)


def test_a_writer_past_the_host_space_gets_enospc_alone_with_a_user_namespace(world):
    u = world.rpc_result("daemon.info").get("capabilities", {}).get("userns") or {}
    if not u.get("available"):
        raise W.Skip("user namespaces are not available here")
    _writer_past_host(world, True)


def _writer_past_host(world, userns):
    # Issue #21: with sparse images one sandbox writing past what the state
    # filesystem held aborted ANOTHER sandbox's ext4 journal (read-only, an
    # acknowledged file lost). Every image now holds its blocks: a disk
    # that cannot be backed is refused, the writer gets ENOSPC from its own
    # disk, and a full state filesystem fails no write inside any image.
    world.stop_sandboxd()  # one daemon per network namespace
    try:
        with _small_ext4(world, 400) as fs:
            d = world.add_sandboxd(config={"diskMiB": 64, "userns": userns}, tag="host", state_dir=fs + "/state")
            d.start()
            try:
                _writer_past_host_in(world, d, fs)
            finally:
                if d.alive():
                    for sb in d.rpc_result("sandbox.list", {})["sandboxes"]:
                        d.rpc("sandbox.delete", {"name": sb["name"]}, 120)
                world.stop_sandboxd(d)
    finally:
        world.start_sandboxd()


def _sh(d, name, script, timeout=180):
    return d.ctl("exec", name, "--", "sh", "-c", script, timeout=timeout)


def _writer_past_host_in(world, d, fs):
    victim, writer = world.name("victim"), world.name("writer")
    d.rpc_result("sandbox.create", {"name": victim, "networkPolicy": "deny-all", "persistent": True}, 120)
    code, out, err = _sh(d, victim, "cd && head -c 4194304 /dev/urandom > ack && sha256sum ack > ack.sum && "
                                    "echo 1 > counter && sync && cat ack.sum")
    expect_eq(code, 0, "the victim's acknowledged file (%s)" % err.strip()[-300:])
    ack_sum = out.split()[0]
    # Admission: a disk larger than the state filesystem can back is
    # refused, naming the field and the free space, and leaves nothing.
    e = d.rpc("sandbox.create", {"name": writer + "-big", "networkPolicy": "deny-all",
                                 "resources": {"diskMiB": 1024}}, 120).get("error")
    expect(e is not None, "a 1 GiB disk on a 400 MiB state filesystem was admitted")
    expect("cannot back" in e.get("message", "") and "resources.diskMiB" in e.get("message", ""),
           "the refusal says why and which field:", e)
    names = [x["name"] for x in d.rpc_result("sandbox.list", {})["sandboxes"]]
    expect_eq(names, [victim], "sandboxes after the refused create")
    info = d.rpc_result("daemon.info")["storage"]
    expect_eq((info["model"], info["committedBytes"], info["unbackedDisks"]), ("backed", 64 << 20, 0),
              "daemon.info storage")
    expect(0 < info["freeBytes"] < info["totalBytes"], "daemon.info storage free and total:", info)
    d.rpc_result("sandbox.create", {"name": writer, "networkPolicy": "deny-all",
                                    "resources": {"diskMiB": 160}}, 120)
    victim_dev = _loop_of(d, os.path.join(fs, "state", "sandboxes", victim, "disk"))
    before = len(_kernel_log())
    # The rest of the state filesystem goes to the daemon's own files (a
    # host-side filler stands for layers, logs, exports) while the writer
    # writes past its disk and a fork and a snapshot of it copy its files
    # onto the full state filesystem.
    filler = os.path.join(fs, "filler")
    with open(filler, "wb", buffering=0) as f:
        try:
            while True:
                f.write(b"\1" * (1 << 20))
        except OSError:
            pass
    answers = {}

    def call(key, method, params):
        answers[key] = d.rpc(method, params, 300)
    code, out, err = _sh(d, writer, "cd && dd if=/dev/zero of=big bs=1M count=400 2>&1; echo rc=$?")
    expect("No space left on device" in out and "rc=1" in out, "the writer past its disk got ENOSPC:",
           out[-300:], err[-300:])
    threads = [threading.Thread(target=call, args=("fork", "sandbox.fork",
                                                   {"sourceSandbox": writer, "name": writer + "-f"})),
               threading.Thread(target=call, args=("snap", "sandbox.snapshot", {"name": writer}))]
    for t in threads:
        t.start()
    # Meanwhile the victim writes, keeps its files, and counts.
    for i in range(2, 6):
        code, out, err = _sh(d, victim, "cd && head -c 1048576 /dev/urandom > more%d && echo %d > counter && "
                                        "sync && cat counter && sha256sum -c ack.sum" % (i, i))
        expect_eq((code, out.split()[0] if out else ""), (0, str(i)),
                  "the victim writes on a full state filesystem (%s %s)" % (out[-200:], err.strip()[-300:]))
    for t in threads:
        t.join(320)
    for key in ("fork", "snap"):
        a = answers.get(key) or {}
        expect("result" in a or "error" in a, "%s answered:" % key, a)
    code, _o, err = d.ctl("stop", victim, timeout=120)
    expect_eq(code, 0, "stop of the victim (%s)" % err.strip())
    code, out, err = _sh(d, victim, "cd && sha256sum -c ack.sum && cat counter && echo 6 > counter && sync && "
                                    "cat counter")
    expect_eq((code, out.split()[-2:]), (0, ["5", "6"]),
              "the victim after a resume on a full state filesystem (%s %s)" % (out[-200:], err.strip()[-300:]))
    expect(ack_sum in open_sum(d, victim), "the acknowledged file's sum")
    errors = [line for line in _kernel_log()[before:] if _FS_ERROR.search(line) and victim_dev in line]
    expect_eq(errors, [], "kernel filesystem errors on the victim's disk (%s)" % victim_dev)
    os.unlink(filler)


def open_sum(d, name):
    code, out, err = _sh(d, name, "cd && cat ack.sum")
    expect_eq(code, 0, "read ack.sum (%s)" % err.strip())
    return out


def test_a_sparse_disk_of_an_earlier_version_is_backed_at_the_next_start(world):
    # Migration (issue #21): an image made sparse (as every image was
    # before) gets its blocks when the daemon attaches it again, and its
    # files stay.
    world.stop_sandboxd()
    try:
        d = world.add_sandboxd(config={"diskMiB": 32}, tag="mig")
        d.start()
        name = world.name("mig")
        try:
            d.rpc_result("sandbox.create", {"name": name, "networkPolicy": "deny-all", "persistent": True}, 120)
            code, _o, err = _sh(d, name, "cd && echo kept > f && sync")
            expect_eq(code, 0, "write (%s)" % err.strip())
            code, _o, err = d.ctl("stop", name, timeout=120)
            expect_eq(code, 0, "stop (%s)" % err.strip())
            world.stop_sandboxd(d)
            img = os.path.join(d.state_dir, "sandboxes", name, "disk.img")
            size = os.stat(img).st_size
            # The last MiB of a fresh 32 MiB ext4 holds nothing yet: a hole
            # there is what a sparse image of an earlier version has.
            subprocess.run(["fallocate", "-p", "-o", str(size - (1 << 20)), "-l", str(1 << 20), img], check=True)
            expect(os.stat(img).st_blocks * 512 < size, "the punched image is sparse")
            d.start()
            info = d.rpc_result("daemon.info")["storage"]
            expect_eq((info["disks"], info["unbackedDisks"], info["committedBytes"]), (1, 0, 32 << 20),
                      "daemon.info storage after the start")
            expect(os.stat(img).st_blocks * 512 >= size, "the image holds all its blocks after the start")
            code, out, err = _sh(d, name, "cd && cat f")
            expect_eq((code, out), (0, "kept\n"), "the file after the migration (%s)" % err.strip())
        finally:
            if d.alive():
                d.rpc("sandbox.delete", {"name": name}, 120)
            world.stop_sandboxd(d)
    finally:
        world.start_sandboxd()
