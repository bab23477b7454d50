"""User-namespace sandboxes (DESIGN §4, docs/SECURITY.md §3.9): sandbox ids
0..65535 map to a host range of their own, files keep sandbox ids on disk,
and what sandbox root may do is judged against host ids it does not hold."""
import ctypes
import fcntl
import json
import os
import subprocess
import tempfile

import leaks
import world as W
from common import create, delete, expect, expect_eq, get, poll, sh, sh_ok

POOL_START = 100000000  # daemon.json default usernsBase
RANGE = 65536


def _init_pid(world, name):
    """The host pid of NAME's sandbox-init: a child of the daemon running
    from the sealed memfd whose UTS hostname is the sandbox's name, or the
    one its session record names (re-adopted after a restart)."""
    for p in os.listdir("/proc"):
        if not p.isdigit():
            continue
        try:
            with open("/proc/%s/stat" % p) as f:
                st = f.read()
            if int(st[st.rindex(")") + 2:].split()[1]) != world.daemon.pid:
                continue
            if "sandbox-init" not in os.readlink("/proc/%s/exe" % p):
                continue
            with open("/proc/%s/root/etc/hostname" % p) as f:
                if f.read().strip() == name:
                    return int(p)
        except (OSError, ValueError):
            continue
    # A session re-adopted after a daemon restart: its init is no child of
    # this daemon; the session record names it.
    try:
        with open(os.path.join(world.daemon.run_dir, "sandboxes", name, "session.json")) as f:
            return int(json.load(f)["pid"])
    except (OSError, ValueError, KeyError):
        pass
    raise AssertionError("no sandbox-init found for %s" % name)


def _range(world, name):
    sb, code, err = get(world, name)
    expect(sb is not None, "get %s: exit" % name, code, err)
    expect_eq(sb.get("userns"), True, "get shows userns")
    r = sb.get("usernsRange") or {}
    expect_eq(r.get("count"), RANGE, "ids per sandbox")
    start = r.get("start")
    expect(isinstance(start, int) and start >= POOL_START and (start - POOL_START) % RANGE == 0,
           "range start in the pool on a range boundary:", start)
    return start


def test_daemon_info_says_userns_works_here(world):
    info = world.rpc_result("daemon.info")
    u = info["capabilities"]["userns"]
    expect_eq((u.get("available"), u.get("mode")), (True, "idmapped-overlay"),
              "userns capability (%s)" % u.get("reason"))
    mode = os.environ.get("SANDBOXD_TEST_USERNS")
    expect_eq((u.get("default"), u.get("defaultFrom")),
              (mode != "0", "host" if mode is None else "daemon.json"),
              "the default in force and where it comes from")
    uid, gid = W.plain_user()
    expect_eq(u.get("plainUser"), {"name": "sandboxd-user", "available": True, "uid": uid, "gid": gid},
              "the sandbox user's host account without a user namespace")


def _without_suite_mode(fn):
    """Runs fn() with SANDBOXD_TEST_USERNS unset, so a daemon started in it
    gets no "userns" key from the world (the built-in default)."""
    saved = os.environ.pop("SANDBOXD_TEST_USERNS", None)
    try:
        return fn()
    finally:
        if saved is not None:
            os.environ["SANDBOXD_TEST_USERNS"] = saved


def test_user_namespace_is_the_default_where_the_host_supports_it(world):
    """No "userns" in daemon.json and no flag at create: the sandbox gets a
    user namespace (its uid_map is a range, not the identity map)."""
    world.stop_sandboxd()
    d = _without_suite_mode(lambda: world.start_sandboxd({}, tag="unsdef"))
    name = world.name("unsdef")
    try:
        u = d.rpc_result("daemon.info")["capabilities"]["userns"]
        expect_eq((u.get("default"), u.get("defaultFrom")), (True, "host"), "daemon.info without a userns key")
        code, _o, err = d.ctl("create", "--name", name, "--deny-all")
        expect_eq(code, 0, "create without flags (%s)" % err.strip())
        sb = d.rpc_result("sandbox.get", {"name": name})
        expect_eq(sb.get("userns"), True, "sandbox.get: userns")
        code, out, err = d.ctl("exec", name, "--", "sh", "-c", "cat /proc/self/uid_map; id -u")
        expect_eq(code, 0, "exec (%s)" % err.strip())
        lines = out.split("\n")
        expect(lines[0].split() != ["0", "0", "4294967295"], "the identity uid_map: no user namespace:", out)
        expect_eq(lines[0].split(), ["0", str(sb["usernsRange"]["start"]), str(RANGE)], "uid_map inside")
        expect_eq(lines[1], "1000", "the sandbox user inside")
    finally:
        d.ctl("rm", name)
        world.stop_sandboxd(d)
        world.start_sandboxd()


def test_a_host_without_idmapped_mounts_falls_back_to_no_user_namespace_with_a_log_line(world):
    """State on a filesystem without idmapped mounts (ramfs): without a
    "userns" key the daemon starts, says in its log and in daemon.info that
    the default fell back and why, and refuses --userns sandboxes naming the
    reason; "userns": true there stops the start (fail closed)."""
    world.stop_sandboxd()
    mnt = tempfile.mkdtemp(dir=world.tmp)
    subprocess.run(["mount", "-t", "ramfs", "-o", "mode=0755", "ramfs", mnt], check=True)
    try:
        d = world.add_sandboxd({}, tag="unsfb", state_dir=os.path.join(mnt, "s1"))
        try:
            _without_suite_mode(d.start)
            u = d.rpc_result("daemon.info")["capabilities"]["userns"]
            expect_eq((u.get("available"), u.get("default"), u.get("defaultFrom")), (False, False, "fallback"),
                      "daemon.info on a host that cannot")
            expect("idmapped mount" in u.get("reason", ""), "the reason names idmapped mounts:", u.get("reason"))
            expect("user namespaces unavailable here" in d.log_tail(40) and "sandboxes run without one" in
                   d.log_tail(40), "the log says the default fell back:", d.log_tail(10))
            msg = d.rpc("sandbox.create", {"name": world.name("fbu"), "userns": True, "networkPolicy": "deny-all"})
            err = msg.get("error") or {}
            expect_eq((err.get("data") or {}).get("reason"), "unavailable", "create --userns there: %s" % err)
            expect("idmapped mount" in err.get("message", ""), "the error says why:", err)
        finally:
            world.stop_sandboxd(d)
        d = world.add_sandboxd({"userns": True}, tag="unsfbt", state_dir=os.path.join(mnt, "s2"))
        started = False
        try:
            d.start()
            started = True
        except Exception as e:  # WorldError: sandboxd exited at start
            expect("userns" in str(e), "the start failure names userns:", str(e)[-400:])
        finally:
            world.stop_sandboxd(d)
        expect(not started, "sandboxd started with userns true where the host cannot")
    finally:
        subprocess.run(["umount", mnt], check=False)
        world.start_sandboxd()


def test_a_transient_probe_failure_at_start_keeps_user_namespaces_on_and_is_probed_again(world):
    """The start-up probe's scratch work fails (as on a full or read-only
    state filesystem; core_fault_error "userns.probe", EIO, twice): the
    daemon keeps user namespaces available and the default on, logs a
    warning naming the reason, refuses the first create that needs one with
    that reason (never a silent sandbox without one), and once the probe
    passes again the next create gets a user namespace, without a restart."""
    world.stop_sandboxd()
    d = world.add_sandboxd({}, tag="unstr")
    name = world.name("unstr")
    try:
        _without_suite_mode(lambda: d.start(binary=W.FAULTS_SANDBOXD, env={"SANDBOXD_FAIL": "userns.probe:2"}))
        u = d.rpc_result("daemon.info")["capabilities"]["userns"]
        expect_eq((u.get("available"), u.get("default"), u.get("defaultFrom")), (True, True, "host"),
                  "daemon.info after a transient probe failure: %s" % u)
        expect("injected failure" in u.get("probeError", ""), "daemon.info names the probe error:", u)
        log = d.log_tail(60)
        expect("the user-namespace probe failed" in log and "stay on" in log,
               "the log warns and says user namespaces stay on:", log[-800:])
        expect("sandboxes run without one" not in log, "the log announces a fallback:", log[-800:])
        msg = d.rpc("sandbox.create", {"name": name, "networkPolicy": "deny-all"}, timeout=60)
        err = msg.get("error") or {}
        expect_eq((err.get("data") or {}).get("reason"), "unavailable", "create while the probe fails: %s" % msg)
        expect("probe failed" in err.get("message", "") and "injected failure" in err.get("message", ""),
               "the error names the probe's failure:", err)
        expect(d.rpc("sandbox.get", {"name": name}).get("error"), "no sandbox left by the refused create")
        code, _o, cerr = d.ctl("create", "--name", name, "--deny-all")
        expect_eq(code, 0, "create once the probe passes (%s)" % cerr.strip())
        sb = d.rpc_result("sandbox.get", {"name": name})
        expect_eq(sb.get("userns"), True, "sandbox.get: userns")
        code, out, xerr = d.ctl("exec", name, "--", "cat", "/proc/self/uid_map")
        expect_eq(code, 0, "exec (%s)" % xerr.strip())
        expect_eq(out.split(), ["0", str(sb["usernsRange"]["start"]), str(RANGE)], "uid_map inside")
        u = d.rpc_result("daemon.info")["capabilities"]["userns"]
        expect_eq((u.get("available"), u.get("default"), "probeError" in u), (True, True, False),
                  "daemon.info once the probe passed: %s" % u)
    finally:
        d.ctl("rm", name)
        world.stop_sandboxd(d)
        world.start_sandboxd()


def _sandbox_processes(init_pid):
    """Host pids of the processes in the PID namespace of init_pid, init
    and its container helper (sandbox-ctrd, a child of init, which makes
    containers' mount namespaces and runs no command) excluded."""
    ns = os.readlink("/proc/%d/ns/pid" % init_pid)
    out = []
    for p in os.listdir("/proc"):
        if not p.isdigit() or int(p) == init_pid:
            continue
        try:
            if os.readlink("/proc/%s/ns/pid" % p) != ns:
                continue
            with open("/proc/%s/stat" % p) as f:
                stat = f.read()
            comm = stat[stat.index("(") + 1:stat.rindex(")")]
            ppid = int(stat[stat.rindex(")") + 2:].split()[1])
            if comm == "sandbox-ctrd" and ppid == init_pid:
                continue
            out.append(int(p))
        except (OSError, ValueError, IndexError):
            continue
    return out


def _status_ids(pid):
    """(Uid, Gid) lines of /proc/<pid>/status: real, effective, saved, fs."""
    with open("/proc/%d/status" % pid) as f:
        st = f.read()
    field = lambda k: [int(x) for x in st.split("\n%s:" % k, 1)[1].split("\n", 1)[0].split()]
    return field("Uid"), field("Gid")


def test_without_userns_the_sandbox_user_is_the_system_account_not_host_uid_1000(world):
    """"userns": false: commands run as the host's sandboxd-user account
    (a system id), never host uid 1000 (the first person's account on most
    machines): from the host, the sandbox's processes carry that uid as
    real, effective, saved and fs uid, so RLIMIT_NPROC and the per-user
    kernel counts charge sandboxd-user, not that person; its files on disk
    are sandboxd-user's and host uid 1000 cannot read them."""
    uid, gid = W.plain_user()
    expect(uid != 1000 and 0 < uid < 1000 and 0 < gid < 1000, "sandboxd-user is a system account:", uid, gid)
    world.stop_sandboxd()
    d = world.start_sandboxd({"userns": False}, tag="plain")
    name = world.name("plainu")
    try:
        u = d.rpc_result("daemon.info")["capabilities"]["userns"]
        expect_eq((u.get("default"), u.get("defaultFrom")), (False, "daemon.json"), "daemon.info default")
        code, _o, err = d.ctl("create", "--name", name, "--deny-all")
        expect_eq(code, 0, "create (%s)" % err.strip())
        expect_eq(d.rpc_result("sandbox.get", {"name": name}).get("userns"), False, "sandbox.get: userns")
        code, out, err = d.ctl("exec", name, "--", "sh", "-c",
                               "cat /proc/self/uid_map; id -u; id -g; id -un; grep ^sandbox: /etc/passwd /etc/group; "
                               "stat -c %u:%g /home/sandbox /workspace; echo mine > /workspace/f")
        expect_eq(code, 0, "exec (%s)" % err.strip())
        lines = out.split("\n")
        expect_eq(lines[0].split(), ["0", "0", "4294967295"], "uid_map: no user namespace")
        expect_eq(lines[1:5], [str(uid), str(gid), "sandbox", "/etc/passwd:sandbox:x:%d:%d:sandbox:/home/sandbox:%s"
                                % (uid, gid, lines[4].rsplit(":", 1)[-1])], "the sandbox user inside")
        expect_eq(lines[5:8], ["/etc/group:sandbox:x:%d:" % gid, "%d:%d" % (uid, gid), "%d:%d" % (uid, gid)],
                  "group entry, owners of $HOME and /workspace")
        # Long-lived processes of the sandbox user, seen from the host.
        code, out, err = d.ctl("exec", "--detach", name, "--", "sh", "-c", "sleep 300 & sleep 300 & wait")
        expect_eq(code, 0, "start sleepers (%s)" % err.strip())
        init = _init_pid_of(d, name)
        W.World.wait_until(lambda: len(_sandbox_processes(init)) >= 3, 20, "the sandbox's sleepers")
        for pid in _sandbox_processes(init):
            try:
                uids, gids = _status_ids(pid)
            except (OSError, IndexError):
                continue  # exited meanwhile
            expect_eq(uids, [uid] * 4, "host uids of sandbox process %d (real, effective, saved, fs)" % pid)
            expect_eq(gids, [gid] * 4, "host gids of sandbox process %d" % pid)
            expect(1000 not in uids, "a sandbox process runs as host uid 1000")
        # Through the daemon's mount namespace: the upper may be its own
        # disk image, mounted there.
        ns = ["nsenter", "-t", str(d.pid), "-m", "--"]
        on_disk = os.path.join(d.state_dir, "sandboxes", name, "upper", "workspace", "f")
        p = subprocess.run(ns + ["stat", "-c", "%u %g", on_disk], capture_output=True, text=True, timeout=30)
        expect_eq(p.stdout.strip(), "%d %d" % (uid, gid), "on-disk owner of the sandbox user's file (%s)"
                  % p.stderr.strip())
        p = subprocess.run(ns + ["setpriv", "--reuid", "1000", "--regid", "1000", "--clear-groups", "cat", on_disk],
                           capture_output=True, text=True, timeout=30)
        expect(p.returncode != 0 and "ermission denied" in p.stderr,
               "host uid 1000 reads a plain sandbox's workspace:", p.returncode, p.stdout, p.stderr)
    finally:
        d.ctl("rm", name)
        world.stop_sandboxd(d)
        world.start_sandboxd()
    leaks.check(world, name)


def test_without_the_sandboxd_user_account_plain_sandboxes_are_refused_naming_the_fix(world):
    """A host without the sandboxd-user account (its /etc/passwd and
    /etc/group as the daemon sees them lack it): the daemon starts, says so
    in daemon.info, and refuses sandboxes without a user namespace with an
    error naming the account and how to create it, never falling back to
    some other id; user-namespace sandboxes still work."""
    world.stop_sandboxd()
    tmp = tempfile.mkdtemp(dir=world.tmp)
    for f in ("passwd", "group"):
        with open("/etc/" + f) as src, open(os.path.join(tmp, f), "w") as dst:
            dst.writelines(l for l in src if not l.startswith("sandboxd-user:"))
    d = world.add_sandboxd({"userns": False}, tag="noacct")
    d.binds = [(os.path.join(tmp, "passwd"), "/etc/passwd"), (os.path.join(tmp, "group"), "/etc/group")]
    name, uname = world.name("noacct"), world.name("noacctu")
    try:
        d.start()
        p = d.rpc_result("daemon.info")["capabilities"]["userns"]["plainUser"]
        expect_eq((p.get("name"), p.get("available"), p.get("uid")), ("sandboxd-user", False, None),
                  "daemon.info plainUser")
        expect("does not exist" in p.get("reason", ""), "the reason:", p)
        msg = d.rpc("sandbox.create", {"name": name, "networkPolicy": "deny-all"})
        err = msg.get("error") or {}
        expect_eq(((err.get("data") or {}).get("reason"), (err.get("data") or {}).get("field")),
                  ("unavailable", "userns"), "create without a user namespace: %s" % err)
        expect("sandboxd-user" in err.get("message", "") and "systemd-sysusers" in err.get("message", ""),
               "the error names the account and the fix:", err)
        code, _o, err2 = d.ctl("create", "--name", uname, "--deny-all", "--userns")
        expect_eq(code, 0, "a user-namespace sandbox there (%s)" % err2.strip())
        code, out, _e = d.ctl("exec", uname, "--", "id", "-u")
        expect_eq((code, out), (0, "1000\n"), "its sandbox user")
    finally:
        d.ctl("rm", uname)
        world.stop_sandboxd(d)
        world.start_sandboxd()


def _init_pid_of(d, name):
    """The host pid of sandbox NAME's init under daemon d (its child running
    sandbox-init whose hostname is NAME)."""
    for p in os.listdir("/proc"):
        if not p.isdigit():
            continue
        try:
            with open("/proc/%s/stat" % p) as f:
                st = f.read()
            if int(st[st.rindex(")") + 2:].split()[1]) != d.pid:
                continue
            with open("/proc/%s/root/etc/hostname" % p) as f:
                if f.read().strip() == name:
                    return int(p)
        except (OSError, ValueError):
            continue
    raise AssertionError("no sandbox-init found for %s" % name)


def test_userns_sandbox_runs_as_its_own_host_range(world):
    name, _c, out, _e = create(world, "uns", "--deny-all", "--userns")
    try:
        base = _range(world, name)
        expect_eq(sh_ok(world, name, "id -u; id -g"), "1000\n1000\n", "the sandbox user inside")
        expect_eq(sh_ok(world, name, "id -u", "--sudo"), "0\n", "sudo inside")
        pid = _init_pid(world, name)
        with open("/proc/%d/uid_map" % pid) as f:
            expect_eq(f.read().split(), ["0", str(base), str(RANGE)], "uid_map of sandbox-init")
        with open("/proc/%d/gid_map" % pid) as f:
            expect_eq(f.read().split(), ["0", str(base), str(RANGE)], "gid_map of sandbox-init")
        st = os.stat("/proc/%d" % pid)
        expect_eq((st.st_uid, st.st_gid), (base, base), "host ids of sandbox-init (sandbox root)")
        sh_ok(world, name, "echo mine > /workspace/f")
        # Seen from the host through the sandbox's mount: the mapped id,
        # never host uid 1000.
        st = os.stat("/proc/%d/root/workspace/f" % pid)
        expect_eq((st.st_uid, st.st_gid), (base + 1000, base + 1000), "host owner of a sandbox user's file")
        # On disk the upper layer keeps sandbox ids (fork/snapshot need no remap).
        # Through the daemon's mount namespace: the upper may be its own
        # disk image, mounted there.
        ns = ["nsenter", "-t", str(world.daemon.pid), "-m", "--"]
        on_disk = os.path.join(world.daemon.state_dir, "sandboxes", name, "upper", "workspace", "f")
        p = subprocess.run(ns + ["stat", "-c", "%u", on_disk], capture_output=True, text=True, timeout=30)
        expect_eq(p.stdout.strip(), "1000", "on-disk owner in the upper layer (%s)" % p.stderr.strip())
        # ... and host uid 1000 cannot reach it there.
        p = subprocess.run(ns + ["setpriv", "--reuid", "1000", "--regid", "1000", "--clear-groups", "cat", on_disk],
                           capture_output=True, text=True, timeout=30)
        expect(p.returncode != 0 and "ermission denied" in p.stderr,
               "host uid 1000 reads a userns sandbox's workspace:", p.returncode, p.stdout, p.stderr)
    finally:
        delete(world, name)
    leaks.check(world, name)


def test_userns_root_owns_its_tree_and_nothing_shows_nobody(world):
    name, _c, _o, _e = create(world, "unsfs", "--deny-all", "--userns")
    try:
        sh_ok(world, name, "echo x > /workspace/w && mkdir /workspace/d")
        sh_ok(world, name, "echo 10.9.9.9 extra >> /etc/hosts && touch /etc/new /root/r /workspace/root-made",
              "--sudo")
        out = sh_ok(world, name, "stat -c '%u:%g %n' /workspace /workspace/w /workspace/d /etc /etc/hosts "
                                 "/etc/new /etc/passwd /root /home/sandbox /tmp /workspace/root-made")
        owners = dict(reversed(line.split(" ", 1)) for line in out.splitlines())
        expect_eq(owners["/workspace"], "1000:1000", "/workspace owner")
        expect_eq(owners["/workspace/w"], "1000:1000", "file of the sandbox user")
        expect_eq(owners["/workspace/d"], "1000:1000", "dir of the sandbox user")
        expect_eq(owners["/home/sandbox"], "1000:1000", "home of the sandbox user")
        for p in ("/etc", "/etc/hosts", "/etc/new", "/etc/passwd", "/root", "/tmp", "/workspace/root-made"):
            expect_eq(owners[p], "0:0", "owner of %s" % p)
        # Not made by the sandbox, so owned by host root and shown as
        # nobody: /proc and /sys (kernel), the read-only host binds.
        host_owned = {"proc", "sys", "usr", "ssl", "alternatives", "ld.so.cache", "ca-certificates"}
        out = sh_ok(world, name, "ls -ln / /etc /workspace /home")
        nobody = [line for line in out.splitlines()
                  if " 65534 " in line and line.split()[-1] not in host_owned]
        expect(not nobody, "no sandbox-made file shows as nobody:", nobody)
        # Read-only host binds stay host-root owned: nobody inside, and no
        # id of the sandbox may write them whatever the mount says.
        expect_eq(sh_ok(world, name, "stat -c %u /usr/bin/env"), "65534\n", "host /usr seen inside")
        code, _o, _e = sh(world, name, "touch /usr/bin/x", "--sudo")
        expect(code != 0, "sudo wrote into the host's /usr")
    finally:
        delete(world, name)
    leaks.check(world, name)


def test_userns_root_cannot_write_host_sysctls_even_without_the_masks(world):
    """uid 0 of the sandbox's user namespace, with every capability there
    (more than sudo gets), in the host's mount namespace where /proc/sys is
    writable: the kernel still judges it as its host id."""
    name, _c, _o, _e = create(world, "unssys", "--deny-all", "--userns")
    try:
        pid = _init_pid(world, name)
        with open("/proc/sys/kernel/core_pattern") as f:
            current = f.read()
        # Writes back the current value: harmless if the defence were missing.
        p = subprocess.run(["nsenter", "--target", str(pid), "--user", "--",
                            "sh", "-c", 'id -u; printf "%s" "$0" > /proc/sys/kernel/core_pattern', current],
                           capture_output=True, text=True, timeout=30)
        expect_eq(p.stdout, "0\n", "uid inside the sandbox's user namespace")
        expect(p.returncode != 0 and "ermission denied" in p.stderr,
               "write core_pattern as userns root:", p.returncode, p.stderr)
        code, _o, err = sh(world, name, "echo '|/bin/true' > /proc/sys/kernel/core_pattern", "--sudo")
        expect(code != 0, "sudo inside wrote core_pattern", err)
    finally:
        delete(world, name)
    leaks.check(world, name)


def test_userns_sandbox_network_allow_all_and_custom_policy(world):
    """The veth is moved into a network namespace owned by the sandbox's
    user namespace; init still configures it, and the policy applies."""
    with_net = world.name("unsnet")
    custom = world.name("unspol")
    try:
        code, _o, err = world.ctl("create", "--name", with_net, "--allow-all", "--userns")
        expect_eq(code, 0, "create allow-all with userns (%s)" % err.strip())
        code, out, err = sh(world, with_net, "curl -sS -m 10 -o /dev/null -w '%%{http_code}' http://%s/"
                            % W.HTTP_ADDR)
        expect_eq((code, out), (0, "200"), "allow-all HTTP from a userns sandbox (%s)" % err.strip()[:200])
        code, _o, err = world.ctl("create", "--name", custom, "--allow", "nothing.example", "--userns")
        expect_eq(code, 0, "create custom with userns (%s)" % err.strip())
        code, out, _e = sh(world, custom, "curl -sS -m 5 -o /dev/null -w '%%{http_code}' http://%s/ || true"
                           % W.HTTP_ADDR)
        expect(out != "200", "a custom policy still denies from a userns sandbox:", out)
        # Root in the sandbox's user namespace owns its network namespace,
        # but sudo's capability set has no CAP_NET_ADMIN.
        code, _o, _e = sh(world, with_net, "ip addr add 10.9.9.9/32 dev eth0", "--sudo")
        expect(code != 0, "sudo changed an address in a userns sandbox")
    finally:
        delete(world, with_net)
        delete(world, custom)
    leaks.check(world, with_net)
    leaks.check(world, custom)


def test_two_userns_sandboxes_get_disjoint_ranges_and_plain_ones_none(world):
    a, _c, _o, _e = create(world, "unsa", "--deny-all", "--userns")
    b = c = None
    try:
        b, _c, _o, _e = create(world, "unsb", "--deny-all", "--userns")
        c, _c, _o, _e = create(world, "plain", "--deny-all", "--no-userns")
        ra, rb = _range(world, a), _range(world, b)
        expect(abs(ra - rb) >= RANGE, "disjoint ranges:", ra, rb)
        sb, _c, _e = get(world, c)
        expect_eq((sb.get("userns"), sb.get("usernsRange")), (False, None), "a sandbox without userns")
        expect_eq(sh_ok(world, c, "id -u", "--sudo"), "0\n", "sudo in a plain sandbox")
        st = os.stat("/proc/%d" % _init_pid(world, c))
        expect_eq(st.st_uid, 0, "a plain sandbox's init is host root")
    finally:
        for n in (a, b, c):
            if n:
                delete(world, n)


NS_GET_OWNER_UID = 0xb704  # _IO(0xb7, 0x4), <linux/nsfs.h>

# Opens inotify instances until the kernel refuses one, records how many and
# the errno in /tmp/held, then keeps them all open until stdin closes.
_HOLD_INOTIFY = r"""
import ctypes, os, sys
libc = ctypes.CDLL(None, use_errno=True)
fds = []
while len(fds) < 100000:
    fd = libc.inotify_init1(0o2000000)
    if fd < 0:
        break
    fds.append(fd)
with open("/tmp/held.new", "w") as f:
    f.write("%d %d\n" % (len(fds), ctypes.get_errno()))
os.rename("/tmp/held.new", "/tmp/held")
sys.stdin.read()
"""

_ONE_INOTIFY = r"""
import ctypes
libc = ctypes.CDLL(None, use_errno=True)
fd = libc.inotify_init1(0o2000000)
print(fd >= 0, ctypes.get_errno() if fd < 0 else 0)
"""


def _ns_owner(pid):
    fd = os.open("/proc/%d/ns/user" % pid, os.O_RDONLY | os.O_CLOEXEC)
    try:
        return int.from_bytes(fcntl.ioctl(fd, NS_GET_OWNER_UID, bytes(4)), "little")
    finally:
        os.close(fd)


def _host_inotify_ok():
    libc = ctypes.CDLL(None, use_errno=True)
    fd = libc.inotify_init1(os.O_CLOEXEC)
    if fd >= 0:
        os.close(fd)
    return fd >= 0, ctypes.get_errno() if fd < 0 else 0


def test_userns_sandbox_owns_its_namespace_and_per_user_kernel_quotas(world):
    """Each user namespace is owned by its range's base uid, so the kernel's
    per-user counts (fs.inotify.max_user_instances here) of everything
    inside are charged to that uid: one sandbox exhausting them leaves host
    root, plain sandboxes and other userns sandboxes their own."""
    with open("/proc/sys/fs/inotify/max_user_instances") as f:
        limit = int(f.read())
    a, _c, _o, _e = create(world, "unsino", "--deny-all", "--userns")
    b = c = holder = None
    try:
        b, _c, _o, _e = create(world, "unsinob", "--deny-all", "--userns")
        c, _c, _o, _e = create(world, "inoplain", "--deny-all", "--no-userns")
        ra, rb = _range(world, a), _range(world, b)
        expect_eq(_ns_owner(_init_pid(world, a)), ra, "owner of the first sandbox's user namespace")
        expect_eq(_ns_owner(_init_pid(world, b)), rb, "owner of the second sandbox's user namespace")
        expect_eq(_ns_owner(os.getpid()), 0, "owner of the host's own user namespace (sanity)")

        holder = subprocess.Popen([W.SANDBOXCTL, "--socket", world.daemon.socket, "exec", "-i", a, "--",
                                   "python3", "-c", _HOLD_INOTIFY],
                                  stdin=subprocess.PIPE, stdout=subprocess.DEVNULL,
                                  stderr=subprocess.DEVNULL)
        held = []

        def counted():
            code, out, _err = sh(world, a, "cat /tmp/held 2>/dev/null")
            held[:] = out.split()
            return code == 0 and len(held) == 2 or holder.poll() is not None

        poll(counted, 120, "the sandbox user to exhaust its inotify instances")
        expect_eq(len(held), 2, "the holder ran to its limit (exit %s)" % holder.poll())
        n, err = int(held[0]), int(held[1])
        expect_eq(err, 24, "errno when the sandbox user runs out (EMFILE)")
        # The host limit applies to the sandbox's owner as a whole: all of
        # it, none of host root's instances counted against it.
        expect_eq(n, limit, "instances one sandbox may hold (fs.inotify.max_user_instances)")
        # Every id of that sandbox shares its owner's count: root inside too.
        out = sh_ok(world, a, "python3 -c '%s'" % _ONE_INOTIFY.replace("'", "\"'\""), "--sudo")
        expect_eq(out.split(), ["False", "24"], "sandbox root of the exhausted sandbox")
        # Nobody else's.
        expect_eq(_host_inotify_ok(), (True, 0), "inotify_init1 of host root")
        out = sh_ok(world, b, "python3 -c '%s'" % _ONE_INOTIFY.replace("'", "\"'\""))
        expect_eq(out.split(), ["True", "0"], "inotify_init1 in another userns sandbox")
        out = sh_ok(world, c, "python3 -c '%s'" % _ONE_INOTIFY.replace("'", "\"'\""), "--sudo")
        expect_eq(out.split(), ["True", "0"], "inotify_init1 of root in a plain sandbox")
    finally:
        if holder:
            holder.stdin.close()
            try:
                holder.wait(timeout=60)
            except subprocess.TimeoutExpired:
                holder.kill()
                holder.wait()
        for n in (a, b, c):
            if n:
                delete(world, n)


def test_userns_exec_cp_fork_and_snapshot_restore(world):
    src, _c, _o, _e = create(world, "unscp", "--deny-all", "--userns")
    fork = world.name("unsfork")
    restored = world.name("unsrest")
    plain = world.name("unsplain")
    reimported = world.name("unsimp")
    snap = imported = None
    try:
        with tempfile.NamedTemporaryFile("wb", delete=False) as f:
            f.write(b"payload\x00\x01")
            hostfile = f.name
        world.ctl("cp", hostfile, "%s:/workspace/in.bin" % src, check=True)
        expect_eq(sh_ok(world, src, "stat -c %u /workspace/in.bin; od -c /workspace/in.bin | head -1"),
                  "1000\n0000000   p   a   y   l   o   a   d  \\0 001\n", "a copied-in file inside")
        sh_ok(world, src, "echo made-inside > /workspace/out.txt")
        back = hostfile + ".back"
        world.ctl("cp", "%s:/workspace/out.txt" % src, back, check=True)
        with open(back) as f:
            expect_eq(f.read(), "made-inside\n", "a file copied out")
        code, _o, err = world.ctl("fork", src, "--name", fork)
        expect_eq(code, 0, "fork a userns sandbox (%s)" % err.strip())
        expect(_range(world, fork) != _range(world, src), "the fork has a range of its own")
        expect_eq(sh_ok(world, fork, "stat -c %u:%g /workspace/out.txt; cat /workspace/out.txt; "
                                     "echo more >> /workspace/out.txt && echo ok"),
                  "1000:1000\nmade-inside\nok\n", "the fork's copy is the sandbox user's")
        code, out, err = world.ctl("snapshot", src)
        expect_eq(code, 0, "snapshot of a userns sandbox (%s)" % err.strip())
        snap = out.strip()
        code, _o, err = world.ctl("create", "--name", restored, "--deny-all", "--userns", "--snapshot", snap)
        expect_eq(code, 0, "restore into a userns sandbox (%s)" % err.strip())
        expect_eq(sh_ok(world, restored, "stat -c %u /workspace/out.txt && touch /workspace/out.txt && echo ok"),
                  "1000\nok\n", "restored files, writable by the sandbox user")
        # A snapshot taken in a user namespace never restores without one:
        # its root-owned files would be the host root's.
        code, _o, err = world.ctl("create", "--name", plain, "--deny-all", "--no-userns", "--snapshot", snap)
        expect(code != 0 and "userns" in err, "a plain restore of a userns snapshot is refused:", code, err)
        # Export and import carry the same sandbox ids.
        path = os.path.join(tempfile.mkdtemp(), "snap.tar.zst")
        world.ctl("snapshots", "export", snap, path, check=True)
        code, out, err = world.ctl("snapshots", "import", path)
        expect_eq(code, 0, "import (%s)" % err.strip())
        imported = out.strip()
        code, _o, err = world.ctl("create", "--name", reimported, "--deny-all", "--userns", "--snapshot", imported)
        expect_eq(code, 0, "restore an imported snapshot into a userns sandbox (%s)" % err.strip())
        expect_eq(sh_ok(world, reimported, "stat -c %u:%g /workspace/out.txt; cat /workspace/out.txt"),
                  "1000:1000\nmade-inside\n", "an imported snapshot's files")
    finally:
        for n in (src, fork, restored, plain, reimported):
            delete(world, n)
        for s_ in (snap, imported):
            if s_:
                world.ctl("snapshots", "rm", s_)
    for n in (src, fork, restored, plain, reimported):
        leaks.check(world, n)


def test_a_plain_snapshot_and_fork_restore_with_a_user_namespace_owned_by_its_sandbox_user(world):
    """The layers of a sandbox without a user namespace hold sandboxd-user's
    ids; restored or forked with one, the sandbox user (uid 1000 inside)
    owns and can write those files; elsewhere owners are kept."""
    uid, gid = W.plain_user()
    src, _c, _o, _e = create(world, "plsrc", "--deny-all", "--no-userns")
    restored, fork = world.name("plrest"), world.name("plfork")
    snap = None
    try:
        sh_ok(world, src, "mkdir -p /workspace/d && echo mine > /workspace/d/f && echo h > $HOME/h")
        sh_ok(world, src, "echo r > /workspace/root-made", "--sudo")
        expect_eq(sh_ok(world, src, "stat -c %u:%g /workspace/d/f /home/sandbox"),
                  "%d:%d\n%d:%d\n" % (uid, gid, uid, gid), "owners in the plain source")
        code, out, err = world.ctl("snapshot", src)
        expect_eq(code, 0, "snapshot (%s)" % err.strip())
        snap = out.strip()
        code, _o, err = world.ctl("create", "--name", restored, "--deny-all", "--userns", "--snapshot", snap)
        expect_eq(code, 0, "restore with a user namespace (%s)" % err.strip())
        r = world.rpc("sandbox.fork", {"sourceSandbox": src, "name": fork, "overrides": {"userns": True}},
                      timeout=180)
        expect("error" not in r, "fork with a user namespace:", r)
        for n in (restored, fork):
            expect_eq(world.rpc_result("sandbox.get", {"name": n}).get("userns"), True, "%s has userns" % n)
            expect_eq(sh_ok(world, n, "stat -c %u:%g /workspace/d/f /workspace/d $HOME/h /home/sandbox "
                                      "/workspace/root-made; echo more >> /workspace/d/f && echo ok"),
                      "1000:1000\n1000:1000\n1000:1000\n1000:1000\n0:0\nok\n",
                      "owners in %s, writable by its sandbox user" % n)
    finally:
        for n in (src, restored, fork):
            delete(world, n)
        if snap:
            world.ctl("snapshots", "rm", snap)
    for n in (src, restored, fork):
        leaks.check(world, n)


def test_persistent_userns_sandbox_keeps_its_range_across_restart(world):
    name, _c, _o, _e = create(world, "unsper", "--deny-all", "--userns", "--persistent")
    try:
        base = _range(world, name)
        sh_ok(world, name, "echo kept > /workspace/k")
        conf = os.path.join(world.daemon.state_dir, "sandboxes", name, "config.json")
        with open(conf) as f:
            expect_eq(json.load(f).get("usernsRange", {}).get("start"), base, "range in config.json")
        d = world.daemon
        d.stop()
        d.start()
        expect_eq(_range(world, name), base, "range after a daemon restart")
        expect_eq(sh(world, name, "cat /workspace/k; id -u")[1], "kept\n1000\n", "files after the restart")
        st = os.stat("/proc/%d" % _init_pid(world, name))
        expect_eq(st.st_uid, base, "the re-adopted init runs as the same range")
        world.ctl("stop", name, check=True)
        d.stop()
        d.start()
        expect_eq(_range(world, name), base, "range of a stopped sandbox after a daemon restart")
        expect_eq(sh(world, name, "cat /workspace/k; id -u")[1], "kept\n1000\n", "files after resume")
        st = os.stat("/proc/%d" % _init_pid(world, name))
        expect_eq(st.st_uid, base, "resumed init runs as the same range")
    finally:
        delete(world, name)
    leaks.check(world, name)


def test_daemon_default_userns_and_pool_config(world):
    world.stop_sandboxd()
    d = world.start_sandboxd({"userns": True, "usernsBase": 200000000, "usernsSize": 2 * RANGE}, tag="uns")
    made = []
    try:
        for tag, extra in (("dflt", ()), ("dflt2", ()), ("off", ("--no-userns",))):
            n = world.name(tag)
            code, _o, err = d.ctl("create", "--name", n, "--deny-all", *extra)
            expect_eq(code, 0, "create %s (%s)" % (tag, err.strip()))
            made.append(n)
        got = [d.rpc_result("sandbox.get", {"name": n}) for n in made]
        expect_eq([g.get("userns") for g in got], [True, True, False], "userns by default, off when asked")
        expect_eq(sorted(g["usernsRange"]["start"] for g in got[:2]), [200000000, 200000000 + RANGE],
                  "ranges from the configured pool")
        code, _o, err = d.ctl("create", "--name", world.name("full"), "--deny-all")
        expect_eq(code, 1, "create with the pool exhausted (%s)" % err.strip())
        expect("in use" in err, "the error says the pool is full:", err)
    finally:
        for n in made:
            d.ctl("rm", n)
        world.stop_sandboxd(d)
        world.start_sandboxd()


def test_pool_below_the_floor_is_refused_at_start(world):
    """A pool must lie above every id a host account may hold (65536 and
    up, and clear of /etc/passwd, /etc/group, /etc/subuid, /etc/subgid):
    sandboxd refuses to start with one that does not, naming the key."""
    world.stop_sandboxd()
    started = False
    try:
        for cfg, says in (({"userns": True, "usernsBase": 1000, "usernsSize": RANGE}, "usernsBase"),
                          ({"userns": True, "usernsBase": 100000000, "usernsSize": 100000}, "multiple of 65536")):
            try:
                world.start_sandboxd(cfg, tag="unsbad")
                started = True
            except Exception as e:  # WorldError: sandboxd exited at start
                expect(says in str(e), "the start failure says %r:" % says, str(e)[-400:])
            finally:
                world.stop_sandboxd()
            expect(not started, "sandboxd started with the pool", cfg)
    finally:
        world.start_sandboxd()
