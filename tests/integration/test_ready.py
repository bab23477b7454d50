"""Setup and readiness (docs/API.md, "Setup and readiness"): a
sandbox.getOrCreate with `setup: true` that creates the sandbox holds its
setup claim, the sandbox is `ready: false` until sandbox.setReady, other
getOrCreate callers wait for it, and a claim whose holder fails or goes away
passes to a waiter."""
import json

import leaks
from common import expect, expect_eq, poll


def _goc(name, setup=True):
    p = {"name": name, "networkPolicy": "deny-all", "persistent": True}
    if setup:
        p["setup"] = True
    return p


def _result(msg, what):
    expect("result" in msg, what, json.dumps(msg)[:400])
    return msg["result"]


def _waiters(world, name):
    return world.rpc_result("sandbox.get", {"name": name})["setup"]["waiters"]


def _answered(conn, rid):
    """The answer to rid if it has come (without waiting), else None."""
    try:
        return conn.wait(rid, timeout=0.2)
    except TimeoutError:
        return None


def test_a_second_getorcreate_waits_until_the_creator_marks_the_sandbox_ready(world):
    name = world.name("ready")
    d = world.daemon
    with d.connect() as a, d.connect() as b, d.connect() as c:
        try:
            r = _result(a.call("sandbox.getOrCreate", _goc(name), timeout=180), "creator")
            expect_eq((r["created"], r["setup"], r["sandbox"]["ready"]), (True, True, False),
                      "the creator's answer: created, setup claimed, not ready")
            expect_eq(r["sandbox"]["setup"], {"claimed": True, "waiters": 0}, "setup of the new sandbox")
            rid_b = b.start("sandbox.getOrCreate", _goc(name))
            rid_c = c.start("sandbox.getOrCreate", _goc(name, setup=False))
            poll(lambda: _waiters(world, name) == 2, 30, "both callers waiting for the setup")
            expect(_answered(b, rid_b) is None, "a waiter was answered before the sandbox was ready")
            # The creator's setup: a file, then ready.
            _result(a.call("fs.write", {"sandbox": name, "files": [{"path": "setup.txt", "content": "ZG9uZQ=="}]}),
                    "setup write")
            s = _result(a.call("sandbox.setReady", {"name": name, "ready": True}), "setReady")
            expect_eq((s["ready"], s["setup"]), (True, {"claimed": False, "waiters": 0}), "after setReady")
            for conn, rid, what in ((b, rid_b, "waiter with setup"), (c, rid_c, "waiter without setup")):
                got = _result(conn.wait(rid, timeout=30), what)
                expect_eq((got["created"], got["setup"], got["sandbox"]["ready"]), (False, False, True), what)
            # A later caller gets it at once; it stays ready.
            got = _result(b.call("sandbox.getOrCreate", _goc(name)), "later caller")
            expect_eq((got["setup"], got["sandbox"]["ready"]), (False, True), "a later getOrCreate")
        finally:
            world.rpc("sandbox.delete", {"name": name})
    leaks.check(world, name)


def test_a_failed_setup_is_taken_over_by_a_waiter_and_run_again(world):
    name = world.name("rdyfail")
    d = world.daemon
    with d.connect() as a, d.connect() as b:
        try:
            _result(a.call("sandbox.getOrCreate", _goc(name), timeout=180), "creator")
            rid_b = b.start("sandbox.getOrCreate", _goc(name))
            poll(lambda: _waiters(world, name) == 1, 30, "the second caller waiting")
            # Another connection cannot end a claim it does not hold.
            s = _result(world.rpc("sandbox.setReady", {"name": name, "ready": False}), "setReady false (not holder)")
            expect_eq((s["ready"], s["setup"]["claimed"]), (False, True), "a stranger's ready:false")
            # The holder's setup failed.
            s = _result(a.call("sandbox.setReady", {"name": name, "ready": False}), "setReady false")
            got = _result(b.wait(rid_b, timeout=30), "the waiter")
            expect_eq((got["created"], got["setup"], got["sandbox"]["ready"]), (False, True, False),
                      "the waiter takes the setup over")
            # The next caller (the old creator) waits for the new holder.
            rid_a = a.start("sandbox.getOrCreate", _goc(name))
            poll(lambda: _waiters(world, name) == 1, 30, "the old creator waiting")
            _result(b.call("sandbox.setReady", {"name": name, "ready": True}), "setReady true")
            got = _result(a.wait(rid_a, timeout=30), "old creator")
            expect_eq((got["setup"], got["sandbox"]["ready"]), (False, True), "after the second setup")
        finally:
            world.rpc("sandbox.delete", {"name": name})
    leaks.check(world, name)


def test_the_claim_of_a_closed_connection_passes_to_a_waiter(world):
    name = world.name("rdydie")
    d = world.daemon
    try:
        with d.connect() as b:
            with d.connect() as a:
                _result(a.call("sandbox.getOrCreate", _goc(name), timeout=180), "creator")
                rid_b = b.start("sandbox.getOrCreate", _goc(name))
                poll(lambda: _waiters(world, name) == 1, 30, "the second caller waiting")
            # a closed: the creator went away mid-setup.
            got = _result(b.wait(rid_b, timeout=30), "the waiter")
            expect_eq((got["setup"], got["sandbox"]["ready"]), (True, False), "the waiter takes the setup over")
            # Unclaimed after b goes too: the next caller with setup claims it
            # at once; one without gets it as it is.
        s = _result(world.rpc("sandbox.getOrCreate", _goc(name, setup=False)), "caller without setup")
        expect_eq((s["setup"], s["sandbox"]["ready"]), (False, False), "no setup to wait for")
        with d.connect() as e:
            s = _result(e.call("sandbox.getOrCreate", _goc(name)), "caller with setup")
            expect_eq((s["setup"], s["sandbox"]["ready"]), (True, False), "an unclaimed sandbox is claimed")
    finally:
        world.rpc("sandbox.delete", {"name": name})
    leaks.check(world, name)


def test_a_waiting_getorcreate_can_be_cancelled_and_a_delete_answers_the_rest(world):
    name = world.name("rdycxl")
    d = world.daemon
    with d.connect() as a, d.connect() as b, d.connect() as c:
        try:
            _result(a.call("sandbox.getOrCreate", _goc(name), timeout=180), "creator")
            rid_b = b.start("sandbox.getOrCreate", _goc(name))
            rid_c = c.start("sandbox.getOrCreate", _goc(name))
            poll(lambda: _waiters(world, name) == 2, 30, "two callers waiting")
            cx = _result(b.call("request.cancel", {"id": rid_b}), "cancel")
            expect_eq(cx, {"cancelled": True}, "cancel of a waiting getOrCreate")
            e = b.wait(rid_b, timeout=30).get("error") or {}
            expect_eq((e.get("code"), (e.get("data") or {}).get("reason")), (-32800, "cancelled"), "the cancelled wait")
            expect_eq(_waiters(world, name), 1, "waiters after the cancel")
            world.rpc_result("sandbox.delete", {"name": name})
            e = c.wait(rid_c, timeout=60).get("error") or {}
            expect_eq((e.get("data") or {}).get("reason"), "not_found", "a waiter of a deleted sandbox")
        finally:
            world.rpc("sandbox.delete", {"name": name})
    leaks.check(world, name)


def test_readiness_is_stored_and_survives_a_daemon_restart(world):
    name = world.name("rdyrst")
    d = world.daemon
    try:
        with d.connect() as a:
            _result(a.call("sandbox.getOrCreate", _goc(name), timeout=180), "creator")
        # Unclaimed now (a closed), still not ready.
        d.stop()
        d.start()
        sb = world.rpc_result("sandbox.get", {"name": name})
        expect_eq((sb["ready"], sb["setup"]["claimed"]), (False, False), "not ready after a restart")
        with d.connect() as b:
            s = _result(b.call("sandbox.getOrCreate", _goc(name)), "after restart")
            expect_eq((s["setup"], s["sandbox"]["ready"]), (True, False), "the setup is run again after a restart")
            _result(b.call("sandbox.setReady", {"name": name, "ready": True}), "setReady")
        d.stop()
        d.start()
        expect_eq(world.rpc_result("sandbox.get", {"name": name})["ready"], True, "ready after a restart")
        # Sandboxes made otherwise are ready from the start.
        s = world.rpc_result("sandbox.getOrCreate", {"name": name + "-x", "networkPolicy": "deny-all"})
        expect_eq((s["setup"], s["sandbox"]["ready"]), (False, True), "getOrCreate without setup")
        e = world.rpc("sandbox.setReady", {"name": name, "ready": "yes"}).get("error") or {}
        expect_eq((e.get("code"), (e.get("data") or {}).get("field")), (-32602, "ready"), "a non-boolean ready")
        e = world.rpc("sandbox.getOrCreate", dict(_goc(name), setup=1)).get("error") or {}
        expect_eq((e.get("code"), (e.get("data") or {}).get("field")), (-32602, "setup"), "a non-boolean setup")
    finally:
        world.rpc("sandbox.delete", {"name": name})
        world.rpc("sandbox.delete", {"name": name + "-x"})
    leaks.check(world, name)
