"""Exposed ports (DESIGN §3): a port served inside is reachable from the
host at the endpoint sandbox.get shows, whatever the network policy."""
import json

from common import create, delete, expect, expect_eq, get, poll, sandbox, sh


def _fetch(world, endpoint):
    host, port = endpoint.rsplit(":", 1)
    r = world.run_in_host(["python3", "-c",
                           "import urllib.request,sys; "
                           "print(urllib.request.urlopen('http://%s:%s/hello.txt', timeout=5).read().decode())"
                           % (host, port)], check=False)
    return r.returncode, r.stdout.strip()


def _serve(world, name, port):
    sh(world, name, "mkdir -p /tmp/www && echo hello-from-%s > /tmp/www/hello.txt" % name)
    world.ctl("exec", "--detach", name, "--", "python3", "-m", "http.server", str(port), "--bind",
              "127.0.0.1", "--directory", "/tmp/www", check=True)


def test_port_served_inside_is_reachable_from_the_host_at_its_endpoint(world):
    for policy in ("--deny-all", "--allow-all"):
        with sandbox(world, "port", policy, "--port", "8000", "--port", "9000") as name:
            sb, _c, _e = get(world, name)
            ports = {p["port"]: p["endpoint"] for p in sb["ports"]}
            expect_eq(sorted(ports), [8000, 9000], "ports in sandbox.get")
            expect(all(e and e.startswith("127.0.0.1:") for e in ports.values()), "endpoints:", ports)
            _serve(world, name, 8000)
            res = poll(lambda: (lambda r: r[0] == 0 and r)(_fetch(world, ports[8000])), 15,
                       "the server inside to answer through %s" % ports[8000])
            expect_eq(res[1], "hello-from-%s" % name, "body fetched from the host (%s)" % policy)
            code, _out = _fetch(world, ports[9000])
            expect(code != 0, "a port nothing listens on inside fails")


def test_ports_are_validated_naming_the_field(world):
    for ports, field in (([0], "ports[0]"), ([70000], "ports[0]"), ([80, 80], "ports[1]"),
                         (list(range(1, 17)), "ports")):
        r = world.rpc("sandbox.create", {"name": world.name("badport"), "networkPolicy": "deny-all",
                                         "ports": ports})
        e = r.get("error") or {}
        expect_eq((e.get("data") or {}).get("field"), field, "data.field for ports=%r" % ports[:3])


def test_endpoints_go_with_the_session(world):
    name, _c, _o, _e = create(world, "portstop", "--deny-all", "--persistent", "--port", "8000")
    try:
        sb, _c, _e = get(world, name)
        endpoint = sb["ports"][0]["endpoint"]
        world.ctl("stop", name, check=True)
        sb, _c, _e = get(world, name)
        expect_eq(sb["ports"], [{"port": 8000, "endpoint": None}], "ports of a stopped sandbox")
        code, _out = _fetch(world, endpoint)
        expect(code != 0, "the old endpoint is closed")
    finally:
        delete(world, name)


def test_update_changes_the_ports_of_a_running_sandbox(world):
    with sandbox(world, "portupd", "--deny-all", "--port", "8000") as name:
        sb, _c, _e = get(world, name)
        first = sb["ports"][0]["endpoint"]
        _serve(world, name, 8000)
        _serve(world, name, 8001)
        code, _o, err = world.ctl("update", name, "--port", "8000", "--port", "8001")
        expect_eq(code, 0, "update --port exit code (%s)" % err.strip())
        sb, _c, _e = get(world, name)
        ports = {p["port"]: p["endpoint"] for p in sb["ports"]}
        expect_eq((sorted(ports), ports[8000]), ([8000, 8001], first), "ports, and 8000 keeps its endpoint")
        res = poll(lambda: (lambda r: r[0] == 0 and r)(_fetch(world, ports[8001])), 15,
                   "the new port to answer through %s" % ports[8001])
        expect_eq(res[1], "hello-from-%s" % name, "body through the added port")
        code, _o, err = world.ctl("update", name, "--port", "0")
        expect_eq(code, 2, "a bad port is a usage error (%s)" % err.strip())
        r = world.rpc("sandbox.update", {"name": name, "ports": [8000, 8000]})
        expect_eq(((r.get("error") or {}).get("data") or {}).get("field"), "ports[1]", "duplicate port field")
        code, _o, err = world.ctl("update", name, "--no-ports")
        expect_eq(code, 0, "update --no-ports exit code (%s)" % err.strip())
        sb, _c, _e = get(world, name)
        expect_eq(sb["ports"], [], "no ports after --no-ports")
        for ep in ports.values():
            expect(_fetch(world, ep)[0] != 0, "a removed port's endpoint is closed:", ep)
