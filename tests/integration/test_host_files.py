"""What root inside a sandbox writes stays out of the host's reach, and
nothing of the host's secrets reaches a sandbox: each sandbox's directory
and the snapshot/fork layers are root-only on the host (a setuid-root file
made inside must not be runnable by a host user), the host's TLS private
keys are not bound in, /proc/key-users is masked, and restoring a user
namespace sandbox's snapshot keeps the user namespace."""
import os
import stat

import leaks
from common import create, delete, expect, expect_eq, get, sh, sh_ok
from common import sandbox as W_sandbox


def _mode(path):
    st = os.stat(path)
    return st.st_uid, stat.S_IMODE(st.st_mode)


def test_sandbox_and_layer_directories_are_root_only(world):
    src, _c, _o, _e = create(world, "rootonly", "--deny-all")
    fork = world.name("rootonlyf")
    try:
        sh_ok(world, src, "cp /usr/bin/id /workspace/rootid && chmod 4755 /workspace/rootid", "--sudo")
        state = world.daemon.state_dir
        uid, mode = _mode(os.path.join(state, "sandboxes", src))
        expect_eq((uid, mode & 0o077), (0, 0), "the sandbox's directory: root-only (mode %o)" % mode)
        code, _o, err = world.ctl("fork", src, "--name", fork)
        expect_eq(code, 0, "fork (%s)" % err.strip())
        uid, mode = _mode(os.path.join(state, "layers"))
        expect_eq((uid, mode & 0o077), (0, 0), "the layers directory: root-only (mode %o)" % mode)
        uid, mode = _mode(os.path.join(state, "sandboxes", fork))
        expect_eq((uid, mode & 0o077), (0, 0), "the fork's directory: root-only (mode %o)" % mode)
    finally:
        delete(world, fork)
        delete(world, src)
    leaks.check(world, src)
    leaks.check(world, fork)


def test_host_tls_private_keys_and_key_users_are_not_visible(world):
    with_name, _c, _o, _e = create(world, "tlskeys", "--deny-all")
    try:
        code, out, _e = sh(world, with_name, "ls -d /etc/ssl/private 2>&1; echo rc=$?", "--sudo")
        expect("rc=0" not in out, "the host's /etc/ssl/private is not inside:", out.strip())
        code, out, _e = sh(world, with_name, "test -s /etc/ssl/certs/ca-certificates.crt && "
                                             "test -f /etc/ssl/openssl.cnf && echo ok")
        expect_eq(out, "ok\n", "the CA bundle and openssl.cnf are still there")
        code, out, _e = sh(world, with_name, "cat /proc/key-users | wc -c", "--sudo")
        expect_eq(out.strip(), "0", "/proc/key-users is masked")
    finally:
        delete(world, with_name)
    leaks.check(world, with_name)


def test_snapshot_of_a_userns_sandbox_restores_with_its_user_namespace(world):
    info = world.rpc_result("daemon.info")
    if not (info.get("capabilities", {}).get("userns") or {}).get("available"):
        import world as W
        raise W.Skip("user namespaces are not available on this host")
    src, _c, _o, _e = create(world, "usnap", "--deny-all", "--userns")
    restored = world.name("usnapr")
    snap = None
    try:
        code, out, err = world.ctl("snapshot", src)
        expect_eq(code, 0, "snapshot (%s)" % err.strip())
        snap = out.strip()
        code, _o, err = world.ctl("create", "--name", restored, "--snapshot", snap)
        expect_eq(code, 0, "create from the snapshot (%s)" % err.strip())
        sb, _c, _e = get(world, restored)
        expect_eq(sb.get("userns"), True, "the restored sandbox keeps the user namespace")
    finally:
        delete(world, restored)
        delete(world, src)
        if snap:
            world.ctl("snapshots", "rm", snap)
    leaks.check(world, src)
    leaks.check(world, restored)


def test_session_ca_key_is_root_only_and_goes_with_the_sandbox(world):
    name, _c, _o, _e = create(world, "cakey", "--allow", "api.public.test")
    d = os.path.join(world.daemon.run_dir, "sandboxes", name, "proxy")
    try:
        keys = [f for f in os.listdir(d) if f.endswith(".key")]
        expect(keys, "a CA key in", d)
        uid, mode = _mode(d)
        expect_eq((uid, mode & 0o077), (0, 0), "the CA directory: root-only (mode %o)" % mode)
        for k in keys:
            uid, mode = _mode(os.path.join(d, k))
            expect_eq((uid, mode), (0, 0o600), "the CA key %s" % k)
        code, out, _e = sh(world, name, "grep -rl 'PRIVATE KEY' /etc /tmp /run /workspace 2>/dev/null; echo end",
                           "--sudo")
        expect_eq(out, "end\n", "no private key readable inside the sandbox")
    finally:
        delete(world, name)
    expect(not os.path.exists(d), "the CA directory is removed with the sandbox")
    leaks.check(world, name)


def _host_os_release():
    with open("/etc/os-release") as f:
        text = f.read()
    fields = {}
    for line in text.splitlines():
        k, sep, v = line.partition("=")
        if sep:
            fields[k] = v.strip('"')
    return text, fields


def test_host_runtime_has_the_hosts_os_release(world):
    """/etc/os-release inside a host-runtime sandbox is the host's (pip,
    package managers and lsb_release read it), with and without a user
    namespace."""
    text, fields = _host_os_release()
    modes = ["--no-userns"]
    info = world.rpc_result("daemon.info")
    if (info.get("capabilities", {}).get("userns") or {}).get("available"):
        modes.append("--userns")
    for mode in modes:
        with W_sandbox(world, "osrel", "--deny-all", mode) as name:
            out = sh_ok(world, name, "cat /etc/os-release")
            expect_eq(out, text, "cat /etc/os-release (%s)" % mode)
            out = sh_ok(world, name, "python3 -c 'import platform; "
                                     "print(platform.freedesktop_os_release()[\"ID\"])'")
            expect_eq(out.strip(), fields.get("ID"), "platform.freedesktop_os_release() ID (%s)" % mode)
