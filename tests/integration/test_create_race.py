"""Races on one name while a create's disk thread runs (sandboxd/session.c
start_work: with a user namespace the directories and disk are made on a
thread of their own while the worker clones sandbox-init): a create
cancelled in the same write, a delete sent right behind a create on
another connection, and a second create of the same name meanwhile. Each
round ends with the name either running (and deletable) or absent, and
nothing left behind once it is deleted."""
import json
import os
import threading

import leaks
from common import expect, sh_ok


def _reason(msg):
    return (msg.get("error") or {}).get("data", {}).get("reason")


def test_create_delete_create_same_name_while_the_disk_is_made(world):
    for rnd in range(6):
        name = world.name("race%d" % rnd)
        out = {}

        def create(key):
            out[key] = world.rpc("sandbox.create", {"name": name, "networkPolicy": "deny-all"}, 120)

        def delete():
            out["del"] = world.rpc("sandbox.delete", {"name": name}, 120)

        with world.daemon.connect(timeout=120) as conn:
            # create and its cancel in one write (the cancel finds it pending)
            rid, cid = conn.next_id, conn.next_id + 1
            conn.next_id += 2
            conn.send_raw(b"".join(json.dumps(m).encode() + b"\n" for m in (
                {"jsonrpc": "2.0", "id": rid, "method": "sandbox.create",
                 "params": {"name": name, "networkPolicy": "deny-all"}},
                {"jsonrpc": "2.0", "id": cid, "method": "request.cancel", "params": {"id": rid}})))
            ts = [threading.Thread(target=create, args=("c2",)), threading.Thread(target=delete),
                  threading.Thread(target=create, args=("c3",))]
            for t in ts:
                t.start()
            first = conn.wait(rid, 120)
            for t in ts:
                t.join(150)
        got = world.rpc("sandbox.get", {"name": name})
        if "result" in got:
            expect(got["result"].get("status") == "running", "round %d: a listed sandbox runs" % rnd,
                   json.dumps(got)[:300], json.dumps(first)[:200], {k: json.dumps(v)[:200] for k, v in out.items()})
            sh_ok(world, name, "true")
            world.rpc("sandbox.delete", {"name": name}, 120)
        else:
            expect(_reason(got) == "not_found", "round %d: get" % rnd, json.dumps(got)[:300])
        leaks.check(world, name)


def test_a_create_refused_by_a_full_state_filesystem_leaves_nothing(world):
    """The disk thread fails (ENOSPC) while the worker has cloned init:
    the refused create leaves no init, loop device, mount, cgroup or
    directory, and a create with room afterwards of the same name works."""
    from test_fullfs import _fill, _small_tmpfs
    world.stop_sandboxd()
    try:
        with _small_tmpfs(world, "96m") as fs:
            d = world.add_sandboxd(config={"diskMiB": 16}, tag="rfull", state_dir=fs + "/state")
            d.start()
            name = world.name("rfull")
            filler = None
            try:
                d.rpc_result("sandbox.create", {"name": name + "-a", "networkPolicy": "deny-all"}, 120)
                filler = _fill(fs)
                for i in range(3):
                    e = d.rpc("sandbox.create", {"name": name, "networkPolicy": "deny-all"}, 120).get("error")
                    expect(e is not None, "create on a full state filesystem answered success")
                    leaks.check(world, name, daemon=d)
                os.unlink(filler)
                filler = None
                d.rpc_result("sandbox.create", {"name": name, "networkPolicy": "deny-all"}, 120)
                d.rpc_result("sandbox.delete", {"name": name}, 120)
                leaks.check(world, name, daemon=d)
            finally:
                if filler:
                    os.unlink(filler)
                if d.alive():
                    d.rpc("sandbox.delete", {"name": name + "-a"}, 60)
                    d.rpc("sandbox.delete", {"name": name}, 60)
                world.stop_sandboxd(d)
    finally:
        world.start_sandboxd()
