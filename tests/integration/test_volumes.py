"""Named volumes (issue #27 item 1; docs/API.md "Volumes", docs/SECURITY.md
"Volumes"): a bounded filesystem of its own, mounted into several
sandboxes at once, read-write or read-only, kept across daemon restarts,
outside snapshots and forks' bytes, and its owner's alone. Runs in the
suite's user-namespace mode (SANDBOXD_TEST_USERNS)."""
import contextlib
import json
import os
import signal

import leaks
import world as W
from common import expect, expect_eq, poll, sh, sh_ok, rpc_ok


def _volume_leaks(world, vol):
    """Mounts anywhere and loop devices that still name the volume's
    directory."""
    where = os.path.join(world.daemon.state_dir, "volumes", vol)
    found = []
    for p in os.listdir("/proc"):
        if not p.isdigit():
            continue
        try:
            with open("/proc/%s/mountinfo" % p) as f:
                found += ["pid %s: %s" % (p, line.strip()) for line in f if where in line]
        except OSError:
            pass
    for dev in os.listdir("/sys/block"):
        try:
            with open("/sys/block/%s/loop/backing_file" % dev) as f:
                if where in f.read():
                    found.append(dev)
        except OSError:
            pass
    return found[:5]


def _err(msg):
    return msg.get("error") or {}


def _reason(msg):
    return (_err(msg).get("data") or {}).get("reason")


def _field(msg):
    return (_err(msg).get("data") or {}).get("field")


@contextlib.contextmanager
def _volume(world, tag, size=32, **params):
    name = world.name(tag)
    rpc_ok(world, "volume.create", dict({"name": name, "sizeMiB": size}, **params), 180)
    try:
        yield name
    finally:
        world.rpc("volume.delete", {"name": name}, 120)


@contextlib.contextmanager
def _sandboxes(world, *specs):
    """Sandboxes made by sandbox.create with each spec's params (a tag and a
    dict), all deleted at the end."""
    names = []
    try:
        for tag, params in specs:
            name = world.name(tag)
            rpc_ok(world, "sandbox.create", dict({"name": name, "networkPolicy": "deny-all"}, **params), 180)
            names.append(name)
        yield names
    finally:
        for n in names:
            world.rpc("sandbox.delete", {"name": n}, 120)


def test_two_sandboxes_share_a_volume_each_writing_as_its_own_user(world):
    with _volume(world, "vshare") as vol, \
            _sandboxes(world, ("va", {"volumes": [{"name": vol, "path": "/data"}]}),
                       ("vb", {"volumes": [{"name": vol, "path": "/mnt/shared"}]})) as (a, b):
        sh_ok(world, a, "echo from-a > /data/a.txt && id -u > /data/who")
        out = sh_ok(world, b, "cat /mnt/shared/a.txt && echo back > /mnt/shared/a.txt && "
                              "stat -c %U /mnt/shared/a.txt && echo more >> /mnt/shared/a.txt")
        expect("from-a" in out, "b reads what a wrote:", out)
        expect("sandbox" in out, "a's file belongs to b's sandbox user:", out)
        out = sh_ok(world, a, "cat /data/a.txt; stat -c %U /data; touch /data/a.txt")
        expect("back" in out and "more" in out, "a reads what b wrote back:", out)
        vinfo = rpc_ok(world, "volume.get", {"name": vol})
        expect_eq(sorted(vinfo["mountedBy"]), sorted([a, b]), "mountedBy")
        expect(vinfo["usage"]["usedInodes"] > 0 and vinfo["usage"]["usedBytes"] > 0, "usage:", vinfo)
        sb = rpc_ok(world, "sandbox.get", {"name": a})
        expect_eq(sb["volumes"], [{"name": vol, "path": "/data", "readOnly": False}], "sandbox.get volumes")
test_two_sandboxes_share_a_volume_each_writing_as_its_own_user.timeout = 300


def test_a_read_only_mount_refuses_writes_even_as_root_and_cannot_be_remounted(world):
    with _volume(world, "vro") as vol, \
            _sandboxes(world, ("vrw", {"volumes": [{"name": vol, "path": "/data"}]}),
                       ("vro", {"volumes": [{"name": vol, "path": "/data", "readOnly": True}]})) as (rw, ro):
        sh_ok(world, rw, "echo hi > /data/f")
        code, out, err = sh(world, ro, "echo x > /data/f", "--sudo")
        expect(code != 0 and "Read-only file system" in err, "write as root on a read-only mount:", code, out, err)
        code, out, err = sh(world, ro, "touch /data/new 2>&1; mount -o remount,rw /data 2>&1; "
                                       "touch /data/new2 && echo WROTE", "--sudo")
        expect("WROTE" not in out, "a remount,rw inside made the volume writable:", out, err)
        expect_eq(sh_ok(world, ro, "cat /data/f").strip(), "hi", "the read-only mount reads the volume")
        out = sh_ok(world, ro, "grep ' /data ' /proc/self/mountinfo")
        expect(" ro," in out or " ro " in out, "mountinfo shows /data read-only:", out)
test_a_read_only_mount_refuses_writes_even_as_root_and_cannot_be_remounted.timeout = 300


def test_a_full_volume_gives_enospc_to_its_users_alone(world):
    with _volume(world, "vfull", size=16) as vol, \
            _sandboxes(world, ("vf", {"volumes": [{"name": vol, "path": "/data"}]}),
                       ("vn", {})) as (full, neighbour):
        code, out, err = sh(world, full, "dd if=/dev/zero of=/data/big bs=1M count=64 2>&1; echo rc=$?")
        expect("No space left on device" in out, "filling the volume:", out, err)
        # The sandbox's own disk, a neighbour and the daemon carry on.
        sh_ok(world, full, "echo ok > /workspace/ok && cat /workspace/ok")
        sh_ok(world, neighbour, "echo ok > /workspace/ok && cat /workspace/ok")
        expect_eq(rpc_ok(world, "volume.get", {"name": vol})["name"], vol, "volume.get of a full volume")
        sh_ok(world, full, "rm /data/big && echo again > /data/small")
test_a_full_volume_gives_enospc_to_its_users_alone.timeout = 300


def test_delete_is_refused_while_a_sandbox_mounts_it_and_works_after(world):
    vol = world.name("vdel")
    rpc_ok(world, "volume.create", {"name": vol, "sizeMiB": 16})
    with _sandboxes(world, ("vd", {"volumes": [{"name": vol, "path": "/v"}]})) as (sb,):
        msg = world.rpc("volume.delete", {"name": vol})
        expect_eq(_reason(msg), "in_use", "delete while mounted: " + json.dumps(msg)[:300])
        expect_eq(_err(msg)["data"].get("sandboxes"), [sb], "data.sandboxes")
        expect(sb in _err(msg)["message"], "the message names the sandbox:", _err(msg)["message"])
    rpc_ok(world, "volume.delete", {"name": vol})
    expect_eq(_reason(world.rpc("volume.get", {"name": vol})), "not_found", "get after delete")
    expect(not os.path.exists(os.path.join(world.daemon.state_dir, "volumes", vol)),
           "the volume's directory is gone")
    expect_eq(_volume_leaks(world, vol), [], "leaks of the deleted volume")


def test_a_volume_and_its_data_survive_a_kill_9_of_the_daemon(world):
    vol = world.name("vkill")
    rpc_ok(world, "volume.create", {"name": vol, "sizeMiB": 16, "tags": {"k": "v"}})
    sb = world.name("vkp")
    try:
        rpc_ok(world, "sandbox.create", {"name": sb, "networkPolicy": "deny-all", "persistent": True,
                                         "volumes": [{"name": vol, "path": "/data"}]}, 180)
        sh_ok(world, sb, "echo kept > /data/k")
        d = world.daemon
        os.kill(d.proc.pid, signal.SIGKILL)
        d.proc.wait()
        d.start()
        # The running session kept its mount; the volume is back.
        expect_eq(sh_ok(world, sb, "cat /data/k").strip(), "kept", "the running sandbox after the restart")
        v = rpc_ok(world, "volume.get", {"name": vol})
        expect_eq((v["sizeMiB"], v["tags"]), (16, {"k": "v"}), "the volume after kill -9")
        # A stopped persistent sandbox resumes with it mounted again.
        rpc_ok(world, "sandbox.stop", {"name": sb}, 120)
        rpc_ok(world, "sandbox.get", {"name": sb, "resume": True}, 180)
        expect_eq(sh_ok(world, sb, "cat /data/k").strip(), "kept", "the resumed sandbox")
    finally:
        world.rpc("sandbox.delete", {"name": sb}, 120)
        world.rpc("volume.delete", {"name": vol}, 120)
test_a_volume_and_its_data_survive_a_kill_9_of_the_daemon.timeout = 400


def test_a_symlink_planted_at_the_mount_path_does_not_redirect_the_volume(world):
    with _volume(world, "vsym") as vol, _sandboxes(world, ("vsrc", {})) as (src,):
        sh_ok(world, src, "ln -s /etc /workspace/data && ln -s /etc /tmp/x", "--sudo")
        sh_ok(world, src, "ln -s /etc /data", "--sudo")
        fork = world.name("vfork")
        msg = world.rpc("sandbox.fork", {"sourceSandbox": src, "name": fork,
                                         "overrides": {"volumes": [{"name": vol, "path": "/data"}]}}, 180)
        try:
            expect("error" in msg, "a fork mounting over a planted symlink:", json.dumps(msg)[:300])
            expect("symbolic link" in _err(msg)["message"], "the error says why:", _err(msg)["message"])
        finally:
            world.rpc("sandbox.delete", {"name": fork}, 120)
        fork2 = world.name("vfork2")
        msg = world.rpc("sandbox.fork", {"sourceSandbox": src, "name": fork2,
                                         "overrides": {"volumes": [{"name": vol, "path": "/workspace/data/sub"}]}},
                        180)
        try:
            expect("error" in msg, "a fork mounting beneath a planted symlink:", json.dumps(msg)[:300])
        finally:
            world.rpc("sandbox.delete", {"name": fork2}, 120)
        # The source's /etc was never mounted over.
        out = sh_ok(world, src, "grep -c ' /etc ' /proc/self/mountinfo || true")
        expect_eq(out.strip(), "0", "a mount on /etc")
test_a_symlink_planted_at_the_mount_path_does_not_redirect_the_volume.timeout = 400


def test_a_fork_mounts_the_same_volumes_and_a_snapshot_holds_none(world):
    with _volume(world, "vfk") as vol, \
            _sandboxes(world, ("vfs", {"volumes": [{"name": vol, "path": "/data"}]})) as (src,):
        sh_ok(world, src, "echo shared > /data/s")
        fork = world.name("vff")
        try:
            rpc_ok(world, "sandbox.fork", {"sourceSandbox": src, "name": fork}, 180)
            expect_eq(sh_ok(world, fork, "cat /data/s").strip(), "shared", "the fork's volume")
            sh_ok(world, fork, "echo from-fork > /data/f")
            expect_eq(sh_ok(world, src, "cat /data/f").strip(), "from-fork", "one volume, not a copy")
        finally:
            world.rpc("sandbox.delete", {"name": fork}, 120)
        snap = rpc_ok(world, "sandbox.snapshot", {"name": src}, 180)
        try:
            expect("volumes" not in snap["config"], "a snapshot's config names no volume: %s" % snap["config"])
        finally:
            world.rpc("snapshot.delete", {"id": snap["id"]})
test_a_fork_mounts_the_same_volumes_and_a_snapshot_holds_none.timeout = 400


def test_bad_volume_inputs_are_refused_naming_the_field(world):
    cases = [
        ("volume.create", {"name": "Bad_Name", "sizeMiB": 16}, "name"),
        ("volume.create", {"name": "ok-name", "sizeMiB": 1}, "sizeMiB"),
        ("volume.create", {"name": "ok-name"}, "sizeMiB"),
        ("volume.create", {"name": "ok-name", "sizeMiB": 16, "sizeMib": 1}, "sizeMib"),
        ("volume.create", {"name": "ok-name", "sizeMiB": 16, "inodes": 3}, "inodes"),
        ("volume.create", {"name": "x" * 100, "sizeMiB": 16}, "name"),
        ("volume.list", {"limit": 0}, "limit"),
        ("volume.get", {"nam": "x"}, "nam"),
        ("sandbox.create", {"volumes": [{"name": "nope", "path": "data"}]}, "volumes[0].path"),
        ("sandbox.create", {"volumes": [{"name": "nope", "path": "/"}]}, "volumes[0].path"),
        ("sandbox.create", {"volumes": [{"name": "nope", "path": "/a/../etc"}]}, "volumes[0].path"),
        ("sandbox.create", {"volumes": [{"name": "nope", "path": "/proc/x"}]}, "volumes[0].path"),
        ("sandbox.create", {"volumes": [{"name": "nope", "path": "/data", "ro": True}]}, "volumes[0].ro"),
        ("sandbox.create", {"volumes": [{"name": "nope", "path": "/data"}]}, "volumes[0].name"),
        ("sandbox.create", {"volumes": [{"name": "v%d" % i, "path": "/d%d" % i} for i in range(17)]}, "volumes"),
    ]
    for method, params, field in cases:
        msg = world.rpc(method, params)
        expect("error" in msg, "%s %s was accepted" % (method, json.dumps(params)[:100]))
        expect_eq(_field(msg), field, "%s %s: %s" % (method, json.dumps(params)[:100], json.dumps(msg)[:300]))
    expect_eq(_reason(world.rpc("volume.delete", {"name": "no-such-volume"})), "not_found", "delete unknown")
    # Admission: a volume the state filesystem cannot back is refused,
    # naming sizeMiB, and nothing of it is left.
    big = world.name("vbig")
    st = os.statvfs(world.daemon.state_dir)
    msg = world.rpc("volume.create", {"name": big, "sizeMiB": ((st.f_bavail * st.f_frsize) >> 20) + 1024}, 120)
    expect_eq((_reason(msg), _field(msg)), ("limit_exceeded", "sizeMiB"), "a volume past the state filesystem: %s"
              % json.dumps(msg)[:300])
    expect(not os.path.exists(os.path.join(world.daemon.state_dir, "volumes", big)), "its directory is gone")
    expect_eq(_reason(world.rpc("volume.get", {"name": big})), "not_found", "the refused volume")


def test_list_pages_and_filters_like_sandbox_list(world):
    names = [world.name("vl%d" % i) for i in range(3)]
    try:
        for i, n in enumerate(names):
            rpc_ok(world, "volume.create", {"name": n, "sizeMiB": 16, "tags": {"grp": "a" if i < 2 else "b"}})
        prefix = os.path.commonprefix(names)
        got, cursor = [], None
        while True:
            p = {"namePrefix": prefix, "limit": 1}
            if cursor:
                p["cursor"] = cursor
            page = rpc_ok(world, "volume.list", p)
            got += [v["name"] for v in page["volumes"]]
            cursor = page["nextCursor"]
            if not cursor:
                break
        expect_eq(got, sorted(names), "paged list")
        tagged = [v["name"] for v in rpc_ok(world, "volume.list", {"namePrefix": prefix, "tags": {"grp": "a"}})["volumes"]]
        expect_eq(tagged, sorted(names[:2]), "tag filter")
        info = rpc_ok(world, "daemon.info", {})["storage"]
        expect(info["volumes"] >= 3 and info["volumeCommittedBytes"] >= 3 * (16 << 20), "daemon.info storage:", info)
    finally:
        for n in names:
            world.rpc("volume.delete", {"name": n})


TENANT = 2001


def test_another_tenant_cannot_see_mount_or_delete_a_volume(world):
    import test_tenant_room as T
    world.stop_sandboxd()
    d = world.start_sandboxd({"socketGroup": "nogroup", "tenants": {"names": {
        "uid:%d" % TENANT: {"maxDiskMiB": 4096, "maxVolumes": 1}}}}, tag="vten")
    vol = world.name("vadm")
    try:
        rpc_ok(world, "volume.create", {"name": vol, "sizeMiB": 16})
        mine = world.name("vmine")
        sb = world.name("vtsb")
        get, lst, dele, mount, own, create_taken, second = T._as(d, [
            {"method": "volume.get", "params": {"name": vol}},
            {"method": "volume.list", "params": {}},
            {"method": "volume.delete", "params": {"name": vol}},
            {"method": "sandbox.create", "params": {"name": sb, "networkPolicy": "deny-all",
                                                    "volumes": [{"name": vol, "path": "/data"}]}},
            {"method": "volume.create", "params": {"name": mine, "sizeMiB": 16}},
            {"method": "volume.create", "params": {"name": vol, "sizeMiB": 16}},
            {"method": "volume.create", "params": {"name": world.name("vtwo"), "sizeMiB": 16}},
        ])
        expect(_reason(get) in ("not_found", "permission_denied"), "get of another's volume: %s" % get)
        expect_eq([v["name"] for v in lst["result"]["volumes"]], [], "a tenant lists no volume of another")
        expect(_reason(dele) in ("not_found", "permission_denied"), "delete of another's volume: %s" % dele)
        expect_eq(_reason(mount), "not_found", "mount of another's volume: %s" % json.dumps(mount)[:300])
        expect_eq(own["result"]["owner"], "uid:%d" % TENANT, "the tenant's own volume's owner")
        expect_eq(_reason(create_taken), "already_exists", "a name another holds")
        # A count bound beside the bytes one: the tenant's second volume is
        # over its maxVolumes 1, whatever its size.
        expect_eq(_reason(second), "limit_exceeded", "a volume past maxVolumes: %s" % json.dumps(second)[:300])
        expect("maxVolumes 1" in second["error"]["message"], "names the limit:", second["error"]["message"])
        rpc_ok(world, "volume.get", {"name": vol})
        expect(vol not in [v["name"] for v in T._as(d, [{"method": "volume.list", "params": {}}])[0]["result"]["volumes"]],
               "still hidden")
        info = T._as(d, [{"method": "daemon.info", "params": {}}])[0]["result"]
        expect(info["tenant"]["usage"]["diskMiB"] >= 16, "the tenant's volume counts in its disk:", info["tenant"])
        T._as(d, [{"method": "volume.delete", "params": {"name": mine}}])
    finally:
        world.rpc("volume.delete", {"name": vol})
        world.stop_sandboxd(d)
        world.start_sandboxd()
test_another_tenant_cannot_see_mount_or_delete_a_volume.timeout = 300


def test_the_cli_makes_lists_mounts_and_removes_volumes(world):
    vol = world.name("vcli")
    code, out, err = world.ctl("volume", "create", vol, "--size", "32M", "--tag", "a=b")
    expect_eq(code, 0, "volume create: " + err)
    sb = None
    try:
        code, out, err = world.ctl("volume", "ls")
        expect(code == 0 and vol in out, "volume ls:", out, err)
        code, out, err = world.ctl("--json", "volume", "get", vol)
        expect_eq(json.loads(out)["sizeMiB"], 32, "volume get --json")
        sb = world.name("vclis")
        code, out, err = world.ctl("create", "--name", sb, "--deny-all", "--volume", vol + ":/data:ro",
                                   timeout=180)
        expect_eq(code, 0, "create --volume: " + err)
        code, out, err = world.ctl("get", sb)
        expect(vol in out and "/data" in out, "get shows the volume:", out)
        code, out, err = world.ctl("volume", "rm", vol)
        expect_eq(code, 5, "volume rm while mounted exits 5 (conflict): " + err)
        code, out, err = world.ctl("create", "--name", world.name("vbad"), "--volume", vol + ":data")
        expect_eq(code, 2, "a bad --volume is a usage error: " + err)
    finally:
        if sb:
            world.ctl("rm", sb)
        code, out, err = world.ctl("volume", "rm", vol)
        expect_eq(code, 0, "volume rm: " + err)


def test_get_or_create_mounts_volumes_and_reports_a_different_set(world):
    with _volume(world, "vgoc") as vol, _volume(world, "vgoc2") as other:
        name = world.name("vgoc")
        try:
            p = {"name": name, "networkPolicy": "deny-all", "volumes": [{"name": vol, "path": "/v"}]}
            r = rpc_ok(world, "sandbox.getOrCreate", p, 180)
            expect(r["created"], "getOrCreate created it: %s" % r)
            sh_ok(world, name, "touch /v/x")
            r = rpc_ok(world, "sandbox.getOrCreate", dict(p, volumes=[{"name": other, "path": "/v"}]), 180)
            expect(not r["created"] and "volumes" in r["differs"], "a second getOrCreate with other volumes: %s" % r)
        finally:
            world.rpc("sandbox.delete", {"name": name}, 120)


def test_a_pool_volume_is_a_bounded_subvolume_and_leaves_nothing(world):
    import test_pool as P
    with P._Pool(world, "vpool") as p:
        vol = world.name("vpv")
        msg = p.d.rpc("volume.create", {"name": vol, "sizeMiB": 32}, 120)
        expect("result" in msg, "volume.create in the pool:", msg.get("error"))
        try:
            a = p.create_ok("vpa", volumes=[{"name": vol, "path": "/data"}])
            code, out, err = P._sh(p.d, a, "dd if=/dev/zero of=/data/big bs=1M count=96 2>&1; sync")
            expect("Disk quota exceeded" in out or "No space left" in out, "a writer past sizeMiB:", out[-300:])
            P._sh_ok(p.d, a, "rm /data/big && echo ok > /data/ok")
            expect(p.pool_info()["committedBytes"] >= (32 << 20) + (P.DISK_MIB << 20),
                   "the pool's committed bytes count the volume:", p.pool_info())
            msg = p.d.rpc("volume.delete", {"name": vol}, 120)
            expect_eq((msg.get("error") or {}).get("data", {}).get("reason"), "in_use", "delete while mounted")
            p.d.rpc("sandbox.delete", {"name": a}, 120)
            p.sandboxes = []
        finally:
            msg = p.d.rpc("volume.delete", {"name": vol}, 120)
        expect("result" in msg, "volume.delete:", msg.get("error"))
        P.poll(lambda: P._pool_entries(p.d) == ([], []), 60, "the pool's subvolumes to go after the deletes")
test_a_pool_volume_is_a_bounded_subvolume_and_leaves_nothing.timeout = 600


def test_a_volume_bounds_its_inodes_and_the_metrics_show_its_use(world):
    import test_metrics as M
    with _volume(world, "vino", size=64, inodes=2048) as vol, \
            _sandboxes(world, ("vi", {"volumes": [{"name": vol, "path": "/data"}]})) as (sb,):
        v = rpc_ok(world, "volume.get", {"name": vol})
        expect(2048 <= v["inodes"] < 8192, "the volume's inode count follows inodes:", v)
        code, out, err = sh(world, sb, "i=0; while [ $i -lt 9000 ]; do touch /data/f$i || exit 7; i=$((i+1)); done")
        expect(code == 7 and "No space left on device" in err, "past its inodes:", code, err[-300:])
        sh_ok(world, sb, "echo ok > /workspace/ok")
        samples = M._scrape(world)
        used = M._value(samples, "sandboxd_volume_used_inodes", volume=vol)
        expect(used is not None and used >= 2000, "sandboxd_volume_used_inodes:", used)
        expect_eq(M._value(samples, "sandboxd_volume_size_bytes", volume=vol), 64 << 20, "sandboxd_volume_size_bytes")
        expect(M._value(samples, "sandboxd_volume_used_bytes", volume=vol) > 0, "sandboxd_volume_used_bytes")
        expect(rpc_ok(world, "volume.get", {"name": vol})["usage"]["usedInodes"] >= 2000, "usage.usedInodes")
test_a_volume_bounds_its_inodes_and_the_metrics_show_its_use.timeout = 300


def test_delete_gives_the_grace_to_a_sandbox_writing_to_a_volume(world):
    """sandbox.delete kills a sandbox's processes at once (docs/API.md
    sandbox.delete) unless it mounts something writable that outlives it:
    then, as sandbox.stop does, it sends SIGTERM and waits the grace, so a
    process that writes its last state to the volume on SIGTERM keeps it.
    The volume, mounted by a third sandbox, shows what each did."""
    vol = world.name("vkill")
    rpc_ok(world, "volume.create", {"name": vol, "sizeMiB": 16})
    names = []
    try:
        for verb in ("delete", "stop"):
            name = world.name("vk" + verb[0])
            rpc_ok(world, "sandbox.create", {"name": name, "networkPolicy": "deny-all",
                                             "volumes": [{"name": vol, "path": "/v"}]}, 180)
            names.append(name)
            script = ("trap 'echo term > /v/%s; exit 0' TERM; echo up > /v/%s.up; "
                      "while :; do sleep 0.05; done" % (verb, verb))
            world.ctl("exec", "--detach", name, "--", "bash", "-c", script, check=True)
            poll(lambda: world.ctl("exec", name, "--", "test", "-e", "/v/%s.up" % verb)[0] == 0, 30,
                 "the SIGTERM handler of %s's process set up" % verb)
            rpc_ok(world, "sandbox." + verb, {"name": name}, 120)
        with _sandboxes(world, ("vkr", {"volumes": [{"name": vol, "path": "/v", "readOnly": True}]})) as (reader,):
            _code, out, _err = world.ctl("exec", reader, "--", "sh", "-c",
                                         "cat /v/delete 2>/dev/null || echo none; cat /v/stop 2>/dev/null || echo none")
            expect_eq(out.split(), ["term", "term"], "the SIGTERM handler ran under delete and under stop")
    finally:
        for n in names:
            world.rpc("sandbox.delete", {"name": n}, 120)
        world.rpc("volume.delete", {"name": vol}, 120)

def test_delete_of_a_paused_sandbox_gives_the_grace_to_its_volume_writer(world):
    """sandbox.delete of a paused sandbox (sandbox.pause) that writes to a
    volume gives its processes the stop's grace as it would running
    (docs/API.md sandbox.delete): it is thawed first, so its process's
    SIGTERM handler runs and its last write to the volume is kept, and
    the delete ends (a frozen init never read the stop)."""
    vol = world.name("vpz")
    rpc_ok(world, "volume.create", {"name": vol, "sizeMiB": 16})
    name = world.name("vpzs")
    try:
        rpc_ok(world, "sandbox.create", {"name": name, "networkPolicy": "deny-all",
                                         "volumes": [{"name": vol, "path": "/v"}]}, 180)
        script = "trap 'echo term > /v/paused; exit 0' TERM; echo up > /v/paused.up; while :; do sleep 0.05; done"
        world.ctl("exec", "--detach", name, "--", "bash", "-c", script, check=True)
        poll(lambda: world.ctl("exec", name, "--", "test", "-e", "/v/paused.up")[0] == 0, 30,
             "the SIGTERM handler set up")
        rpc_ok(world, "sandbox.pause", {"name": name})
        rpc_ok(world, "sandbox.delete", {"name": name}, 60)
        leaks.check(world, name)
        with _sandboxes(world, ("vpr", {"volumes": [{"name": vol, "path": "/v", "readOnly": True}]})) as (reader,):
            _code, out, _err = world.ctl("exec", reader, "--", "sh", "-c", "cat /v/paused 2>/dev/null || echo none")
            expect_eq(out.split(), ["term"], "the SIGTERM handler ran under delete of the paused sandbox")
    finally:
        world.rpc("sandbox.delete", {"name": name}, 120)
        world.rpc("volume.delete", {"name": vol}, 120)
