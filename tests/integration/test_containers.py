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

import world as W
from common import expect, expect_eq, poll, rpc_ok, sandbox_rpc, sh
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


def _modes():
    return [True, False] if os.environ.get("SANDBOXD_TEST_USERNS", "1") != "0" else [False]


def _body(world, root, userns):
    rt_a, rt_b = _import(world, "cra"), _import(world, "crb")
    cm = os.path.join(root, "pod", "configmap")
    os.makedirs(cm)
    with open(os.path.join(cm, "key"), "w") as f:
        f.write("value-1\n")
    hosts = os.path.join(root, "pod", "hosts")
    with open(hosts, "w") as f:
        f.write("127.0.0.1 pod-host\n")
    os.symlink("/etc", os.path.join(root, "pod", "link"))
    with sandbox_rpc(world, "ctr", userns=userns, networkPolicy="deny-all") as name:
        a = rpc_ok(world, "container.create", {
            "sandbox": name, "name": "a", "runtime": rt_a, "memoryMiB": 64,
            "mounts": [{"source": cm, "destination": "/etc/config", "readOnly": True},
                       {"source": hosts, "destination": "/etc/pod-hosts", "readOnly": True}]})
        expect_eq((a["name"], a["runtime"]), ("a", rt_a), "container.create answer")
        rpc_ok(world, "container.create", {"sandbox": name, "name": "b", "runtime": rt_b})
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
        with open(os.path.join(cm, "key")) as f:
            expect_eq(f.read(), "value-1\n", "the host file unchanged")
        # Refusals, each naming the mount.
        for src, why in ((os.path.join(world.tmp), "outside"), (os.path.join(root, "pod", "link"), "symlink"),
                         (root + "/pod/../pod/configmap", "dotdot")):
            e = _err(world, "container.create", {"sandbox": name, "name": "c", "runtime": rt_a,
                                                 "mounts": [{"source": cm, "destination": "/x"},
                                                            {"source": src, "destination": "/y"}]})
            expect("mounts[1].source" in e["message"], "refusal of the %s source names it" % why, e["message"])
        # Usage of a's cgroup; its OOM is its own.
        got = rpc_ok(world, "container.get", {"sandbox": name, "name": "a"})
        expect(got["usage"]["cpuMs"] is not None and got["oomKills"] == 0, "container.get usage", got)
        msg = world.rpc("command.run", {"sandbox": name, "container": "a", "cmd": "/bin/sh", "detached": True,
                                        "args": ["-c", "x=$(cat /dev/zero)"]}, 120)
        r = rpc_ok(world, "command.wait", {"cmdId": msg["result"]["cmdId"]}, 120)
        expect(r.get("oomKilled") is True, "a command over a's 64 MiB is killed and reported", json.dumps(r)[:300])
        got = rpc_ok(world, "container.get", {"sandbox": name, "name": "a"})
        expect(got["oomKills"] >= 1, "a's OOM kill is a's", got)
        got_b = rpc_ok(world, "container.get", {"sandbox": name, "name": "b"})
        expect_eq(got_b["oomKills"], 0, "b saw no OOM kill")
        listed = rpc_ok(world, "container.list", {"sandbox": name})["containers"]
        expect_eq(sorted(c["name"] for c in listed), ["a", "b"], "container.list")
        # Delete: gone, its command refused.
        rpc_ok(world, "container.delete", {"sandbox": name, "name": "b"})
        e = _err(world, "command.run", {"sandbox": name, "container": "b", "cmd": "/bin/true"})
        expect("no container 'b'" in e["message"], "a deleted container runs nothing", e["message"])


def test_containers_have_their_own_root_mounts_cgroup_and_go_with_delete(world):
    _d, root = _daemon(world, "ctr")
    try:
        for userns in _modes():
            _body(world, root, userns)
    finally:
        world.stop_sandboxd()


def test_container_survives_a_daemon_kill(world):
    d, root = _daemon(world, "ctrk")
    try:
        rt = _import(world, "crk")
        with sandbox_rpc(world, "ctrk", networkPolicy="deny-all") as name:
            rpc_ok(world, "container.create", {"sandbox": name, "name": "a", "runtime": rt})
            _run(world, name, "a", "echo kept > /kept", sudo=True)
            os.kill(d.proc.pid, signal.SIGKILL)
            d.proc.wait(10)
            d.start()
            got = rpc_ok(world, "container.get", {"sandbox": name, "name": "a"})
            expect_eq(got["runtime"], rt, "the container after a kill -9 of the daemon")
            code, out, err = _run(world, name, "a", "cat /kept")
            expect_eq((code, out), (0, "kept\n"), "its root after the restart (%s)" % err)
    finally:
        world.stop_sandboxd()


def test_host_mounts_are_root_only(world):
    _d, root = _daemon(world, "ctrn")
    try:
        rt = _import(world, "crn")
        os.makedirs(os.path.join(root, "d"))
        with sandbox_rpc(world, "ctrn", networkPolicy="deny-all") as name:
            # A tenant (a non-root uid of the socket) asks: refused naming mounts.
            uid = 65534
            import subprocess
            p = subprocess.run(["setpriv", "--reuid=%d" % uid, "--regid=%d" % uid, "--clear-groups", "python3", "-c",
                                "import json,socket,sys;s=socket.socket(socket.AF_UNIX);s.connect(sys.argv[1]);"
                                "s.sendall(json.dumps({'jsonrpc':'2.0','id':1,'method':'container.create','params':"
                                "{'sandbox':sys.argv[2],'name':'x','runtime':sys.argv[3],'mounts':[{'source':sys.argv[4],"
                                "'destination':'/d'}]}}).encode()+b'\\n');print(s.makefile().readline())",
                                world.daemon.socket, name, rt, os.path.join(root, "d")],
                               capture_output=True, text=True, timeout=60)
            expect("mounts" in p.stdout or "denied" in p.stdout.lower() or "permission" in p.stderr.lower(),
                   "a non-root client is refused", p.stdout[:300], p.stderr[:300])
            expect("\"result\"" not in p.stdout, "no container for a non-root client", p.stdout[:300])
    finally:
        world.stop_sandboxd()
