"""HTTPS refusals an agent can read (docs/POLICY.md, "Refusals an HTTPS
client can read"): in an allowlist sandbox, a name the policy refuses on
443 gets its 403 page inside TLS, with a certificate for that name minted
by the sandbox's own CA, so curl, git, python urllib and node print the
policy's words instead of "CONNECT tunnel failed, response 403". Nothing
reaches the network for it, each attempt is one denial event, allowed
names still work end to end, and a client that does not trust the sandbox
CA fails the handshake.

The world's attacker listener (attacker.test, W.PUB_ATTACKER_ADDR) logs
every connection: the refused names are sent there where a client picks
an address itself, and it must stay empty."""
import base64
import json
import os
import tempfile

import world as W
from common import expect, expect_eq, sandbox, sh

# python3 -c URLLIB URL: urllib (honours HTTPS_PROXY, so CONNECT); prints
# "status=N" and the body, or "error=...".
URLLIB = r'''
import sys, urllib.request, urllib.error
try:
    r = urllib.request.urlopen(sys.argv[1], timeout=10)
    print("status=%d" % r.status); print(r.read().decode())
except urllib.error.HTTPError as e:
    print("status=%d" % e.code); print(e.read().decode())
except Exception as e:
    print("error=%s: %s" % (type(e).__name__, e))
'''

# node -e NODE URL: node's https (no proxy support: it resolves the name
# and connects itself, so nftables sends it to the proxy transparently).
NODE = r'''
const https = require("https");
https.get(process.argv[1], { timeout: 10000 }, r => {
  let d = "";
  r.on("data", c => d += c);
  r.on("end", () => { console.log("status=" + r.statusCode); console.log(d); });
}).on("error", e => console.log("error=" + e.code + " " + e.message));
'''

DENIED = "blocked.test"
PAGE = "Request to blocked.test refused by the sandbox's network policy; retrying will not help."


def _policy_file(world, doc):
    fd, path = tempfile.mkstemp(prefix="policy-", suffix=".json", dir=world.tmp)
    with os.fdopen(fd, "w") as f:
        json.dump(doc, f)
    return path


def _world_ca_inside(world, name):
    """The world CA (which signed the world's servers, not the sandbox's
    CA) as a file inside the sandbox."""
    with open(world.ca_cert, "rb") as f:
        pem = f.read()
    world.rpc_result("fs.write", {"sandbox": name, "files": [
        {"path": "/tmp/world-ca.crt", "content": base64.b64encode(pem).decode()}]})
    return "/tmp/world-ca.crt"


def _expect_page(text, name, what):
    expect(PAGE in text, "%s: the policy's 403 text:" % what, text[-600:])
    expect("policy: %s" % name in text and "host: %s" % DENIED in text and "rule: " in text,
           "%s: the page names the policy, the host and the rule:" % what, text[-600:])


def _denials_until_marker(world, name, ev, marker):
    """The proxy denial events for DENIED that arrived before the one for
    a plain-HTTP request to `marker` made now (events keep their order):
    what one attempt produced."""
    sh(world, name, "curl -sS -m 10 -o /dev/null http://attacker.test/%s" % marker)
    ev.wait_note(lambda n: n.get("method") == "event" and n["params"].get("layer") == "proxy"
                 and n["params"].get("host") == "attacker.test", 20)
    got = [n for n in ev.notes if n.get("method") == "event" and n["params"].get("layer") == "proxy"
           and n["params"].get("host") == DENIED]
    ev.notes[:] = [n for n in ev.notes if n not in got]
    return got


def test_denied_https_prints_the_policys_403_in_curl_git_urllib_and_node_once_each(world):
    pol = _policy_file(world, {"allow": ["api.public.test"]})
    with sandbox(world, "hdeny", "--policy", pol) as name, world.daemon.connect() as ev:
        ev.result("events.subscribe", {"sandbox": name})
        n_attacker = len(world.web_log("attacker"))
        # A resolution of the refused name to an address the client then
        # connects to itself (node has no proxy support): the hosts file.
        code, out, err = sh(world, name, "echo '%s %s' >> /etc/hosts" % (W.PUB_ATTACKER_ADDR, DENIED), "--sudo")
        expect_eq(code, 0, "add %s to /etc/hosts (%s)" % (DENIED, err.strip()[:200]))
        clients = [
            ("curl through HTTPS_PROXY", ["sh", "-c", "curl -sS -m 10 -D - https://%s/x; echo curl=$?" % DENIED]),
            ("curl intercepted", ["sh", "-c", "curl -sS -m 10 -D - --noproxy '*' https://%s/x; echo curl=$?"
                                  % DENIED]),
            ("git clone", ["sh", "-c", "cd /tmp && git clone https://%s/repo.git; echo git=$?" % DENIED]),
            ("python urllib", ["python3", "-c", URLLIB, "https://%s/x" % DENIED]),
            ("node https.get", ["node", "-e", NODE, "https://%s/x" % DENIED]),
        ]
        for i, (what, argv) in enumerate(clients):
            code, out, err = world.ctl("exec", name, "--", *argv, timeout=60)
            text = out + err
            _expect_page(text, name, what)
            if what.startswith("curl"):
                expect("HTTP/1.1 403 Forbidden" in out and "x-sandbox-policy: %s; host=%s" % (name, DENIED) in out
                       and "curl=0" in out, "%s: a 403 response, headers and all:" % what, out[-600:], err[-300:])
            elif what == "git clone":
                expect("git=0" not in out and "remote: " in err, "git shows the page as remote: lines:", err[-600:])
            else:
                expect("status=403" in out, "%s: status 403:" % what, out[-300:], err[-300:])
            got = _denials_until_marker(world, name, ev, "marker-%d" % i)
            expect_eq(len(got), 1, "%s: denial events for one attempt (%s)" % (what, got))
            p = got[0]["params"]
            expect_eq((p.get("port"), p.get("reason")), (443, "not-allowed"), "%s: the event" % what)
        # Nothing reached the network for the refused name.
        expect_eq(world.web_log("attacker")[n_attacker:], [], "connections at the attacker's listener")


def test_allowed_names_still_work_end_to_end_beside_the_deny_path(world):
    pol = _policy_file(world, {"allow": {"api.public.test": [{"transform": [{"headers": {"X-Test": "1"}}]}],
                                         "allowed.test": []}})
    with sandbox(world, "hallow", "--policy", pol) as name:
        ca = _world_ca_inside(world, name)
        n_api = len(world.web_log("api"))
        # Terminated (a host with rules) and spliced (without), through the
        # proxy variables and intercepted.
        for script in ("curl -sS -m 10 https://api.public.test/terminated",
                       "curl -sS -m 10 --noproxy '*' https://api.public.test/terminated-transparent",
                       "curl -sS -m 10 --cacert %s https://allowed.test/spliced" % ca,
                       "curl -sS -m 10 --cacert %s --noproxy '*' https://allowed.test/spliced-transparent" % ca):
            code, out, err = sh(world, name, script)
            expect_eq(code, 0, "%s (%s)" % (script, err.strip()[-300:]))
            expect('"path": "/' in out, "the echo server answered %s:" % script, out[:300])
        code, out, err = world.ctl("exec", name, "--", "node", "-e", NODE, "https://api.public.test/node")
        expect("status=200" in out, "node to an allowed name:", out[-300:], err[-300:])
        paths = sorted(e["path"] for e in world.web_log("api")[n_api:])
        expect_eq(paths, ["/node", "/spliced", "/spliced-transparent", "/terminated", "/terminated-transparent"],
                  "requests at the server")
        # The leaf the sandbox CA mints for a denied name is for that name
        # only: it does not pass for an allowed one.
        code, out, err = sh(world, name, "echo | openssl s_client -proxy \"${HTTPS_PROXY#http://}\" "
                            "-connect %s:443 -servername %s -verify_hostname api.public.test "
                            "-verify_return_error 2>&1; echo rc=$?" % (DENIED, DENIED))
        expect("rc=0" not in out and "hostname mismatch" in out.lower(),
               "the minted leaf for %s checked as api.public.test:" % DENIED, out[-600:])


def test_a_client_not_trusting_the_sandbox_ca_fails_the_handshake_and_the_denial_is_reported(world):
    pol = _policy_file(world, {"allow": ["api.public.test"]})
    with sandbox(world, "hpin", "--policy", pol) as name, world.daemon.connect() as ev:
        ev.result("events.subscribe", {"sandbox": name})
        ca = _world_ca_inside(world, name)
        n_attacker = len(world.web_log("attacker"))
        for i, how in enumerate(("", "--noproxy '*' --resolve %s:443:%s" % (DENIED, W.PUB_ATTACKER_ADDR))):
            code, out, err = sh(world, name, "curl -sS -m 10 --cacert %s %s https://%s/x; echo curl=$?"
                                % (ca, how, DENIED))
            expect("curl=60" in out or "curl=35" in out, "curl trusting another CA: a failed handshake:",
                   out[-300:], err[-300:])
            expect(PAGE not in out, "no page without the handshake:", out[-300:])
            got = _denials_until_marker(world, name, ev, "pin-%d" % i)
            expect_eq(len(got), 1, "denial events for one attempt (%s)" % got)
        expect_eq(world.web_log("attacker")[n_attacker:], [], "connections at the attacker's listener")


def test_connect_to_another_port_or_an_address_keeps_the_403_before_the_tunnel(world):
    pol = _policy_file(world, {"allow": ["api.public.test"]})
    with sandbox(world, "hport", "--policy", pol) as name:
        for target in ("%s:8443" % DENIED, "%s:443" % W.PUB_ATTACKER_ADDR):
            code, out, err = sh(world, name, "curl -sS -m 10 https://%s/; echo curl=$?"
                                % target)
            expect("curl=56" in out and "403" in err, "CONNECT %s: refused before the tunnel:" % target,
                   out[-300:], err[-300:])


# python3 -c FLOOD N: N refused HTTPS requests through the proxy, 16 at a
# time, each to a name of its own (more names than the proxy keeps
# certificates for); prints how many got the page, then one line per
# other outcome.
FLOOD = r'''
import sys, urllib.request, urllib.error
from concurrent.futures import ThreadPoolExecutor
def one(i):
    try:
        urllib.request.urlopen("https://f%d.blocked.test/" % i, timeout=30)
        return "allowed"
    except urllib.error.HTTPError as e:
        return "page" if e.code == 403 and b"retrying will not help" in e.read() else "status %d" % e.code
    except Exception as e:
        return "%s: %s" % (type(e).__name__, e)
with ThreadPoolExecutor(16) as ex:
    got = list(ex.map(one, range(int(sys.argv[1]))))
print("pages=%d" % got.count("page"))
for g in sorted(set(got) - {"page"}):
    print(g)
'''


def test_a_flood_of_refused_https_names_all_get_the_page_and_allowed_names_still_work(world):
    pol = _policy_file(world, {"allow": {"api.public.test": [{"transform": [{"headers": {"X-Test": "1"}}]}]}})
    with sandbox(world, "hflood", "--policy", pol) as name:
        n = 300
        code, out, err = world.ctl("exec", name, "--", "python3", "-c", FLOOD, str(n), timeout=170)
        expect("pages=%d" % n in out, "refused names that got the page:", out[-600:], err[-300:])
        code, out, err = sh(world, name, "curl -sS -m 10 https://api.public.test/after-flood")
        expect_eq(code, 0, "an allowed name after the flood (%s)" % err.strip()[-300:])
        sb = json.loads(world.ctl("--json", "get", name)[1])
        expect(sb.get("denials", 0) >= n, "the denials counter after the flood:", sb.get("denials"))
