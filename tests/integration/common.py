"""Helpers the integration tests share: sandboxes that are always deleted,
shell commands inside a sandbox, the Debian `hello` tarball, polling."""
import contextlib
import glob
import gzip
import io
import json
import os
import subprocess
import tempfile
import time

import world as W

CACHE_DIRS = ("/var/cache/sandboxd-test", os.path.join(tempfile.gettempdir(), "sandboxd-test-cache"))


def expect(cond, what, *detail):
    if not cond:
        raise AssertionError(" ".join([what] + [str(d) for d in detail]))


def expect_eq(got, want, what):
    if got != want:
        raise AssertionError("%s: expected %r, got %r" % (what, want, got))


def create(world, tag, *args, check=True):
    """sandboxctl create --name <unique> ARGS; returns (name, code, out, err)."""
    name = world.name(tag)
    code, out, err = world.ctl("--json", "create", "--name", name, *args, timeout=180)
    if check and code != 0:
        raise AssertionError("create %s %s: exit %d: %s" % (name, " ".join(args), code,
                                                            (err or out).strip()[:400]))
    return name, code, out, err


def delete(world, name):
    return world.ctl("rm", name)


@contextlib.contextmanager
def sandbox(world, tag, *args):
    """A sandbox made with `sandboxctl create ARGS`, deleted at the end."""
    name, _c, _o, _e = create(world, tag, *args)
    try:
        yield name
    finally:
        try:
            delete(world, name)
        except Exception:
            pass


# A disk for the tests that make tens of thousands of files: one inode
# per 16 KiB, and the test world's default disk is small (every disk holds
# its blocks on the host; world.WORLD_DISK_MIB).
MANY_FILES_DISK_MIB = 1024


def create_rpc(world, tag, **params):
    """sandbox.create of a unique name (deny-all unless params say) over
    JSON-RPC, for parameters the CLI has no flag for (resources.diskMiB);
    returns the name."""
    name = world.name(tag)
    world.rpc_result("sandbox.create", dict({"name": name, "networkPolicy": "deny-all"}, **params), 180)
    return name


@contextlib.contextmanager
def sandbox_rpc(world, tag, **params):
    """create_rpc's sandbox, deleted at the end."""
    name = create_rpc(world, tag, **params)
    try:
        yield name
    finally:
        try:
            delete(world, name)
        except Exception:
            pass


def sh(world, name, script, *flags, input=None, timeout=120, binary=False):
    """sandboxctl exec FLAGS NAME -- sh -c SCRIPT; (code, out, err)."""
    return world.ctl("exec", *flags, name, "--", "sh", "-c", script, input=input,
                     timeout=timeout, binary=binary)


def sh_ok(world, name, script, *flags):
    code, out, err = sh(world, name, script, *flags)
    if code != 0:
        raise AssertionError("exec %r in %s: exit %d: %s %s" % (script, name, code,
                                                               out.strip()[:200], err.strip()[:300]))
    return out


def get(world, name):
    code, out, err = world.ctl("--json", "get", name)
    if code != 0:
        return None, code, err
    return json.loads(out), code, err


def poll(pred, secs, what, interval=0.1):
    return W.World.wait_until(pred, secs, what, interval)


def rpc_ok(world, method, params, timeout=60):
    msg = world.rpc(method, params, timeout)
    if "error" in msg:
        raise AssertionError("%s %s: %s" % (method, json.dumps(params)[:200], json.dumps(msg["error"])))
    return msg["result"]


def hello_tarball():
    """Path of a gzip tarball with the files of Debian's `hello` package
    (usr/bin/hello ...), made once from `apt-get download hello` and cached."""
    for cache in CACHE_DIRS:
        tgz = os.path.join(cache, "hello.tar.gz")
        if os.path.exists(tgz):
            return tgz
    debs = glob.glob("/var/cache/apt/archives/hello_*.deb")
    cache = None
    for c in CACHE_DIRS:
        try:
            os.makedirs(c, exist_ok=True)
            cache = c
            break
        except OSError:
            continue
    if cache is None:
        raise W.Skip("no writable cache dir for the hello tarball")
    if not debs:
        p = subprocess.run(["apt-get", "download", "-q", "hello"], cwd=cache,
                           capture_output=True, text=True, timeout=120)
        debs = glob.glob(os.path.join(cache, "hello_*.deb"))
        if not debs:
            raise W.Skip("apt-get download hello failed: %s" % p.stderr.strip()[:200])
    tar = subprocess.run(["dpkg-deb", "--fsys-tarfile", sorted(debs)[-1]],
                         capture_output=True, check=True).stdout
    tgz = os.path.join(cache, "hello.tar.gz")
    tmp = tgz + ".%d" % os.getpid()
    with open(tmp, "wb") as f:
        f.write(gzip.compress(tar))
    os.rename(tmp, tgz)
    return tgz


def tar_bytes(entries, compress=True):
    """A tarball built with tarfile from entries:
    (name, kind, arg) with kind file (arg bytes), dir, symlink (arg target),
    hardlink (arg target), chr (arg (major, minor))."""
    import tarfile
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as t:
        for name, kind, arg in entries:
            ti = tarfile.TarInfo(name)
            ti.mtime = int(time.time())
            if kind == "file":
                ti.size = len(arg)
                ti.mode = 0o644
                t.addfile(ti, io.BytesIO(arg))
                continue
            if kind == "dir":
                ti.type, ti.mode = tarfile.DIRTYPE, 0o755
            elif kind == "symlink":
                ti.type, ti.linkname = tarfile.SYMTYPE, arg
            elif kind == "hardlink":
                ti.type, ti.linkname = tarfile.LNKTYPE, arg
            elif kind == "chr":
                ti.type, ti.mode = tarfile.CHRTYPE, 0o666
                ti.devmajor, ti.devminor = arg
            t.addfile(ti)
    data = buf.getvalue()
    return gzip.compress(data) if compress else data


def host_git_rev(rev):
    return subprocess.run(["git", "-C", W.REPO, "rev-parse", rev], capture_output=True,
                          text=True).stdout.strip()


def userns_default(world):
    """Whether world.daemon gives a sandbox created without --userns or
    --no-userns a user namespace (daemon.info; SANDBOXD_TEST_USERNS picks
    the suite's mode)."""
    return bool(world.rpc_result("daemon.info")["capabilities"]["userns"]["default"])


def sandbox_user_ids(world, userns=None):
    """(uid, gid) of the sandbox user inside a sandbox of world.daemon with
    (userns True) or without a user namespace (None: the daemon's default):
    1000 with one, the host's sandboxd-user account without."""
    if userns is None:
        userns = userns_default(world)
    return (1000, 1000) if userns else W.plain_user()
