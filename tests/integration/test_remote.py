"""Remote clients (docs/SECURITY.md "Remote clients", sandboxd(8)): a TCP
listener in the world host namespace serving JSON-RPC over TLS 1.3 with
mandatory client certificates, reached from the internet namespace (another
machine). Certificates come from `sandboxctl certs init`; the bad ones
(another CA, expired, not yet valid, spoofed subjects) are made here with
python3-cryptography."""
import datetime
import json
import os
import subprocess
import sys
import tempfile
import time

import world as W
from common import expect, expect_eq, poll

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

PORT = 7443
HOST = W.HOST_ADDR
URL = "tcp://%s:%d" % (HOST, PORT)
CLIENT = os.path.join(W.HERE, "remote_client.py")

_state = {}


def _now():
    return datetime.datetime.now(datetime.timezone.utc)


def _key():
    return ec.generate_private_key(ec.SECP256R1())


def _write_pair(d, stem, cert, key):
    cp, kp = os.path.join(d, stem + ".pem"), os.path.join(d, stem + "-key.pem")
    with open(kp, "wb") as f:
        f.write(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                  serialization.NoEncryption()))
    with open(cp, "wb") as f:
        f.write(cert.public_bytes(serialization.Encoding.PEM))
    return cp, kp


def _load(d, stem):
    with open(os.path.join(d, stem + ".pem"), "rb") as f:
        cert = x509.load_pem_x509_certificate(f.read())
    with open(os.path.join(d, stem + "-key.pem"), "rb") as f:
        key = serialization.load_pem_private_key(f.read(), None)
    return cert, key


def _client_cert(d, stem, subject, issuer_cert, issuer_key, not_before=None, not_after=None,
                 eku=ExtendedKeyUsageOID.CLIENT_AUTH):
    key = _key()
    nb = not_before or _now() - datetime.timedelta(minutes=5)
    na = not_after or _now() + datetime.timedelta(days=30)
    b = (x509.CertificateBuilder().subject_name(subject).issuer_name(issuer_cert.subject)
         .public_key(key.public_key()).serial_number(x509.random_serial_number())
         .not_valid_before(nb).not_valid_after(na)
         .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
         .add_extension(x509.ExtendedKeyUsage([eku]), critical=False)
         .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
         .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(issuer_key.public_key()),
                        critical=False))
    return _write_pair(d, stem, b.sign(issuer_key, hashes.SHA256()), key)


def _name(*pairs):
    return x509.Name([x509.RelativeDistinguishedName([x509.NameAttribute(o, v)]) for o, v in pairs])


def _setup(world):
    """The remote daemon (started once for this file) and its certificates."""
    if _state.get("daemon") and _state["daemon"].alive():
        return _state
    d = tempfile.mkdtemp(prefix="remote-certs-", dir=world.tmp)
    os.chmod(d, 0o755)
    certs = os.path.join(d, "set")
    p = subprocess.run([W.SANDBOXCTL, "certs", "init", certs, "--tag", "team=a", "--tenant", "b", "--name", HOST],
                       capture_output=True, text=True, timeout=60)
    expect(p.returncode == 0, "certs init:", p.stderr)
    for f in os.listdir(certs):
        mode = os.stat(os.path.join(certs, f)).st_mode & 0o777
        expect_eq(mode, 0o600 if f.endswith("-key.pem") else 0o644, "mode of %s" % f)
    # Never replaces what is there (a running daemon's CA stays).
    again = subprocess.run([W.SANDBOXCTL, "certs", "init", certs], capture_output=True, text=True, timeout=60)
    expect(again.returncode != 0 and "not replacing" in again.stderr, "certs init over a set:", again.stderr)
    for f in os.listdir(certs):
        os.chmod(os.path.join(certs, f), 0o644)  # the test's client runs as root anyway
    ca_cert, ca_key = _load(certs, "ca")
    # Another CA, and a client certificate from it with the admin subject.
    other_key = _key()
    other_name = _name((NameOID.COMMON_NAME, "sandboxd CA"))
    other = (x509.CertificateBuilder().subject_name(other_name).issuer_name(other_name)
             .public_key(other_key.public_key()).serial_number(x509.random_serial_number())
             .not_valid_before(_now() - datetime.timedelta(days=1))
             .not_valid_after(_now() + datetime.timedelta(days=30))
             .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
             .add_extension(x509.KeyUsage(False, False, False, False, False, True, True, False, False), critical=True)
             .add_extension(x509.SubjectKeyIdentifier.from_public_key(other_key.public_key()), critical=False)
             .sign(other_key, hashes.SHA256()))
    other_ca_path = os.path.join(d, "other-ca.pem")
    with open(other_ca_path, "wb") as f:
        f.write(other.public_bytes(serialization.Encoding.PEM))
    os.chmod(other_ca_path, 0o644)
    admin = _name((NameOID.ORGANIZATION_NAME, "admin"), (NameOID.COMMON_NAME, "admin"))
    bad = {
        "otherca": _client_cert(d, "otherca", admin, other, other_key),
        "expired": _client_cert(d, "expired", admin, ca_cert, ca_key,
                                _now() - datetime.timedelta(days=10), _now() - datetime.timedelta(days=1)),
        "notyet": _client_cert(d, "notyet", admin, ca_cert, ca_key,
                               _now() + datetime.timedelta(days=1), _now() + datetime.timedelta(days=10)),
        # O=admin and O=tag:team=a in one RDN: which one a reader takes is
        # up to the reader.
        "multirdn": _client_cert(d, "multirdn", x509.Name([
            x509.RelativeDistinguishedName([x509.NameAttribute(NameOID.ORGANIZATION_NAME, "tag:team=a"),
                                            x509.NameAttribute(NameOID.ORGANIZATION_NAME, "admin")]),
            x509.RelativeDistinguishedName([x509.NameAttribute(NameOID.COMMON_NAME, "x")])]),
            ca_cert, ca_key),
        "twoorgs": _client_cert(d, "twoorgs", _name((NameOID.ORGANIZATION_NAME, "tag:team=a"),
                                                    (NameOID.ORGANIZATION_NAME, "admin"),
                                                    (NameOID.COMMON_NAME, "x")), ca_cert, ca_key),
        "nul": _client_cert(d, "nul", _name((NameOID.ORGANIZATION_NAME, "admin\x00tag:team=a"),
                                            (NameOID.COMMON_NAME, "x")), ca_cert, ca_key),
        "norole": _client_cert(d, "norole", _name((NameOID.ORGANIZATION_NAME, "root"),
                                                  (NameOID.COMMON_NAME, "x")), ca_cert, ca_key),
        # A server certificate (serverAuth only) offered as a client's.
        "servereku": _client_cert(d, "servereku", admin, ca_cert, ca_key, eku=ExtendedKeyUsageOID.SERVER_AUTH),
    }
    # A chain of 200 KiB: a leaf with a large (unknown, non-critical)
    # extension; refused by its size before any signature is checked.
    big_key = _key()
    big = (x509.CertificateBuilder().subject_name(admin).issuer_name(ca_cert.subject)
           .public_key(big_key.public_key()).serial_number(x509.random_serial_number())
           .not_valid_before(_now() - datetime.timedelta(minutes=5))
           .not_valid_after(_now() + datetime.timedelta(days=1))
           .add_extension(x509.UnrecognizedExtension(x509.ObjectIdentifier("1.3.6.1.4.1.55555.1"),
                                                     b"\x04\x83\x03\x20\x00" + b"A" * 204800), critical=False)
           .sign(ca_key, hashes.SHA256()))
    bad["huge"] = _write_pair(d, "huge", big, big_key)
    # A tenant besides certs init's tag:team=a and tenant:b clients: the
    # older tag form naming another key.
    bad["projx"] = _client_cert(d, "projx", _name((NameOID.ORGANIZATION_NAME, "tag:project=x"),
                                                  (NameOID.COMMON_NAME, "projx")), ca_cert, ca_key)
    for stem in bad:
        for f in (stem + ".pem", stem + "-key.pem"):
            os.chmod(os.path.join(d, f), 0o644)
    # tenant:b's own localSourceRoots (issue #25); tag:project=x may
    # import but has none.
    broot = os.path.join(world.tmp, world.name("roots-b"))
    os.makedirs(broot, 0o755, exist_ok=True)
    world.stop_sandboxd()  # one daemon per network namespace; the last test restores the default
    daemon = world.start_sandboxd(config={
        "tenants": {"names": {"tag:project=x": {"allowSnapshotImport": True},
                              "b": {"allowSnapshotImport": True, "localSourceRoots": [broot]}}},
        "listen": [URL],
        "tlsCert": os.path.join(certs, "server.pem"),
        "tlsKey": os.path.join(certs, "server-key.pem"),
        "tlsClientCA": os.path.join(certs, "ca.pem"),
        "tlsHandshakeTimeoutMs": 1500,
        "maxTlsHandshakes": 8,
        "maxConnectionsPerAddress": 12,
    }, tag="remote")
    world.wait_tcp("net", HOST, PORT)
    _state.update(daemon=daemon, certs=certs, bad=bad, ca=os.path.join(certs, "ca.pem"), other_ca=other_ca_path)
    return _state


def _pair(st, who):
    if who == "admin":
        return os.path.join(st["certs"], "client.pem"), os.path.join(st["certs"], "client-key.pem")
    if who == "tag":
        return os.path.join(st["certs"], "tag.pem"), os.path.join(st["certs"], "tag-key.pem")
    if who == "tenb":
        return os.path.join(st["certs"], "tenant.pem"), os.path.join(st["certs"], "tenant-key.pem")
    return st["bad"][who]


def _raw(world, st, mode, *args, who=None, ca=None, timeout=60):
    argv = [sys.executable, CLIENT, mode, HOST, str(PORT), "--ca", ca or st["ca"]]
    if who:
        cert, key = _pair(st, who)
        argv += ["--cert", cert, "--key", key]
    p = world.run_in_net(argv + list(args), timeout=timeout)
    expect(p.returncode == 0 and p.stdout.strip(), "remote_client %s:" % mode, p.stdout, p.stderr)
    return json.loads(p.stdout.strip().splitlines()[-1])


def _call(world, st, who, *requests, **kw):
    return _raw(world, st, "tls", *[json.dumps(r) for r in requests], who=who, **kw)


def _ctl(world, st, who, *args, env=None):
    cert, key = _pair(st, who)
    argv = [W.SANDBOXCTL, "--host", URL, "--cert", cert, "--key", key, "--ca", st["ca"]] + list(args)
    if env is not None:
        argv = ["env", "-u", "SANDBOXD_SOCKET"] + ["%s=%s" % kv for kv in env.items()] + \
               [W.SANDBOXCTL] + list(args)
    p = world.run_in_net(argv, timeout=120)
    return p.returncode, p.stdout, p.stderr


def _log_has(st, text, secs=10):
    def has():
        return text in open(st["daemon"].log_path, errors="replace").read()
    try:
        return poll(has, secs, "daemon log line %r" % text)
    except W.WorldError:
        lines = [l for l in open(st["daemon"].log_path, errors="replace").read().splitlines()
                 if "remote:" in l and "not finished" not in l]
        raise AssertionError("no log line %r; remote lines: %s" % (text, " || ".join(lines[-8:])))


def _local(st, method, params):
    msg = st["daemon"].rpc(method, params)
    expect("result" in msg, "%s on the Unix socket:" % method, json.dumps(msg))
    return msg["result"]


def test_mutual_tls_admin_cli_and_raw_client(world):
    st = _setup(world)
    code, out, err = _ctl(world, st, "admin", "--json", "daemon", "info")
    expect_eq(code, 0, "sandboxctl --host daemon info exit; stderr: %s" % err)
    expect("version" in json.loads(out), "daemon.info over TLS:", out)
    # The same through the environment.
    cert, key = _pair(st, "admin")
    code, out, err = _ctl(world, st, "admin", "--json", "ls",
                          env={"SANDBOXD_HOST": URL, "SANDBOXD_CERT": cert, "SANDBOXD_KEY": key,
                               "SANDBOXD_CA": st["ca"]})
    expect_eq(code, 0, "sandboxctl with SANDBOXD_HOST exit; stderr: %s" % err)
    # exec (streamed output, exit code) and cp -r (chunked: no fds over TCP).
    name = world.name("rcli")
    _local(st, "sandbox.create", {"name": name})
    try:
        code, out, err = _ctl(world, st, "admin", "exec", name, "--", "sh", "-c", "echo hi; exit 3")
        expect_eq((code, out), (3, "hi\n"), "exec over TLS (code, stdout); stderr: %s" % err)
        src = os.path.join(world.tmp, "rtree")
        os.makedirs(os.path.join(src, "d"), exist_ok=True)
        with open(os.path.join(src, "d", "f"), "w") as f:
            f.write("tree\n")
        code, _o, err = _ctl(world, st, "admin", "cp", "-r", src, name + ":/workspace/")
        expect_eq(code, 0, "cp -r to the sandbox over TLS; stderr: %s" % err)
        dst = os.path.join(world.tmp, "rtree-back")
        code, _o, err = _ctl(world, st, "admin", "cp", "-r", name + ":/workspace/rtree", dst)
        expect_eq(code, 0, "cp -r from the sandbox over TLS; stderr: %s" % err)
        expect_eq(open(os.path.join(dst, "d", "f")).read(), "tree\n", "the tree came back")
    finally:
        st["daemon"].rpc("sandbox.delete", {"name": name})
    r = _call(world, st, "admin", {"method": "daemon.info"}, {"method": "sandbox.list"})
    expect(r["ok"], "raw TLS 1.3 client:", r)
    expect("result" in r["answers"][0] and "sandboxes" in r["answers"][1]["result"], "answers:", r)
    _log_has(st, 'connected as "CN=admin,O=admin" (role admin)')


def test_refused_certificates_and_protocols_are_logged(world):
    st = _setup(world)
    cases = [
        (None, "peer did not return a certificate"),
        ("otherca", "unable to get local issuer certificate"),
        ("expired", "certificate has expired"),
        ("notyet", "certificate is not yet valid"),
        ("servereku", "unsuitable certificate purpose"),
    ]
    for who, reason in cases:
        r = _call(world, st, who, {"method": "daemon.info"})
        expect(not r["ok"], "%s: must be refused, got" % who, r)
        _log_has(st, reason)
    for who, reason in [("huge", "excessive message size"), ("multirdn", "multi-valued RDN"), ("twoorgs", "more than one O"),
                        ("nul", "NUL byte"), ("norole", "names no role")]:
        r = _call(world, st, who, {"method": "daemon.info"})
        expect(not r["ok"], "%s: must be refused before any method runs, got" % who, r)
        _log_has(st, reason)
    # TLS 1.2 offered: no shared protocol.
    r = _raw(world, st, "tls", json.dumps({"method": "daemon.info"}), "--max-tls", "1.2", who="admin")
    expect(not r["ok"] and r["stage"] == "handshake", "TLS 1.2 must fail the handshake:", r)
    _log_has(st, "unsupported protocol")
    # Plaintext JSON-RPC to the TLS port: no answer, closed, logged.
    r = _raw(world, st, "plain")
    expect(r["closed"] and '"result"' not in r["data"], "plaintext must get no answer:", r)
    _log_has(st, "TLS handshake failed")
    # The CLI verifies the daemon: a CA that did not sign its certificate
    # (a man in the middle) ends the handshake before anything is sent.
    cert, key = _pair(st, "admin")
    p = world.run_in_net([W.SANDBOXCTL, "--host", URL, "--cert", cert, "--key", key, "--ca", st["other_ca"], "ls"])
    expect(p.returncode == 69 and "certificate verify failed" in p.stderr,
           "sandboxctl with the wrong --ca:", p.returncode, p.stderr)
    # The CLI reports a refusal as unreachable, naming TLS.
    code, _o, err = _ctl(world, st, "expired", "ls")
    expect(code != 0 and "sandboxd" in err, "sandboxctl with an expired certificate:", code, err)


def test_a_stalled_handshake_is_cut_at_its_deadline_and_the_loop_keeps_serving(world):
    st = _setup(world)
    t0 = time.monotonic()
    r = _raw(world, st, "stall", "--bytes", "5", "--timeout", "20")
    expect(r["closed_after_s"] < 10, "a stalled handshake must be closed near tlsHandshakeTimeoutMs:", r)
    _log_has(st, "TLS handshake not finished within 1500 ms")
    # A flood of silent connections: over maxTlsHandshakes (8) are closed at
    # once; the Unix socket and a TLS admin keep being served meanwhile.
    p = subprocess.Popen(["ip", "netns", "exec", world.net_ns, sys.executable, CLIENT, "flood", HOST, str(PORT),
                          "--count", "30"], stdout=subprocess.PIPE, text=True)
    try:
        _local(st, "daemon.info", {})
        out = json.loads(p.communicate(timeout=60)[0].strip())
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    expect(out["closed_at_once"] >= 20, "connections over maxTlsHandshakes closed at once:", out)
    _log_has(st, "maxTlsHandshakes")
    r = _call(world, st, "admin", {"method": "daemon.info"})
    expect(r["ok"], "served after the flood:", r, time.monotonic() - t0)


def test_half_open_connections_are_probed(world):
    """A peer that vanishes without a FIN or RST must not hold its slot for
    the kernel's default of hours: accepted sockets carry keep-alive (60 s
    idle, 6 probes 10 s apart) and TCP_USER_TIMEOUT, which ss(8) shows."""
    st = _setup(world)
    p = subprocess.Popen(["ip", "netns", "exec", world.net_ns, sys.executable, CLIENT, "stall", HOST, str(PORT),
                          "--ca", st["ca"], "--timeout", "20"], stdout=subprocess.PIPE, text=True)
    try:
        def keepalive():
            out = world.run_in_host(["ss", "-tnoH", "state", "established", "( sport = :%d )" % PORT]).stdout
            return "keepalive" in out and out
        out = poll(keepalive, 10, "a keep-alive timer on the daemon's side of the connection")
        expect("keepalive" in out, "ss:", out)
    finally:
        p.communicate(timeout=30)


def test_connections_per_address_are_capped(world):
    st = _setup(world)
    r = _raw(world, st, "many", "--count", "12", who="admin")
    expect(r["served"] == 12 and r["extra_refused"], "12 served, the 13th from the address refused:", r)
    _log_has(st, "maxConnectionsPerAddress")
    # The daemon sees the closes asynchronously: poll for the slot.
    poll(lambda: _call(world, st, "admin", {"method": "daemon.info"})["ok"], 20,
         "a connection served again once the 12 closed")


def _answer(r, what):
    expect(r["ok"], "%s: client I/O:" % what, r)
    return r["answers"][0]


def _refused(a, what, reason="permission_denied"):
    err = a.get("error") or {}
    expect_eq((err.get("data") or {}).get("reason"), reason, "%s: %s" % (what, json.dumps(a)[:400]))
    return err.get("message", "")


def test_a_tenant_sees_and_touches_only_what_it_owns(world):
    """Ownership is what the daemon recorded at creation, never a tag: a
    sandbox the admin made carrying tag team=a is not tag:team=a's, and the
    other tenants' sandboxes, commands, snapshots and events stay theirs."""
    st = _setup(world)
    b_name = world.name("rb")
    _local(st, "sandbox.create", {"name": b_name, "tags": {"team": "a"}})
    mine = []
    snaps = []
    try:
        a = _answer(_call(world, st, "tag", {"method": "sandbox.create", "params": {"tags": {"team": "a"}}}), "create")
        expect("result" in a, "a tenant creates:", a)
        a_name = a["result"]["name"]
        mine.append(a_name)
        expect_eq(a["result"]["owner"], "tag:team=a", "the owner is the client's identity")
        expect_eq(a["result"]["tags"], {"team": "a"}, "tags are labels, kept as given")
        b_cmd = _local(st, "command.run", {"sandbox": b_name, "cmd": "true"})["cmdId"]
        b_snap = _local(st, "sandbox.snapshot", {"name": b_name})["id"]
        snaps.append(b_snap)
        for req in ({"method": "sandbox.get", "params": {"name": b_name}},
                    {"method": "command.run", "params": {"sandbox": b_name, "cmd": "true"}},
                    {"method": "sandbox.delete", "params": {"name": b_name}},
                    {"method": "sandbox.update", "params": {"name": b_name, "tags": {"team": "b"}}},
                    {"method": "fs.list", "params": {"sandbox": b_name, "path": "/"}},
                    {"method": "command.logs", "params": {"cmdId": b_cmd}},
                    {"method": "events.subscribe", "params": {"sandbox": b_name}},
                    {"method": "runtime.import", "params": {"name": "x", "path": "/"}},
                    {"method": "runtime.delete", "params": {"name": "host"}},
                    {"method": "snapshot.export", "params": {"id": "snap-x", "path": "/tmp/x"}},
                    {"method": "snapshot.get", "params": {"id": b_snap}},
                    {"method": "snapshot.delete", "params": {"id": b_snap}},
                    {"method": "sandbox.create", "params": {"source": {"type": "snapshot", "snapshotId": b_snap}}},
                    {"method": "sandbox.create", "params": {"source": {"type": "tarball", "path": world.tmp}}},
                    {"method": "sandbox.fork", "params": {"sourceSandbox": b_name}},
                    {"method": "policy.check", "params": {"sandbox": b_name, "host": "example.com", "port": 443}}):
            _refused(_answer(_call(world, st, "tag", req), req["method"]), "%s as tag:team=a" % req["method"])
        # daemon.info: the tenant's own view, nothing of the other's.
        info = _answer(_call(world, st, "tag", {"method": "daemon.info"}), "daemon.info")["result"]
        expect(info["tenant"]["name"] == "tag:team=a" and "stateDir" not in info and b_name not in json.dumps(info),
               "a remote tenant's daemon.info is its own:", json.dumps(info)[:400])
        _log_has(st, "refused sandbox.get from ")
        _log_has(st, "tenant tag:team=a): name: no sandbox '%s' of this tenant" % b_name)
        a = _answer(_call(world, st, "tag", {"method": "sandbox.getOrCreate", "params": {"name": b_name}}), "goc")
        msg = _refused(a, "getOrCreate of another's name", "already_exists")
        expect("admin" not in msg and "tenant" not in msg, "the refusal does not say whose:", msg)
        # Its own sandbox: get, exec, list shows only it.
        r = _call(world, st, "tag", {"method": "sandbox.get", "params": {"name": a_name}},
                  {"method": "command.run", "params": {"sandbox": a_name, "cmd": "echo", "args": ["hi"]}},
                  {"method": "sandbox.list", "params": {}},
                  {"method": "sandbox.list", "params": {"tags": {"team": "a"}}})
        expect(r["ok"] and all("result" in m for m in r["answers"]), "own sandbox as tag:team=a:", r)
        for i in (2, 3):
            names = [x["name"] for x in r["answers"][i]["result"]["sandboxes"]]
            expect(a_name in names and b_name not in names, "list shows only its own:", names)
        # Snapshots: its own is listed, the admin's is not.
        r = _call(world, st, "tag", {"method": "sandbox.snapshot", "params": {"name": a_name}},
                  {"method": "snapshot.list", "params": {}})
        expect(r["ok"] and "result" in r["answers"][0], "snapshot of its own sandbox:", r)
        snaps.append(r["answers"][0]["result"]["id"])
        ids = [x["id"] for x in r["answers"][1]["result"]["snapshots"]]
        expect(r["answers"][0]["result"]["id"] in ids and b_snap not in ids, "snapshot.list of its own only:", ids)
        # Events: only its own sandboxes'.
        ev = subprocess.Popen(["ip", "netns", "exec", world.net_ns, sys.executable, CLIENT, "events", HOST, str(PORT),
                               "--ca", st["ca"], "--cert", _pair(st, "tag")[0], "--key", _pair(st, "tag")[1],
                               "--wait-sandbox", a_name, "--timeout", "60"], stdout=subprocess.PIPE, text=True)
        try:
            expect(json.loads(ev.stdout.readline()).get("subscribed"), "subscribed")
            _local(st, "sandbox.stop", {"name": b_name})
            _local(st, "sandbox.stop", {"name": a_name})
            out = json.loads(ev.communicate(timeout=90)[0].strip().splitlines()[-1])
        finally:
            if ev.poll() is None:
                ev.kill()
                ev.wait()
        seen = {e.get("sandbox") for e in out.get("events", [])}
        expect(a_name in seen and b_name not in seen and None not in seen, "events of its own only:", out)
    finally:
        for n in [b_name] + mine:
            st["daemon"].rpc("sandbox.delete", {"name": n})
        for i in snaps:
            st["daemon"].rpc("snapshot.delete", {"id": i})


def test_tags_cannot_plant_a_sandbox_in_another_tenant(world):
    """The findings of issue #25: tag:team=a made `shared-ci` carrying
    project=x, and the tenant tag:project=x listed it, got it from
    getOrCreate, wrote secrets into it that team=a read back; `update --tag
    project=x` moved a sandbox (and its snapshots) across. Now tags are
    labels: in every form (create, update, fork, getOrCreate, snapshot) the
    sandbox stays team=a's and project=x neither sees nor touches it."""
    st = _setup(world)
    shared, forked = world.name("shared-ci"), world.name("fork-ci")
    made, snaps = [shared, forked], []
    try:
        r = _call(world, st, "tag",
                  {"method": "sandbox.create", "params": {"name": shared, "tags": {"project": "x"}}},
                  {"method": "sandbox.update", "params": {"name": shared, "tags": {"project": "x", "team": "b"}}},
                  {"method": "sandbox.fork", "params": {"sourceSandbox": shared, "name": forked,
                                                        "overrides": {"tags": {"project": "x"}}}},
                  {"method": "sandbox.snapshot", "params": {"name": shared}})
        expect(r["ok"] and all("result" in m for m in r["answers"]), "team=a's own creates:", r)
        for m in r["answers"][:3]:
            expect_eq(m["result"]["owner"], "tag:team=a", "still team=a's after %s" % json.dumps(m)[:200])
        snap = r["answers"][3]["result"]["id"]
        snaps.append(snap)
        expect_eq(r["answers"][3]["result"]["owner"], "tag:team=a", "the snapshot is team=a's")
        for who in ("projx", "tenb"):
            r = _call(world, st, who, {"method": "sandbox.list", "params": {}},
                      {"method": "sandbox.list", "params": {"tags": {"project": "x"}}},
                      {"method": "snapshot.list", "params": {}})
            expect(r["ok"] and all("result" in m for m in r["answers"]), "%s lists:" % who, r)
            for m in r["answers"][:2]:
                names = [x["name"] for x in m["result"]["sandboxes"]]
                expect(shared not in names and forked not in names, "%s does not list team=a's:" % who, names)
            ids = [x["id"] for x in r["answers"][2]["result"]["snapshots"]]
            expect(snap not in ids, "%s does not list team=a's snapshot:" % who, ids)
            a = _answer(_call(world, st, who, {"method": "sandbox.getOrCreate", "params": {"name": shared}}), who)
            _refused(a, "getOrCreate of team=a's name as %s" % who, "already_exists")
            for req in ({"method": "fs.write", "params": {"sandbox": shared, "files": [
                            {"path": "/workspace/secret", "content": "c2VjcmV0"}]}},
                        {"method": "sandbox.update", "params": {"name": forked, "tags": {}}},
                        {"method": "sandbox.get", "params": {"name": forked}},
                        {"method": "sandbox.delete", "params": {"name": shared}},
                        {"method": "snapshot.get", "params": {"id": snap}},
                        {"method": "sandbox.create", "params": {"source": {"type": "snapshot", "snapshotId": snap}}}):
                _refused(_answer(_call(world, st, who, req), req["method"]), "%s as %s" % (req["method"], who))
        # Tags on import: a tenant may not import; a file whose config
        # carries project=x, imported by the admin with its config, is the
        # admin's, not project=x's (the file names no owner).
        path = os.path.join(world.tmp, "plant-%s.tar.zst" % snap)
        a = _answer(_call(world, st, "tag", {"method": "snapshot.import", "params": {"path": path, "config": True}}),
                    "import")
        _refused(a, "snapshot.import as a tenant")
        _local(st, "snapshot.export", {"id": snap, "path": path})
        imported = _local(st, "snapshot.import", {"path": path, "config": True})
        snaps.append(imported["id"])
        expect_eq((imported["config"].get("tags") or {}).get("project"), "x", "the file's tags are imported as labels")
        expect(imported.get("owner") is None, "an import is its importer's (admin), whatever its tags:", imported)
        r = _call(world, st, "projx", {"method": "snapshot.list", "params": {}},
                  {"method": "sandbox.create", "params": {"source": {"type": "snapshot",
                                                                     "snapshotId": imported["id"]}}})
        expect(r["ok"] and imported["id"] not in [x["id"] for x in r["answers"][0]["result"]["snapshots"]],
               "project=x does not list the imported snapshot:", r)
        _refused(r["answers"][1], "project=x creates from the imported snapshot")
        # A tenant:NAME creates and owns under its own name.
        a = _answer(_call(world, st, "tenb", {"method": "sandbox.create", "params": {"tags": {"team": "a"}}}), "tenb")
        expect("result" in a, "tenant:b creates:", a)
        made.append(a["result"]["name"])
        expect_eq(a["result"]["owner"], "b", "tenant:b's owner")
        a = _answer(_call(world, st, "tag", {"method": "sandbox.get", "params": {"name": a["result"]["name"]}}), "get")
        _refused(a, "team=a cannot get tenant b's sandbox carrying team=a")
        # The admin sees all, owners included.
        full = {x["name"]: x["owner"] for x in _local(st, "sandbox.list", {})["sandboxes"]}
        expect_eq(full.get(shared), "tag:team=a", "the admin sees the owner")
    finally:
        for n in made:
            st["daemon"].rpc("sandbox.delete", {"name": n})
        for i in snaps:
            st["daemon"].rpc("snapshot.delete", {"id": i})


def test_a_remote_tenant_cannot_switch_the_user_namespace_off(world):
    """create --no-userns made root inside host uid 0 for a remote tenant,
    and nothing let the operator forbid it: now it is refused unless
    daemon.json tenants allows it (never by default), naming the limit."""
    st = _setup(world)
    r = _call(world, st, "tag", {"method": "sandbox.create", "params": {"userns": False}})
    a = _answer(r, "create userns false")
    msg = _refused(a, "userns: false for a tenant")
    expect("allowNoUserns" in msg and "tag:team=a" in msg, "the refusal names the limit and the tenant:", msg)


def test_a_remote_tenants_host_paths_lie_only_beneath_its_own_roots(world):
    """Issue #25: TLS tenants shared daemon.json localSourceRoots with
    root's access, so one imported another's export by name. Now a remote
    tenant without tenants.names.NAME.localSourceRoots has no host paths
    (refused naming that key), and one with them is refused a path under
    the daemon-wide roots as outside its own, whether a file is there or
    not."""
    st = _setup(world)
    there = os.path.join(world.tmp, world.name("shared") + ".tar")
    with open(there, "wb") as f:
        f.write(b"\0" * 1024)
    os.chmod(there, 0o600)
    try:
        a = _answer(_call(world, st, "projx", {"method": "snapshot.import", "params": {"path": there}}),
                    "import by a tenant without roots")
        msg = _refused(a, "snapshot.import by tag:project=x")
        expect("tenants.names.tag:project=x.localSourceRoots" in msg, "names the key to set:", msg)
        missing = os.path.join(world.tmp, world.name("none") + ".tar")
        r = _call(world, st, "tenb", {"method": "snapshot.import", "params": {"path": there}},
                  {"method": "snapshot.import", "params": {"path": missing}})
        expect(r["ok"], "client I/O:", r)
        msgs = [(x.get("error") or {}).get("message", "") for x in r["answers"]]
        expect("not under a directory listed in localSourceRoots" in msgs[0], "outside tenant:b's roots:", msgs[0])
        expect_eq(msgs[0].replace(there, "X"), msgs[1].replace(missing, "X"), "a file there answers as one that is not")
    finally:
        os.unlink(there)


def _cpu_s(pid):
    with open("/proc/%d/stat" % pid) as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def test_half_a_record_neither_spins_the_loop_nor_loses_the_request(world):
    """A peer that sends half a TLS record and pauses: the daemon waits in
    epoll (it spun on SSL_has_pending before), then answers once the rest
    comes."""
    st = _setup(world)
    cert, key = _pair(st, "admin")
    p = subprocess.Popen(["ip", "netns", "exec", world.net_ns, sys.executable, CLIENT, "halfrecord", HOST, str(PORT),
                          "--ca", st["ca"], "--cert", cert, "--key", key, "--hold", "3"],
                         stdout=subprocess.PIPE, text=True)
    try:
        expect(json.loads(p.stdout.readline()).get("ready"), "half a record sent")
        before = _cpu_s(st["daemon"].pid)
        out = json.loads(p.communicate(timeout=60)[0].strip().splitlines()[-1])
        used = _cpu_s(st["daemon"].pid) - before
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    expect("result" in out["answer"], "the request completed:", out)
    expect(used < 1.0, "daemon CPU while the record was half sent: %.2f s in 3 s" % used)


def test_large_requests_and_answers_cross_tls_intact(world):
    """fs.write of 3 MiB and fs.read of it back on one TLS connection: the
    daemon's non-blocking reads and writes across many records (partial
    writes retried with the same length, records OpenSSL already holds)."""
    st = _setup(world)
    name = world.name("rbig")
    _local(st, "sandbox.create", {"name": name})
    try:
        cert, key = _pair(st, "admin")
        r = _raw(world, st, "bigfile", "--count", str(3 << 20), "--wait-sandbox", name, who="admin", timeout=120)
        expect(r["write"] and r["read"] and r["same"], "3 MiB round trip over TLS:", r)
    finally:
        st["daemon"].rpc("sandbox.delete", {"name": name})


def test_the_admin_subject_from_another_ca_is_refused(world):
    st = _setup(world)
    r = _call(world, st, "otherca", {"method": "daemon.info"})
    expect(not r["ok"], "another CA's admin certificate must be refused:", r)
    _log_has(st, 'client certificate "CN=admin,O=admin" (depth 0): unable to get local issuer certificate')


def test_a_bad_tls_file_stops_the_start_naming_the_key(world):
    """Last of the file: puts the default daemon back."""
    try:
        st = _setup(world)
        certs = st["certs"]
        world.stop_sandboxd()
        cfg = {"listen": [URL], "tlsCert": os.path.join(certs, "server.pem"),
               "tlsKey": os.path.join(certs, "client-key.pem"),  # not the certificate's key
               "tlsClientCA": os.path.join(certs, "ca.pem")}
        d = world.add_sandboxd(config=cfg, tag="badtls")
        try:
            d.start()
            raise AssertionError("sandboxd started with a key that does not match tlsCert")
        except W.WorldError as e:
            expect("tlsKey" in str(e), "the start error names tlsKey:", str(e)[-600:])
    finally:
        _state.clear()
        world.stop_sandboxd()
        world.start_sandboxd()


_SRC_SERVER = r"""
import http.server, sys
addr, port, body, location = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
data = open(body, "rb").read() if body != "-" else b""
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        if location != "-" and self.path.startswith("/r"):
            self.send_response(302)
            self.send_header("Location", location)
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        self.send_response(200)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)
    def log_message(self, *a):
        pass
s = http.server.HTTPServer((addr, port), H)
print("ready", flush=True)
s.serve_forever()
"""


def _source_servers(world):
    """A host-only service on 127.0.0.1:18081 of the daemon's namespace
    serving a tarball, and a server of the fake internet on
    HTTP_ADDR:18082 that serves the same tarball at /ok.tgz and redirects
    /r* to the host-only one. Started once per world."""
    if _state.get("src_servers") == world.id:
        return
    import tarfile
    d = tempfile.mkdtemp(prefix="remote-src-", dir=world.tmp)
    secret = os.path.join(d, "secret.txt")
    with open(secret, "w") as f:
        f.write("host-only-secret\n")
    tgz = os.path.join(d, "x.tgz")
    with tarfile.open(tgz, "w:gz") as t:
        t.add(secret, arcname="secret.txt")
    script = os.path.join(d, "srv.py")
    with open(script, "w") as f:
        f.write(_SRC_SERVER)
    world._spawn("src-loopback", "host", [sys.executable, script, "127.0.0.1", "18081", tgz, "-"], ready=True)
    world._spawn("src-redirector", "net", [sys.executable, script, W.HTTP_ADDR, "18082", tgz,
                                            "http://127.0.0.1:18081/x.tgz"], ready=True)
    _state["src_servers"] = world.id


def test_a_tag_role_cannot_fetch_sources_from_the_daemon_host_or_private_addresses(world):
    st = _setup(world)
    _source_servers(world)
    public = "http://%s:18082" % W.HTTP_ADDR
    made = []
    try:
        # A public source works for the tag role: the first hop is allowed.
        r = _call(world, st, "tag", {"method": "sandbox.create",
                                     "params": {"source": {"type": "tarball", "url": public + "/ok.tgz"}}})
        expect(r["ok"] and "result" in r["answers"][0], "a public tarball for a tag role:", r)
        made.append(r["answers"][0]["result"]["name"])
        texts = {}
        for key, src in (
                ("loopback-open", {"type": "tarball", "url": "http://127.0.0.1:18081/x.tgz"}),
                ("loopback-closed", {"type": "tarball", "url": "http://127.0.0.1:18089/x.tgz"}),
                ("redirect", {"type": "tarball", "url": public + "/r.tgz"}),
                ("host-addr", {"type": "tarball", "url": "http://%s:18089/x.tgz" % W.HOST_ADDR}),
                ("host-addr-open", {"type": "tarball", "url": "http://%s:%d/x.tgz" % (W.HOST_ADDR, PORT)}),
                ("private", {"type": "tarball", "url": "http://10.0.0.1/x.tgz"}),
                ("mapped6", {"type": "tarball", "url": "http://[::ffff:127.0.0.1]:18081/x.tgz"}),
                ("git-loopback", {"type": "git", "url": "http://127.0.0.1:18081/x.git"}),
                ("git-redirect", {"type": "git", "url": public + "/r.git"})):
            r = _call(world, st, "tag", {"method": "sandbox.create", "params": {"source": src}})
            expect(r["ok"], "tag client I/O:", r)
            a = r["answers"][0]
            if "result" in a:
                made.append(a["result"]["name"])
            err = a.get("error") or {}
            expect_eq((err.get("data") or {}).get("reason"), "source_failed", "%s source for a tag role: %s" % (key, a))
            texts[key] = err.get("message", "")
        # Never the host-only content, and one text whatever was behind
        # the address (an open or a closed port, a redirect).
        for key, text in texts.items():
            expect("host-only-secret" not in text, key, text)
        for key in ("loopback-open", "loopback-closed", "redirect", "host-addr", "host-addr-open", "private",
                    "mapped6", "git-loopback"):
            expect("remote clients fetch sources from public addresses only" in texts[key],
                   "%s: the uniform refusal:" % key, texts[key])
        expect_eq(texts["loopback-open"], texts["loopback-closed"], "open and closed loopback ports read the same")
        expect_eq(texts["host-addr"].replace("18089", "P"), texts["host-addr-open"].replace(str(PORT), "P"),
                  "open and closed host ports read the same")
        expect("error: 302" in texts["git-redirect"] or "public addresses only" in texts["git-redirect"],
               "git does not follow the redirect:", texts["git-redirect"])
        # A local client keeps the host's own network (its operator's choice).
        msg = st["daemon"].rpc("sandbox.create", {"source": {"type": "tarball", "url": "http://127.0.0.1:18081/x.tgz"}})
        expect("result" in msg, "a loopback source on the Unix socket:", msg)
        made.append(msg["result"]["name"])
    finally:
        for n in made:
            st["daemon"].rpc("sandbox.delete", {"name": n})


def test_one_address_cannot_take_every_tls_handshake(world):
    """A flood of silent connections from one address, kept up for the
    whole test, takes at most its share (a quarter) of maxTlsHandshakes
    (8): a client from another address completes its handshake meanwhile."""
    st = _setup(world)
    p = subprocess.Popen(["ip", "netns", "exec", world.net_ns, sys.executable, CLIENT, "hold", HOST, str(PORT),
                          "--count", "10", "--hold", "30"], stdout=subprocess.PIPE, text=True)
    try:
        expect(json.loads(p.stdout.readline()).get("holding", 0) >= 8, "the flood is open")
        for _ in range(5):
            r = _raw(world, st, "tls", json.dumps({"method": "daemon.info"}), "--source", W.SPARE_ADDR,
                     who="admin")
            expect(r["ok"] and "result" in r["answers"][0], "another address during the flood:", r)
        _log_has(st, "too many TLS handshakes in progress from this address")
    finally:
        if p.poll() is None:
            p.kill()
        p.wait()


def test_remote_unfinished_lines_neither_starve_local_clients_nor_stay(world):
    """24 TLS connections each holding 11 MiB of a line that never ends
    (more than the daemon's 256 MiB for unfinished lines): a local client's
    large fs.write on the Unix socket is still read, since TLS connections
    draw on a pool of their own; and a line that makes no progress for the
    stall timeout (30 s) closes its connection."""
    import base64
    st = _setup(world)
    name = world.name("rbudget")
    _local(st, "sandbox.create", {"name": name, "networkPolicy": "deny-all"})
    holders = []
    try:
        cert, key = _pair(st, "tag")
        for src in (None, W.SPARE_ADDR):
            argv = ["ip", "netns", "exec", world.net_ns, sys.executable, CLIENT, "partial", HOST, str(PORT),
                    "--ca", st["ca"], "--cert", cert, "--key", key, "--count", "12",
                    "--bytes", str(11 << 20), "--hold", "75", "--timeout", "60"]
            if src:
                argv += ["--source", src]
            holders.append(subprocess.Popen(argv, stdout=subprocess.PIPE, text=True))
        sent = [json.loads(h.stdout.readline()) for h in holders]
        expect(sum(x["sent"] for x in sent) >= 8, "unfinished lines held:", sent)
        content = base64.b64encode(os.urandom(9 << 20)).decode()
        msg = st["daemon"].rpc("fs.write", {"sandbox": name, "files": [{"path": "big.bin", "content": content}]},
                               timeout=120)
        expect("result" in msg, "a local 12 MiB fs.write while remote lines fill their pool:",
               json.dumps(msg)[:300])
        outs = [json.loads(h.communicate(timeout=120)[0].strip().splitlines()[-1]) for h in holders]
        for x, o in zip(sent, outs):
            expect_eq(o["closed"], x["sent"], "every unfinished line's connection closed: %s" % o)
            expect(o["last_closed_s"] is not None and o["last_closed_s"] < 60, "closed near the stall timeout:", o)
        _log_has(st, "sent no byte of its unfinished request line")
    finally:
        for h in holders:
            if h.poll() is None:
                h.kill()
            h.wait()
        st["daemon"].rpc("sandbox.delete", {"name": name})


def test_runtime_list_shows_a_tenant_only_its_own_sandboxes(world):
    st = _setup(world)
    b_name = world.name("rlb")
    _local(st, "sandbox.create", {"name": b_name, "tags": {"team": "a"}})
    a_name = None
    try:
        a = _answer(_call(world, st, "tag", {"method": "sandbox.create", "params": {}}), "create")
        a_name = a["result"]["name"]
        r = _call(world, st, "tag", {"method": "runtime.list", "params": {}})
        expect(r["ok"] and "result" in r["answers"][0], "runtime.list as tag:team=a:", r)
        host = [x for x in r["answers"][0]["result"]["runtimes"] if x["name"] == "host"][0]
        expect(a_name in host["sandboxes"], "its own sandbox is listed:", host)
        expect(b_name not in host["sandboxes"], "another's sandbox (carrying its tag) is not listed:", host)
        full = [x for x in _local(st, "runtime.list", {})["runtimes"] if x["name"] == "host"][0]
        expect(b_name in full["sandboxes"], "the Unix socket still sees every sandbox:", full)
    finally:
        st["daemon"].rpc("sandbox.delete", {"name": b_name})
        if a_name:
            st["daemon"].rpc("sandbox.delete", {"name": a_name})


def test_event_subscriptions_are_capped_per_connection_and_reserved_for_local_clients(world):
    """One TLS connection holds at most 16 subscriptions; TLS connections
    together at most 192 of the daemon's 256, so a local client can still
    subscribe while remote ones hold all theirs."""
    st = _setup(world)
    cert, key = _pair(st, "tag")
    base = ["ip", "netns", "exec", world.net_ns, sys.executable, CLIENT, "subs", HOST, str(PORT),
            "--ca", st["ca"], "--cert", cert, "--key", key, "--hold", "30"]
    procs = []
    try:
        one = subprocess.Popen(base + ["--count", "1", "--per", "20"], stdout=subprocess.PIPE, text=True)
        procs.append(one)
        r = json.loads(one.stdout.readline())
        expect(r["ok"] == 16 and r["refused"] == 4, "16 subscriptions on one connection, then limit_exceeded:", r)
        expect("per connection" in r["messages"][0], "the refusal names the limit:", r)
        one.kill()
        one.wait()
        # Its subscriptions go with its connection: wait until the daemon
        # holds no TLS connection any more.
        poll(lambda: not world.run_in_host(["ss", "-tnH", "state", "established",
                                            "( sport = :%d )" % PORT]).stdout.strip(), 20,
             "the daemon closed the first subscriber's connection")
        poll(lambda: "result" in st["daemon"].rpc("events.subscribe", {}), 10, "a local subscription")
        # 11 more connections from this address and one from another: 192
        # remote subscriptions, then the next is refused; a local one is not.
        many = subprocess.Popen(base + ["--count", "11", "--per", "16"], stdout=subprocess.PIPE, text=True)
        procs.append(many)
        other = subprocess.Popen(base + ["--count", "1", "--per", "17", "--source", W.SPARE_ADDR],
                                 stdout=subprocess.PIPE, text=True)
        procs.append(other)
        r1, r2 = json.loads(many.stdout.readline()), json.loads(other.stdout.readline())
        expect_eq(r1["ok"] + r2["ok"], 192, "remote subscriptions up to their share: %s %s" % (r1, r2))
        expect(r1["refused"] + r2["refused"] >= 1, "the one over it refused:", r1, r2)
        with st["daemon"].connect(30) as c:
            msg = c.call("events.subscribe", {}, 30)
            expect("result" in msg, "a local subscriber while remote ones hold their share:", msg)
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
            p.wait()


def test_large_answers_for_remote_clients_are_bounded_daemon_wide(world):
    """12 TLS connections each with an fs.read of a 30 MiB file, none
    reading its answer: at most 8 such answers are made at a time (the
    rest refused with limit_exceeded), and the answers made are held
    within the daemon's output budget (outputBudgetMiB, 256 MiB by
    default): past it, this client's longest-stalled connections are
    dropped, so they are never all held in the daemon's memory. A local
    fs.read is not bound by them."""
    st = _setup(world)
    name = world.name("rbulk")
    a = _answer(_call(world, st, "tag", {"method": "sandbox.create",
                                         "params": {"name": name, "networkPolicy": "deny-all"}}), "create")
    expect("result" in a, "the tenant's sandbox:", a)
    try:
        cid = _local(st, "command.run", {"sandbox": name, "cmd": "sh", "args": [
            "-c", "head -c 31457280 /dev/urandom > /workspace/big"]})["cmdId"]
        expect_eq(st["daemon"].rpc("command.wait", {"cmdId": cid}, timeout=120)["result"].get("exitCode"), 0,
                  "the 30 MiB file written")
        r = _raw(world, st, "reads", "--count", "12", "--wait-sandbox", name, "--hold", "8", "--timeout", "120",
                 who="tag", timeout=300)
        expect(r["refused"] >= 3 and r["ok"] >= 1 and r["ok"] <= 7, "bounded large answers for remote clients:", r)
        expect(all("retry later" in m for m in r["messages"]), "limit_exceeded names the bound:", r)
        if r["dropped"]:
            expect("outputBudgetMiB" in st["daemon"].log_tail(400), "a dropped connection's reason is logged")
        msg = st["daemon"].rpc("fs.read", {"sandbox": name, "path": "/workspace/big"}, timeout=120)
        expect("result" in msg, "a local fs.read is not bound by remote answers:", json.dumps(msg)[:200])
    finally:
        st["daemon"].rpc("sandbox.delete", {"name": name})


def test_no_remote_client_may_put_a_sandbox_in_a_host_network_namespace(world):
    """sandbox.create network.netns (a pod's namespace, docs/API.md) is for
    root on the local socket: the TLS admin and a TLS tenant are refused
    naming the field, before any path is opened."""
    st = _setup(world)
    for who in ("admin", "tag"):
        r = _call(world, st, who, {"method": "sandbox.create",
                                   "params": {"networkPolicy": "deny-all", "network": {"netns": "/run/netns/x"}}})
        a = _answer(r, "create with network.netns as %s" % who)
        err = a.get("error") or {}
        expect_eq(((err.get("data") or {}).get("field"), (err.get("data") or {}).get("reason")),
                  ("network.netns", "permission_denied"), "network.netns over TLS as %s: %s" % (who, json.dumps(a)[:300]))
