"""Without a user namespace ids inside are host ids: root inside may take
only the identities the sandbox was given (root and the sandbox user), so
it cannot run as another host user and use up that user's per-uid kernel
quotas (inotify instances, message queues); and the host's page tables
(/proc/kpageflags, kpagecount, kpagecgroup) are masked (docs/SECURITY.md)."""
import world as W
from common import expect, expect_eq, sandbox, sandbox_user_ids

# Each call in a fresh child, so one that succeeds does not change the
# identity the next one starts from; prints "name:ok" or "name:ERRNO".
_PROBE = r"""
import errno, os, sys
uid, gid = int(sys.argv[1]), int(sys.argv[2])
calls = [
    ("setuid_other", lambda: os.setuid(1234)),
    ("seteuid_other", lambda: os.seteuid(1234)),
    ("setreuid_other", lambda: os.setreuid(-1, 1234)),
    ("setresuid_other", lambda: os.setresuid(1234, 1234, 1234)),
    ("setgid_other", lambda: os.setgid(1234)),
    ("setresgid_other", lambda: os.setresgid(1234, 1234, 1234)),
    ("setgroups_other", lambda: os.setgroups([1234])),
    ("setuid_user", lambda: os.setuid(uid)),
    ("setresgid_user", lambda: os.setresgid(gid, gid, gid)),
    ("seteuid_user_and_back", lambda: (os.seteuid(uid), os.seteuid(0))),
    ("setgroups_empty", lambda: os.setgroups([])),
]
if uid != 1000:
    calls.insert(0, ("setuid_1000", lambda: os.setuid(1000)))
    calls.insert(0, ("seteuid_1000", lambda: os.seteuid(1000)))
for name, fn in calls:
    pid = os.fork()
    if pid == 0:
        try:
            fn()
            os.write(1, ("%s:ok\n" % name).encode())
        except OSError as e:
            os.write(1, ("%s:%s\n" % (name, errno.errorcode.get(e.errno, e.errno))).encode())
        os._exit(0)
    os.waitpid(pid, 0)
for p in ("/proc/kpageflags", "/proc/kpagecount", "/proc/kpagecgroup"):
    try:
        with open(p, "rb") as f:
            d = f.read(4096)
        print("%s:%s" % (p, "data" if d else "empty"))
    except OSError as e:
        print("%s:%s" % (p, errno.errorcode.get(e.errno, e.errno)))
"""


def _probe(world, name, uid, gid):
    code, out, err = world.ctl("exec", "--sudo", name, "--", "python3", "-c", _PROBE, str(uid), str(gid),
                               timeout=120)
    expect_eq(code, 0, "the probe as root inside (%s)" % err.strip()[:300])
    return dict(line.split(":", 1) for line in out.splitlines() if ":" in line)


def test_plain_root_inside_takes_only_its_own_ids(world):
    uid, gid = sandbox_user_ids(world, userns=False)
    with sandbox(world, "plainids", "--no-userns", "--deny-all") as name:
        got = _probe(world, name, uid, gid)
    for call in ("setuid_other", "seteuid_other", "setreuid_other", "setresuid_other", "setgid_other",
                 "setresgid_other", "setgroups_other") + (("setuid_1000", "seteuid_1000") if uid != 1000 else ()):
        expect_eq(got.get(call), "EPERM", "%s as root inside a plain sandbox" % call)
    for call in ("setuid_user", "setresgid_user", "seteuid_user_and_back", "setgroups_empty"):
        expect_eq(got.get(call), "ok", "%s (the sandbox's own ids) as root inside" % call)
    for p in ("/proc/kpageflags", "/proc/kpagecount", "/proc/kpagecgroup"):
        expect(got.get(p) != "data", "%s is masked:" % p, got.get(p))


def test_userns_root_inside_keeps_its_ids(world):
    info = world.rpc_result("daemon.info")
    if not (info.get("capabilities", {}).get("userns") or {}).get("available"):
        raise W.Skip("user namespaces are not available on this host")
    with sandbox(world, "nsids", "--userns", "--deny-all") as name:
        got = _probe(world, name, 1000, 1000)
    for call in ("setuid_other", "setresuid_other", "setgroups_other", "setuid_user"):
        expect_eq(got.get(call), "ok", "%s as root of the sandbox's user namespace" % call)
    for p in ("/proc/kpageflags", "/proc/kpagecount", "/proc/kpagecgroup"):
        expect(got.get(p) != "data", "%s is masked:" % p, got.get(p))
