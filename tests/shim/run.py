#!/usr/bin/env python3
"""The containerd shim (shim/, containerd-shim-sandboxd-v2) end to end: a
private containerd (its own root, state, sockets and config) in the test
world's host network namespace, driving a private sandboxd through the shim
with `ctr run --runtime io.containerd.sandboxd.v2 --rootfs DIR ...`.

    python3 tests/shim/run.py [SUBSTRING...]

The rootfs is a directory holding Debian's static busybox. Every process
started here (containerd; the shims it starts live in the world's cgroups)
is stopped by pid; the world tears down the rest. Exit 1 on any failure.
"""
import hashlib
import json
import os
import pty
import pwd
import select
import shutil
import signal
import subprocess
import sys
import time
import traceback

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "integration"))

import world as W  # noqa: E402
import leaks  # noqa: E402
from common import expect, expect_eq  # noqa: E402

SHIM = os.path.join(W.BUILD, "containerd-shim-sandboxd-v2")
RUNTIME = "io.containerd.sandboxd.v2"
NS = "sbxtest"
BUSYBOX = "/bin/busybox"
APPLETS = ("sh", "echo", "cat", "sleep", "nc", "id", "ls", "env", "tty", "stty", "wc", "true", "false", "date",
           "readlink")


def sandbox_name(cid):
    """shim/spec.go sandboxName."""
    return "ctr-" + hashlib.sha256(("%s/%s" % (NS, cid)).encode()).hexdigest()[:16]


class Containerd:
    """containerd with everything under `base`, in the world host netns."""

    def __init__(self, world, base):
        self.world = world
        self.base = base
        self.root = os.path.join(base, "root")
        self.state = os.path.join(base, "state")
        self.sock = os.path.join(base, "containerd.sock")
        self.log = os.path.join(base, "containerd.log")
        self.proc = None

    def share_mounts(self):
        """`base` as a shared mount (bound onto itself, rshared), made
        before sandboxd starts: sandboxd's mount namespace (a slave of the
        host's) then receives the mounts made below it, such as the pods'
        network namespaces, as on a node whose / is shared (systemd's
        default); the test host's / is private. stop() unmounts it."""
        os.makedirs(self.base, exist_ok=True)
        subprocess.run(["mount", "--bind", self.base, self.base], check=True)
        subprocess.run(["mount", "--make-rshared", self.base], check=True)

    def start(self):
        os.makedirs(self.base, exist_ok=True)
        cfg = os.path.join(self.base, "config.toml")
        with open(cfg, "w") as f:
            f.write("""version = 2
root = "%s"
state = "%s"
disabled_plugins = ["io.containerd.grpc.v1.cri", "io.containerd.snapshotter.v1.btrfs",
  "io.containerd.snapshotter.v1.zfs", "io.containerd.snapshotter.v1.devmapper",
  "io.containerd.snapshotter.v1.aufs", "io.containerd.tracing.processor.v1.otlp",
  "io.containerd.internal.v1.tracing"]
[grpc]
  address = "%s"
[ttrpc]
  address = "%s.ttrpc"
""" % (self.root, self.state, self.sock, self.sock))
        # The shim is found on PATH (containerd-shim-<name>-v2) and finds
        # sandboxd by SANDBOXD_SOCKET, both inherited from containerd.
        env = dict(os.environ, PATH=W.BUILD + ":" + os.environ.get("PATH", "/usr/bin:/bin"),
                   SANDBOXD_SOCKET=self.world.daemon.socket,
                   SANDBOXD_SHIM_ROOTFS_DIRS=self.world.tmp)
        cg = self.world.cgroup_dirs
        log = open(self.log, "ab")
        self.proc = subprocess.Popen(
            ["nsenter", "--net=/run/netns/" + self.world.host_ns, "--",
             "containerd", "--config", cfg], stdin=subprocess.DEVNULL, stdout=log, stderr=log,
            env=env, start_new_session=True, preexec_fn=lambda: W._join_cgroups(cg))
        log.close()
        W.World.wait_until(lambda: self.ctr("version").returncode == 0 or self.proc.poll() is not None,
                           20, "containerd to answer")
        if self.proc.poll() is not None:
            raise W.WorldError("containerd exited: %s" % self.log_tail())

    def ctr(self, *args, timeout=60, **kw):
        return subprocess.run(["ctr", "--address", self.sock, "-n", NS] + list(args),
                              capture_output=True, text=True, timeout=timeout,
                              stdin=kw.pop("stdin", subprocess.DEVNULL), **kw)

    def log_tail(self, n=30):
        try:
            with open(self.log, errors="replace") as f:
                return "".join(f.readlines()[-n:])
        except OSError:
            return ""

    def stop(self):
        if self.proc and self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                os.kill(self.proc.pid, signal.SIGKILL)
                self.proc.wait(10)
        for mp in sorted(W.mounts_below(self.base), key=len, reverse=True):
            subprocess.run(["umount", "-l", mp], capture_output=True)


def make_rootfs(d):
    os.makedirs(os.path.join(d, "bin"))
    os.makedirs(os.path.join(d, "etc"))
    shutil.copy2(BUSYBOX, os.path.join(d, "bin", "busybox"))
    for a in APPLETS:
        os.symlink("busybox", os.path.join(d, "bin", a))


def make_image(rootfs, out):
    """An OCI image archive (image-spec: oci-layout, index.json, blobs) of
    the tree `rootfs` in one gzip layer, for `ctr image import`."""
    import gzip
    import io
    import tarfile
    blobs = {}

    def blob(data, media):
        dg = hashlib.sha256(data).hexdigest()
        blobs[dg] = data
        return {"mediaType": media, "digest": "sha256:" + dg, "size": len(data)}
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w") as tf:
        for name in sorted(os.listdir(rootfs)):
            tf.add(os.path.join(rootfs, name), arcname=name)
    layer = raw.getvalue()
    diff_id = "sha256:" + hashlib.sha256(layer).hexdigest()
    layer_desc = blob(gzip.compress(layer, mtime=0), "application/vnd.oci.image.layer.v1.tar+gzip")
    config = json.dumps({"architecture": "amd64", "os": "linux",
                         "config": {"Env": ["PATH=/bin"], "Cmd": ["sh"]},
                         "rootfs": {"type": "layers", "diff_ids": [diff_id]}}).encode()
    config_desc = blob(config, "application/vnd.oci.image.config.v1+json")
    manifest = json.dumps({"schemaVersion": 2, "mediaType": "application/vnd.oci.image.manifest.v1+json",
                           "config": config_desc, "layers": [layer_desc]}).encode()
    man_desc = blob(manifest, "application/vnd.oci.image.manifest.v1+json")
    man_desc["annotations"] = {"org.opencontainers.image.ref.name": "1"}
    man_desc["platform"] = {"architecture": "amd64", "os": "linux"}
    index = json.dumps({"schemaVersion": 2, "manifests": [man_desc]}).encode()
    with tarfile.open(out, "w") as tf:
        def add(name, data):
            ti = tarfile.TarInfo(name)
            ti.size = len(data)
            tf.addfile(ti, io.BytesIO(data))
        add("oci-layout", b'{"imageLayoutVersion": "1.0.0"}')
        add("index.json", index)
        for dg, data in blobs.items():
            add("blobs/sha256/" + dg, data)


# ---------------------------------------------------------------- tests

def run(c, rootfs, cid, *cmd, extra=(), timeout=120):
    return c.ctr("run", "--rm", "--runtime", RUNTIME, *extra, "--rootfs", rootfs, cid, *cmd,
                 timeout=timeout)


def no_leak(t, cid):
    """After delete: no container or task in containerd, no bundle, no shim,
    no sandbox or runtime in sandboxd and nothing of the sandbox on the host."""
    c, w = t.c, t.world
    name = sandbox_name(cid)
    expect(cid not in c.ctr("containers", "ls", "-q").stdout.split(), "container %s still listed" % cid)
    expect(cid not in c.ctr("tasks", "ls", "-q").stdout.split(), "task %s still listed" % cid)
    bundle = os.path.join(c.state, "io.containerd.runtime.v2.task", NS, cid)
    W.World.wait_until(lambda: not os.path.exists(bundle), 10, "the bundle %s to go" % bundle)
    sbs = w.rpc_result("sandbox.list")["sandboxes"]
    expect(name not in [s["name"] for s in sbs], "sandbox %s still exists" % name)
    rts = w.rpc_result("runtime.list")["runtimes"]
    expect(name not in [r["name"] for r in rts], "runtime %s still exists" % name)
    leaks.check(w, name)
    W.World.wait_until(lambda: not shims(c), 10, "the shims to exit")
    # The shim's ttrpc socket (shim.SocketAddress: a hash of containerd's
    # address, the namespace and the id under /run/containerd/s).
    sock = "/run/containerd/s/" + hashlib.sha256(("%s/%s/%s" % (c.sock, NS, cid)).encode()).hexdigest()
    W.World.wait_until(lambda: not os.path.exists(sock), 10, "the shim socket %s to go" % sock)


def shims(c):
    out = []
    for p in os.listdir("/proc"):
        if not p.isdigit():
            continue
        try:
            exe = os.readlink("/proc/%s/exe" % p)
            with open("/proc/%s/cmdline" % p, "rb") as f:
                cl = f.read()
        except OSError:
            continue
        if exe == os.path.realpath(SHIM) and c.sock.encode() in cl:
            out.append(int(p))
    return out


def test_run_exits_with_its_code_and_output(t):
    r = run(t.c, t.rootfs, "run1", "sh", "-c", "echo out-$((6*7)); echo err-line >&2; id -u; exit 3")
    expect_eq(r.returncode, 3, "ctr run's exit status (stderr %r)" % r.stderr[-400:])
    expect("out-42\n" in r.stdout, "the command's stdout reaches ctr:", repr(r.stdout))
    expect("err-line" in r.stderr, "the command's stderr reaches ctr:", repr(r.stderr))
    expect("\n0\n" in "\n" + r.stdout, "uid 0 of the spec runs as root in the sandbox:", repr(r.stdout))
    no_leak(t, "run1")


def test_large_output_arrives_whole_and_in_order(t):
    r = run(t.c, t.rootfs, "big1", "sh", "-c",
            "i=0; while [ $i -lt 60000 ]; do echo line-$i; i=$((i+1)); done; echo tail >&2; exit 7")
    expect_eq(r.returncode, 7, "exit status (stderr %r)" % r.stderr[-300:])
    want = "".join("line-%d\n" % i for i in range(60000))
    expect(r.stdout == want, "all %d bytes of stdout in order (got %d bytes, ends %r)"
           % (len(want), len(r.stdout), r.stdout[-40:]))
    expect_eq(r.stderr, "tail\n", "stderr")
    no_leak(t, "big1")


def _fifo_fill(pid, suffix):
    """Bytes waiting in the FIFO process `pid` holds open whose path ends
    with `suffix` (FIONREAD, on a reader of our own), or None if it holds
    none."""
    import fcntl
    import struct
    import termios
    try:
        fds = os.listdir("/proc/%d/fd" % pid)
    except OSError:
        return None
    for fd in fds:
        try:
            path = os.readlink("/proc/%d/fd/%s" % (pid, fd))
        except OSError:
            continue
        if not path.endswith(suffix):
            continue
        f = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
        try:
            return struct.unpack("i", fcntl.ioctl(f, termios.FIONREAD, b"\0\0\0\0"))[0]
        finally:
            os.close(f)
    return None


def test_run_output_whole_when_ctr_reads_late(t):
    """ctr run closes its end of the stdout FIFO as soon as it learns of the
    exit: the exit must not be reported while output still waits in the
    FIFO. ctr's stdout here is a full pipe, so ctr takes one read (32 KiB at
    most) and blocks; the rest of the 60000 bytes waits in the FIFO."""
    import fcntl
    c = t.c
    r_fd, w_fd = os.pipe()
    fcntl.fcntl(w_fd, fcntl.F_SETPIPE_SZ, 4096)
    os.set_blocking(w_fd, False)
    pre = b""
    try:
        while True:
            pre += b"p" * os.write(w_fd, b"p" * 4096)
    except BlockingIOError:
        pass
    os.set_blocking(w_fd, True)
    total = 60000  # over ctr's 32 KiB read, under the FIFO's 64 KiB
    p = subprocess.Popen(["ctr", "--address", c.sock, "-n", NS, "run", "--rm", "--runtime", RUNTIME,
                          "--rootfs", t.rootfs, "late1", "sh", "-c",
                          "i=0; while [ $i -lt %d ]; do echo 012345678; i=$((i+1)); done" % (total // 10)],
                         stdin=subprocess.DEVNULL, stdout=w_fd, stderr=subprocess.PIPE)
    os.close(w_fd)
    out = b""
    try:
        fill = []

        def settled():
            # All but ctr's one read is in the FIFO, or ctr let go of it.
            v = _fifo_fill(p.pid, "/late1-stdout")
            fill.append(v)
            return ((v or 0) >= total - (32 << 10) or (v is None and any(x is not None for x in fill))
                    or p.poll() is not None)
        W.World.wait_until(settled, 30, "the output to wait in ctr's stdout FIFO")
        expect(p.poll() is None, "ctr run is still blocked on its stdout (exit %s)" % p.poll())
        expect(fill[-1] is not None, "ctr still holds its stdout FIFO (it lets go when told of the exit); bytes in it seen:",
               fill[-5:])
        ls = c.ctr("tasks", "ls").stdout
        state = [l.split() for l in ls.splitlines() if l.split()[:1] == ["late1"]]
        expect_eq([s[-1] for s in state], ["RUNNING"],
                  "the task's state while %s bytes of its output are unread in the FIFO" % fill[-1])
        while True:
            b = os.read(r_fd, 65536)
            if not b:
                break
            out += b
        rc = p.wait(30)
        err = p.stderr.read().decode(errors="replace")
    finally:
        os.close(r_fd)
        if p.poll() is None:
            os.kill(p.pid, signal.SIGKILL)
            p.wait()
        p.stderr.close()
        c.ctr("task", "kill", "-s", "KILL", "late1")
        c.ctr("task", "delete", "late1")
        c.ctr("containers", "delete", "late1")
    expect_eq(rc, 0, "ctr run's exit status (stderr %r)" % err[-300:])
    body = out[len(pre):]
    expect(out[:len(pre)] == pre and body == b"012345678\n" * (total // 10),
           "all %d bytes of stdout reach ctr's stdout (got %d, ends %r)" % (total, len(body), body[-30:]))
    no_leak(t, "late1")


def test_image_rootfs_from_snapshot_mounts(t):
    """An image: containerd hands the shim overlay mounts of its snapshot;
    they are mounted in the bundle, packed, and released before the run."""
    c = t.c
    img = os.path.join(t.world.tmp, "bb-image.tar")
    make_image(t.rootfs, img)
    r = c.ctr("image", "import", "--base-name", "localhost/bb", img, timeout=120)
    expect_eq(r.returncode, 0, "ctr image import: %s %s" % (r.stdout, r.stderr))
    try:
        r = c.ctr("run", "--rm", "--runtime", RUNTIME, "localhost/bb:1", "img1", "sh", "-c",
                  "ls /bin/busybox && echo image-ok", timeout=120)
        expect_eq(r.returncode, 0, "ctr run of an image (stderr %r)" % r.stderr[-400:])
        expect_eq(r.stdout, "/bin/busybox\nimage-ok\n", "the image's files are the sandbox's root")
        no_leak(t, "img1")
        bundle = os.path.join(c.state, "io.containerd.runtime.v2.task", NS, "img1")
        expect(not [m for m in W.mounts_below(c.base) if m.startswith(bundle)],
               "no rootfs mount of the bundle is left")
    finally:
        c.ctr("containers", "delete", "img1")
        c.ctr("image", "rm", "localhost/bb:1")


SWAPPER = r"""
import ctypes, os, sys
libc = ctypes.CDLL(None, use_errno=True)
a, b = os.fsencode(sys.argv[1]), os.fsencode(sys.argv[2])
sys.stdout.write("ready\n"); sys.stdout.flush()
while True:
    libc.renameat2(-100, a, -100, b, 2)  # RENAME_EXCHANGE
"""


def test_rootfs_swapped_for_a_symlink_while_packed_packs_no_host_file(t):
    """A directory of the rootfs exchanged (renameat2 RENAME_EXCHANGE, in a
    loop) with a symlink to a host directory while the shim packs the
    rootfs: no host file's content ever reaches the container."""
    base = os.path.join(t.world.tmp, "swaproot")
    rootfs, host = os.path.join(base, "rootfs"), os.path.join(base, "host")
    make_rootfs(rootfs)
    os.makedirs(os.path.join(rootfs, "d"))
    os.makedirs(host)
    for i in range(400):
        with open(os.path.join(rootfs, "d", "f%03d" % i), "w") as f:
            f.write("okokokokok\n")  # as long as the host files
        with open(os.path.join(host, "f%03d" % i), "w") as f:
            f.write("HOSTSECRET\n")
    os.symlink(host, os.path.join(rootfs, "x"))
    sw = subprocess.Popen([sys.executable, "-c", SWAPPER, os.path.join(rootfs, "d"), os.path.join(rootfs, "x")],
                          stdout=subprocess.PIPE, text=True)
    try:
        expect_eq(sw.stdout.readline(), "ready\n", "the swap loop started")
        ok = 0
        for i in range(12):
            cid = "swap%d" % i
            r = run(t.c, rootfs, cid, "sh", "-c", "cat /d/* /x/* 2>/dev/null; echo done")
            expect("HOSTSECRET" not in r.stdout, "run %d: a host file's content reached the container" % i)
            if r.returncode == 0 and "done" in r.stdout:
                ok += 1
            no_leak(t, cid)
        expect(ok >= 6, "most runs under the swap loop succeed (%d of 12)" % ok)
    finally:
        sw.kill()
        sw.wait()
        shutil.rmtree(base, ignore_errors=True)


def test_root_path_outside_the_bundle_refused(t):
    """spec root.path is confined: a relative path climbing out of the
    bundle, an absolute host path outside the operator's
    SANDBOXD_SHIM_ROOTFS_DIRS, and a path through a symlink are refused,
    naming root.path; no host file is packed."""
    link = os.path.join(t.world.tmp, "etc-link")
    os.symlink("/etc", link)
    try:
        for i, path in enumerate(("../../../../../../../../etc", "/etc", link, os.path.join(link, "ssl"))):
            cid = "rootp%d" % i
            r = run(t.c, path, cid, "cat", "/shadow")
            expect(r.returncode != 0 and "root.path" in r.stderr,
                   "root.path %s refused naming root.path (rc %d, stdout %r, stderr %r)"
                   % (path, r.returncode, r.stdout[-200:], r.stderr[-300:]))
            t.c.ctr("containers", "delete", cid)
            no_leak(t, cid)
    finally:
        os.unlink(link)


def test_rootfs_over_max_source_bytes_refused_before_it_is_packed(t):
    """A sparse file larger than the daemon's maxSourceBytes in a nearly
    empty rootfs: the create is refused naming maxSourceBytes, at once,
    without writing the file's size to the host's disk."""
    lim = t.world.rpc_result("daemon.info")["limits"]["maxSourceBytes"]
    base = os.path.join(t.world.tmp, "bigroot")
    make_rootfs(base)
    with open(os.path.join(base, "sparse"), "wb") as f:
        f.truncate(lim + (1 << 30))
    try:
        t0 = time.monotonic()
        r = run(t.c, base, "big2", "true")
        secs = time.monotonic() - t0
        expect(r.returncode != 0 and "maxSourceBytes" in r.stderr and "/sparse" in r.stderr
               and "cannot become a runtime" in r.stderr,
               "refused by the shim naming the file and maxSourceBytes:", r.stderr[-300:])
        expect(secs < 10, "refused before packing the file (%.1f s)" % secs)
        t.c.ctr("containers", "delete", "big2")
        no_leak(t, "big2")
    finally:
        shutil.rmtree(base, ignore_errors=True)


def test_env_and_cwd(t):
    r = run(t.c, t.rootfs, "env1", "sh", "-c", "echo \"v=$FOO\"; pwd",
            extra=("--env", "FOO=bar baz", "--cwd", "/etc"))
    expect_eq(r.returncode, 0, "exit status (stderr %r)" % r.stderr[-400:])
    expect_eq(r.stdout.splitlines(), ["v=bar baz", "/etc"], "process.env and process.cwd inside")
    no_leak(t, "env1")


def test_process_the_daemon_would_refuse_is_refused_at_create(t):
    """An env value over maxEnvValueBytes, a relative cwd and a NUL in env
    are refused at Create naming the field (before, the task stayed CREATED
    with its sandbox running after Start failed); nothing is left."""
    lim = t.world.rpc_result("daemon.info")["limits"]
    base = json.loads(subprocess.run(["ctr", "oci", "spec"], capture_output=True, text=True, check=True).stdout)
    base["process"]["args"] = ["echo", "ran"]
    base["root"] = {"path": t.rootfs}
    base["process"]["env"] = ["PATH=/bin", "BAD=a\u0000b"]
    cfg = os.path.join(t.world.tmp, "spec-nul.json")
    with open(cfg, "w") as f:
        json.dump(base, f)
    cases = [
        ("process.env[", lambda cid: run(t.c, t.rootfs, cid, "echo", "ran",
                                          extra=("--env", "BIG=" + "x" * (lim["maxEnvValueBytes"] + 1)))),
        ("process.cwd", lambda cid: run(t.c, t.rootfs, cid, "echo", "ran", extra=("--cwd", "tmp"))),
        ("NUL", lambda cid: t.c.ctr("run", "--rm", "--runtime", RUNTIME, "--config", cfg, cid, timeout=120)),
    ]
    for i, (want, fn) in enumerate(cases):
        cid = "lim%d" % i
        r = fn(cid)
        expect(r.returncode != 0 and "ran" not in r.stdout and want in r.stderr and "failed to create" in r.stderr,
               "refused at create naming %s (rc %d, stderr %r)" % (want, r.returncode, r.stderr[-300:]))
        t.c.ctr("containers", "delete", cid)
        no_leak(t, cid)


def test_exec_into_running_then_kill_and_delete(t):
    c = t.c
    ev = subprocess.Popen(["ctr", "--address", c.sock, "events"], stdin=subprocess.DEVNULL,
                          stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    try:
        _exec_kill_delete(t)
        # The task events containerd expects, in their order, for long1.
        want = ["/tasks/create", "/tasks/start", "/tasks/exec-added", "/tasks/exec-started", "/tasks/exit",
                "/tasks/delete"]
        def seen():
            return [w for w in want if any(w in l and "long1" in l for l in lines)]
        lines = []
        import fcntl
        fcntl.fcntl(ev.stdout, fcntl.F_SETFL, os.O_NONBLOCK)
        deadline = time.monotonic() + 10
        while seen() != want and time.monotonic() < deadline:
            select.select([ev.stdout], [], [], 0.2)
            chunk = ev.stdout.read()
            if chunk:
                lines += chunk.splitlines()
        expect_eq(seen(), want, "task events published (%d lines)" % len(lines))
    finally:
        os.kill(ev.pid, signal.SIGKILL)
        ev.wait()
    no_leak(t, "long1")


def _exec_kill_delete(t):
    c = t.c
    r = c.ctr("run", "-d", "--runtime", RUNTIME, "--rootfs", t.rootfs, "long1", "sleep", "600")
    expect_eq(r.returncode, 0, "ctr run -d: %s" % r.stderr)
    try:
        W.World.wait_until(lambda: "RUNNING" in c.ctr("tasks", "ls").stdout, 20, "the task to run")
        r = c.ctr("task", "exec", "--exec-id", "e1", "long1", "sh", "-c", "echo from-exec; cat; exit 5",
                  input="piped-stdin\n", stdin=None)
        expect_eq(r.returncode, 5, "ctr task exec's exit status (stderr %r)" % r.stderr[-300:])
        expect_eq(r.stdout, "from-exec\npiped-stdin\n", "the exec's output and its stdin echoed")
        # ctr asks for CloseIO at its input's end while it still holds the
        # stdin FIFO open (until CloseIO answers): the command's EOF must
        # come at once, not after a wait for the FIFO's end (2 s before).
        r = c.ctr("task", "exec", "--exec-id", "e3", "long1", "sh", "-c",
                  "IFS= read -r l; read a _ </proc/uptime; cat; read b _ </proc/uptime; "
                  "echo \"first=$l\"; echo \"eof_cs=$(( ${b%.*}${b#*.} - ${a%.*}${a#*.} ))\"",
                  input="one\ntwo\n", stdin=None)
        expect_eq(r.returncode, 0, "ctr task exec's exit status (stderr %r)" % r.stderr[-300:])
        lines = r.stdout.splitlines()
        expect_eq(lines[:2], ["two", "first=one"], "the exec's stdin, all of it")
        cs = [int(l[7:]) for l in lines if l.startswith("eof_cs=")]
        expect(cs and cs[0] < 150, "stdin's EOF came within 1.5 s of its last input (centiseconds):", r.stdout)
        # Pids: the session cgroup's host pids, the container's sleep among them.
        r = c.ctr("task", "ps", "long1")
        expect_eq(r.returncode, 0, "ctr task ps: %s" % r.stderr)
        pids = [int(l.split()[0]) for l in r.stdout.splitlines()[1:] if l.split() and l.split()[0].isdigit()]
        cmdlines = []
        for pid in pids:
            try:
                with open("/proc/%d/cmdline" % pid, "rb") as f:
                    cmdlines.append(f.read().split(b"\0"))
            except OSError:
                pass
        expect([b"sleep", b"600"] in [cl[:2] for cl in cmdlines], "ctr task ps lists the container's process:",
               r.stdout, cmdlines)
        # Stats: the session cgroup's metrics.
        r = c.ctr("task", "metrics", "long1")
        usage = [ln.split() for ln in r.stdout.splitlines()
                 if ln.split()[:1] in (["memory.usage_in_bytes"], ["memory.usage"])]
        expect(r.returncode == 0 and usage and int(usage[0][1]) > 0,
               "ctr task metrics shows the memory in use (not 0: on a hybrid host the memory "
               "controller is on v1):", r.stdout, r.stderr)
        # A non-root uid of the spec runs as the sandbox user.
        sb = t.world.rpc_result("sandbox.get", {"name": sandbox_name("long1")})
        want = 1000 if sb["userns"] else pwd.getpwnam(W.PLAIN_USER).pw_uid
        r = c.ctr("task", "exec", "--exec-id", "e2", "--user", "1000", "long1", "id", "-u")
        expect_eq((r.returncode, r.stdout.strip()), (0, str(want)), "uid of an exec as user 1000 (%s)" % r.stderr)
        r = c.ctr("task", "kill", "-s", "TERM", "long1")
        expect_eq(r.returncode, 0, "ctr task kill: %s" % r.stderr)
        W.World.wait_until(lambda: "STOPPED" in c.ctr("tasks", "ls").stdout, 20, "the task to stop")
        r = c.ctr("task", "delete", "long1")
        expect_eq(r.returncode, 0, "ctr task delete: %s" % r.stderr)
    finally:
        c.ctr("task", "kill", "-s", "KILL", "long1")
        c.ctr("task", "delete", "long1")
        c.ctr("containers", "delete", "long1")


def _restart_sandboxd(t, how):
    d = t.world.daemon
    old = t.world.rpc_result("daemon.info")["pid"]
    if how == "kill":
        os.kill(d.proc.pid, signal.SIGKILL)
        d.proc.wait(10)
    else:
        expect_eq(d.stop(), 0, "sandboxd exit status on SIGTERM")
    d.start()
    expect(t.world.rpc_result("daemon.info")["pid"] != old, "a new sandboxd answers")


def test_sandboxd_restart_keeps_the_task_and_its_exec_output(t):
    """sandboxd restarted (SIGKILL, then SIGTERM) under a running task
    (live restore keeps its sandbox and commands): the shim reconnects, an
    exec that ran across the restart delivers all its output once and its
    exit status, the task stays RUNNING, new execs work, and kill and delete
    clean up fully."""
    c = t.c
    r = c.ctr("run", "-d", "--runtime", RUNTIME, "--rootfs", t.rootfs, "rst1", "sleep", "600")
    expect_eq(r.returncode, 0, "ctr run -d: %s" % r.stderr)
    try:
        W.World.wait_until(lambda: "RUNNING" in c.ctr("tasks", "ls").stdout, 20, "the task to run")
        for i, how in enumerate(("kill", "term")):
            ex = subprocess.Popen(["ctr", "--address", c.sock, "-n", NS, "task", "exec", "--exec-id",
                                   "x%d" % i, "rst1", "sh", "-c",
                                   "echo before; while [ ! -e /tmp/go%d ]; do sleep 0.1; done; echo after; exit 4" % i],
                                  stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            try:
                ready = select.select([ex.stdout], [], [], 20)[0]
                expect_eq(ready and ex.stdout.readline(), "before\n", "the exec's first line before the restart")
                _restart_sandboxd(t, how)
                expect_eq(c.ctr("tasks", "ls").stdout.count("RUNNING"), 1,
                          "the task is RUNNING after the restart (%s)" % how)
                r = c.ctr("task", "exec", "--exec-id", "y%d" % i, "rst1", "sh", "-c", "echo >/tmp/go%d; echo new-exec" % i)
                expect_eq((r.returncode, r.stdout), (0, "new-exec\n"), "an exec after the restart (%s): %s"
                          % (how, r.stderr[-300:]))
                out, err = ex.communicate(timeout=30)
                expect_eq((ex.returncode, out), (4, "after\n"),
                          "the exec that ran across the restart (%s): its output once, its status (%r)" % (how, err))
            finally:
                if ex.poll() is None:
                    ex.kill()
                    ex.wait()
        r = c.ctr("task", "kill", "-s", "KILL", "rst1")
        expect_eq(r.returncode, 0, "ctr task kill: %s" % r.stderr)
        W.World.wait_until(lambda: "STOPPED" in c.ctr("tasks", "ls").stdout, 20, "the task to stop")
        r = c.ctr("task", "delete", "rst1")
        expect_eq(r.returncode, 0, "ctr task delete: %s" % r.stderr)
        r = c.ctr("containers", "delete", "rst1")
        expect_eq(r.returncode, 0, "ctr containers delete: %s" % r.stderr)
    finally:
        c.ctr("task", "kill", "-s", "KILL", "rst1")
        c.ctr("task", "delete", "rst1")
        c.ctr("containers", "delete", "rst1")
    no_leak(t, "rst1")


def test_kill_ends_a_run_with_the_signal_status(t):
    c = t.c
    p = subprocess.Popen(["ctr", "--address", c.sock, "-n", NS, "run", "--rm", "--runtime", RUNTIME,
                          "--rootfs", t.rootfs, "kill1", "sleep", "600"],
                         stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        W.World.wait_until(lambda: "RUNNING" in c.ctr("tasks", "ls").stdout, 20, "the task to run")
        r = c.ctr("task", "kill", "-s", "TERM", "kill1")
        expect_eq(r.returncode, 0, "ctr task kill: %s" % r.stderr)
        rc = p.wait(30)
        expect_eq(rc, 128 + signal.SIGTERM, "ctr run's status after SIGTERM")
    finally:
        if p.poll() is None:
            os.kill(p.pid, signal.SIGKILL)
            p.wait()
        c.ctr("task", "kill", "-s", "KILL", "kill1")
        c.ctr("task", "delete", "kill1")
        c.ctr("containers", "delete", "kill1")
    no_leak(t, "kill1")


def _frozen(t, cid):
    """The session cgroup's freezer as the kernel reports it (v2 or v1)."""
    sb = t.world.rpc_result("sandbox.get", {"name": sandbox_name(cid)})
    for d in sb["session"]["cgroups"]:
        for f, yes in (("cgroup.freeze", "1"), ("freezer.state", "FROZEN")):
            try:
                with open(os.path.join(d, f)) as fh:
                    return fh.read().strip() == yes, sb["session"]["paused"]
            except OSError:
                continue
    raise AssertionError("no freezer in the session's cgroups %s" % sb["session"]["cgroups"])


def _freezer_dump(t, cid):
    """Every freezer file of the session's cgroups, for a failure message."""
    sb = t.world.rpc_result("sandbox.get", {"name": sandbox_name(cid)})
    out = ["session.paused=%s" % sb["session"]["paused"]]
    for d in sb["session"]["cgroups"]:
        for f in ("cgroup.freeze", "cgroup.events", "freezer.state"):
            try:
                with open(os.path.join(d, f)) as fh:
                    out.append("%s/%s: %s" % (d, f, fh.read().strip().replace("\n", "; ")))
            except OSError as e:
                if e.errno != 2 or f == "cgroup.freeze" and "/unified/" in d:
                    out.append("%s/%s: %s" % (d, f, e))
    return "\n  ".join(out)


def _expect_frozen(t, cid, want, what):
    got = _frozen(t, cid)
    if got != want:
        raise AssertionError("%s: expected %r, got %r\n  %s" % (what, want, got, _freezer_dump(t, cid)))


def test_pause_and_resume_freeze_the_sandbox(t):
    c = t.c
    r = c.ctr("run", "-d", "--runtime", RUNTIME, "--rootfs", t.rootfs, "pause1", "sleep", "600")
    expect_eq(r.returncode, 0, "ctr run -d: %s" % r.stderr)
    try:
        W.World.wait_until(lambda: "RUNNING" in c.ctr("tasks", "ls").stdout, 20, "the task to run")
        _expect_frozen(t, "pause1", (False, False), "the running sandbox's cgroup (frozen, paused)")
        r = c.ctr("task", "pause", "pause1")
        expect_eq(r.returncode, 0, "ctr task pause: %s" % r.stderr)
        expect("PAUSED" in c.ctr("tasks", "ls").stdout, "ctr tasks ls shows PAUSED")
        _expect_frozen(t, "pause1", (True, True), "the paused sandbox's cgroup (frozen, paused)")
        r = c.ctr("task", "resume", "pause1")
        expect_eq(r.returncode, 0, "ctr task resume: %s" % r.stderr)
        expect("RUNNING" in c.ctr("tasks", "ls").stdout, "ctr tasks ls shows RUNNING again")
        _expect_frozen(t, "pause1", (False, False), "the resumed sandbox's cgroup (frozen, paused)")
        r = c.ctr("task", "exec", "--exec-id", "e1", "pause1", "echo", "alive")
        expect_eq((r.returncode, r.stdout), (0, "alive\n"), "an exec after resume runs (%s)" % r.stderr)
        # Paused again, then killed and deleted: nothing is left frozen behind.
        expect_eq(c.ctr("task", "pause", "pause1").returncode, 0, "pause again")
        r = c.ctr("task", "delete", "-f", "pause1")
        expect_eq(r.returncode, 0, "ctr task delete -f of a paused task: %s" % r.stderr)
    finally:
        c.ctr("task", "resume", "pause1")
        c.ctr("task", "kill", "-s", "KILL", "pause1")
        c.ctr("task", "delete", "-f", "pause1")
        c.ctr("containers", "delete", "pause1")
    no_leak(t, "pause1")


def test_detached_chatty_task_does_not_stall_the_shim(t):
    """ctr run -d exits at once; the task keeps writing megabytes to stdout
    nobody reads: the shim must still answer (exec, kill, delete)."""
    c = t.c
    r = c.ctr("run", "-d", "--runtime", RUNTIME, "--rootfs", t.rootfs, "chat1", "sh", "-c",
              "while :; do echo 0123456789012345678901234567890123456789012345678901234567890123456789; done")
    expect_eq(r.returncode, 0, "ctr run -d: %s" % r.stderr)
    try:
        W.World.wait_until(lambda: "RUNNING" in c.ctr("tasks", "ls").stdout, 20, "the task to run")
        t0 = time.monotonic()
        while time.monotonic() - t0 < 3:  # it writes all the while
            r = c.ctr("task", "exec", "--exec-id", "e%d" % int((time.monotonic() - t0) * 1000), "chat1",
                      "echo", "answer", timeout=20)
            expect_eq((r.returncode, r.stdout), (0, "answer\n"), "an exec beside the chatty task (%s)" % r.stderr)
        expect_eq(c.ctr("task", "kill", "-s", "KILL", "chat1").returncode, 0, "kill")
        W.World.wait_until(lambda: "STOPPED" in c.ctr("tasks", "ls").stdout, 20, "the task to stop")
        expect_eq(c.ctr("task", "delete", "chat1").returncode, 0, "delete")
    finally:
        c.ctr("task", "delete", "-f", "chat1")
        c.ctr("containers", "delete", "chat1")
    no_leak(t, "chat1")


def test_a_reader_that_stops_reading_does_not_stall_other_tasks_calls(t):
    """ctr run attached whose stdout nobody reads: the container's output
    backs up (as into a full pipe), but the shim still serves exec, state
    and kill for it."""
    c = t.c
    p = subprocess.Popen(["ctr", "--address", c.sock, "-n", NS, "run", "--rm", "--runtime", RUNTIME,
                          "--rootfs", t.rootfs, "stall1", "sh", "-c",
                          "while :; do echo 0123456789012345678901234567890123456789012345678901234567890; done"],
                         stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    try:
        W.World.wait_until(lambda: "RUNNING" in c.ctr("tasks", "ls").stdout, 20, "the task to run")
        # Well past every buffer on the way (the pipe, the shim's queue, the
        # daemon's 4 MiB per connection): poll until the output stops growing.
        r = c.ctr("task", "exec", "--exec-id", "x1", "stall1", "echo", "still-here", timeout=20)
        expect_eq((r.returncode, r.stdout), (0, "still-here\n"), "an exec while the output is stuck (%s)" % r.stderr)
        r = c.ctr("task", "kill", "-s", "KILL", "stall1", timeout=20)
        expect_eq(r.returncode, 0, "ctr task kill while the output is stuck: %s" % r.stderr)
        # The reader goes away: the rest of the output is dropped and the
        # exit comes through.
        os.kill(p.pid, signal.SIGKILL)
        p.wait()
        W.World.wait_until(lambda: "STOPPED" in c.ctr("tasks", "ls").stdout, 30, "the task to stop")
    finally:
        if p.poll() is None:
            os.kill(p.pid, signal.SIGKILL)
            p.wait()
        c.ctr("task", "delete", "-f", "stall1")
        c.ctr("containers", "delete", "stall1")
    no_leak(t, "stall1")


def test_a_killed_shim_is_cleaned_up(t):
    """kill -9 of the shim of a running task: containerd runs `shim delete`,
    which removes the sandbox and its runtime; nothing is left."""
    c = t.c
    r = c.ctr("run", "-d", "--runtime", RUNTIME, "--rootfs", t.rootfs, "crash1", "sleep", "600")
    expect_eq(r.returncode, 0, "ctr run -d: %s" % r.stderr)
    try:
        W.World.wait_until(lambda: "RUNNING" in c.ctr("tasks", "ls").stdout, 20, "the task to run")
        pids = shims(c)
        expect_eq(len(pids), 1, "one shim runs")
        os.kill(pids[0], signal.SIGKILL)
        name = sandbox_name("crash1")
        W.World.wait_until(lambda: name not in [s["name"] for s in t.world.rpc_result("sandbox.list")["sandboxes"]],
                           30, "the dead shim's sandbox to be deleted")
        c.ctr("task", "delete", "crash1")
        r = c.ctr("containers", "delete", "crash1")
        expect_eq(r.returncode, 0, "ctr containers delete: %s" % r.stderr)
    finally:
        c.ctr("task", "kill", "-s", "KILL", "crash1")
        c.ctr("task", "delete", "-f", "crash1")
        c.ctr("containers", "delete", "crash1")
    no_leak(t, "crash1")


def test_tty_task(t):
    master, slave = pty.openpty()
    import fcntl
    import struct
    import termios
    # ctr sends the terminal's size after the start (ResizePty -> command.resize).
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 33, 77, 0, 0))
    p = subprocess.Popen(["ctr", "--address", t.c.sock, "-n", NS, "run", "--rm", "-t", "--runtime", RUNTIME,
                          "--rootfs", t.rootfs, "tty1", "sh", "-c",
                          # ctr resizes the pty just after the start: poll for it (5 s).
                          "tty; i=0; while [ \"$(stty size)\" != '33 77' ] && [ $i -lt 100 ]; do "
                          "sleep 0.05; i=$((i+1)); done; stty size; exit 4"],
                         stdin=slave, stdout=slave, stderr=slave, start_new_session=True)
    os.close(slave)
    out = b""
    deadline = time.monotonic() + 60
    try:
        while time.monotonic() < deadline:
            r, _, _ = select.select([master], [], [], 0.5)
            if r:
                try:
                    b = os.read(master, 4096)
                except OSError:
                    break
                if not b:
                    break
                out += b
            elif p.poll() is not None:
                break
        rc = p.wait(30)
    finally:
        if p.poll() is None:
            os.kill(p.pid, signal.SIGKILL)
            p.wait()
        os.close(master)
    text = out.decode(errors="replace")
    expect_eq(rc, 4, "ctr run -t's exit status (output %r)" % text[-300:])
    expect("/dev/pts/" in text, "the process has a terminal:", repr(text))
    expect("33 77" in text, "the terminal has ctr's size (stty size):", repr(text))
    no_leak(t, "tty1")


def test_policy_annotation_enforced(t):
    pol = json.dumps({"allow": ["api.public.test"]})
    script = ("nc -w 5 api.public.test %d </dev/null && echo allowed-ok; "
              "s=$(date +%%s); nc -w 10 other.public.test %d </dev/null; echo other=$?; "
              "nc -w 10 %s %d </dev/null; echo direct=$?; e=$(date +%%s); echo secs=$((e-s))"
              % (W.LISTEN_PORT, W.LISTEN_PORT, W.PUB_OTHER_ADDR, W.LISTEN_PORT))
    r = run(t.c, t.rootfs, "pol1", "sh", "-c", script, extra=("--annotation", "io.sandboxd.network-policy=" + pol))
    expect_eq(r.returncode, 0, "exit status (stderr %r)" % r.stderr[-400:])
    lines = r.stdout.splitlines()
    expect("allowed-ok" in lines, "the allowed name is reachable:", r.stdout, r.stderr)
    expect("other=0" not in lines and any(l.startswith("other=") for l in lines),
           "a name the policy does not allow is refused:", r.stdout)
    expect("direct=0" not in lines, "an address the policy does not allow is refused:", r.stdout)
    expect(not r.stderr.count("not found"), "every tool of the script exists in the rootfs:", r.stderr)
    secs = [int(l[5:]) for l in lines if l.startswith("secs=")]
    expect(secs and secs[0] <= 2, "both refusals came fast, not by timeout:", r.stdout)
    no_leak(t, "pol1")


def test_bad_policy_annotation_refused_with_its_field(t):
    pol = json.dumps({"allow": ["api.public.test"], "subnets": {"alow": []}})
    r = run(t.c, t.rootfs, "bad1", "true", extra=("--annotation", "io.sandboxd.network-policy=" + pol))
    expect(r.returncode != 0, "the create is refused")
    expect("io.sandboxd.network-policy" in r.stderr and "networkPolicy.subnets.alow" in r.stderr,
           "the error names the annotation and the field:", r.stderr)
    r = run(t.c, t.rootfs, "bad2", "true", extra=("--annotation", "io.sandboxd.network-policy={not json"))
    expect(r.returncode != 0 and "io.sandboxd.network-policy: not JSON" in r.stderr,
           "a policy that is not JSON is refused naming the annotation:", r.stderr)
    r = run(t.c, t.rootfs, "bad3", "true", extra=("--annotation", "io.sandboxd.persistant=true"))
    expect(r.returncode != 0 and "io.sandboxd.persistant: unknown" in r.stderr,
           "an unknown io.sandboxd annotation is refused:", r.stderr)
    for cid in ("bad1", "bad2", "bad3"):
        t.c.ctr("containers", "delete", cid)
        no_leak(t, cid)


def test_ambiguous_annotations_refused(t):
    """Annotations that would fail open: a policy with a duplicate key (the
    last would win), a null policy (allow-all), an io.sandboxd key in other
    case, and tags with a duplicate key, are each refused naming it."""
    cases = [
        ("io.sandboxd.network-policy", '{"allow": 5, "allow": ["api.public.test"]}', "networkPolicy.allow: duplicate key"),
        ("io.sandboxd.network-policy", "null", "io.sandboxd.network-policy"),
        ("IO.SANDBOXD.NETWORK-POLICY", "deny-all", "IO.SANDBOXD.NETWORK-POLICY: unknown"),
        ("io.sandboxd.tags", '{"team": "a", "team": "b"}', "io.sandboxd.tags"),
    ]
    for i, (key, val, want) in enumerate(cases):
        cid = "amb%d" % i
        r = run(t.c, t.rootfs, cid, "echo", "ran", extra=("--annotation", "%s=%s" % (key, val)))
        expect(r.returncode != 0 and "ran" not in r.stdout and want in r.stderr,
               "annotation %s=%s refused naming %s (rc %d, stderr %r)" % (key, val, want, r.returncode, r.stderr[-300:]))
        t.c.ctr("containers", "delete", cid)
        no_leak(t, cid)


def test_restrictions_the_shim_cannot_apply_refused(t):
    """Spec fields that ask for more restriction than the sandbox applies
    fail the create naming the field; ctr's default spec (rlimits NOFILE,
    default masked/readonly paths, capabilities, the devices deny-all)
    still runs (every other test)."""
    base = json.loads(subprocess.run(["ctr", "oci", "spec"], capture_output=True, text=True, check=True).stdout)
    base["process"]["args"] = ["echo", "ran"]
    base["root"] = {"path": t.rootfs}

    def flags(*a):
        return lambda: ({}, list(a))

    def spec(fn):
        def make():
            sp = json.loads(json.dumps(base))
            fn(sp)
            return sp, []
        return make
    cases = [
        ("root.readonly", flags("--read-only")),
        ("linux.seccomp", flags("--seccomp")),
        ("process.capabilities.bounding", flags("--cap-drop", "CAP_NET_RAW")),
        ("linux.resources.unified", spec(lambda s: s["linux"]["resources"].update(unified={"memory.high": "1000000"}))),
        ("linux.resources.blockIO", spec(lambda s: s["linux"]["resources"].update(blockIO={"weight": 10}))),
        ("linux.resources.hugepageLimits", spec(lambda s: s["linux"]["resources"].update(
            hugepageLimits=[{"pageSize": "2MB", "limit": 0}]))),
        ("linux.resources.devices[1]", spec(lambda s: s["linux"]["resources"]["devices"].append(
            {"allow": False, "type": "c", "major": 1, "minor": 3, "access": "rwm"}))),
        ("process.rlimits[0]", spec(lambda s: s["process"].update(rlimits=[{"type": "RLIMIT_NOFILE", "hard": 64, "soft": 64}]))),
        ("linux.maskedPaths[10]", spec(lambda s: s["linux"]["maskedPaths"].append("/etc"))),
        ("linux.readonlyPaths[5]", spec(lambda s: s["linux"]["readonlyPaths"].append("/etc"))),
        ("linux.sysctl", spec(lambda s: s["linux"].update(sysctl={"net.ipv4.ip_forward": "0"}))),
    ]
    cfg = os.path.join(t.world.tmp, "spec-case.json")
    for i, (field, make) in enumerate(cases):
        cid = "restr%d" % i
        sp, extra = make()
        if sp:
            with open(cfg, "w") as f:
                json.dump(sp, f)
            r = t.c.ctr("run", "--rm", "--runtime", RUNTIME, "--config", cfg, cid, timeout=120)
        else:
            r = run(t.c, t.rootfs, cid, "echo", "ran", extra=tuple(extra))
        expect(r.returncode != 0 and "ran" not in r.stdout and field in r.stderr
               and "not supported by " + RUNTIME in r.stderr,
               "%s refused naming it (rc %d, stdout %r, stderr %r)" % (field, r.returncode, r.stdout, r.stderr[-300:]))
        t.c.ctr("containers", "delete", cid)
        no_leak(t, cid)
    # The default spec itself, through --config, runs.
    with open(cfg, "w") as f:
        json.dump(base, f)
    r = t.c.ctr("run", "--rm", "--runtime", RUNTIME, "--config", cfg, "restr-ok", timeout=120)
    expect_eq((r.returncode, r.stdout), (0, "ran\n"), "ctr's default spec runs (stderr %r)" % r.stderr[-300:])
    no_leak(t, "restr-ok")


def test_tags_timeout_and_persistent_annotations(t):
    c, w = t.c, t.world
    name = sandbox_name("ann1")
    r = c.ctr("run", "-d", "--runtime", RUNTIME,
              "--annotation", 'io.sandboxd.tags={"team": "a"}', "--annotation", "io.sandboxd.timeout=600000",
              "--annotation", "io.sandboxd.persistent=true", "--rootfs", t.rootfs, "ann1", "sleep", "600")
    expect_eq(r.returncode, 0, "ctr run -d: %s" % r.stderr)
    try:
        sb = w.rpc_result("sandbox.get", {"name": name})
        expect_eq((sb["tags"], sb["timeout"], sb["persistent"]), ({"team": "a"}, 600000, True),
                  "the sandbox's tags, timeout and persistent")
        expect_eq(sb["runtime"], name, "the sandbox stands on the rootfs's runtime")
        c.ctr("task", "kill", "-s", "KILL", "ann1")
        W.World.wait_until(lambda: "STOPPED" in c.ctr("tasks", "ls").stdout, 20, "the task to stop")
        expect_eq(c.ctr("task", "delete", "ann1").returncode, 0, "ctr task delete")
        sb = w.rpc_result("sandbox.get", {"name": name})
        expect_eq(sb["status"], "stopped", "a persistent sandbox is kept, stopped, after the task's delete")
    finally:
        c.ctr("task", "delete", "-f", "ann1")
        c.ctr("containers", "delete", "ann1")
        w.rpc("sandbox.delete", {"name": name})
        w.rpc("runtime.delete", {"name": name})
    no_leak(t, "ann1")


def test_memory_limit_not_widened(t):
    r = run(t.c, t.rootfs, "mem1", "true", extra=("--memory-limit", str(512 << 20)))
    expect(r.returncode != 0 and "linux.resources.memory.limit" in r.stderr,
           "a memory limit a sandbox cannot hold exactly is refused naming the field:", r.stderr)
    t.c.ctr("containers", "delete", "mem1")
    no_leak(t, "mem1")
    r = run(t.c, t.rootfs, "mem2", "true", extra=("--memory-limit", str(2048 << 20)))
    expect_eq(r.returncode, 0, "a 2 GiB limit is one vCPU's (stderr %r)" % r.stderr[-300:])
    no_leak(t, "mem2")


def test_log_uri_file_gets_both_streams(t):
    out = os.path.join(t.world.tmp, "logs", "file1.log")
    if os.path.exists(out):
        os.unlink(out)  # a repeated run (SHIM_TEST_REPEAT) appends to it
    r = run(t.c, t.rootfs, "file1", "sh", "-c", "echo to-out; echo to-err >&2; exit 4",
            extra=("--log-uri", "file://" + out))
    expect_eq(r.returncode, 4, "ctr run's exit status (stderr %r)" % r.stderr[-400:])
    with open(out) as f:
        got = f.read()
    expect(sorted(got.splitlines()) == ["to-err", "to-out"], "both streams in the file:", repr(got))
    expect_eq(os.stat(out).st_mode & 0o777, 0o600, "the log file's mode")
    no_leak(t, "file1")


LOGGER = r"""#!/usr/bin/python3
# A binary:// logging program (containerd's runtime/v2/logging protocol):
# stdout on fd 3, stderr on fd 4, fd 5 closed once ready; arguments from
# the URI's query (out PATH).
import os, sys, threading
out = open(sys.argv[sys.argv.index("out") + 1], "a")
lock = threading.Lock()
with lock:
    out.write("pid=%d id=%s ns=%s path=%s\n" % (os.getpid(), os.environ.get("CONTAINER_ID"),
              os.environ.get("CONTAINER_NAMESPACE"), os.environ.get("PATH", "-")))
    out.flush()
os.close(5)
def copy(fd, name):
    with os.fdopen(fd, "rb") as f:
        for line in f:
            with lock:
                out.write("%s: %s" % (name, line.decode()))
                out.flush()
ts = [threading.Thread(target=copy, args=(fd, n)) for fd, n in ((3, "stdout"), (4, "stderr"))]
for th in ts:
    th.start()
for th in ts:
    th.join()
out.write("eof\n")
out.close()
"""


def test_log_uri_binary_runs_the_logging_program(t):
    """binary:// (nerdctl's default): the program at the URI's path gets
    the query as arguments, CONTAINER_ID and CONTAINER_NAMESPACE only, the
    container's stdout on fd 3 and stderr on fd 4; it has every line when
    ctr run returns, and it is gone."""
    prog = os.path.join(t.world.tmp, "logger.py")
    with open(prog, "w") as f:
        f.write(LOGGER)
    os.chmod(prog, 0o755)
    out = os.path.join(t.world.tmp, "bin1.log")
    if os.path.exists(out):
        os.unlink(out)  # a repeated run (SHIM_TEST_REPEAT) appends to it
    r = run(t.c, t.rootfs, "bin1", "sh", "-c", "echo to-out; echo to-err >&2; echo more-out; exit 4",
            extra=("--log-uri", "binary://%s?out=%s" % (prog, out)))
    expect_eq(r.returncode, 4, "ctr run's exit status (stderr %r)" % r.stderr[-400:])
    with open(out) as f:
        lines = f.read().splitlines()
    head = lines[0].split()
    expect_eq(head[1:], ["id=bin1", "ns=" + NS, "path=-"], "the logging program's environment")
    expect_eq([ln for ln in lines[1:] if ln.startswith("stdout")], ["stdout: to-out", "stdout: more-out"], "stdout, in order")
    expect_eq([ln for ln in lines[1:] if ln.startswith("stderr")], ["stderr: to-err"], "stderr")
    expect_eq(lines[-1], "eof", "the program saw the end of both streams")
    pid = int(head[0][4:])
    W.World.wait_until(lambda: not os.path.exists("/proc/%d" % pid) or
                       open("/proc/%d/stat" % pid).read().split()[2] == "Z", 10, "the logging program to be gone")
    no_leak(t, "bin1")


def test_log_uri_binary_that_fails_ends_the_start(t):
    """A logging program that cannot be started fails the
    Start naming stdout and the URI; the task ends at once (kill, delete);
    a relative path and another scheme are refused at create."""
    c = t.c
    r = run(c, t.rootfs, "binf1", "echo", "ran", extra=("--log-uri", "binary:///no/such/logger"))
    expect(r.returncode != 0 and "ran" not in r.stdout, "the run fails:", r.stdout, r.stderr[-300:])
    expect("stdout" in r.stderr and "binary:///no/such/logger" in r.stderr and "logging program" in r.stderr,
           "the error names the stream and the program:", r.stderr[-400:])
    c.ctr("task", "delete", "--force", "binf1", timeout=30)
    c.ctr("containers", "rm", "binf1")
    no_leak(t, "binf1")
    for i, uri in enumerate(("binary://bin/cat", "tcp://127.0.0.1:9")):
        cid = "binf%d" % (i + 2)
        r = run(c, t.rootfs, cid, "echo", "ran", extra=("--log-uri", uri))
        expect(r.returncode != 0 and "ran" not in r.stdout and "stdout" in r.stderr,
               "%s refused naming stdout:" % uri, r.stderr[-300:])
        c.ctr("task", "delete", "--force", cid, timeout=30)
        c.ctr("containers", "rm", cid)
        no_leak(t, cid)


def test_bind_mounts_and_namespace_paths_refused_naming_them(t):
    """A mount the sandbox cannot apply (another type, an unknown option)
    and a namespace path it cannot join fail the create naming the field; the
    default mounts of ctr's spec (proc, sys, dev...) are accepted (every
    other test)."""
    src = os.path.join(t.world.tmp, "mnt-src")
    os.makedirs(src, exist_ok=True)
    cases = [
        (("--mount", "type=tmpfs,src=tmpfs,dst=/scratch"), "/scratch"),
        (("--mount", "type=bind,src=%s,dst=/data,options=rbind:ro:noatime" % src), "noatime"),
        (("--with-ns", "ipc:/proc/1/ns/ipc"), "linux.namespaces"),
    ]
    for i, (extra, want) in enumerate(cases):
        cid = "mnt%d" % i
        r = run(t.c, t.rootfs, cid, "echo", "ran", extra=extra)
        expect(r.returncode != 0 and "ran" not in r.stdout and want in r.stderr
               and "not supported by " + RUNTIME in r.stderr,
               "%s refused naming %s (rc %d, stderr %r)" % (extra, want, r.returncode, r.stderr[-300:]))
        t.c.ctr("containers", "rm", cid)
        no_leak(t, cid)


def test_failed_start_ends_the_task(t):
    """A Start that fails (here: its file:// log cannot be opened) leaves a
    stopped task that kill, delete and delete --force end at once; before,
    it stayed CREATED: kill said 'process already finished', delete refused
    and delete --force hung."""
    c = t.c
    for i, how in enumerate((("task", "delete"), ("task", "delete", "--force"))):
        cid = "fstart%d" % i
        r = c.ctr("container", "create", "--runtime", RUNTIME, "--rootfs", t.rootfs, cid, "true")
        expect_eq(r.returncode, 0, "ctr container create: %s" % r.stderr)
        try:
            r = c.ctr("task", "start", "--log-uri", "file:///proc/sbx-no-such-dir/x.log", cid, timeout=60)
            expect(r.returncode != 0, "the start fails:", r.stdout, r.stderr)
            ls = c.ctr("task", "ls").stdout
            if cid in ls:
                expect("STOPPED" in [ln.split()[2] for ln in ls.splitlines() if ln.startswith(cid + " ")],
                       "the task whose start failed is STOPPED:", ls)
                c.ctr("task", "kill", cid, timeout=30)
                r = c.ctr(*how, cid, timeout=30)
                expect_eq(r.returncode, 0, "ctr %s: %s" % (" ".join(how), r.stderr))
            expect(cid not in c.ctr("task", "ls", "-q").stdout.split(), "no task left")
        finally:
            c.ctr("task", "delete", "--force", cid, timeout=30)
            c.ctr("container", "rm", cid)
        no_leak(t, cid)


def pod_name(sandbox_id):
    """shim/pod.go podSandboxName."""
    return "pod-" + hashlib.sha256(("%s/%s" % (NS, sandbox_id)).encode()).hexdigest()[:16]


def sandboxes(t):
    return [s["name"] for s in t.world.rpc_result("sandbox.list")["sandboxes"]]


def test_cri_container_type_annotation(t):
    """io.kubernetes.cri.container-type: an unknown value is refused naming
    the annotation, and so is a pod's container whose pod's sandbox
    container does not exist."""
    c = t.c
    r = run(c, t.rootfs, "ctype1", "true", extra=("--annotation", "io.kubernetes.cri.container-type=podd"))
    expect(r.returncode != 0 and "io.kubernetes.cri.container-type" in r.stderr,
           "an unknown container-type is refused naming the annotation:", r.stderr[-300:])
    c.ctr("containers", "rm", "ctype1")
    no_leak(t, "ctype1")
    r = run(c, t.rootfs, "ctype2", "echo", "ran", extra=(
        "--annotation", "io.kubernetes.cri.container-type=container",
        "--annotation", "io.kubernetes.cri.sandbox-id=no-such-pod"))
    expect(r.returncode != 0 and "ran" not in r.stdout and "io.kubernetes.cri.sandbox-id" in r.stderr,
           "a pod's container without its pod is refused naming sandbox-id:", r.stderr[-300:])
    c.ctr("containers", "rm", "ctype2")
    no_leak(t, "ctype2")


POD_ANN = ("--annotation", "io.kubernetes.cri.container-type=container",
           "--annotation", "io.kubernetes.cri.sandbox-id=podg")


def test_pod_grouping_by_annotation(t):
    """A pod's sandbox container (container-type sandbox) makes ONE sandbox
    for the pod, with the pod's policy, running nothing of its own image;
    the pod's containers (container-type container, the same sandbox id)
    are processes of it: they talk over 127.0.0.1 and no sandbox of their
    own is made. A container with a policy of its own is refused naming
    the annotation. The sandbox goes with the last of the pod's tasks,
    here a container that outlives the sandbox container's delete."""
    c, w = t.c, t.world
    pod = pod_name("podg")
    pol = json.dumps({"allow": ["api.public.test"]})
    r = c.ctr("run", "-d", "--runtime", RUNTIME, "--annotation", "io.kubernetes.cri.container-type=sandbox",
              "--annotation", "io.kubernetes.cri.sandbox-id=podg", "--annotation", "io.sandboxd.network-policy=" + pol,
              "--rootfs", t.rootfs, "podg", "/no/such/pause")
    expect_eq(r.returncode, 0, "ctr run -d of the pod's sandbox container: %s" % r.stderr)
    try:
        W.World.wait_until(lambda: "RUNNING" in c.ctr("tasks", "ls").stdout, 20, "the pod's sandbox container to run")
        expect(pod in sandboxes(t), "the pod's sandbox %s is made" % pod)
        expect(sandbox_name("podg") not in sandboxes(t), "no sandbox of the sandbox container's own")
        sb = w.rpc_result("sandbox.get", {"name": pod})
        expect_eq(sb.get("networkPolicy"), {"allow": ["api.public.test"]}, "the pod's sandbox has the pod's policy")
        r = c.ctr("task", "exec", "--exec-id", "e1", "podg", "true")
        expect(r.returncode != 0 and "runs nothing" in r.stderr, "exec into the sandbox container is refused:", r.stderr[-300:])
        r = c.ctr("run", "-d", "--runtime", RUNTIME, *POD_ANN, "--rootfs", t.rootfs, "podg-a",
                  "sh", "-c", "echo from-a | nc -l -p 7070")
        expect_eq(r.returncode, 0, "ctr run -d of container a: %s" % r.stderr)
        r = run(c, t.rootfs, "podg-b", "sh", "-c",
                "i=0; until nc 127.0.0.1 7070 </dev/null; do i=$((i+1)); [ $i -lt 100 ] || exit 9; sleep 0.1; done",
                extra=POD_ANN)
        expect_eq((r.returncode, r.stdout), (0, "from-a\n"), "container b reads container a over 127.0.0.1 (stderr %r)" % r.stderr[-300:])
        expect(not [n for n in sandboxes(t) if n in (sandbox_name("podg-a"), sandbox_name("podg-b"))],
               "the pod's containers have no sandbox of their own")
        ctrs = [x["name"] for x in w.rpc_result("container.list", {"sandbox": pod})["containers"]]
        expect(sandbox_name("podg-a") in ctrs, "container a is a container of the pod's sandbox:", ctrs)
        r = run(c, t.rootfs, "podg-c", "echo", "ran", extra=POD_ANN + ("--annotation", "io.sandboxd.network-policy=allow-all"))
        expect(r.returncode != 0 and "ran" not in r.stdout and "annotation io.sandboxd.network-policy" in r.stderr,
               "a container's own policy is refused naming the annotation:", r.stderr[-300:])
        c.ctr("containers", "rm", "podg-c")
        r = run(c, t.rootfs, "podg-d", "true", extra=POD_ANN + ("--memory-limit", str(500 * 1000 * 1000)))
        expect(r.returncode != 0 and "linux.resources.memory.limit" in r.stderr,
               "a limit that is not a whole MiB is refused naming the field:", r.stderr[-300:])
        c.ctr("containers", "rm", "podg-d")
        # a: runs on; the sandbox container is deleted first.
        r = c.ctr("run", "-d", "--runtime", RUNTIME, *POD_ANN, "--memory-limit", str(256 << 20),
                  "--rootfs", t.rootfs, "podg-a2", "sleep", "600")
        expect_eq(r.returncode, 0, "ctr run -d of container a2: %s" % r.stderr)
        W.World.wait_until(lambda: c.ctr("task", "ls").stdout.count("RUNNING") >= 2, 20, "a2 to run")
        ctr = w.rpc_result("container.get", {"sandbox": pod, "name": sandbox_name("podg-a2")})
        expect_eq(ctr["limits"].get("memoryMiB"), 256, "a2 is a container of the pod's sandbox with its memory limit")
        expect_eq(c.ctr("task", "kill", "-s", "KILL", "podg").returncode, 0, "kill of the sandbox container")
        W.World.wait_until(lambda: any(ln.split()[:1] == ["podg"] and ln.split()[-1] == "STOPPED"
                                       for ln in c.ctr("task", "ls").stdout.splitlines()), 20, "it to stop")
        expect_eq(c.ctr("task", "delete", "podg").returncode, 0, "delete of the sandbox container")
        expect(pod in sandboxes(t), "the pod's sandbox stays while a container of it is left")
        r = c.ctr("task", "exec", "--exec-id", "e2", "podg-a2", "echo", "still")
        expect_eq((r.returncode, r.stdout), (0, "still\n"), "the container left still runs (stderr %r)" % r.stderr[-300:])
        for cid in ("podg-a", "podg-a2"):
            c.ctr("task", "kill", "-s", "KILL", cid)
        W.World.wait_until(lambda: "RUNNING" not in c.ctr("task", "ls").stdout, 20, "the containers to stop")
        for cid in ("podg-a", "podg-a2"):
            expect_eq(c.ctr("task", "delete", cid).returncode, 0, "delete of %s" % cid)
        expect(pod not in sandboxes(t), "the pod's sandbox goes with the last of its tasks")
    finally:
        for cid in ("podg-a", "podg-a2", "podg-b", "podg-c", "podg-d", "podg"):
            c.ctr("task", "delete", "--force", cid)
            c.ctr("containers", "rm", cid)
    for cid in ("podg-a", "podg-a2", "podg-b", "podg-c", "podg-d", "podg"):
        no_leak(t, cid)
    expect(pod not in [r["name"] for r in w.rpc_result("runtime.list")["runtimes"]], "the pod's runtime is deleted")
    leaks.check(w, pod)
    expect(not os.path.exists("/run/containerd-shim-sandboxd-v2/pods/" + pod), "the pod's state is removed")


def _ctr_frozen(t, pod, ctr):
    """A pod container's own cgroup freezer as the kernel reports it (v2
    cgroup.freeze, else v1 freezer.state), and sandboxd's "paused"."""
    sb = t.world.rpc_result("sandbox.get", {"name": pod})
    got = t.world.rpc_result("container.get", {"sandbox": pod, "name": ctr})
    for d in sb["session"]["cgroups"]:
        for f, yes in (("cgroup.freeze", "1"), ("freezer.state", "FROZEN")):
            try:
                with open(os.path.join(d, "ctr-" + ctr, f)) as fh:
                    return fh.read().strip() == yes, got["paused"]
            except OSError:
                continue
    raise AssertionError("no freezer in %s's cgroups under %s" % (ctr, sb["session"]["cgroups"]))


def test_pause_and_resume_of_one_pod_container(t):
    """ctr task ps of a pod's container lists its own cgroup's processes;
    ctr task pause of a pod's container freezes that container's own
    cgroup only: ctr shows it PAUSED, the pod's other container runs and
    takes an exec, the pod's sandbox is not paused; resume thaws it and
    an exec runs in it; paused again, delete -f ends it and nothing is
    left frozen."""
    c, w = t.c, t.world
    pod = pod_name("podp")
    ann = ("--annotation", "io.kubernetes.cri.container-type=container",
           "--annotation", "io.kubernetes.cri.sandbox-id=podp")
    r = c.ctr("run", "-d", "--runtime", RUNTIME, "--annotation", "io.kubernetes.cri.container-type=sandbox",
              "--annotation", "io.kubernetes.cri.sandbox-id=podp", "--rootfs", t.rootfs, "podp", "/no/such/pause")
    expect_eq(r.returncode, 0, "ctr run -d of the pod's sandbox container: %s" % r.stderr)
    try:
        for cid in ("podp-a", "podp-b"):
            r = c.ctr("run", "-d", "--runtime", RUNTIME, *ann, "--rootfs", t.rootfs, cid, "sleep", "600")
            expect_eq(r.returncode, 0, "ctr run -d of %s: %s" % (cid, r.stderr))
        W.World.wait_until(lambda: c.ctr("task", "ls").stdout.count("RUNNING") >= 3, 20, "the pod's tasks to run")
        a, b = sandbox_name("podp-a"), sandbox_name("podp-b")
        # ctr task ps: the container's own processes (its cgroup's).
        r = c.ctr("task", "ps", "podp-a")
        pids = [int(ln.split()[0]) for ln in r.stdout.splitlines()[1:] if ln.split()[:1] and ln.split()[0].isdigit()]
        expect(r.returncode == 0 and pids, "ctr task ps of a pod container lists processes:", r.stdout, r.stderr)
        for pid in pids:
            with open("/proc/%d/cgroup" % pid) as f:
                expect("/ctr-%s\n" % a in f.read(), "pid %d of ctr task ps is in a's own cgroup" % pid)
        expect_eq(_ctr_frozen(t, pod, a), (False, False), "a running container's cgroup (frozen, paused)")
        r = c.ctr("task", "pause", "podp-a")
        expect_eq(r.returncode, 0, "ctr task pause of a pod's container: %s" % r.stderr)
        states = {ln.split()[0]: ln.split()[-1] for ln in c.ctr("task", "ls").stdout.splitlines()[1:]}
        expect_eq((states.get("podp-a"), states.get("podp-b"), states.get("podp")), ("PAUSED", "RUNNING", "RUNNING"),
                  "ctr task ls after the pause of podp-a")
        expect_eq(_ctr_frozen(t, pod, a), (True, True), "the paused container's cgroup (frozen, paused)")
        expect_eq(_ctr_frozen(t, pod, b), (False, False), "the other container's cgroup (frozen, paused)")
        expect(not w.rpc_result("sandbox.get", {"name": pod})["session"]["paused"], "the pod's sandbox is not paused")
        r = c.ctr("task", "exec", "--exec-id", "e1", "podp-b", "echo", "alive")
        expect_eq((r.returncode, r.stdout), (0, "alive\n"), "an exec in the other container runs (%s)" % r.stderr)
        r = c.ctr("task", "resume", "podp-a")
        expect_eq(r.returncode, 0, "ctr task resume: %s" % r.stderr)
        expect_eq(_ctr_frozen(t, pod, a), (False, False), "the resumed container's cgroup (frozen, paused)")
        r = c.ctr("task", "exec", "--exec-id", "e2", "podp-a", "echo", "thawed")
        expect_eq((r.returncode, r.stdout), (0, "thawed\n"), "an exec in the resumed container runs (%s)" % r.stderr)
        expect_eq(c.ctr("task", "pause", "podp-a").returncode, 0, "pause again")
        r = c.ctr("task", "delete", "-f", "podp-a")
        expect_eq(r.returncode, 0, "ctr task delete -f of a paused pod container: %s" % r.stderr)
        expect(a not in [x["name"] for x in w.rpc_result("container.list", {"sandbox": pod})["containers"]],
               "the paused container is gone from the pod's sandbox")
    finally:
        for cid in ("podp-a", "podp-b", "podp"):
            c.ctr("task", "resume", cid)
            c.ctr("task", "delete", "--force", cid)
            c.ctr("containers", "rm", cid)
    for cid in ("podp-a", "podp-b", "podp"):
        no_leak(t, cid)
    expect(pod not in sandboxes(t), "the pod's sandbox goes with the last of its tasks")
    leaks.check(w, pod)


def test_pod_containers_pid_namespace_from_the_spec(t):
    """A pod's container whose spec's pid namespace has no path (ctr's
    default, the CRI's CONTAINER) has a PID namespace of its own: another
    container sees none of its processes, and its own PID 1 is its
    namespace's; one whose pid namespace names a path (--with-ns pid:...,
    the CRI's POD) shares the pod sandbox's and sees the first's."""
    c, w = t.c, t.world
    pod = pod_name("podn")
    ann = ("--annotation", "io.kubernetes.cri.container-type=container",
           "--annotation", "io.kubernetes.cri.sandbox-id=podn")
    find = "for p in /proc/[0-9]*; do grep -q '[6]01' $p/cmdline 2>/dev/null && echo seen; done; cat /proc/1/comm"
    r = c.ctr("run", "-d", "--runtime", RUNTIME, "--annotation", "io.kubernetes.cri.container-type=sandbox",
              "--annotation", "io.kubernetes.cri.sandbox-id=podn", "--rootfs", t.rootfs, "podn", "/no/such/pause")
    expect_eq(r.returncode, 0, "ctr run -d of the pod's sandbox container: %s" % r.stderr)
    try:
        r = c.ctr("run", "-d", "--runtime", RUNTIME, *ann, "--rootfs", t.rootfs, "podn-a", "sleep", "601")
        expect_eq(r.returncode, 0, "ctr run -d of podn-a: %s" % r.stderr)
        r = c.ctr("run", "-d", "--runtime", RUNTIME, *ann, "--rootfs", t.rootfs, "podn-b", "sleep", "602")
        expect_eq(r.returncode, 0, "ctr run -d of podn-b: %s" % r.stderr)
        r = c.ctr("run", "-d", "--runtime", RUNTIME, *ann, "--with-ns", "pid:/proc/1/ns/pid", "--rootfs", t.rootfs,
                  "podn-s", "sleep", "603")
        expect_eq(r.returncode, 0, "ctr run -d of podn-s: %s" % r.stderr)
        W.World.wait_until(lambda: c.ctr("task", "ls").stdout.count("RUNNING") >= 4, 20, "the pod's tasks to run")
        got = {x["name"]: x["pidNamespace"] for x in w.rpc_result("container.list", {"sandbox": pod})["containers"]}
        expect_eq((got.get(sandbox_name("podn-a")), got.get(sandbox_name("podn-s"))), ("container", "sandbox"),
                  "the containers' pidNamespace")
        r = c.ctr("task", "exec", "--exec-id", "e1", "podn-a", "sh", "-c", find)
        expect_eq((r.returncode, r.stdout), (0, "seen\nsandbox-ctrinit\n"), "podn-a's own view (%s)" % r.stderr)
        r = c.ctr("task", "exec", "--exec-id", "e2", "podn-b", "sh", "-c", find)
        expect_eq((r.returncode, r.stdout), (0, "sandbox-ctrinit\n"), "podn-b sees none of podn-a's (%s)" % r.stderr)
        r = c.ctr("task", "exec", "--exec-id", "e3", "podn-s", "sh", "-c", find)
        expect_eq((r.returncode, r.stdout.splitlines()[:1]), (0, ["seen"]),
                  "podn-s, in the pod's shared namespace, sees podn-a's (%s)" % r.stderr)
    finally:
        for cid in ("podn-a", "podn-b", "podn-s", "podn"):
            c.ctr("task", "delete", "--force", cid)
            c.ctr("containers", "rm", cid)
    for cid in ("podn-a", "podn-b", "podn-s", "podn"):
        no_leak(t, cid)
    expect(pod not in sandboxes(t), "the pod's sandbox goes with the last of its tasks")
    leaks.check(w, pod)


def test_pod_container_mounts_under_host_mount_roots(t):
    """ctr run --mount into a pod's container: a bind mount whose source
    lies under daemon.json hostMountRoots is there, read-only when asked
    (a write fails), writable when not; a source outside the roots is
    refused naming it; a container of no pod gets its mounts the same way
    (sandbox.create mounts)."""
    c, w = t.c, t.world
    cfg = os.path.join(t.mount_root, "cfg")
    data = os.path.join(t.mount_root, "data")
    for d in (cfg, data):
        os.makedirs(d, exist_ok=True)
    # As the kubelet makes an emptyDir: writable by the container's root
    # also when it is not the host's (a user namespace).
    os.chmod(data, 0o777)
    with open(os.path.join(cfg, "key"), "w") as f:
        f.write("value-1\n")
    outside = os.path.join(t.world.tmp, "outside-roots")
    os.makedirs(outside, exist_ok=True)
    ann = ("--annotation", "io.kubernetes.cri.container-type=container",
           "--annotation", "io.kubernetes.cri.sandbox-id=podm")
    r = c.ctr("run", "-d", "--runtime", RUNTIME, "--annotation", "io.kubernetes.cri.container-type=sandbox",
              "--annotation", "io.kubernetes.cri.sandbox-id=podm", "--rootfs", t.rootfs, "podm", "/pause")
    expect_eq(r.returncode, 0, "the pod's sandbox container: %s" % r.stderr)
    try:
        # Without a user namespace root inside is host root on a host
        # mount's files, so a writable one is refused naming readOnly
        # (docs/SECURITY.md §3.17); with one it is written.
        plain = os.environ.get("SANDBOXD_TEST_USERNS") == "0"
        if plain:
            r = run(c, t.rootfs, "podm-w", "echo", "ran",
                    extra=ann + ("--mount", "type=bind,src=%s,dst=/data,options=rbind:rw" % data))
            expect(r.returncode != 0 and "ran" not in r.stdout and "readOnly" in r.stderr,
                   "without a user namespace a writable host mount is refused naming readOnly:", r.stderr[-400:])
            c.ctr("containers", "rm", "podm-w")
        rw = () if plain else ("--mount", "type=bind,src=%s,dst=/data,options=rbind:rw" % data)
        r = run(c, t.rootfs, "podm-a", "sh", "-c",
                "cat /cfg/key; echo x > /cfg/new && echo cfg-written; echo y > /data/out && echo data-written",
                extra=ann + ("--mount", "type=bind,src=%s,dst=/cfg,options=rbind:ro" % cfg) + rw)
        lines = r.stdout.splitlines()
        expect(lines[:1] == ["value-1"], "the read-only mount's file is read:", r.stdout, r.stderr[-300:])
        expect("cfg-written" not in lines and "Read-only file system" in r.stderr,
               "a write to the read-only mount fails:", r.stdout, r.stderr[-300:])
        expect(not os.path.exists(os.path.join(cfg, "new")), "nothing reached the read-only source")
        if not plain:
            expect("data-written" in lines, "the writable mount is written:", r.stdout, r.stderr[-300:])
            with open(os.path.join(data, "out")) as f:
                expect_eq(f.read(), "y\n", "the write reached the writable source")
        r = run(c, t.rootfs, "podm-b", "echo", "ran",
                extra=ann + ("--mount", "type=bind,src=%s,dst=/x,options=rbind:ro" % outside))
        expect(r.returncode != 0 and "ran" not in r.stdout and "mounts" in r.stderr and "hostMountRoots" in r.stderr,
               "a source outside hostMountRoots is refused naming it:", r.stderr[-400:])
        c.ctr("containers", "rm", "podm-b")
    finally:
        c.ctr("task", "kill", "-s", "KILL", "podm")
        W.World.wait_until(lambda: "RUNNING" not in c.ctr("task", "ls").stdout, 20, "the pod to stop")
        c.ctr("task", "delete", "--force", "podm")
        c.ctr("containers", "rm", "podm")
    for cid in ("podm-a", "podm-b", "podm-w", "podm"):
        no_leak(t, cid)
    leaks.check(w, pod_name("podm"))
    # A container of no pod: sandbox.create mounts, the same rules.
    r = run(c, t.rootfs, "podm-c", "sh", "-c", "cat /cfg/key; echo x > /cfg/new && echo cfg-written",
            extra=("--mount", "type=bind,src=%s,dst=/cfg,options=rbind:ro" % cfg))
    expect(r.stdout.splitlines() == ["value-1"] and "Read-only file system" in r.stderr,
           "a container of no pod reads its read-only mount and cannot write it:", r.stdout, r.stderr[-300:])
    no_leak(t, "podm-c")
    r = run(c, t.rootfs, "podm-d", "echo", "ran", extra=("--mount", "type=bind,src=%s,dst=/x,options=rbind:ro" % outside))
    expect(r.returncode != 0 and "ran" not in r.stdout and "mounts" in r.stderr and "hostMountRoots" in r.stderr,
           "and one outside hostMountRoots is refused naming it:", r.stderr[-400:])
    c.ctr("containers", "rm", "podm-d")
    no_leak(t, "podm-d")


def test_mount_destination_through_an_image_symlink(t):
    """A mount destination that goes through a symlink of the image
    (/var/run -> /run, as in many images, where the kubelet puts the
    service account token): the shim resolves it inside the image, so
    the volume is at the path the container asks for, in a container of
    no pod and in a pod's container alike."""
    c = t.c
    root = os.path.join(t.world.tmp, "rootfs-varrun")
    if not os.path.exists(root):
        make_rootfs(root)
        os.makedirs(os.path.join(root, "run"))
        os.makedirs(os.path.join(root, "var"))
        os.symlink("../run", os.path.join(root, "var", "run"))
    sec = os.path.join(t.mount_root, "token")
    os.makedirs(sec, exist_ok=True)
    with open(os.path.join(sec, "token"), "w") as f:
        f.write("tok-1\n")
    mnt = ("--mount", "type=bind,src=%s,dst=/var/run/secrets/app,options=rbind:ro" % sec)
    r = run(c, root, "vrun1", "sh", "-c", "cat /var/run/secrets/app/token /run/secrets/app/token", extra=mnt)
    expect_eq((r.returncode, r.stdout), (0, "tok-1\ntok-1\n"), "the token at /var/run/secrets/app (stderr %r)" % r.stderr[-300:])
    no_leak(t, "vrun1")
    r = c.ctr("run", "-d", "--runtime", RUNTIME, "--annotation", "io.kubernetes.cri.container-type=sandbox",
              "--annotation", "io.kubernetes.cri.sandbox-id=vrunp", "--rootfs", t.rootfs, "vrunp", "/pause")
    expect_eq(r.returncode, 0, "the pod's sandbox container: %s" % r.stderr)
    try:
        r = run(c, root, "vrunp-a", "cat", "/var/run/secrets/app/token", extra=mnt + (
            "--annotation", "io.kubernetes.cri.container-type=container",
            "--annotation", "io.kubernetes.cri.sandbox-id=vrunp"))
        expect_eq((r.returncode, r.stdout), (0, "tok-1\n"), "in a pod's container (stderr %r)" % r.stderr[-300:])
    finally:
        c.ctr("task", "kill", "-s", "KILL", "vrunp")
        W.World.wait_until(lambda: "RUNNING" not in c.ctr("task", "ls").stdout, 20, "the pod to stop")
        c.ctr("task", "delete", "--force", "vrunp")
        c.ctr("containers", "rm", "vrunp")
    for cid in ("vrunp-a", "vrunp"):
        no_leak(t, cid)


def make_netns(t, name):
    """A network namespace bound on a file below containerd's base (a
    shared mount: sandboxd sees it); returns (path, inode). Removed by
    drop_netns."""
    d = os.path.join(t.c.base, "netns")
    os.makedirs(d, exist_ok=True)
    path = os.path.join(d, name)
    open(path, "w").close()
    subprocess.run(["unshare", "--net=" + path, "true"], check=True)
    return path, os.stat(path).st_ino


def drop_netns(path):
    subprocess.run(["umount", path], capture_output=True)
    try:
        os.unlink(path)
    except OSError:
        pass


def test_with_ns_network_joins_that_namespace(t):
    """ctr run --with-ns network:PATH: the container's sandbox joins that
    network namespace (sandbox.create network.netns), as a pod's sandbox
    container does with the CNI's; the pod's containers are in it too. A
    path that is no network namespace is refused naming network.netns."""
    c = t.c
    path, ino = make_netns(t, "n1")
    path2, ino2 = make_netns(t, "n2")
    try:
        r = run(c, t.rootfs, "wns1", "readlink", "/proc/self/ns/net", extra=("--with-ns", "network:" + path))
        expect_eq((r.returncode, r.stdout), (0, "net:[%d]\n" % ino), "the container's network namespace (stderr %r)" % r.stderr[-300:])
        no_leak(t, "wns1")
        r = c.ctr("run", "-d", "--runtime", RUNTIME, "--annotation", "io.kubernetes.cri.container-type=sandbox",
                  "--annotation", "io.kubernetes.cri.sandbox-id=wnsp", "--with-ns", "network:" + path2,
                  "--rootfs", t.rootfs, "wnsp", "/pause")
        expect_eq(r.returncode, 0, "the pod's sandbox container in %s: %s" % (path2, r.stderr))
        try:
            r = run(c, t.rootfs, "wnsp-a", "readlink", "/proc/self/ns/net", extra=(
                "--annotation", "io.kubernetes.cri.container-type=container",
                "--annotation", "io.kubernetes.cri.sandbox-id=wnsp"))
            expect_eq((r.returncode, r.stdout), (0, "net:[%d]\n" % ino2),
                      "the pod's container is in the pod's network namespace (stderr %r)" % r.stderr[-300:])
        finally:
            c.ctr("task", "kill", "-s", "KILL", "wnsp")
            W.World.wait_until(lambda: "RUNNING" not in c.ctr("task", "ls").stdout, 20, "the pod to stop")
            c.ctr("task", "delete", "--force", "wnsp")
            c.ctr("containers", "rm", "wnsp")
        no_leak(t, "wnsp-a")
        no_leak(t, "wnsp")
        expect(pod_name("wnsp") not in sandboxes(t), "the pod's sandbox is deleted")
        leaks.check(t.world, pod_name("wnsp"))
        bogus = os.path.join(t.world.tmp, "not-a-netns")
        open(bogus, "w").close()
        r = run(c, t.rootfs, "wns2", "echo", "ran", extra=("--with-ns", "network:" + bogus))
        expect(r.returncode != 0 and "ran" not in r.stdout and "network.netns" in r.stderr,
               "a file that is no network namespace is refused naming network.netns:", r.stderr[-300:])
        c.ctr("containers", "rm", "wns2")
        no_leak(t, "wns2")
    finally:
        drop_netns(path)
        drop_netns(path2)


class T:
    pass


def main():
    filters = sys.argv[1:]
    for tool in ("containerd", "ctr"):
        if not shutil.which(tool):
            print("shim: SKIP (%s not installed)" % tool)
            return 0
    if not os.access(SHIM, os.X_OK):
        print("shim: %s is not built (make shim)" % SHIM)
        return 1
    if not os.access(BUSYBOX, os.X_OK):
        print("shim: %s missing (busybox-static; scripts/install-deps)" % BUSYBOX)
        return 1
    tests = [(n, f) for n, f in sorted(globals().items(), key=lambda kv: getattr(kv[1], "__code__", None)
                                        and kv[1].__code__.co_firstlineno or 0)
             if n.startswith("test_") and callable(f) and (not filters or any(x in n for x in filters))]
    failed = 0
    runs = tests * int(os.environ.get("SHIM_TEST_REPEAT", "1"))
    with W.World() as world:
        t = T()
        t.world = world
        t.rootfs = os.path.join(world.tmp, "rootfs")
        make_rootfs(t.rootfs)
        t.c = Containerd(world, os.path.join(world.tmp, "containerd"))
        try:
            t.c.share_mounts()
            # Host bind mounts of pods' containers come from here only.
            t.mount_root = os.path.join(world.tmp, "host-mounts")
            os.makedirs(t.mount_root)
            world.start_sandboxd(config={"hostMountRoots": [t.mount_root]})
            t.c.start()
            for name, fn in runs:
                t0 = time.monotonic()
                try:
                    fn(t)
                    print("PASS %s (%.1fs)" % (name, time.monotonic() - t0), flush=True)
                except Exception:
                    failed += 1
                    print("FAIL %s\n%s" % (name, traceback.format_exc()), flush=True)
                    print("containerd log:\n" + t.c.log_tail(), flush=True)
            try:
                W.World.wait_until(lambda: not shims(t.c), 10, "every shim to exit")
            except W.WorldError:
                failed += 1
                print("FAIL no shim is left running: %s" % shims(t.c))
        finally:
            for pid in shims(t.c):
                os.kill(pid, signal.SIGKILL)
            t.c.stop()
    print("shim: %d passed, %d failed" % (len(runs) - failed, failed))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
