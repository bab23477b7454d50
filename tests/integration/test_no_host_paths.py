"""Nothing a sandbox can read names the daemon's state or run directory or
the sandbox's host-side directories (docs/SECURITY.md): not its mount
table (/proc/self/mountinfo, /proc/mounts, init's mountinfo), not its
environment, not any file under /etc or /proc/self, whether it runs with
or without a user namespace, with or without the session CA's bundle, as
the sandbox user or as root inside."""
import base64

import leaks
import world as W
from common import expect, expect_eq, poll, sandbox

# Reads what a process inside can reach and prints it, base64 per source,
# so the test greps it on the host (a needle in the script itself would
# match itself). Unreadable files are skipped: only what can be read counts.
_SCRIPT = r"""
import base64, os, sys
def show(what, data):
    sys.stdout.write("%s %s\n" % (what, base64.b64encode(data).decode()))
def read(path):
    try:
        with open(path, "rb") as f:
            return f.read(1 << 20)
    except OSError:
        return None
for p in ("/proc/self/mountinfo", "/proc/mounts", "/proc/1/mountinfo", "/proc/self/environ",
          "/proc/1/environ", "/proc/self/cmdline"):
    d = read(p)
    if d is not None:
        show(p, d)
show("env", "\n".join("%s=%s" % kv for kv in os.environ.items()).encode())
for top in ("/etc", "/proc/self"):
    for dirpath, dirs, files in os.walk(top, followlinks=False):
        if dirpath.startswith(("/proc/self/task", "/proc/self/fd", "/proc/self/map_files", "/proc/self/net")):
            dirs[:] = []
            continue
        for n in files + dirs:
            p = os.path.join(dirpath, n)
            try:
                if os.path.islink(p):
                    show(p + " ->", os.readlink(p).encode())
                    continue
            except OSError:
                continue
        for n in files:
            p = os.path.join(dirpath, n)
            if os.path.islink(p):
                continue
            if p.startswith("/proc/self/") and n in ("pagemap", "mem", "clear_refs", "attr"):
                continue
            d = read(p)
            if d is not None:
                show(p, d)
"""


def _needles(d, name):
    return [d.state_dir, d.run_dir, "sandboxes/" + name]


def _check(world, name, *flags, d=None):
    d = d or world.daemon
    code, out, err = d.ctl("exec", *flags, name, "--", "python3", "-c", _SCRIPT, timeout=180)
    expect(code == 0, "the reader inside exits 0:", code, err.strip()[:400])
    needles = _needles(d, name)
    seen = 0
    for line in out.splitlines():
        what, _sp, data = line.rpartition(" ")
        text = base64.b64decode(data).decode("utf-8", "replace")
        seen += 1
        for n in needles:
            expect(n not in text, "%s (%s) names the host path %s:" % (what, " ".join(flags) or "user", n),
                   "\n".join(l for l in text.splitlines() if n in l)[:600])
    expect(seen > 20, "the reader inside read the mount table and /etc:", seen)


def _userns_available(world):
    return bool((world.rpc_result("daemon.info").get("capabilities", {}).get("userns") or {}).get("available"))


def _run(world, tag, *args):
    """Both readers in one sandbox made with ARGS."""
    with sandbox(world, tag, *args) as name:
        _check(world, name)
        _check(world, name, "--sudo")


def test_plain_allow_all_names_no_host_path(world):
    _run(world, "nhpa", "--no-userns", "--allow-all")


def test_plain_allowlist_with_ca_names_no_host_path(world):
    _run(world, "nhpl", "--no-userns", "--allow", "api.public.test")


def test_userns_allow_all_names_no_host_path(world):
    if not _userns_available(world):
        raise W.Skip("user namespaces are not available on this host")
    _run(world, "nhua", "--userns", "--allow-all")


def test_userns_allowlist_with_ca_names_no_host_path(world):
    if not _userns_available(world):
        raise W.Skip("user namespaces are not available on this host")
    _run(world, "nhul", "--userns", "--allow", "api.public.test")


def _pool_info(d):
    return d.rpc("daemon.info", {})["result"]["warmPool"]


def test_pool_adopted_sandboxes_name_no_host_path(world):
    """A pooled session's CA bundle is bound at adoption (a deny-all pool
    serving an allowlist create) or replaced there (an allow-all pool's):
    neither mount names the pool daemon's directories."""
    for policy in ("deny-all", "allow-all"):
        world.stop_sandboxd()  # one daemon per network namespace
        d = world.start_sandboxd({"warmPool": {"size": 1, "policy": policy}}, tag="pool")
        name = world.name("nhpp")
        try:
            poll(lambda: _pool_info(d)["ready"] == _pool_info(d)["size"], 60, "the pool fills")
            msg = d.rpc("sandbox.create", {"name": name, "networkPolicy": {"allow": ["api.public.test"]}},
                        timeout=120)
            expect("error" not in msg, "create:", msg.get("error"))
            expect_eq(_pool_info(d)["adopted"], 1, "the create was served from the %s pool" % policy)
            _check(world, name, d=d)
            _check(world, name, "--sudo", d=d)
            d.rpc("sandbox.delete", {"name": name})
            leaks.check(world, name, d)
        finally:
            d.rpc("sandbox.delete", {"name": name})
            world.stop_sandboxd(d)


test_pool_adopted_sandboxes_name_no_host_path.timeout = 600

for _t in (test_plain_allow_all_names_no_host_path, test_plain_allowlist_with_ca_names_no_host_path,
           test_userns_allow_all_names_no_host_path, test_userns_allowlist_with_ca_names_no_host_path):
    _t.timeout = 420  # two walks of /etc and /proc/self on a busy machine
