"""Containers inside a sandbox (docs/API.md "Containers") and host mounts
from under daemon.json hostMountRoots (docs/SECURITY.md "Host mounts"):
each container has its own root (its runtime below, its own upper), shares
the sandbox's network, runs its commands in its own cgroup with its own
limits, and goes with its delete or the sandbox's."""
import base64
import json
import os
import signal
import socket
import subprocess

import leaks
import world as W
from common import create_rpc, expect, expect_eq, poll, rpc_ok, sandbox_rpc, sh
from test_runtimes import _tiny_rootfs_tar, _write_tmp


def _daemon(world, tag):
    """A daemon whose hostMountRoots is a fresh directory of the world's
    tmp; returns (daemon, root)."""
    root = os.path.join(world.tmp, world.name("hmr"))
    os.makedirs(root)
    world.stop_sandboxd()  # one daemon per network namespace
    d = world.start_sandboxd({"hostMountRoots": [root]}, tag=tag)
    return d, root


def _run(world, name, ctr, script, sudo=False):
    """A command in container ctr: (exitCode, stdout, stderr), or (None,
    "", message) when refused."""
    msg = world.rpc("command.run", {"sandbox": name, "container": ctr, "cmd": "/bin/sh",
                                    "args": ["-c", script], "sudo": sudo, "detached": True}, 120)
    if "error" in msg:
        return None, "", msg["error"]["message"]
    cmd = msg["result"]["cmdId"]
    w = rpc_ok(world, "command.wait", {"cmdId": cmd}, 120)
    logs = rpc_ok(world, "command.logs", {"cmdId": cmd})
    dec = lambda k: base64.b64decode(logs.get(k) or "").decode(errors="replace")
    return w.get("exitCode"), dec("stdout"), dec("stderr")


def _ctr_cgroups(world, sb, ctr):
    """Cgroup directories of container ctr of sandbox sb, every hierarchy."""
    found = []
    for mnt in (getattr(world, "cgroup_dirs", None) or W.cgroup_mounts()):
        for root, dirs, _files in W.walk(mnt):
            if os.path.basename(root) == sb:
                found += [os.path.join(root, x) for x in dirs if x == "ctr-" + ctr]
                dirs[:] = []
            elif root.count("/") - mnt.count("/") > 7:
                dirs[:] = []
    return found


def _ctr_dirs(d, sb, ctr):
    """The container's directories in the daemon's state (its upper), seen
    through the daemon's mount namespace (the sandbox's disk is mounted
    there)."""
    top = "/proc/%d/root%s" % (d.proc.pid, d.state_dir)
    return [r for r, _d, _f in os.walk(top) if r.endswith("/containers/" + ctr) and "/" + sb + "/" in r + "/"]


def _err(world, method, params):
    msg = world.rpc(method, params, 120)
    expect("error" in msg, "%s refused" % method, json.dumps(msg)[:300])
    return msg["error"]


def _import(world, tag):
    rt = world.name(tag)
    path = _write_tmp(world, _tiny_rootfs_tar(rt))
    code, out, err = world.ctl("runtime", "import", rt, path)
    expect_eq(code, 0, "runtime import (%s)" % err.strip())
    return rt


def _import_with_link(world, tag):
    """A runtime like _import's with var/run a symlink to /run (as Debian
    images have it)."""
    import io
    import tarfile
    rt = world.name(tag)
    src = tarfile.open(fileobj=io.BytesIO(_tiny_rootfs_tar(rt)), mode="r:gz")
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as t:
        for m in src.getmembers():
            t.addfile(m, src.extractfile(m) if m.isfile() else None)
        for name in ("./run", "./var"):
            ti = tarfile.TarInfo(name)
            ti.type, ti.mode = tarfile.DIRTYPE, 0o755
            t.addfile(ti)
        ti = tarfile.TarInfo("./var/run")
        ti.type, ti.linkname = tarfile.SYMTYPE, "/run"
        t.addfile(ti)
    path = _write_tmp(world, buf.getvalue())
    code, out, err = world.ctl("runtime", "import", rt, path)
    expect_eq(code, 0, "runtime import (%s)" % err.strip())
    return rt


def _modes():
    return [True, False] if os.environ.get("SANDBOXD_TEST_USERNS", "1") != "0" else [False]


def _body(world, d, root, userns):
    rt_a, rt_b = _import(world, "cra"), _import(world, "crb")
    pod = os.path.join(root, world.name("pod"))
    cm = os.path.join(pod, "configmap")
    os.makedirs(cm)
    with open(os.path.join(cm, "key"), "w") as f:
        f.write("value-1\n")
    hosts = os.path.join(pod, "hosts")
    with open(hosts, "w") as f:
        f.write("127.0.0.1 pod-host\n")
    os.symlink("/etc", os.path.join(pod, "link"))
    with sandbox_rpc(world, "ctr", userns=userns, networkPolicy="deny-all") as name:
        a = rpc_ok(world, "container.create", {
            "sandbox": name, "name": "a", "runtime": rt_a, "memoryMiB": 64,
            "mounts": [{"source": cm, "destination": "/etc/config", "readOnly": True},
                       {"source": hosts, "destination": "/etc/pod-hosts", "readOnly": True}]})
        expect_eq((a["name"], a["runtime"]), ("a", rt_a), "container.create answer")
        # Two creates of one name at once: one container, the other refused
        # as a conflict (and nothing of the first undone by it).
        with world.daemon.connect() as conn:
            ids = [conn.start("container.create", {"sandbox": name, "name": "b", "runtime": rt_b}) for _ in range(2)]
            got = [conn.wait(i, 120) for i in ids]
        expect_eq(sorted("error" in g for g in got), [False, True], "one of two racing creates: %s" % got)
        e = [g for g in got if "error" in g][0]["error"]
        expect_eq(e["data"].get("reason"), "already_exists", "the racing create's refusal (a stable reason, as a sandbox name's)")
        # Each its own root: its runtime's marker, its own upper.
        code, out, err = _run(world, name, "a", "cat /etc/runtime-marker; echo x > /mine; cat /mine", sudo=True)
        expect_eq((code, out), (0, rt_a + "\nx\n"), "container a's root (%s)" % err)
        code, out, err = _run(world, name, "b", "cat /etc/runtime-marker; cat /mine")
        expect_eq((code, out.splitlines()[:1]), (1, [rt_b]), "container b's root, without a's file (%s)" % err)
        code, out, _e = sh(world, name, "test -e /mine || echo none")
        expect_eq(out, "none\n", "the sandbox's root is not the containers'")
        # The read-only ConfigMap-like mount and the single file.
        code, out, err = _run(world, name, "a", "cat /etc/config/key /etc/pod-hosts")
        expect_eq((code, out), (0, "value-1\n127.0.0.1 pod-host\n"), "host mounts readable (%s)" % err)
        code, out, err = _run(world, name, "a", "echo no > /etc/config/key; echo rc=$?; "
                                               "echo no > /etc/config/new; echo rc=$?", sudo=True)
        expect_eq(out, "rc=2\nrc=2\n", "read-only mount not writable even as root (%s)" % err)
        expect("Read-only file system" in err or "Permission denied" in err, "the write's error", err)
        # Nor can root inside make it writable again: a remount (the mount
        # tool, and mount(2) itself) fails, and the write after it too.
        rpc_ok(world, "container.create", {"sandbox": name, "name": "m", "runtime": "host",
                                           "mounts": [{"source": cm, "destination": "/etc/config", "readOnly": True}]})
        remount = ("import ctypes\nl = ctypes.CDLL(None, use_errno=True)\n"
                   "r = l.mount(None, b'/etc/config', None, 0x20 | 0x1000, None)\n"
                   "print('remounted' if r == 0 else ctypes.get_errno())")
        code, out, err = _run(world, name, "m", "mount -o remount,rw,bind /etc/config; echo rc=$?; "
                                               "python3 -c \"%s\"; echo no > /etc/config/key; echo rc=$?" % remount,
                              sudo=True)
        expect_eq(out, "rc=32\n1\nrc=2\n", "no remount of the read-only mount as root (%s)" % err)
        rpc_ok(world, "container.delete", {"sandbox": name, "name": "m"})
        with open(os.path.join(cm, "key")) as f:
            expect_eq(f.read(), "value-1\n", "the host file unchanged")
        # A destination through a symlink of the image is refused naming it
        # (never followed, even inside the container's root).
        rt_l = _import_with_link(world, "crl")
        e = _err(world, "container.create", {"sandbox": name, "name": "l", "runtime": rt_l,
                                             "mounts": [{"source": cm, "destination": "/var/run/secrets/x", "readOnly": True}]})
        expect("mounts[0].destination" in e["message"] and "symbolic link" in e["message"],
               "a destination through a symlink is refused naming it", e["message"])
        rpc_ok(world, "container.create", {"sandbox": name, "name": "l", "runtime": rt_l,
                                           "mounts": [{"source": cm, "destination": "/run/secrets/x", "readOnly": True}]})
        rpc_ok(world, "container.delete", {"sandbox": name, "name": "l"})
        # Refusals, each naming the mount.
        for src, why in ((os.path.join(world.tmp), "outside"), (os.path.join(pod, "link"), "symlink"),
                         (pod + "/../" + os.path.basename(pod) + "/configmap", "dotdot")):
            e = _err(world, "container.create", {"sandbox": name, "name": "c", "runtime": rt_a,
                                                 "mounts": [{"source": cm, "destination": "/x", "readOnly": True},
                                                            {"source": src, "destination": "/y"}]})
            expect("mounts[1].source" in e["message"], "refusal of the %s source names it" % why, e["message"])
        # Usage of a's cgroup; its OOM is its own.
        got = rpc_ok(world, "container.get", {"sandbox": name, "name": "a"})
        expect(got["usage"]["cpuMs"] is not None and got["oomKills"] == 0, "container.get usage", got)
        listed = rpc_ok(world, "container.list", {"sandbox": name})["containers"]
        expect_eq(sorted(c["name"] for c in listed), ["a", "b"], "container.list")
        # A read-only root: not writable even by root, its /tmp is.
        rpc_ok(world, "container.create", {"sandbox": name, "name": "ro", "runtime": rt_a, "readOnlyRoot": True})
        code, out, err = _run(world, name, "ro", "echo x > /mine; echo rc=$?; echo y > /tmp/t && cat /tmp/t", sudo=True)
        expect_eq(out, "rc=2\ny\n", "readOnlyRoot (%s)" % err)
        expect("Read-only file system" in err, "the write's error", err)
        rpc_ok(world, "container.delete", {"sandbox": name, "name": "ro"})
        # Delete: gone, its running command killed, its command refused,
        # its cgroup and files removed.
        running = rpc_ok(world, "command.run", {"sandbox": name, "container": "b", "cmd": "/bin/sh", "detached": True,
                                                "args": ["-c", "echo up; while :; do :; done"]})["cmdId"]
        poll(lambda: base64.b64decode(rpc_ok(world, "command.logs", {"cmdId": running}).get("stdout") or "") == b"up\n",
             30, "b's command runs")
        expect(_ctr_cgroups(world, name, "b"), "b has cgroups while it exists")
        expect(_ctr_dirs(d, name, "b"), "b has its directory while it exists")
        rpc_ok(world, "container.delete", {"sandbox": name, "name": "b"})
        expect_eq(rpc_ok(world, "command.wait", {"cmdId": running}, 60)["exitCode"], 137,
                  "b's running command was killed by its delete")
        expect_eq(_ctr_cgroups(world, name, "b"), [], "b's cgroups after its delete")
        expect_eq(_ctr_dirs(d, name, "b"), [], "b's directory after its delete")
        e = _err(world, "command.run", {"sandbox": name, "container": "b", "cmd": "/bin/true"})
        expect("no container 'b'" in e["message"], "a deleted container runs nothing", e["message"])
        expect(_ctr_cgroups(world, name, "a"), "a keeps its cgroups")
    leaks.check(world, name)


def test_containers_have_their_own_root_mounts_cgroup_and_go_with_delete(world):
    _d, root = _daemon(world, "ctr")
    try:
        for userns in _modes():
            _body(world, _d, root, userns)
        expect_eq(world.stop_sandboxd(), 0, "the daemon's exit status (an ASan build's leak check)")
    finally:
        world.stop_sandboxd()


def test_containers_share_loopback_and_each_ooms_alone(world):
    """Two containers of one sandbox talk over 127.0.0.1 (the sandbox's
    network namespace); a command over one container's memory limit is
    OOM-killed in that container, reported so, and the other container
    and the sandbox see no kill."""
    world.stop_sandboxd()
    world.start_sandboxd()
    for userns in _modes():
        with sandbox_rpc(world, "ctrl", userns=userns, networkPolicy="deny-all") as name:
            # cpuMillis above the sandbox's 1 vCPU: bounded by it.
            rpc_ok(world, "container.create", {"sandbox": name, "name": "srv", "runtime": "host", "cpuMillis": 4000})
            rpc_ok(world, "container.create", {"sandbox": name, "name": "small", "runtime": "host",
                                               "memoryMiB": 64, "pidsMax": 64, "cpuMillis": 500})
            srv = rpc_ok(world, "command.run", {
                "sandbox": name, "container": "srv", "cmd": "python3", "detached": True, "args": ["-c",
                "import socket\ns=socket.socket();s.setsockopt(socket.SOL_SOCKET,socket.SO_REUSEADDR,1)\n"
                "s.bind(('127.0.0.1',8765));s.listen();open('/tmp/up','w').close()\n"
                "c,_=s.accept();c.sendall(b'from-srv\\n');c.close()"]})["cmdId"]
            poll(lambda: _run(world, name, "srv", "test -e /tmp/up")[0] == 0, 30, "the server listens")
            code, out, err = _run(world, name, "small", "test -e /tmp/up && echo shared-tmp; python3 -c \""
                                  "import socket;s=socket.create_connection(('127.0.0.1',8765));"
                                  "print(s.recv(64).decode().strip())\"")
            expect_eq((code, out), (0, "from-srv\n"), "small reaches srv over 127.0.0.1, /tmp its own (%s)" % err)
            expect_eq(rpc_ok(world, "command.wait", {"cmdId": srv}, 60)["exitCode"], 0, "the server's exit")
            msg = rpc_ok(world, "command.run", {"sandbox": name, "container": "small", "cmd": "python3",
                                                "detached": True, "args": ["-c", "b = b'x' * (256 << 20)"]})
            r = rpc_ok(world, "command.wait", {"cmdId": msg["cmdId"]}, 120)
            expect_eq((r["oomKilled"], r.get("memoryLimitBytes")), (True, 64 << 20),
                      "the command over small's 64 MiB: " + json.dumps(r)[:300])
            small = rpc_ok(world, "container.get", {"sandbox": name, "name": "small"})
            other = rpc_ok(world, "container.get", {"sandbox": name, "name": "srv"})
            expect(small["oomKills"] >= 1 and other["oomKills"] == 0, "the kill is small's only", small, other)
            expect_eq(small["limits"], {"memoryMiB": 64, "cpuMillis": 500, "pidsMax": 64}, "small's limits")
            # ... as the kernel holds them, in small's own cgroup: v1's
            # memory controller, or v2's memory.max (the session delegates
            # the controllers below it, sandbox-init living in its leaf).
            held = {}
            for d in _ctr_cgroups(world, name, "small"):
                for f in ("memory.limit_in_bytes", "memory.max", "pids.max"):
                    if os.path.exists(os.path.join(d, f)):
                        with open(os.path.join(d, f)) as fh:
                            held[f] = fh.read().strip()
            expect(held.get("memory.limit_in_bytes", held.get("memory.max")) == str(64 << 20)
                   and held.get("pids.max") == "64", "small's limits in its cgroup files", held)
            expect(small["usage"]["memoryPeakBytes"] is None or small["usage"]["memoryPeakBytes"] <= 64 << 20,
                   "small's peak within its limit", small["usage"])
            # setns stays refused to commands, in a container or not
            # (the inner filter, libcore/seccomp.h outer mode): a call the
            # kernel would answer EINVAL (a network namespace named as a
            # mount one, checked before any capability) gets seccomp's EPERM.
            probe = "import ctypes, os\nl = ctypes.CDLL(None, use_errno=True)\n" \
                    "r = l.setns(os.open('/proc/self/ns/net', os.O_RDONLY), 0x20000)\n" \
                    "print('joined' if r == 0 else ctypes.get_errno())"
            code, out, err = _run(world, name, "small", "python3 -c \"%s\"" % probe, sudo=True)
            expect_eq((code, out), (0, "1\n"), "setns from a container's root command: EPERM (%s)" % err)
            code, out, err = sh(world, name, "python3 -c \"%s\"" % probe, "--sudo")
            expect_eq((code, out), (0, "1\n"), "setns from the sandbox's root command: EPERM (%s)" % err)
            code, out, _e = sh(world, name, "echo alive")
            expect_eq(out, "alive\n", "the sandbox itself runs on")
    expect_eq(world.stop_sandboxd(), 0, "the daemon's exit status (an ASan build's leak check)")


def test_exec_in_a_container_with_a_tty_stdin_and_resize(world):
    """sandboxctl exec --container: a pty inside the container (its root,
    the sandbox's devpts), resize, stdin, and command.get naming it."""
    import struct
    import fcntl
    import termios
    from test_exec import _run_pty
    world.stop_sandboxd()
    world.start_sandboxd()
    rt = _import(world, "crt")
    with sandbox_rpc(world, "ctrt", networkPolicy="deny-all") as name:
        # init's container helper (sandbox-ctrd, init's first child: PID 2,
        # found by its name all the same) blocks and ignores no signal: a stop's SIGTERM ends it at once,
        # not the grace's SIGKILL.
        code, out, err = sh(world, name, "for p in /proc/[0-9]*; do "
                                         "[ \"$(cat $p/comm 2>/dev/null)\" = sandbox-ctrd ] || continue; "
                                         "cat $p/comm; sed -n 's/^SigBlk:[[:space:]]*//p; "
                                         "s/^SigIgn:[[:space:]]*//p' $p/status; done")
        expect_eq((code, out), (0, "sandbox-ctrd\n" + "0" * 16 + "\n" + "0" * 16 + "\n"),
                  "the container helper's signals (%s)" % err)
        rpc_ok(world, "container.create", {"sandbox": name, "name": "t", "runtime": "host"})
        rpc_ok(world, "container.create", {"sandbox": name, "name": "tiny", "runtime": rt})
        script = ('tty; stty size; echo READY; i=0; '
                  'while [ "$(stty size)" != "40 120" ] && [ $i -lt 100 ]; do sleep 0.1; i=$((i+1)); done; '
                  'stty size; test -e /etc/runtime-marker || echo NO-MARKER; echo DONE')
        state = {"resized": False}

        def react(out, fd):
            if not state["resized"] and b"READY" in out:
                fcntl.ioctl(fd, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 120, 0, 0))
                state["resized"] = True

        argv = [W.SANDBOXCTL, "--socket", world.daemon.socket, "exec", "--container", "t", "-t", name, "--",
                "sh", "-c", script]
        code, out = _run_pty(argv, 30, 100, react)
        expect_eq(code, 0, "exit code (output %r)" % out[-300:])
        expect("/dev/pts/" in out and "30 100" in out, "a pty of 30x100 in the container:", repr(out[:300]))
        expect(state["resized"] and "40 120" in out, "resize seen in the container:", repr(out[-300:]))
        expect("NO-MARKER" in out and "DONE" in out, "the host runtime's root, not tiny's:", repr(out[-300:]))
        code, out, err = world.ctl("exec", "--container", "tiny", "-i", name, "--", "sh", "-c",
                                   "cat; cat /etc/runtime-marker", input="from-stdin\n")
        expect_eq((code, out), (0, "from-stdin\n" + rt + "\n"), "stdin into a container's command (%s)" % err)
        r = rpc_ok(world, "command.run", {"sandbox": name, "container": "tiny", "cmd": "/bin/true", "detached": True})
        expect_eq(rpc_ok(world, "command.get", {"cmdId": r["cmdId"]}).get("container"), "tiny",
                  "command.get names the container")
    expect_eq(world.stop_sandboxd(), 0, "the daemon's exit status (an ASan build's leak check)")


def test_container_survives_a_daemon_kill(world):
    """kill -9 of the daemon with a container's command running: the new
    daemon re-adopts the container with the session (its root, its
    cgroup, the command and its container), then deletes leave nothing."""
    d, _root = _daemon(world, "ctrk")
    try:
        rt = _import(world, "crk")
        with sandbox_rpc(world, "ctrk", networkPolicy="deny-all") as name:
            rpc_ok(world, "container.create", {"sandbox": name, "name": "a", "runtime": rt})
            rpc_ok(world, "container.create", {"sandbox": name, "name": "b", "runtime": rt})
            _run(world, name, "a", "echo kept > /kept", sudo=True)
            r = rpc_ok(world, "command.run", {"sandbox": name, "container": "a", "cmd": "/bin/sh", "detached": True,
                                              "sudo": True, "args": ["-c", "read x; echo got-$x; cat /kept"]})
            cmd = r["cmdId"]
            os.kill(d.proc.pid, signal.SIGKILL)
            d.proc.wait(10)
            d.start()
            got = rpc_ok(world, "container.get", {"sandbox": name, "name": "a"})
            expect_eq(got["runtime"], rt, "the container after a kill -9 of the daemon")
            poll(lambda: rpc_ok(world, "command.get", {"cmdId": cmd}).get("container") == "a", 30,
                 "the running command is known again, in its container")
            rpc_ok(world, "command.write", {"cmdId": cmd, "data": base64.b64encode(b"1\n").decode()})
            w = rpc_ok(world, "command.wait", {"cmdId": cmd}, 60)
            logs = rpc_ok(world, "command.logs", {"cmdId": cmd})
            expect_eq((w["exitCode"], base64.b64decode(logs["stdout"]).decode()), (0, "got-1\nkept\n"),
                      "the command finished in its container after the restart")
            code, out, err = _run(world, name, "a", "cat /kept")
            expect_eq((code, out), (0, "kept\n"), "a new command in its root after the restart (%s)" % err)
            rpc_ok(world, "container.delete", {"sandbox": name, "name": "b"})
            expect_eq(_ctr_cgroups(world, name, "b"), [], "b's cgroups after a delete by the new daemon")
            expect(_ctr_cgroups(world, name, "a"), "a's cgroups stay")
        leaks.check(world, name)
        expect_eq(_ctr_cgroups(world, name, "a"), [], "the sandbox's delete took a's cgroups")
        expect_eq(world.stop_sandboxd(), 0, "the daemon's exit status (an ASan build's leak check)")
    finally:
        world.stop_sandboxd()


def test_a_container_cut_in_half_by_a_daemon_kill_is_removed(world):
    """kill -9 of the daemon after init made a container and before the
    daemon recorded it, and after init forgot one and before the record
    did: the restarted daemon removes both halves (the name is free again,
    no cgroup or directory is left)."""
    from test_restore import _crash_at
    if not os.path.exists(W.FAULTS_SANDBOXD):
        raise W.Skip("needs %s (make %s)" % (W.FAULTS_SANDBOXD, W.FAULTS_SANDBOXD))
    world.stop_sandboxd()
    d = world.start_sandboxd()
    rt = _import(world, "crc")
    with sandbox_rpc(world, "ctrc", networkPolicy="deny-all") as name:
        # Killed with its cgroup and directories made, init not asked yet:
        # the name is free at once after the restart (the leftovers reused).
        _crash_at(world, "container.cgroup_made", "container.create", {"sandbox": name, "name": "a", "runtime": rt})
        expect(_ctr_cgroups(world, name, "a") and _ctr_dirs(d, name, "a"), "a's leftovers after the kill")
        rpc_ok(world, "container.create", {"sandbox": name, "name": "a", "runtime": rt})
        rpc_ok(world, "container.delete", {"sandbox": name, "name": "a"})
        _crash_at(world, "container.made", "container.create", {"sandbox": name, "name": "a", "runtime": rt})
        poll(lambda: "error" not in world.rpc("container.create", {"sandbox": name, "name": "a", "runtime": rt}),
             30, "the half-made container's name is free again after the restart")
        code, out, err = _run(world, name, "a", "cat /etc/runtime-marker")
        expect_eq((code, out), (0, rt + "\n"), "the container made again (%s)" % err)
        rpc_ok(world, "container.create", {"sandbox": name, "name": "b", "runtime": rt})
        expect(_ctr_cgroups(world, name, "b") and _ctr_dirs(d, name, "b"), "b exists")
        _crash_at(world, "container.init_deleted", "container.delete", {"sandbox": name, "name": "b"})
        poll(lambda: not _ctr_cgroups(world, name, "b") and not _ctr_dirs(d, name, "b"), 30,
             "the half-deleted container's cgroups and files are removed after the restart")
        names = [c["name"] for c in rpc_ok(world, "container.list", {"sandbox": name})["containers"]]
        expect_eq(names, ["a"], "container.list after both crashes")
        rpc_ok(world, "container.create", {"sandbox": name, "name": "b", "runtime": rt})
    leaks.check(world, name)


def test_sandbox_create_mounts_bind_host_files_into_the_sandbox(world):
    """sandbox.create "mounts": a read-only directory and a single file in
    the sandbox itself, attached over its /tmp too; refused naming the
    mount when outside the roots; kept for the next session of a
    persistent sandbox, never in its snapshot."""
    _d, root = _daemon(world, "sbm")
    try:
        pod = os.path.join(root, world.name("pod"))
        os.makedirs(os.path.join(pod, "secret"))
        with open(os.path.join(pod, "secret", "token"), "w") as f:
            f.write("tok\n")
        with open(os.path.join(pod, "termination-log"), "w") as f:
            pass
        # As the kubelet makes it: writable by the container's user, who in
        # a user namespace is no host user.
        os.chmod(os.path.join(pod, "termination-log"), 0o666)
        for userns in _modes():
            mounts = [{"source": os.path.join(pod, "secret"), "destination": "/var/run/secrets/x", "readOnly": True},
                      {"source": os.path.join(pod, "termination-log"), "destination": "/tmp/termination-log"}]
            e = _err(world, "sandbox.create", {"name": world.name("sbmx"), "networkPolicy": "deny-all",
                                               "userns": userns,
                                               "mounts": mounts + [{"source": "/etc", "destination": "/x"}]})
            expect("mounts[2].source" in e["message"], "a source outside the roots refused by name", e["message"])
            open(os.path.join(pod, "termination-log"), "w").close()
            if not userns:
                # Root inside is host root on the file: a writable mount
                # is refused (it could make the file a setuid-root program).
                e = _err(world, "sandbox.create", {"name": world.name("sbmw"), "networkPolicy": "deny-all",
                                                   "userns": False, "mounts": mounts})
                expect("mounts[1].readOnly" in e["message"] and e["data"].get("reason") == "permission_denied",
                       "a writable host mount without a user namespace refused naming it", e)
                mounts = [mounts[0], dict(mounts[1], readOnly=True)]
            with sandbox_rpc(world, "sbm", userns=userns, persistent=True, mounts=mounts) as name:
                code, out, err = sh(world, name, "cat /var/run/secrets/x/token; echo done > /tmp/termination-log; "
                                    "echo no > /var/run/secrets/x/token; echo rc=$?", "--sudo")
                expect_eq(out, "tok\nrc=2\n", "the mounts inside the sandbox (%s)" % err)
                with open(os.path.join(pod, "termination-log")) as f:
                    expect_eq(f.read(), "done\n" if userns else "",
                              "the writable single-file mount reaches the host file (read-only without userns)")
                got = rpc_ok(world, "sandbox.get", {"name": name})
                expect_eq(got.get("mounts"), mounts, "sandbox.get shows the mounts")
                snap = rpc_ok(world, "sandbox.snapshot", {"name": name})
                sid = snap.get("id") or snap.get("snapshotId")
                expect("mounts" not in json.dumps(rpc_ok(world, "snapshot.get", {"id": sid})), "no mounts in a snapshot")
                rpc_ok(world, "snapshot.delete", {"id": sid})
                rpc_ok(world, "container.create", {"sandbox": name, "name": "c", "runtime": "host"})
                expect(_ctr_dirs(_d, name, "c") and _ctr_cgroups(world, name, "c"), "container c exists")
                rpc_ok(world, "sandbox.stop", {"name": name})
                expect_eq((_ctr_dirs(_d, name, "c"), _ctr_cgroups(world, name, "c")), ([], []),
                          "a stop removes the session's containers")
                code, out, err = sh(world, name, "cat /var/run/secrets/x/token")
                expect_eq((code, out), (0, "tok\n"), "the mounts in the next session (%s)" % err)
                expect_eq(rpc_ok(world, "container.list", {"sandbox": name})["containers"], [],
                          "the next session starts with no container")
            leaks.check(world, name)
        expect_eq(world.stop_sandboxd(), 0, "the daemon's exit status (an ASan build's leak check)")
    finally:
        world.stop_sandboxd()


def test_host_mounts_are_asked_by_root_on_the_local_socket_only(world):
    """A local admin that is not root and a local tenant both name
    `mounts`: refused naming it, before anything is made."""
    from test_tenants import ADMIN, CAROL, _ok, _one
    root = os.path.join(world.tmp, world.name("hmr"))
    os.makedirs(os.path.join(root, "d"))
    os.chmod(world.tmp, 0o755)
    world.stop_sandboxd()
    d = world.start_sandboxd({"hostMountRoots": [root], "socketGroup": "nogroup",
                              "tenants": {"localAdmins": [ADMIN]}}, tag="ctrn")
    try:
        with sandbox_rpc(world, "ctrn", networkPolicy="deny-all") as name:
            own = world.name("ctrc")
            _ok(d, CAROL, "sandbox.create", {"name": own, "networkPolicy": "deny-all"})
            for uid, sb in ((ADMIN, name), (CAROL, own)):
                m = _one(d, uid, "container.create", {"sandbox": sb, "name": "x", "runtime": "host",
                                                      "mounts": [{"source": os.path.join(root, "d"),
                                                                  "destination": "/d"}]})
                err = m.get("error") or {}
                expect_eq(((err.get("data") or {}).get("reason"), err.get("message", "").split(":")[0]),
                          ("permission_denied", "mounts"), "uid %d naming mounts: %s" % (uid, json.dumps(m)[:300]))
            for uid in (ADMIN, CAROL):
                m = _one(d, uid, "sandbox.create", {"name": world.name("ctrm"), "networkPolicy": "deny-all",
                                                    "mounts": [{"source": os.path.join(root, "d"), "destination": "/d"}]})
                err = m.get("error") or {}
                expect_eq(((err.get("data") or {}).get("reason"), err.get("message", "").split(":")[0]),
                          ("permission_denied", "mounts"), "sandbox.create with mounts by uid %d: %s"
                          % (uid, json.dumps(m)[:300]))
            for sb in (name, own):
                listed = rpc_ok(world, "container.list", {"sandbox": sb})["containers"]
                expect_eq(listed, [], "no container made in %s" % sb)
            # Without mounts the tenant may have containers in its own sandbox.
            got = _ok(d, CAROL, "container.create", {"sandbox": own, "name": "y", "runtime": "host"})
            expect_eq(got["name"], "y", "a tenant's container without mounts")
            m = _one(d, CAROL, "container.get", {"sandbox": name, "name": "y"})
            expect("error" in m, "another's sandbox's containers are not the tenant's", json.dumps(m)[:300])
            rpc_ok(world, "sandbox.delete", {"name": own})
        expect_eq(world.stop_sandboxd(), 0, "the daemon's exit status (an ASan build's leak check)")
    finally:
        world.stop_sandboxd()


def _pids_of(world, name, marker):
    """Pids (in the sandbox's PID namespace) of the sandbox's processes
    whose command line holds marker."""
    # [x]yz: the pattern, in this shell's own command line, matches not
    # itself.
    code, out, err = sh(world, name, "for p in /proc/[0-9]*; do tr '\\0' ' ' < $p/cmdline 2>/dev/null | "
                                     "grep -q -- '[%s]%s' && echo ${p#/proc/}; done; true" % (marker[0], marker[1:]),
                        "--sudo")
    expect_eq(code, 0, "list the sandbox's processes (%s)" % err)
    return [int(p) for p in out.split()]


def test_containers_have_their_own_pid_namespace_unless_they_share_the_sandboxs(world):
    """pidNamespace "container" (the default, Kubernetes' default): a
    container's /proc shows its own processes only, under a PID 1 of its
    own that holds no capability; another container cannot see, signal or
    enter a process of it (/proc/PID/root) even as root. pidNamespace
    "sandbox": containers see each other's processes and roots."""
    world.stop_sandboxd()
    world.start_sandboxd()
    hold = "import sys, time\nopen('/tmp/secret', 'w').write(sys.argv[1])\nprint('up', flush=True)\ntime.sleep(3600)"
    for userns in _modes():
        with sandbox_rpc(world, "pidns", userns=userns, networkPolicy="deny-all") as name:
            for ctr, pidns in (("a", None), ("b", "container"), ("s1", "sandbox"), ("s2", "sandbox")):
                p = {"sandbox": name, "name": ctr, "runtime": "host"}
                if pidns:
                    p["pidNamespace"] = pidns
                got = rpc_ok(world, "container.create", p)
                expect_eq(got["pidNamespace"], pidns or "container", "%s's pidNamespace" % ctr)
            e = _err(world, "container.create", {"sandbox": name, "name": "x", "runtime": "host",
                                                 "pidNamespace": "host"})
            expect("pidNamespace" in e["message"], "an unknown pidNamespace is refused naming it", e["message"])
            cmds = {}
            for ctr in ("a", "s1"):
                cmds[ctr] = rpc_ok(world, "command.run", {
                    "sandbox": name, "container": ctr, "cmd": "python3", "detached": True, "sudo": True,
                    "args": ["-c", hold, "secret-of-" + ctr]})["cmdId"]
                poll(lambda: base64.b64decode(rpc_ok(world, "command.logs", {"cmdId": cmds[ctr]}).get("stdout")
                                              or "") == b"up\n", 30, "%s's process runs" % ctr)
            [pid_a] = _pids_of(world, name, "secret-of-a")
            [pid_s1] = _pids_of(world, name, "secret-of-s1")
            # a sees its own process, under its own PID 1.
            code, out, err = _run(world, name, "a", "cat /proc/1/comm; grep -l [s]ecret-of-a /proc/[0-9]*/cmdline | "
                                                    "wc -l; cat /proc/$(pgrep -f [s]ecret-of-a)/root/tmp/secret", sudo=True)
            expect_eq((code, out), (0, "sandbox-ctrinit\n1\nsecret-of-a"), "a's own view (%s)" % err)
            # b: none of a's processes, by listing or by a's pid in the
            # sandbox's namespace, even as root.
            probe = ("grep -l [s]ecret-of /proc/[0-9]*/cmdline; echo listed=$?; "
                     "cat /proc/%d/root/tmp/secret; echo root=$?; kill -0 %d; echo kill=$?; "
                     "cat /proc/%d/root/tmp/secret; echo root_s1=$?" % (pid_a, pid_a, pid_s1))
            code, out, err = _run(world, name, "b", probe, sudo=True)
            expect_eq(out, "listed=1\nroot=1\nkill=1\nroot_s1=1\n",
                      "b sees, signals and enters no process of a or s1 (%s)" % err)
            code, out, err = _run(world, name, "b", "cat /proc/1/comm; ls -d /proc/[0-9]* | wc -l")
            expect_eq(out.splitlines()[0], "sandbox-ctrinit", "b's own PID 1 (%s)" % err)
            expect(int(out.splitlines()[1]) <= 4, "b's /proc lists its own few processes", out)
            # s2 shares the sandbox's: s1's process and root, and a's too
            # (a's namespace is a child of the sandbox's).
            code, out, err = _run(world, name, "s2", "cat /proc/%d/root/tmp/secret; echo; "
                                                     "grep -c [s]ecret-of-a /proc/%d/cmdline" % (pid_s1, pid_a),
                                  sudo=True)
            expect_eq((code, out), (0, "secret-of-s1\n1\n"), "s2 sees s1's and a's processes (%s)" % err)
            # Each own namespace's PID 1 holds no capability; a's goes
            # with a's delete, and its process with it.
            code, out, err = sh(world, name, "for p in $(grep -l '^Name:.sandbox-ctrinit$' /proc/[0-9]*/status); "
                                             "do grep -E '^Cap(Eff|Prm)' $p; done", "--sudo")
            caps = [l.split()[1] for l in out.splitlines()]
            expect(len(caps) == 4 and set(caps) == {"0000000000000000"}, "two PID 1s, with no capability", out)
            rpc_ok(world, "container.delete", {"sandbox": name, "name": "a"})
            expect_eq(rpc_ok(world, "command.wait", {"cmdId": cmds["a"]}, 60)["exitCode"], 137,
                      "a's process went with a")
            code, out, err = sh(world, name, "grep -l '^Name:.sandbox-ctrinit$' /proc/[0-9]*/status | wc -l", "--sudo")
            expect_eq(out.strip(), "1", "a's PID 1 went with a, b's is there")
            code, out, err = _run(world, name, "b", "echo alive")
            expect_eq(out, "alive\n", "b runs on")
        leaks.check(world, name)
    expect_eq(world.stop_sandboxd(), 0, "the daemon's exit status (an ASan build's leak check)")


def test_container_pause_freezes_that_container_only(world):
    """container.pause freezes the container's own cgroup: a command
    started in it does not finish until container.resume; the sandbox and
    another container run on meanwhile; a paused container's delete kills
    its processes; the freezer state is the kernel's (paused, as read by
    the host)."""
    world.stop_sandboxd()
    world.start_sandboxd()
    for userns in _modes():
        with sandbox_rpc(world, "cpause", userns=userns, networkPolicy="deny-all") as name:
            for ctr in ("a", "b"):
                rpc_ok(world, "container.create", {"sandbox": name, "name": ctr, "runtime": "host"})
            # a's process waits for /tmp/go, which only the resume lets it
            # see (it is frozen meanwhile).
            cmd = rpc_ok(world, "command.run", {"sandbox": name, "container": "a", "cmd": "/bin/sh", "detached": True,
                                                "args": ["-c", "echo up; while [ ! -e /tmp/go ]; do sleep 0.05; done; "
                                                         "echo ran"]})["cmdId"]
            poll(lambda: base64.b64decode(rpc_ok(world, "command.logs", {"cmdId": cmd}).get("stdout") or "") == b"up\n",
                 30, "a's process runs")
            got = rpc_ok(world, "container.pause", {"sandbox": name, "name": "a"})
            expect_eq(got["paused"], True, "container.pause's answer")
            frozen = []
            for d in _ctr_cgroups(world, name, "a"):
                for f, yes in (("cgroup.freeze", "1"), ("freezer.state", "FROZEN")):
                    if os.path.exists(os.path.join(d, f)):
                        with open(os.path.join(d, f)) as fh:
                            frozen.append(fh.read().strip() == yes)
            expect(True in frozen, "a's cgroup is frozen on the host", frozen)
            # A new command into the paused container is refused (as runc refuses an exec into a paused one).
            e = _err(world, "command.run", {"sandbox": name, "container": "a", "cmd": "/bin/true"})
            expect("paused" in e["message"] and e["data"]["reason"] == "unavailable",
                   "a command into the paused container is refused", e)
            code, out, err = _run(world, name, "b", "echo b-runs")
            expect_eq((code, out), (0, "b-runs\n"), "b runs while a is paused (%s)" % err)
            code, out, _e = sh(world, name, "echo sandbox-runs")
            expect_eq(out, "sandbox-runs\n", "the sandbox runs while a is paused")
            expect_eq(rpc_ok(world, "container.get", {"sandbox": name, "name": "b"})["paused"], False, "b is not paused")
            got = rpc_ok(world, "container.resume", {"sandbox": name, "name": "a"})
            expect_eq(got["paused"], False, "container.resume's answer")
            code, out, err = _run(world, name, "a", "touch /tmp/go")
            expect_eq(code, 0, "a takes a command after the resume (%s)" % err)
            expect_eq(rpc_ok(world, "command.wait", {"cmdId": cmd}, 60)["exitCode"], 0, "a's process after the resume")
            # Paused, then deleted: its process is killed, nothing stays frozen.
            running = rpc_ok(world, "command.run", {"sandbox": name, "container": "a", "cmd": "/bin/sh",
                                                    "detached": True, "args": ["-c", "sleep 600"]})["cmdId"]
            rpc_ok(world, "container.pause", {"sandbox": name, "name": "a"})
            rpc_ok(world, "container.delete", {"sandbox": name, "name": "a"})
            expect_eq(rpc_ok(world, "command.wait", {"cmdId": running}, 60)["exitCode"], 137,
                      "the paused container's command was killed by its delete")
            expect_eq(_ctr_cgroups(world, name, "a"), [], "a's cgroups after its delete")
            e = _err(world, "container.pause", {"sandbox": name, "name": "a"})
            expect("no container 'a'" in e["message"], "pause of a deleted container", e["message"])
            # b paused when the sandbox is deleted: nothing is left.
            rpc_ok(world, "container.pause", {"sandbox": name, "name": "b"})
        leaks.check(world, name)
    expect_eq(world.stop_sandboxd(), 0, "the daemon's exit status (an ASan build's leak check)")


def test_a_container_command_starts_in_its_pid_namespace_with_its_own_oom_score(world):
    """A command of a container with its own PID namespace starts there
    with an oom_score_adj of 0, and leaves init's as it was, whichever way
    init's score is: 0, or not (set here from the host; a container's
    command never shares init's memory, and writes its own score in a copy
    of it)."""
    for userns in _modes():
        with sandbox_rpc(world, "ctroom", userns=userns, networkPolicy="deny-all") as name:
            rpc_ok(world, "container.create", {"sandbox": name, "name": "c", "runtime": "host"})
            pid = rpc_ok(world, "sandbox.get", {"name": name})["session"]["initPid"]
            for want in ("0", "500"):
                with open("/proc/%d/oom_score_adj" % pid, "w") as f:
                    f.write(want)
                code, out, err = _run(world, name, "c", "cat /proc/1/comm /proc/self/oom_score_adj", sudo=True)
                expect_eq((code, out.split()), (0, ["sandbox-ctrinit", "0"]),
                          "a container command's PID 1 and score with init's at %s (%s)" % (want, err))
                with open("/proc/%d/oom_score_adj" % pid) as f:
                    expect_eq(f.read().strip(), want, "init's score after the container command")


# Root inside: SIGSTOP to every process it may signal, for argv[1] seconds.
_STOPALL = ("import os, signal, sys, time\nend = time.monotonic() + float(sys.argv[1])\nn = 0\n"
            "while time.monotonic() < end:\n"
            "    for _ in range(200):\n"
            "        try:\n            os.kill(-1, signal.SIGSTOP); n += 1\n"
            "        except ProcessLookupError:\n            pass\n"
            "print('stops', n, flush=True)\n")


def _held_children(world, name):
    """Processes of the sandbox stopped while still running sandbox-init's
    program (command children before their exec)."""
    code, out, err = sh(world, name, "c=$(cat /proc/1/comm); n=0; for p in /proc/[0-9]*; do "
                                     "[ \"$(cat $p/comm 2>/dev/null)\" = \"$c\" ] && [ ${p#/proc/} != 1 ] && "
                                     "grep -q '^State:.*T' $p/status 2>/dev/null && n=$((n+1)); done; echo $n",
                        "--sudo")
    expect_eq(code, 0, "count held command children (%s)" % err)
    return int(out.strip() or 0)


def test_a_containers_oom_never_kills_the_sandboxs_init(world):
    """A command's child that shares sandbox-init's memory until its exec,
    once it has joined a container's cgroup, is a candidate of that
    container's OOM kills, and the kernel kills every process of a
    victim's address space (mm/oom_kill.c __oom_kill_process), init's
    included. Finding: root inside held such children stopped (kill(-1,
    SIGSTOP) as they started) and filled the container's memory with
    tmpfs pages, which no process's RSS shows: the held child, with
    init's RSS, was the victim, and the whole sandbox ended. A container
    command's child runs in a copy of init's memory."""
    for userns in _modes():
        with sandbox_rpc(world, "ctroom", userns=userns, networkPolicy="deny-all") as name:
            rpc_ok(world, "container.create", {"sandbox": name, "name": "m", "runtime": "host", "memoryMiB": 32,
                                               "pidNamespace": "sandbox"})
            # Rounds: a child is caught inside the container's cgroups
            # only when the stop reaches it after its first system call.
            for rnd in range(3):
                _hold_and_fill(world, name, "m")
                code, out, err = sh(world, name, "echo alive")
                expect_eq((code, out), (0, "alive\n"), "the sandbox after its container's OOM kills (userns %s, "
                          "round %d, %s)" % (userns, rnd, err.strip()))
            sb = rpc_ok(world, "sandbox.get", {"name": name})
            expect_eq(sb.get("status"), "running", "the sandbox's status after its container's OOM kills")


def _hold_and_fill(world, name, ctr):
    """Root inside container ctr stops every new process for 6 seconds
    while commands start there, then fills the container's memory with
    64 MiB of tmpfs pages (by 4 KiB, so the filler's own RSS stays small)."""
    stop = rpc_ok(world, "command.run", {"sandbox": name, "container": ctr, "cmd": "python3", "detached": True,
                                         "sudo": True, "args": ["-c", _STOPALL, "6"]})["cmdId"]
    # Each a Popen: one the stopper holds before its exec stays unanswered.
    argv = [W.SANDBOXCTL, "--socket", world.daemon.socket, "exec", "--container", ctr, name, "--", "true"]
    runs = []
    try:
        for _ in range(16):
            runs.append(subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                         stderr=subprocess.DEVNULL))
            try:
                runs[-1].wait(0.3)
            except subprocess.TimeoutExpired:
                pass  # held: its own business
        w = rpc_ok(world, "command.wait", {"cmdId": stop}, 60)
    finally:
        for p in runs:
            if p.poll() is None:
                p.kill()
                p.wait()
    # 137: the stopper itself was the container's OOM victim (the held
    # children's memory is charged to the container too, and a busy
    # machine lets more of them pile up): what matters is init's fate.
    expect(w.get("exitCode") in (0, 137), "root's stopper in the container ended: %s" % w)
    expect(_held_children(world, name) >= 1, "no command child was held before its exec")
    _run(world, name, ctr, "dd if=/dev/zero of=/dev/shm/fill bs=4k count=16384; rm -f /dev/shm/fill", sudo=True)


def _grace_of_a_container_writer(world, pause):
    """A container with a writable host mount whose command writes there
    on SIGTERM (paused with container.pause first when `pause`), then
    sandbox.delete: whether the write was there once delete answered."""
    if os.environ.get("SANDBOXD_TEST_USERNS", "1") == "0":
        raise W.Skip("a writable host mount needs a sandbox with a user namespace (container.create mounts)")
    d, root = _daemon(world, "ctrg")
    try:
        rt = _import(world, "crg")
        out = os.path.join(root, world.name("out"))
        os.makedirs(out)
        os.chmod(out, 0o777)
        name = create_rpc(world, "ctrg", userns=True, networkPolicy="deny-all")
        try:
            rpc_ok(world, "container.create", {"sandbox": name, "name": "a", "runtime": rt,
                                               "mounts": [{"source": out, "destination": "/out"}]})
            # The handler does some work before its write, as a real one
            # would (a flush): the grace is for it. The shell waits on a
            # child (a trapped signal ends the wait at once, whichever of
            # the two gets SIGTERM first).
            script = ("trap 'i=0; while [ $i -lt 20000 ]; do i=$((i+1)); done; echo term > /out/term; exit 0' TERM; "
                      "echo up > /out/up; while :; do cat <&0 & wait $!; done")
            rpc_ok(world, "command.run", {"sandbox": name, "container": "a", "cmd": "/bin/sh", "detached": True,
                                          "sudo": True, "args": ["-c", script]})
            poll(lambda: os.path.exists(os.path.join(out, "up")), 60, "the container's command to start")
            if pause:
                expect(rpc_ok(world, "container.pause", {"sandbox": name, "name": "a"}).get("paused"),
                       "container.pause answers the paused container")
        finally:
            rpc_ok(world, "sandbox.delete", {"name": name}, 120)
        wrote = os.path.exists(os.path.join(out, "term"))
        leaks.check(world, name)
        return wrote
    finally:
        world.stop_sandboxd()


def test_delete_gives_the_grace_to_a_container_writing_to_a_host_mount(world):
    """sandbox.delete kills at once only a sandbox that writes nothing
    that outlives it (docs/API.md sandbox.delete): a container's writable
    host mount is such a thing, as the sandbox's own is, so its processes
    get SIGTERM and the grace, and a last write there on SIGTERM is kept.
    The host directory shows what the container did once delete answered."""
    expect(_grace_of_a_container_writer(world, False),
           "the container's SIGTERM handler wrote to its host mount before delete answered")


def test_delete_gives_the_grace_to_a_paused_container_writing_to_a_host_mount(world):
    """As above with the container paused (container.pause): the stop
    thaws it first, so its SIGTERM handler runs in the grace."""
    expect(_grace_of_a_container_writer(world, True),
           "the paused container's SIGTERM handler wrote to its host mount before delete answered")


def test_a_stop_gives_the_grace_to_a_containers_processes(world):
    """sandbox.stop sends SIGTERM to every process of the sandbox, a
    container's in its own PID namespace included, and waits the grace
    (docs/API.md sandbox.stop): the PID 1 of the container's namespace
    does not end, and take them with it, before they have. The command's
    SIGTERM handler's output shows in its logs after the stop."""
    rt = _import(world, "crs")
    name = create_rpc(world, "ctrs", persistent=True, networkPolicy="deny-all")
    try:
        rpc_ok(world, "container.create", {"sandbox": name, "name": "a", "runtime": rt})
        script = ("trap 'i=0; while [ $i -lt 20000 ]; do i=$((i+1)); done; echo term; exit 0' TERM; "
                  "echo up; while :; do cat <&0 & wait $!; done")
        cmd = rpc_ok(world, "command.run", {"sandbox": name, "container": "a", "cmd": "/bin/sh", "detached": True,
                                            "args": ["-c", script]})["cmdId"]
        logs = lambda: base64.b64decode(rpc_ok(world, "command.logs", {"cmdId": cmd}).get("stdout") or "").decode()
        poll(lambda: logs() == "up\n", 60, "the container's command to start")
        rpc_ok(world, "sandbox.stop", {"name": name}, 120)
        expect_eq(logs(), "up\nterm\n", "the command's output after the stop: its SIGTERM handler ran")
    finally:
        rpc_ok(world, "sandbox.delete", {"name": name}, 120)
    leaks.check(world, name)
