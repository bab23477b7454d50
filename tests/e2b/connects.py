#!/usr/bin/env python3
"""process.Process/Connect streams shared between tenants (docs/E2B.md
envd, docs/SECURITY.md §4.3), run by tests/e2b/run.py against the main
gateway (E2B_API_URL, E2B_API_KEY and E2B_API_KEY_B as for the node
programs).

The gateway follows at most 16 processes at once, and one tenant at most
4 of them: tenant A, following its own idle process on as many streams as
it can get, gets 4 and then resource_exhausted naming its share, while
tenant B's Connect is served (before, A took all 16 and B was refused).

Each stream is read until its start event or its error: nothing here
waits on time.
"""
import json
import os
import struct
import sys

from rawhttp import URL, answer, check, connect

KEY_A, KEY_B = os.environ["E2B_API_KEY"], os.environ["E2B_API_KEY_B"]
CONNECT_MAX, PER_TENANT = 16, 4


def send(s, method, path, headers, body, ctype="application/json"):
    head = "%s %s HTTP/1.1\r\nHost: %s\r\nContent-Type: %s\r\nContent-Length: %d\r\n" % (
        method, path, URL.netloc, ctype, len(body))
    head += "".join("%s: %s\r\n" % kv for kv in headers.items())
    s.sendall(head.encode() + b"\r\n" + body)


def control(method, path, key, body=b""):
    s = connect()
    send(s, method, path, {"X-API-Key": key}, body)
    status, data = answer(s)
    s.close()
    return status, data


def envelope(msg):
    data = json.dumps(msg).encode()
    return struct.pack(">BI", 0, len(data)) + data


def first_message(s):
    """Reads a Connect stream's answer up to its first message: the
    message (the start event, or the end-of-stream error)."""
    buf = b""
    while True:
        if b"\r\n\r\n" in buf:
            body = buf.split(b"\r\n\r\n", 1)[1]
            # Chunked: "SIZE\r\n" then the envelope.
            if b"\r\n" in body:
                size_line, _, rest = body.partition(b"\r\n")
                n = int(size_line, 16)
                if len(rest) >= n >= 5:
                    length = struct.unpack(">I", rest[1:5])[0]
                    return json.loads(rest[5:5 + length])
        chunk = s.recv(65536)
        if not chunk:
            raise AssertionError("closed before a message: %r" % buf)
        buf += chunk


def stream(sbx, token, method, msg):
    s = connect()
    send(s, "POST", "/" + method, {"E2b-Sandbox-Id": sbx, "X-Access-Token": token}, envelope(msg),
         "application/connect+json")
    return s, first_message(s)


def sandbox(key):
    status, data = control("POST", "/sandboxes", key, json.dumps({"templateID": "base", "timeout": 300}).encode())
    check(status == 201, "a sandbox is created: %d %s" % (status, data[:200]))
    sb = json.loads(data)
    s, msg = stream(sb["sandboxID"], sb["envdAccessToken"], "process.Process/Start",
                    {"process": {"cmd": "/bin/sleep", "args": ["600"]}})
    pid = msg.get("event", {}).get("start", {}).get("pid")
    check(pid, "an idle process runs in it: %s" % msg)
    s.close()  # it runs on (detached, as envd's)
    return sb["sandboxID"], sb["envdAccessToken"], pid


def main():
    a = sandbox(KEY_A)
    b = sandbox(KEY_B)
    held, refused = [], None
    try:
        for _ in range(CONNECT_MAX):
            s, msg = stream(a[0], a[1], "process.Process/Connect", {"process": {"pid": a[2]}})
            if "event" in msg:
                held.append(s)
                continue
            refused = msg
            s.close()
            break
        check(len(held) == PER_TENANT and refused and refused["error"]["code"] == "resource_exhausted"
              and "one tenant may" in refused["error"]["message"],
              "tenant A follows its process on %d streams, then resource_exhausted: %s" % (len(held), refused))
        s, msg = stream(b[0], b[1], "process.Process/Connect", {"process": {"pid": b[2]}})
        check(msg.get("event", {}).get("start", {}).get("pid") == b[2],
              "tenant B's Connect is served meanwhile: %s" % msg)
        s.close()
    finally:
        for s in held:
            s.close()
        for sbx, key in ((a[0], KEY_A), (b[0], KEY_B)):
            status, _ = control("DELETE", "/sandboxes/" + sbx, key)
            check(status == 204, "sandbox %s deleted" % sbx)
    return 0


if __name__ == "__main__":
    sys.exit(main())
