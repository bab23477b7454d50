"""daemon.json defaultNetworkPolicy (sandboxd(8), docs/POLICY.md): the
networkPolicy of a create that names none. With "deny-all" a sandbox made
by `sandboxctl create` or sandbox.create/getOrCreate without a policy is
deny-all (get shows it, a connect fails at once), an explicit allow-all
still reaches the internet, daemon.info shows the default, and a reload
applies a new one to later creates only."""
import json

import world as W
from common import expect, expect_eq
from test_network import _connect, _refused
from test_reload import _hup, _rewrite


def _policy(d, name):
    code, out, err = d.ctl("--json", "get", name)
    expect_eq(code, 0, "get %s (%s)" % (name, err.strip()[:200]))
    return json.loads(out)["networkPolicy"]


def test_default_network_policy_deny_all_applies_to_creates_that_name_none(world):
    world.stop_sandboxd()  # one daemon per network namespace
    # A warm pool prepared for allow-all creates: the default decides what
    # an adopting create gets, not the pool's mode.
    d = world.start_sandboxd({"defaultNetworkPolicy": "deny-all",
                              "warmPool": {"size": 1, "policy": "allow-all"}}, tag="defpol")
    names = []
    try:
        expect_eq(d.rpc_result("daemon.info")["defaultNetworkPolicy"], "deny-all", "daemon.info")
        W.World.wait_until(lambda: d.rpc_result("daemon.info")["warmPool"]["ready"] == 1, 60, "the pool fills")
        # The CLI sends no policy: the daemon's default applies (this
        # create, without a source, adopts the pooled session).
        plain = world.name("defpol")
        names.append(plain)
        code, _o, err = d.ctl("create", "--name", plain, timeout=180)
        expect_eq(code, 0, "create without a policy (%s)" % err.strip()[:300])
        expect_eq(d.rpc_result("daemon.info")["warmPool"]["adopted"], 1, "the create adopted the pooled session")
        expect_eq(_policy(d, plain), "deny-all", "the policy of a create that names none")
        _refused(*_connect(world, plain, W.HTTP_ADDR, W.LISTEN_PORT), "a connect from the default-policy sandbox")
        # sandbox.create and getOrCreate over the API, no networkPolicy.
        raw = world.name("defpolr")
        names.append(raw)
        msg = d.rpc("sandbox.create", {"name": raw}, timeout=120)
        expect("error" not in msg, "sandbox.create: %s" % msg.get("error"))
        expect_eq(msg["result"]["networkPolicy"], "deny-all", "sandbox.create's answer")
        goc = world.name("defpolg")
        names.append(goc)
        msg = d.rpc("sandbox.getOrCreate", {"name": goc}, timeout=120)
        expect("error" not in msg, "sandbox.getOrCreate: %s" % msg.get("error"))
        expect_eq(msg["result"]["sandbox"]["networkPolicy"], "deny-all", "getOrCreate's sandbox")
        # An explicit allow-all is still allow-all.
        allow = world.name("defpola")
        names.append(allow)
        code, _o, err = d.ctl("create", "--name", allow, "--allow-all", timeout=180)
        expect_eq(code, 0, "create --allow-all (%s)" % err.strip()[:300])
        expect_eq(_policy(d, allow), "allow-all", "an explicit allow-all")
        rc, _msg = _connect(world, allow, W.HTTP_ADDR, W.LISTEN_PORT)
        expect_eq(rc, 0, "allow-all: connect to %s:%d" % (W.HTTP_ADDR, W.LISTEN_PORT))
        # A reload changes the default for later creates only.
        _rewrite(d, defaultNetworkPolicy={"allow": ["api.public.test"]})
        _hup(d, "reload: ")
        expect_eq(d.rpc_result("daemon.info")["defaultNetworkPolicy"], {"allow": ["api.public.test"]},
                  "daemon.info after the reload")
        later = world.name("defpoll")
        names.append(later)
        code, _o, err = d.ctl("create", "--name", later, timeout=180)
        expect_eq(code, 0, "create after the reload (%s)" % err.strip()[:300])
        expect_eq(_policy(d, later), {"allow": ["api.public.test"]}, "the new default")
        expect_eq(_policy(d, plain), "deny-all", "a sandbox made before the reload keeps its policy")
    finally:
        for n in names:
            d.ctl("rm", n)
        world.stop_sandboxd(d)
