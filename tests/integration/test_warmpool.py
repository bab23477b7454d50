"""The warm pool (daemon.json warmPool): a matching sandbox.create adopts a
prepared session; the sandbox it gives carries nothing from the refill nor
from any earlier sandbox; pooled sessions are invisible, have no network,
and neither a restart nor a crash leaves anything of them behind."""
import json
import os
import signal

import leaks
import world as W
from common import expect, expect_eq, poll, rpc_ok

POOL = {"warmPool": {"size": 2}}


def _info(d):
    msg = d.rpc("daemon.info", {})
    return msg["result"]["warmPool"]


def _pool_daemon(world, config=None):
    world.stop_sandboxd()  # one daemon per network namespace
    d = world.start_sandboxd(dict(POOL, **(config or {})), tag="pool")
    poll(lambda: _info(d)["ready"] == _info(d)["size"], 60, "the pool fills")
    return d


def _rpc(d, method, params):
    msg = d.rpc(method, params, timeout=120)
    expect("error" not in msg, "%s: %s" % (method, json.dumps(msg.get("error"))))
    return msg["result"]


def _create(d, name, **params):
    return _rpc(d, "sandbox.create", dict(params, name=name))


def _out(d, name, script):
    """stdout of `sh -c script` in the sandbox (through sandboxctl exec)."""
    code, out, err = d.ctl("exec", name, "--", "sh", "-c", script, timeout=120)
    expect_eq(code, 0, "exit of %r (%s)" % (script, err.strip()[:300]))
    return out


def _stop_and_check_clean(world, d):
    """The daemon stopped (SIGTERM), nothing of any session is left."""
    expect_eq(world.stop_sandboxd(d), 0, "sandboxd exit status")
    problems = leaks.find(world, "all", d)
    expect(not problems, "left behind: %s" % "; ".join(problems[:8]))
    run = os.path.join(d.run_dir, "sandboxes")
    left = os.listdir(run) if os.path.isdir(run) else []
    expect(not left, "run directories left: %s" % left)


def test_pool_is_shown_in_daemon_info_and_fills(world):
    d = _pool_daemon(world)
    try:
        w = _info(d)
        expect_eq((w["size"], w["runtime"], w["policy"]), (2, "host", "allow-all"), "daemon.info warmPool")
        info = _rpc(d, "daemon.info", {})
        expect_eq((info["sandboxes"], info["running"]), (0, 0), "pooled sessions are no sandboxes")
        expect_eq(_rpc(d, "sandbox.list", {})["sandboxes"], [], "sandbox.list with a full pool")
        # Under deny-all until adopted: no veth of any pooled session.
        expect_eq(leaks._links(world), [], "links of pooled sessions")
    finally:
        _stop_and_check_clean(world, d)


def test_create_adopts_a_pooled_session_named_as_the_caller_asked(world):
    d = _pool_daemon(world)
    name = world.name("wp")
    try:
        sb = _create(d, name, env={"GREETING": "hi"}, tags={"team": "a"})
        expect_eq((sb["name"], sb["status"]), (name, "running"), "the created sandbox")
        expect_eq(_info(d)["adopted"], 1, "the create was served from the pool")
        expect_eq(sb["tags"], {"team": "a"}, "its tags")
        out = _out(d, name, 'hostname; cat /etc/hostname; grep -c "%s" /etc/hosts; echo "$GREETING"; '
                            'grep -c _pool /etc/hosts /etc/hostname || true' % name)
        lines = out.split("\n")
        expect_eq(lines[:4], [name, name, "1", "hi"], "hostname, /etc/hostname, /etc/hosts, env")
        expect("_pool" not in out.split("\n", 4)[4].replace(":0", ""), "no pool name in /etc: %r" % out)
        # The sandbox reaches the world as any allow-all sandbox does.
        http = world.http_url("hello.txt") if hasattr(world, "http_url") else None
        if http:
            world.add_http_file("hello.txt", b"pool-net-ok")
            expect_eq(_out(d, name, "curl -sf %s" % http), "pool-net-ok", "allow-all network from an adopted session")
        names = [s["name"] for s in _rpc(d, "sandbox.list", {})["sandboxes"]]
        expect_eq(names, [name], "sandbox.list shows the caller's sandbox only")
        poll(lambda: _info(d)["ready"] == 2, 60, "the pool refills")
        _rpc(d, "sandbox.delete", {"name": name})
        leaks.check(world, name, d)
    finally:
        d.rpc("sandbox.delete", {"name": name})
        _stop_and_check_clean(world, d)


def _killed(pid):
    """Whether process `pid` is gone, exiting (PF_EXITING, 0x4, in the
    flags of /proc/PID/stat, proc(5); or a zombie), or has SIGKILL pending
    (the SigPnd/ShdPnd masks of /proc/PID/status, signal 9 = bit 8)."""
    try:
        with open("/proc/%s/stat" % pid) as f:
            fields = f.read().rsplit(")", 1)[1].split()
        with open("/proc/%s/status" % pid) as f:
            st = dict(l.split(":", 1) for l in f.read().splitlines() if ":" in l)
    except (FileNotFoundError, ProcessLookupError):
        return True
    # After the comm: state is field 3, flags field 9 (1-based).
    if fields[0] in ("Z", "X") or int(fields[6]) & 0x4:
        return True
    return any(int(st.get(k, "0").strip(), 16) & (1 << 8) for k in ("SigPnd", "ShdPnd"))


def test_a_pooled_session_carries_nothing_from_one_sandbox_to_the_next(world):
    d = _pool_daemon(world)
    a, b = world.name("wpa"), world.name("wpb")
    try:
        _create(d, a, env={"SECRET_A": "from-a"})
        _out(d, a, "echo a > /workspace/left; echo a > /tmp/left; echo a > /home/sandbox/left; "
                   "(sleep 1000 &) ; true")
        got_a = _rpc(d, "sandbox.get", {"name": a})
        sess_a = got_a["sessions"][-1]["id"]
        cgroups_a = (got_a.get("session") or {}).get("cgroups") or []
        expect(cgroups_a, "sandbox.get shows a's cgroups: %r" % got_a)
        init_a = str((got_a.get("session") or {}).get("initPid"))
        _rpc(d, "sandbox.delete", {"name": a})
        # Delete answers once a's session is fenced: every process of it
        # (its `sleep` too) is gone or killed (SIGKILL pending, or already
        # exiting), so none runs anything again; the kernel ends them and
        # tears down the namespaces after. The cgroup goes right after.
        for cg in cgroups_a:
            try:
                with open(os.path.join(cg, "cgroup.procs")) as f:
                    left = [p for p in f.read().split() if p != init_a and not _killed(p)]
            except FileNotFoundError:
                left = []
            expect(not left, "a's cgroup %s has processes neither gone nor killed after the delete answered: %r"
                   % (cg, left))
        poll(lambda: not [cg for cg in cgroups_a if os.path.exists(cg)], 10, "a's cgroups to be removed")
        poll(lambda: _info(d)["ready"] == 2, 60, "the pool refills")
        sb = _create(d, b)
        expect_eq(_info(d)["adopted"], 2, "both creates were served from the pool")
        expect(sb["sessions"][-1]["id"] != sess_a, "a new session id")
        # A cgroup of its own, with no counter or limit of a's.
        cgroups_b = (_rpc(d, "sandbox.get", {"name": b}).get("session") or {}).get("cgroups") or []
        expect(cgroups_b and not set(cgroups_b) & set(cgroups_a), "b's cgroups are not a's: %r %r"
               % (cgroups_b, cgroups_a))
        out = _out(d, b, "ls -A /workspace /tmp /home/sandbox 2>&1 | grep -c left || true; "
                         "env | grep -c SECRET_A || true; ps -e -o comm= | grep -c sleep || true; hostname")
        expect_eq(out.split(), ["0", "0", "0", b], "files, env, processes, hostname of the next sandbox")
        # Its init is alone with this command (and init's container
        # helper, libcore/init/container.c): nothing of a refill runs.
        procs = _out(d, b, "ps -e -o pid=,comm=").split("\n")
        procs = [p for p in procs if p.strip() and not p.strip().endswith(("ps", "sh", "sandbox-ctrd"))]
        expect_eq(len(procs), 1, "only init besides the command: %r" % procs)
        _rpc(d, "sandbox.delete", {"name": b})
        leaks.check(world, b, d)
    finally:
        d.rpc("sandbox.delete", {"name": a})
        d.rpc("sandbox.delete", {"name": b})
        _stop_and_check_clean(world, d)


def test_a_create_the_pool_cannot_take_takes_the_cold_path(world):
    d = _pool_daemon(world)
    names = [world.name("wpc%d" % i) for i in range(3)]
    try:
        _create(d, names[0], resources={"vcpus": 2, "diskMiB": 48})  # both differ
        _create(d, names[1], resources={"vcpus": 2})         # other limits
        _create(d, names[2], resources={"diskMiB": 32})     # another disk size
        w = _info(d)
        expect_eq((w["adopted"], w["ready"]), (0, 2), "no pooled session taken")
        for n in names:
            expect_eq(_out(d, n, "hostname").strip(), n, "the cold sandbox runs")
    finally:
        for n in names:
            d.rpc("sandbox.delete", {"name": n})
        _stop_and_check_clean(world, d)


def test_a_deny_all_pool_serves_deny_all_creates_without_network(world):
    d = _pool_daemon(world, {"warmPool": {"size": 1, "policy": "deny-all"}})
    name = world.name("wpd")
    try:
        _create(d, name, networkPolicy="deny-all")
        expect_eq(_info(d)["adopted"], 1, "served from the pool")
        out = _out(d, name, "ls /sys/class/net")
        expect_eq(out.split(), ["lo"], "deny-all: lo only")
    finally:
        d.rpc("sandbox.delete", {"name": name})
        _stop_and_check_clean(world, d)


def test_a_custom_pool_gives_the_callers_policy_and_ca(world):
    d = _pool_daemon(world, {"warmPool": {"size": 1, "policy": "custom"}})
    name = world.name("wpx")
    try:
        _create(d, name, networkPolicy={"allow": ["api.public.test"]})
        expect_eq(_info(d)["adopted"], 1, "served from the pool")
        out = _out(d, name, "grep -c \"sandboxd session CA (egress proxy) of '%s'\" "
                            "/etc/ssl/certs/ca-certificates.crt; grep -c _pool "
                            "/etc/ssl/certs/ca-certificates.crt || true" % name)
        expect_eq(out.split(), ["1", "0"], "the session CA is the sandbox's own")
        sb = _rpc(d, "sandbox.get", {"name": name})
        expect(json.dumps(sb).find("api.public.test") >= 0, "the caller's policy is shown")
    finally:
        d.rpc("sandbox.delete", {"name": name})
        _stop_and_check_clean(world, d)


def test_a_restart_removes_pooled_sessions_and_keeps_adopted_sandboxes(world):
    d = _pool_daemon(world)
    name = world.name("wpr")
    try:
        _create(d, name)
        _out(d, name, "echo kept > /workspace/kept")
        for how in ("term", "kill"):
            poll(lambda: _info(d)["ready"] == 2, 60, "the pool refills")
            if how == "kill":
                # SIGKILL: the pooled sessions are left running for the next start.
                os.kill(d.proc.pid, signal.SIGKILL)
                d.proc.wait(10)
            else:
                expect_eq(d.stop(), 0, "sandboxd exit status on SIGTERM")
            # The next daemon runs without a pool: what is left must go anyway.
            d.config = {"warmPool": {"size": 0}} if how == "kill" else POOL
            d.start()
            info = _rpc(d, "daemon.info", {})
            expect_eq((info["sandboxes"], info["running"]), (1, 1),
                      "only the adopted sandbox after the restart (%s)" % how)
            names = [s["name"] for s in _rpc(d, "sandbox.list", {})["sandboxes"]]
            expect_eq(names, [name], "sandbox.list after the restart (%s)" % how)
            expect_eq(_out(d, name, "cat /workspace/kept; hostname").split(), ["kept", name],
                      "the adopted sandbox runs on after the restart (%s)" % how)
            if how == "kill":
                state = os.listdir(os.path.join(d.state_dir, "sandboxes"))
                expect_eq([s for s in state if s.startswith("_pool")], [], "no pooled state left (%s)" % how)
        _rpc(d, "sandbox.delete", {"name": name})
    finally:
        d.rpc("sandbox.delete", {"name": name})
        _stop_and_check_clean(world, d)


def test_an_adopted_sandbox_gets_the_callers_timeout_and_get_or_create_adopts(world):
    d = _pool_daemon(world)
    name, other = world.name("wpto"), world.name("wpgo")
    try:
        sb = _create(d, name, timeout=2000)
        expect_eq(_info(d)["adopted"], 1, "served from the pool")
        expect(sb.get("expiresAt"), "an expiry is shown")

        def gone():
            msg = d.rpc("sandbox.get", {"name": name})
            return "error" in msg and msg["error"].get("data", {}).get("reason") == "not_found"
        poll(gone, 30, "the sandbox is deleted at its timeout")
        r = _rpc(d, "sandbox.getOrCreate", {"name": other})
        expect_eq((r["created"], r["sandbox"]["name"]), (True, other), "getOrCreate created it")
        expect_eq(_info(d)["adopted"], 2, "getOrCreate was served from the pool")
        expect_eq(_out(d, other, "hostname").strip(), other, "its hostname")
    finally:
        d.rpc("sandbox.delete", {"name": name})
        d.rpc("sandbox.delete", {"name": other})
        _stop_and_check_clean(world, d)


def test_pooled_sessions_show_in_no_event_and_no_metric(world):
    from test_metrics import _http
    d = _pool_daemon(world)
    name = world.name("wpe")
    try:
        with d.connect() as c:
            expect("result" in c.call("events.subscribe", {}, 30), "events.subscribe")
            _create(d, name)
            poll(lambda: _info(d)["ready"] == 2, 60, "the pool refills (its session's start is no event)")
            _rpc(d, "sandbox.delete", {"name": name})
            c.wait_note(lambda n: (n.get("params") or {}).get("status") == "deleted" or
                        "deleted" in json.dumps(n), 30)
            seen = set()
            for n in c.notes:
                text = json.dumps(n)
                # Pooled sessions are named "_pool-<random>" (WARMPOOL_PREFIX).
                expect("_pool-" not in text, "an event names a pooled session: %s" % text[:300])
                seen.add(text)
        _head, body = _http(os.path.join(d.run_dir, "metrics.sock"))
        expect("_pool-" not in body, "metrics name a pooled session")
    finally:
        d.rpc("sandbox.delete", {"name": name})
        _stop_and_check_clean(world, d)


def test_runtime_delete_ends_the_pooled_sessions_standing_on_it(world):
    from test_runtimes import _tiny_rootfs_tar, _write_tmp
    rt = world.name("wprt")
    world.stop_sandboxd()
    d = world.start_sandboxd({"warmPool": {"size": 1, "runtime": rt, "policy": "deny-all"}}, tag="pool")
    name = world.name("wpt")
    try:
        poll(lambda: "not found" in (_info(d).get("reason") or ""), 30, "the pool says its runtime is missing")
        expect_eq(_info(d)["ready"], 0, "nothing pooled without the runtime")
        path = _write_tmp(world, _tiny_rootfs_tar(rt))
        code, _o, err = d.ctl("runtime", "import", rt, path)
        expect_eq(code, 0, "runtime import (%s)" % err.strip())
        poll(lambda: _info(d)["ready"] == 1, 60, "the pool fills once the runtime exists")
        _create(d, name, runtime=rt, networkPolicy="deny-all")
        expect_eq(_info(d)["adopted"], 1, "served from the pool")
        expect_eq(_out(d, name, "cat /etc/runtime-marker").strip(), rt, "the sandbox stands on the runtime")
        _rpc(d, "sandbox.delete", {"name": name})
        poll(lambda: _info(d)["ready"] == 1, 60, "the pool refills")
        code, _o, err = d.ctl("runtime", "rm", rt)
        expect_eq(code, 0, "runtime rm with only pooled sessions on it (%s)" % err.strip())
        poll(lambda: _info(d)["ready"] == 0 and _info(d)["starting"] == 0, 30, "the pooled session is ended")
        poll(lambda: not [s for s in os.listdir(os.path.join(d.state_dir, "sandboxes")) if s.startswith("_pool")],
             30, "its files are removed")
    finally:
        d.rpc("sandbox.delete", {"name": name})
        _stop_and_check_clean(world, d)


def _conntrack_from(world, addr):
    """Conntrack entries of the daemon's namespace whose original source is addr."""
    p = world.run_in_host(["cat", "/proc/net/nf_conntrack"])
    return [l for l in p.stdout.splitlines() if (" src=%s " % addr) in l.split("dst=")[0] + " "]


def test_a_sandbox_on_an_earlier_sandboxs_address_gets_none_of_its_flows(world):
    import world as W
    d = _pool_daemon(world, {"warmPool": {"size": 1}})
    a, b, c = world.name("wpka"), world.name("wpkb"), world.name("wpkc")
    try:
        _create(d, a)
        addr_a = _out(d, a, "ip -o -4 addr show dev eth0 | sed 's/.* inet \\([0-9.]*\\)\\/.*/\\1/'").strip()
        # A UDP flow to an address its policy allows: an entry that lives on
        # after the sandbox (nothing ends it but its timeout).
        _out(d, a, "bash -c 'for p in 40001 40002 40003; do echo x > /dev/udp/%s/$p; done'; true" % W.PUB_API_ADDR)
        expect(_conntrack_from(world, addr_a), "a's flows are tracked (else this test proves nothing)")
        # Forgotten when a ends (the slot goes back only after its flows are
        # flushed) or, after a crash, when the next session takes the slot:
        # either way none reaches the heir.
        _rpc(d, "sandbox.delete", {"name": a})
        # a's slot is free once its flows are flushed, after the answer: on a
        # busy machine neither refill below took it before this wait.
        poll(lambda: not _conntrack_from(world, addr_a), 60, "a's flows flushed and its slot given back")
        # The next pooled sessions take the lowest free slots: b's or c's
        # is a's (b's was made before a's delete or after it).
        addrs = {}
        for n in (b, c):
            poll(lambda: _info(d)["ready"] == 1, 60, "the pool refills")
            _create(d, n)
            addrs[n] = _out(d, n, "ip -o -4 addr show dev eth0 | sed 's/.* inet \\([0-9.]*\\)\\/.*/\\1/'").strip()
        heir = [n for n in (b, c) if addrs[n] == addr_a]
        expect_eq(len(heir), 1, "one of b, c has a's address %s: %r" % (addr_a, addrs))
        expect_eq(_conntrack_from(world, addr_a), [], "conntrack entries %s inherits from a" % heir[0])
    finally:
        for n in (a, b, c):
            d.rpc("sandbox.delete", {"name": n})
        _stop_and_check_clean(world, d)


def test_a_cold_sandbox_on_an_earlier_sandboxs_address_gets_none_of_its_flows(world):
    """The same without a pool: a cold create takes the lowest free slot."""
    import world as W
    world.stop_sandboxd()
    d = world.start_sandboxd({}, tag="ct")
    a, b = world.name("ctka"), world.name("ctkb")
    addr = "ip -o -4 addr show dev eth0 | sed 's/.* inet \\([0-9.]*\\)\\/.*/\\1/'"
    try:
        _create(d, a)
        addr_a = _out(d, a, addr).strip()
        _out(d, a, "bash -c 'for p in 40001 40002 40003; do echo x > /dev/udp/%s/$p; done'; true" % W.PUB_API_ADDR)
        expect(_conntrack_from(world, addr_a), "a's flows are tracked (else this test proves nothing)")
        _rpc(d, "sandbox.delete", {"name": a})
        # a's address goes back to the pool once its flows are forgotten,
        # just after delete answers: b takes it once it is free.
        def b_on_a_address():
            _create(d, b)
            if _out(d, b, addr).strip() == addr_a:
                return True
            _rpc(d, "sandbox.delete", {"name": b})
            return False
        poll(b_on_a_address, 30, "b gets a's address %s" % addr_a)
        expect_eq(_conntrack_from(world, addr_a), [], "conntrack entries b inherits from a")
    finally:
        for n in (a, b):
            d.rpc("sandbox.delete", {"name": n})
        world.stop_sandboxd(d)


def test_an_adoption_that_fails_takes_the_cold_path_and_removes_the_pooled_session(world):
    d = _pool_daemon(world, {"warmPool": {"size": 1}})
    name = world.name("wpf")
    # A leftover directory where the adoption renames the pooled run
    # directory to: the rename (RENAME_NOREPLACE) fails half-way.
    blocker = os.path.join(d.run_dir, "sandboxes", name)
    os.makedirs(blocker)
    try:
        sb = _create(d, name, ports=[8000])
        expect_eq(sb["status"], "running", "the create succeeds")
        w = _info(d)
        expect_eq(w["adopted"], 0, "not served from the pool")
        with open(d.log_path, errors="replace") as f:
            expect("could not be adopted" in f.read(), "the failed adoption is logged")
        expect_eq(_out(d, name, "hostname").strip(), name, "the cold sandbox runs")
        expect(sb["ports"][0]["endpoint"], "its port has an endpoint: %r" % sb["ports"])
        poll(lambda: _info(d)["ready"] == 1 and
             len([s for s in os.listdir(os.path.join(d.state_dir, "sandboxes")) if s.startswith("_pool")]) == 1,
             60, "the failed pooled session is gone and the pool refilled")
        _rpc(d, "sandbox.delete", {"name": name})
    finally:
        d.rpc("sandbox.delete", {"name": name})
        _stop_and_check_clean(world, d)


def test_an_adopted_sandbox_exposes_its_ports(world):
    d = _pool_daemon(world, {"warmPool": {"size": 1}})
    name = world.name("wpp")
    try:
        sb = _create(d, name, ports=[8000])
        expect_eq(_info(d)["adopted"], 1, "served from the pool")
        ep = sb["ports"][0]["endpoint"]
        expect(ep, "an endpoint for port 8000: %r" % sb["ports"])
        _rpc(d, "command.run", {"sandbox": name, "cmd": "sh", "detached": True,
                                "args": ["-c", "cd /tmp && echo port-ok > i && exec python3 -m http.server 8000"]})
        host, _, port = ep.rpartition(":")
        poll(lambda: world.run_in_host(["curl", "-sf", "http://%s:%s/i" % (host, port)]).stdout == "port-ok\n",
             30, "the port answers through its endpoint")
    finally:
        d.rpc("sandbox.delete", {"name": name})
        _stop_and_check_clean(world, d)


def test_pooled_sessions_made_before_a_reload_of_disk_mib_are_replaced(world):
    from test_reload import _hup, _rewrite
    d = _pool_daemon(world, {"warmPool": {"size": 1}, "diskMiB": 64})
    a, b = world.name("wpda"), world.name("wpdb")
    try:
        _rewrite(d, diskMiB=128)
        _hup(d, "reload: ")
        sb = _create(d, a)
        expect_eq(_info(d)["adopted"], 0, "a session of the old diskMiB is not adopted")
        expect_eq(sb["resources"].get("diskMiB"), 128, "the cold create has the new diskMiB")
        poll(lambda: _info(d)["ready"] == 1 and
             len([s for s in os.listdir(os.path.join(d.state_dir, "sandboxes")) if s.startswith("_pool")]) == 1,
             60, "the stale session is replaced")
        sb = _create(d, b)
        expect_eq((_info(d)["adopted"], sb["resources"].get("diskMiB")), (1, 128),
                  "the new pooled session, of the new diskMiB, is adopted")
    finally:
        for n in (a, b):
            d.rpc("sandbox.delete", {"name": n})
        _stop_and_check_clean(world, d)


def _pids_max(d, name):
    """pids.max of sandbox `name`'s session, from its cgroups (the pids
    controller's: v1, or v2 with it enabled)."""
    for cg in (_rpc(d, "sandbox.get", {"name": name}).get("session") or {}).get("cgroups") or []:
        p = os.path.join(cg, "pids.max")
        if os.path.exists(p):
            with open(p) as f:
                return f.read().strip()
    return None


def test_an_adopted_session_has_the_pids_max_of_now(world):
    from test_reload import _hup, _rewrite
    d = _pool_daemon(world, {"warmPool": {"size": 1}, "pidsMax": 300})
    a, b = world.name("wppa"), world.name("wppb")
    try:
        _create(d, a)
        got = _pids_max(d, a)
        if got is None:
            raise W.Skip("no pids controller for the sessions")
        expect_eq(got, "300", "the pooled session's pids.max, as made")
        poll(lambda: _info(d)["ready"] == 1, 60, "the pool refills")
        _rewrite(d, pidsMax=400)
        _hup(d, "reload: ")
        _create(d, b)
        expect_eq((_info(d)["adopted"], _pids_max(d, b)), (2, "400"),
                  "a session pooled before the reload, adopted with the new pidsMax")
    finally:
        for n in (a, b):
            d.rpc("sandbox.delete", {"name": n})
        _stop_and_check_clean(world, d)


def test_a_persistent_sandbox_adopted_from_the_pool_stops_resumes_and_survives_a_restart(world):
    d = _pool_daemon(world, {"warmPool": {"size": 1}})
    name = world.name("wpps")
    try:
        _create(d, name, persistent=True)
        expect_eq(_info(d)["adopted"], 1, "served from the pool")
        _out(d, name, "echo kept > /workspace/kept")
        _rpc(d, "sandbox.stop", {"name": name})
        expect_eq(_rpc(d, "sandbox.get", {"name": name})["status"], "stopped", "stopped")
        # Any command resumes it, in a session of its own (a cold start).
        expect_eq(_out(d, name, "cat /workspace/kept; hostname").split(), ["kept", name], "resumed")
        expect_eq(d.stop(), 0, "sandboxd exit status on SIGTERM")
        d.start()
        expect_eq(_out(d, name, "cat /workspace/kept").strip(), "kept", "after a restart")
        _rpc(d, "sandbox.delete", {"name": name})
    finally:
        d.rpc("sandbox.delete", {"name": name})
        _stop_and_check_clean(world, d)


def test_a_live_policy_update_of_an_adopted_custom_sandbox_reloads_its_dns_filter_in_place(world):
    d = _pool_daemon(world, {"warmPool": {"size": 1, "policy": "custom"}})
    name = world.name("wpu")
    try:
        _create(d, name, networkPolicy={"allow": ["api.public.test"]})
        expect_eq(_info(d)["adopted"], 1, "served from the pool")
        expect_eq(_out(d, name, "getent ahostsv4 api.public.test >/dev/null && echo yes || echo no").strip(), "yes",
                  "the allowed name resolves")
        at = os.path.getsize(d.log_path)
        _rpc(d, "sandbox.update", {"name": name, "networkPolicy": {"allow": ["other.public.test"]}})
        with open(d.log_path, errors="replace") as f:
            f.seek(at)
            log = f.read()
        expect("reload of its DNS filter failed" not in log, "netd took the new policy in place:\n" + log[-800:])
        out = _out(d, name, "getent ahostsv4 other.public.test >/dev/null && echo yes || echo no; "
                            "getent ahostsv4 api.public.test >/dev/null && echo yes || echo no")
        expect_eq(out.split(), ["yes", "no"], "the new policy's names resolve, the old one's do not")
    finally:
        d.rpc("sandbox.delete", {"name": name})
        _stop_and_check_clean(world, d)


def _links_inside(d, name):
    """The network interfaces sandbox `name` sees (/proc/net/dev: the tiny
    runtime has cat, no ip)."""
    rows = _out(d, name, "cat /proc/net/dev").split("\n")[2:]
    return sorted(r.split(":")[0].strip() for r in rows if ":" in r)


def _resolves(d, name, host):
    return _out(d, name, "getent ahostsv4 %s >/dev/null && echo yes || echo no" % host).strip()


def test_an_allow_all_pool_serves_a_custom_create_with_the_callers_policy(world):
    """The pool's policy is a hint: a custom create adopts an allow-all
    pool's session and gets its own rules (DNS filter), CA and trust."""
    d = _pool_daemon(world, {"warmPool": {"size": 1}})
    name = world.name("wpac")
    try:
        sb = _create(d, name, networkPolicy={"allow": ["api.public.test"]})
        expect_eq(_info(d)["adopted"], 1, "the custom create was served from the allow-all pool")
        expect(json.dumps(sb).find("api.public.test") >= 0, "the caller's policy is shown")
        expect_eq((_resolves(d, name, "api.public.test"), _resolves(d, name, "other.public.test")), ("yes", "no"),
                  "the caller's allowlist is enforced, not the pool's allow-all")
        out = _out(d, name, "grep -c \"sandboxd session CA (egress proxy) of '%s'\" "
                            "/etc/ssl/certs/ca-certificates.crt" % name)
        expect_eq(out.strip(), "1", "the sandbox trusts its own session CA")
        _rpc(d, "sandbox.delete", {"name": name})
        leaks.check(world, name, d)
    finally:
        d.rpc("sandbox.delete", {"name": name})
        _stop_and_check_clean(world, d)


def test_a_custom_pool_serves_an_allow_all_create(world):
    d = _pool_daemon(world, {"warmPool": {"size": 1, "policy": "custom"}})
    name = world.name("wpca")
    try:
        _create(d, name, networkPolicy="allow-all")
        expect_eq(_info(d)["adopted"], 1, "the allow-all create was served from the custom pool")
        expect_eq(_rpc(d, "sandbox.get", {"name": name})["networkPolicy"], "allow-all", "its policy")
        expect_eq(_resolves(d, name, "other.public.test"), "yes", "allow-all resolves any name")
    finally:
        d.rpc("sandbox.delete", {"name": name})
        _stop_and_check_clean(world, d)


def test_a_deny_all_pool_on_a_runtime_without_ca_trust_serves_every_mode_and_forgets_earlier_flows(world):
    """A deny-all pool's session forgot no flow at its start: a networked
    create adopting it, on the address of an earlier sandbox whose flows
    the kernel still tracks, gets none of them; deny-all creates adopt
    too, and stay without network."""
    import world as W
    from test_runtimes import _tiny_rootfs_tar, _write_tmp
    rt = world.name("wpdr")
    world.stop_sandboxd()
    d = world.start_sandboxd({"warmPool": {"size": 1, "runtime": rt, "policy": "deny-all"}}, tag="pool")
    a, b, c = world.name("wpda"), world.name("wpdb"), world.name("wpdc")
    addr = "ip -o -4 addr show dev eth0 | sed 's/.* inet \\([0-9.]*\\)\\/.*/\\1/'"
    try:
        path = _write_tmp(world, _tiny_rootfs_tar(rt))
        code, _o, err = d.ctl("runtime", "import", rt, path)
        expect_eq(code, 0, "runtime import (%s)" % err.strip())
        poll(lambda: _info(d)["ready"] == 1, 60, "the pool fills")
        # a (host runtime: cold) leaves tracked UDP flows on its address.
        _create(d, a)
        addr_a = _out(d, a, addr).strip()
        _out(d, a, "bash -c 'for p in 40001 40002 40003; do echo x > /dev/udp/%s/$p; done'; true" % W.PUB_API_ADDR)
        expect(_conntrack_from(world, addr_a), "a's flows are tracked (else this test proves nothing)")
        _rpc(d, "sandbox.delete", {"name": a})
        # a's slot goes back to the daemon once its flows are flushed, after
        # the delete answered (session.c release_slot_after_flush): the
        # refill below takes the lowest free slot, a's only once that is
        # done (on a busy machine it was not yet, and c got another slot).
        poll(lambda: not _conntrack_from(world, addr_a), 60, "a's flows flushed and its slot given back")
        # b (deny-all) takes the pooled session; its refill gets a's slot.
        _create(d, b, runtime=rt, networkPolicy="deny-all")
        expect_eq(_info(d)["adopted"], 1, "the deny-all create was served from the pool")
        expect_eq(_links_inside(d, b), ["lo"], "deny-all: lo only")
        poll(lambda: _info(d)["ready"] == 1, 60, "the pool refills")
        sb = _create(d, c, runtime=rt, networkPolicy="allow-all")
        expect_eq(_info(d)["adopted"], 2, "the allow-all create was served from the deny-all pool")
        expect_eq(sb["networkPolicy"], "allow-all", "its policy")
        expect_eq(_links_inside(d, c), ["eth0", "lo"], "allow-all: its veth")
        trie = _out(d, c, "cat /proc/net/fib_trie")
        expect(("-- %s\n" % addr_a) in trie, "c has a's address %s: %s" % (addr_a, trie[:600]))
        expect_eq(_conntrack_from(world, addr_a), [], "conntrack entries c inherits from a")
    finally:
        for n in (a, b, c):
            d.rpc("sandbox.delete", {"name": n})
        d.ctl("runtime", "rm", rt)
        _stop_and_check_clean(world, d)


def test_a_deleted_sandboxs_name_is_free_at_once_and_its_directories_go_after_the_answer(world):
    """sandbox.delete answers once the session is dead and its state and
    run directories are renamed aside: a create of the same name right
    after works (from the pool, then cold) and sees nothing of the old
    sandbox; the renamed directories are removed in the background."""
    d = _pool_daemon(world, {"warmPool": {"size": 1}})
    name = world.name("wpre")
    runs = os.path.join(d.run_dir, "sandboxes")
    states = os.path.join(d.state_dir, "sandboxes")
    try:
        for i in range(3):
            _create(d, name, env={"ROUND": str(i)})
            out = _out(d, name, "ls -A /workspace; echo $ROUND; echo %d > /workspace/round" % i)
            expect_eq(out.split(), [str(i)], "round %d: a fresh sandbox (nothing of the last one)" % i)
            _rpc(d, "sandbox.delete", {"name": name})
            expect(name not in os.listdir(runs) and name not in os.listdir(states),
                   "round %d: the name's directories are free when delete answers" % i)
        expect(_info(d)["adopted"] >= 1, "one of the creates was served from the pool")

        def tombstones():
            return [e for e in os.listdir(runs) + os.listdir(states) if e.startswith(".") and name in e]
        poll(lambda: not tombstones(), 30, "the deleted sandboxes' renamed directories are removed")
    finally:
        d.rpc("sandbox.delete", {"name": name})
        _stop_and_check_clean(world, d)


def test_an_allow_all_pool_serves_a_deny_all_create_without_network_or_ca(world):
    """A pooled session of an allow-all pool on the host runtime has its
    session CA bound over the system bundle; a deny-all create adopting it
    loses that bind, as a cold deny-all sandbox never has one: lo only, the
    host's bundle, no CA variables, nothing of the run directory in its
    mounts."""
    d = _pool_daemon(world, {"warmPool": {"size": 1}})
    name = world.name("wpad")
    try:
        _create(d, name, networkPolicy="deny-all")
        expect_eq(_info(d)["adopted"], 1, "the deny-all create was served from the allow-all pool")
        expect_eq(_links_inside(d, name), ["lo"], "deny-all: lo only")
        out = _out(d, name, "grep -c 'sandboxd session CA' /etc/ssl/certs/ca-certificates.crt || true; "
                            "grep -c -e /trust/ -e '%s' /proc/self/mountinfo || true; "
                            "env | grep -c SSL_CERT_FILE || true" % d.run_dir)
        expect_eq(out.split(), ["0", "0", "0"], "no session CA, no run directory mount, no CA variable")
        host = open("/etc/ssl/certs/ca-certificates.crt", "rb").read()
        expect_eq(_out(d, name, "wc -c < /etc/ssl/certs/ca-certificates.crt").strip(), str(len(host)),
                  "the sandbox reads the host's bundle")
        # A live update to a networked mode works on it as on a cold one.
        _rpc(d, "sandbox.update", {"name": name, "networkPolicy": "allow-all"})
        expect_eq(_links_inside(d, name), ["eth0", "lo"], "allow-all after the update: its veth")
    finally:
        d.rpc("sandbox.delete", {"name": name})
        _stop_and_check_clean(world, d)


def test_a_deny_all_pool_serves_a_custom_create_with_its_ca_bound(world):
    """A deny-all pool's sessions have no CA: a custom create adopting one
    on the host runtime gets its CA made and bound over the system bundle
    at adoption, as a cold create binds it at setup; the address's earlier
    flows are forgotten first (test above), then the rules and DNS filter."""
    d = _pool_daemon(world, {"warmPool": {"size": 1, "policy": "deny-all"}})
    name = world.name("wpdc")
    try:
        _create(d, name, networkPolicy={"allow": ["api.public.test"]})
        expect_eq(_info(d)["adopted"], 1, "the custom create was served from the deny-all pool")
        expect_eq((_resolves(d, name, "api.public.test"), _resolves(d, name, "other.public.test")), ("yes", "no"),
                  "the caller's allowlist is enforced")
        out = _out(d, name, "grep -c \"sandboxd session CA (egress proxy) of '%s'\" "
                            "/etc/ssl/certs/ca-certificates.crt; grep -c _pool /etc/ssl/certs/ca-certificates.crt "
                            "|| true; echo $SSL_CERT_FILE; touch /etc/ssl/certs/ca-certificates.crt 2>/dev/null "
                            "&& echo writable || echo read-only" % name)
        expect_eq(out.split(), ["1", "0", "/etc/ssl/certs/ca-certificates.crt", "read-only"],
                  "the sandbox trusts its own session CA, through a read-only bundle")
        _rpc(d, "sandbox.delete", {"name": name})
        leaks.check(world, name, d)
    finally:
        d.rpc("sandbox.delete", {"name": name})
        _stop_and_check_clean(world, d)
