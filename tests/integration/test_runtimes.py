"""Runtimes (runtime.list/import/bootstrap/delete and create --runtime): an
imported root filesystem is what a sandbox sees, a hostile tarball writes
nothing outside its tree, a runtime in use cannot be removed, and a
bootstrapped Debian runs apt."""
import hashlib
import glob
import io
import json
import os
import shutil
import subprocess
import tarfile
import tempfile
import time
import urllib.request

import leaks
import world as W
from common import CACHE_DIRS, create, delete, expect, expect_eq, sandbox_user_ids, sh, tar_bytes


def _runtimes_dir(world, d=None):
    return os.path.join((d or world.daemon).state_dir, "runtimes")


def _runtime_names(world, d=None):
    code, out, err = (d or world.daemon).ctl("--json", "runtime", "list")
    expect_eq(code, 0, "runtime list (%s)" % err.strip())
    return [r["name"] for r in json.loads(out)["runtimes"]]


def _leftovers(world):
    """Entries of the runtimes directory that are not a runtime or a record."""
    return sorted(n for n in os.listdir(_runtimes_dir(world)) if n.startswith("."))


def _ldd_paths(binary):
    out = subprocess.run(["ldd", binary], capture_output=True, text=True, check=True).stdout
    paths = []
    for line in out.splitlines():
        for word in line.split():
            if word.startswith("/"):
                paths.append(word)
    return paths


def _tiny_rootfs_tar(marker):
    """A gzip tarball of a minimal tree: the host's dash as /bin/sh and a few
    coreutils with their shared libraries (found with ldd) at the paths
    the binaries ask for, /etc/runtime-marker, a setuid file and a device
    node (which the import must drop)."""
    buf = io.BytesIO()
    added = set()
    with tarfile.open(fileobj=buf, mode="w:gz") as t:
        def add_dir(name):
            parts = name.strip("/").split("/")
            for i in range(1, len(parts) + 1):
                d = "/".join(parts[:i])
                if d in added:
                    continue
                ti = tarfile.TarInfo("./" + d)
                ti.type, ti.mode = tarfile.DIRTYPE, 0o755
                t.addfile(ti)
                added.add(d)

        def add_file(name, data, mode=0o755):
            add_dir(os.path.dirname(name))
            if name.strip("/") in added:
                return
            ti = tarfile.TarInfo("./" + name.strip("/"))
            ti.size, ti.mode = len(data), mode
            t.addfile(ti, io.BytesIO(data))
            added.add(name.strip("/"))

        for tool, dest in (("/bin/dash", "bin/sh"), ("/usr/bin/id", "bin/id"),
                           ("/usr/bin/cat", "bin/cat"), ("/usr/bin/true", "bin/true")):
            with open(os.path.realpath(tool), "rb") as f:
                add_file(dest, f.read())
            for lib in _ldd_paths(tool):
                with open(os.path.realpath(lib), "rb") as f:
                    add_file(lib, f.read())
        add_file("etc/runtime-marker", marker.encode() + b"\n", 0o644)
        add_file("bin/suid-tool", b"#!/bin/sh\n", 0o4755)
        ti = tarfile.TarInfo("./bin/evil-null")
        ti.type, ti.mode, ti.devmajor, ti.devminor = tarfile.CHRTYPE, 0o666, 1, 3
        t.addfile(ti)
    return buf.getvalue()


def _write_tmp(world, data, suffix=".tar.gz"):
    fd, path = tempfile.mkstemp(suffix=suffix, dir=world.tmp)
    with os.fdopen(fd, "wb") as f:
        f.write(data)
    return path


def test_imported_runtime_is_the_sandbox_root_with_the_sandbox_user(world):
    rt = world.name("tiny")
    path = _write_tmp(world, _tiny_rootfs_tar(rt))
    sb = None
    try:
        code, out, err = world.ctl("runtime", "import", rt, path)
        expect_eq((code, out), (0, rt + "\n"), "runtime import exit and output (%s)" % err.strip())
        code, out, err = world.ctl("--json", "runtime", "list")
        listed = {r["name"]: r for r in json.loads(out)["runtimes"]}
        expect("host" in listed and rt in listed, "list shows host and the import:", sorted(listed))
        expect_eq(listed[rt]["source"], {"type": "tarball", "path": path, "skippedMembers": 1},
                  "the import's source (the device node skipped)")
        expect(listed[rt]["sizeBytes"] > 100000, "size of the tree", listed[rt]["sizeBytes"])

        tree = os.path.join(_runtimes_dir(world), rt)
        expect(not os.path.lexists(os.path.join(tree, "bin/evil-null")), "the device node was skipped")
        mode = os.stat(os.path.join(tree, "bin/suid-tool")).st_mode
        expect(mode & 0o6000 == 0, "setuid bit dropped: mode %o" % mode)

        sb, _c, _o, _e = create(world, "onrt", "--deny-all", "--runtime", rt)
        code, out, err = sh(world, sb, "cat /etc/runtime-marker; id -u; id -un; "
                                       "test -e /usr/bin/apt && echo host-usr || echo own-root; true")
        expect_eq((code, out), (0, "%s\n%d\nsandbox\nown-root\n" % (rt, sandbox_user_ids(world)[0])),
                  "the sandbox sees the imported tree as / (%s)" % err.strip())
        code, out, err = sh(world, sb, "id -u; pwd", "--sudo")
        expect_eq((code, out), (0, "0\n/workspace\n"), "sudo and the workspace (%s)" % err.strip())
        code, out, _e = world.ctl("--json", "get", sb)
        expect_eq(json.loads(out)["runtime"], rt, "sandbox get shows the runtime")
    finally:
        if sb:
            delete(world, sb)
        world.ctl("runtime", "rm", rt)
    leaks.check(world, sb)


def test_directory_copies_work_in_a_runtime_without_libarchive(world):
    """sandbox-init starts without libarchive (and the libxml2, ICU and
    libstdc++ it pulls in) and loads it on a thread of its own before its
    root changes: a directory copy into and out of a sandbox whose root is
    a tree with no libarchive (the tiny runtime: dash and a few coreutils)
    works, so the library came from the host, never from the sandbox's
    tree."""
    out = subprocess.run(["readelf", "-d", W.SANDBOX_INIT], capture_output=True, text=True, check=True).stdout
    needed = [line.split("[", 1)[1].rstrip("]") for line in out.splitlines() if "(NEEDED)" in line]
    expect(needed and not [n for n in needed if "archive" in n or "xml" in n or "icu" in n or "stdc++" in n],
           "sandbox-init's start-up libraries: %s" % needed)
    rt = world.name("nolibarch")
    path = _write_tmp(world, _tiny_rootfs_tar(rt))
    src = os.path.join(world.tmp, "cp-nolibarch")
    back = os.path.join(world.tmp, "cp-nolibarch-back")
    shutil.rmtree(src, ignore_errors=True)
    shutil.rmtree(back, ignore_errors=True)
    os.makedirs(os.path.join(src, "d"))
    with open(os.path.join(src, "d", "f.txt"), "w") as f:
        f.write("copied\n")
    sb = None
    try:
        code, _o, err = world.ctl("runtime", "import", rt, path)
        expect_eq(code, 0, "runtime import (%s)" % err.strip())
        sb, _c, _o, _e = create(world, "nolibarch", "--deny-all", "--runtime", rt)
        code, out, err = sh(world, sb, "test -e /usr/lib/x86_64-linux-gnu/libarchive.so.13 || "
                                       "test -e /lib/x86_64-linux-gnu/libarchive.so.13 || echo none")
        expect_eq((code, out), (0, "none\n"), "the runtime has no libarchive (%s)" % err.strip())
        world.ctl("cp", "-r", src, "%s:/workspace/tree" % sb, check=True)
        code, out, err = sh(world, sb, "cat /workspace/tree/d/f.txt")
        expect_eq((code, out), (0, "copied\n"), "the tree copied in (%s)" % err.strip())
        world.ctl("cp", "-r", "%s:/workspace/tree" % sb, back, check=True)
        with open(os.path.join(back, "d", "f.txt")) as f:
            expect_eq(f.read(), "copied\n", "the tree copied out")
    finally:
        if sb:
            delete(world, sb)
        world.ctl("runtime", "rm", rt)
    leaks.check(world, sb)


def _import_refused(world, tag, entries, names_in_error, outside=()):
    rt = world.name(tag)
    before = sorted(os.listdir(_runtimes_dir(world)))
    path = _write_tmp(world, tar_bytes(entries))
    code, _o, err = world.ctl("runtime", "import", rt, path)
    expect(code != 0, "a hostile import succeeded (%s)" % tag)
    for n in names_in_error:
        expect(n in err, "the error names %r:" % n, err.strip())
    expect(rt not in _runtime_names(world), "a refused import is not listed")
    expect_eq(sorted(os.listdir(_runtimes_dir(world))), before, "runtimes directory after a refused import")
    for p in outside:
        expect(not os.path.lexists(p), "written outside the tree:", p)


def test_runtime_import_refuses_traversal_and_writes_nothing_outside(world):
    victim = tempfile.mkdtemp(dir=world.tmp)
    os.chmod(victim, 0o777)
    escaped = os.path.join(victim, "pwned")
    # Relative to the runtimes directory, enough ".." to reach / and back down.
    up = "../" * 12 + victim.lstrip("/")
    _import_refused(world, "dotdot", [("ok", "file", b"x"), (up + "/pwned", "file", b"x")],
                    ["pwned", ".."], [escaped])
    _import_refused(world, "absolute", [(escaped, "file", b"x")], ["absolute", "pwned"], [escaped])
    # A symlink to a host directory, then a member through it: the classic
    # tar escape. Refused (and the extraction runs chrooted anyway).
    _import_refused(world, "abslink", [("link", "symlink", victim), ("link/pwned", "file", b"x")],
                    ["link/pwned"], [escaped])
    _import_refused(world, "uplink", [("up", "symlink", "../" * 12), ("up" + victim + "/pwned", "file", b"x")],
                    ["pwned"], [escaped])
    _import_refused(world, "hardlink", [("shadow", "hardlink", "/etc/shadow")], ["shadow"])
    _import_refused(world, "hardlink2", [("shadow", "hardlink", "../../../../etc/shadow")], ["shadow"])
    expect_eq(os.listdir(victim), [], "files in the victim directory")
    expect_eq(_leftovers(world), [], "temporary trees left behind")


def test_runtime_rm_refused_while_a_sandbox_or_snapshot_uses_it(world):
    rt = world.name("inuse")
    path = _write_tmp(world, _tiny_rootfs_tar(rt))
    sb = snap = None
    try:
        code, _o, err = world.ctl("runtime", "import", rt, path)
        expect_eq(code, 0, "import (%s)" % err.strip())
        code, _o, err = world.ctl("runtime", "import", rt, path)
        expect(code == 5 and "already exists" in err, "a second import under the same name:", code, err.strip())
        sb, _c, _o, _e = create(world, "user", "--deny-all", "--persistent", "--runtime", rt)
        code, out, err = world.ctl("snapshot", sb)
        expect_eq(code, 0, "snapshot (%s)" % err.strip())
        snap = out.strip()
        # Forks and sandboxes made from the snapshot stand on the same runtime.
        for how in (("fork", sb, "--name"), ("create", "--deny-all", "--snapshot", snap, "--name")):
            other = world.name("on" + how[0])
            code, _o, err = world.ctl(*(how + (other,)))
            expect_eq(code, 0, "%s (%s)" % (how[0], err.strip()))
            try:
                code, out, _e = world.ctl("--json", "get", other)
                expect_eq(json.loads(out)["runtime"], rt, "runtime of the %s" % how[0])
                code, out, err = sh(world, other, "cat /etc/runtime-marker")
                expect_eq((code, out), (0, rt + "\n"), "the %s sees the runtime (%s)" % (how[0], err.strip()))
            finally:
                delete(world, other)
            leaks.check(world, other)

        code, _o, err = world.ctl("runtime", "rm", rt)
        expect(code == 5 and "in use" in err and sb in err, "rm while a sandbox uses it:", code, err.strip())
        # The snapshot remembers its runtime: a sandbox made from it stands
        # on the same tree, and asking for another is refused.
        code, _o, err = world.ctl("create", "--name", world.name("x"), "--deny-all", "--snapshot", snap,
                                  "--runtime", "host")
        expect(code != 0 and "runtime" in err and rt in err, "snapshot on another runtime:", code, err.strip())
        expect_eq(world.rpc_result("snapshot.get", {"id": snap})["config"]["runtime"], rt, "snapshot's runtime")
        delete(world, sb)
        leaks.check(world, sb)
        sb = None
        code, _o, err = world.ctl("runtime", "rm", rt)
        expect(code == 5 and "1 snapshot" in err, "rm while a snapshot uses it:", code, err.strip())
        world.ctl("snapshots", "rm", snap)
        snap = None
        code, _o, err = world.ctl("runtime", "rm", rt)
        expect_eq(code, 0, "rm once unused (%s)" % err.strip())
        expect(rt not in _runtime_names(world), "removed runtime still listed")
        expect(not os.path.exists(os.path.join(_runtimes_dir(world), rt)), "removed runtime's tree is gone")
        expect_eq(_leftovers(world), [], "leftovers after rm")

        code, _o, err = world.ctl("runtime", "rm", "host")
        expect(code == 5 and "built in" in err, "rm host:", code, err.strip())
        code, _o, err = world.ctl("runtime", "import", "host", path)
        expect(code == 5 and "built in" in err, "import over host:", code, err.strip())
    finally:
        if sb:
            delete(world, sb)
        if snap:
            world.ctl("snapshots", "rm", snap)
        world.ctl("runtime", "rm", rt)


def test_unknown_runtime_is_not_found_naming_the_field(world):
    name = world.name("nort")
    code, _o, err = world.ctl("create", "--name", name, "--deny-all", "--runtime", "no-such-runtime")
    expect(code == 4 and "runtime" in err and "no-such-runtime" in err, "create on an unknown runtime:", code,
           err.strip())
    msg = world.rpc("sandbox.create", {"name": name, "runtime": "no-such-runtime", "networkPolicy": "deny-all"})
    data = msg.get("error", {}).get("data", {})
    expect_eq((data.get("reason"), data.get("field")), ("not_found", "runtime"), "error data")
    code, _o, err = world.ctl("runtime", "rm", "no-such-runtime")
    expect_eq(code, 4, "rm of an unknown runtime (%s)" % err.strip())
    code, _o, err = world.ctl("runtime", "import", "Bad_Name", "/nonexistent.tar")
    expect(code != 0 and "name" in err.lower(), "invalid runtime name:", code, err.strip())


def _world_mounts(world):
    """The mount points below this world's directory (the daemon's state
    and run directories are there), as this process and as the daemon see
    them. Not the machine's whole mount table: other test runs on the same
    machine mount and unmount meanwhile."""
    return (sorted(W.mounts_below(world.tmp)), sorted(W.mounts_below(world.tmp, pid=world.daemon.pid)))


def test_bootstrap_failure_is_reported_and_leaves_nothing(world):
    """debootstrap run by the daemon against the world's HTTP server (which
    has no Debian archive): it fails with debootstrap's own words, within
    seconds, and leaves no runtime, no cache entry and no mount."""
    rt = world.name("nodeb")
    mirror = world.http_url("no-debian-here")
    mounts_before = _world_mounts(world)
    code, _o, err = world.ctl("runtime", "bootstrap", rt, "--suite", "bookworm", "--mirror", mirror, timeout=300)
    expect(code != 0 and "debootstrap" in err and "Release" in err, "bootstrap from a non-mirror:", code,
           err.strip()[:400])
    expect(rt not in _runtime_names(world), "a failed bootstrap is not listed")
    expect_eq(_leftovers(world), [], "temporary trees left behind")
    cache = os.path.join(world.daemon.state_dir, "cache", "debootstrap")
    expect_eq([n for n in os.listdir(cache) if not n.endswith(".log")], [], "cache entries after a failure")
    expect_eq(_world_mounts(world), mounts_before, "mounts below the world's directory after the failure")
    code, _o, err = world.ctl("runtime", "bootstrap", rt, "--mirror", "ftp://example/debian")
    expect(code == 2 or (code != 0 and "mirror" in err), "a non-http mirror:", code, err.strip())


# ---- bootstrap from the real mirror, through a cache -----------------------------

def _apt_mirror():
    """The first deb URI of this machine's apt sources (as the daemon finds it)."""
    try:
        with open("/etc/apt/sources.list") as f:
            for line in f:
                w = line.split()
                if w and w[0] == "deb":
                    w = w[1:]
                    if w and w[0].startswith("["):
                        while w and not w[0].endswith("]"):
                            w = w[1:]
                        w = w[1:]
                    if w:
                        return w[0]
    except OSError:
        pass
    for path in sorted(glob.glob("/etc/apt/sources.list.d/*.sources")):
        with open(path) as f:
            for stanza in f.read().split("\n\n"):
                fields = {}
                for line in stanza.splitlines():
                    if ":" in line and not line.startswith((" ", "#")):
                        k, v = line.split(":", 1)
                        fields[k.strip().lower()] = v.split()
                if "deb" in fields.get("types", []) and fields.get("uris"):
                    return fields["uris"][0]
    return None


def _cache_dir():
    for c in CACHE_DIRS:
        d = os.path.join(c, "debootstrap")
        try:
            os.makedirs(d, exist_ok=True)
            return d
        except OSError:
            continue
    raise W.Skip("no writable cache directory for the debootstrap tree")


def _fill_cache(cache, suite, mirror):
    """The daemon's cache entry for suite+mirror, made on the host when
    missing: the world's sandboxd has no route to the mirror (DESIGN §8),
    so the test runs the same debootstrap in the host's namespace. The
    only traffic: to the configured apt mirror."""
    key = "%s-%s" % (suite, hashlib.sha256(mirror.encode()).hexdigest()[:16])
    tree = os.path.join(cache, key)
    if os.path.isdir(tree):
        return tree
    try:
        urllib.request.urlopen(mirror.rstrip("/") + "/dists/%s/Release" % suite, timeout=5).close()
    except Exception as e:
        raise W.Skip("the Debian mirror %s cannot be reached from this host (%s); bootstrap not tested"
                     % (mirror, e))
    tmp = os.path.join(cache, ".%s.tmp-%d" % (key, os.getpid()))
    shutil.rmtree(tmp, ignore_errors=True)
    try:
        # A private mount namespace: the proc/sys mounts debootstrap makes
        # in the target go away with it, even if it is killed.
        p = subprocess.run(["unshare", "--mount", "--propagation", "private", "--",
                            "debootstrap", "--variant=minbase", suite, tmp, mirror],
                           capture_output=True, text=True, timeout=1500)
        if p.returncode != 0:
            raise AssertionError("debootstrap on the host failed: %s" % (p.stdout + p.stderr)[-600:])
        shutil.rmtree(os.path.join(tmp, "dev"), ignore_errors=True)
        os.mkdir(os.path.join(tmp, "dev"))
        os.rename(tmp, tree)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return tree


def test_bootstrapped_bookworm_runs_apt(world):
    mirror = _apt_mirror()
    if not mirror:
        raise W.Skip("no deb mirror in this machine's apt sources")
    cache = _cache_dir()
    _fill_cache(cache, "bookworm", mirror)
    # One daemon per network namespace: this one, with the cache, replaces
    # the world's for the test (the runner starts a plain one again).
    world.stop_sandboxd()
    d = world.start_sandboxd({"runtimeCache": cache}, tag="rt")
    rt, rt2, sb = world.name("deb12"), world.name("deb12b"), None
    try:
        code, out, err = d.ctl("--json", "runtime", "bootstrap", rt, "--suite", "bookworm", timeout=600)
        expect_eq(code, 0, "bootstrap (%s)" % err.strip()[:400])
        got = json.loads(out)
        expect_eq(got["source"], {"type": "debootstrap", "suite": "bookworm", "mirror": mirror,
                                  "variant": "minbase"}, "bootstrapped runtime's source (default mirror)")
        expect_eq(got["cached"], True, "the tree came from the cache")
        t0 = time.monotonic()
        code, out, err = d.ctl("--json", "runtime", "bootstrap", rt2, timeout=600)
        took = time.monotonic() - t0
        expect(code == 0 and took < 20, "a second bootstrap is quick:", code, "%.1fs" % took, err.strip())

        sb = world.name("apt")
        code, _o, err = d.ctl("create", "--name", sb, "--deny-all", "--runtime", rt, timeout=180)
        expect_eq(code, 0, "create on the bootstrapped runtime (%s)" % err.strip())
        code, out, err = d.ctl("exec", sb, "--", "apt", "--version")
        expect(code == 0 and out.startswith("apt 2."), "apt --version:", code, out.strip(), err.strip())
        code, out, err = d.ctl("exec", sb, "--", "sh", "-c", "id -un; . /etc/os-release; echo $VERSION_CODENAME")
        expect_eq((code, out), (0, "sandbox\nbookworm\n"), "user and release (%s)" % err.strip())
        code, _o, err = d.ctl("runtime", "rm", rt)
        expect_eq(code, 5, "rm while in use (%s)" % err.strip())
        code, _o, err = d.ctl("rm", sb)
        expect_eq(code, 0, "rm the sandbox (%s)" % err.strip())
        leaks.check(world, sb, daemon=d)
        sb = None
    finally:
        if sb:
            d.ctl("rm", sb)
        d.ctl("runtime", "rm", rt)
        d.ctl("runtime", "rm", rt2)
        world.stop_sandboxd(d)


test_bootstrapped_bookworm_runs_apt.timeout = 1800


def test_runtime_import_resolves_an_absolute_hardlink_in_the_tree(world):
    rt = world.name("abshl")
    entries = [("usr", "dir", None), ("usr/bin", "dir", None),
               ("usr/bin/perlbug", "file", b"perlbug\n"),
               ("usr/bin/perlthanks", "hardlink", "/usr/bin/perlbug")]
    path = _write_tmp(world, tar_bytes(entries))
    code, out, err = world.ctl("runtime", "import", rt, path)
    try:
        expect_eq((code, out), (0, rt + "\n"), "runtime import with an absolute hardlink (%s)" % err.strip())
        tree = os.path.join(_runtimes_dir(world), rt)
        a = os.stat(os.path.join(tree, "usr/bin/perlbug"))
        b = os.stat(os.path.join(tree, "usr/bin/perlthanks"))
        expect_eq((a.st_ino, a.st_nlink), (b.st_ino, 2), "perlthanks links perlbug inside the tree")
    finally:
        if code == 0:
            world.ctl("runtime", "delete", rt)
    # A hardlink whose target is not in the archive still fails.
    _import_refused(world, "abshl-out", [("shadow", "hardlink", "/etc/shadow")], ["shadow"])
