"""SandboxClient(url="tcp://...", cert, key, ca) against sandboxd's own TLS
listener (daemon.json "listen"), from the world's internet namespace (as
another machine would). Runs last: it replaces the world's daemon with one
that listens, and puts the default back after."""
import json
import os
import subprocess
import sys
import tempfile

import world as W

SRC = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "src"))
PORT = 7444
URL = "tcp://%s:%d" % (W.HOST_ADDR, PORT)

# Run with Debian's python in the internet namespace: the sync and the
# asyncio API over TLS, and what a tag role may not do.
SCRIPT = r"""
import asyncio, json, sys
sys.path.insert(0, sys.argv[1])
from sandboxd import AsyncSandbox, AsyncSandboxClient, Sandbox, SandboxClient, SandboxError
url, d, name = sys.argv[2], sys.argv[3], sys.argv[4]
out = {}
with SandboxClient(url=url, cert=d + "/client.pem", key=d + "/client-key.pem", ca=d + "/ca.pem") as c:
    out["version"] = c.daemon_info()["version"]
    with Sandbox.create(name=name, network_policy="deny-all", client=c) as sb:
        out["echo"] = sb.run_command("echo", ["over tls"]).stdout()
async def tag_role():
    async with AsyncSandboxClient(url=url, cert=d + "/tag.pem", key=d + "/tag-key.pem", ca=d + "/ca.pem") as c:
        try:
            info = await c.daemon_info()
            out["tag_info"] = {"tenant": (info.get("tenant") or {}).get("name"),
                               "stateDir": "stateDir" in info, "socket": "socket" in info}
        except SandboxError as e:
            out["tag_info"] = e.reason
        sb = await AsyncSandbox.create(name=name + "-t", network_policy="deny-all", client=c)
        out["tag_owner"] = sb.info.get("owner")
        await sb.delete()
asyncio.run(tag_role())
try:
    SandboxClient(url=url, cert=d + "/client.pem", key=d + "/client-key.pem", ca=sys.argv[5]).daemon_info()
    out["other_ca"] = "connected"
except SandboxError as e:
    out["other_ca"] = type(e).__name__
print(json.dumps(out))
"""


def test_sdk_over_the_daemons_tls_listener(world):
    certs = tempfile.mkdtemp(prefix="sdk-certs-", dir=world.tmp)
    os.chmod(certs, 0o755)
    d = os.path.join(certs, "set")
    p = subprocess.run([W.SANDBOXCTL, "certs", "init", d, "--tag", "team=a", "--name", W.HOST_ADDR],
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    other = os.path.join(certs, "other")
    assert subprocess.run([W.SANDBOXCTL, "certs", "init", other, "--name", W.HOST_ADDR],
                          capture_output=True, timeout=60).returncode == 0
    name = world.name("tls")
    world.stop_sandboxd()
    try:
        world.start_sandboxd(config={"listen": [URL], "tlsCert": os.path.join(d, "server.pem"),
                                     "tlsKey": os.path.join(d, "server-key.pem"),
                                     "tlsClientCA": os.path.join(d, "ca.pem")}, tag="tls")
        world.wait_tcp("net", W.HOST_ADDR, PORT)
        r = world.run_in_net(["/usr/bin/python3", "-c", SCRIPT, SRC, URL, d, name,
                              os.path.join(other, "ca.pem")], timeout=120)
        assert r.returncode == 0, r.stderr
        out = json.loads(r.stdout.strip().splitlines()[-1])
        assert out["echo"] == "over tls\n" and out["version"]
        # A tenant's daemon.info is its own view: its tenant, nothing of
        # the host's paths (docs/API.md daemon.info).
        assert out["tag_info"] == {"tenant": "tag:team=a", "stateDir": False, "socket": False}, out["tag_info"]
        # A tag role is the tenant named by it: the owner, set by the
        # daemon (tags are labels the client chooses, docs/SECURITY.md 4.2).
        assert out["tag_owner"] == "tag:team=a"
        assert out["other_ca"] == "DaemonUnreachableError"
    finally:
        world.stop_sandboxd()
        world.start_sandboxd()
