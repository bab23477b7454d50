"""Attacks on containers and their helper from root inside a sandbox
(docs/SECURITY.md §3.17): the helper (sandbox-ctrd, init's first child)
and init (PID 1) hold capabilities and no seccomp filter; a command, root inside, must
reach neither (ptrace, /proc/PID/mem, pidfd_getfd, process_vm_writev),
nor another mount namespace (setns), nor make the helper build something
it was not asked for."""
import base64
import json

import leaks
from common import expect, expect_eq, rpc_ok, sandbox_rpc
from test_containers import _daemon, _modes

PROBE = r'''
import ctypes, os, json, errno, sys
l = ctypes.CDLL(None, use_errno=True)
def err(r):
    return "ok" if r >= 0 else errno.errorcode.get(ctypes.get_errno(), str(ctypes.get_errno()))
out = {"comm1": open("/proc/1/comm").read().strip()}
for pid in [int(a) for a in sys.argv[1:]] or (1, 2):
    # PTRACE_ATTACH 16, PTRACE_SEIZE 0x4206
    out["attach%d" % pid] = err(l.ptrace(16, pid, None, None))
    out["seize%d" % pid] = err(l.ptrace(0x4206, pid, None, None))
    try:
        fd = os.open("/proc/%d/mem" % pid, os.O_RDWR); os.close(fd); out["mem%d" % pid] = "ok"
    except OSError as e:
        out["mem%d" % pid] = errno.errorcode[e.errno]
    try:
        out["root%d" % pid] = str(os.listdir("/proc/%d/root/" % pid)[:1])
    except OSError as e:
        out["root%d" % pid] = errno.errorcode[e.errno]
    try:
        out["fds%d" % pid] = str(len(os.listdir("/proc/%d/fd" % pid)))
    except OSError as e:
        out["fds%d" % pid] = errno.errorcode[e.errno]
    pfd = l.syscall(434, pid, 0)  # pidfd_open
    got = []
    for n in range(0, 12):
        r = l.syscall(438, pfd, n, 0)  # pidfd_getfd
        got.append(err(r))
    out["getfd%d" % pid] = sorted(set(got))
    buf = ctypes.create_string_buffer(8)
    class iov(ctypes.Structure):
        _fields_ = [("b", ctypes.c_void_p), ("n", ctypes.c_size_t)]
    a = iov(ctypes.addressof(buf), 8)
    out["vmw%d" % pid] = err(l.syscall(311, pid, ctypes.byref(a), 1, ctypes.byref(a), 1, 0))
    try:
        fd = os.open("/proc/%d/ns/mnt" % pid, os.O_RDONLY)
        out["setns%d" % pid] = err(l.setns(fd, 0))
    except OSError as e:
        out["setns%d" % pid] = errno.errorcode[e.errno]
print(json.dumps(out, sort_keys=True))
'''


def _cmd(world, name, script, ctr=None, args=()):
    p = {"sandbox": name, "cmd": "python3", "args": ["-c", script] + list(args), "sudo": True, "detached": True}
    if ctr:
        p["container"] = ctr
    cmd = rpc_ok(world, "command.run", p, 120)["cmdId"]
    w = rpc_ok(world, "command.wait", {"cmdId": cmd}, 120)
    logs = rpc_ok(world, "command.logs", {"cmdId": cmd})
    dec = lambda k: base64.b64decode(logs.get(k) or "").decode(errors="replace")
    return w.get("exitCode"), dec("stdout"), dec("stderr")


def test_root_inside_reaches_neither_init_nor_the_container_helper(world):
    _d, _root = _daemon(world, "catk")
    try:
        for userns in _modes():
            with sandbox_rpc(world, "catk", userns=userns, networkPolicy="deny-all") as name:
                rpc_ok(world, "container.create", {"sandbox": name, "name": "c", "runtime": "host"})
                rpc_ok(world, "container.create", {"sandbox": name, "name": "s", "runtime": "host",
                                                   "pidNamespace": "sandbox"})
                # c has a PID namespace of its own: its PID 1 is its
                # reaper (sandbox-ctrinit), the sandbox's init and helper
                # are not in it; s shares the sandbox's. The helper's PID
                # is found by its name (PID 2 today, as SECURITY.md says).
                code, out, err = _cmd(world, name, "import os\n"
                                      "print(' '.join(p for p in os.listdir('/proc') if p.isdigit() and "
                                      "open('/proc/%s/comm' % p).read().strip() == 'sandbox-ctrd'))\n")
                expect(code == 0 and len(out.split()) == 1, "one sandbox-ctrd in the sandbox (%s %s)" % (out, err))
                ctrd = int(out.split()[0])
                for where, pids, comm1 in ((None, (1, ctrd), "memfd:sandbox-i"), ("c", (1,), "sandbox-ctrinit"),
                                           ("s", (1, ctrd), "memfd:sandbox-i")):
                    code, out, err = _cmd(world, name, PROBE, where, [str(p) for p in pids])
                    print("userns=%s where=%s: %s %s" % (userns, where, out, err[-500:]))
                    expect_eq(code, 0, "probe ran (%s)" % err[-300:])
                    got = json.loads(out)
                    expect_eq(got["comm1"], comm1, "PID 1 seen from %s" % where)
                    for pid in pids:
                        for k in ("attach", "seize", "vmw", "setns"):
                            expect_eq(got["%s%d" % (k, pid)] != "ok", True, "%s of pid %d refused: %s" % (k, pid, got))
                        expect(got["mem%d" % pid] != "ok", "/proc/%d/mem not writable" % pid, got)
                        expect_eq(got["getfd%d" % pid], ["EPERM"] if got["getfd%d" % pid] != ["EBADF"] else ["EBADF"],
                                  "pidfd_getfd of pid %d" % pid)
                        expect("ok" not in got["getfd%d" % pid], "no fd of pid %d taken" % pid, got)
            leaks.check(world, name)
        expect_eq(world.stop_sandboxd(), 0, "the daemon's exit status")
    finally:
        world.stop_sandboxd()


def test_a_symlink_in_the_sandbox_etc_is_not_followed_by_the_helper(world):
    """The helper clones the sandbox's /etc/hosts and /etc/resolv.conf into
    each container; root inside may replace them with links to what only
    the helper can open (a descriptor of init: /proc/1/fd/N) or anywhere
    else. Neither is followed: the container keeps its image's file."""
    from test_containers import _import
    _d, _root = _daemon(world, "clnk")
    try:
        for userns in _modes():
            rt = _import(world, "clnk")
            with sandbox_rpc(world, "clnk", userns=userns, networkPolicy="deny-all") as name:
                code, out, err = _cmd(world, name, "import os\n"
                                      "try:\n    os.stat('/proc/1/fd/0'); print('open')\n"
                                      "except OSError as e:\n    print(e.errno)\n"
                                      "open('/root-only', 'w').write('sandbox-secret\\n')\n"
                                      "os.chmod('/root-only', 0o600)\n"
                                      "os.unlink('/etc/hosts'); os.symlink('/proc/1/fd/0', '/etc/hosts')\n"
                                      "os.unlink('/etc/resolv.conf'); os.symlink('/root-only', '/etc/resolv.conf')\n")
                expect_eq((code, out), (0, "13\n"), "root inside may not reach init's descriptors (%s)" % err)
                rpc_ok(world, "container.create", {"sandbox": name, "name": "c", "runtime": rt})
                p = {"sandbox": name, "container": "c", "cmd": "/bin/sh", "sudo": True, "detached": True,
                     "args": ["-c", "for f in /etc/hosts /etc/resolv.conf; do "
                                    "if [ -L $f ] || { [ -e $f ] && [ ! -f $f ]; }; then echo \"$f: not a file\"; "
                                    "elif [ -f $f ]; then cat $f; fi; done"]}
                cmd = rpc_ok(world, "command.run", p, 120)["cmdId"]
                w = rpc_ok(world, "command.wait", {"cmdId": cmd}, 120)
                logs = rpc_ok(world, "command.logs", {"cmdId": cmd})
                out = base64.b64decode(logs.get("stdout") or "").decode(errors="replace")
                err = base64.b64decode(logs.get("stderr") or "").decode(errors="replace")
                expect_eq(w.get("exitCode"), 0, "the container's command (%s %s)" % (out, err))
                expect("sandbox-secret" not in out and "not a file" not in out,
                       "the links were not followed into the container", out + err)
            leaks.check(world, name)
        expect_eq(world.stop_sandboxd(), 0, "the daemon's exit status")
    finally:
        world.stop_sandboxd()


def test_root_inside_leaves_no_setuid_root_program_in_a_host_mount(world):
    """Without a user namespace root inside is host root on the host's
    files: a writable host mount let it leave a setuid-root program in a
    host directory (04755, uid 0). Such a mount is refused naming
    mounts[i].readOnly; with a user namespace root inside is no host user
    and what it makes there is not host root's."""
    import os
    from test_containers import _run
    _d, root = _daemon(world, "csuid")
    try:
        for userns in _modes():
            d = os.path.join(root, "w%d" % userns)
            os.makedirs(d)
            os.chmod(d, 0o777)  # as the kubelet makes an emptyDir
            with sandbox_rpc(world, "csuid", userns=userns, networkPolicy="deny-all") as name:
                m = world.rpc("container.create", {"sandbox": name, "name": "c", "runtime": "host",
                                                   "mounts": [{"source": d, "destination": "/w"}]}, 120)
                if not userns:
                    expect("error" in m and "mounts[0].readOnly" in m["error"]["message"],
                           "a writable host mount without a user namespace is refused naming it", m)
                    expect_eq(m["error"]["data"].get("reason"), "permission_denied", "the refusal's reason")
                    rpc_ok(world, "container.create", {"sandbox": name, "name": "c", "runtime": "host",
                                                       "mounts": [{"source": d, "destination": "/w",
                                                                   "readOnly": True}]})
                else:
                    expect("result" in m, "a writable host mount in a user namespace", m)
                _code, out, err = _run(world, name, "c", "cp /bin/true /w/x; chmod 4755 /w/x; ls -ln /w", sudo=True)
                x = os.path.join(d, "x")
                st = os.stat(x) if os.path.exists(x) else None
                expect(st is None or not (st.st_uid == 0 and st.st_mode & 0o4000),
                       "no setuid-root program on the host (%s %s)" % (out, err), st)
            leaks.check(world, name)
        expect_eq(world.stop_sandboxd(), 0, "the daemon's exit status")
    finally:
        world.stop_sandboxd()


def test_an_older_record_with_a_writable_host_mount_without_userns_is_attached_read_only(world):
    """A sandbox recorded before writable host mounts were refused
    without a user namespace gets its mounts read-only at its next start
    (never the write access the rule now refuses)."""
    import os
    import signal
    from common import sh
    d, root = _daemon(world, "crec")
    try:
        path = os.path.join(root, "termination-log")
        open(path, "w").close()
        os.chmod(path, 0o666)
        mounts = [{"source": path, "destination": "/tmp/termination-log", "readOnly": True}]
        with sandbox_rpc(world, "crec", userns=False, persistent=True, networkPolicy="deny-all",
                         mounts=mounts) as name:
            rpc_ok(world, "sandbox.stop", {"name": name})
            os.kill(d.proc.pid, signal.SIGTERM)
            d.proc.wait(30)
            found = []
            for top, _dirs, files in os.walk(d.state_dir):
                if "config.json" in files:
                    p = os.path.join(top, "config.json")
                    with open(p) as f:
                        conf = json.load(f)
                    if conf.get("name") == name:
                        conf["mounts"][0]["readOnly"] = False
                        with open(p, "w") as f:
                            json.dump(conf, f)
                        found.append(p)
            expect_eq(len(found), 1, "the sandbox's record")
            d.start()
            code, out, err = sh(world, name, "echo done > /tmp/termination-log; echo rc=$?", "--sudo")
            expect_eq(out, "rc=2\n", "the recorded writable mount is read-only (%s)" % err)
            with open(path) as f:
                expect_eq(f.read(), "", "the host file unchanged")
        leaks.check(world, name)
        expect_eq(world.stop_sandboxd(), 0, "the daemon's exit status")
    finally:
        world.stop_sandboxd()
