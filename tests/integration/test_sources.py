"""Sources: a real tarball (Debian's hello) over HTTP and from a path, this
project's own git repository over git://, hostile tarballs and git URLs."""
import json
import os
import subprocess
import tempfile

import leaks
import world as W
from common import (create, delete, expect, expect_eq, hello_tarball, sandbox, sh, sh_ok,
                    tar_bytes)


def _hello_runs(world, name):
    out = sh_ok(world, name, "/workspace/usr/bin/hello")
    expect_eq(out.strip(), "Hello, world!", "hello output")


def test_tarball_over_http_runs_hello(world):
    tgz = hello_tarball()
    with open(tgz, "rb") as f:
        url = world.add_http_file("hello.tar.gz", f.read())
    with sandbox(world, "tar-http", "--deny-all", "--tarball", url) as name:
        _hello_runs(world, name)


def test_tarball_from_local_path_runs_hello(world):
    tgz = hello_tarball()
    with sandbox(world, "tar-path", "--deny-all", "--tarball", tgz) as name:
        _hello_runs(world, name)


def _git_rev(world, rev):
    return subprocess.run(["git", "-C", world.git_repo, "rev-parse", rev],
                          capture_output=True, text=True).stdout.strip()


def test_git_source_at_head(world):
    with sandbox(world, "git-head", "--deny-all", "--git", world.git_url) as name:
        out = sh_ok(world, name, "cd /workspace && git log -1 --format=%H")
        expect_eq(out.strip(), _git_rev(world, "HEAD"), "commit in /workspace")
        sh_ok(world, name, "test -f /workspace/Makefile && test -d /workspace/docs")


def test_git_source_at_revision(world):
    rev = _git_rev(world, "HEAD~1")
    if not rev:
        raise W.Skip("repository has a single commit")
    with sandbox(world, "git-rev", "--deny-all", "--git", world.git_url,
                 "--revision", rev) as name:
        out = sh_ok(world, name, "cd /workspace && git log -1 --format=%H")
        expect_eq(out.strip(), rev, "commit in /workspace")


def test_git_source_by_name_through_world_dns(world):
    url = "git://git.test/sandboxd.git"
    with sandbox(world, "git-dns", "--deny-all", "--git", url) as name:
        out = sh_ok(world, name, "cd /workspace && git rev-parse HEAD")
        expect_eq(out.strip(), _git_rev(world, "HEAD"), "commit in /workspace")


# ------------------------------------------------------------ hostile tarballs

HOSTILE = {
    "dotdot": [("../x-dotdot", "file", b"pwned\n")],
    "absolute": [("/abs-x/x", "file", b"pwned\n")],
    "symlink-dir": [("lnk", "symlink", "../../../../../../../.."),
                    ("lnk/tmp/sbx-lnk-f", "file", b"pwned\n")],
    "hardlink-out": None,  # built per run: it needs the victim's path
    "device": [("dev-null-again", "chr", (1, 3)), ("kmem", "chr", (1, 2))],
}

MARKERS = ("x-dotdot", "abs-x", "sbx-lnk-f", "kmem")


def _hardlink_entries(victim):
    entries = []
    targets = ["../" * depth + "victim" for depth in range(1, 7)] + [victim]
    for i, t in enumerate(targets):
        entries += [("h%d" % i, "hardlink", t), ("h%d" % i, "file", b"rewritten\n")]
    return entries


def _host_traces(roots):
    found = []
    for root in roots:
        for dirpath, dirs, files in W.walk(root):
            if root == "/tmp" and dirpath != "/tmp":
                dirs[:] = []
                continue
            if "/sandboxes/" in dirpath + "/" and "/workspace" in dirpath:
                continue
            for f in files + dirs:
                if f in MARKERS:
                    found.append(os.path.join(dirpath, f))
    return found


def _hostile(world, key):
    d = world.daemon
    victim = os.path.join(d.state_dir, "victim")
    os.makedirs(d.state_dir, exist_ok=True)
    with open(victim, "w") as f:
        f.write("original\n")
    data = tar_bytes(HOSTILE[key] or _hardlink_entries(victim))
    path = os.path.join(world.tmp, "hostile-%s.tar.gz" % key)
    with open(path, "wb") as f:
        f.write(data)
    name, code, out, err = create(world, "evil-" + key, "--deny-all", "--tarball", path, check=False)
    try:
        if code != 0:
            expect("source_failed" in err,
                   "refused create should say the source failed:", err.strip()[:300])
        else:
            # Inside: nothing outside /workspace; no device node anywhere in it.
            names = " -o ".join("-name %s" % m for m in MARKERS)
            script = ("find / \\( -path /proc -o -path /sys -o -path /usr -o -path /workspace "
                      "-o -path /dev \\) -prune -o \\( %s \\) -print 2>/dev/null; "
                      "find /workspace \\( -type c -o -type b \\) 2>/dev/null; true" % names)
            c2, o2, e2 = sh(world, name, script, "--sudo")
            expect(c2 == 0 or o2.strip() == "", "probe inside failed:", c2, e2)
            expect_eq(o2.strip(), "", "entries outside /workspace or device nodes inside")
        with open(victim) as f:
            expect_eq(f.read(), "original\n", "host file next to the state dir")
        traces = _host_traces([world.tmp, "/tmp"])
        expect(not traces, "hostile tarball wrote on the host:", traces)
        for p in ("/x-dotdot", "/abs-x", "/tmp/sbx-lnk-f"):
            expect(not os.path.exists(p), "hostile tarball wrote", p)
    finally:
        if code == 0:
            delete(world, name)
        os.unlink(victim)
    leaks.check(world, name)


def test_hostile_tarball_dotdot_stays_inside(world):
    _hostile(world, "dotdot")


def test_hostile_tarball_absolute_path_stays_inside(world):
    _hostile(world, "absolute")


def test_hostile_tarball_symlink_then_file_stays_inside(world):
    _hostile(world, "symlink-dir")


def test_hostile_tarball_hardlink_out_stays_inside(world):
    _hostile(world, "hardlink-out")


def test_hostile_tarball_device_node_not_created(world):
    _hostile(world, "device")


# ------------------------------------------------------------ hostile git URLs

BAD_GIT_URLS = [
    "ext::sh -c touch% /tmp/p",
    "--upload-pack=touch /tmp/p",
    "ssh://-oProxyCommand=touch%20/tmp/p/x",
]


def _hostile_git(world, url):
    marker = "/tmp/p"
    existed = os.path.exists(marker)
    # Through the CLI and through the raw API (the CLI might refuse first).
    name, code, out, err = create(world, "evil-git", "--deny-all", "--git", url, check=False)
    if code == 0:
        delete(world, name)
    expect(code != 0, "create with git URL %r should fail" % url)
    msg = world.rpc("sandbox.create", {"name": world.name("evil-git"), "networkPolicy": "deny-all",
                                       "source": {"type": "git", "url": url}})
    expect("error" in msg, "sandbox.create with git URL %r should fail: %s" % (url, json.dumps(msg)[:300]))
    e = msg["error"]
    data = e.get("data") or {}
    expect(data.get("field") == "source.url" or "source.url" in e.get("message", ""),
           "error should name source.url:", json.dumps(e))
    expect(existed or not os.path.exists(marker), "a hostile git URL ran a command (/tmp/p exists)")
    # The daemon runs in the world host's mount namespace view of /tmp too.
    r = world.run_in_host(["test", "-e", marker])
    expect(existed or r.returncode != 0, "a hostile git URL ran a command in the world host")


def test_git_url_ext_transport_refused(world):
    _hostile_git(world, BAD_GIT_URLS[0])


def test_git_url_upload_pack_option_refused(world):
    _hostile_git(world, BAD_GIT_URLS[1])


def test_git_url_ssh_proxycommand_refused(world):
    _hostile_git(world, BAD_GIT_URLS[2])

# ------------------------------------------- local sources (localSourceRoots)

GIT = ["git", "-c", "user.name=t", "-c", "user.email=t@example.test", "-c", "init.defaultBranch=main"]


def _git(*args, cwd=None):
    subprocess.run(GIT + list(args), cwd=cwd, check=True, capture_output=True)


def _local_repos(world):
    """Under world.tmp (a listed root): `secret`, a repository whose files
    nobody may get through another one, and `plain`, a bare repository of
    its own. Returns (top, secret_git_dir)."""
    top = os.path.join(world.tmp, "local-src")
    if os.path.isdir(top):
        return top, os.path.join(top, "secret", ".git")
    os.makedirs(top)
    secret = os.path.join(top, "secret")
    _git("init", "-q", secret)
    with open(os.path.join(secret, "SECRET.txt"), "w") as f:
        f.write("secret-content\n")
    _git("add", "SECRET.txt", cwd=secret)
    _git("commit", "-q", "-m", "secret", cwd=secret)
    work = os.path.join(top, "plain-work")
    _git("init", "-q", work)
    with open(os.path.join(work, "PLAIN.txt"), "w") as f:
        f.write("plain-content\n")
    _git("add", "PLAIN.txt", cwd=work)
    _git("commit", "-q", "-m", "plain", cwd=work)
    _git("clone", "-q", "--bare", work, os.path.join(top, "plain.git"))
    return top, os.path.join(secret, ".git")


def _bare_made_of(top, name, secret_git, link):
    """A bare repository `name` whose `link` (objects, refs, ...) is a
    symlink to the secret repository's."""
    d = os.path.join(top, name)
    _git("clone", "-q", "--bare", os.path.join(top, "plain-work"), d)
    target = os.path.join(d, link)
    if os.path.isdir(target) and not os.path.islink(target):
        subprocess.run(["rm", "-rf", target], check=True)
    elif os.path.lexists(target):
        os.unlink(target)
    os.symlink(os.path.join(secret_git, link), target)
    return d


def _local_refused(world, tag, says, kind, where):
    """sandbox.create with a git (file:// URL) or tarball (path, or file://
    URL) source must fail naming the source and saying `says`. Through the
    API: sandboxctl makes tarball paths canonical before sending them."""
    if kind == "git":
        source = {"type": "git", "url": where}
    else:
        source = {"type": "tarball", ("url" if where.startswith("file://") else "path"): where}
    name = world.name(tag)
    msg = world.rpc("sandbox.create", {"name": name, "networkPolicy": "deny-all", "source": source}, timeout=180)
    if "error" not in msg:
        _c, o, _e = sh(world, name, "cat /workspace/SECRET.txt 2>/dev/null; ls /workspace")
        delete(world, name)
        raise AssertionError("%s: a local source was used (workspace: %s)" % (tag, o.strip()[:200]))
    e = msg["error"]
    data = e.get("data") or {}
    expect(data.get("reason") == "source_failed" or data.get("field", "").startswith("source"),
           "%s: the create failed on the source:" % tag, json.dumps(e)[:400])
    expect(says in e.get("message", ""), "%s: the error says %r:" % (tag, says), e.get("message", "")[:400])
    leaks.check(world, name)


def test_local_git_source_under_a_root_clones(world):
    top, _secret = _local_repos(world)
    with sandbox(world, "local-git", "--deny-all", "--git", "file://" + os.path.join(top, "plain.git")) as name:
        out = sh_ok(world, name, "cat /workspace/PLAIN.txt; cd /workspace && git remote get-url origin")
        expect_eq(out, "plain-content\nfile://%s\n" % os.path.join(top, "plain.git"), "files and origin")


def test_local_git_source_with_symlinked_objects_is_refused(world):
    top, secret = _local_repos(world)
    d = _bare_made_of(top, "objects-link.git", secret, "objects")
    _local_refused(world, "lnk-obj", "symlink", "git", "file://" + d)


def test_local_git_source_with_symlinked_refs_is_refused(world):
    top, secret = _local_repos(world)
    d = _bare_made_of(top, "refs-link.git", secret, "refs")
    _local_refused(world, "lnk-refs", "symlink", "git", "file://" + d)


def test_local_git_source_with_symlinked_head_or_packed_refs_is_refused(world):
    top, secret = _local_repos(world)
    subprocess.run(GIT + ["-C", secret, "pack-refs", "--all"], check=True, capture_output=True)
    for link in ("HEAD", "packed-refs", "config"):
        d = _bare_made_of(top, "%s-link.git" % link.lower(), secret, link)
        _local_refused(world, "lnk-" + link.lower(), "symlink", "git", "file://" + d)


def test_local_git_source_with_alternates_is_refused(world):
    top, secret = _local_repos(world)
    d = os.path.join(top, "alternates.git")
    _git("init", "-q", "--bare", d)
    with open(os.path.join(d, "objects", "info", "alternates"), "w") as f:
        f.write(os.path.join(secret, "objects") + "\n")
    rev = subprocess.run(["git", "-C", secret, "rev-parse", "HEAD"], capture_output=True, text=True).stdout.strip()
    with open(os.path.join(d, "refs", "heads", "main"), "w") as f:
        f.write(rev + "\n")
    # git itself would check the secret out through the alternates:
    out = subprocess.run(["git", "-C", d, "show", "HEAD:SECRET.txt"], capture_output=True, text=True).stdout
    expect_eq(out, "secret-content\n", "the alternates repository reads the secret with git")
    _local_refused(world, "alt", "alternates", "git", "file://" + d)


def test_local_git_source_with_gitfile_pointing_elsewhere_is_refused(world):
    top, secret = _local_repos(world)
    d = os.path.join(top, "gitfile")
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, ".git"), "w") as f:
        f.write("gitdir: %s\n" % secret)
    _local_refused(world, "gitfile", "pointing elsewhere", "git", "file://" + d)


def test_local_sources_outside_the_roots_are_refused(world):
    outside = tempfile.mkdtemp(prefix="sbx-outside-", dir="/var/tmp")
    try:
        os.chmod(outside, 0o755)
        _git("init", "-q", "--bare", os.path.join(outside, "r.git"))
        tgz = os.path.join(outside, "t.tar.gz")
        with open(tgz, "wb") as f:
            f.write(tar_bytes([("OUTSIDE.txt", "file", b"x\n")]))
        _local_refused(world, "out-git", "localSourceRoots", "git", "file://" + os.path.join(outside, "r.git"))
        _local_refused(world, "out-tar", "localSourceRoots", "tarball", tgz)
        _local_refused(world, "out-tarurl", "localSourceRoots", "tarball", "file://" + tgz)
        # A path that only looks as if it were under a root.
        _local_refused(world, "dotdot", "'..'", "tarball", os.path.join(world.tmp, "..", outside.lstrip("/"),
                                                                          "t.tar.gz"))
    finally:
        subprocess.run(["rm", "-rf", outside], check=True)


def test_local_sources_through_a_symlinked_component_are_refused(world):
    top, secret = _local_repos(world)
    # A directory under the root that is a symlink to a repository outside
    # the roots, and one to the root's own repository: both refused.
    outside = tempfile.mkdtemp(prefix="sbx-outside-", dir="/var/tmp")
    try:
        os.chmod(outside, 0o755)
        _git("clone", "-q", "--bare", os.path.join(top, "plain-work"), os.path.join(outside, "r.git"))
        tgz = os.path.join(outside, "t.tar.gz")
        with open(tgz, "wb") as f:
            f.write(tar_bytes([("OUTSIDE.txt", "file", b"x\n")]))
        link = os.path.join(top, "outside-link")
        if not os.path.lexists(link):
            os.symlink(outside, link)
        inner = os.path.join(top, "inner-link")
        if not os.path.lexists(inner):
            os.symlink(os.path.join(top, "plain.git"), inner)
        _local_refused(world, "lnk-dir-git", "symlink", "git", "file://" + os.path.join(link, "r.git"))
        _local_refused(world, "lnk-dir-tar", "symlink", "tarball", os.path.join(link, "t.tar.gz"))
        _local_refused(world, "lnk-inner", "symlink", "git", "file://" + inner)
    finally:
        subprocess.run(["rm", "-rf", outside], check=True)


def test_local_sources_are_refused_by_default(world):
    top, _secret = _local_repos(world)
    tgz = hello_tarball()
    world.stop_sandboxd()
    d = world.start_sandboxd({"localSourceRoots": None}, tag="noroots")
    try:
        info = d.rpc_result("daemon.info", {})
        expect(info is not None, "daemon.info")
        _local_refused(world, "dflt-git", "localSourceRoots", "git", "file://" + os.path.join(top, "plain.git"))
        _local_refused(world, "dflt-tar", "localSourceRoots", "tarball", tgz)
    finally:
        world.stop_sandboxd(d)
        world.start_sandboxd()


def test_tarball_absolute_hardlink_inside_the_archive_is_resolved_in_the_root(world):
    # Tarballs of a whole root carry hardlinks such as
    # usr/bin/perlthanks -> /usr/bin/perlbug: a member of the same archive.
    data = tar_bytes([("usr/bin/perlbug", "file", b"#!/bin/sh\necho perlbug\n"),
                      ("usr/bin/perlthanks", "hardlink", "/usr/bin/perlbug")])
    path = os.path.join(world.tmp, "abs-hardlink.tar.gz")
    with open(path, "wb") as f:
        f.write(data)
    name, code, _out, err = create(world, "abshl", "--deny-all", "--tarball", path, check=False)
    try:
        expect_eq(code, 0, "create from a tarball with an absolute hardlink (%s)" % err.strip()[:300])
        out = sh_ok(world, name, "cd /workspace/usr/bin && stat -c '%i %h' perlbug perlthanks && cat perlthanks")
        lines = out.splitlines()
        expect_eq(lines[0], lines[1], "perlthanks is a hardlink of perlbug (inode, link count)")
        expect_eq(lines[0].split()[1], "2", "link count")
        expect_eq(lines[3], "echo perlbug", "content through the link")
    finally:
        if code == 0:
            delete(world, name)


def test_git_source_depth_1_has_one_commit_and_full_has_all(world):
    total = int(subprocess.run(["git", "-C", world.git_repo, "rev-list", "--count", "HEAD"],
                               capture_output=True, text=True).stdout.strip())
    expect(total > 1, "the world's repository has more than one commit:", total)
    with sandbox(world, "git-shallow", "--deny-all", "--git", world.git_url, "--depth", "1") as name:
        out = sh_ok(world, name, "cd /workspace && git rev-list --count HEAD && git rev-parse HEAD")
        expect_eq(out.split(), ["1", _git_rev(world, "HEAD")], "depth 1: one commit, the remote HEAD")
        expect_eq(sh_ok(world, name, "cd /workspace && git config --get core.hooksPath || true").strip(), "",
                  "no hook setting left in the clone")
    with sandbox(world, "git-full", "--deny-all", "--git", world.git_url) as name:
        out = sh_ok(world, name, "cd /workspace && git rev-list --count HEAD")
        expect_eq(int(out.strip()), total, "a full clone has every commit")


def test_git_source_depth_with_revision(world):
    with sandbox(world, "git-shallow-rev", "--deny-all", "--git", world.git_url, "--depth", "2",
                 "--revision", "HEAD") as name:
        out = sh_ok(world, name, "cd /workspace && git rev-list --count HEAD && git rev-parse HEAD")
        # Depth 2 holds the revision and its parents: two of them when the
        # revision is a merge.
        parents = subprocess.run(["git", "-C", world.git_repo, "rev-parse", "HEAD^@"],
                                 capture_output=True, text=True).stdout.split()
        expect_eq(out.split(), [str(1 + len(parents)), _git_rev(world, "HEAD")], "depth 2 at a revision")


def test_git_source_depth_still_refuses_hostile_urls(world):
    for url in ("ext::sh -c touch% /tmp/pwned-ext", "fd::3", "ssh://-oProxyCommand=touch%20/tmp/x/y",
                "git://-upload-pack=x/y", "host:path", "git://169.254.169.254/x.git",
                "http://127.0.0.1/x.git"):
        name, code, _o, err = create(world, "git-evil", "--deny-all", "--git", url, "--depth", "1", check=False)
        if code == 0:
            delete(world, name)
        expect(code != 0 and ("source_failed" in err or "source.url" in err),
               "a hostile URL with depth should be refused:", url, err)
    expect(not os.path.exists("/tmp/pwned-ext"), "ext:: ran a command")
