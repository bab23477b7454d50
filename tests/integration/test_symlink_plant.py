"""Symbolic links that root inside a sandbox plants in its own files never
make sandboxd (host root) write, read or delete anything outside the
sandbox: not at resume (the /etc files sandboxd writes at every start),
fork, snapshot, export and import, live policy update or delete; on the
host runtime and on an imported one, with and without a user namespace
(docs/SECURITY.md, "Daemon file operations on sandbox-writable trees").

Every check is made from the host's side: a canary directory with known
content must stay exactly as it was, no file named like the ones sandboxd
writes may appear at the host's /, no layer or exported file may hold the
canary's secret, and each operation either succeeds without following the
link or fails with an error that names it."""
import io
import json
import os
import secrets
import shutil
import subprocess
import tarfile
import tempfile

import leaks
import world as W
from common import MANY_FILES_DISK_MIB, create, create_rpc, delete, expect, expect_eq, sh

# What the links point at, as the text of the link; "%s" is the canary.
TARGETS = (
    ("absolute", "%s"),
    ("relative", "../" * 24 + "%s"),          # enough ".." to reach / from anywhere
    ("root", "/"),
    ("proc-root", "/proc/self/root%s"),
)
ETC_FILES = ("hosts", "hostname", "resolv.conf")


def _target(fmt, canary):
    return fmt % canary.lstrip("/") if fmt.startswith("../") else (fmt % canary if "%s" in fmt else fmt)


# ---- the host side ---------------------------------------------------------------

class Canary:
    """A host directory with known content: the secret a leak would carry,
    files named as sandboxd's /etc files, a subdirectory."""

    def __init__(self, world):
        self.path = tempfile.mkdtemp(prefix="canary-", dir=world.tmp)
        os.chmod(self.path, 0o755)
        self.secret = "canary-secret-" + secrets.token_hex(12)
        for n in ETC_FILES + ("secret",):
            with open(os.path.join(self.path, n), "w") as f:
                f.write(self.secret + "\n")
        os.mkdir(os.path.join(self.path, "sub"))
        with open(os.path.join(self.path, "sub", "keep"), "w") as f:
            f.write(self.secret + "\n")
        self.root_before = self._root_names()
        self.state = self._state()

    def _state(self):
        out = {}
        for d, dirs, files in W.walk(self.path):
            for n in dirs + files:
                p = os.path.join(d, n)
                st = os.lstat(p)
                data = b""
                if os.path.isfile(p) and not os.path.islink(p):
                    with open(p, "rb") as f:
                        data = f.read()
                out[os.path.relpath(p, self.path)] = (st.st_mode, st.st_uid, st.st_size, st.st_mtime_ns, data)
        st = os.lstat(self.path)
        out["."] = (st.st_mode, st.st_uid, st.st_mtime_ns)
        return out

    @staticmethod
    def _root_names():
        return sorted(n for n in os.listdir("/") if n.lstrip(".").startswith(ETC_FILES))

    def check(self, what):
        now = self._state()
        expect(now == self.state, "%s: the host canary %s changed:" % (what, self.path),
               sorted(set(now.items()) ^ set(self.state.items()))[:6])
        expect_eq(self._root_names(), self.root_before, "%s: files sandboxd writes, at the host's /" % what)

    def close(self):
        shutil.rmtree(self.path, ignore_errors=True)


def _no_secret_below(top, secret, what):
    """No regular file below top (symlinks not followed) holds the secret."""
    for d, _dirs, files in W.walk(top):
        for n in files:
            p = os.path.join(d, n)
            if os.path.islink(p) or not os.path.isfile(p):
                continue
            with open(p, "rb") as f:
                expect(secret.encode() not in f.read(), "%s: %s holds the host canary's secret" % (what, p))


def _no_secret_in_tar(path, secret, what):
    with tarfile.open(path) as t:
        for m in t.getmembers():
            if m.isfile():
                expect(secret.encode() not in t.extractfile(m).read(),
                       "%s: member %s holds the host canary's secret" % (what, m.name))


# ---- an imported runtime with the tools the plants need --------------------------

def _ldd_paths(binary):
    out = subprocess.run(["ldd", binary], capture_output=True, text=True, check=True).stdout
    return [w for line in out.splitlines() for w in line.split() if w.startswith("/")]


def _rootfs_tar():
    buf = io.BytesIO()
    added = set()
    with tarfile.open(fileobj=buf, mode="w:gz") as t:
        def add(name, data, mode):
            parts = name.strip("/").split("/")
            for i in range(1, len(parts)):
                d = "/".join(parts[:i])
                if d not in added:
                    ti = tarfile.TarInfo("./" + d)
                    ti.type, ti.mode = tarfile.DIRTYPE, 0o755
                    t.addfile(ti)
                    added.add(d)
            if name.strip("/") in added:
                return
            ti = tarfile.TarInfo("./" + name.strip("/"))
            ti.size, ti.mode = len(data), mode
            t.addfile(ti, io.BytesIO(data))
            added.add(name.strip("/"))

        tools = {"/bin/dash": "bin/sh"}
        for tool in ("rm", "ln", "mkdir", "cat", "true", "ls", "readlink", "test"):
            tools[shutil.which(tool)] = "bin/" + tool
        for src, dest in tools.items():
            with open(os.path.realpath(src), "rb") as f:
                add(dest, f.read(), 0o755)
            for lib in _ldd_paths(src):
                with open(os.path.realpath(lib), "rb") as f:
                    add(lib, f.read(), 0o755)
        for n in ETC_FILES:
            add("etc/" + n, b"from the image\n", 0o644)
    return buf.getvalue()


def _import_runtime(world):
    rt = world.name("plantrt")
    fd, path = tempfile.mkstemp(suffix=".tar.gz", dir=world.tmp)
    with os.fdopen(fd, "wb") as f:
        f.write(_rootfs_tar())
    code, _o, err = world.ctl("runtime", "import", rt, path)
    expect_eq(code, 0, "runtime import (%s)" % err.strip())
    return rt


def _userns_or_skip(world, userns):
    if not userns:
        return []
    u = world.rpc_result("daemon.info")["capabilities"]["userns"]
    if not u.get("available"):
        raise W.Skip("user namespaces unavailable here: %s" % u.get("reason"))
    return ["--userns"]


# ---- the operations ----------------------------------------------------------------

def _root(world, name, script):
    return sh(world, name, script, "--sudo", "--cwd", "/")


def _user(world, name, script):
    # Not in /workspace: it may be a link that leads nowhere inside.
    return sh(world, name, script, "--cwd", "/")


def _resume(world, name, canary, what):
    """Stop, then resume with a command. Returns True when the sandbox runs
    again; a refusal must name the planted path."""
    code, _o, err = world.ctl("stop", name)
    expect_eq(code, 0, "%s: stop (%s)" % (what, err.strip()))
    canary.check(what + ", stopped")
    code, out, err = _user(world, name, "echo up")
    canary.check(what + ", resumed")
    if code == 0:
        expect_eq(out, "up\n", "%s: output after resume" % what)
        return True
    expect("/etc" in err and "symbolic link" in err,
           "%s: a refused resume says which path is a link:" % what, code, err.strip()[:400])
    return False


def _plant_leaves(world, name, link):
    """The files sandboxd writes, /workspace and an entry of /tmp (a tmpfs,
    which cannot itself go) as links; and a file link and a directory link
    in the sandbox user's home for the copies to meet."""
    script = ("for f in %s; do rm -f /etc/$f; ln -s '%s'/$f /etc/$f; done; "
              "rm -rf /workspace; ln -s '%s' /workspace; "
              "rm -rf /tmp/* 2>/dev/null; ln -s '%s' /tmp/link; "
              "mkdir -p /home/sandbox/w && cd /home/sandbox/w && ln -sf '%s'/secret leak && ln -sfn '%s' dir; "
              "readlink /etc/hosts /workspace") % (" ".join(ETC_FILES), link, link, link, link, link)
    code, out, err = _root(world, name, script)
    expect_eq(code, 0, "plant links to %s (%s %s)" % (link, out.strip(), err.strip()))


def _copies(world, name, canary, what):
    """fork, snapshot, export and import of a running sandbox full of links:
    none follows one (no canary content in a layer or the exported file)."""
    state = world.daemon.state_dir
    fork = world.name("plantfork")
    code, _o, err = world.ctl("fork", name, "--name", fork)
    canary.check(what + ", fork")
    expect_eq(code, 0, "%s: fork (%s)" % (what, err.strip()))
    try:
        code, out, _e = _user(world, fork, "cd /home/sandbox/w && cat leak dir/secret 2>&1; readlink leak")
        expect(canary.secret not in out, "%s: the fork reads the host canary:" % what, out)
    finally:
        delete(world, fork)
    code, out, err = world.ctl("snapshot", name)
    canary.check(what + ", snapshot")
    expect_eq(code, 0, "%s: snapshot (%s)" % (what, err.strip()))
    snap = out.strip()
    _no_secret_below(os.path.join(state, "layers"), canary.secret, what + ", layers")
    out_path = os.path.join(world.tmp, "plant-%s.tar.gz" % secrets.token_hex(4))
    imported = None
    try:
        code, _o, err = world.ctl("snapshots", "export", snap, out_path)
        canary.check(what + ", export")
        expect_eq(code, 0, "%s: export (%s)" % (what, err.strip()))
        _no_secret_in_tar(out_path, canary.secret, what + ", export")
        code, out, err = world.ctl("--json", "snapshots", "import", out_path)
        canary.check(what + ", import")
        expect_eq(code, 0, "%s: import (%s)" % (what, err.strip()))
        imported = json.loads(out)["id"]
        _no_secret_below(os.path.join(state, "layers"), canary.secret, what + ", imported layers")
    finally:
        for s in (snap, imported):
            if s:
                world.ctl("snapshots", "rm", s)
        if os.path.exists(out_path):
            os.unlink(out_path)


def _policy_update(world, name, canary, what):
    for pol in (("--allow-all",), ("--allow", "allowed.test")):
        code, _o, err = world.ctl("update", name, *pol)
        canary.check("%s, update %s" % (what, pol[0]))
        expect_eq(code, 0, "%s: update %s (%s)" % (what, pol[0], err.strip()))


def _run_leaves(world, runtime_args, userns_args, tag):
    """One persistent sandbox; for each kind of link: plant, resume, copy,
    update; delete with the links in place."""
    canary = Canary(world)
    name = None
    try:
        # A custom policy: the session has a DNS filter, an egress proxy CA
        # and a resolv.conf naming it; updates swap between policies live.
        name, _c, _o, _e = create(world, tag, "--allow", "allowed.test", "--persistent", *runtime_args,
                                  *userns_args)
        for kind, fmt in TARGETS:
            link = _target(fmt, canary.path)
            what = "%s, links (%s) at /etc/<file>, /workspace, /tmp" % (tag, kind)
            _plant_leaves(world, name, link)
            expect(_resume(world, name, canary, what), "%s: resume refused" % what)
            # The files sandboxd writes replace the links; nothing went through them.
            code, out, err = _user(world, name, "cat /etc/hostname; test -L /etc/hosts && echo link || echo file")
            expect_eq((code, out), (0, name + "\nfile\n"), "%s: /etc after resume (%s)" % (what, err.strip()))
            if kind in ("absolute", "root"):
                _copies(world, name, canary, what)
                _policy_update(world, name, canary, what)
        code, _o, err = delete(world, name)
        canary.check(tag + ", delete")
        expect_eq(code, 0, "delete (%s)" % err.strip())
        name = None
    finally:
        if name:
            delete(world, name)
        canary.close()


def _run_etc_dir(world, runtime_args, userns_args, tag, kinds=None):
    """/etc itself replaced by a link (possible where /etc holds no mount:
    an imported runtime): resume refuses with an error naming /etc, and a
    fork of the stopped sandbox and its delete follow nothing."""
    canary = Canary(world)
    try:
        for kind, fmt in TARGETS:
            if kinds and kind not in kinds:
                continue
            link = _target(fmt, canary.path)
            what = "%s, /etc -> %s" % (tag, kind)
            name, _c, _o, _e = create(world, tag, "--deny-all", "--persistent", *runtime_args, *userns_args)
            try:
                code, out, err = _root(world, name, "rm -rf /etc && ln -s '%s' /etc && readlink /etc" % link)
                if code != 0:
                    # The host runtime's /etc holds read-only binds: it cannot go.
                    expect("busy" in (out + err).lower(), "%s: plant failed oddly:" % what, out, err)
                    continue
                expect_eq(out, link + "\n", "%s: the planted link" % what)
                if not _resume(world, name, canary, what):
                    fork = world.name("etcfork")
                    code, out, err = world.ctl("fork", name, "--name", fork)
                    canary.check(what + ", fork of the stopped sandbox")
                    delete(world, fork)
            finally:
                code, _o, err = delete(world, name)
            canary.check(what + ", delete")
            expect_eq(code, 0, "%s: delete (%s)" % (what, err.strip()))
            leaks.check(world, name)
    finally:
        canary.close()


def test_links_planted_in_a_host_runtime_sandbox_are_never_followed(world):
    _run_leaves(world, [], [], "plant")
    _run_etc_dir(world, [], [], "plantetc", kinds=("absolute",))


test_links_planted_in_a_host_runtime_sandbox_are_never_followed.timeout = 300


def test_links_planted_in_a_host_runtime_userns_sandbox_are_never_followed(world):
    userns = _userns_or_skip(world, True)
    _run_leaves(world, [], userns, "plantu")
    _run_etc_dir(world, [], userns, "plantetcu", kinds=("absolute",))


test_links_planted_in_a_host_runtime_userns_sandbox_are_never_followed.timeout = 300


def test_etc_replaced_by_a_link_on_an_imported_runtime_is_never_followed(world):
    rt = _import_runtime(world)
    try:
        _run_etc_dir(world, ["--runtime", rt], [], "plantirt")
        _run_leaves(world, ["--runtime", rt], [], "plantir")
    finally:
        world.ctl("runtime", "rm", rt)


test_etc_replaced_by_a_link_on_an_imported_runtime_is_never_followed.timeout = 300


def test_etc_replaced_by_a_link_on_an_imported_runtime_with_userns_is_never_followed(world):
    userns = _userns_or_skip(world, True)
    rt = _import_runtime(world)
    try:
        _run_etc_dir(world, ["--runtime", rt], userns, "plantiru")
        _run_leaves(world, ["--runtime", rt], userns, "plantiu")
    finally:
        world.ctl("runtime", "rm", rt)


test_etc_replaced_by_a_link_on_an_imported_runtime_with_userns_is_never_followed.timeout = 300


def test_a_directory_tree_deeper_than_any_fd_limit_is_deleted_whole_and_not_copied(world):
    """Root inside nests 25000 directories (more than the daemon's fds and
    stack could hold one level each): a fork refuses the copy with an error
    naming the depth, and delete removes the tree whole, the daemon up."""
    name = create_rpc(world, "deep", resources={"diskMiB": MANY_FILES_DISK_MIB})
    try:
        code, out, err = _root(world, name, "cd /workspace && python3 -c \"import os\n"
                                            "for i in range(25000):\n os.mkdir('d'); os.chdir('d')\n"
                                            "open('bottom', 'w').write('x')\nprint('made')\"")
        expect_eq((code, out), (0, "made\n"), "make the deep tree (%s)" % err.strip()[-300:])
        fork = world.name("deepfork")
        code, _o, err = world.ctl("fork", name, "--name", fork)
        if code == 0:
            delete(world, fork)
        expect(code != 0 and "directory levels" in err, "fork of a 25000-level tree:", code, err.strip()[:300])
        expect(world.daemon.alive(), "the daemon after the fork")
    finally:
        code, _o, err = delete(world, name)
    expect_eq(code, 0, "delete (%s)" % err.strip())
    expect(world.daemon.alive(), "the daemon after the delete")
    sb_dir = os.path.join(world.daemon.state_dir, "sandboxes", name)
    expect(not os.path.lexists(sb_dir), "the deep tree is gone:", sb_dir)
    leaks.check(world, name)


test_a_directory_tree_deeper_than_any_fd_limit_is_deleted_whole_and_not_copied.timeout = 300
