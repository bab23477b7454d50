#!/usr/bin/env python3
"""A raw client of sandboxd's TLS listener for test_remote.py, run inside the
test world's internet namespace (a machine other than the daemon's host).

    remote_client.py MODE HOST PORT [options] [REQUEST_JSON...]

Modes (one JSON object on stdout):
  tls      a TLS handshake with --cert/--key (optional) and --ca, then each
           request line, reading one answer per request with an id;
           {"ok": true, "answers": [...], "notes": [...]} or
           {"ok": false, "stage": "handshake"|"io", "error": "..."}
  plain    a JSON-RPC line in plaintext; {"closed": bool, "data": "..."}
  stall    connect and send nothing (or --bytes N of a ClientHello's start);
           {"closed_after_s": S}
  flood    --count N connections that never speak; how many the daemon
           closed at once: {"closed_at_once": N, "open": N}
  hold     keeps --count connections that never speak open for --hold
           seconds, opening a new one whenever the daemon closes one (a
           handshake flood); prints {"holding": N} once they are open, then
           {"reopened": N} at the end
  partial  --count TLS connections, each sending --bytes of one request
           line that never ends; prints {"sent": N, "refused": N} once
           sent, then waits up to --hold seconds for the daemon to close
           them: {"closed": N, "last_closed_s": S} (seconds after "sent")
  subs     --count TLS connections, each sending --per events.subscribe
           requests; {"ok": N, "refused": N, "messages": [...]} once all
           are answered, then the connections stay open for --hold seconds
  reads    --count TLS connections, each sending one fs.read of
           /workspace/big in --wait-sandbox, then reading nothing for
           --hold seconds (the answers queue in the daemon), then each
           answer: {"ok": N, "refused": N, "messages": [...]}
  events   TLS, subscribe, then wait for --wait-sandbox's event and print
           every event received until then: {"events": [...]}
"""
import argparse
import json
import socket
import ssl
import sys
import time


def context(a):
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.load_verify_locations(a.ca)
    ctx.check_hostname = False  # the tests dial an address; the CLI checks names
    if a.cert:
        ctx.load_cert_chain(a.cert, a.key)
    if a.max_tls == "1.2":
        ctx.minimum_version = ctx.maximum_version = ssl.TLSVersion.TLSv1_2
    else:
        ctx.minimum_version = ssl.TLSVersion.TLSv1_3
    return ctx


def read_line(f):
    line = f.readline()
    if not line:
        raise ConnectionError("connection closed")
    return json.loads(line)


def mode_tls(a):
    try:
        raw = socket.create_connection((a.host, a.port), timeout=a.timeout,
                                       source_address=(a.source, 0) if a.source else None)
        s = context(a).wrap_socket(raw)
        s.settimeout(a.timeout)
        f = s.makefile("rb")
        # TLS 1.3 sends the server's verdict on our certificate after our
        # Finished: the first read is where a refusal shows.
    except (OSError, ssl.SSLError) as e:
        return {"ok": False, "stage": "handshake", "error": str(e)}
    answers, notes = [], []
    try:
        for i, req in enumerate(a.requests):
            msg = json.loads(req)
            msg.setdefault("jsonrpc", "2.0")
            msg.setdefault("id", i + 1)
            s.sendall(json.dumps(msg).encode() + b"\n")
            while True:
                m = read_line(f)
                if "id" in m:
                    answers.append(m)
                    break
                notes.append(m)
    except (OSError, ssl.SSLError, ValueError) as e:
        return {"ok": False, "stage": "io", "error": str(e) or type(e).__name__, "answers": answers}
    s.close()
    return {"ok": True, "answers": answers, "notes": notes}


def mode_events(a):
    try:
        raw = socket.create_connection((a.host, a.port), timeout=a.timeout)
        s = context(a).wrap_socket(raw)
        s.settimeout(a.timeout)
        f = s.makefile("rb")
        s.sendall(b'{"jsonrpc":"2.0","id":1,"method":"events.subscribe","params":{}}\n')
        first = read_line(f)
        if "error" in first:
            return {"subscribed": False, "answer": first}
        print(json.dumps({"subscribed": True}), flush=True)
        events = []
        deadline = time.monotonic() + a.timeout
        while time.monotonic() < deadline:
            m = read_line(f)
            if m.get("method") == "event":
                events.append(m["params"])
                if m["params"].get("sandbox") == a.wait_sandbox:
                    break
        return {"events": events}
    except (OSError, ssl.SSLError, ValueError) as e:
        return {"error": str(e)}


def mode_bigfile(a):
    """fs.write of --count bytes to --wait-sandbox's /workspace/big, then
    fs.read of it, on one connection: many TLS records each way."""
    import base64
    import os as _os
    data = _os.urandom(a.count)
    raw = socket.create_connection((a.host, a.port), timeout=a.timeout)
    s = context(a).wrap_socket(raw)
    s.settimeout(a.timeout)
    f = s.makefile("rb")
    w = {"jsonrpc": "2.0", "id": 1, "method": "fs.write",
         "params": {"sandbox": a.wait_sandbox, "files": [{"path": "/workspace/big",
                                                          "content": base64.b64encode(data).decode()}]}}
    r = {"jsonrpc": "2.0", "id": 2, "method": "fs.read",
         "params": {"sandbox": a.wait_sandbox, "path": "/workspace/big"}}
    got = {}
    # One after the other: requests in flight on one connection may run
    # in any order, so the read waits for the write's answer.
    for req in (w, r):
        s.sendall(json.dumps(req).encode() + b"\n")
        while req["id"] not in got:
            m = read_line(f)
            if "id" in m:
                got[m["id"]] = m
    back = base64.b64decode(got[2].get("result", {}).get("content", ""))
    return {"write": "result" in got[1], "read": "result" in got[2], "same": back == data,
            "error": got[2].get("error") or got[1].get("error")}


def mode_halfrecord(a):
    """Handshake, then half of one TLS record of a request; prints
    {"ready": true}, holds it for --hold seconds (the adversary's pause, the
    scenario itself), sends the rest and prints the answer."""
    raw = socket.create_connection((a.host, a.port), timeout=a.timeout)
    inc, out = ssl.MemoryBIO(), ssl.MemoryBIO()
    obj = context(a).wrap_bio(inc, out)

    def pump_out():
        data = out.read()
        if data:
            raw.sendall(data)

    while True:
        try:
            obj.do_handshake()
            break
        except ssl.SSLWantReadError:
            pump_out()
            inc.write(raw.recv(65536))
    pump_out()
    obj.write(b'{"jsonrpc":"2.0","id":1,"method":"daemon.info"}\n')
    rec = out.read()
    raw.sendall(rec[:len(rec) // 2])
    print(json.dumps({"ready": True}), flush=True)
    time.sleep(a.hold)
    raw.sendall(rec[len(rec) // 2:])
    buf = b""
    while b"\n" not in buf:
        try:
            buf += obj.read(65536)
        except ssl.SSLWantReadError:
            pump_out()
            inc.write(raw.recv(65536))
    return {"answer": json.loads(buf.split(b"\n")[0])}


def mode_many(a):
    """--count TLS connections held open (each answered once), then one
    more: {"served": N, "extra_refused": bool}."""
    held, served = [], 0
    ctx = context(a)
    for _ in range(a.count):
        s = ctx.wrap_socket(socket.create_connection((a.host, a.port), timeout=a.timeout))
        s.settimeout(a.timeout)
        s.sendall(b'{"jsonrpc":"2.0","id":1,"method":"daemon.info"}\n')
        if "result" in read_line(s.makefile("rb")):
            served += 1
        held.append(s)
    refused = False
    try:
        s = ctx.wrap_socket(socket.create_connection((a.host, a.port), timeout=a.timeout))
        s.settimeout(a.timeout)
        s.sendall(b'{"jsonrpc":"2.0","id":1,"method":"daemon.info"}\n')
        read_line(s.makefile("rb"))
    except (OSError, ssl.SSLError, ConnectionError):
        refused = True
    for s in held:
        s.close()
    return {"served": served, "extra_refused": refused}


def mode_plain(a):
    s = socket.create_connection((a.host, a.port), timeout=a.timeout)
    s.sendall(b'{"jsonrpc":"2.0","id":1,"method":"daemon.info"}\n')
    data = b""
    closed = False
    try:
        while True:
            b = s.recv(65536)
            if not b:
                closed = True
                break
            data += b
    except ConnectionResetError:
        closed = True
    except socket.timeout:
        pass
    return {"closed": closed, "data": data.decode(errors="replace")}


def mode_stall(a):
    s = socket.create_connection((a.host, a.port), timeout=a.timeout)
    if a.bytes:
        s.sendall(b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03"[:a.bytes])
    t0 = time.monotonic()
    try:
        while s.recv(65536):
            pass
    except (ConnectionResetError, socket.timeout):
        pass
    return {"closed_after_s": round(time.monotonic() - t0, 2)}


def mode_flood(a):
    socks = []
    for _ in range(a.count):
        socks.append(socket.create_connection((a.host, a.port), timeout=a.timeout))
    time.sleep(0)  # no wait: the verdict is read below with a deadline
    closed = 0
    for s in socks:
        s.settimeout(2.0)
        try:
            if s.recv(1) == b"":
                closed += 1
        except ConnectionResetError:
            closed += 1
        except socket.timeout:
            pass
    for s in socks:
        s.close()
    return {"closed_at_once": closed, "open": a.count - closed}


def mode_hold(a):
    import select

    def dial():
        try:
            return socket.create_connection((a.host, a.port), timeout=a.timeout)
        except OSError:
            return None
    socks = [x for x in (dial() for _ in range(a.count)) if x]
    print(json.dumps({"holding": len(socks)}), flush=True)
    reopened = 0
    deadline = time.monotonic() + a.hold
    while time.monotonic() < deadline:
        r, _, _ = select.select(socks, [], [], 0.05) if socks else ([], [], [])
        for x in r:
            try:
                data = x.recv(1)
            except OSError:
                data = b""
            if data == b"":
                socks.remove(x)
                x.close()
        while len(socks) < a.count and time.monotonic() < deadline:
            n = dial()
            if not n:
                break
            socks.append(n)
            reopened += 1
    for x in socks:
        x.close()
    return {"reopened": reopened}


def mode_partial(a):
    import select
    head = b'{"jsonrpc":"2.0","id":1,"method":"daemon.info","params":{"x":"'
    chunk = b"a" * (1 << 20)
    socks, refused = [], 0
    for _ in range(a.count):
        try:
            raw = socket.create_connection((a.host, a.port), timeout=a.timeout,
                                           source_address=(a.source, 0) if a.source else None)
            x = context(a).wrap_socket(raw)
            x.settimeout(a.timeout)
            x.sendall(head)
            left = a.bytes - len(head)
            while left > 0:
                n = min(left, len(chunk))
                x.sendall(chunk[:n])
                left -= n
            socks.append(x)
        except (OSError, ssl.SSLError):
            refused += 1
    print(json.dumps({"sent": len(socks), "refused": refused}), flush=True)
    t0 = time.monotonic()
    closed, last = 0, None
    open_ = list(socks)
    while open_ and time.monotonic() - t0 < a.hold:
        r, _, _ = select.select(open_, [], [], 0.5)
        for x in r:
            try:
                data = x.recv(65536)
            except (OSError, ssl.SSLError):
                data = b""
            if not data:
                open_.remove(x)
                closed += 1
                last = time.monotonic() - t0
    for x in socks:
        x.close()
    return {"closed": closed, "last_closed_s": last}


def mode_subs(a):
    socks, ok, refused, messages = [], 0, 0, []
    for _ in range(a.count):
        try:
            raw = socket.create_connection((a.host, a.port), timeout=a.timeout,
                                           source_address=(a.source, 0) if a.source else None)
            x = context(a).wrap_socket(raw)
            x.settimeout(a.timeout)
            f = x.makefile("rb")
            for i in range(a.per):
                x.sendall((json.dumps({"jsonrpc": "2.0", "id": i + 1, "method": "events.subscribe",
                                       "params": {}}) + "\n").encode())
                while True:
                    m = read_line(f)
                    if m.get("id") == i + 1:
                        break
                if "result" in m:
                    ok += 1
                else:
                    refused += 1
                    messages.append(m["error"]["message"])
            socks.append((x, f))
        except (OSError, ssl.SSLError, ConnectionError) as e:
            messages.append("io: %s" % e)
    print(json.dumps({"ok": ok, "refused": refused, "messages": messages[:5]}), flush=True)
    time.sleep(a.hold)
    for x, _ in socks:
        x.close()
    return {"done": True}


def mode_reads(a):
    conns = []
    req = {"jsonrpc": "2.0", "id": 1, "method": "fs.read",
           "params": {"sandbox": a.wait_sandbox, "path": "/workspace/big"}}
    for _ in range(a.count):
        raw = socket.create_connection((a.host, a.port), timeout=a.timeout)
        x = context(a).wrap_socket(raw)
        x.settimeout(a.timeout)
        x.sendall(json.dumps(req).encode() + b"\n")
        conns.append(x)
    time.sleep(a.hold)
    ok, refused, dropped, messages = 0, 0, 0, []
    for x in conns:
        try:
            m = read_line(x.makefile("rb"))
        except (OSError, ValueError, ssl.SSLError):
            m = None
        if not m:
            dropped += 1  # closed by the daemon's output budget
        elif "result" in m:
            ok += 1
        else:
            refused += 1
            messages.append(m["error"]["message"])
        x.close()
    return {"ok": ok, "refused": refused, "dropped": dropped, "messages": messages[:3]}


def main():
    p = argparse.ArgumentParser()
    p.add_argument("mode")
    p.add_argument("host")
    p.add_argument("port", type=int)
    p.add_argument("--cert")
    p.add_argument("--key")
    p.add_argument("--ca")
    p.add_argument("--max-tls", default="1.3")
    p.add_argument("--timeout", type=float, default=30.0)
    p.add_argument("--bytes", type=int, default=0)
    p.add_argument("--count", type=int, default=10)
    p.add_argument("--wait-sandbox")
    p.add_argument("--hold", type=float, default=3.0)
    p.add_argument("--per", type=int, default=1)
    p.add_argument("--source", help="the local address to connect from (tls mode)")
    p.add_argument("requests", nargs="*")
    a = p.parse_intermixed_args()
    out = {"many": mode_many, "halfrecord": mode_halfrecord, "bigfile": mode_bigfile, "tls": mode_tls, "plain": mode_plain, "stall": mode_stall, "flood": mode_flood, "hold": mode_hold, "partial": mode_partial, "subs": mode_subs, "reads": mode_reads,
           "events": mode_events}[a.mode](a)
    print(json.dumps(out), flush=True)


if __name__ == "__main__":
    main()
