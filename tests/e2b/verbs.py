#!/usr/bin/env python3
"""Every /sandboxes/{id}/VERB of the gateway's verb table (e2b/control.c)
with another tenant's sandbox id, run by tests/e2b/run.py against the main
gateway (E2B_API_URL, E2B_API_KEY and E2B_API_KEY_B as for the node
programs): each route, with each method, trailing slashes, encoded
slashes, case changes and query strings, answers tenant B as if tenant A's
sandbox did not exist, and A's sandbox (its end, its pause, its network,
its snapshots) is untouched."""
import json
import os
import sys

import socket
import time

from rawhttp import answer, check, connect
from connects import control as _control


def control(method, path, key, body=b""):
    """As connects.control, waiting out the tenant's rate (429)."""
    for _ in range(60):
        st, out = _control(method, path, key, body)
        if st != 429:
            return st, out
        time.sleep(0.5)
    return st, out

KEY_A, KEY_B = os.environ["E2B_API_KEY"], os.environ["E2B_API_KEY_B"]
VERBS = ("timeout", "network", "pause", "metrics", "snapshots", "fork", "connect", "resume", "refreshes", "nope", "")
BODIES = {"timeout": {"timeout": 1}, "network": {"allowOut": ["1.1.1.1"]}, "pause": {}, "fork": {"count": 1},
          "connect": {"timeout": 86400}, "resume": {"timeout": 86400}, "snapshots": {"name": "stolen"}}


def send_pieces(head, piece):
    """head sent in pieces of `piece` bytes, each its own segment, so the
    parser hands each to the gateway's append separately: the answer."""
    s = connect()
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    try:
        for i in range(0, len(head), piece):
            s.sendall(head[i:i + piece])
            time.sleep(0.002)
    except (BrokenPipeError, ConnectionResetError):
        pass
    try:
        return answer(s)[0]
    finally:
        s.close()


def heads():
    """The head's limits (64 KiB, 100 headers) hold however the bytes
    arrive: one header value in many pieces, a name in many pieces, many
    headers."""
    base = "GET /sandboxes HTTP/1.1\r\nHost: x\r\nX-API-Key: %s\r\n" % KEY_A
    cases = (("a value of 80 KiB in pieces", base + "X-Big: " + "v" * (80 << 10) + "\r\n\r\n", 997),
             ("a name of 80 KiB in pieces", base + "X-" + "n" * (80 << 10) + ": v\r\n\r\n", 997),
             ("101 headers", base + "".join("X-H%d: v\r\n" % i for i in range(101)) + "\r\n", 7),
             ("a value of 70 KiB spread over 40 headers", base +
              "".join("X-H%d: %s\r\n" % (i, "w" * 1800) for i in range(40)) + "\r\n", 1400))
    for what, head, piece in cases:
        st = send_pieces(head.encode(), piece)
        check(st == 431, "%s: %d" % (what, st))
    st = send_pieces((base + "X-Ok: " + "v" * 1000 + "\r\n\r\n").encode(), 13)
    check(st == 200, "a head within the limits in pieces: %d" % st)


def main():
    status, data = control("POST", "/sandboxes", KEY_A, json.dumps({"templateID": "base", "timeout": 300}).encode())
    check(status == 201, "A's sandbox: %d %s" % (status, data[:200]))
    sid = json.loads(data)["sandboxID"]
    try:
        st, before = control("GET", "/sandboxes/" + sid, KEY_A)
        before = json.loads(before)
        for verb in VERBS:
            for method in ("GET", "POST", "PUT", "DELETE", "PATCH"):
                body = json.dumps(BODIES.get(verb, {})).encode()
                for path in ("/sandboxes/%s/%s" % (sid, verb), "/v2/sandboxes/%s/%s" % (sid, verb),
                             "/sandboxes/%s/%s/" % (sid, verb), "/sandboxes/%s/%s?x=1" % (sid, verb),
                             "/sandboxes/%s%%2F%s" % (sid, verb), "/sandboxes/%s/%s" % (sid, verb.upper()),
                             "/sandboxes/%s/%s" % (sid.upper(), verb), "/sandboxes//%s/%s" % (sid, verb)):
                    st, out = control(method, path, KEY_B, body)
                    check(st in (400, 403, 404, 405, 501) or (verb == "" and st == 404),
                          "%s %s as B: %d %s" % (method, path, st, out[:200]))
                    check(b"e2b-a" not in out, "%s %s names A: %s" % (method, path, out[:200]))
        st, after = control("GET", "/sandboxes/" + sid, KEY_A)
        check(st == 200, "A's sandbox is there: %d" % st)
        after = json.loads(after)
        check(after.get("endAt") == before.get("endAt"), "A's end is unmoved: %s %s" % (before.get("endAt"), after.get("endAt")))
        check(after.get("state") == "running", "A's sandbox runs: %s" % after.get("state"))
        st, snaps = control("GET", "/snapshots?sandboxID=" + sid, KEY_B)
        check(st == 200 and json.loads(snaps) == [], "B lists none of A's snapshots: %d %s" % (st, snaps[:200]))
        st, snaps = control("GET", "/snapshots?sandboxID=" + sid, KEY_A)
        check(st == 200 and json.loads(snaps) == [], "A's sandbox has no snapshot B took: %d %s" % (st, snaps[:200]))
        # A's own snapshot, by id and by name, is no template of B's.
        st, snap = control("POST", "/sandboxes/%s/snapshots" % sid, KEY_A, b'{"name": "verbs-secret"}')
        check(st == 201, "A's snapshot: %d %s" % (st, snap[:200]))
        snap = json.loads(snap)["snapshotID"]
        for method, path, body in (("GET", "/snapshots?name=verbs-secret", b""),
                                   ("GET", "/snapshots?sandboxID=" + sid, b""),
                                   ("POST", "/sandboxes", json.dumps({"templateID": snap}).encode()),
                                   ("POST", "/sandboxes", b'{"templateID": "verbs-secret"}'),
                                   ("DELETE", "/templates/" + snap, b"")):
            st, out = control(method, path, KEY_B, body)
            check(st in (403, 404) or (st == 200 and json.loads(out) == []),
                  "%s %s as B: %d %s" % (method, path, st, out[:200]))
            check(b"e2b-a" not in out, "%s %s names A: %s" % (method, path, out[:200]))
        st, out = control("GET", "/snapshots?name=verbs-secret", KEY_A)
        check(st == 200 and [x["snapshotID"] for x in json.loads(out)] == [snap], "A's snapshot stays: %s" % out[:200])
        check(control("DELETE", "/templates/" + snap, KEY_A)[0] == 204, "A deletes its snapshot")
        st, lst = control("GET", "/sandboxes", KEY_A)
        check(st == 200 and len(json.loads(lst)) == 1, "A has its one sandbox, no fork of B's: %s" % lst[:300])
        # A metadata filter whose pair decodes to a NUL is refused, never
        # dropped (dropped, it listed every sandbox of the tenant).
        for q in ("k%3Dv%2500", "k%2500%3Dv", "k%3Dv%26j%3D%2500"):
            st, out = control("GET", "/sandboxes?metadata=" + q, KEY_A)
            check(st == 400 and b"metadata" in out, "metadata=%s: %d %s" % (q, st, out[:200]))
    finally:
        control("DELETE", "/sandboxes/" + sid, KEY_A)
    heads()
    print("verbs: ok")
    return 0


if __name__ == "__main__":
    sys.exit(main())
