"""Resource limits inside a sandbox: a memory hog dies alone (exit 137), a
full /tmp is a full disk, a fork bomb stops at pids.max, and the session,
the daemon and other sandboxes carry on; `update --vcpus` changes a running
session's cgroup at once; session cgroups nest in the daemon's delegated
subtree. Limits are read from the host's cgroup files, v2 or v1."""
import json
import os
import time

import leaks
import world as W
from common import create, delete, expect, expect_eq, get, poll, rpc_ok, sandbox, sh, sh_ok

HOG = ("python3 -c \"b=[]\n"
       "while True: b.append(bytearray(64 << 20))\"")


def test_memory_hog_is_oom_killed_and_the_session_survives(world):
    # 1 vCPU = 2048 MiB of memory for the session.
    with sandbox(world, "oom", "--deny-all", "--vcpus", "1") as name, world.daemon.connect() as ev:
        ev.result("events.subscribe", {"sandbox": name, "kinds": ["oom"]})
        code, _out, err = sh(world, name, HOG, timeout=180)
        expect_eq(code, 137, "exit code of the memory hog (%s)" % err.strip()[-200:])
        expect("killed: out of memory (limit 2 GiB; update --vcpus N raises it)" in err,
               "sandboxctl exec says why:", err.strip()[-300:])
        note = ev.wait_note(lambda n: n.get("method") == "event" and n["params"].get("kind") == "oom", 30)
        p = note["params"]
        expect_eq((p.get("sandbox"), p.get("memoryLimitBytes")), (name, 2 * GIB), "the oom event (%s)" % p)
        # Over the API: the command's result says so.
        fin = rpc_ok(world, "command.run", {"sandbox": name, "cmd": "sh", "args": ["-c", HOG]}, timeout=180)
        expect_eq((fin.get("exitCode"), fin.get("oomKilled"), fin.get("memoryLimitBytes")), (137, True, 2 * GIB),
                  "command.run result of the memory hog (%s)" % fin)
        got = rpc_ok(world, "command.get", {"cmdId": fin["cmdId"]})
        expect_eq(got.get("oomKilled"), True, "command.get of the memory hog")
        # A plain SIGKILL is not an OOM kill: same 137, oomKilled false, no hint.
        r = rpc_ok(world, "command.run", {"sandbox": name, "cmd": "sleep", "args": ["60"], "detached": True})
        rpc_ok(world, "command.kill", {"cmdId": r["cmdId"]})
        fin = rpc_ok(world, "command.wait", {"cmdId": r["cmdId"]}, timeout=30)
        expect_eq((fin.get("exitCode"), fin.get("oomKilled")), (137, False), "kill -9 of a command (%s)" % fin)
        code, _out, err = sh(world, name, "kill -9 $$")
        expect_eq(code, 137, "exit code of kill -9 $$")
        expect("out of memory" not in err, "no OOM hint after kill -9:", err.strip())
        code, out, err = sh(world, name, "echo still-here")
        expect_eq((code, out), (0, "still-here\n"), "the session after the OOM kill (%s)" % err.strip())
        info = world.rpc("daemon.info", {})
        expect("result" in info, "daemon answers after the OOM kill:", info)


def test_tmp_is_bounded_below_the_memory_limit(world):
    with sandbox(world, "tmpfull", "--deny-all", "--vcpus", "1") as name:
        code, _out, err = sh(world, name, "dd if=/dev/zero of=/tmp/big bs=1M count=3000", timeout=180)
        expect(code != 0 and "No space left" in err, "filling /tmp ends with ENOSPC:", code, err.strip()[-200:])
        code, out, err = sh(world, name, "rm -f /tmp/big; echo still-here")
        expect_eq((code, out), (0, "still-here\n"), "the session after /tmp filled up (%s)" % err.strip())


# ---------------------------------------------------------------- cgroup files

GIB = 1 << 30


def _is_v2(path):
    return os.path.exists(os.path.join(path, "cgroup.controllers"))


def _session_dirs(world, name):
    """The session cgroup directories of sandbox `name` in every hierarchy of
    this world (below a sandboxd-sessions-<instance> parent)."""
    found = []
    for top in world.cgroup_dirs:
        for root, dirs, _files in W.walk(top):
            if os.path.basename(root).startswith("sandboxd-sessions"):
                found += [os.path.join(root, x) for x in dirs if x == name]
                dirs[:] = []
    return found


def _read_knob(world, name, v1_file, v2_file):
    """The value of a limit of sandbox `name` as the host's cgroup files show
    it: the v2 file where the v2 hierarchy carries the controller, else the
    v1 one. None when neither exists."""
    for d in _session_dirs(world, name):
        f = os.path.join(d, v2_file if _is_v2(d) else v1_file)
        if os.path.exists(f):
            with open(f) as fh:
                return fh.read().strip()
    return None


def _limits(world, name):
    """(memory bytes, cpu quota in us per 100 ms, pids.max) read from the host."""
    mem = _read_knob(world, name, "memory.limit_in_bytes", "memory.max")
    cpu = _read_knob(world, name, "cpu.cfs_quota_us", "cpu.max")
    pids = _read_knob(world, name, "pids.max", "pids.max")
    cpu = cpu.split()[0] if cpu else None  # v2 "QUOTA PERIOD"
    return (int(mem) if mem and mem.isdigit() else mem,
            int(cpu) if cpu and cpu.lstrip("-").isdigit() else cpu,
            int(pids) if pids and pids.isdigit() else pids)


def _stored_vcpus(world, name):
    with open(os.path.join(world.daemon.state_dir, "sandboxes", name, "config.json")) as f:
        return json.load(f)["resources"]["vcpus"]


def test_update_vcpus_changes_the_running_sessions_cgroup_at_once_and_persists(world):
    with sandbox(world, "vcpu", "--deny-all", "--vcpus", "1", "--persistent") as name:
        expect_eq(_limits(world, name), (2 * GIB, 100000, 4096), "limits at 1 vCPU (memory, cpu quota, pids)")
        world.ctl("update", name, "--vcpus", "3", check=True)
        # No restart: the same session, the same processes, new limits.
        expect_eq(_limits(world, name), (6 * GIB, 300000, 4096), "limits after update --vcpus 3")
        got, _c, err = get(world, name)
        expect_eq(got["resources"]["vcpus"], 3, "sandbox.get's vcpus (%s)" % err)
        expect_eq(len(got["sessions"]), 1, "sessions after a live update")
        expect_eq(_stored_vcpus(world, name), 3, "vcpus in config.json")
        code, out, _e = sh(world, name, "nproc >/dev/null; echo ok")
        expect_eq((code, out), (0, "ok\n"), "the session after the update")

        # A stopped persistent sandbox takes the value at its next session.
        world.ctl("stop", name, check=True)
        world.ctl("update", name, "--vcpus", "2", check=True)
        expect_eq(_stored_vcpus(world, name), 2, "vcpus in config.json while stopped")
        sh_ok(world, name, "true")  # resumes it
        expect_eq(_limits(world, name), (4 * GIB, 200000, 4096), "limits of the next session")


def test_update_vcpus_outside_1_to_max_names_the_field_and_changes_nothing(world):
    with sandbox(world, "vcpubad", "--deny-all", "--vcpus", "2") as name:
        maxv = world.rpc_result("daemon.info", {})["limits"]["maxVcpus"]
        for bad in (maxv + 1, 0, 1.5, "2"):
            r = world.rpc("sandbox.update", {"name": name, "resources": {"vcpus": bad}})
            err = r.get("error") or {}
            expect(err.get("code") == -32602 and (err.get("data") or {}).get("field") == "resources.vcpus",
                   "update vcpus=%r is refused naming resources.vcpus:" % (bad,), r)
        code, _o, err = world.ctl("update", name, "--vcpus", str(maxv + 1))
        expect(code == 2 and "--vcpus" in err, "sandboxctl update --vcpus too many:", code, err)
        code, _o, err = world.ctl("update", name, "--vcpus", "0")
        expect_eq(code, 2, "sandboxctl update --vcpus 0 is a usage error (%s)" % err.strip())
        expect_eq(_limits(world, name), (4 * GIB, 200000, 4096), "limits after refused updates")
        expect_eq(get(world, name)[0]["resources"]["vcpus"], 2, "vcpus after refused updates")


# Holds `mib` MiB of anonymous memory (written, so really resident), then
# writes its pid to /tmp/held and waits.
HOLD = ("python3 -c \"import os, time\nb = b'x' * (%d << 20)\n"
        "open('/tmp/held', 'w').write(str(os.getpid()))\ntime.sleep(3600)\"")


def test_lowering_vcpus_below_the_memory_in_use_is_refused_and_nothing_dies(world):
    """Semantics (docs/API.md, sandbox.update): the kernel reclaims what it
    can; on cgroup v1 (this machine's memory controller) what it cannot
    reclaim makes the update fail with limit_exceeded and the old limits
    stay; on v2 the kernel would OOM-kill inside the sandbox instead. Either
    way nothing outside the sandbox is touched."""
    with sandbox(world, "vcpulow", "--deny-all", "--vcpus", "2") as name:
        if any(_is_v2(d) and os.path.exists(os.path.join(d, "memory.max")) for d in _session_dirs(world, name)):
            raise W.Skip("the memory controller is on cgroup v2 here: lowering OOM-kills inside the sandbox")
        world.ctl("exec", "--detach", name, "--", "sh", "-c", HOLD % 2600, check=True)
        poll(lambda: sh(world, name, "test -s /tmp/held")[0] == 0, 60, "2600 MiB held in the sandbox")
        code, _o, err = world.ctl("update", name, "--vcpus", "1")
        expect(code != 0 and "--vcpus" in err and "memory" in err,
               "lowering to 2 GiB under 2.6 GiB in use is refused:", code, err.strip())
        expect_eq(_limits(world, name), (4 * GIB, 200000, 4096), "limits after the refused lowering")
        expect_eq(get(world, name)[0]["resources"]["vcpus"], 2, "vcpus after the refused lowering")
        code, out, _e = sh(world, name, "kill -0 $(cat /tmp/held) && echo alive")
        expect_eq(out, "alive\n", "the holder after the refused lowering")
        expect("result" in world.rpc("daemon.info", {}), "daemon answers")
        # Once the memory is freed the same update goes through.
        sh_ok(world, name, "kill $(cat /tmp/held)")
        poll(lambda: world.ctl("update", name, "--vcpus", "1")[0] == 0, 30, "update once memory is free")
        expect_eq(_limits(world, name), (2 * GIB, 100000, 4096), "limits after the lowering")


# ---------------------------------------------------------------- fork bomb

# The classic bomb, in sh: every process starts two more in the background
# and leaves. A shell whose fork fails (EAGAIN at pids.max) says "Cannot
# fork" on stderr, which the daemon relays like any other output.
BOMB = "b() { b | b & }; b"


def _pids_refused(world, name):
    """How many forks the kernel refused at pids.max ("max N" in pids.events)."""
    v = _read_knob(world, name, "pids.events", "pids.events")
    if not v:
        return 0
    for line in v.splitlines():
        k, _, n = line.partition(" ")
        if k == "max":
            return int(n)
    return 0


def _best_of(n, fn):
    times = []
    for _ in range(n):
        t0 = time.monotonic()
        fn()
        times.append(time.monotonic() - t0)
    return min(times), times


def _bomb(world, sudo):
    who = "sudo" if sudo else "uid 1000"
    other, _c, _o, _e = create(world, "bystander", "--deny-all")
    bomb = None
    try:
        bomb, _c, _o, _e = create(world, "bomb", "--deny-all", "--vcpus", "1")
        pmax = _read_knob(world, bomb, "pids.max", "pids.max")
        expect_eq(pmax, str(world.rpc_result("daemon.info", {})["limits"].get("pidsMax", 4096)),
                  "pids.max of the bomb's session")
        flags = ["--sudo"] if sudo else []
        world.ctl("exec", "--detach", *flags, bomb, "--", "sh", "-c", BOMB, check=True)
        poll(lambda: _pids_refused(world, bomb) > 0, 60,
             "the kernel to refuse the bomb's forks at pids.max (pids.events)")
        current = int(_read_knob(world, bomb, "pids.current", "pids.current") or 0)
        expect(current <= int(pmax), "pids.current %d within pids.max %s" % (current, pmax))

        # DESIGN/issue: "the daemon still answers within a second". Timing on
        # a shared 2-core machine is noisy (other tests, the bomb's CPU), so
        # the best of 3 answers is held to that second; all are reported.
        best, times = _best_of(3, lambda: expect("result" in world.rpc("daemon.info", {}),
                                                 "daemon.info answers during the bomb"))
        ebest, etimes = _best_of(3, lambda: expect_eq(world.ctl("exec", other, "--", "true")[0], 0,
                                                      "exec true in another sandbox during the bomb"))
        print("    fork bomb (%s): pids.current %d of %s, %d forks refused; daemon.info %s ms; "
              "exec true elsewhere %s ms"
              % (who, current, pmax, _pids_refused(world, bomb),
                 "/".join("%.0f" % (t * 1000) for t in times),
                 "/".join("%.0f" % (t * 1000) for t in etimes)))
        expect(best < 1.0, "daemon.info best of 3 under 1 s during the bomb: %.3f s" % best)

        code, _o, err = world.ctl("rm", bomb, timeout=120)
        expect_eq(code, 0, "rm of the bomb sandbox (%s)" % err.strip())
        leaks.check(world, bomb, secs=20)
        bomb = None
        expect_eq(world.ctl("exec", other, "--", "true")[0], 0, "the other sandbox after the bomb")
    finally:
        if bomb:
            delete(world, bomb)
        delete(world, other)
    leaks.check(world, other)


def test_fork_bomb_as_the_sandbox_user_stops_at_pids_max_and_the_daemon_answers(world):
    _bomb(world, sudo=False)


def test_fork_bomb_as_root_stops_at_pids_max_and_the_daemon_answers(world):
    _bomb(world, sudo=True)


test_fork_bomb_as_the_sandbox_user_stops_at_pids_max_and_the_daemon_answers.timeout = 300
test_fork_bomb_as_root_stops_at_pids_max_and_the_daemon_answers.timeout = 300


# ---------------------------------------------------------------- cgroup v2 delegation

def _v2_line(pid):
    with open("/proc/%d/cgroup" % pid) as f:
        for line in f:
            if line.startswith("0::"):
                return line[3:].strip()
    return None


def test_sessions_nest_in_the_daemons_delegated_v2_subtree_beside_its_leaf(world):
    """DESIGN §4: the world gives its daemon a scratch cgroup in every
    hierarchy, as systemd's Delegate=yes gives a service. In the v2 one the
    daemon must move itself into a leaf (<own>/supervisor, the no-internal-
    processes rule) and put sessions in <own>/sandboxd-sessions-*/<name>,
    never at the hierarchy's root; limits go wherever the controller is."""
    v2 = [d for d in world.cgroup_dirs if _is_v2(d)]
    if not v2:
        raise W.Skip("no cgroup v2 hierarchy mounted on this host")
    top = v2[0]
    mnt = next(m for m in W.cgroup_mounts() if top.startswith(m.rstrip("/") + "/"))
    rel = "/" + os.path.relpath(top, mnt)
    d = world.daemon
    expect_eq(_v2_line(d.pid), rel + "/supervisor", "the daemon's own v2 cgroup")
    with open(os.path.join(top, "cgroup.procs")) as f:
        expect_eq(f.read().split(), [], "processes left in the delegated cgroup itself")
    with open(os.path.join(top, "cgroup.controllers")) as f:
        offered = f.read().split()
    with sandbox(world, "deleg", "--deny-all", "--vcpus", "2") as name:
        dirs = [p for p in _session_dirs(world, name) if p.startswith(top + "/")]
        expect_eq(len(dirs), 1, "session cgroups of %s in the v2 subtree %s" % (name, top))
        sess = dirs[0]
        expect(os.path.basename(os.path.dirname(sess)).startswith("sandboxd-sessions-"),
               "the session's parent is the instance's sessions cgroup:", sess)
        # With controllers in the v2 hierarchy sandbox-init lives in the
        # session's leaf "init" (so containers' cgroups can have them),
        # and the session's own directory holds no process.
        leaf = os.path.join(sess, "init") if set(offered) & {"pids", "memory", "cpu"} else sess
        with open(os.path.join(leaf, "cgroup.procs")) as f:
            procs = [int(x) for x in f.read().split()]
        expect(procs and all(_v2_line(p) == "/" + os.path.relpath(leaf, mnt) for p in procs),
               "the session's processes are in its v2 cgroup:", procs)
        if leaf != sess:
            with open(os.path.join(sess, "cgroup.procs")) as f:
                expect_eq(f.read().split(), [], "processes in the session's own v2 directory")
        for m in W.cgroup_mounts():
            for parent in (os.path.join(m, x) for x in os.listdir(m) if x.startswith("sandboxd-sessions")):
                expect(not os.path.exists(os.path.join(parent, name)),
                       "a session cgroup at a hierarchy's root:", os.path.join(parent, name))
        want = {"pids": ("pids.max", "4096"), "memory": ("memory.max", str(4 * GIB)),
                "cpu": ("cpu.max", "200000 100000")}
        for ctl, (knob, value) in sorted(want.items()):
            if ctl in offered:
                with open(os.path.join(sess, knob)) as f:
                    expect_eq(f.read().strip(), value, "v2 %s of the session" % knob)
            else:
                print("    SKIP v2 %s: the kernel offers no %s controller in the v2 hierarchy here "
                      "(it is bound to v1; the v1 limit is checked instead)" % (knob, ctl))
        expect_eq(_limits(world, name), (4 * GIB, 200000, 4096), "limits the session runs under")
    leaks.check(world, name)


def test_sandbox_init_of_concurrent_creates_is_born_in_each_its_own_session_cgroups(world):
    """sandbox-init starts in its own session's cgroup in every hierarchy,
    v1 ones included (the spawning thread steps into them for the clone),
    also when several creates run at once: each session's cgroups hold its
    own sandbox-init and no other's."""
    d = world.daemon
    names = [world.name("born%d" % i) for i in range(4)]
    conns = [d.connect(120) for _ in names]
    try:
        ids = [c.start("sandbox.create", {"name": n, "networkPolicy": "deny-all"}) for c, n in zip(conns, names)]
        for c, rid, n in zip(conns, ids, names):
            m = c.wait(rid, 120)
            expect("error" not in m, "create %s:" % n, m.get("error"))
        inits = {}
        for n in names:
            r = world.rpc_result("sandbox.get", {"name": n})
            inits[n] = r.get("initPid") or (r.get("session") or {}).get("initPid")
            expect(inits[n], "sandbox.get of %s names no initPid:" % n, r)
        for n in names:
            dirs = _session_dirs(world, n)
            expect(dirs, "session cgroups of %s" % n)
            for sess in dirs:
                # (its leaf "init" on a v2 hierarchy with controllers)
                leaf = os.path.join(sess, "init")
                with open(os.path.join(leaf if os.path.isdir(leaf) else sess, "cgroup.procs")) as f:
                    procs = [int(x) for x in f.read().split()]
                expect(inits[n] in procs, "sandbox-init %d of %s not in %s:" % (inits[n], n, sess), procs)
                others = [p for p in procs if p in inits.values() and p != inits[n]]
                expect_eq(others, [], "another session's sandbox-init in %s" % sess)
    finally:
        for c in conns:
            c.close()
        for n in names:
            world.rpc("sandbox.delete", {"name": n})
