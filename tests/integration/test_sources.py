"""Sources: a real tarball (Debian's hello) over HTTP and from a path, this
project's own git repository over git://, hostile tarballs and git URLs."""
import json
import os
import subprocess

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
        for dirpath, dirs, files in os.walk(root):
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
