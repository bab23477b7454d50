#!/usr/bin/env python3
"""Escape tests: a process with root inside a sandbox (`sandboxctl exec
--sudo`) tries the known ways out, and containment is asserted from the
host's side wherever the host has something to check (binaries hashed,
sysctls re-read, cgroup trees walked, listeners asked who connected).

    python3 tests/escape/run.py [-v] [--userns | --no-userns] [--warm-pool] [SUBSTRING...]

--userns runs every probe in a sandbox with a user namespace (sandbox root
is then an unprivileged host id), --no-userns in one without (sandbox root
is host root, the sandbox user the host's sandboxd-user account); neither:
the daemon's default (a user namespace wherever the host supports one).
Every case must hold both ways. --warm-pool runs them in a sandbox adopted
from the daemon's warm pool (daemon.json warmPool, sandboxd/warmpool.c).

The probes are tests/escape/probe.c, copied into the sandbox and compiled
there with the host's cc (the sandbox has the host's /usr read-only). One
line per test (PASS/FAIL), then "escape: N passed, N failed"; exit 1 on any
failure. Runs sandboxd in the test world (tests/integration/world.py).
"""
import ctypes
import hashlib
import os
import re
import secrets
import signal
import socket
import subprocess
import sys
import time
import traceback

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "integration"))

import world as W  # noqa: E402
from common import expect, expect_eq  # noqa: E402

PROBE_SRC = os.path.join(HERE, "probe.c")
PROBE = "/workspace/probe"
SIGSYS_EXIT = 128 + signal.SIGSYS
# Inherited by sandboxd: must never be readable inside a sandbox.
SECRET = "sbx-escape-" + secrets.token_hex(8)


class Ctx:
    def __init__(self, world, name):
        self.world, self.name = world, name
        sb = world.rpc_result("sandbox.get", {"name": name})
        self.userns = bool(sb.get("userns"))
        # The sandbox user's uid inside: 1000 with a user namespace, the
        # host's sandboxd-user account without.
        self.user_uid = 1000 if self.userns else W.plain_user()[0]

    def run(self, *argv, sudo=True, flags=(), timeout=60):
        f = list(flags) + (["--sudo"] if sudo else [])
        return self.world.ctl("exec", *f, self.name, "--", *argv, timeout=timeout)

    def probe(self, *args, sudo=True, flags=()):
        return self.run(PROBE, *args, sudo=sudo, flags=flags)

    def probe_blocked(self, *args, flags=()):
        code, out, err = self.probe(*args, flags=flags)
        expect("ESCAPED" not in out and code == 0,
               "probe %s: exit %d:" % (" ".join(args), code), out.strip()[-600:], err.strip()[-300:])
        expect("BLOCKED" in out, "probe %s printed no attempt:" % " ".join(args), out.strip()[-300:])
        return out


def sha256(path):
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def read(path):
    with open(path) as f:
        return f.read()


# ---------------------------------------------------------------- tests

def test_proc_exe_writes_leave_host_binaries_unchanged(c):
    d = c.world.daemon
    daemon_exe = os.readlink("/proc/%d/exe" % d.pid)
    paths = sorted({W.SANDBOXD, W.SANDBOX_INIT, daemon_exe, "/usr/bin/dash", os.path.realpath("/bin/sh")})
    before = {p: sha256(p) for p in paths}
    c.probe_blocked("exe-write")
    # /proc/1/exe is init's sealed memfd: a shell redirect must fail too.
    code, _out, _err = c.run("sh", "-c", "printf x >> /proc/1/exe")
    expect(code != 0, "appending to /proc/1/exe succeeded inside the sandbox")
    code, _out, _err = c.run("sh", "-c", "cp /bin/true /proc/1/exe")
    expect(code != 0, "overwriting /proc/1/exe succeeded inside the sandbox")
    for p in paths:
        expect_eq(sha256(p), before[p], "sha256 of host binary %s" % p)


def test_cwd_through_proc_magic_links_is_refused(c):
    for cwd in ("/proc/self/fd/0", "/proc/self/fd/1", "/proc/self/fd/3", "/proc/1/cwd", "/proc/1/root",
                "/proc/self/root", "/dev/fd/0", "/dev/stdin"):
        for sudo in (True, False):
            code, out, err = c.run("pwd", sudo=sudo, flags=("--cwd", cwd))
            expect(code != 0 and "chdir" in err,
                   "cwd %s%s was accepted: exit %d:" % (cwd, " (sudo)" if sudo else "", code),
                   out.strip(), err.strip())
    # An ordinary directory still works, and the command never started above.
    code, out, _err = c.run("pwd", flags=("--cwd", "/tmp"))
    expect_eq((code, out.strip()), (0, "/tmp"), "pwd in /tmp")


def test_commands_start_with_fds_0_to_2_only(c):
    for flags in ((), ("-t",), ("-i",)):
        for sudo in (True, False):
            code, out, err = c.probe("fds", sudo=sudo, flags=flags)
            fds = sorted(int(m) for m in re.findall(r"^FD (\d+)", out, re.M))
            expect(code == 0 and fds == [0, 1, 2],
                   "fds of a command %s: exit %d:" % (" ".join(flags), code), out.strip(), err.strip())


def _dmesg_sysrq_count():
    r = subprocess.run(["dmesg"], capture_output=True, text=True)
    return r.stdout.lower().count("sysrq") if r.returncode == 0 else None


def test_sysrq_trigger_write_goes_nowhere(c):
    before = _dmesg_sysrq_count()
    # 'h' only prints the help text: harmless even if the mask failed.
    c.probe_blocked("write", "/proc/sysrq-trigger", "h")
    code, _o, _e = c.run("sh", "-c", "echo h > /proc/sysrq-trigger && grep -q . /proc/sysrq-trigger")
    expect(code != 0, "/proc/sysrq-trigger is a readable, writable file inside")
    after = _dmesg_sysrq_count()
    if before is not None:
        expect_eq(after, before, "sysrq lines in the host's kernel log")


def test_core_pattern_is_read_only(c):
    before = read("/proc/sys/kernel/core_pattern")
    c.probe_blocked("write", "/proc/sys/kernel/core_pattern", "|/workspace/evil %p")
    code, _o, _e = c.run("sh", "-c", "echo '|/tmp/x' > /proc/sys/kernel/core_pattern")
    expect(code != 0, "writing core_pattern succeeded inside")
    expect_eq(read("/proc/sys/kernel/core_pattern"), before, "host core_pattern")
    code, out, _e = c.run("sh", "-c", "grep -w /proc/sys /proc/self/mountinfo")
    expect(code == 0 and re.search(r"\sro[\s,]", out),
           "/proc/sys is not mounted read-only inside:", out.strip())


def test_kcore_reads_nothing(c):
    c.probe_blocked("kcore")


def test_tiocsti_and_tioclinux_refused_on_tty(c):
    out = c.probe_blocked("tty", flags=("-t",))
    expect("TIOCSTI" in out and "TIOCLINUX" in out, "tty probe did not try both ioctls:", out)


def test_user_namespace_refused(c):
    c.probe_blocked("userns")
    code, out, _e = c.probe("userns", sudo=False)
    expect(code == 0 and "ESCAPED" not in out, "user namespace as the sandbox user:", out.strip())


def test_x32_syscall_kills_the_process(c):
    code, out, err = c.probe("userns-x32")
    expect_eq(code, SIGSYS_EXIT, "exit code of an x32 unshare(CLONE_NEWUSER) (%s %s)"
              % (out.strip(), err.strip()))


def test_int80_socketcall_kills_the_process(c):
    code, out, err = c.probe("int80")
    expect_eq(code, SIGSYS_EXIT, "exit code of a 32-bit int 0x80 socketcall (%s %s)"
              % (out.strip(), err.strip()))


def test_kernel_surface_syscalls_refused(c):
    out = c.probe_blocked("syscalls")
    for what in ("io_uring_setup", "keyctl", "bpf", "mount tmpfs", "fsopen", "userfaultfd"):
        expect(("BLOCKED " + what) in out, "%s not tried or not refused:" % what, out)
    # Syscalls newer than the filter's table: the mount family's new
    # members EPERM like their peers, anything unreviewed ENOSYS.
    for what in ("open_tree_attr", "statmount", "listmount", "memfd_secret"):
        expect(("BLOCKED %s: Operation not permitted" % what) in out, "%s not refused with EPERM:" % what, out)
    for what in ("mseal", "file_getattr", "syscall 500"):
        expect(("BLOCKED %s: Function not implemented" % what) in out, "%s not refused with ENOSYS:" % what, out)


def test_socket_families_beyond_unix_inet_netlink_refused(c):
    # Issue: socket(AF_VSOCK) as the sandbox user bound the VM-wide vsock
    # port space. Every family 0..45, as the sandbox user and as root
    # inside: only the table's four open, netlink only ROUTE and SOCK_DIAG.
    for sudo in (False, True):
        who = "root inside" if sudo else "the sandbox user"
        code, out, err = c.probe("families", sudo=sudo)
        expect("ESCAPED" not in out and code == 0, "families probe as %s: exit %d:" % (who, code),
               "\n".join(l for l in out.splitlines() if not l.startswith("BLOCKED"))[-900:], err.strip()[-300:])
        families = sorted(int(x) for x in re.findall(r"^OPEN family (\d+)", out, re.M))
        netlink = sorted(int(x) for x in re.findall(r"^OPEN netlink (\d+)", out, re.M))
        expect_eq(families, [1, 2, 10, 16], "socket families that open for %s" % who)
        expect_eq(netlink, [0, 4], "netlink protocols that open for %s" % who)
        for f in (17, 38, 40, 44):  # AF_PACKET, AF_ALG, AF_VSOCK, AF_XDP
            expect(("BLOCKED family %d: Address family not supported by protocol" % f) in out,
                   "family %d not refused with EAFNOSUPPORT for %s" % (f, who))


def test_ordinary_network_tools_work_under_the_family_table(c):
    # ip (NETLINK_ROUTE), ss (NETLINK_SOCK_DIAG), glibc getaddrinfo with
    # AI_ADDRCONFIG (NETLINK_ROUTE), Python's sockets and curl over
    # loopback, as the sandbox user.
    script = r"""
import socket, subprocess, threading
srv = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
srv.bind(("127.0.0.1", 0)); srv.listen(4)
port = srv.getsockname()[1]
def serve():
    conn, _ = srv.accept()
    conn.recv(4096)
    conn.sendall(b"HTTP/1.0 200 OK\r\nContent-Length: 2\r\n\r\nok")
    conn.close()
threading.Thread(target=serve, daemon=True).start()
ss = subprocess.run(["ss", "-tan"], capture_output=True, text=True)
assert ss.returncode == 0 and ("127.0.0.1:%d" % port) in ss.stdout, ss.stdout + ss.stderr
ip = subprocess.run(["ip", "addr", "show", "lo"], capture_output=True, text=True)
assert ip.returncode == 0 and "127.0.0.1/8" in ip.stdout, ip.stdout + ip.stderr
ai = socket.getaddrinfo("localhost", port, socket.AF_UNSPEC, socket.SOCK_STREAM, 0, socket.AI_ADDRCONFIG)
assert ai, ai
a, b = socket.socketpair(); a.sendall(b"x"); assert b.recv(1) == b"x"
u = socket.socket(socket.AF_INET6, socket.SOCK_DGRAM); u.close()
curl = subprocess.run(["curl", "-sS", "--max-time", "10", "http://127.0.0.1:%d/" % port],
                      capture_output=True, text=True)
assert curl.returncode == 0 and curl.stdout == "ok", curl.stdout + curl.stderr
print("TOOLS OK")
"""
    code, out, err = c.run("python3", "-c", script, sudo=False)
    expect(code == 0 and "TOOLS OK" in out, "ip/ss/getaddrinfo/python/curl inside: exit %d:" % code,
           out.strip()[-600:], err.strip()[-600:])


def test_ptrace_of_init_refused(c):
    c.probe_blocked("ptrace")


def test_device_nodes_cannot_be_made(c):
    c.probe_blocked("mknod")


def test_cgroup_filesystem_is_not_writable(c):
    c.probe_blocked("cgroup")
    code, _o, _e = c.run("mkdir", "/sys/fs/sbx-escape")
    expect(code != 0, "mkdir under /sys succeeded inside")
    code, out, _e = c.run("cat", "/proc/self/mountinfo")
    expect(code == 0, "reading mountinfo failed inside")
    for line in out.splitlines():
        # The filesystem type follows " - " (proc(5)); a file named
        # *cgroup* (the masked /proc/kpagecgroup) is not a cgroup mount.
        fstype = line.split(" - ", 1)[1].split()[0] if " - " in line else ""
        if fstype in ("cgroup", "cgroup2"):
            expect(re.search(r"\sro[\s,]", line), "a cgroup filesystem is mounted read-write:", line)
    for d in c.world.cgroup_dirs:
        for root, dirs, _files in W.walk(d):
            expect("sbx-escape" not in dirs, "a cgroup made inside appeared on the host:", root)


def test_proc_shows_nothing_of_the_daemon(c):
    d = c.world.daemon
    script = ("for p in /proc/[0-9]*; do echo \"PID ${p#/proc/}\"; tr '\\0' ' ' < $p/cmdline; echo; "
              "tr '\\0' '\\n' < $p/environ 2>/dev/null; done")
    code, out, err = c.run("sh", "-c", script)
    expect(code == 0, "listing /proc failed:", err.strip())
    pids = [int(x) for x in re.findall(r"^PID (\d+)", out, re.M)]
    expect(1 in pids and len(pids) <= 6, "sandbox /proc lists other processes:", pids)
    for needle in (SECRET, d.socket, d.state_dir, os.path.basename(W.SANDBOXD) + " --socket"):
        expect(needle not in out, "the daemon's %r is visible inside the sandbox" % needle)
    code, out, _e = c.run("sh", "-c", "cat /proc/1/environ")
    expect(SECRET not in out, "the daemon's environment reached PID 1")


def test_daemon_control_socket_unreachable(c):
    d = c.world.daemon
    c.probe_blocked("connect", d.socket, os.path.join(d.run_dir, "sandboxd.sock"))


class _NetnsAbstract:
    """An abstract Unix listener bound in the daemon's network namespace (the
    world host), made by switching this thread there and back."""

    CLONE_NEWNET = 0x40000000

    def __init__(self, world):
        libc = ctypes.CDLL(None, use_errno=True)
        own = os.open("/proc/self/ns/net", os.O_RDONLY | os.O_CLOEXEC)
        there = os.open("/run/netns/" + world.host_ns, os.O_RDONLY | os.O_CLOEXEC)
        try:
            if libc.setns(there, self.CLONE_NEWNET) != 0:
                raise OSError(ctypes.get_errno(), "setns to the world host")
            try:
                self.name = "sbx-escape-" + secrets.token_hex(4)
                self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM | socket.SOCK_CLOEXEC)
                self.sock.bind("\0" + self.name)
                self.sock.listen(8)
                self.sock.setblocking(False)
            finally:
                if libc.setns(own, self.CLONE_NEWNET) != 0:
                    raise OSError(ctypes.get_errno(), "setns back")
        finally:
            os.close(own)
            os.close(there)

    def accepted_any(self):
        try:
            conn, _ = self.sock.accept()
            conn.close()
            return True
        except BlockingIOError:
            return False

    def close(self):
        self.sock.close()


def test_abstract_sockets_of_daemon_world_unreachable(c):
    lst = _NetnsAbstract(c.world)
    try:
        names = ["@" + lst.name]
        # Every other abstract socket in the daemon's network namespace too.
        for line in read("/proc/%d/net/unix" % c.world.daemon.pid).splitlines()[1:]:
            f = line.split()
            if len(f) >= 8 and f[7].startswith("@") and f[7] not in names:
                names.append(f[7])
        c.probe_blocked("connect", *names[:50])
        expect(not lst.accepted_any(), "the world host's abstract listener accepted a connection")
    finally:
        lst.close()


def test_capabilities_none_for_user_default_set_for_root(c):
    code, out, _e = c.run("grep", "^Cap\\|NoNewPrivs\\|^Seccomp:", "/proc/self/status", sudo=False)
    for k in ("CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb"):
        expect(re.search(r"^%s:\s+0+$" % k, out, re.M), "%s of the sandbox user is not empty:" % k, out)
    expect(re.search(r"^NoNewPrivs:\s+1", out, re.M) and re.search(r"^Seccomp:\s+2", out, re.M),
           "no_new_privs or seccomp missing for the sandbox user:", out)
    code, out, _e = c.run("grep", "^Cap\\|NoNewPrivs\\|^Seccomp:", "/proc/self/status")
    eff = int(re.search(r"^CapEff:\s+(\w+)", out, re.M).group(1), 16)
    bnd = int(re.search(r"^CapBnd:\s+(\w+)", out, re.M).group(1), 16)
    CAP_SYS_ADMIN, CAP_MKNOD, CAP_SYS_PTRACE, CAP_CHOWN = 21, 27, 19, 0
    expect(eff == bnd and eff & (1 << CAP_CHOWN), "root's capabilities are not the default set:", out)
    for cap in (CAP_SYS_ADMIN, CAP_MKNOD, CAP_SYS_PTRACE):
        expect(not bnd & (1 << cap), "root inside keeps capability %d:" % cap, out)
    expect(re.search(r"^NoNewPrivs:\s+1", out, re.M) and re.search(r"^Seccomp:\s+2", out, re.M),
           "no_new_privs or seccomp missing for root:", out)


def test_setuid_binary_gains_nothing(c):
    code, _o, err = c.run("sh", "-c", "cp /usr/bin/id /workspace/suid-id && chmod 4755 /workspace/suid-id")
    expect(code == 0, "making a setuid copy of id failed:", err)
    code, out, err = c.run("/workspace/suid-id", "-u", sudo=False)
    expect_eq((code, out.strip()), (0, str(c.user_uid)),
              "effective uid of a setuid-root binary run by the sandbox user")


def test_init_cannot_be_killed_from_inside(c):
    # PID 1 of a PID namespace gets only the signals it has handlers for
    # from inside (pid_namespaces(7)): SIGKILL and SIGSTOP from root inside
    # must not end or freeze the session. (SIGTERM, which init handles,
    # stops the sandbox on purpose, as poweroff would.)
    code, out, _e = c.run("sh", "-c", "kill -KILL 1; kill -STOP 1; echo sent")
    expect_eq(out.strip().splitlines()[-1:], ["sent"], "the kill attempts ran (exit %d)" % code)
    code, out, err = c.run("sh", "-c", "echo alive")
    expect_eq((code, out), (0, "alive\n"), "the sandbox after root inside signalled PID 1 (%s)" % err.strip())


def test_the_sandbox_user_cannot_wedge_init_by_stopping_new_commands(c):
    # Finding: init spawned each command with CLONE_VFORK and waited in
    # the vfork until the child's exec; the child takes the user's uids
    # before it, so the sandbox user could SIGSTOP it there (a loop over
    # the pids just above its own) and init waited forever: every later
    # exec, exec --sudo, cp and fs operation hung. init must never wait on
    # anything a sandbox process can stop. A sandbox of its own: on a
    # wedged init nothing else could run in it.
    o = prepare(c.world, c.userns)
    w = c.world
    flag = "/tmp/stopper-done"
    hung = []
    try:
        code, out, err = o.run("sh", "-c", "%s stopper 60 %s > /tmp/stopper.out 2>&1 &" % (PROBE, flag),
                               sudo=False)
        expect_eq(code, 0, "start the stopper (%s %s)" % (out, err))
        # Commands as the sandbox user, each a new pid for the stopper to
        # catch before its exec. Some of them stop (their own business);
        # init must not.
        # On a busy machine the stopper may start after a batch of execs
        # is done, or miss a batch: batches go on until it says it stopped
        # one (each batch bounded; a stopped exec just stays stopped).
        argv = [W.SANDBOXCTL, "--socket", w.daemon.socket, "exec", o.name, "--", "true"]

        def caught():
            return "FIRST STOP" in o.run("cat", "/tmp/stopper.out", timeout=30)[1]

        deadline = time.monotonic() + 90
        while time.monotonic() < deadline and not caught():
            batch = [subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                      stderr=subprocess.DEVNULL) for _ in range(6)]
            hung.extend(batch)
            end = time.monotonic() + 5
            while time.monotonic() < end and any(p.poll() is None for p in batch):
                time.sleep(0.05)  # polls the batch's execs, bounded
        code, out, err = o.run("echo", "alive", timeout=30)
        expect_eq((code, out), (0, "alive\n"), "exec --sudo while the sandbox user stops new pids (%s)"
                  % err.strip())
        # The stopper ends (it polls the flag), then the sandbox user's own
        # commands run again too.
        code, out, err = o.run("sh", "-c", "touch %s; p=$(sed -n 's/^PID //p' /tmp/stopper.out); "
                               "while kill -0 $p 2>/dev/null; do :; done; cat /tmp/stopper.out" % flag,
                               timeout=30)
        expect(code == 0 and "stops sent" in out, "the stopper ended:", code, out, err)
        hits = re.findall(r"stopper: (\d+) stops sent", out)
        expect(hits and int(hits[0]) > 0, "the stopper stopped none of the sandbox user's new commands:", out)
        code, out, err = o.run("echo", "alive", sudo=False, timeout=30)
        expect_eq((code, out), (0, "alive\n"), "exec as the sandbox user after the stopper (%s)" % err.strip())
    finally:
        try:
            o.run("sh", "-c", "touch %s" % flag, sudo=True, timeout=10)
            o.run("sh", "-c", "kill -KILL -1", sudo=False, timeout=10)
        except Exception:
            pass
        w.ctl("rm", o.name, timeout=120)
        for p in hung:
            try:
                p.wait(30)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()


def test_root_inside_cannot_wedge_init_by_stopping_new_commands(c):
    # Finding: where init's oom_score_adj is not 0 (-1000 where main.c
    # may set it, else what it inherited) or a container's PID
    # namespace is joined, each command's child was started by a launcher
    # cloned with CLONE_VFORK, and init waited for it. The launcher runs
    # as root inside for a few system calls: root inside (same uid,
    # CAP_KILL) could SIGSTOP it there (a loop over the pids just above the
    # last one), and init waited forever: every later exec, cp and fs
    # operation hung. init must never wait on anything a sandbox process
    # can stop, root inside's included. The stopper (root) stops every new
    # command too, so init's liveness is read from its answer to the
    # stopper's own end (command.wait), then from an exec after it.
    o = prepare(c.world, c.userns)
    w = c.world
    started = []
    try:
        # init's score as main.c sets it on a host that lets it (-1000),
        # else one the sandbox's own processes do not have (500): not 0.
        pid = w.rpc_result("sandbox.get", {"name": o.name})["session"]["initPid"]
        try:
            with open("/proc/%d/oom_score_adj" % pid, "w") as f:
                f.write("-1000")
        except PermissionError:
            with open("/proc/%d/oom_score_adj" % pid, "w") as f:
                f.write("500")
        code, cid, err = o.run(PROBE, "stopall", "15", flags=("--detach",))
        cid = cid.strip()
        expect(code == 0 and cid, "start root's stopper:", code, cid, err)
        argv = [W.SANDBOXCTL, "--socket", w.daemon.socket, "exec", o.name, "--", "true"]

        def stopper_running():
            cmds = w.rpc_result("command.list", {"name": o.name}).get("commands", [])
            return any(x.get("cmdId") == cid and x.get("exitCode") is None for x in cmds)

        # New commands for the stopper to catch while it runs (the daemon
        # answers command.list from its own state, even with init wedged).
        # Bounded by the stopper's own 15 seconds (and a few more).
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and stopper_running():
            batch = [subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                      stderr=subprocess.DEVNULL) for _ in range(4)]
            started += batch
            for p in batch:
                try:
                    p.wait(max(0.1, min(2, deadline - time.monotonic())))
                except subprocess.TimeoutExpired:
                    pass  # a caught one stays stopped: its own business
        code, out, err = w.ctl("command", "wait", cid, timeout=60)
        expect_eq(code, 0, "the stopper's end, as init reports it (%s %s)" % (out.strip(), err.strip()))
        code, out, err = w.ctl("command", "logs", cid, timeout=30)
        hits = re.findall(r"stopall: (\d+) rounds", out)
        expect(hits and int(hits[0]) > 0, "the stopper stopped none of the new commands:", out, err)
        code, out, err = o.run("echo", "alive", timeout=30)
        expect_eq((code, out), (0, "alive\n"), "exec --sudo after root's stopper (%s)" % err.strip())
    finally:
        w.ctl("rm", o.name, timeout=120)
        for p in started:
            try:
                p.wait(30)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()


def _execs_while(w, o, argv_tail, until, deadline_s):
    """Runs the sandbox user's `true` in o in batches of 8 until until()
    holds or deadline_s passes; returns whether until() held."""
    argv = [W.SANDBOXCTL, "--socket", w.daemon.socket, "exec", o.name, "--"] + argv_tail
    deadline = time.monotonic() + deadline_s
    while time.monotonic() < deadline:
        batch = [subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                  stderr=subprocess.DEVNULL) for _ in range(8)]
        for p in batch:
            try:
                p.wait(30)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
        if until():
            return True
    return until()


def test_a_held_command_child_shares_nothing_the_sandbox_user_can_reach(c):
    # sandbox-init clones each command's child with CLONE_VM (its memory
    # is init's until the exec). The sandbox user may catch it between its
    # uid change and its exec (SIGSTOP on new pids): PTRACE_ATTACH/SEIZE,
    # /proc/PID/mem (read-write and read-only), /proc/PID/environ and
    # process_vm_readv of it must all be refused (init's address space is
    # not dumpable), and signals sent to it there (SIGSEGV, SIGUSR1) must
    # kill it or nothing, never init: commands run after it.
    o = prepare(c.world, c.userns)
    w = c.world
    flag = "/tmp/held-done"
    try:
        code, out, err = o.run("sh", "-c", "%s held 120 %s > /tmp/held.out 2>&1 &" % (PROBE, flag), sudo=False)
        expect_eq(code, 0, "start the probe (%s %s)" % (out, err))

        def checked():
            code, out, _ = o.run("cat", "/tmp/held.out", timeout=30)
            return "ESCAPED" in out or len(re.findall(r"ptrace\(PTRACE_ATTACH\) of a held child", out)) >= 3

        caught = _execs_while(w, o, ["true"], checked, 90)
        code, out, err = o.run("sh", "-c", "touch %s; p=$(sed -n 's/^PID //p' /tmp/held.out); "
                               "while kill -0 $p 2>/dev/null; do :; done; cat /tmp/held.out" % flag,
                               timeout=60)
        expect(code == 0 and "checked" in out, "the probe ended:", code, out, err)
        expect("ESCAPED" not in out, "a held command child was reachable:",
               " | ".join(l for l in out.splitlines() if "ESCAPED" in l)[:2000])
        hits = re.findall(r"held: (\d+) checked", out)
        expect(caught and hits and int(hits[0]) >= 3,
               "the probe caught fewer than 3 command children before their exec:", out[-600:])
        code, out, err = o.run("echo", "alive", timeout=30)
        expect_eq((code, out), (0, "alive\n"), "exec --sudo after the held children (%s)" % err.strip())
        code, out, err = o.run("echo", "alive", sudo=False, timeout=30)
        expect_eq((code, out), (0, "alive\n"), "exec as the sandbox user after them (%s)" % err.strip())
    finally:
        try:
            o.run("sh", "-c", "touch %s" % flag, sudo=True, timeout=10)
            o.run("sh", "-c", "kill -KILL -1", sudo=False, timeout=10)
        except Exception:
            pass
        w.ctl("rm", o.name, timeout=120)


def test_a_command_stopped_before_its_exec_is_killed_by_command_kill(c):
    # A command's child held stopped by the sandbox user before its exec
    # (init has its pid from the clone on) ends with command.kill, and
    # its exec's caller gets the exit; init runs other commands meanwhile.
    o = prepare(c.world, c.userns)
    w = c.world
    flag = "/tmp/stopper-done"
    held = []
    try:
        code, out, err = o.run("sh", "-c", "%s stopper 120 %s > /tmp/stopper.out 2>&1 &" % (PROBE, flag),
                               sudo=False)
        expect_eq(code, 0, "start the stopper (%s %s)" % (out, err))
        argv = [W.SANDBOXCTL, "--socket", w.daemon.socket, "exec", o.name, "--", "true"]
        deadline = time.monotonic() + 60
        running = []
        while time.monotonic() < deadline and not running:
            held += [subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                      stderr=subprocess.DEVNULL) for _ in range(8)]
            code, out, err = o.run("echo", "alive", timeout=30)
            expect_eq((code, out), (0, "alive\n"), "exec --sudo beside stopped children (%s)" % err.strip())
            cmds = w.rpc_result("command.list", {"name": o.name}).get("commands", [])
            running = [x for x in cmds if x.get("exitCode") is None and x.get("cmd") == "true"]
        expect(running, "no command of the sandbox user was held by the stopper")
        for x in running:
            w.rpc_result("command.kill", {"cmdId": x["cmdId"], "signal": "SIGKILL"})
        for x in running:
            r = w.rpc_result("command.wait", {"cmdId": x["cmdId"]}, timeout=60)
            expect(r.get("exitCode") == 137 or r.get("exitCode") == 0,
                   "a held command after command.kill:", r)
        o.run("sh", "-c", "touch %s" % flag, timeout=30)
    finally:
        try:
            o.run("sh", "-c", "touch %s" % flag, sudo=True, timeout=10)
            o.run("sh", "-c", "kill -KILL -1", sudo=False, timeout=10)
        except Exception:
            pass
        w.ctl("rm", o.name, timeout=120)
        for p in held:
            try:
                p.wait(30)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()


def test_dev_holds_only_the_minimal_nodes(c):
    code, out, err = c.run("sh", "-c", "ls -A /dev")
    expect(code == 0, "ls /dev failed:", err)
    allowed = {"null", "zero", "full", "random", "urandom", "tty", "pts", "ptmx", "shm",
               "fd", "stdin", "stdout", "stderr", "core", "console"}
    extra = sorted(set(out.split()) - allowed)
    expect_eq(extra, [], "device entries beyond the minimal /dev (DESIGN §4)")
    code, out, _e = c.run("sh", "-c", "find /dev -xdev \\( -type b -o -type c \\) -exec stat -c '%t:%T %n' {} +")
    majors = {line.split()[0] for line in out.splitlines() if line.strip()}
    expect(majors <= {"1:3", "1:5", "1:7", "1:8", "1:9", "5:0", "5:2"},
           "character devices other than null/zero/full/random/urandom/tty/ptmx:", sorted(majors))


# ---------------------------------------------------------------- runner

def test_block_devices_and_disk_images_of_other_sandboxes_are_hidden(c):
    """Block devices (the loop devices holding every sandbox's disk.img) and
    their I/O counters are masked in /sys and /proc, for root and for the
    sandbox user: nothing names a disk image, the state directory or
    another sandbox. /proc/self/mountinfo shows no state path either (the
    root overlay's layers are given as fds, not paths)."""
    w = c.world
    other = w.name("escape-nbr")
    code, out, err = w.ctl("create", "--deny-all", "--name", other, timeout=180)
    expect(code == 0, "create a neighbour: exit %d:" % code, (err or out).strip())
    try:
        script = ("cat /proc/self/mountinfo; for l in /sys/block/* /sys/class/block/* /sys/dev/block/* /sys/devices/virtual/block/*; do "
                  "echo \"DEV $l\"; cat $l/loop/backing_file $l/stat 2>/dev/null; done; "
                  "ls /sys/fs /sys/fs/ext4 /sys/class/bdi /sys/devices/virtual/bdi /sys/kernel/debug 2>/dev/null; "
                  "find /sys -name backing_file 2>/dev/null; "
                  "echo PARTITIONS; cat /proc/partitions; echo DISKSTATS; cat /proc/diskstats; "
                  "echo SWAPS; cat /proc/swaps; echo END")
        for sudo in (True, False):
            code, out, err = c.run("sh", "-c", script, sudo=sudo, timeout=120)
            who = "root" if sudo else "the sandbox user"
            expect("END" in out, "the listing as %s did not finish:" % who, err.strip()[-300:])
            for needle in ("disk.img", "backing_file", other, w.daemon.state_dir, "sandboxes/"):
                expect(needle not in out, "%r is visible inside the sandbox to %s:" % (needle, who),
                       [ln for ln in out.splitlines() if needle in ln][:5])
            expect(not re.search(r"^DEV /sys/.*/(loop|sd|vd|nvme|dm-)", out, re.M),
                   "block devices are listed to %s:" % who, re.findall(r"^DEV .*", out, re.M)[:5])
            tail = out.split("PARTITIONS", 1)[1]
            expect(not re.search(r"\b(loop\d+|sd[a-z]+|vd[a-z]+|nvme\S+|dm-\d+)\b", tail),
                   "/proc/partitions, diskstats or swaps name a device to %s:" % who, tail.strip()[:300])
    finally:
        w.ctl("rm", other, timeout=120)


def discover(filters):
    tests = [(fn.__code__.co_firstlineno, n, fn) for n, fn in globals().items()
             if n.startswith("test_") and callable(fn)]
    return [(n, fn) for _l, n, fn in sorted(tests) if not filters or any(f in n for f in filters)]


def prepare(world, userns=None):
    """One sandbox for every probe, with the probe built inside it; userns
    True/False asks for a user namespace or none, None takes the daemon's
    default."""
    name = world.name("escape")
    extra = {True: ["--userns"], False: ["--no-userns"], None: []}[userns]
    code, out, err = world.ctl("create", "--deny-all", "--name", name, *extra, timeout=180)
    if code != 0:
        raise W.WorldError("create: exit %d: %s" % (code, (err or out).strip()))
    code, out, err = world.ctl("cp", PROBE_SRC, "%s:/workspace/probe.c" % name)
    if code != 0:
        raise W.WorldError("cp probe.c: exit %d: %s" % (code, (err or out).strip()))
    code, out, err = world.ctl("exec", name, "--", "cc", "-O1", "-o", PROBE, "/workspace/probe.c",
                               timeout=120)
    if code != 0:
        raise W.WorldError("cc probe.c inside the sandbox: exit %d: %s" % (code, (err or out).strip()))
    return Ctx(world, name)


def main(argv):
    verbose = "-v" in argv
    tests = discover([a for a in argv if not a.startswith("-")])
    if os.geteuid() != 0:
        print("escape: needs root")
        print("escape: 0 passed, %d failed" % len(tests))
        return 1
    passed = failed = 0
    os.environ["SBX_ESCAPE_SECRET"] = SECRET
    world = W.World(quiet=False)
    ctx = None
    try:
        world.open()
        if "--warm-pool" in argv:
            cfg = {"warmPool": {"size": 1, "policy": "deny-all"}}
            if "--userns" in argv or "--no-userns" in argv:
                cfg["userns"] = "--userns" in argv
            world.start_sandboxd(cfg)
            W.World.wait_until(lambda: world.rpc_result("daemon.info")["warmPool"]["ready"] == 1, 60,
                               "the warm pool fills")
        else:
            world.start_sandboxd()
        if "--userns" in argv:
            u = world.rpc_result("daemon.info").get("capabilities", {}).get("userns") or {}
            if not u.get("available"):
                print("SKIP escape --userns: user namespaces are not available here (%s)"
                      % u.get("reason", "daemon.info says so"))
                world.close()
                print("escape: 0 passed, 0 failed, %d skipped" % len(tests))
                return 0
        ctx = prepare(world, True if "--userns" in argv else False if "--no-userns" in argv else None)
        print("escape: sandbox %s a user namespace" % ("with" if ctx.userns else "without"), flush=True)
        if "--warm-pool" in argv:
            adopted = world.rpc_result("daemon.info")["warmPool"]["adopted"]
            if adopted != 1:
                raise W.WorldError("the probes' sandbox was not adopted from the warm pool (adopted %s)" % adopted)
            print("escape: sandbox adopted from the warm pool", flush=True)
    except Exception as e:
        print("FAIL setup: %s" % e)
        world.close()
        print("escape: 0 passed, %d failed" % len(tests))
        return 1
    try:
        for name, fn in tests:
            start = time.monotonic()
            try:
                fn(ctx)
            except Exception as e:
                failed += 1
                print("FAIL %s: %s" % (name, " | ".join(str(e).splitlines())[:800]), flush=True)
                if verbose:
                    traceback.print_exc(file=sys.stdout)
                continue
            passed += 1
            print("PASS %s (%.1fs)" % (name, time.monotonic() - start) if verbose else "PASS %s" % name,
                  flush=True)
    finally:
        try:
            world.ctl("rm", ctx.name)
        except Exception:
            pass
        world.close()
    print("escape: %d passed, %d failed" % (passed, failed))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
