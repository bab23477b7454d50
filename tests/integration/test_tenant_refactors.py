"""Attacks on the refactors of tenant.c (limited_tenant, check_count),
container.c (require_container) and the new sandboxctl surface: one tenant
reaching another's sandbox, container, snapshot or timeout, and the
counting limits under concurrent creates and forks."""
import json
import threading

from common import expect, expect_eq
from test_tenants import ALICE, BOB, CAROL, _as, _cleanup, _ok, _one, _refused, _setup


def test_another_tenants_containers_timeouts_and_tagged_snapshots_stay_out_of_reach(world):
    d = _setup(world)
    a, b = world.name("rfa"), world.name("rfb")
    snaps = []
    try:
        _ok(d, ALICE, "sandbox.create", {"name": a, "networkPolicy": "deny-all", "tags": {"k": "v"}})
        _ok(d, BOB, "sandbox.create", {"name": b, "networkPolicy": "deny-all"})
        _ok(d, ALICE, "container.create", {"sandbox": a, "name": "c", "runtime": "host"})
        snaps.append(_ok(d, ALICE, "sandbox.snapshot", {"name": a, "tags": {"t": "x"}})["id"])
        before = _ok(d, ALICE, "sandbox.get", {"name": a})
        for req in ({"method": "container.get", "params": {"sandbox": a, "name": "c"}},
                    {"method": "container.list", "params": {"sandbox": a}},
                    {"method": "container.pause", "params": {"sandbox": a, "name": "c"}},
                    {"method": "container.resume", "params": {"sandbox": a, "name": "c"}},
                    {"method": "container.delete", "params": {"sandbox": a, "name": "c"}},
                    {"method": "container.get", "params": {"sandbox": a, "name": "nope"}},
                    {"method": "sandbox.setTimeout", "params": {"name": a, "timeout": 1000}},
                    {"method": "sandbox.setTimeout", "params": {"name": a, "timeout": 1000, "onTimeout": "pause"}},
                    {"method": "sandbox.extendTimeout", "params": {"name": a, "duration": 1000}}):
            m = _one(d, BOB, req["method"], req["params"])
            msg = _refused(m, "%s as another tenant" % req["method"])
            expect("uid:%d" % ALICE not in msg and d.dir not in msg, "no owner nor host path:", msg)
        # Names that differ only in case, with a trailing slash or NUL.
        for n in (a.upper(), a + "/", a + "\u0000", " " + a):
            m = _one(d, BOB, "container.get", {"sandbox": n, "name": "c"})
            expect("error" in m, "container.get of %r:" % n, json.dumps(m)[:300])
            m = _one(d, BOB, "sandbox.setTimeout", {"name": n, "timeout": 1000})
            expect("error" in m, "setTimeout of %r:" % n, json.dumps(m)[:300])
        # Lists by tags and by sandbox: nothing of the other's.
        ans = _as(d, BOB, [{"method": "snapshot.list", "params": {"sandbox": a}},
                           {"method": "snapshot.list", "params": {"tags": {"t": "x"}}},
                           {"method": "snapshot.list", "params": {"sandbox": a, "tags": {}}},
                           {"method": "sandbox.list", "params": {"tags": {"k": "v"}}},
                           {"method": "sandbox.list", "params": {"namePrefix": a}}])
        expect_eq(ans[0]["result"]["snapshots"], [], "snapshot.list by another's sandbox")
        expect_eq(ans[1]["result"]["snapshots"], [], "snapshot.list by another's tags")
        expect_eq(ans[2]["result"]["snapshots"], [], "snapshot.list by another's sandbox, empty tags")
        expect_eq(ans[3]["result"]["sandboxes"], [], "sandbox.list by another's tags")
        expect_eq(ans[4]["result"]["sandboxes"], [], "sandbox.list by another's prefix")
        after = _ok(d, ALICE, "sandbox.get", {"name": a})
        expect_eq(after.get("expiresAt"), before.get("expiresAt"), "another's timeout is unchanged")
        got = _ok(d, ALICE, "container.get", {"sandbox": a, "name": "c"})
        expect(not got.get("paused"), "the container is not paused:", got)
    finally:
        _cleanup(d, (a, b), snaps)


def test_concurrent_creates_and_forks_stay_within_max_sandboxes(world):
    d = _setup(world)
    src = world.name("rfs")
    names = [world.name("rfc%d" % i) for i in range(6)]
    try:
        _ok(d, CAROL, "sandbox.create", {"name": src, "networkPolicy": "deny-all", "resources": {"vcpus": 1, "diskMiB": 64}})
        out = [None] * len(names)

        def go(i):
            if i % 2:
                req = {"method": "sandbox.fork", "params": {"sourceSandbox": src, "name": names[i]}}
            else:
                req = {"method": "sandbox.create", "params": {"name": names[i], "networkPolicy": "deny-all",
                                                             "resources": {"vcpus": 1, "diskMiB": 64}}}
            out[i] = _as(d, CAROL, [req])[0]
        ts = [threading.Thread(target=go, args=(i,)) for i in range(len(names))]
        for t in ts:
            t.start()
        for t in ts:
            t.join()
        ok = [n for n, m in zip(names, out) if "result" in m]
        expect(len(ok) == 1, "maxSandboxes 2: exactly one more:", ok, json.dumps(out)[:800])
        usage = _ok(d, CAROL, "daemon.info")["tenant"]["usage"]
        expect(usage["sandboxes"] <= 2, "usage within the limit:", usage)
    finally:
        _cleanup(d, [src] + names)


def test_concurrent_snapshots_of_a_sandbox_and_its_fork_stay_within_max_snapshots(world):
    d = _setup(world)
    src, fk = world.name("rfss"), world.name("rfsf")
    snaps = []
    try:
        _ok(d, CAROL, "sandbox.create", {"name": src, "networkPolicy": "deny-all", "resources": {"vcpus": 1, "diskMiB": 64}})
        _ok(d, CAROL, "sandbox.fork", {"sourceSandbox": src, "name": fk})
        out = [None] * 6

        def go(i):
            out[i] = _as(d, CAROL, [{"method": "sandbox.snapshot", "params": {"name": (src, fk)[i % 2],
                                                                              "tags": {"i": str(i)}}}])[0]
        ts = [threading.Thread(target=go, args=(i,)) for i in range(len(out))]
        for t in ts:
            t.start()
        for t in ts:
            t.join()
        snaps = [m["result"]["id"] for m in out if "result" in m]
        expect(len(snaps) == 1, "maxSnapshots 1: exactly one:", json.dumps(out)[:800])
        listed = _ok(d, CAROL, "snapshot.list", {})["snapshots"]
        expect_eq(len(listed), 1, "one snapshot listed")
        m = _one(d, CAROL, "sandbox.fork", {"sourceSandbox": fk, "name": world.name("rfsx")})
        _refused(m, "a third sandbox past maxSandboxes 2", "limit_exceeded")
    finally:
        _cleanup(d, (src, fk), snaps)
