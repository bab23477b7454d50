"""The policy dry run (policy.check, `sandboxctl policy test`), the custom
policy flags of `sandboxctl create`, and the event stream (events.subscribe,
`sandboxctl events`), DESIGN §5.1, §5.2 and §6."""
import json
import os
import signal
import subprocess
import tempfile
import time

import world as W
from common import create, delete, expect, expect_eq, sandbox, sh


def _need_methods(world):
    """Skips while the daemon does not serve policy.check and events.subscribe."""
    for method in ("policy.check", "events.subscribe"):
        msg = world.rpc(method, {"kinds": []} if method == "events.subscribe" else {})
        if msg.get("error", {}).get("code") == -32601:
            raise W.Skip("sandboxd does not register %s yet (register_event_methods)" % method)


def _check(world, params):
    msg = world.rpc("policy.check", params)
    if "error" in msg:
        raise AssertionError("policy.check %s: %s" % (json.dumps(params), json.dumps(msg["error"])))
    return msg["result"]


def _error(world, method, params):
    msg = world.rpc(method, params)
    expect("error" in msg, "%s %s should fail, got" % (method, json.dumps(params)), msg.get("result"))
    return msg["error"]


def _custom_sandbox(world, tag, *flags):
    """A sandbox with a custom policy, or a skip while the daemon refuses
    policy objects."""
    name, code, out, err = create(world, tag, *flags, check=False)
    if code != 0:
        if "not supported yet" in err:
            raise W.Skip("sandboxd does not accept custom policy objects yet")
        raise AssertionError("create %s: exit %d: %s" % (" ".join(flags), code, err.strip()[:300]))
    return name


def test_policy_check_deny_all_sandbox_denies_with_the_mode(world):
    _need_methods(world)
    with sandbox(world, "pcdeny", "--deny-all") as name:
        r = _check(world, {"sandbox": name, "url": "https://api.example.test/v1?q=1"})
        expect_eq((r["decision"], r["layer"], r["rule"]), ("deny", "policy", "deny-all"), "verdict")
        expect_eq((r["host"], r["port"]), ("api.example.test", 443), "destination (https default port)")
        expect("deny-all" in r["message"] and "\n" not in r["message"], "message names the rule:", r["message"])

        code, out, err = world.ctl("policy", "test", name, "http://API.Example.Test./x")
        expect_eq(code, 3, "policy test exit status on deny (%s)" % err.strip())
        lines = out.splitlines()
        expect_eq(lines[0], "deny", "first line")
        expect("layer: policy" in lines and "rule: deny-all" in lines, "layer and rule lines:", out)


def test_policy_check_allow_all_still_refuses_the_host_and_link_local(world):
    _need_methods(world)
    with sandbox(world, "pcallow", "--allow-all") as name:
        code, out, err = world.ctl("--json", "policy", "test", name, "https://http.test/")
        expect_eq(code, 0, "policy test exit status on allow (%s)" % err.strip())
        r = json.loads(out)
        expect_eq((r["decision"], r["layer"], r["port"]), ("allow", "policy", 443), "allow-all verdict")

        # The world host's own address: no policy opens it (rule 5).
        r = _check(world, {"sandbox": name, "host": W.HOST_ADDR, "port": 22})
        expect_eq((r["decision"], r["layer"], r["port"]), ("deny", "never", 22), "the host itself")
        # Cloud metadata, written as an inet_aton literal.
        r = _check(world, {"sandbox": name, "url": "http://0xa9fea9fe/latest/meta-data"})
        expect_eq((r["decision"], r["layer"], r["host"], r["port"]),
                  ("deny", "forbidden-range", "169.254.169.254", 80), "metadata address")
        # A public-ish test address is reachable under allow-all.
        r = _check(world, {"sandbox": name, "host": "%s:8080" % W.HTTP_ADDR})
        expect_eq((r["decision"], r["port"]), ("allow", 8080), "address with port in host")


def test_policy_check_custom_sandbox_names_the_rule(world):
    _need_methods(world)
    name = _custom_sandbox(world, "pccustom", "--allow", "*.example.test", "--deny-subnet", "10.0.0.0/8")
    try:
        code, out, err = world.ctl("--json", "get", name)
        expect_eq(code, 0, "get (%s)" % err.strip())
        pol = json.loads(out)["networkPolicy"]
        expect(isinstance(pol, dict) and "*.example.test" in json.dumps(pol.get("allow"))
               and "10.0.0.0/8" in json.dumps(pol.get("subnets", {}).get("deny")),
               "stored policy:", json.dumps(pol))

        r = _check(world, {"sandbox": name, "url": "https://a.b.example.test/"})
        expect_eq((r["decision"], r["layer"]), ("allow", "allow"), "subdomain verdict")
        expect("*.example.test" in r["rule"] and "allow[0]" in r["rule"], "rule names the pattern:", r["rule"])

        r = _check(world, {"sandbox": name, "url": "https://example.test/"})
        expect_eq((r["decision"], r["layer"], r["rule"]), ("deny", "default-deny", None),
                  "the bare domain is not covered by *.example.test")

        r = _check(world, {"sandbox": name, "url": "http://10.1.2.3:8080/"})
        expect_eq((r["decision"], r["layer"], r["port"]), ("deny", "subnets.deny", 8080), "denied subnet")
        expect("10.0.0.0/8" in r["rule"], "rule names the CIDR:", r["rule"])

        code, out, _e = world.ctl("policy", "test", name, "https://evil.test/")
        expect_eq((code, out.splitlines()[0]), (3, "deny"), "policy test on an unlisted domain")
        code, out, _e = world.ctl("policy", "test", name, "https://api.example.test/")
        expect_eq((code, out.splitlines()[0]), (0, "allow"), "policy test on a listed domain")
    finally:
        delete(world, name)


def test_policy_check_of_a_document_needs_no_sandbox(world):
    _need_methods(world)
    doc = {"allow": ["api.example.test:443"], "subnets": {"allow": ["192.168.1.0/24"]}}
    r = _check(world, {"networkPolicy": doc, "host": "192.168.1.7", "port": 22})
    expect_eq((r["decision"], r["layer"], r["host"], r["port"]),
              ("allow", "subnets.allow", "192.168.1.7", 22), "named private subnet")
    r = _check(world, {"networkPolicy": doc, "url": "http://api.example.test/"})
    expect_eq((r["decision"], r["layer"]), ("deny", "default-deny"), "pattern with another port")
    r = _check(world, {"networkPolicy": doc, "url": "https://user@evil.test@api.example.test/"})
    expect_eq((r["decision"], r["host"]), ("allow", "api.example.test"), "host after the last @")

    with tempfile.NamedTemporaryFile("w", suffix=".json", dir=world.tmp, delete=False) as f:
        json.dump(doc, f)
    try:
        code, out, err = world.ctl("policy", "test", "--policy", f.name, "api.example.test:443")
        expect_eq((code, out.splitlines()[0] if out else ""), (0, "allow"), "policy test --policy (%s)" % err)
    finally:
        os.unlink(f.name)


def test_policy_check_rejects_bad_requests_naming_the_field(world):
    _need_methods(world)
    e = _error(world, "policy.check", {"networkPolicy": {"allow": ["*.com"]}, "host": "a.com"})
    expect_eq((e["code"], e["data"].get("reason")), (-32000, "invalid_policy"), "invalid policy error")
    expect_eq(e["data"].get("field"), "networkPolicy.allow[0]", "field of the bad pattern")

    e = _error(world, "policy.check", {"url": "https://a.example.test/"})
    expect_eq((e["code"], e["data"].get("field")), (-32602, "sandbox"), "no policy at all")
    e = _error(world, "policy.check", {"networkPolicy": "allow-all", "url": "https://a.test/", "host": "a.test"})
    expect_eq((e["code"], e["data"].get("field")), (-32602, "host"), "url and host together")
    e = _error(world, "policy.check", {"networkPolicy": "allow-all", "url": "a.example.test/x"})
    expect_eq((e["code"], e["data"].get("field")), (-32602, "url"), "url without a scheme")
    e = _error(world, "policy.check", {"networkPolicy": "allow-all", "url": "ssh://a.example.test/"})
    expect_eq((e["code"], e["data"].get("field")), (-32602, "url"), "scheme without a default port")
    e = _error(world, "policy.check", {"networkPolicy": "allow-all", "url": "https://a.test:99999/"})
    expect_eq((e["code"], e["data"].get("field")), (-32602, "url"), "port out of range")

    missing = world.name("nosuch")
    e = _error(world, "policy.check", {"sandbox": missing, "url": "https://a.test/"})
    expect_eq(e["data"].get("reason"), "not_found", "unknown sandbox")
    code, _o, err = world.ctl("policy", "test", missing, "https://a.test/")
    expect_eq(code, 4, "policy test exit status for an unknown sandbox (%s)" % err.strip())


def test_create_policy_flags_conflict_with_named_policies(world):
    with tempfile.NamedTemporaryFile("w", suffix=".json", dir=world.tmp, delete=False) as f:
        f.write('"deny-all"')
    try:
        for other in (["--deny-all"], ["--allow-all"], ["--policy", f.name]):
            code, _o, err = world.ctl("create", "--allow", "*.example.test", *other)
            expect_eq(code, 2, "create --allow with %s (%s)" % (other[0], err.strip()))
            expect("cannot be combined" in err, "usage message:", err)
    finally:
        os.unlink(f.name)
    code, _o, err = world.ctl("create", "--deny-subnet", "10.0.0.0/8", "--allow-all")
    expect_eq(code, 2, "create --deny-subnet with --allow-all")


def test_create_with_a_bad_cidr_flag_fails_as_invalid_policy(world):
    name, code, _o, err = create(world, "badcidr", "--allow-subnet", "10.0.0.5/8", check=False)
    if code == 0:
        delete(world, name)
    if "not supported yet" in err:
        raise W.Skip("sandboxd does not accept custom policy objects yet")
    expect_eq(code, 3, "create with a non-canonical CIDR (%s)" % err.strip())
    expect("10.0.0.0/8" in err, "the error suggests the canonical CIDR:", err)


def test_events_subscribe_accepts_filters_and_rejects_bad_ones(world):
    _need_methods(world)
    with world.daemon.connect() as a, world.daemon.connect() as b:
        expect_eq(a.result("events.subscribe", {}), {"subscribed": True}, "subscribe to everything")
        expect_eq(b.result("events.subscribe", {"sandbox": world.name("later"), "kinds": ["denied"]}),
                  {"subscribed": True}, "subscribe with a sandbox and kind filter")
        for params, field in (({"kinds": ["bogus"]}, "kinds[0]"), ({"kinds": []}, "kinds"),
                              ({"sandbox": "Not A Name"}, "sandbox"), ({"kinds": "denied"}, "kinds")):
            msg = b.call("events.subscribe", params)
            expect("error" in msg, "events.subscribe %s should fail" % json.dumps(params))
            expect_eq((msg["error"]["code"], msg["error"]["data"].get("field")), (-32602, field),
                      "error for %s" % json.dumps(params))
        # Both connections stay usable after subscribing.
        expect("version" in b.result("daemon.info"), "daemon.info after subscribe")


def test_events_subscriptions_are_bounded_and_freed_with_the_connection(world):
    _need_methods(world)
    with world.daemon.connect() as c:
        for i in range(256):
            msg = c.call("events.subscribe", {})
            if "error" in msg:
                raise AssertionError("subscription %d refused: %s" % (i + 1, json.dumps(msg["error"])))
        msg = c.call("events.subscribe", {})
        expect("error" in msg and msg["error"]["data"].get("reason") == "limit_exceeded",
               "the 257th subscription:", json.dumps(msg))
    # The closed connection's subscriptions no longer count.
    with world.daemon.connect() as c:
        def again():
            m = c.call("events.subscribe", {})
            return "result" in m
        W.World.wait_until(again, 10, "a subscription after the full connection closed")


def test_events_cli_prints_denials_and_exits_130_on_interrupt(world):
    _need_methods(world)
    name = _custom_sandbox(world, "evcli", "--allow", "http.test")
    proc = None
    try:
        argv = [W.SANDBOXCTL, "--socket", world.daemon.socket, "events", "--json", "--kind", "denied", name]
        proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)
        os.set_blocking(proc.stdout.fileno(), False)
        buf = b""
        deadline = time.monotonic() + 60
        # The subscription becomes active some time after start; ask for a
        # denied name until the first denial event shows up.
        while b"\n" not in buf:
            expect(proc.poll() is None, "sandboxctl events exited early:", proc.returncode,
                   proc.stderr.read().decode(errors="replace") if proc.poll() is not None else "")
            expect(time.monotonic() < deadline, "no denial event within 60s")
            sh(world, name, "getent hosts blocked.test >/dev/null 2>&1; true")
            try:
                buf += proc.stdout.read() or b""
            except BlockingIOError:
                pass
        ev = json.loads(buf.split(b"\n", 1)[0])
        expect_eq((ev.get("kind"), ev.get("sandbox")), ("denied", name), "event envelope")
        expect("time" in ev and "blocked.test" in json.dumps(ev), "event names the host:", json.dumps(ev))
        os.kill(proc.pid, signal.SIGINT)
        expect_eq(proc.wait(10), 130, "exit status after Ctrl-C")
    finally:
        if proc and proc.poll() is None:
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait(10)
        delete(world, name)
