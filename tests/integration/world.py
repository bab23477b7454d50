"""The test world (DESIGN §8): a private "world host" network namespace where
sandboxd runs, wired by veth to a private "internet" namespace that holds the
fake upstream (dnsmasq, a git daemon, an HTTP server, TCP listeners).

Nothing here touches the machine's real network: both namespaces are new,
the veth is created inside them, and the only addresses used are
203.0.113.0/24 (TEST-NET-3) inside the world and loopback.

Usage:

    with World() as w:
        d = w.start_sandboxd()
        code, out, err = w.ctl("create", "--deny-all", "--name", "x")

Everything the world creates (namespaces, resolv.conf, cgroups, processes,
temp dirs) is torn down on exit, on an exception, at interpreter exit and on
SIGINT/SIGTERM. Processes are stopped by pid (or by the process group of a
process this module started), never by name.
"""
import atexit
import base64
import contextlib
import json
import os
import pwd
import secrets
import shlex
import select
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))


def _toplevel():
    try:
        out = subprocess.run(["git", "rev-parse", "--show-toplevel"], cwd=HERE,
                             capture_output=True, text=True, check=True).stdout.strip()
        if out:
            return out
    except (OSError, subprocess.CalledProcessError):
        pass
    return os.path.abspath(os.path.join(HERE, "..", ".."))


REPO = _toplevel()
PLAIN_USER = "sandboxd-user"  # sandboxd/internal.h SANDBOXD_PLAIN_USER
BUILD = os.path.join(REPO, "build")
# Overridable to test installed binaries (SANDBOXD=/usr/local/sbin/sandboxd ...).
SANDBOXD = os.path.abspath(os.environ.get("SANDBOXD", os.path.join(BUILD, "sandboxd")))
# sandboxd with its fault points armed (libcore/fault.h): crash tests only.
FAULTS_SANDBOXD = os.path.abspath(os.environ.get("FAULTS_SANDBOXD", os.path.join(BUILD, "faults", "sandboxd")))
SANDBOX_INIT = os.path.abspath(os.environ.get("SANDBOX_INIT", os.path.join(BUILD, "sandbox-init")))
SANDBOXCTL = os.environ.get("SANDBOXCTL", os.path.join(BUILD, "sandboxctl"))
SERVERS = os.path.join(HERE, "servers.py")
# Test caches local tarball sources are read from (common.CACHE_DIRS): the
# daemons of a world list them in localSourceRoots with the world's tmp.
LOCAL_SOURCE_CACHES = ("/var/cache/sandboxd-test", os.path.join(tempfile.gettempdir(), "sandboxd-test-cache"))

HOST_ADDR = "203.0.113.1"
INET_ADDR = "203.0.113.254"
GIT_ADDR = "203.0.113.9"
HTTP_ADDR = "203.0.113.10"
DNS_ADDR = "203.0.113.53"
SPARE_ADDR = "203.0.113.11"
LISTEN_PORT = 7000
# "Public" hosts of the fake internet, for custom policies: every range above
# is documentation space, which a custom policy never reaches unless
# subnets.allow names it (DESIGN §5.1 rule 5). These addresses live only on
# the internet namespace's veth; the world has no route anywhere else.
PUB_NET = "5.5.5.0/24"
PUB_API_ADDR = "5.5.5.10"     # api.public.test
PUB_OTHER_ADDR = "5.5.5.11"   # other.public.test, a.b.public.test
PRIVATE_ANSWER_ADDR = "10.0.0.1"  # private.public.test (a DNS answer only: no host has it)
# The egress proxy's upstreams (tests/integration/test_proxy.py), all with
# certificates of the world CA (World.ca_cert), which sandboxd trusts as its
# extra upstream CA and no sandbox trusts unless a test gives it the file:
#   api.public.test, allowed.test   PUB_API_ADDR: HTTPS (443) and HTTP (80)
#                                    echo servers that log each request
#   forward.public.test             PUB_FORWARD_ADDR: HTTPS echo, its own log
#   attacker.test                   PUB_ATTACKER_ADDR: TCP 80 and 443 that
#                                    log every connection (must see none)
#   git.public.test                 PUB_GIT_ADDR: the bare repository over
#                                    HTTPS (git's dumb protocol), logged
PUB_FORWARD_ADDR = "5.5.5.12"
PUB_ATTACKER_ADDR = "5.5.5.13"
PUB_GIT_ADDR = "5.5.5.14"
# A neighbour of the world host on its upstream side (World.neighbour()):
# TEST-NET-2, behind the internet namespace, which routes for it.
NEIGHBOUR_NET = "198.51.100.0/24"
NEIGHBOUR_GW = "198.51.100.1"     # the internet namespace's side
NEIGHBOUR_ADDR = "198.51.100.2"
# IPv6 of the test world (DESIGN §5, §8): the world host and the internet
# namespace share 2001:db8:113::/64 (documentation space, like TEST-NET-3
# above); the fake internet's "public" IPv6 hosts are in PUB6_NET, which
# lives only on the internet namespace's veth. Names that answer AAAA (the
# v4 names keep answering A only, so tests written for IPv4 stay IPv4):
#   api6.public.test     PUB6_API_ADDR only (AAAA)
#   dual.public.test     PUB_API_ADDR (A) and PUB6_API_ADDR (AAAA)
#   other6.public.test   PUB6_OTHER_ADDR
#   keep6.public.test, gone6.public.test   PUB6_API_ADDR only (AAAA)
# (the echo servers of api.public.test also listen on PUB6_API_ADDR)
# and rebinding answers: loop6 ::1, mapped6 ::ffff:127.0.0.1, meta6
# ::ffff:169.254.169.254, nat64meta 64:ff9b::a9fe:a9fe, sixtofour
# 2002:7f00:1::1, ll6 fe80::1, mixed6 PUB6_API_ADDR and ::1, ula6 fd00::1.
HOST_ADDR6 = "2001:db8:113::1"
INET_ADDR6 = "2001:db8:113::fe"
PUB6_NET = "2a05:5::/64"
PUB6_API_ADDR = "2a05:5::10"
PUB6_OTHER_ADDR = "2a05:5::11"
PUB6_ATTACKER_ADDR = "2a05:5::13"
WORLD_TLS_NAMES = ("api.public.test", "allowed.test", "blocked.test", "forward.public.test",
                   "attacker.test", "git.public.test", "api6.public.test", "keep6.public.test",
                   "gone6.public.test")


class WorldError(Exception):
    pass


class Skip(Exception):
    """Raised by a test that cannot run here (says why)."""


def _run(cmd, check=True, **kw):
    p = subprocess.run(cmd, capture_output=True, text=True, **kw)
    if check and p.returncode != 0:
        raise WorldError("%s: exit %d: %s" % (" ".join(cmd), p.returncode, p.stderr.strip()))
    return p


def _kill_group(proc, grace=5.0):
    """SIGTERM the process group of `proc` (a process we started with
    start_new_session), wait, then SIGKILL."""
    if proc is None or proc.poll() is not None:
        return
    try:
        os.killpg(proc.pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    try:
        proc.wait(grace)
    except subprocess.TimeoutExpired:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        proc.wait(5)


def _wait_ready_line(proc, what, deadline_s=10.0):
    """Waits for a server started with stdout=PIPE to print "ready"."""
    deadline = time.monotonic() + deadline_s
    buf = b""
    fd = proc.stdout.fileno()
    while time.monotonic() < deadline:
        r, _, _ = select.select([fd], [], [], max(0.0, deadline - time.monotonic()))
        if not r:
            break
        chunk = os.read(fd, 4096)
        if not chunk:
            break
        buf += chunk
        if b"ready" in buf:
            return
    raise WorldError("%s did not become ready (exit %s)" % (what, proc.poll()))


# ---------------------------------------------------------------- cgroups

def _cgroup_hierarchies():
    """[(mountpoint, own path)] for every cgroup hierarchy this process is in."""
    own = {}
    with open("/proc/self/cgroup") as f:
        for line in f:
            hid, ctrls, path = line.rstrip("\n").split(":", 2)
            own[(hid, ctrls)] = path
    result = []
    with open("/proc/self/mountinfo") as f:
        for line in f:
            left, right = line.split(" - ", 1)
            mnt = left.split()[4]
            fstype, _src, opts = right.split()[:3]
            if fstype == "cgroup2":
                for (hid, _c), path in own.items():
                    if hid == "0":
                        result.append((mnt, path))
            elif fstype == "cgroup":
                optset = set(opts.split(","))
                for (hid, ctrls), path in own.items():
                    if hid != "0" and ctrls and set(ctrls.split(",")) <= optset:
                        result.append((mnt, path))
    seen, uniq = set(), []
    for m, p in result:
        if m not in seen:
            seen.add(m)
            uniq.append((m, p))
    return uniq


def cgroup_mounts():
    """Mount points of every cgroup filesystem the host has."""
    mounts = []
    with open("/proc/self/mountinfo") as f:
        for line in f:
            left, right = line.split(" - ", 1)
            if right.split()[0] in ("cgroup", "cgroup2"):
                mounts.append(left.split()[4])
    return mounts


# ---------------------------------------------------------------- RPC

class RpcConn:
    """A raw JSON-RPC 2.0 client: one message per line over the Unix socket.
    Notifications that arrive while waiting for a response are kept in
    `notes` in arrival order."""

    def __init__(self, path, timeout=60.0):
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM | socket.SOCK_CLOEXEC)
        self.sock.settimeout(timeout)
        self.sock.connect(path)
        self.buf = b""
        self.notes = []
        self.responses = {}
        self.next_id = 1
        self.timeout = timeout
        self.methods = {}  # request id -> method, to name a request not answered in time

    def close(self):
        try:
            self.sock.close()
        except OSError:
            pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def send_raw(self, data):
        self.sock.sendall(data)

    def send(self, obj):
        self.send_raw(json.dumps(obj).encode() + b"\n")

    def read_msg(self, timeout=None):
        """Next message (dict or whatever JSON the line holds); None on EOF."""
        deadline = time.monotonic() + (timeout if timeout is not None else self.timeout)
        while b"\n" not in self.buf:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError("no message from sandboxd in time")
            self.sock.settimeout(left)
            try:
                chunk = self.sock.recv(1 << 16)
            except socket.timeout:
                raise TimeoutError("no message from sandboxd in time") from None
            if not chunk:
                return None
            self.buf += chunk
        line, self.buf = self.buf.split(b"\n", 1)
        return json.loads(line)

    def start(self, method, params=None):
        """Sends a request; returns its id."""
        rid = self.next_id
        self.next_id += 1
        msg = {"jsonrpc": "2.0", "id": rid, "method": method}
        self.methods[rid] = method
        if params is not None:
            msg["params"] = params
        self.send(msg)
        return rid

    def wait(self, rid, timeout=None):
        """The response to request `rid` (the whole message)."""
        secs = timeout if timeout is not None else self.timeout
        deadline = time.monotonic() + secs
        while rid not in self.responses:
            try:
                msg = self.read_msg(max(0.001, deadline - time.monotonic()))
            except TimeoutError:
                raise TimeoutError("no answer to request %s (%s) in %gs" % (rid, self.methods.get(rid, "?"), secs)) \
                    from None
            if msg is None:
                raise ConnectionError("sandboxd closed the connection")
            if isinstance(msg, dict) and "id" in msg and ("result" in msg or "error" in msg):
                self.responses[msg["id"]] = msg
            else:
                self.notes.append(msg)
        return self.responses.pop(rid)

    def call(self, method, params=None, timeout=None):
        return self.wait(self.start(method, params), timeout)

    def result(self, method, params=None, timeout=None):
        msg = self.call(method, params, timeout)
        if "error" in msg:
            raise WorldError("%s: %s" % (method, json.dumps(msg["error"])))
        return msg["result"]

    def wait_note(self, pred, timeout=None):
        """Waits for (and removes) the first notification matching pred."""
        secs = timeout if timeout is not None else self.timeout
        deadline = time.monotonic() + secs
        while True:
            for i, n in enumerate(self.notes):
                if pred(n):
                    return self.notes.pop(i)
            try:
                msg = self.read_msg(max(0.001, deadline - time.monotonic()))
            except TimeoutError:
                raise TimeoutError("no awaited notification in %gs; last ones: %s"
                                   % (secs, json.dumps(self.notes[-5:])[:800])) from None
            if msg is None:
                raise ConnectionError("sandboxd closed the connection")
            if isinstance(msg, dict) and "id" in msg and ("result" in msg or "error" in msg):
                self.responses[msg["id"]] = msg
            else:
                self.notes.append(msg)

    def output(self, cmd_id, stream="stdout"):
        """Concatenated command.output data seen so far for cmd_id."""
        data = b""
        for n in self.notes:
            p = n.get("params", {}) if isinstance(n, dict) else {}
            if n.get("method") == "command.output" and p.get("cmdId") == cmd_id \
                    and p.get("stream") == stream:
                data += base64.b64decode(p.get("data", ""))
        return data


# ---------------------------------------------------------------- daemon

# The test world's default resources.diskMiB (daemon.json diskMiB).
WORLD_DISK_MIB = 128


class Daemon:
    """One sandboxd process running in the world host namespace."""

    def __init__(self, world, config=None, tag="d", netns=None, state_dir=None):
        """`netns` (a name under /run/netns) defaults to the world host
        namespace; `state_dir` to a fresh one of this daemon's own."""
        self.world = world
        self.netns = netns or world.host_ns
        self.dir = tempfile.mkdtemp(prefix="sandboxd-%s-" % tag, dir=world.tmp)
        # As /var/lib and /run are: traversable by everyone (sandboxd drops
        # to the sandbox user's fsuid for some source work).
        os.chmod(self.dir, 0o755)
        self.socket = os.path.join(self.dir, "sandboxd.sock")
        self.state_dir = state_dir or os.path.join(self.dir, "state")
        self.run_dir = os.path.join(self.dir, "run")
        self.log_path = os.path.join(self.dir, "sandboxd.log")
        self.config = config
        self.proc = None
        self.pid = None
        # (src, dst) host files bound over dst in the daemon's own mount
        # namespace only (e.g. an /etc/passwd without some account).
        self.binds = []

    def start(self, deadline_s=20.0, binary=None, env=None):
        """`binary` replaces SANDBOXD for this start (e.g. FAULTS_SANDBOXD),
        `env` adds variables to its environment (e.g. SANDBOXD_FAULT)."""
        binary = binary or SANDBOXD
        # Not `ip netns exec`: it remounts /sys, which hides the cgroup
        # filesystems. Enter the network namespace only, and in a mount
        # namespace of its own (slave: host mounts still propagate in) bind
        # the world's resolv.conf, as `ip netns exec` would.
        resolv = os.path.join(self.world.etc_netns, "resolv.conf")
        argv = ["nsenter", "--net=/run/netns/" + self.netns, "--",
                "unshare", "--mount", "--propagation", "slave", "--",
                "sh", "-c", 'mount --bind "$0" /etc/resolv.conf && ' +
                "".join("mount --bind %s %s && " % (shlex.quote(s), shlex.quote(d)) for s, d in self.binds) +
                'exec "$@"', resolv,
                binary, "--socket", self.socket, "--state-dir", self.state_dir,
                "--run-dir", self.run_dir]
        config = self.config
        if getattr(self.world, "ca_cert", None) and "proxyUpstreamCA" not in (config or {}):
            # The egress proxy verifies the world's HTTPS servers against
            # the world CA (never with verification off).
            config = dict(config or {}, proxyUpstreamCA=self.world.ca_cert)
        if "localSourceRoots" not in (config or {}):
            # Path and file:// sources come only from listed directories:
            # the world's own files and the test caches (hello.tar.gz).
            config = dict(config or {}, localSourceRoots=[self.world.tmp] + list(LOCAL_SOURCE_CACHES))
        elif config["localSourceRoots"] is None:
            # None: the daemon's own default (no key in daemon.json).
            config = {k: v for k, v in config.items() if k != "localSourceRoots"}
        if "diskMiB" not in (config or {}):
            # Every disk image holds all its blocks on the state filesystem
            # (docs/SECURITY.md "Disk space"): the daemon's 10 GiB default
            # would hold ~10 GiB of the host per sandbox of the suite.
            config = dict(config or {}, diskMiB=WORLD_DISK_MIB)
        elif config["diskMiB"] is None:
            # None: the daemon's own default (no key in daemon.json).
            config = {k: v for k, v in config.items() if k != "diskMiB"}
        mode = os.environ.get("SANDBOXD_TEST_USERNS")
        if mode in ("0", "1") and "userns" not in (config or {}):
            # The suite's mode (docs/SECURITY.md §3.9): 1 user namespaces
            # by default (as an unset variable, but failing where the host
            # cannot), 0 without (the sandbox user is sandboxd-user). A
            # test that sets "userns" itself keeps its own choice.
            config = dict(config or {}, userns=(mode == "1"))
        if "SANDBOX_INIT" in os.environ or binary != SANDBOXD:
            # A sandboxd outside build/ (installed, or the ASan build) is told
            # which sandbox-init to run.
            config = dict(config or {}, initPath=SANDBOX_INIT)
        if config is not None:
            cfg = os.path.join(self.dir, "daemon.json")
            with open(cfg, "w") as f:
                json.dump(config, f)
            argv += ["--config", cfg]
        if not os.path.isfile(binary) or not os.access(binary, os.X_OK):
            raise WorldError("%s is not built" % binary)
        log = open(self.log_path, "ab")
        cg = self.world.cgroup_dirs
        self.proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=log, stderr=log,
                                     start_new_session=True, env=dict(os.environ, **(env or {})),
                                     preexec_fn=lambda: _join_cgroups(cg))
        log.close()
        self.pid = self.proc.pid
        deadline = time.monotonic() + deadline_s
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise WorldError("sandboxd exited with %s at start:\n%s"
                                 % (self.proc.returncode, self.log_tail()))
            try:
                s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
                s.connect(self.socket)
                s.close()
            except OSError:
                time.sleep(0.05)
                continue
            # The daemon binds its RPC socket first and its metrics
            # endpoint right after (it says READY=1 only then): a test
            # that scrapes at once must find it. Not found by the deadline
            # (a test that makes it fail), the daemon is ready as it is.
            metrics = (config or {}).get("metricsSocket") or os.path.join(self.run_dir, "metrics.sock")
            while (config or {}).get("metrics", True) and not os.path.exists(metrics) \
                    and time.monotonic() < deadline and self.proc.poll() is None:
                time.sleep(0.05)
            return self
        self.stop()
        raise WorldError("sandboxd socket did not accept within %.0fs:\n%s"
                         % (deadline_s, self.log_tail()))

    def stop(self, grace=15.0):
        """SIGTERM by pid, wait, SIGKILL after the deadline. Returns the exit status."""
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            try:
                os.kill(self.proc.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
            try:
                self.proc.wait(grace)
            except subprocess.TimeoutExpired:
                os.kill(self.proc.pid, signal.SIGKILL)
                self.proc.wait(10)
        return self.proc.returncode

    def alive(self):
        return self.proc is not None and self.proc.poll() is None

    def log_tail(self, n=60):
        try:
            with open(self.log_path, "rb") as f:
                lines = f.read().decode(errors="replace").splitlines()
            return "\n".join(lines[-n:])
        except OSError:
            return "(no log)"

    def ctl(self, *args, input=None, check=None, timeout=120, env=None, binary=False):
        """Runs build/sandboxctl --socket S ARGS. Returns (code, stdout, stderr);
        with check=True a non-zero exit raises, with check=N a different exit
        raises."""
        argv = [SANDBOXCTL, "--socket", self.socket] + [str(a) for a in args]
        e = dict(os.environ)
        e.pop("SANDBOXD_SOCKET", None)
        if env:
            e.update(env)
        if isinstance(input, str):
            input = input.encode()
        p = subprocess.run(argv, input=input, capture_output=True, timeout=timeout, env=e,
                           stdin=None if input is not None else subprocess.DEVNULL)
        out, err = p.stdout, p.stderr
        if not binary:
            out, err = out.decode(errors="replace"), err.decode(errors="replace")
        if check is True and p.returncode != 0 or \
                (check is not None and check is not True and check is not False
                 and p.returncode != check):
            raise WorldError("sandboxctl %s: exit %d\nstdout: %s\nstderr: %s"
                             % (" ".join(map(str, args)), p.returncode, out, err))
        return p.returncode, out, err

    def connect(self, timeout=60.0):
        return RpcConn(self.socket, timeout)

    def rpc(self, method, params=None, timeout=60.0):
        """One request on a fresh connection; returns the whole response message."""
        with self.connect(timeout) as c:
            return c.call(method, params, timeout)

    def rpc_result(self, method, params=None, timeout=60.0):
        with self.connect(timeout) as c:
            return c.result(method, params, timeout)


def _ensure_plain_user():
    """The host account sandboxd runs the sandbox user of sandboxes without
    a user namespace as (sandboxd(8)), made as the package's sysusers.d
    file makes it (as scripts/install-deps does): a system account that,
    like one a package install adds, stays."""
    try:
        pwd.getpwnam(PLAIN_USER)
        return
    except KeyError:
        pass
    with open(os.path.join(REPO, "systemd", "sandboxd.sysusers")) as f:
        line = [x for x in f.read().splitlines() if x.startswith("u %s " % PLAIN_USER)][0]
    _run(["systemd-sysusers", "--inline", line])
    pwd.getpwnam(PLAIN_USER)


def plain_user():
    """(uid, gid) of the sandbox user of sandboxes without a user namespace."""
    pw = pwd.getpwnam(PLAIN_USER)
    return pw.pw_uid, pw.pw_gid


def _join_cgroups(dirs):
    pid = str(os.getpid())
    for d in dirs:
        try:
            with open(os.path.join(d, "cgroup.procs"), "w") as f:
                f.write(pid)
        except OSError:
            pass


# ---------------------------------------------------------------- world

_LIVE = []


def _teardown_all():
    for w in list(_LIVE):
        w.close()


def _on_signal(signum, frame):
    """SIGINT/SIGTERM: tear every world down and end the process. A second
    signal must not cut the teardown short (a signal sent to the whole
    process group arrives twice over), and no test's `except BaseException`
    may swallow the end: a run that went on after its world was half torn
    down left namespaces, a loop device and a session behind."""
    for s in (signal.SIGINT, signal.SIGTERM):
        signal.signal(s, signal.SIG_IGN)
    signal.alarm(0)
    try:
        _teardown_all()
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(128 + signum)


atexit.register(_teardown_all)


class World:
    def __init__(self, quiet=True):
        self.id = secrets.token_hex(3)
        self.host_ns = "sbxw-host-" + self.id
        self.net_ns = "sbxw-net-" + self.id
        self.tmp = None
        self.procs = []          # (name, Popen) started in the namespaces
        self.daemon = None
        self.daemons = []
        self.cgroup_dirs = []
        self.netns_made = []
        self.etc_netns = None
        self.quiet = quiet
        self.git_head = None
        self.closed = False

    # --- setup
    def __enter__(self):
        self.open()
        return self

    def __exit__(self, *exc):
        self.close()

    def open(self):
        _LIVE.append(self)
        for s in (signal.SIGINT, signal.SIGTERM):
            if signal.getsignal(s) in (signal.SIG_DFL, signal.default_int_handler):
                signal.signal(s, _on_signal)
        try:
            _ensure_plain_user()
            self.tmp = tempfile.mkdtemp(prefix="sbxw-%s-" % self.id)
            os.chmod(self.tmp, 0o755)
            self._make_netns()
            self._make_cgroups()
            self._start_dns()
            self._make_git()
            self._start_http()
            self._make_world_ca()
            self._start_web()
            self.inet_listener = self.start_listener("net", HTTP_ADDR, LISTEN_PORT)
            self.host_listener = self.start_listener("host", HOST_ADDR, LISTEN_PORT)
            self.pub_api_listener = self.start_listener("net", PUB_API_ADDR, LISTEN_PORT)
            self.pub_other_listener = self.start_listener("net", PUB_OTHER_ADDR, LISTEN_PORT)
            self.pub6_api_listener = self.start_listener("net", PUB6_API_ADDR, LISTEN_PORT)
            self.pub6_other_listener = self.start_listener("net", PUB6_OTHER_ADDR, LISTEN_PORT)
            self.host6_listener = self.start_listener("host", HOST_ADDR6, LISTEN_PORT)
        except BaseException:
            self.close()
            raise
        return self

    def _make_netns(self):
        for ns in (self.host_ns, self.net_ns):
            _run(["ip", "netns", "add", ns])
            self.netns_made.append(ns)
        H, N = self.host_ns, self.net_ns
        # Created inside the namespaces: the veth never exists in the host's.
        _run(["ip", "-n", H, "link", "add", "wan0", "type", "veth", "peer", "name", "inet0",
              "netns", N])
        _run(["ip", "-n", H, "link", "set", "lo", "up"])
        _run(["ip", "-n", N, "link", "set", "lo", "up"])
        _run(["ip", "-n", H, "addr", "add", HOST_ADDR + "/24", "dev", "wan0"])
        for a in (INET_ADDR, GIT_ADDR, HTTP_ADDR, DNS_ADDR, SPARE_ADDR):
            _run(["ip", "-n", N, "addr", "add", a + "/24", "dev", "inet0"])
        for a in (PUB_API_ADDR, PUB_OTHER_ADDR, PUB_FORWARD_ADDR, PUB_ATTACKER_ADDR, PUB_GIT_ADDR):
            _run(["ip", "-n", N, "addr", "add", a + "/24", "dev", "inet0"])
        for ns in (H, N):
            for conf in ("all", "default", "lo"):
                _run(["ip", "netns", "exec", ns, "sysctl", "-qw", "net.ipv6.conf.%s.disable_ipv6=0" % conf])
            _run(["ip", "netns", "exec", ns, "sysctl", "-qw", "net.ipv6.conf.all.accept_dad=0"])
            _run(["ip", "netns", "exec", ns, "sysctl", "-qw", "net.ipv6.conf.default.accept_dad=0"])
        _run(["ip", "-n", H, "addr", "add", HOST_ADDR6 + "/64", "dev", "wan0", "nodad"])
        _run(["ip", "-n", N, "addr", "add", INET_ADDR6 + "/64", "dev", "inet0", "nodad"])
        for a in (PUB6_API_ADDR, PUB6_OTHER_ADDR, PUB6_ATTACKER_ADDR):
            _run(["ip", "-n", N, "addr", "add", a + "/64", "dev", "inet0", "nodad"])
        _run(["ip", "-n", H, "link", "set", "wan0", "up"])
        _run(["ip", "-n", N, "link", "set", "inet0", "up"])
        _run(["ip", "-n", H, "route", "add", "default", "via", INET_ADDR])
        _run(["ip", "-n", H, "-6", "route", "add", "default", "via", INET_ADDR6, "dev", "wan0"])
        self.etc_netns = os.path.join("/etc/netns", H)
        os.makedirs(self.etc_netns, exist_ok=True)
        with open(os.path.join(self.etc_netns, "resolv.conf"), "w") as f:
            f.write("nameserver %s\n" % DNS_ADDR)

    def _make_cgroups(self):
        """A child cgroup per hierarchy for this world's daemons (as systemd's
        Delegate=yes gives a service), so sessions nest under it and no other
        sandboxd on the machine sees them as its own."""
        for mnt, own in _cgroup_hierarchies():
            d = os.path.join(mnt, own.lstrip("/"), "sbxw-" + self.id)
            try:
                os.mkdir(d)
            except OSError:
                continue
            self.cgroup_dirs.append(d)
            parent = os.path.dirname(d)
            for knob in ("cpuset.cpus", "cpuset.mems"):
                src = os.path.join(parent, knob)
                if os.path.exists(src):
                    try:
                        with open(src) as f:
                            val = f.read().strip()
                        with open(os.path.join(d, knob), "w") as f:
                            f.write(val)
                    except OSError:
                        pass

    def _spawn(self, name, ns, argv, ready=None):
        ns_name = self.host_ns if ns == "host" else self.net_ns
        log = open(os.path.join(self.tmp, name + ".log"), "ab")
        p = subprocess.Popen(["ip", "netns", "exec", ns_name] + argv,
                             stdin=subprocess.DEVNULL,
                             stdout=subprocess.PIPE if ready else log, stderr=log,
                             start_new_session=True)
        log.close()
        self.procs.append((name, p))
        if ready:
            _wait_ready_line(p, name)
        return p

    def _start_dns(self):
        self._spawn("dnsmasq", "net", [
            "dnsmasq", "--no-daemon", "--conf-file=/dev/null", "--no-resolv", "--no-hosts",
            "--pid-file=", "--listen-address=" + DNS_ADDR, "--bind-interfaces",
            "--log-facility=-", "--log-queries",
            "--address=/git.test/" + GIT_ADDR, "--address=/http.test/" + HTTP_ADDR,
            "--address=/blocked.test/" + SPARE_ADDR, "--address=/spare.test/" + SPARE_ADDR,
            "--address=/api.public.test/" + PUB_API_ADDR, "--address=/other.public.test/" + PUB_OTHER_ADDR,
            "--address=/metadata.public.test/169.254.169.254",
            # Names for the policy tests (test_policy_rules.py): an allowed
            # name with a private answer, one whose answer mixes a public and
            # a loopback address, a name two labels below public.test, and
            # the apex public.test itself (host-record: that name only, so
            # other names under public.test stay unanswered).
            "--address=/private.public.test/" + PRIVATE_ANSWER_ADDR,
            "--host-record=mixed.public.test," + PUB_API_ADDR,
            "--host-record=mixed.public.test,127.0.0.1",
            "--host-record=a.b.public.test," + PUB_OTHER_ADDR,
            "--host-record=public.test," + PUB_API_ADDR,
            # The egress proxy's upstreams (test_proxy.py).
            "--address=/allowed.test/" + PUB_API_ADDR,
            "--address=/forward.public.test/" + PUB_FORWARD_ADDR,
            "--address=/attacker.test/" + PUB_ATTACKER_ADDR,
            "--address=/git.public.test/" + PUB_GIT_ADDR,
            "--address=/api6.public.test/" + PUB6_API_ADDR,
            "--host-record=dual.public.test," + PUB_API_ADDR + "," + PUB6_API_ADDR,
            "--address=/other6.public.test/" + PUB6_OTHER_ADDR,
            # Two more IPv6-only names of the echo servers (test_policy_live_proxy.py).
            "--address=/keep6.public.test/" + PUB6_API_ADDR,
            "--address=/gone6.public.test/" + PUB6_API_ADDR,
            "--address=/loop6.public.test/::1",
            "--address=/mapped6.public.test/::ffff:127.0.0.1",
            "--address=/meta6.public.test/::ffff:169.254.169.254",
            "--address=/nat64meta.public.test/64:ff9b::a9fe:a9fe",
            "--address=/sixtofour.public.test/2002:7f00:1::1",
            "--address=/ll6.public.test/fe80::1",
            "--address=/ula6.public.test/fd00::1",
            "--host-record=mixed6.public.test," + PUB6_API_ADDR,
            "--host-record=mixed6.public.test,::1",
        ])
        self.wait_until(lambda: GIT_ADDR in self.run_in_host(
            ["getent", "ahostsv4", "git.test"], check=False).stdout, 10, "dnsmasq answers")

    def _make_git(self):
        self.git_dir = os.path.join(self.tmp, "git")
        os.mkdir(self.git_dir)
        self.git_repo = os.path.join(self.git_dir, "sandboxd.git")
        _run(["git", "clone", "-q", "--bare", REPO, self.git_repo])
        self.git_head = _run(["git", "-C", self.git_repo, "rev-parse", "HEAD"]).stdout.strip()
        self._spawn("git-daemon", "net", [
            "git", "daemon", "--export-all", "--base-path=" + self.git_dir, "--reuseaddr",
            "--listen=" + GIT_ADDR, "--port=9418", "--informative-errors", self.git_dir])
        self.wait_tcp("net", GIT_ADDR, 9418)

    def _start_http(self):
        self.http_dir = os.path.join(self.tmp, "www")
        os.mkdir(self.http_dir)
        self.http_log = os.path.join(self.tmp, "http-requests.log")
        open(self.http_log, "w").close()
        self._spawn("http", "net", [sys.executable, SERVERS, "http", HTTP_ADDR, "80",
                                    self.http_dir, self.http_log], ready=True)

    def _make_world_ca(self):
        """The world's CA and one server certificate for every name in
        WORLD_TLS_NAMES (EC P-256, made with the openssl CLI)."""
        d = os.path.join(self.tmp, "pki")
        os.mkdir(d)
        self.ca_cert, ca_key = os.path.join(d, "world-ca.crt"), os.path.join(d, "world-ca.key")
        self.server_cert, self.server_key = os.path.join(d, "server.crt"), os.path.join(d, "server.key")
        csr, ext = os.path.join(d, "server.csr"), os.path.join(d, "server.ext")
        ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]
        _run(["openssl", "req", "-x509", "-days", "2", *ec, "-keyout", ca_key, "-out", self.ca_cert,
              "-subj", "/CN=sandboxd test world CA", "-addext", "basicConstraints=critical,CA:TRUE",
              "-addext", "keyUsage=critical,keyCertSign,cRLSign"])
        _run(["openssl", "req", "-new", *ec, "-keyout", self.server_key, "-out", csr,
              "-subj", "/CN=" + WORLD_TLS_NAMES[0]])
        with open(ext, "w") as f:
            f.write("basicConstraints=CA:FALSE\nextendedKeyUsage=serverAuth\nsubjectAltName=%s\n"
                    % ",".join("DNS:" + n for n in WORLD_TLS_NAMES))
        _run(["openssl", "x509", "-req", "-in", csr, "-CA", self.ca_cert, "-CAkey", ca_key,
              "-CAcreateserial", "-days", "2", "-extfile", ext, "-out", self.server_cert])
        os.chmod(self.server_key, 0o644)  # read by the servers only, in this world's tmp

    def _start_web(self):
        """The HTTPS world of the egress proxy: echo servers, the forward
        server, the attacker's listeners and git over HTTPS, in one process."""
        subprocess.run(["git", "-C", self.git_repo, "update-server-info"], check=True, capture_output=True)
        self.web_logs = {k: os.path.join(self.tmp, "web-%s.log" % k)
                         for k in ("api", "forward", "attacker", "git")}
        for path in self.web_logs.values():
            open(path, "w").close()
        tls = {"cert": self.server_cert, "key": self.server_key}
        specs = [
            dict(kind="echo", addr=PUB_API_ADDR, port=443, log=self.web_logs["api"], **tls),
            dict(kind="echo", addr=PUB_API_ADDR, port=80, log=self.web_logs["api"]),
            dict(kind="echo", addr=PUB6_API_ADDR, port=443, log=self.web_logs["api"], **tls),
            dict(kind="echo", addr=PUB6_API_ADDR, port=80, log=self.web_logs["api"]),
            dict(kind="tcp", addr=PUB6_ATTACKER_ADDR, port=80, log=self.web_logs["attacker"]),
            dict(kind="tcp", addr=PUB6_ATTACKER_ADDR, port=443, log=self.web_logs["attacker"]),
            dict(kind="echo", addr=PUB_FORWARD_ADDR, port=443, log=self.web_logs["forward"], **tls),
            dict(kind="tcp", addr=PUB_ATTACKER_ADDR, port=80, log=self.web_logs["attacker"]),
            dict(kind="tcp", addr=PUB_ATTACKER_ADDR, port=443, log=self.web_logs["attacker"]),
            dict(kind="static", addr=PUB_GIT_ADDR, port=443, log=self.web_logs["git"], dir=self.git_dir, **tls),
        ]
        cfg = os.path.join(self.tmp, "web.json")
        with open(cfg, "w") as f:
            json.dump(specs, f)
        self._spawn("web", "net", [sys.executable, SERVERS, "web", cfg], ready=True)

    def web_log(self, which):
        """Lines logged so far by a web server of the world ("api",
        "forward", "git": JSON objects {method, path, headers}; "attacker":
        text lines, one per connection)."""
        with open(self.web_logs[which]) as f:
            lines = [l for l in f.read().splitlines() if l.strip()]
        return lines if which == "attacker" else [json.loads(l) for l in lines]

    @property
    def git_https_url(self):
        return "https://git.public.test/sandboxd.git"

    def start_listener(self, ns, addr, port):
        """A TCP accept/echo listener in `ns` ("host" or "net"); returns a
        Listener whose connections() lists the peers seen so far."""
        log = os.path.join(self.tmp, "listen-%s-%s-%d.log" % (ns, addr, port))
        open(log, "w").close()
        self._spawn("listen-%s-%d" % (addr, port), ns,
                    [sys.executable, SERVERS, "tcp", addr, str(port), log], ready=True)
        return Listener(addr, port, log)

    def stall_server(self):
        """A server of the fake internet that answers HTTP 200 and then
        stalls (servers.py stall), started once per world. Returns
        (base_url, log_lines): base_url + "/any/path" is a URL whose download
        never ends; log_lines() lists "open PATH" / "closed PATH" lines."""
        port = 8089
        log = os.path.join(self.tmp, "stall.log")
        if not getattr(self, "_stall_started", False):
            open(log, "w").close()
            self._spawn("stall", "net", [sys.executable, SERVERS, "stall", HTTP_ADDR, str(port), log], ready=True)
            self._stall_started = True

        def lines():
            with open(log) as f:
                return [l for l in f.read().splitlines() if l.strip()]
        return "http://%s:%d" % (HTTP_ADDR, port), lines

    # --- helpers
    def name(self, tag):
        """A sandbox name unique to this run: t<world id>-<n>-<tag>."""
        self._n = getattr(self, "_n", 0) + 1
        return ("t%s-%d-%s" % (self.id, self._n, tag)).lower()[:63]

    @property
    def git_url(self):
        return "git://%s/sandboxd.git" % GIT_ADDR

    def http_url(self, name):
        return "http://%s/%s" % (HTTP_ADDR, name)

    def add_http_file(self, name, data):
        path = os.path.join(self.http_dir, name)
        with open(path, "wb") as f:
            f.write(data)
        return self.http_url(name)

    def run_in_host(self, cmd, check=False, timeout=60, input=None):
        """Runs argv `cmd` in the world host namespace; CompletedProcess (text)."""
        return subprocess.run(["ip", "netns", "exec", self.host_ns] + list(cmd),
                              capture_output=True, text=True, timeout=timeout, check=check,
                              input=input, stdin=None if input is not None else subprocess.DEVNULL)

    def run_in_net(self, cmd, check=False, timeout=60):
        return subprocess.run(["ip", "netns", "exec", self.net_ns] + list(cmd),
                              capture_output=True, text=True, timeout=timeout, check=check,
                              stdin=subprocess.DEVNULL)

    def wait_tcp(self, ns, addr, port, secs=10):
        run = self.run_in_host if ns == "host" else self.run_in_net
        if run([sys.executable, SERVERS, "wait-tcp", addr, str(port), str(secs)]).returncode:
            raise WorldError("%s:%d did not accept within %ss" % (addr, port, secs))

    @staticmethod
    def wait_until(pred, secs, what, interval=0.05):
        deadline = time.monotonic() + secs
        while True:
            v = pred()
            if v:
                return v
            if time.monotonic() > deadline:
                raise WorldError("timed out after %ss waiting for %s" % (secs, what))
            time.sleep(interval)

    @contextlib.contextmanager
    def neighbour(self, pool="10.201.0.0/16"):
        """A namespace on the world host's upstream side that routes the
        sandbox pool `pool` via the world host, as a machine on the same
        segment or an upstream router would (`ip route add POOL via HOST`):
        its own veth to the internet namespace (NEIGHBOUR_ADDR, default
        route via NEIGHBOUR_GW), and the internet namespace forwarding for it
        with a route to `pool` via HOST_ADDR. Yields a Neighbour (run(argv)
        runs in it). Everything is removed on exit, and at world teardown if
        that never comes (the namespace is in netns_made)."""
        ns = "sbxw-nb-" + self.id
        N = self.net_ns
        fwd_path = ["sysctl", "-n", "net.ipv4.ip_forward"]
        old_fwd = _run(["ip", "netns", "exec", N] + fwd_path).stdout.strip() or "0"
        routed = False
        _run(["ip", "netns", "add", ns])
        self.netns_made.append(ns)
        try:
            _run(["ip", "-n", ns, "link", "add", "eth0", "type", "veth", "peer", "name", "nb0", "netns", N])
            _run(["ip", "-n", ns, "link", "set", "lo", "up"])
            _run(["ip", "-n", ns, "addr", "add", NEIGHBOUR_ADDR + "/24", "dev", "eth0"])
            _run(["ip", "-n", ns, "link", "set", "eth0", "up"])
            _run(["ip", "-n", ns, "route", "add", "default", "via", NEIGHBOUR_GW])
            _run(["ip", "-n", N, "addr", "add", NEIGHBOUR_GW + "/24", "dev", "nb0"])
            _run(["ip", "-n", N, "link", "set", "nb0", "up"])
            _run(["ip", "netns", "exec", N, "sysctl", "-q", "-w", "net.ipv4.ip_forward=1"])
            _run(["ip", "-n", N, "route", "add", pool, "via", HOST_ADDR])
            routed = True
            yield Neighbour(ns)
        finally:
            if routed:
                _run(["ip", "-n", N, "route", "del", pool, "via", HOST_ADDR], check=False)
            _run(["ip", "netns", "exec", N, "sysctl", "-q", "-w", "net.ipv4.ip_forward=" + old_fwd], check=False)
            # Deleting the link removes both ends now; a namespace's own
            # devices go only when the kernel's cleanup of it runs, later.
            _run(["ip", "-n", N, "link", "del", "nb0"], check=False)
            _run(["ip", "netns", "del", ns], check=False)
            if ns in self.netns_made:
                self.netns_made.remove(ns)

    # --- sandboxd
    def start_sandboxd(self, config=None, tag="d", env=None):
        d = Daemon(self, config, tag)
        self.daemons.append(d)
        d.start(env=env)
        self.daemon = d
        return d

    def add_sandboxd(self, config=None, tag="d", netns=None, state_dir=None):
        """A further Daemon of this world, not started and not made
        world.daemon (for tests of several daemons side by side); stopped at
        world teardown like the others. Call .start() on it."""
        d = Daemon(self, config, tag, netns, state_dir)
        self.daemons.append(d)
        return d

    def stop_sandboxd(self, d=None):
        d = d or self.daemon
        if d is None:
            return None
        rc = d.stop()
        if d is self.daemon:
            self.daemon = None
        return rc

    def ctl(self, *args, **kw):
        return self.daemon.ctl(*args, **kw)

    def rpc(self, method, params=None, timeout=60.0):
        return self.daemon.rpc(method, params, timeout)

    def rpc_result(self, method, params=None, timeout=60.0):
        return self.daemon.rpc_result(method, params, timeout)

    # --- teardown
    def close(self):
        if self.closed:
            return
        self.closed = True
        errors = []

        def step(fn, *a):
            try:
                fn(*a)
            except Exception as e:  # keep tearing down; report at the end
                errors.append("%s: %s" % (getattr(fn, "__name__", fn), e))

        for d in self.daemons:
            step(d.stop)
        for _name, p in reversed(self.procs):
            step(_kill_group, p)
        step(self._kill_cgroup_leftovers)
        for d in reversed(self.cgroup_dirs):
            step(_rmdir_tree, d)
        for ns in reversed(self.netns_made):
            step(_run, ["ip", "netns", "del", ns])
        if self.etc_netns:
            step(shutil.rmtree, self.etc_netns, True)
        if self.tmp:
            step(self._remove_tmp)
        if self in _LIVE:
            _LIVE.remove(self)
        if errors and not self.quiet:
            print("world teardown: " + "; ".join(errors), file=sys.stderr)
        self.teardown_errors = errors

    def _kill_cgroup_leftovers(self):
        """Anything still in this world's cgroups was started by its daemons."""
        for d in self.cgroup_dirs:
            pids = _cgroup_pids(d)
            for pid in pids:
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            if pids:
                self.wait_until(lambda: not _cgroup_pids(d), 10, "cgroup %s to empty" % d)

    def _remove_tmp(self):
        # Leftover mounts below tmp (a leaking daemon) must go before rm -r.
        for mp in sorted(mounts_below(self.tmp), key=len, reverse=True):
            subprocess.run(["umount", "-l", mp], capture_output=True)
        shutil.rmtree(self.tmp, ignore_errors=True)


class Neighbour:
    """A namespace made by World.neighbour()."""

    def __init__(self, ns):
        self.ns, self.addr = ns, NEIGHBOUR_ADDR

    def run(self, cmd, check=False, timeout=60):
        return subprocess.run(["ip", "netns", "exec", self.ns] + list(cmd), capture_output=True, text=True,
                              timeout=timeout, check=check, stdin=subprocess.DEVNULL)


class Listener:
    def __init__(self, addr, port, log):
        self.addr, self.port, self.log = addr, port, log

    def connections(self):
        with open(self.log) as f:
            return [l.strip() for l in f if l.strip()]


def walk(top, topdown=True):
    """os.walk(top, topdown) without recursion: yields (dirpath, dirnames,
    filenames) for top and every directory below it, symlinks not followed
    (a symlink to a directory is listed in dirnames, as os.walk does, but
    not entered). With topdown, pruning dirnames in place prunes the walk.
    Unreadable directories are skipped. Python's os.walk recurses once per
    level and fails past about a thousand; a tree a sandbox made may be
    that deep."""
    stack = [top]
    while stack:
        item = stack.pop()
        if isinstance(item, tuple):  # bottom-up: its subdirectories are done
            yield item
            continue
        try:
            with os.scandir(item) as it:
                entries = list(it)
        except OSError:
            continue
        dirs, files, enter = [], [], set()
        for e in entries:
            try:
                is_dir = e.is_dir()
            except OSError:
                is_dir = False
            if is_dir:
                dirs.append(e.name)
                try:
                    if not e.is_symlink():
                        enter.add(e.name)
                except OSError:
                    pass
            else:
                files.append(e.name)
        if topdown:
            yield item, dirs, files
        else:
            stack.append((item, dirs, files))
        stack += [os.path.join(item, d) for d in reversed(dirs) if d in enter]


def _cgroup_pids(d):
    pids = []
    for root, _dirs, files in walk(d):
        if "cgroup.procs" in files:
            try:
                with open(os.path.join(root, "cgroup.procs")) as f:
                    pids += [int(x) for x in f.read().split()]
            except OSError:
                pass
    return pids


def _rmdir_tree(d):
    if not os.path.isdir(d):
        return
    for root, dirs, _files in walk(d, topdown=False):
        for x in dirs:
            os.rmdir(os.path.join(root, x))
    os.rmdir(d)


def mounts_below(path, pid="self"):
    """Mount points (from /proc/PID/mountinfo) at or below `path`."""
    out = []
    try:
        with open("/proc/%s/mountinfo" % pid) as f:
            for line in f:
                mp = line.split()[4].replace("\\040", " ")
                if mp == path or mp.startswith(path.rstrip("/") + "/"):
                    out.append(mp)
    except OSError:
        pass
    return out
