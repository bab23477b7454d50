"""Many creates at once: every one succeeds (each sandbox on its own disk
image, so each attaches a loop device of its own), and after the deletes
nothing of any of them is left: no state or run directory, loop device,
mount or cgroup. A create that fails part way leaves nothing either, and its
name is free again at once."""
import os
import threading
import time

import leaks
import world as W
from common import expect, expect_eq, poll

FLOOD = 120


def _loops_of(d):
    """Loop devices whose backing file is below the daemon's state dir, the
    daemon's spare disk (made ahead for the next create) left out."""
    spare = os.path.join(d.state_dir, "disk-spare") + "/"
    hits = []
    for dev in sorted(os.listdir("/sys/block")):
        if not dev.startswith("loop"):
            continue
        try:
            with open("/sys/block/%s/loop/backing_file" % dev) as f:
                backing = f.read().strip()
        except OSError:
            continue
        if backing.startswith(d.state_dir + "/") and not backing.startswith(spare):
            hits.append("%s: %s" % (dev, backing))
    return hits


def _flood(d, names, params):
    """sandbox.create for every name at once, each from a thread of its own
    on a connection of its own; returns {name: response message}."""
    out = {}
    lock = threading.Lock()
    go = threading.Event()

    def one(name):
        try:
            with d.connect(120) as c:
                rid = c.start("sandbox.create", dict(params, name=name))
                go.wait(60)
                msg = c.wait(rid, 120)
        except Exception as e:  # noqa: BLE001 (reported below, with the name)
            msg = {"error": {"message": "client: %r" % e}}
        with lock:
            out[name] = msg

    threads = [threading.Thread(target=one, args=(n,), daemon=True) for n in names]
    for t in threads:
        t.start()
    go.set()
    deadline = time.monotonic() + 180
    for t in threads:
        t.join(max(0.0, deadline - time.monotonic()))
    expect(len(out) == len(names), "every create answered (%d of %d)" % (len(out), len(names)))
    return out


def test_a_flood_of_creates_all_succeed_and_leave_nothing(world):
    d = world.daemon
    names = [world.name("fl%d-" % i) for i in range(FLOOD)]
    try:
        got = _flood(d, names, {"networkPolicy": "deny-all"})
        failed = {n: m["error"] for n, m in got.items() if "error" in m}
        expect(not failed, "%d of %d creates failed, e.g. %s" % (len(failed), FLOOD, list(failed.items())[:3]))
        for n in names[:3]:
            expect_eq(got[n]["result"]["status"], "running", "status of %s" % n)
        expect_eq(len(_loops_of(d)), FLOOD, "one loop device per sandbox")
    finally:
        with d.connect(120) as c:
            rids = [c.start("sandbox.delete", {"name": n}) for n in names]
            for rid in rids:
                c.wait(rid, 120)
    left = os.path.join(d.state_dir, "sandboxes")
    poll(lambda: not [n for n in os.listdir(left) if n in names], 30, "the state dirs go")
    run = os.path.join(d.run_dir, "sandboxes")
    poll(lambda: not os.path.isdir(run) or not [n for n in os.listdir(run) if n in names], 30,
         "the run dirs go")
    poll(lambda: not _loops_of(d), 30, "the loop devices go")
    for n in names:
        leaks.check(world, n, d)


def test_a_create_that_fails_after_its_disk_is_made_leaves_nothing_and_frees_the_name(world):
    d = world.daemon
    name = world.name("flfail")
    expect_eq(d.stop(), 0, "sandboxd exit status on SIGTERM")
    # The first create fails once its state dir and disk image are made
    # and mounted (libcore/fault.h core_fault_error "create.dirs").
    d.start(binary=W.FAULTS_SANDBOXD, env={"SANDBOXD_FAIL": "create.dirs:1"})
    try:
        msg = d.rpc("sandbox.create", {"name": name, "networkPolicy": "deny-all"}, timeout=60)
        expect("error" in msg, "the create failed: %s" % msg)
        expect("injected failure" in msg["error"]["message"], "the injected error: %s" % msg["error"])
        expect(not os.path.exists(os.path.join(d.state_dir, "sandboxes", name)), "no state dir left")
        expect(not os.path.exists(os.path.join(d.run_dir, "sandboxes", name)), "no run dir left")
        # A loop device detaches once its last reference goes (autoclear),
        # which the kernel finishes just after the unmount: polled.
        poll(lambda: not _loops_of(d), 30, "the failed create's loop device goes")
        expect_eq(leaks.find(world, name, d), [], "traces left of the failed create")
        got = d.rpc("sandbox.get", {"name": name})
        expect_eq(got.get("error", {}).get("data", {}).get("reason"), "not_found", "sandbox.get after the failure")
        # The name is free at once: the same create succeeds.
        again = d.rpc("sandbox.create", {"name": name, "networkPolicy": "deny-all"}, timeout=60)
        expect("error" not in again, "the second create of %s: %s" % (name, again.get("error")))
        expect_eq(again["result"]["status"], "running", "status of the second create")
        d.rpc("sandbox.delete", {"name": name}, timeout=60)
        leaks.check(world, name, d)
        poll(lambda: not _loops_of(d), 30, "the loop device goes")
    finally:
        d.stop()
        d.start()


def test_a_failed_adoption_from_the_warm_pool_leaves_the_name_to_the_cold_create(world):
    world.stop_sandboxd()  # one daemon per network namespace
    d = world.add_sandboxd({"warmPool": {"size": 1}}, tag="poolf")
    # The first adoption fails after the session's run dir was renamed to
    # the caller's name and its network made (core_fault_error "pool.adopt").
    d.start(binary=W.FAULTS_SANDBOXD, env={"SANDBOXD_FAIL": "pool.adopt:1"})
    world.daemon = d
    name = world.name("flpool")
    try:
        poll(lambda: d.rpc("daemon.info", {})["result"]["warmPool"]["ready"] == 1, 60, "the pool fills")
        msg = d.rpc("sandbox.create", {"name": name}, timeout=120)
        expect("error" not in msg, "the create after a failed adoption: %s" % msg.get("error"))
        expect_eq(msg["result"]["status"], "running", "status")
        expect_eq(d.rpc("daemon.info", {})["result"]["warmPool"]["adopted"], 0, "no adoption counted")
        expect("could not be adopted (injected failure)" in d.log_tail(400), "the adoption was tried and failed")
        code, out, err = d.ctl("exec", name, "--", "hostname", timeout=60)
        expect_eq((code, out.strip()), (0, name), "the sandbox runs under its name (%s)" % err.strip()[:200])
        d.rpc("sandbox.delete", {"name": name}, timeout=60)
        leaks.check(world, name, d)
        again = d.rpc("sandbox.create", {"name": name}, timeout=120)
        expect("error" not in again, "the name is free after the delete: %s" % again.get("error"))
        d.rpc("sandbox.delete", {"name": name}, timeout=60)
        leaks.check(world, name, d)
    finally:
        expect_eq(world.stop_sandboxd(d), 0, "sandboxd exit status")
    problems = leaks.find(world, "all", d)
    expect(not problems, "left behind: %s" % "; ".join(problems[:8]))


def test_a_fork_that_fails_part_way_leaves_no_layer_and_frees_the_name(world):
    # In the worker, after the fork's directories and disk are made; and on
    # the loop thread, before its session starts.
    for point in ("create.dirs", "create.start"):
        _fork_fails_at(world, point)


def _fork_fails_at(world, point):
    d = world.daemon
    src = world.name("flsrc")
    fork = world.name("flfork")
    layers = os.path.join(d.state_dir, "layers")

    def entries():
        return sorted(os.listdir(layers)) if os.path.isdir(layers) else []

    msg = d.rpc("sandbox.create", {"name": src, "networkPolicy": "deny-all"}, timeout=60)
    expect("error" not in msg, "create the source: %s" % msg.get("error"))
    try:
        before = entries()
        expect_eq(d.stop(), 0, "sandboxd exit status on SIGTERM")
        # The fork's copy of the source is made, then its create fails.
        d.start(binary=W.FAULTS_SANDBOXD, env={"SANDBOXD_FAIL": point + ":1"})
        msg = d.rpc("sandbox.fork", {"sourceSandbox": src, "name": fork}, timeout=60)
        expect("error" in msg and "injected failure" in msg["error"]["message"], "the fork failed at %s: %s" % (point, msg))
        poll(lambda: entries() == before, 30, "the failed fork's layer goes (left: %s)"
             % sorted(set(entries()) - set(before)))
        expect_eq(leaks.find(world, fork, d), [], "traces left of the failed fork")
        again = d.rpc("sandbox.fork", {"sourceSandbox": src, "name": fork}, timeout=60)
        expect("error" not in again, "the same fork again: %s" % again.get("error"))
        d.rpc("sandbox.delete", {"name": fork}, timeout=60)
        leaks.check(world, fork, d)
    finally:
        d.rpc("sandbox.delete", {"name": src}, timeout=60)
        d.stop()
        d.start()
    leaks.check(world, src, d)
    poll(lambda: entries() == before, 30, "the layers go with the sandboxes")
