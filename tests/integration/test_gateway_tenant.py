"""Gateways (docs/SECURITY.md §4.3): a uid of daemon.json
tenants.gateways (sandboxd-e2b's) acts on each connection as the one tenant
it names with session.actAs, and can do nothing before; no other uid (nor
root, nor a second call) can name a tenant, and a gateway uid cannot be
admin.

The daemon of this file runs with socketGroup nogroup; its clients are
processes of uids 2100 (the gateway) and 2101 (a plain local user), gid
65534 (nogroup)."""
import json

import world as W
from common import expect, expect_eq
from test_tenants import _CLIENT, NOGROUP  # noqa: F401  (the one-connection client)
import subprocess

GATEWAY, OTHER = 2100, 2101

_state = {}


def _setup(world):
    if _state.get("daemon") and _state["daemon"].alive():
        return _state["daemon"]
    world.stop_sandboxd()
    d = world.start_sandboxd({"socketGroup": "nogroup", "tenants": {"gateways": [GATEWAY]}}, tag="gateway")
    _state["daemon"] = d
    return d


def _as(d, uid, reqs):
    p = subprocess.run(["python3", "-c", _CLIENT, json.dumps(reqs)], cwd=d.dir, user=uid, group=NOGROUP,
                       extra_groups=[], capture_output=True, text=True, timeout=180)
    expect(p.returncode == 0, "client as uid %d:" % uid, p.stdout[-500:], p.stderr[-800:])
    return json.loads(p.stdout.strip().splitlines()[-1])


def _reason(m):
    return ((m.get("error") or {}).get("data") or {}).get("reason")


def test_a_gateway_acts_only_as_the_tenant_it_names(world):
    d = _setup(world)
    name = None
    try:
        before, acted, made, again = _as(d, GATEWAY, [
            {"method": "sandbox.list", "params": {}},
            {"method": "session.actAs", "params": {"tenant": "alice"}},
            {"method": "sandbox.create", "params": {"networkPolicy": "deny-all"}},
            {"method": "session.actAs", "params": {"tenant": "bob"}},
        ])
        expect_eq(_reason(before), "permission_denied", "a gateway before actAs: %s" % json.dumps(before))
        expect("session.actAs first" in before["error"]["message"], before["error"]["message"])
        expect_eq(acted.get("result"), {"tenant": "alice"}, json.dumps(acted))
        expect("result" in made, json.dumps(made)[:500])
        name = made["result"]["name"]
        expect_eq(made["result"]["owner"], "alice", "the sandbox is the named tenant's")
        expect_eq(_reason(again), "permission_denied", "a second actAs on the connection: %s" % json.dumps(again))
        # Another connection of the gateway acting as bob sees nothing of alice's.
        _, listed, got = _as(d, GATEWAY, [
            {"method": "session.actAs", "params": {"tenant": "bob"}},
            {"method": "sandbox.list", "params": {}},
            {"method": "sandbox.get", "params": {"name": name}},
        ])
        expect_eq(listed["result"]["sandboxes"], [], "bob lists none of alice's")
        expect_eq(_reason(got), "permission_denied", json.dumps(got))
    finally:
        if name:
            d.rpc("sandbox.delete", {"name": name})


def test_no_other_uid_nor_admin_can_name_a_tenant(world):
    d = _setup(world)
    other, = _as(d, OTHER, [{"method": "session.actAs", "params": {"tenant": "alice"}}])
    expect_eq(_reason(other), "permission_denied", "a non-gateway uid: %s" % json.dumps(other))
    listed, = _as(d, OTHER, [{"method": "sandbox.list", "params": {}}])
    expect("result" in listed, "the plain uid stays the tenant uid:%d" % OTHER)
    m = d.rpc("session.actAs", {"tenant": "alice"})
    expect_eq(_reason(m), "permission_denied", "root: %s" % json.dumps(m))
    bad, = _as(d, GATEWAY, [{"method": "session.actAs", "params": {"tenant": "uid:0"}}])
    expect_eq((bad.get("error") or {}).get("code"), -32602, "a tenant name with ':': %s" % json.dumps(bad))


def test_odd_tenant_names_are_refused_or_stay_plain_tenants(world):
    """Review (attack24): names that look like roles, too long, not ASCII
    or with a NUL are refused and leave the connection unnamed (still
    refused everything); "admin" is the plain tenant of that name."""
    d = _setup(world)
    odd = ["tag:x=y", "uid:0", "tenant:alice", "a" * 65, "\u00e9", "a\u0000b", "", ".a", "-a", "a b",
           123, None, ["alice"]]
    for name in odd:
        bad, still = _as(d, GATEWAY, [{"method": "session.actAs", "params": {"tenant": name}},
                                      {"method": "sandbox.list", "params": {}}])
        expect("error" in bad and "result" not in bad, "tenant %r refused: %s" % (name, json.dumps(bad)))
        expect_eq(_reason(still), "permission_denied", "after a refused actAs %r: %s" % (name, json.dumps(still)))
    acted, info, listed = _as(d, GATEWAY, [{"method": "session.actAs", "params": {"tenant": "admin"}},
                                           {"method": "daemon.info", "params": {}},
                                           {"method": "sandbox.list", "params": {"all": True}}])
    expect_eq(acted.get("result"), {"tenant": "admin"}, json.dumps(acted))
    expect_eq(((info.get("result") or {}).get("tenant") or {}).get("name"), "admin",
              "the tenant named admin sees a tenant's daemon.info: %s" % json.dumps(info)[:400])
    expect("result" not in listed or listed["result"].get("sandboxes") == [],
           "the tenant named admin lists no one else's: %s" % json.dumps(listed)[:400])


def test_a_gateway_uid_cannot_also_be_admin(world):
    world.stop_sandboxd()
    _state.pop("daemon", None)
    try:
        world.start_sandboxd({"tenants": {"gateways": [GATEWAY], "localAdmins": [GATEWAY]}}, tag="gwadmin")
    except W.WorldError as e:
        expect("tenants.gateways: uid 2100 is also in localAdmins" in str(e), str(e)[-800:])
    else:
        raise AssertionError("a daemon.json naming a gateway uid as admin was accepted")
