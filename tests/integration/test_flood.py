"""Many creates at once: every one succeeds (each sandbox on its own disk
image, so each attaches a loop device of its own), and after the deletes
nothing of any of them is left: no state or run directory, loop device,
mount or cgroup. A create that fails part way leaves nothing either, and its
name is free again at once."""
import os
import threading
import time

import leaks
from common import expect, expect_eq, poll

FLOOD = 120


def _loops_of(d):
    """Loop devices whose backing file is below the daemon's state dir."""
    hits = []
    for dev in sorted(os.listdir("/sys/block")):
        if not dev.startswith("loop"):
            continue
        try:
            with open("/sys/block/%s/loop/backing_file" % dev) as f:
                backing = f.read().strip()
        except OSError:
            continue
        if backing.startswith(d.state_dir + "/"):
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
