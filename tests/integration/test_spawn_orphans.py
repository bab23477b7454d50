"""Children the daemon clones and that wait before they exec (sandbox-init
in a user namespace waits for its uid/gid maps) hold nothing of the
daemon's while they wait, and do not outlive a daemon killed in that
window: the next daemon starts on the same socket, state and network
namespace, and answers."""
import os
import signal
import threading

import world as W
from common import expect, expect_eq, poll

POINT = "spawn.init_waiting"
# 0-2 /dev/null, the agent socket, the memfd, the sync pipe's read end,
# the write end of the pipe whose EOF tells the daemon the child exec'd
# (libcore/container.c; close-on-exec), and the agent's listening socket
# when there is one.
MAX_FDS = 8


def _children(pid):
    out = set()
    try:
        tasks = os.listdir("/proc/%d/task" % pid)
    except OSError:
        return out
    for t in tasks:
        try:
            with open("/proc/%d/task/%s/children" % (pid, t)) as f:
                out.update(int(x) for x in f.read().split())
        except OSError:
            pass
    return out


def _exe(pid):
    try:
        return os.readlink("/proc/%d/exe" % pid)
    except OSError:
        return None


def _fd_targets(pid):
    d = "/proc/%d/fd" % pid
    out = []
    for fd in os.listdir(d):
        try:
            out.append((int(fd), os.readlink(os.path.join(d, fd))))
        except OSError:
            pass
    return sorted(out)


def _unexeced(pid, daemon_exe):
    """Children of `pid` still running the daemon's own program."""
    return sorted(c for c in _children(pid) if _exe(c) == daemon_exe)


def _alive(pid):
    try:
        with open("/proc/%d/stat" % pid) as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def test_a_child_waiting_for_its_user_namespace_maps_holds_nothing_of_the_daemon_and_dies_with_it(world):
    world.stop_sandboxd()  # one daemon per network namespace
    d = world.add_sandboxd({"userns": True}, tag="orphan")
    d.start(binary=W.FAULTS_SANDBOXD, env={"SANDBOXD_FAULT_STALL": POINT})
    daemon_exe = _exe(d.pid)
    expect(daemon_exe is not None and daemon_exe.endswith("sandboxd"), "daemon pid %s runs %s" % (d.pid, daemon_exe))
    # Two creates, each stalled (on its worker thread) with its child
    # waiting for the go byte: the second is cloned while the first's
    # pipe is open in the daemon.
    done = []

    def create(name):
        try:
            done.append(d.rpc("sandbox.create", {"name": name, "networkPolicy": "deny-all"}, timeout=60))
        except Exception as e:  # the daemon is killed under it
            done.append(e)

    threads = [threading.Thread(target=create, args=(world.name("orph%d" % i),), daemon=True) for i in range(2)]
    for t in threads:
        t.start()
    poll(lambda: len(_unexeced(d.pid, daemon_exe)) >= 2, 30, "two children of the daemon waiting before exec")
    waiting = _unexeced(d.pid, daemon_exe)
    sock_ino = os.stat(d.socket).st_ino
    for c in waiting:
        fds = _fd_targets(c)
        expect(len(fds) <= MAX_FDS, "child %d waiting before exec holds %d fds (at most %d): %s"
               % (c, len(fds), MAX_FDS, fds[:40]))
        held = [t for _fd, t in fds if ".lock" in t or "sandboxd.sock" in t or t == "socket:[%d]" % sock_ino]
        expect_eq(held, [], "locks or API socket held by waiting child %d" % c)
    os.kill(d.pid, signal.SIGKILL)
    d.proc.wait(10)
    poll(lambda: not any(_alive(c) for c in waiting), 10,
         "the waiting children %s gone after the daemon's SIGKILL" % waiting)
    for t in threads:
        t.join(30)
    # The next daemon starts on the same state, socket and namespace, and answers.
    d.start()
    world.daemon = d
    info = d.rpc("daemon.info")
    expect("result" in info, "daemon.info after the restart: %s" % info)


def _pidfd_getfd(pid, fd):
    """A copy of `fd` of process `pid`: the same open file description
    (pidfd_getfd(2)), so its flock(2) is held by this process too."""
    import ctypes
    libc = ctypes.CDLL(None, use_errno=True)
    pidfd = os.pidfd_open(pid)
    try:
        got = libc.syscall(438, pidfd, fd, 0)  # SYS_pidfd_getfd (x86_64)
        if got < 0:
            raise OSError(ctypes.get_errno(), "pidfd_getfd")
        return got
    finally:
        os.close(pidfd)


def test_a_lock_kept_by_a_process_after_its_daemon_died_is_named_at_the_next_start(world):
    """The next daemon's start-up error names the pid that holds the
    network-namespace lock when the daemon that took it is gone."""
    world.stop_sandboxd()  # one daemon per network namespace
    d = world.add_sandboxd(tag="heldlock")
    d.start()
    lock = [fd for fd, t in _fd_targets(d.pid) if t.startswith("/run/sandboxd-netns-")]
    expect_eq(len(lock), 1, "the daemon's network-namespace lock fd")
    held = _pidfd_getfd(d.pid, lock[0])
    try:
        os.kill(d.pid, signal.SIGKILL)
        d.proc.wait(10)
        try:
            d.start()
            started = True
        except W.WorldError as e:
            started = False
            text = str(e)
        expect(not started, "sandboxd started while another process holds the namespace lock")
        expect("held by pid %d" % os.getpid() in text and "kill -9 %d" % os.getpid() in text,
               "the start-up error names the holder:", text[-600:])
    finally:
        os.close(held)
    d.start()
    world.daemon = d
    expect("result" in d.rpc("daemon.info"), "daemon.info once the holder let go")
