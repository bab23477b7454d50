#!/usr/bin/python3
"""Kubernetes pods on sandboxd through the CRI (issue #22): a private
containerd with its CRI plugin (its own root, state, sockets and config with
a `sandboxd` runtime handler), CNI bridge and host-local inside the test
world's host network namespace, images built here and imported (no
registry), and a CRI v1 client generated from tests/cri/proto/api.proto.

    /usr/bin/python3 tests/cri/run.py [SUBSTRING...]     (make cri-test)

Debian's python3 (python3-grpcio, python3-grpc-tools): the stubs are made
into build/cri-py/ with grpc_tools.protoc from the committed api.proto
(kubernetes/cri-api v0.25.0, the CRI v1 that containerd 1.6 serves; its
gogoproto options are stripped, they only shape Go code).

Everything made here is undone even on failure: the pods are stopped and
removed through the CRI, then containerd is stopped by its pid, the shims
it started by theirs, the mounts below containerd's directories (rootfs
snapshots, the pods' network namespaces: netns_mounts_under_state_dir) are
unmounted, CNI's result cache entries of this run's network are removed;
the world removes the namespaces (with the bridge and veths), cgroups and
its temp dir. Exit 1 on any failure.
"""
import base64
import gzip
import hashlib
import io
import json
import os
import shutil
import signal
import subprocess
import sys
import tarfile
import time
import traceback

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "integration"))

import world as W  # noqa: E402
import leaks  # noqa: E402
from common import expect, expect_eq  # noqa: E402

SHIM = os.path.join(W.BUILD, "containerd-shim-sandboxd-v2")
PROTO = os.path.join(HERE, "proto", "api.proto")
STUBS = os.path.join(W.BUILD, "cri-py")
CNI_BIN = "/usr/lib/cni"
CNI_CACHE = "/var/lib/cni/results"   # libcni's cache (not configurable in containerd 1.6's CRI)
BUSYBOX = "/bin/busybox"
APPLETS = ("sh", "echo", "cat", "sleep", "nc", "id", "ls", "env", "wc", "true", "false",
           "ip", "hostname", "mount", "test", "grep", "ps", "kill", "dd", "tr")
HANDLER = "sandboxd"
RUNTIME = "io.containerd.sandboxd.v2"
K8S_NS = "k8s.io"                 # the CRI plugin's containerd namespace
BUSYBOX_IMAGE = "sbx.test/busybox:1"
PAUSE_IMAGE = "sbx.test/pause:1"
POD_SUBNET = "10.244.77.0/24"     # the CNI bridge's range inside the world host netns
BRIDGE = "cribr0"                 # not sbx*: the leak checker owns those names


# ------------------------------------------------------------ CRI client

def make_stubs():
    """The CRI v1 Python stubs in build/cri-py (api_pb2, api_pb2_grpc), made
    again when the proto is newer."""
    os.makedirs(STUBS, exist_ok=True)
    out = os.path.join(STUBS, "api_pb2.py")
    if os.path.exists(out) and os.path.getmtime(out) >= os.path.getmtime(PROTO):
        return
    with open(PROTO) as f:
        text = "".join(line for line in f
                       if not line.startswith('import "github.com/gogo/')
                       and not line.startswith("option (gogoproto."))
    src = os.path.join(STUBS, "api.proto")
    with open(src, "w") as f:
        f.write(text)
    subprocess.run([sys.executable, "-m", "grpc_tools.protoc", "-I", STUBS, "--python_out=" + STUBS,
                    "--grpc_python_out=" + STUBS, src], check=True)


class CRI:
    """The CRI v1 RuntimeService and ImageService over containerd's socket."""

    def __init__(self, sock):
        import grpc
        sys.path.insert(0, STUBS)
        import api_pb2
        import api_pb2_grpc
        self.pb = api_pb2
        self.grpc = grpc
        self.chan = grpc.insecure_channel("unix://" + sock)
        self.rt = api_pb2_grpc.RuntimeServiceStub(self.chan)
        self.img = api_pb2_grpc.ImageServiceStub(self.chan)

    def close(self):
        self.chan.close()

    def call(self, svc, method, timeout=120, **kw):
        req = getattr(self.pb, method + "Request")(**kw)
        return getattr(svc, method)(req, timeout=timeout)

    def r(self, method, **kw):
        return self.call(self.rt, method, **kw)

    def i(self, method, **kw):
        return self.call(self.img, method, **kw)


# ------------------------------------------------------------ images

def make_rootfs(d):
    os.makedirs(os.path.join(d, "bin"))
    for sub in ("etc", "tmp", "proc", "sys", "dev"):
        os.makedirs(os.path.join(d, sub))
    shutil.copy2(BUSYBOX, os.path.join(d, "bin", "busybox"))
    for a in APPLETS:
        os.symlink("busybox", os.path.join(d, "bin", a))


def make_image(rootfs, out, tag, config):
    """An OCI image archive (oci-layout, index.json, blobs) of the tree
    `rootfs` in one gzip layer with image config `config`, its manifest
    tagged `tag` (ctr import --base-name NAME makes it NAME:tag)."""
    blobs = {}

    def blob(data, media):
        dg = hashlib.sha256(data).hexdigest()
        blobs[dg] = data
        return {"mediaType": media, "digest": "sha256:" + dg, "size": len(data)}
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w") as tf:
        for name in sorted(os.listdir(rootfs)):
            tf.add(os.path.join(rootfs, name), arcname=name)
    layer = raw.getvalue()
    diff_id = "sha256:" + hashlib.sha256(layer).hexdigest()
    layer_desc = blob(gzip.compress(layer, mtime=0), "application/vnd.oci.image.layer.v1.tar+gzip")
    cfg = json.dumps({"architecture": "amd64", "os": "linux", "config": config,
                      "rootfs": {"type": "layers", "diff_ids": [diff_id]}}).encode()
    config_desc = blob(cfg, "application/vnd.oci.image.config.v1+json")
    manifest = json.dumps({"schemaVersion": 2, "mediaType": "application/vnd.oci.image.manifest.v1+json",
                           "config": config_desc, "layers": [layer_desc]}).encode()
    man_desc = blob(manifest, "application/vnd.oci.image.manifest.v1+json")
    man_desc["annotations"] = {"org.opencontainers.image.ref.name": tag}
    man_desc["platform"] = {"architecture": "amd64", "os": "linux"}
    index = json.dumps({"schemaVersion": 2, "manifests": [man_desc]}).encode()
    with tarfile.open(out, "w") as tf:
        def add(name, data):
            ti = tarfile.TarInfo(name)
            ti.size = len(data)
            tf.addfile(ti, io.BytesIO(data))
        add("oci-layout", b'{"imageLayoutVersion": "1.0.0"}')
        add("index.json", index)
        for dg, data in blobs.items():
            add("blobs/sha256/" + dg, data)


# ------------------------------------------------------------ containerd

class Containerd:
    """containerd with its CRI plugin, everything under `base`, in the world
    host network namespace (where the CNI bridge is made)."""

    def __init__(self, world, base):
        self.world = world
        self.base = base
        self.root = os.path.join(base, "root")
        self.state = os.path.join(base, "state")
        self.sock = os.path.join(base, "containerd.sock")
        self.log = os.path.join(base, "containerd.log")
        self.cni_conf = os.path.join(base, "net.d")
        self.ipam = os.path.join(base, "ipam")
        self.logs = os.path.join(base, "pod-logs")
        self.net_name = "sbxcri-" + world.id
        self.proc = None

    def write_config(self):
        os.makedirs(self.cni_conf, exist_ok=True)
        os.makedirs(self.logs, exist_ok=True)
        with open(os.path.join(self.cni_conf, "10-sbxcri.conflist"), "w") as f:
            json.dump({"cniVersion": "0.4.0", "name": self.net_name, "plugins": [{
                "type": "bridge", "bridge": BRIDGE, "isGateway": True, "ipMasq": True,
                "hairpinMode": True,
                "ipam": {"type": "host-local", "dataDir": self.ipam,
                         "ranges": [[{"subnet": POD_SUBNET}]], "routes": [{"dst": "0.0.0.0/0"}]}}]}, f)
        cfg = os.path.join(self.base, "config.toml")
        with open(cfg, "w") as f:
            f.write("""version = 2
root = "%(root)s"
state = "%(state)s"
disabled_plugins = ["io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.zfs",
  "io.containerd.snapshotter.v1.devmapper", "io.containerd.snapshotter.v1.aufs",
  "io.containerd.tracing.processor.v1.otlp", "io.containerd.internal.v1.tracing"]
[grpc]
  address = "%(sock)s"
[ttrpc]
  address = "%(sock)s.ttrpc"
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "%(pause)s"
  disable_apparmor = true
  enable_selinux = false
  netns_mounts_under_state_dir = true
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    # No runc here: a pod that names no handler runs on sandboxd too.
    default_runtime_name = "%(handler)s"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.%(handler)s]
      runtime_type = "%(runtime)s"
      pod_annotations = ["io.sandboxd.*"]
      container_annotations = ["io.sandboxd.*"]
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "%(cnibin)s"
    conf_dir = "%(cniconf)s"
    max_conf_num = 1
""" % dict(root=self.root, state=self.state, sock=self.sock, pause=PAUSE_IMAGE, handler=HANDLER,
                runtime=RUNTIME, cnibin=CNI_BIN, cniconf=self.cni_conf))
        return cfg

    def share_mounts(self):
        """`base` as a shared mount (bound onto itself, rshared), made
        before sandboxd starts: sandboxd's mount namespace (a slave of the
        host's) then receives the mounts made below it, such as the pods'
        network namespaces, as on a node whose / is shared (systemd's
        default); the test host's / is private. stop() unmounts it."""
        os.makedirs(self.base, exist_ok=True)
        subprocess.run(["mount", "--bind", self.base, self.base], check=True)
        subprocess.run(["mount", "--make-rshared", self.base], check=True)

    def start(self):
        os.makedirs(self.base, exist_ok=True)
        cfg = self.write_config()
        env = dict(os.environ, PATH=W.BUILD + ":" + os.environ.get("PATH", "/usr/bin:/bin"),
                   SANDBOXD_SOCKET=self.world.daemon.socket)
        cg = self.world.cgroup_dirs
        log = open(self.log, "ab")
        self.proc = subprocess.Popen(
            ["nsenter", "--net=/run/netns/" + self.world.host_ns, "--",
             "containerd", "--config", cfg], stdin=subprocess.DEVNULL, stdout=log, stderr=log,
            env=env, start_new_session=True, preexec_fn=lambda: W._join_cgroups(cg))
        log.close()
        W.World.wait_until(lambda: self.ctr("version").returncode == 0 or self.proc.poll() is not None,
                           30, "containerd to answer")
        if self.proc.poll() is not None:
            raise W.WorldError("containerd exited: %s" % self.log_tail())

    def restart(self):
        """containerd alone stopped (SIGTERM, as systemd restarts it) and
        started again on the same root, state and config: the shims, the
        pods' network namespaces and the snapshots stay."""
        os.kill(self.proc.pid, signal.SIGTERM)
        self.proc.wait(30)
        self.start()

    def ctr(self, *args, timeout=120):
        return subprocess.run(["ctr", "--address", self.sock, "-n", K8S_NS] + list(args),
                              capture_output=True, text=True, timeout=timeout,
                              stdin=subprocess.DEVNULL)

    def log_tail(self, n=30):
        try:
            with open(self.log, errors="replace") as f:
                return "".join(f.readlines()[-n:])
        except OSError:
            return ""

    def shims(self):
        out = []
        for p in os.listdir("/proc"):
            if not p.isdigit():
                continue
            try:
                exe = os.readlink("/proc/%s/exe" % p)
                with open("/proc/%s/cmdline" % p, "rb") as f:
                    cl = f.read()
            except OSError:
                continue
            if exe == os.path.realpath(SHIM) and self.sock.encode() in cl:
                out.append(int(p))
        return out

    def stop(self):
        """containerd by its pid, then any shim it started by theirs, the
        mounts below base, CNI's cache entries of this network."""
        if self.proc and self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                os.kill(self.proc.pid, signal.SIGKILL)
                self.proc.wait(10)
        for pid in self.shims():
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        for mp in sorted(W.mounts_below(self.base), key=len, reverse=True):
            subprocess.run(["umount", "-l", mp], capture_output=True)
        try:
            for n in os.listdir(CNI_CACHE):
                if n.startswith(self.net_name + "-"):
                    os.unlink(os.path.join(CNI_CACHE, n))
        except OSError:
            pass


# ------------------------------------------------------------ pods

class T:
    pass


def pod_config(t, name, annotations=None, pid=None):
    pb = t.cri.pb
    t.seq += 1   # a new uid (and log directory) for each pod, repeated runs too
    uid = "%s-%s-%d" % (name, t.world.id, t.seq)
    logdir = os.path.join(t.c.logs, uid)
    os.makedirs(logdir, exist_ok=True)
    return pb.PodSandboxConfig(
        metadata=pb.PodSandboxMetadata(name=name, uid=uid, namespace="default", attempt=0),
        hostname=name, log_directory=logdir, annotations=annotations or {},
        linux=pb.LinuxPodSandboxConfig(security_context=pb.LinuxSandboxSecurityContext(
            namespace_options=pb.NamespaceOption(network=pb.POD, pid=pb.CONTAINER if pid is None else pid,
                                                 ipc=pb.POD))))


def run_pod(t, name, annotations=None, pid=None):
    cfg = pod_config(t, name, annotations, pid)
    pid = t.cri.r("RunPodSandbox", config=cfg, runtime_handler=HANDLER).pod_sandbox_id
    t.pods.append(pid)
    return pid, cfg


def create_container(t, pod_id, pod_cfg, name, command, args=(), mounts=(), linux=None):
    """linux: a LinuxContainerConfig (the kubelet fills its
    security_context.namespace_options from the pod's; without it the
    CRI's defaults, pid POD)."""
    pb = t.cri.pb
    cfg = pb.ContainerConfig(
        metadata=pb.ContainerMetadata(name=name, attempt=0), image=pb.ImageSpec(image=BUSYBOX_IMAGE),
        command=list(command), args=list(args), log_path="%s.log" % name, mounts=list(mounts),
        linux=linux or pb.LinuxContainerConfig())
    return t.cri.r("CreateContainer", pod_sandbox_id=pod_id, config=cfg,
                   sandbox_config=pod_cfg).container_id


def remove_pod(t, pod_id):
    t.cri.r("StopPodSandbox", pod_sandbox_id=pod_id)
    t.cri.r("RemovePodSandbox", pod_sandbox_id=pod_id)
    t.pods.remove(pod_id)


def container_state(t, cid):
    return t.cri.r("ContainerStatus", container_id=cid).status.state


def pod_ids(t):
    return [p.id for p in t.cri.r("ListPodSandbox").items]


def shim_made(t, method, key):
    """Names of the sandboxes or runtimes the shim made (ctr-*, pod-*: shim/spec.go, shim/pod.go)."""
    return [x["name"] for x in t.world.rpc_result(method)[key] if x["name"].startswith(("ctr-", "pod-"))]


def no_pod_left(t, pod_id):
    """After RemovePodSandbox: the CRI lists neither the pod nor a container
    of it, containerd has no container or task, no shim runs, sandboxd has
    no sandbox or runtime of it, the pod's netns mount is gone."""
    expect(pod_id not in pod_ids(t), "pod %s still listed" % pod_id[:12])
    left = [c.id for c in t.cri.r("ListContainers").containers if c.pod_sandbox_id == pod_id]
    expect(not left, "containers of the pod still listed:", left)
    expect(pod_id not in t.c.ctr("containers", "ls", "-q").stdout.split(), "containerd container left")
    W.World.wait_until(lambda: not t.c.shims(), 20, "the pod's shims to exit")
    W.World.wait_until(lambda: not shim_made(t, "sandbox.list", "sandboxes"), 20,
                       "every sandbox of the pod to be deleted")
    W.World.wait_until(lambda: not shim_made(t, "runtime.list", "runtimes"), 20,
                       "every runtime of the pod to be deleted")
    leaks.check(t.world, "all")
    netns = [m for m in W.mounts_below(t.c.state) if "/netns/" in m]
    expect(not netns, "a pod network namespace is still mounted:", netns)


# ------------------------------------------------------------ tests

def test_version_names_containerd_and_cri_v1(t):
    v = t.cri.r("Version")
    expect_eq(v.runtime_name, "containerd", "runtime name")
    expect_eq(v.runtime_api_version, "v1", "CRI API version")


def test_pod_with_sandboxd_handler_runs_a_container(t):
    """RunPodSandbox with the `sandboxd` handler makes the pod through the
    shim; a container of it runs, its output lands at the CRI log path, and
    StopPodSandbox + RemovePodSandbox leave nothing."""
    pod_id, pod_cfg = run_pod(t, "pod1")
    st = t.cri.r("PodSandboxStatus", pod_sandbox_id=pod_id).status
    expect_eq(st.state, t.cri.pb.SANDBOX_READY, "pod state")
    expect_eq(st.runtime_handler, HANDLER, "the pod's runtime handler")
    cid = create_container(t, pod_id, pod_cfg, "c1", ["sh", "-c", "echo hello-from-pod; sleep 3600"])
    t.cri.r("StartContainer", container_id=cid)
    expect_eq(container_state(t, cid), t.cri.pb.CONTAINER_RUNNING, "container state")
    sbs = t.world.rpc_result("sandbox.list")["sandboxes"]
    expect(len(sbs) >= 1, "the pod is a sandboxd sandbox:", sbs)
    logp = os.path.join(pod_cfg.log_directory, "c1.log")
    W.World.wait_until(lambda: os.path.exists(logp) and "hello-from-pod" in open(logp).read(), 30,
                       "the container's output at its CRI log path %s" % logp)
    with open(logp) as f:
        first = f.readline()
    # CRI log format: RFC3339Nano time, stream, P/F tag, text.
    parts = first.split(" ", 3)
    expect(len(parts) == 4 and parts[1] == "stdout" and parts[2] == "F", "CRI log line:", repr(first))
    t.cri.r("StopContainer", container_id=cid, timeout=10)
    expect_eq(container_state(t, cid), t.cri.pb.CONTAINER_EXITED, "stopped container state")
    t.cri.r("RemoveContainer", container_id=cid)
    remove_pod(t, pod_id)
    no_pod_left(t, pod_id)


def test_exec_sync_in_a_container(t):
    pod_id, pod_cfg = run_pod(t, "pod2")
    cid = create_container(t, pod_id, pod_cfg, "c1", ["sleep", "3600"])
    t.cri.r("StartContainer", container_id=cid)
    r = t.cri.r("ExecSync", container_id=cid, cmd=["sh", "-c", "echo out-$((6*7)); echo err >&2; exit 3"],
                timeout=60)
    expect_eq(r.exit_code, 3, "ExecSync exit code")
    expect_eq(r.stdout, b"out-42\n", "ExecSync stdout")
    expect_eq(r.stderr, b"err\n", "ExecSync stderr")
    remove_pod(t, pod_id)
    no_pod_left(t, pod_id)


def test_container_stats(t):
    """ContainerStats answers from the container's own cgroup in the pod's
    sandbox: memory in use and CPU time are non-zero for a running
    container, and 32 MiB that one container holds (in its own /tmp, a
    tmpfs charged to it) count for it, not for the other container of the
    pod."""
    pod_id, pod_cfg = run_pod(t, "pod4")
    cid = create_container(t, pod_id, pod_cfg, "c1", ["sh", "-c",
                           "i=0; while [ $i -lt 20000 ]; do i=$((i+1)); done; "
                           "dd if=/dev/zero of=/tmp/fill bs=1M count=32 2>/dev/null; echo done; sleep 3600"])
    t.cri.r("StartContainer", container_id=cid)
    idle = create_container(t, pod_id, pod_cfg, "c2", ["sh", "-c", "echo idle; sleep 3600"])
    t.cri.r("StartContainer", container_id=idle)
    for name in ("c1", "c2"):
        logp = os.path.join(pod_cfg.log_directory, name + ".log")
        W.World.wait_until(lambda: os.path.exists(logp) and ("done" in open(logp).read() or "idle" in open(logp).read()),
                           60, "%s to be ready" % name)
    st = t.cri.r("ContainerStats", container_id=cid).stats
    expect_eq(st.attributes.id, cid, "the stats' container id")
    expect(st.memory.working_set_bytes.value >= 32 << 20, "the 32 MiB c1 holds count for it:", st.memory)
    expect(st.cpu.usage_core_nano_seconds.value > 0, "CPU time is reported:", st.cpu)
    st2 = t.cri.r("ContainerStats", container_id=idle).stats
    expect(0 < st2.memory.working_set_bytes.value < 32 << 20, "the idle container's memory is its own:", st2.memory)
    remove_pod(t, pod_id)
    no_pod_left(t, pod_id)


def test_a_container_over_its_memory_limit_is_oom_killed_alone(t):
    """A container over its own memory limit (64 MiB, its own cgroup in the
    pod's sandbox) is OOM-killed as that container: its status is EXITED,
    137, reason OOMKilled; the pod's other container runs on and answers
    ExecSync, the pod stays ready, and sandboxd counts no kill for it.""" 
    pb = t.cri.pb
    pod_id, pod_cfg = run_pod(t, "podoom")
    calm = create_container(t, pod_id, pod_cfg, "calm", ["sleep", "3600"])
    t.cri.r("StartContainer", container_id=calm)
    hog = create_container(t, pod_id, pod_cfg, "hog", ["sh", "-c",
                           "echo start; x=$(dd if=/dev/zero bs=1M count=256 2>/dev/null | tr '\\0' a); "
                           "echo survived ${#x}"],
                           linux=pb.LinuxContainerConfig(resources=pb.LinuxContainerResources(
                               memory_limit_in_bytes=64 << 20)))
    t.cri.r("StartContainer", container_id=hog)
    st = wait_exited(t, hog, 120)
    expect_eq((st.exit_code, st.reason), (137, "OOMKilled"),
              "the hog's exit (its log %r)" % log_lines(pod_cfg, "hog"))
    expect_eq(container_state(t, calm), pb.CONTAINER_RUNNING, "the other container runs on")
    r = t.cri.r("ExecSync", container_id=calm, cmd=["echo", "alive"], timeout=60)
    expect_eq((r.exit_code, r.stdout), (0, b"alive\n"), "ExecSync in the other container")
    expect_eq(t.cri.r("PodSandboxStatus", pod_sandbox_id=pod_id).status.state, pb.SANDBOX_READY,
              "the pod stays ready")
    [sb] = shim_made(t, "sandbox.list", "sandboxes")
    # (The hog's container went with its task's delete, which the CRI
    # does at its exit.)
    kills = [c["oomKills"] for c in t.world.rpc_result("container.list", {"sandbox": sb})["containers"]]
    expect_eq(kills, [0], "the other container counts no OOM kill")
    remove_pod(t, pod_id)
    no_pod_left(t, pod_id)


def test_sandboxd_kill_9_while_the_pod_runs(t):
    """kill -9 of sandboxd while a pod's container runs (live restore keeps
    its sandbox and command): the container stays RUNNING, ExecSync works
    again once the shim has reconnected, output written across the restart
    reaches the CRI log, and the pod is removed cleanly."""
    pod_id, pod_cfg = run_pod(t, "pod5")
    cid = create_container(t, pod_id, pod_cfg, "c1", [
        "sh", "-c", "echo before; while [ ! -e /tmp/go ]; do sleep 0.1; done; echo after-restart; sleep 3600"])
    t.cri.r("StartContainer", container_id=cid)
    logp = os.path.join(pod_cfg.log_directory, "c1.log")
    W.World.wait_until(lambda: os.path.exists(logp) and "before" in open(logp).read(), 30, "the first line")
    d = t.world.daemon
    old = t.world.rpc_result("daemon.info")["pid"]
    os.kill(d.proc.pid, signal.SIGKILL)
    d.proc.wait(10)
    d.start()
    expect(t.world.rpc_result("daemon.info")["pid"] != old, "a new sandboxd answers")
    expect_eq(container_state(t, cid), t.cri.pb.CONTAINER_RUNNING, "the container after sandboxd's kill -9")
    r = t.cri.r("ExecSync", container_id=cid, cmd=["sh", "-c", "touch /tmp/go; echo exec-ok"], timeout=60)
    expect_eq((r.exit_code, r.stdout), (0, b"exec-ok\n"), "ExecSync after the restart (%r)" % r.stderr)
    W.World.wait_until(lambda: "after-restart" in open(logp).read(), 30, "output after the restart in the CRI log")
    with open(logp) as f:
        lines = [ln.split(" ", 3)[3] for ln in f.read().splitlines()]
    expect_eq(lines, ["before", "after-restart"], "the CRI log's lines, each once")
    expect_eq(container_state(t, cid), t.cri.pb.CONTAINER_RUNNING, "the container still runs")
    remove_pod(t, pod_id)
    no_pod_left(t, pod_id)


def test_containerd_restart_while_the_pod_runs(t):
    """containerd restarted while a pod's two containers run: both are
    RUNNING afterwards (containerd reconnects to their shims), ExecSync
    works in each, output written after the restart reaches the CRI log,
    and StopPodSandbox and RemovePodSandbox leave nothing."""
    pb = t.cri.pb
    pod_id, pod_cfg = run_pod(t, "podcr")
    c1 = create_container(t, pod_id, pod_cfg, "c1", [
        "sh", "-c", "echo before; while [ ! -e /tmp/go ]; do sleep 0.1; done; echo after-restart; sleep 3600"])
    t.cri.r("StartContainer", container_id=c1)
    c2 = create_container(t, pod_id, pod_cfg, "c2", ["sleep", "3600"])
    t.cri.r("StartContainer", container_id=c2)
    logp = os.path.join(pod_cfg.log_directory, "c1.log")
    W.World.wait_until(lambda: os.path.exists(logp) and "before" in open(logp).read(), 30, "the first line")
    shims = sorted(t.c.shims())
    old = t.c.proc.pid
    t.c.restart()
    expect(t.c.proc.pid != old and t.c.proc.poll() is None, "a new containerd runs")

    def answers():
        try:
            return t.cri.r("PodSandboxStatus", pod_sandbox_id=pod_id).status.state == pb.SANDBOX_READY
        except t.cri.grpc.RpcError:
            return False
    W.World.wait_until(answers, 60, "the CRI to answer again with the pod ready")
    expect_eq(sorted(t.c.shims()), shims, "the same shims run on")
    for cid in (c1, c2):
        expect_eq(container_state(t, cid), pb.CONTAINER_RUNNING, "container %s after the restart" % cid[:12])
    r = t.cri.r("ExecSync", container_id=c1, cmd=["sh", "-c", "touch /tmp/go; echo exec-ok"], timeout=60)
    expect_eq((r.exit_code, r.stdout), (0, b"exec-ok\n"), "ExecSync in c1 after the restart (%r)" % r.stderr)
    r = t.cri.r("ExecSync", container_id=c2, cmd=["echo", "c2-ok"], timeout=60)
    expect_eq((r.exit_code, r.stdout), (0, b"c2-ok\n"), "ExecSync in c2 after the restart (%r)" % r.stderr)
    W.World.wait_until(lambda: "after-restart" in open(logp).read(), 30, "output after the restart in the CRI log")
    expect_eq(log_lines(pod_cfg, "c1"), ["before", "after-restart"], "the CRI log's lines, each once")
    remove_pod(t, pod_id)
    no_pod_left(t, pod_id)


def test_missing_command_exits_127_and_is_removed(t):
    """A container whose command does not exist: sandboxd starts the
    command and it exits at once with 127, the reason on its stderr
    (docs/API.md command.run), so the container is EXITED with 127 and the
    reason in its CRI log; RemoveContainer and the pod's removal leave
    nothing. (runc fails StartContainer instead; either way the kubelet
    sees the container fail and restarts it by the pod's policy.)"""
    pod_id, pod_cfg = run_pod(t, "pod3")
    cid = create_container(t, pod_id, pod_cfg, "bad", ["/no/such/command"])
    t.cri.r("StartContainer", container_id=cid)
    W.World.wait_until(lambda: container_state(t, cid) == t.cri.pb.CONTAINER_EXITED, 30,
                       "the container to exit")
    st = t.cri.r("ContainerStatus", container_id=cid).status
    expect_eq(st.exit_code, 127, "exit code of a missing command")
    with open(os.path.join(pod_cfg.log_directory, "bad.log")) as f:
        log = f.read()
    expect(" stderr F sandboxd: " in log and "/no/such/command" in log, "the reason in the CRI log:", repr(log))
    t.cri.r("RemoveContainer", container_id=cid)
    expect(cid not in [c.id for c in t.cri.r("ListContainers").containers], "the container is removed")
    expect(cid not in t.c.ctr("containers", "ls", "-q").stdout.split(), "containerd's container is removed")
    remove_pod(t, pod_id)
    no_pod_left(t, pod_id)


def wait_exited(t, cid, secs=60):
    W.World.wait_until(lambda: container_state(t, cid) == t.cri.pb.CONTAINER_EXITED, secs,
                       "container %s to exit" % cid[:12])
    return t.cri.r("ContainerStatus", container_id=cid).status


def log_lines(pod_cfg, name, stream=None):
    """The texts of a container's CRI log lines (time stream tag text),
    of one stream ("stdout", "stderr") or both."""
    with open(os.path.join(pod_cfg.log_directory, name + ".log")) as f:
        return [ln.split(" ", 3)[3] for ln in f.read().splitlines()
                if ln.count(" ") >= 3 and stream in (None, ln.split(" ", 3)[1])]


def test_two_containers_of_a_pod_talk_over_loopback(t):
    """The pod is one sandbox: container b connects to container a's
    listener at 127.0.0.1, and sandboxd has one sandbox for the pod, none
    for either container."""
    pod_id, pod_cfg = run_pod(t, "podlo")
    a = create_container(t, pod_id, pod_cfg, "a", ["sh", "-c", "echo from-a | nc -l -p 7070; sleep 3600"])
    t.cri.r("StartContainer", container_id=a)
    b = create_container(t, pod_id, pod_cfg, "b", ["sh", "-c",
                         "i=0; until nc 127.0.0.1 7070 </dev/null; do i=$((i+1)); [ $i -lt 100 ] || exit 9; sleep 0.1; done"])
    t.cri.r("StartContainer", container_id=b)
    st = wait_exited(t, b)
    expect_eq(st.exit_code, 0, "container b's exit code (its log %r)" % log_lines(pod_cfg, "b"))
    expect_eq(log_lines(pod_cfg, "b"), ["from-a"], "container b read container a's line over 127.0.0.1")
    made = shim_made(t, "sandbox.list", "sandboxes")
    expect(len(made) == 1 and made[0].startswith("pod-"), "one sandbox for the pod, none per container:", made)
    remove_pod(t, pod_id)
    no_pod_left(t, pod_id)


def test_containers_have_their_own_pid_namespace_unless_the_pod_shares_it(t):
    """NamespaceOption pid CONTAINER (Kubernetes' default): container b of
    the pod sees no process of container a, and cannot open a's root
    through /proc/PID/root, even knowing a's pid in the pod's namespace;
    its PID 1 is its own namespace's. pid POD (shareProcessNamespace):
    b sees a's process and reads a's /tmp through /proc/PID/root."""
    pb = t.cri.pb
    find = ("for p in /proc/[0-9]*; do grep -q '[3]601' $p/cmdline 2>/dev/null && echo ${p#/proc/}; done; "
            "cat /proc/1/comm")
    for mode in (pb.CONTAINER, pb.POD):
        pod_id, pod_cfg = run_pod(t, "podpid", pid=mode)
        linux = pb.LinuxContainerConfig(security_context=pb.LinuxContainerSecurityContext(
            namespace_options=pb.NamespaceOption(network=pb.POD, pid=mode, ipc=pb.POD)))
        a = create_container(t, pod_id, pod_cfg, "a", ["sh", "-c", "echo secret-a > /tmp/secret; echo ready; "
                                                                     "exec sleep 3601"], linux=linux)
        t.cri.r("StartContainer", container_id=a)
        b = create_container(t, pod_id, pod_cfg, "b", ["sleep", "3602"], linux=linux)
        t.cri.r("StartContainer", container_id=b)
        W.World.wait_until(lambda: os.path.exists(os.path.join(pod_cfg.log_directory, "a.log"))
                           and log_lines(pod_cfg, "a") == ["ready"], 60, "container a to be ready")
        in_a = t.cri.r("ExecSync", container_id=a, cmd=["sh", "-c", find], timeout=60)
        lines = in_a.stdout.decode().split()
        expect(in_a.exit_code == 0 and len(lines) == 2, "a finds its own process:", in_a)
        pid_in_a = lines[0]
        in_b = t.cri.r("ExecSync", container_id=b, cmd=["sh", "-c", find], timeout=60)
        if mode == pb.CONTAINER:
            expect_eq((in_a.exit_code, lines[1]), (0, "sandbox-ctrinit"), "a's PID 1 (its comm) is its own namespace's")
            expect_eq(in_b.stdout, b"sandbox-ctrinit\n", "b lists no process of a, under its own PID 1")
            # a's pid as the pod's sandbox sees it: from b, neither its
            # root nor a signal reaches it.
            ps = t.world.rpc_result("command.run", {"sandbox": shim_made(t, "sandbox.list", "sandboxes")[0],
                                                    "cmd": "/bin/sh", "sudo": True, "args": ["-c",
                                                    "grep -l '[3]601' /proc/[0-9]*/cmdline"]})
            logs = t.world.rpc_result("command.logs", {"cmdId": ps["cmdId"]})
            out = base64.b64decode(logs.get("stdout") or "").decode()
            outer = [x.split("/")[2] for x in out.split() if x.split("/")[2].isdigit()]
            expect(outer, "the pod's sandbox sees a's process:", ps)
            # (a's pid in its own namespace is b's own process's in b's.)
            for pid in outer + [pid_in_a]:
                r = t.cri.r("ExecSync", container_id=b, cmd=["sh", "-c", "cat /proc/%s/root/tmp/secret; "
                                                             "kill -0 %s && echo signalled" % (pid, pid)], timeout=60)
                expect(b"secret-a" not in r.stdout and (pid == pid_in_a or b"signalled" not in r.stdout),
                       "b reaches a's process %s:" % pid, r)
        else:
            pids = in_b.stdout.decode().split()[:-1]
            expect_eq(len(pids), 1, "b sees a's process in the pod's shared namespace (%r)" % in_b.stdout)
            r = t.cri.r("ExecSync", container_id=b, cmd=["cat", "/proc/%s/root/tmp/secret" % pids[0]], timeout=60)
            expect_eq((r.exit_code, r.stdout), (0, b"secret-a\n"), "b reads a's /tmp through /proc/PID/root")
        remove_pod(t, pod_id)
        no_pod_left(t, pod_id)


def test_pod_policy_annotation_admits_and_refuses(t):
    """The pod's io.sandboxd.network-policy applies to its containers: the
    admitted test-world name is reached; another name is refused at once
    at once (the DNS filter has no answer for it) and so is an address
    outside the policy (rejected: connection refused), each with its
    reason in the container's log."""
    pol = json.dumps({"allow": ["api.public.test"]})
    pod_id, pod_cfg = run_pod(t, "podpol", annotations={"io.sandboxd.network-policy": pol})
    script = ("nc -w 5 api.public.test %d </dev/null && echo allowed-ok; "
              "nc -w 10 other.public.test %d </dev/null; echo other=$?; "
              "nc -w 10 %s %d </dev/null; echo direct=$?"
              % (W.LISTEN_PORT, W.LISTEN_PORT, W.PUB_OTHER_ADDR, W.LISTEN_PORT))
    cid = create_container(t, pod_id, pod_cfg, "c1", ["sh", "-c", script])
    t.cri.r("StartContainer", container_id=cid)
    st = wait_exited(t, cid)
    lines = log_lines(pod_cfg, "c1")
    expect_eq(st.exit_code, 0, "exit code (log %r)" % lines)
    expect("allowed-ok" in lines, "the admitted name is reached:", lines)
    # Refused, not timed out: nc's reasons are the DNS filter's answer
    # (no address) and the reject (connection refused), not "timeout".
    expect("other=1" in lines and "nc: bad address 'other.public.test'" in lines,
           "another name is refused with its reason:", lines)
    expect("direct=1" in lines and any(ln.endswith("(%s): Connection refused" % W.PUB_OTHER_ADDR) for ln in lines),
           "an address outside the policy is refused with its reason:", lines)
    expect(not [ln for ln in lines if "timeout" in ln or "timed out" in ln], "nothing timed out:", lines)
    remove_pod(t, pod_id)
    no_pod_left(t, pod_id)


def test_another_pod_reaches_the_pod_ip(t):
    """The pod's sandbox joins the network namespace CNI made for it: the
    pod keeps its IP on the CNI bridge (PodSandboxStatus), a container
    listening in it is reached at that IP by another pod's container, and
    the container sees that IP on its own eth0."""
    pod_a, cfg_a = run_pod(t, "podip-a")
    ip = t.cri.r("PodSandboxStatus", pod_sandbox_id=pod_a).status.network.ip
    expect(ip.startswith(POD_SUBNET.rsplit(".", 2)[0]), "pod a has an IP of the CNI range:", ip)
    srv = create_container(t, pod_a, cfg_a, "srv", ["sh", "-c",
                           "ip -4 addr show eth0; echo from-pod-a | nc -l -p 8080; sleep 3600"])
    t.cri.r("StartContainer", container_id=srv)
    pod_b, cfg_b = run_pod(t, "podip-b")
    cli = create_container(t, pod_b, cfg_b, "cli", ["sh", "-c",
                           "i=0; until nc %s 8080 </dev/null; do i=$((i+1)); [ $i -lt 100 ] || exit 9; sleep 0.1; done" % ip])
    t.cri.r("StartContainer", container_id=cli)
    st = wait_exited(t, cli)
    expect_eq(st.exit_code, 0, "the client's exit code (its log %r)" % log_lines(cfg_b, "cli"))
    expect_eq(log_lines(cfg_b, "cli"), ["from-pod-a"], "pod b read pod a's line at %s" % ip)
    expect(any(("inet %s/" % ip) in ln for ln in log_lines(cfg_a, "srv")),
           "pod a's container has the pod IP on eth0:", log_lines(cfg_a, "srv"))
    remove_pod(t, pod_b)
    remove_pod(t, pod_a)
    no_pod_left(t, pod_a)
    no_pod_left(t, pod_b)


def test_configmap_and_secret_mounted_read_only(t):
    """A ConfigMap-like and a Secret-like directory of a kubelet-like pod
    directory (below daemon.json hostMountRoots), mounted read-only
    through the CRI: the container reads both and cannot write either; a
    host path outside hostMountRoots fails the container's start naming
    it."""
    pod_id, pod_cfg = run_pod(t, "podvol")
    vols = os.path.join(t.kubelet_pods, pod_cfg.metadata.uid, "volumes")
    cm = os.path.join(vols, "kubernetes.io~configmap", "cfg")
    sec = os.path.join(vols, "kubernetes.io~secret", "sec")
    for d, name, text in ((cm, "greeting", "hello-config\n"), (sec, "token", "s3cret-token\n")):
        os.makedirs(d)
        with open(os.path.join(d, name), "w") as f:
            f.write(text)
    pb = t.cri.pb
    mounts = [pb.Mount(container_path="/etc/config", host_path=cm, readonly=True),
              pb.Mount(container_path="/var/run/secrets/app", host_path=sec, readonly=True)]
    cid = create_container(t, pod_id, pod_cfg, "c1", ["sh", "-c",
                           "cat /etc/config/greeting /var/run/secrets/app/token; "
                           "echo x > /etc/config/greeting; echo cfg=$?; "
                           "echo x > /var/run/secrets/app/new; echo sec=$?"], mounts=mounts)
    t.cri.r("StartContainer", container_id=cid)
    st = wait_exited(t, cid)
    lines, errs = log_lines(pod_cfg, "c1", "stdout"), log_lines(pod_cfg, "c1", "stderr")
    expect_eq(st.exit_code, 0, "exit code (log %r %r)" % (lines, errs))
    expect_eq(lines, ["hello-config", "s3cret-token", "cfg=1", "sec=1"],
              "both mounted files are read, neither written (stderr %r)" % errs)
    expect_eq(errs, ["sh: can't create /etc/config/greeting: Read-only file system",
                     "sh: can't create /var/run/secrets/app/new: Read-only file system"], "the writes' errors")
    with open(os.path.join(cm, "greeting")) as f:
        expect_eq(f.read(), "hello-config\n", "the ConfigMap's file on the host is unchanged")
    expect(not os.path.exists(os.path.join(sec, "new")), "nothing was written to the Secret's directory")
    outside = os.path.join(t.world.tmp, "not-kubelet")
    os.makedirs(outside, exist_ok=True)
    c2 = create_container(t, pod_id, pod_cfg, "c2", ["echo", "ran"],
                          mounts=[pb.Mount(container_path="/x", host_path=outside, readonly=True)])
    try:
        t.cri.r("StartContainer", container_id=c2)
        expect(False, "a host path outside hostMountRoots is refused")
    except t.cri.grpc.RpcError as e:
        # The shim's task is made at StartContainer (CreateContainer makes
        # containerd's container only).
        expect("hostMountRoots" in e.details() and "mounts" in e.details(),
               "StartContainer fails naming the mount and hostMountRoots:", e.details())
    remove_pod(t, pod_id)
    no_pod_left(t, pod_id)


# ------------------------------------------------------------ main

def preflight():
    """None when every tool is there, else the reason to skip."""
    for tool in ("containerd", "ctr", "nsenter"):
        if not shutil.which(tool):
            return "%s not installed" % tool
    for plugin in ("bridge", "host-local", "loopback"):
        if not os.access(os.path.join(CNI_BIN, plugin), os.X_OK):
            return "CNI plugin %s missing (containernetworking-plugins)" % plugin
    try:
        import grpc  # noqa: F401
        import grpc_tools  # noqa: F401
    except ImportError:
        return "python3-grpcio / python3-grpc-tools missing (run with Debian's /usr/bin/python3)"
    return None


def main():
    filters = sys.argv[1:]
    why = preflight()
    if why:
        print("cri: SKIP (%s; scripts/install-deps)" % why)
        return 0
    for need, what in ((SHIM, "make shim"), (BUSYBOX, "busybox-static")):
        if not os.access(need, os.X_OK):
            print("cri: %s missing (%s)" % (need, what))
            return 1
    make_stubs()
    tests = [(n, f) for n, f in sorted(globals().items(), key=lambda kv: getattr(kv[1], "__code__", None)
                                        and kv[1].__code__.co_firstlineno or 0)
             if n.startswith("test_") and callable(f) and (not filters or any(x in n for x in filters))]
    failed = 0
    runs = tests * int(os.environ.get("CRI_TEST_REPEAT", "1"))
    with W.World() as world:
        t = T()
        t.world = world
        t.pods = []
        t.seq = 0
        rootfs = os.path.join(world.tmp, "rootfs")
        make_rootfs(rootfs)
        t.c = Containerd(world, os.path.join(world.tmp, "containerd"))
        t.cri = None
        try:
            t.c.share_mounts()
            # The kubelet-like pod directory: pods' volumes come from here
            # only (daemon.json hostMountRoots, as on a node).
            t.kubelet_pods = os.path.join(world.tmp, "kubelet", "pods")
            os.makedirs(t.kubelet_pods)
            world.start_sandboxd(config={"hostMountRoots": [t.kubelet_pods]})
            t.c.start()
            for ref, cfg, tag in ((BUSYBOX_IMAGE, {"Env": ["PATH=/bin"], "Cmd": ["sh"]}, "busybox"),
                                  (PAUSE_IMAGE, {"Env": ["PATH=/bin"], "Entrypoint": ["/bin/sleep", "2147483647"]},
                                   "pause")):
                tar = os.path.join(world.tmp, tag + ".tar")
                base, tag_ = ref.rsplit(":", 1)
                make_image(rootfs, tar, tag_, cfg)
                r = t.c.ctr("images", "import", "--base-name", base, tar)
                if r.returncode != 0 or ref not in t.c.ctr("images", "ls", "-q").stdout.split():
                    raise W.WorldError("ctr images import %s: %s %s %s" % (ref, r.stdout, r.stderr,
                                                                          t.c.ctr("images", "ls", "-q").stdout))
            t.cri = CRI(t.c.sock)
            # The CRI learns of imported images from containerd's events:
            # RunPodSandbox before it knows the pause image would pull it.
            W.World.wait_until(lambda: {BUSYBOX_IMAGE, PAUSE_IMAGE} <= {
                tag for i in t.cri.i("ListImages").images for tag in i.repo_tags}, 30,
                "the CRI to list both imported images")
            for name, fn in runs:
                t0 = time.monotonic()
                try:
                    fn(t)
                    print("PASS %s (%.1fs)" % (name, time.monotonic() - t0), flush=True)
                except Exception:
                    failed += 1
                    print("FAIL %s\n%s" % (name, traceback.format_exc()), flush=True)
                    print("containerd log:\n" + t.c.log_tail(), flush=True)
                    print("sandboxd log:\n" + world.daemon.log_tail(20), flush=True)
                for pod_id in list(t.pods):
                    try:
                        remove_pod(t, pod_id)
                    except Exception as e:
                        print("cleanup of pod %s: %s" % (pod_id[:12], e), flush=True)
        except BaseException:
            print("containerd log:\n" + t.c.log_tail(), flush=True)
            raise
        finally:
            if t.cri:
                t.cri.close()
            t.c.stop()
    print("cri: %d passed, %d failed" % (len(runs) - failed, failed))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
