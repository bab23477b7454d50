"""Attacks on how a copy's child loads libarchive (cli/lazy/archive.c,
SECURITY.md "Directory copies"): the child loads it before its
confinement, as root of the sandbox with init's capabilities and fds, so
a library of the sandbox's own tree loaded there would be an escape.
Root inside plants a library under every name the loader could look for
(the files of libarchive and its dependencies in /usr/lib, the
ld.so.cache, LD_LIBRARY_PATH in the sandbox's env, a gconv module for
libarchive's charset conversions); then copies in and out run, and
nothing planted may have run in any process."""
import io
import os
import shutil
import subprocess
import tarfile
import tempfile

from test_runtimes import _ldd_paths

from common import create, delete, expect, expect_eq, rpc_ok, sh, sh_ok

EVIL_C = r"""
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>
static void mark(const char *why) {
        char buf[4096], line[8192];
        int s = open("/proc/self/status", O_RDONLY);
        ssize_t n = s >= 0 ? read(s, buf, sizeof(buf) - 1) : 0;
        buf[n > 0 ? n : 0] = 0;
        const char *cap = strstr(buf, "CapEff:");
        int len = snprintf(line, sizeof(line), "%s pid=%d uid=%d %.24s\n", why, (int)getpid(), (int)getuid(),
                           cap ? cap : "?");
        int fd = open("/tmp/archive-pwned", O_WRONLY | O_CREAT | O_APPEND, 0666);
        if (fd >= 0)
                (void)!write(fd, line, (size_t)len);
}
__attribute__((constructor)) static void pwn(void) { mark("ctor"); }
/* a gconv module's entry points */
int gconv_init(void *step) { mark("gconv_init"); return 1; }
int gconv(void) { mark("gconv"); return 1; }
"""

SONAMES = ["libnettle.so.8", "libacl.so.1", "liblzma.so.5", "libzstd.so.1", "liblz4.so.1", "libbz2.so.1.0",
           "libz.so.1", "libxml2.so.2", "libicuuc.so.72", "libicudata.so.72", "libstdc++.so.6",
           "libgcc_s.so.1", "libarchive.so.13"]



def _evil_so(world):
    src = os.path.join(world.tmp, "archive-evil.c")
    out = os.path.join(world.tmp, "archive-evil.so")
    with open(src, "w") as f:
        f.write(EVIL_C)
    subprocess.run(["cc", "-shared", "-fPIC", "-o", out, src], check=True)
    os.chmod(out, 0o644)
    return out


def _evil_runtime_tar(world):
    """A runtime (the tiny tree of test_runtimes: dash, cat, id, true) whose
    library directories hold the planted library under every soname of
    libarchive and its dependencies, with an ld.so.cache (made by ldconfig
    -r) that names them, and a gconv configuration that sends every charset
    to the planted library."""
    so = _evil_so(world)
    root = tempfile.mkdtemp(prefix="evilrt-", dir=world.tmp)
    for tool, dest in (("/bin/dash", "bin/sh"), ("/usr/bin/id", "bin/id"), ("/usr/bin/cat", "bin/cat"),
                       ("/usr/bin/true", "bin/true"), ("/usr/bin/mkdir", "bin/mkdir"), ("/usr/bin/ls", "bin/ls")):
        for src, dst in [(tool, dest)] + [(lib, lib.lstrip("/")) for lib in _ldd_paths(tool)]:
            d = os.path.join(root, dst)
            os.makedirs(os.path.dirname(d), exist_ok=True)
            shutil.copy(os.path.realpath(src), d)
    for d in ("usr/lib/x86_64-linux-gnu", "lib/x86_64-linux-gnu", "usr/local/lib", "evil", "lib64"):
        os.makedirs(os.path.join(root, d), exist_ok=True)
        for n in SONAMES:
            shutil.copy(so, os.path.join(root, d, n))
    gconv = os.path.join(root, "usr/lib/x86_64-linux-gnu/gconv")
    os.makedirs(gconv, exist_ok=True)
    shutil.copy(so, os.path.join(gconv, "EVIL.so"))
    with open(os.path.join(gconv, "gconv-modules"), "w") as f:
        f.write(GCONV)
    os.makedirs(os.path.join(root, "etc"), exist_ok=True)
    with open(os.path.join(root, "etc/ld.so.conf"), "w") as f:
        f.write("/evil\n/usr/lib/x86_64-linux-gnu\n")
    with open(os.path.join(root, "etc/ld.so.preload"), "w") as f:
        f.write("")
    subprocess.run(["ldconfig", "-r", root], check=False, capture_output=True)
    subprocess.run(["iconvconfig", "--prefix", root], check=False, capture_output=True)
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as t:
        t.add(root, arcname=".")
    shutil.rmtree(root)
    path = os.path.join(world.tmp, "evilrt.tar.gz")
    with open(path, "wb") as f:
        f.write(buf.getvalue())
    return so, path


GCONV = ("alias ANSI_X3.4-1968// EVIL//\nalias UTF-8// EVIL//\nalias UTF8// EVIL//\n"
         "alias ISO-8859-1// EVIL//\nmodule EVIL// INTERNAL EVIL 1\nmodule INTERNAL EVIL// EVIL 1\n")


def _tree(world, tag):
    tree = os.path.join(world.tmp, "archive-tree-" + tag)
    os.makedirs(os.path.join(tree, "d"), exist_ok=True)
    # A name that is not ASCII: a charset conversion for libarchive's pax.
    with open(os.path.join(tree, "d", "f\u00e9.txt"), "w") as f:
        f.write("copied\n")
    return tree


def _copies(world, sb, tag):
    tree = _tree(world, tag)
    back = os.path.join(world.tmp, "archive-back-" + tag)
    shutil.rmtree(back, ignore_errors=True)
    world.ctl("cp", "-r", tree, "%s:/workspace/t" % sb, check=True)
    world.ctl("cp", "-r", "%s:/workspace/t" % sb, back, check=True)
    with open(os.path.join(back, "d", "f\u00e9.txt")) as f:
        expect_eq(f.read(), "copied\n", "the tree copied out")
    r = world.rpc("fs.readTar", {"sandbox": sb, "path": "/workspace/t", "sudo": True})
    expect("libarchive could not" not in str(r), "readTar with sudo", str(r)[:300])


def _pwned(world, sb):
    code, out, err = sh(world, sb, "cat /tmp/archive-pwned /archive-pwned 2>/dev/null; true")
    expect_eq(out, "", "code planted in the sandbox ran in a copy's process (%s)" % err.strip())


def test_copy_child_never_loads_a_library_of_the_runtime(world):
    """A runtime whose every library of libarchive's is the planted one,
    its ld.so.cache naming them, LD_LIBRARY_PATH and GCONV_PATH in the
    sandbox's env: copies work (the host's libarchive) and nothing planted
    ran."""
    _so, path = _evil_runtime_tar(world)
    rt = world.name("evilrt")
    sb = None
    try:
        code, _o, err = world.ctl("runtime", "import", rt, path)
        expect_eq(code, 0, "runtime import (%s)" % err.strip())
        sb, _c, _o, _e = create(world, "archrt", "--deny-all", "--runtime", rt, "--env",
                                "LD_LIBRARY_PATH=/evil", "--env", "GCONV_PATH=/usr/lib/x86_64-linux-gnu/gconv")
        _pwned(world, sb)
        _copies(world, sb, "rt")
        _pwned(world, sb)
    finally:
        if sb:
            delete(world, sb)
        world.ctl("runtime", "rm", rt)


def test_copy_child_never_loads_a_library_root_planted(world):
    """Root of a sandbox of the host runtime plants where it can write (its
    /usr and ld.so.cache are read-only): a directory named by the
    sandbox's LD_LIBRARY_PATH; then a new session of the
    persistent sandbox starts with them."""
    so = _evil_so(world)
    sb = None
    try:
        sb, _c, _o, _e = create(world, "archp", "--deny-all", "--persistent", "--env",
                                "LD_LIBRARY_PATH=/evil")
        world.ctl("cp", so, "%s:/tmp/evil.so" % sb, check=True)
        sh_ok(world, sb, "mkdir -p /evil && for n in %s; do cat /tmp/evil.so > /evil/$n; done; "
                         "(cat /evil/libz.so.1 > /etc/ld.so.cache) 2>/dev/null; true" % " ".join(SONAMES), "--sudo")
        _copies(world, sb, "p1")
        _pwned(world, sb)
        world.ctl("stop", sb, check=True)
        world.ctl("get", "--resume", sb, check=True)
        _copies(world, sb, "p2")
        _pwned(world, sb)
    finally:
        if sb:
            delete(world, sb)


def test_runtime_import_never_loads_a_library_of_the_tarball(world):
    """sandboxd extracts a runtime's tarball on a thread chrooted into the
    new tree (sandboxd/runtime.c): members written before a later one
    (a gconv configuration and module, an nsswitch.conf and NSS module)
    must not be loaded into the daemon when libarchive converts that
    member's name (pax, UTF-8) or looks up its owner's name."""
    so = _evil_so(world)
    with open(so, "rb") as f:
        evil = f.read()
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as t:
        def add(name, data, mode=0o644, uname="root", gname="root"):
            ti = tarfile.TarInfo(name)
            ti.size, ti.mode, ti.uname, ti.gname = len(data), mode, uname, gname
            t.addfile(ti, io.BytesIO(data))
        for d in ("usr/lib/x86_64-linux-gnu/gconv/", "lib/x86_64-linux-gnu/", "usr/lib/x86_64-linux-gnu/"):
            add(d + "gconv/EVIL.so" if "gconv" not in d else d + "EVIL.so", evil)
        add("usr/lib/x86_64-linux-gnu/gconv/gconv-modules", GCONV.encode())
        for n in ("libnss_evil.so.2",):
            add("lib/x86_64-linux-gnu/" + n, evil)
            add("usr/lib/x86_64-linux-gnu/" + n, evil)
        add("etc/nsswitch.conf", b"passwd: evil\ngroup: evil\n")
        add("bin/sh", open("/bin/dash", "rb").read(), 0o755)
        add("fi\u00e9-\u4e2d.txt", b"x\n", 0o644, uname="nobody-\u00e9", gname="nogroup-\u00e9")
        add("owned", b"y\n", 0o644, uname="someone", gname="somegroup")
    path = os.path.join(world.tmp, "evil-import.tar")
    with open(path, "wb") as f:
        f.write(buf.getvalue())
    rt = world.name("evilimp")
    try:
        if os.path.exists("/tmp/archive-pwned"):
            os.unlink("/tmp/archive-pwned")
        code, _o, err = world.ctl("runtime", "import", rt, path)
        tree = os.path.join(world.daemon.state_dir, "runtimes", rt)
        marks = [p for p in (os.path.join(tree, "archive-pwned"), os.path.join(tree, "tmp", "archive-pwned"),
                             "/tmp/archive-pwned") if os.path.exists(p)]
        expect_eq(marks, [], "code of the tarball ran in sandboxd (import exit %d: %s)" % (code, err.strip()[:200]))
    finally:
        world.ctl("runtime", "rm", rt)


SPY = r"""
end=$(( $(date +%%s) + %(secs)d ))
while [ $(date +%%s) -lt $end ]; do
        for d in /proc/[0-9]*; do
                [ "$d" = /proc/$$ ] && continue
                ls -l $d/fd 2>/dev/null | grep -E 'libarchive|x86_64-linux-gnu|eventpoll|signalfd|socket:' \
                        | sed "s#^#$d $(cat $d/comm 2>/dev/null) #"
        done
done | sort -u | head -20
echo spied
"""


def test_copy_children_fds_are_unreadable_by_sandbox_root_while_they_load(world):
    """While a copy's child loads libarchive (before its confinement) it
    holds init's fds: the host's library files, the agent socket, init's
    epoll and signalfd. Root inside (sudo), looking at every process's
    /proc/PID/fd in a loop while copies run, reads none of them."""
    tree = _tree(world, "spy")
    with_sb = create(world, "archspy", "--deny-all")[0]
    try:
        spy = world.ctl("exec", "--detach", "--sudo", with_sb, "--", "sh", "-c", SPY % {"secs": 8}, check=True)[1]
        cid = spy.strip()
        for i in range(25):
            world.ctl("cp", "-r", tree, "%s:/workspace/t%d" % (with_sb, i), check=True)
        code, out, err = world.ctl("command", "wait", cid, timeout=60)
        code, out, err = world.ctl("command", "logs", cid)
        expect(out.endswith("spied\n"), "the spy ran to its end", out[-300:], err[-300:])
        leaked = [l for l in out.splitlines() if l != "spied"]
        expect_eq(leaked, [], "fds of init's (or a copy's child) seen by root inside")
    finally:
        delete(world, with_sb)


def test_nothing_is_mounted_over_proc_or_sys_where_copy_children_load_through_proc(world):
    """The copy child dlopen()s libarchive's files by their /proc/self/fd
    links, resolved in the sandbox's tree, as init (before its
    confinement). A host mount (root on the local socket, daemon.json
    hostMountRoots) at /proc would not be the sandbox's procfs: the links
    there were whatever files that directory held, and ran with init's
    privileges. A host mount under /proc or /sys is refused, naming the
    field (the child also refuses to load through a /proc that is not
    procfs, cli/lazy/archive.c); one under /dev is not (kubelet binds
    its termination log there)."""
    root = os.path.join(world.tmp, world.name("hmrproc"))
    fake = os.path.join(root, "proc")
    os.makedirs(os.path.join(fake, "self", "fd"))
    world.stop_sandboxd()
    d = world.start_sandboxd({"hostMountRoots": [root]}, tag="hmrproc")
    name = world.name("archproc")
    try:
        for dst in ("/proc", "//proc/", "/proc/sys", "/sys", "/sys/fs/cgroup"):
            msg = d.rpc("sandbox.create", {"name": name, "networkPolicy": "deny-all",
                                           "mounts": [{"source": fake, "destination": dst, "readOnly": True}]}, 120)
            expect("error" in msg, "a host mount at %s is refused: %s" % (dst, msg))
            e = msg["error"]
            expect(e["data"].get("field") == "mounts[0].destination" and "/proc or /sys" in e["message"],
                   "the refusal names the field and why: %s" % e)
        msg = d.rpc("sandbox.create", {"name": name, "networkPolicy": "deny-all",
                                       "mounts": [{"source": fake, "destination": "/process", "readOnly": True}]}, 120)
        expect("error" not in msg, "/process is not under /proc: %s" % msg.get("error"))
    finally:
        d.rpc("sandbox.delete", {"name": name}, 60)
        world.stop_sandboxd(d)
        world.start_sandboxd()
