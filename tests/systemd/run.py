#!/usr/bin/env python3
"""sandboxd under a real systemd: systemd as PID 1 of a systemd-nspawn
container on a debootstrap'd Debian bookworm root, the project installed in
it, and what an operator relies on checked from outside (issue 14 item 2).

    python3 tests/systemd/run.py [--deb FILE] [--hybrid|--unified] [--if-possible] [SUBSTRING]

The root is cached in /var/cache/sandboxd-test/systemd/ (the machine's, so
a clean clone reuses it), keyed by suite and package list; it is made once
with debootstrap from deb.debian.org, the only time anything leaves the
machine. Each run boots an overlay over it (the cache stays pristine) with
--private-network: the container has a loopback and nothing else.

nspawn on a host with v1 controllers (and a v2 hierarchy beside them)
gives the container the same hybrid layout with the controller hierarchies
read-only and name=systemd and the v2 hierarchy writable: systemd accepts
that ("running"), and so does sandboxd, which leaves read-only hierarchies
out. The kernel then enforces no memory/CPU/pids limit inside the
container (no controller is writable there); the scope's limits are
checked as unit properties, the kernel's enforcement by the host suites.

Both cgroup layouts a container can get here run by default (--hybrid or
--unified picks one): nspawn's default (below) and cgroup v2 only.

--deb FILE: install that package in the booted container (dpkg -i) instead
of make install before the boot; make systemd-test builds it (make deb).

--if-possible: when the machine cannot run it (not root, no nspawn, no
cached root and no way to make one), print one line saying why, exit 0."""
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import traceback

HERE = os.path.dirname(os.path.abspath(__file__))
SRC = os.path.dirname(os.path.dirname(HERE))
BUILD = os.path.join(SRC, "build")
CACHE = os.environ.get("SANDBOXD_SYSTEMD_CACHE", "/var/cache/sandboxd-test/systemd")
MIRROR = os.environ.get("SANDBOXD_SYSTEMD_MIRROR", "http://deb.debian.org/debian")
SUITE = "bookworm"
# What the container needs beyond minbase: systemd and D-Bus, the daemon's
# shared libraries (Makefile PKGS), and the tools the checks call.
PACKAGES = ["systemd", "dbus", "libcjson1", "libgit2-1.5", "libarchive13", "libseccomp2", "libcap2",
            "libnl-3-200", "libnl-route-3-200", "libmnl0", "libnftnl11", "libsystemd0", "libcurl4",
            "libpcre2-8-0", "libldns3", "libssl3", "libhttp-parser2.9", "iproute2", "procps"]
# The count is renamed into place: `echo $i > n` empties the file before it
# writes, and a `cat` in between read nothing (counter() -1: the check
# failed once in CI though the sandbox answered).
COUNTER = "i=0; while :; do i=$((i+1)); echo $i > /workspace/n.t; mv /workspace/n.t /workspace/n; echo tick-$i; sleep 0.2; done"
# The container's cgroup layouts: "hybrid" is nspawn's default on a host
# with v1 controllers (what this host gives), "unified" a cgroup v2 only
# container (SYSTEMD_NSPAWN_UNIFIED_HIERARCHY=1, systemd-nspawn(1)).
LAYOUTS = ("hybrid", "unified")
PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


class Skip(Exception):
    pass


def log(*a):
    print(*a, flush=True)


def root_key():
    h = hashlib.sha256(("%s %s %s" % (SUITE, MIRROR, " ".join(sorted(PACKAGES)))).encode()).hexdigest()
    return os.path.join(CACHE, "%s-%s" % (SUITE, h[:16]))


def cached_root(may_build):
    """The cached root, made once (flock'd: two runs at once make it once)."""
    root = root_key()
    if os.path.exists(os.path.join(root, "lib/systemd/systemd")):
        return root
    if not may_build:
        raise Skip("no cached bookworm root in %s and --if-possible does not make one "
                   "(run make systemd-test once)" % CACHE)
    if not shutil.which("debootstrap"):
        raise Skip("debootstrap is not installed")
    os.makedirs(CACHE, exist_ok=True)
    import fcntl
    with open(os.path.join(CACHE, ".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if os.path.exists(os.path.join(root, "lib/systemd/systemd")):
            return root
        tmp = root + ".tmp"
        shutil.rmtree(tmp, ignore_errors=True)
        log("making the cached root %s (debootstrap %s from %s, a few minutes once)" % (root, SUITE, MIRROR))
        p = subprocess.run(["debootstrap", "--variant=minbase", "--include=" + ",".join(PACKAGES), SUITE, tmp,
                            MIRROR], capture_output=True, text=True)
        if p.returncode != 0:
            shutil.rmtree(tmp, ignore_errors=True)
            raise Skip("debootstrap %s failed (exit %d): %s" % (SUITE, p.returncode, p.stderr.strip()[-300:]))
        os.rename(tmp, root)
    return root


def why_not():
    if os.geteuid() != 0:
        return "not root"
    if not shutil.which("systemd-nspawn"):
        return "systemd-nspawn is not installed (Debian: systemd-container)"
    for b in ("sandboxd", "sandboxctl", "sandbox-init", "sandbox-netd"):
        if not os.access(os.path.join(BUILD, b), os.X_OK):
            return "build/%s is missing (make all)" % b
    return None


class Container:
    """systemd-nspawn --boot over an overlay of the cached root."""

    def __init__(self, root, layout):
        self.root = root
        self.layout = layout
        self.dir = tempfile.mkdtemp(prefix="sandboxd-systemd-")
        self.merged = os.path.join(self.dir, "root")
        self.proc = None
        self.leader = None
        self.cgroups = []
        for d in ("upper", "work", "root", "state"):
            os.mkdir(os.path.join(self.dir, d))
        # The state directory on the host's filesystem, not on the
        # overlay root: a session's overlay cannot have its upper
        # directory on overlayfs. Made 0700 here: tmpfiles sets its mode.
        os.chmod(os.path.join(self.dir, "state"), 0o700)
        subprocess.run(["mount", "-t", "overlay", "overlay", "-o",
                        "lowerdir=%s,upperdir=%s/upper,workdir=%s/work" % (root, self.dir, self.dir), self.merged],
                       check=True)

    def install(self):
        """make install into the tree, units enabled as a package would."""
        subprocess.run(["make", "-s", "-C", SRC, "install", "DESTDIR=" + self.merged], check=True,
                       stdout=subprocess.DEVNULL)
        subprocess.run(["systemctl", "--root=" + self.merged, "enable", "sandboxd.socket"], check=True,
                       capture_output=True)
        self.write_config()

    def install_deb(self, deb):
        """dpkg -i in the booted container: the maintainer scripts run
        sysusers and tmpfiles and enable and start the socket."""
        shutil.copy(deb, os.path.join(self.merged, "root", os.path.basename(deb)))
        self.run("dpkg", "-i", "/root/" + os.path.basename(deb), timeout=120)
        self.write_config()

    def write_config(self):
        # Loop devices and the disk image need /dev access nspawn does not
        # give: sandboxes here get no disk image.
        os.makedirs(os.path.join(self.merged, "etc/sandboxd"), exist_ok=True)
        with open(os.path.join(self.merged, "etc/sandboxd/daemon.json"), "w") as f:
            json.dump({"diskMiB": 0}, f)

    def _own_cgroups(self):
        """nspawn without a host systemd puts the container in "payload"
        below its own cgroup: give it one of its own in each writable
        hierarchy, so nothing is left at the root when it is gone."""
        self.cgroups = []
        for h in ("/sys/fs/cgroup/unified", "/sys/fs/cgroup/systemd", "/sys/fs/cgroup"):
            if not os.path.exists(os.path.join(h, "cgroup.procs")) or not os.access(h, os.W_OK):
                continue
            d = os.path.join(h, "sandboxd-systemd-test-%d" % os.getpid())
            try:
                os.mkdir(d)
            except OSError:
                continue
            self.cgroups.append(d)

    def _enter_cgroups(self):
        for d in self.cgroups:
            with open(os.path.join(d, "cgroup.procs"), "w") as f:
                f.write(str(os.getpid()))

    def _remove_cgroups(self):
        for top in self.cgroups:
            deadline = time.time() + 10
            while os.path.exists(top) and time.time() < deadline:
                for dirpath, _dirs, _files in os.walk(top, topdown=False):
                    try:
                        os.rmdir(dirpath)
                    except OSError:
                        pass
                if os.path.exists(top):
                    time.sleep(0.1)

    def boot(self):
        self.log = open(os.path.join(self.dir, "console.log"), "w")
        name = "sbdtest%d" % os.getpid()
        self._own_cgroups()
        self.proc = subprocess.Popen(
            ["systemd-nspawn", "--boot", "--console=passive", "--private-network", "--register=no",
             "--keep-unit", "--capability=all", "--machine=" + name, "-D", self.merged,
             "--bind=%s/state:/var/lib/sandboxd" % self.dir],
            stdin=subprocess.DEVNULL, stdout=self.log, stderr=subprocess.STDOUT, preexec_fn=self._enter_cgroups,
            env=dict(os.environ, **({"SYSTEMD_NSPAWN_UNIFIED_HIERARCHY": "1"} if self.layout == "unified" else {})))
        deadline = time.time() + 60
        while time.time() < deadline and self.proc.poll() is None:
            kids = subprocess.run(["ps", "-o", "pid=", "--ppid", str(self.proc.pid)], capture_output=True,
                                  text=True).stdout.split()
            if kids:
                self.leader = int(kids[0])
                r = self.run("systemctl", "is-system-running", check=False)
                if r.stdout.strip() in ("running", "degraded"):
                    return r.stdout.strip()
            time.sleep(0.2)
        raise AssertionError("the container did not boot in 60 s: %s" % self.console())

    def console(self):
        try:
            with open(os.path.join(self.dir, "console.log"), errors="replace") as f:
                return f.read()[-3000:]
        except OSError:
            return ""

    def run(self, *argv, check=True, timeout=60, input=None):
        """argv inside the container (all its namespaces), as root."""
        p = subprocess.run(["nsenter", "-t", str(self.leader), "-a", "--", "env", "-i", "PATH=" + PATH,
                            "SYSTEMD_PAGER=", "SYSTEMD_COLORS=0"] + list(argv),
                           capture_output=True, text=True, timeout=timeout, input=input)
        if check and p.returncode != 0:
            raise AssertionError("%s: exit %d\nstdout: %s\nstderr: %s" % (" ".join(argv), p.returncode,
                                                                        p.stdout[-2000:], p.stderr[-2000:]))
        return p

    def v2(self):
        """The container's cgroup v2 mount, seen from here."""
        r = "/proc/%d/root/sys/fs/cgroup" % self.leader
        return r + "/unified" if os.path.exists(r + "/unified/cgroup.procs") else r

    def sh(self, script, **kw):
        return self.run("sh", "-c", script, **kw)

    def close(self):
        if self.proc and self.proc.poll() is None:
            # SIGTERM to nspawn: it asks the container's systemd to shut down.
            self.proc.terminate()
            try:
                self.proc.wait(60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        self._remove_cgroups()
        subprocess.run(["umount", self.merged], capture_output=True)
        shutil.rmtree(self.dir, ignore_errors=True)


def poll(fn, secs, what):
    deadline = time.time() + secs
    last = None
    while time.time() < deadline:
        last = fn()
        if last:
            return last
        time.sleep(0.1)
    raise AssertionError("timed out after %d s waiting for %s (last: %r)" % (secs, what, last))


def expect(cond, *what):
    if not cond:
        raise AssertionError(" ".join(str(w) for w in what))


def show(c, unit, prop):
    return c.run("systemctl", "show", "-P", prop, unit).stdout.strip()


def ctl(c, *args, check=True):
    return c.run("sandboxctl", "--json", *args, check=check, timeout=120)


def counter(c, name):
    p = ctl(c, "exec", name, "--", "cat", "/workspace/n", check=False)
    return int(p.stdout.strip()) if p.returncode == 0 and p.stdout.strip().isdigit() else -1


def main_pid(c):
    return int(show(c, "sandboxd.service", "MainPID") or 0)


# ---- the checks, in order (each builds on the state the last one left) ----

def check_sysusers_and_tmpfiles(c, st):
    g = c.run("getent", "group", "sandboxd").stdout
    expect(g.startswith("sandboxd:"), "group sandboxd made by sysusers:", g)
    u = c.run("getent", "passwd", "sandboxd-user").stdout
    expect("/usr/sbin/nologin" in u, "user sandboxd-user made by sysusers:", u)
    for path, mode in (("/var/lib/sandboxd", "711"), ("/var/lib/sandboxd/sandboxes", "700"),
                       ("/run/sandboxd", "755")):
        got = c.run("stat", "-c", "%a %U", path).stdout.split()
        expect(got == [mode, "root"], "tmpfiles made", path, "mode", mode, "owner root; got", got)


def check_socket_activation(c, st):
    expect(c.run("systemctl", "is-active", "sandboxd.socket", check=False).stdout.strip() == "active",
           "sandboxd.socket listens after boot")
    expect(c.run("systemctl", "is-active", "sandboxd.service", check=False).stdout.strip() == "inactive",
           "sandboxd.service is inactive until a client connects")
    info = json.loads(ctl(c, "daemon", "info").stdout)
    expect(c.run("systemctl", "is-active", "sandboxd.service", check=False).stdout.strip() == "active",
           "the first sandboxctl started the service")
    expect(info["capabilities"]["cgroupDriver"] == "systemd", "daemon.info cgroupDriver under systemd:",
           info["capabilities"])
    st["info"] = info


def check_notify_and_watchdog(c, st):
    expect(show(c, "sandboxd.service", "Type") == "notify", "Type=notify")
    status = show(c, "sandboxd.service", "StatusText")
    expect("0 sandboxes" in status, "STATUS= with the sandbox count:", status)
    # READY=1 only once the socket is served: systemd logged the service
    # started after the daemon logged that it listens on the socket, and
    # the activating connection was answered by that same daemon.
    expect(int(st["info"]["pid"]) == main_pid(c), "the daemon that answered is the main pid")
    j = [json.loads(l) for l in c.run("journalctl", "-u", "sandboxd", "-o", "json", "--no-pager").stdout.splitlines()
         if l.strip()]
    listen = [int(e["__MONOTONIC_TIMESTAMP"]) for e in j if "listening on the socket" in str(e.get("MESSAGE"))]
    started = [int(e["__MONOTONIC_TIMESTAMP"]) for e in j if str(e.get("MESSAGE", "")).startswith("Started sandboxd")]
    expect(listen and started and listen[0] < started[0], "systemd saw the service ready only after it listened:",
           listen, started)
    expect(show(c, "sandboxd.service", "WatchdogUSec") == "30s", "WatchdogSec=30s:",
           show(c, "sandboxd.service", "WatchdogUSec"))
    first = int(show(c, "sandboxd.service", "WatchdogTimestampMonotonic") or 0)
    expect(first > 0, "a watchdog ping was received")
    poll(lambda: int(show(c, "sandboxd.service", "WatchdogTimestampMonotonic") or 0) > first, 30,
         "the next watchdog ping")


def check_sandbox_is_a_scope(c, st):
    name = "sd1"
    ctl(c, "create", "--name", name, "--deny-all")
    r = json.loads(ctl(c, "exec", "--detach", name, "--", "sh", "-c", COUNTER).stdout)
    st["cmd"] = r.get("cmdId") or r.get("id")
    expect(st["cmd"], "exec --detach gives a command id:", r)
    poll(lambda: counter(c, name) > 0, 30, "the counter starts")
    unit = "sandboxd-%s.scope" % name
    p = c.run("systemctl", "status", "--no-pager", unit, check=False)
    expect("active (running)" in p.stdout and "sandbox-init" in p.stdout,
           "systemctl status %s shows it running with sandbox-init:" % unit, p.stdout)
    expect(show(c, unit, "Slice") == "sandboxd.slice", "the scope is in sandboxd.slice")
    expect(show(c, unit, "Delegate") == "yes", "Delegate=yes on the scope")
    expect(show(c, unit, "MemoryMax") == str(2048 << 20), "MemoryMax of one vCPU:", show(c, unit, "MemoryMax"))
    expect(show(c, unit, "TasksMax") == "4096", "TasksMax = pidsMax:", show(c, unit, "TasksMax"))
    expect(show(c, unit, "CPUQuotaPerSecUSec") == "1s", "CPUQuota 100 %:", show(c, unit, "CPUQuotaPerSecUSec"))
    cgls = c.run("systemd-cgls", "--no-pager", "/sandboxd.slice").stdout
    expect(unit in cgls and "sandbox-init" in cgls, "systemd-cgls shows the scope:", cgls)
    svc = c.run("systemd-cgls", "--no-pager", "-u", "sandboxd.service").stdout
    expect("sandbox-init" not in svc, "no sandbox process in the service's cgroup:", svc)
    # The instance mark a start-up sweep goes by (libcore/cgroup.c).
    d = "%s/sandboxd.slice/%s" % (c.v2(), unit)
    expect(len(os.getxattr(d, "trusted.sandboxd.instance")) == 16, "the scope carries the instance key")
    st["name"] = name


def check_update_changes_the_unit_live(c, st):
    unit = "sandboxd-%s.scope" % st["name"]
    ctl(c, "update", st["name"], "--vcpus", "2")
    expect(show(c, unit, "MemoryMax") == str(4096 << 20), "MemoryMax after update --vcpus 2:",
           show(c, unit, "MemoryMax"))
    expect(show(c, unit, "CPUQuotaPerSecUSec") == "2s", "CPUQuota 200 % after the update:",
           show(c, unit, "CPUQuotaPerSecUSec"))
    expect(c.run("systemctl", "is-active", unit, check=False).stdout.strip() == "active", "the scope runs on")


def check_concurrent_creates(c, st):
    """Sessions started at once each get their scope (each start holds its
    scope with a placeholder process until the session is in)."""
    names = ["cc%d" % i for i in range(6)]
    script = " ".join("timeout 60 sandboxctl create --name %s --deny-all >/dev/null & " % n for n in names)
    p = c.sh(script + "fail=0; for j in $(jobs -p); do wait $j || fail=1; done; exit $fail", check=False, timeout=90)
    expect(p.returncode == 0, "six creates at once all succeed:", p.stderr)
    for n in names:
        expect(c.run("systemctl", "is-active", "sandboxd-%s.scope" % n, check=False).stdout.strip() == "active",
               "the scope of", n)
    for n in names:
        ctl(c, "rm", n)
    # Each unit goes right after its rm answers (the teardown after the fence).
    poll(lambda: not c.run("systemctl", "list-units", "--all", "--no-legend", "sandboxd-cc*").stdout.strip(), 30,
         "no unit left after rm")


def check_rm_removes_the_scope(c, st):
    ctl(c, "create", "--name", "sd3", "--deny-all")
    unit = "sandboxd-sd3.scope"
    expect(c.run("systemctl", "is-active", unit, check=False).stdout.strip() == "active", "sd3's scope runs")
    ctl(c, "rm", "sd3")
    # rm answers once the sandbox is fenced (its processes killed, its
    # name free); the scope, the unit and the cgroup go right after, in
    # the background (docs/API.md sandbox.delete).
    poll(lambda: c.run("systemctl", "is-active", unit, check=False).stdout.strip() != "active", 30,
         "rm to stop the scope")
    poll(lambda: unit not in c.run("systemctl", "list-units", "--all", "--no-legend", "sandboxd-*").stdout, 30,
         "no unit left under the name")
    poll(lambda: not os.path.exists("%s/sandboxd.slice/%s" % (c.v2(), unit)), 30, "its cgroup to go")


def _survived(c, st, what):
    name = st["name"]
    n0 = counter(c, name)
    if n0 <= 0:
        p = ctl(c, "exec", name, "--", "cat", "/workspace/n", check=False)
        expect(False, "the sandbox answers after", what, "(exec: %d %r %r)" % (p.returncode, p.stdout, p.stderr))
    poll(lambda: counter(c, name) > n0, 30, "the counter keeps counting after " + what)
    got = json.loads(ctl(c, "command", "get", st["cmd"]).stdout)
    expect(got.get("exitCode") is None, "the command still runs after", what, got)
    logs = c.run("sandboxctl", "command", "logs", st["cmd"], check=False).stdout
    expect("tick-" in logs, "its output is still there after", what)
    expect(c.run("systemctl", "is-active", "sandboxd-%s.scope" % name, check=False).stdout.strip() == "active",
           "the scope is still active after", what)


def check_restart(c, st):
    old = main_pid(c)
    c.run("systemctl", "restart", "sandboxd")
    expect(main_pid(c) not in (0, old), "a new main pid after restart")
    _survived(c, st, "systemctl restart")
    expect(show(c, "sandboxd-%s.scope" % st["name"], "MemoryMax") == str(4096 << 20),
           "the updated limits are still the unit's after the restart")


def check_stop_then_start(c, st):
    c.run("systemctl", "stop", "sandboxd")
    expect(c.run("systemctl", "is-active", "sandboxd", check=False).stdout.strip() != "active", "stopped")
    expect(c.run("systemctl", "is-active", "sandboxd-%s.scope" % st["name"], check=False).stdout.strip() ==
           "active", "the scope runs on while the service is stopped")
    c.run("systemctl", "start", "sandboxd")
    _survived(c, st, "systemctl stop + start")


def check_crash_restart(c, st):
    old = main_pid(c)
    c.run("kill", "-9", str(old))
    poll(lambda: main_pid(c) not in (0, old) and
         c.run("systemctl", "is-active", "sandboxd", check=False).stdout.strip() == "active",
         30, "Restart=on-failure to bring up a new daemon")
    _survived(c, st, "kill -9 of the main pid")
    status = show(c, "sandboxd.service", "StatusText")
    expect("1 sandboxes (1 running)" in status, "STATUS= counts the re-adopted sandbox:", status)


def check_group_access(c, st):
    c.run("useradd", "-m", "-G", "sandboxd", "alice")
    c.run("useradd", "-m", "bob")
    p = c.run("setpriv", "--reuid=alice", "--regid=alice", "--init-groups", "sandboxctl", "ls", check=False)
    # The group gives access, not root's powers: alice is the tenant
    # uid:N and sees none of root's sandboxes (docs/SECURITY.md 4.2).
    expect(p.returncode == 0 and "NAME" in p.stdout and st["name"] not in p.stdout,
           "a member of group sandboxd uses the CLI, as a tenant:", p.returncode, p.stdout, p.stderr)
    p = c.run("setpriv", "--reuid=bob", "--regid=bob", "--init-groups", "sandboxctl", "ls", check=False)
    expect(p.returncode == 69 and "ermission denied" in p.stderr, "a user outside the group may not:",
           p.returncode, p.stdout, p.stderr)


def check_journal_fields(c, st):
    p = c.run("journalctl", "-u", "sandboxd", "-o", "json", "--no-pager", "SANDBOX=" + st["name"])
    events = [json.loads(l) for l in p.stdout.splitlines() if l.strip()]
    expect(any(e.get("SANDBOX_EVENT") == "sandbox" and e.get("SANDBOX_STATUS") == "running" for e in events),
           "journalctl -u sandboxd SANDBOX=%s shows its events with SANDBOX_EVENT=:" % st["name"], p.stdout[-1500:])


def check_startup_sweep_takes_only_its_own_scopes(c, st):
    """A scope of ours without a record (its sandbox is gone) is removed at
    start; a scope in the slice that another made is left alone."""
    c.sh("systemd-run --scope --unit=sandboxd-foreign --slice=sandboxd.slice sleep 1000 >/dev/null 2>&1 &")
    poll(lambda: c.run("systemctl", "is-active", "sandboxd-foreign.scope", check=False).stdout.strip() == "active",
         30, "the foreign scope to start")
    try:
        ctl(c, "create", "--name", "sd4", "--deny-all")
        c.run("systemctl", "stop", "sandboxd")
        c.run("rm", "-rf", "/var/lib/sandboxd/sandboxes/sd4")
        c.run("systemctl", "start", "sandboxd")
        expect(c.run("systemctl", "is-active", "sandboxd-sd4.scope", check=False).stdout.strip() != "active",
               "the start-up sweep stopped the scope of a sandbox without a record")
        expect(c.run("systemctl", "is-active", "sandboxd-foreign.scope", check=False).stdout.strip() == "active",
               "a scope without this daemon's key is not touched")
        _survived(c, st, "the start-up sweep")
    finally:
        c.run("systemctl", "stop", "sandboxd-foreign.scope", check=False)


def check_stop_slice(c, st):
    ctl(c, "create", "--name", "sd2", "--deny-all")
    c.run("systemctl", "stop", "sandboxd.slice")
    for n in (st["name"], "sd2"):
        poll(lambda: c.run("systemctl", "is-active", "sandboxd-%s.scope" % n, check=False).stdout.strip() != "active",
             30, "the scope of %s to stop" % n)
        poll(lambda: json.loads(ctl(c, "get", n, check=False).stdout or "{}").get("status") != "running", 30,
             "sandbox %s no longer running" % n)
    expect(c.run("systemctl", "is-active", "sandboxd", check=False).stdout.strip() == "active",
           "the daemon itself keeps running")
    for n in (st["name"], "sd2"):
        ctl(c, "rm", n, check=False)


CHECKS = [check_sysusers_and_tmpfiles, check_socket_activation, check_notify_and_watchdog,
          check_sandbox_is_a_scope, check_update_changes_the_unit_live, check_concurrent_creates,
          check_rm_removes_the_scope, check_restart, check_stop_then_start, check_crash_restart,
          check_group_access, check_journal_fields, check_startup_sweep_takes_only_its_own_scopes, check_stop_slice]


def run_layout(root, layout, deb, filt):
    """Boots one container, runs the checks; returns the failed ones."""
    t0 = time.time()
    c = Container(root, layout)
    failed = []
    try:
        if not deb:
            c.install()
        state = c.boot()
        log("[%s] container booted (%s) in %.1f s" % (layout, state, time.time() - t0))
        if deb:
            c.install_deb(deb)
            log("[%s] installed %s" % (layout, os.path.basename(deb)))
        else:
            log("[%s] installed with make install" % layout)
        st = {}
        for chk in CHECKS:
            if filt and not any(f in chk.__name__ for f in filt) and chk.__name__ not in (
                    "check_socket_activation",):
                continue
            t = time.time()
            try:
                chk(c, st)
                log("[%s] ok    %s (%.1f s)" % (layout, chk.__name__, time.time() - t))
            except Exception:
                failed.append("%s/%s" % (layout, chk.__name__))
                log("[%s] FAIL  %s\n%s" % (layout, chk.__name__, traceback.format_exc()))
                log(c.run("systemctl", "status", "--no-pager", "sandboxd", check=False).stdout)
                j = c.run("journalctl", "--no-pager", "-n", "80", check=False).stdout
                log("journal:\n" + j)
                break  # later checks build on this one's state
    finally:
        c.close()
    return failed


def main(argv):
    if_possible = "--if-possible" in argv
    deb = None
    if "--deb" in argv:
        deb = argv[argv.index("--deb") + 1]
        argv = [a for a in argv if a not in ("--deb", deb)]
    filt = [a for a in argv if not a.startswith("--")]
    reason = why_not()
    try:
        if reason:
            raise Skip(reason)
        root = cached_root(may_build=True)
    except Skip as e:
        if if_possible:
            print("systemd-test: skipped: %s" % e)
            return 0
        print("systemd-test: cannot run: %s" % e, file=sys.stderr)
        return 1
    layouts = [l for l in LAYOUTS if "--" + l in argv] or list(LAYOUTS)
    t0 = time.time()
    failed = []
    for layout in layouts:
        failed += run_layout(root, layout, deb, filt)
    log("%d checks x %s, %s in %.0f s" % (len(CHECKS), "+".join(layouts),
                                          "failed: " + ", ".join(failed) if failed else "all passed",
                                          time.time() - t0))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
