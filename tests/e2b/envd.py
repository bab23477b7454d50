#!/usr/bin/env python3
"""envd calls E2B's JS SDK does not make, spoken on the wire (Connect's
JSON codec over HTTP/1.1, spec/envd of e2b-dev/E2B) to sandboxd-e2b, run
by tests/e2b/run.py with E2B_API_URL, E2B_SANDBOX_URL and E2B_API_KEY as
the node programs (E2B_API_KEY_B: a second tenant's key):

- GET /envs: the sandbox's envVars;
- processes by tag: Start with a tag, List shows it, a second Start with
  it is refused (already_exists), SendSignal and Connect by tag, an
  unknown tag is not_found;
- process.Process/StreamInput, a client stream: its start and data
  messages are acted on as they come (the process reads the input and
  ends while the request body is still open), then the answer is an
  empty StreamInputResponse; a stream naming no process, or data before
  start, is refused naming it;
- CreateWatcher / GetWatcherEvents / RemoveWatcher: a file written after
  CreateWatcher is among the events, events are handed out once, a
  removed watcher is not_found, another tenant's token cannot ask for
  it, a sandbox's ninth watcher is refused (resource_exhausted), and a
  watcher of a killed sandbox answers why its watch ended, then is gone;
- signed file URLs (the SDK's downloadUrl()/uploadUrl() signature, read
  from packages/js-sdk/src/sandbox/signature.ts): a valid one reads and
  writes without any header, also with E2b-Sandbox-Id naming the sandbox,
  an expired one is 401 "signature is already expired", a wrong one (or
  one for another path, operation or sandbox) is 401.

Waiting is on conditions: events are asked for again until they come
(each answer is what has come so far), under a guard that only stops a
hang.
"""
import base64
import hashlib
import json
import os
import socket
import struct
import sys
import time
import urllib.parse

URL = urllib.parse.urlparse(os.environ["E2B_API_URL"])
KEY = os.environ["E2B_API_KEY"]
KEY_B = os.environ["E2B_API_KEY_B"]
GUARD_S = 60


def connect():
    s = socket.create_connection((URL.hostname, URL.port), GUARD_S)
    return s


class Reader:
    """Reads one HTTP answer from a socket: the head, then the body
    (Content-Length or chunked) as it comes."""

    def __init__(self, sock):
        self.s = sock
        self.buf = b""
        while b"\r\n\r\n" not in self.buf:
            self._more()
        head, self.buf = self.buf.split(b"\r\n\r\n", 1)
        lines = head.decode().split("\r\n")
        self.status = int(lines[0].split(" ")[1])
        self.headers = {}
        for line in lines[1:]:
            k, _, v = line.partition(":")
            self.headers[k.strip().lower()] = v.strip()
        self.chunked = self.headers.get("transfer-encoding", "").lower() == "chunked"
        self.left = int(self.headers.get("content-length", "0"))
        self.body = b""
        self.done = False

    def _more(self):
        chunk = self.s.recv(65536)
        if not chunk:
            raise AssertionError("the connection closed early: %r" % self.buf[:200])
        self.buf += chunk

    def _body_bytes(self):
        """More body bytes into self.body; False at the end."""
        if self.done:
            return False
        if not self.chunked:
            while len(self.buf) < self.left:
                self._more()
            self.body += self.buf[:self.left]
            self.buf = self.buf[self.left:]
            self.done = True
            return True
        while b"\r\n" not in self.buf:
            self._more()
        size_line, rest = self.buf.split(b"\r\n", 1)
        n = int(size_line, 16)
        while len(rest) < n + 2:
            self._more()
            size_line, rest = self.buf.split(b"\r\n", 1)
        self.body += rest[:n]
        self.buf = rest[n + 2:]
        if n == 0:
            self.done = True
        return n > 0

    def all(self):
        while self._body_bytes():
            pass
        return self.body

    def envelope(self):
        """The next Connect envelope: (flags, JSON message)."""
        while len(self.body) < 5 or len(self.body) < 5 + struct.unpack(">I", self.body[1:5])[0]:
            if not self._body_bytes():
                raise AssertionError("the stream ended inside an envelope: %r" % self.body)
        n = struct.unpack(">I", self.body[1:5])[0]
        flags, msg = self.body[0], json.loads(self.body[5:5 + n])
        self.body = self.body[5 + n:]
        return flags, msg


def head(method, path, headers, length=None):
    lines = ["%s %s HTTP/1.1" % (method, path), "Host: %s:%d" % (URL.hostname, URL.port)]
    lines += ["%s: %s" % kv for kv in headers.items()]
    lines.append("Content-Length: %d" % length if length is not None else "Transfer-Encoding: chunked")
    return ("\r\n".join(lines) + "\r\n\r\n").encode()


def call(method, path, headers=None, body=b""):
    """One request on a connection of its own: (status, body bytes)."""
    with connect() as s:
        s.sendall(head(method, path, headers or {}, len(body)) + body)
        r = Reader(s)
        return r.status, r.all()


def api(method, path, body=None, key=KEY):
    data = json.dumps(body).encode() if body is not None else b""
    st, out = call(method, path, {"X-API-Key": key, "Content-Type": "application/json"}, data)
    return st, (json.loads(out) if out else None)


def envd_headers(sbx, tok, ctype="application/json"):
    return {"E2b-Sandbox-Id": sbx["sandboxID"], "X-Access-Token": tok or sbx["envdAccessToken"],
            "Content-Type": ctype}


def unary(sbx, name, msg, tok=None):
    st, out = call("POST", "/" + name, envd_headers(sbx, tok), json.dumps(msg).encode())
    return st, json.loads(out) if out else None


def envelope(msg, flags=0):
    data = json.dumps(msg).encode()
    return struct.pack(">BI", flags, len(data)) + data


def chunk(data):
    return b"%x\r\n" % len(data) + data + b"\r\n"


def start(sbx, cmd, args, tag=None, stdin=False):
    """A process.Process/Start stream: (socket, Reader, pid)."""
    msg = {"process": {"cmd": cmd, "args": args}, "stdin": stdin}
    if tag:
        msg["tag"] = tag
    body = envelope(msg)
    s = connect()
    s.sendall(head("POST", "/process.Process/Start", envd_headers(sbx, None, "application/connect+json"),
                   len(body)) + body)
    r = Reader(s)
    assert r.status == 200, r.status
    flags, ev = r.envelope()
    if flags & 2:
        s.close()
        return None, None, ev
    return s, r, ev["event"]["start"]["pid"]


def rest_of(r):
    """The rest of a Start/Connect stream: (stdout bytes, end event, end message)."""
    out, end = b"", None
    while True:
        flags, msg = r.envelope()
        if flags & 2:
            return out, end, msg
        ev = msg.get("event", {})
        if "data" in ev:
            out += base64.b64decode(ev["data"].get("stdout", ev["data"].get("pty", "")))
        if "end" in ev:
            end = ev["end"]


def ok(what):
    print("ok - " + what, flush=True)


def check_envs(sbx):
    st, out = call("GET", "/envs", envd_headers(sbx, None))
    env = json.loads(out)
    assert st == 200 and env.get("E2B_ENVD_TEST") == "v1", (st, out)
    ok("GET /envs answers the sandbox's envVars")


def check_tags(sbx):
    s, r, pid = start(sbx, "sleep", ["600"], tag="sleeper")
    st, lst = unary(sbx, "process.Process/List", {})
    tagged = [p for p in lst["processes"] if p.get("tag") == "sleeper"]
    assert st == 200 and len(tagged) == 1 and tagged[0]["pid"] == pid, lst
    # The same tag again, while the first runs.
    s2, r2, err = start(sbx, "true", [], tag="sleeper")
    assert s2 is None and err["error"]["code"] == "already_exists", err
    # Connect by tag follows it; SendSignal by tag ends it.
    body = envelope({"process": {"tag": "sleeper"}})
    c = connect()
    c.sendall(head("POST", "/process.Process/Connect", envd_headers(sbx, None, "application/connect+json"),
                   len(body)) + body)
    cr = Reader(c)
    flags, ev = cr.envelope()
    assert ev["event"]["start"]["pid"] == pid, ev
    st, out = unary(sbx, "process.Process/SendSignal", {"process": {"tag": "sleeper"}, "signal": "SIGNAL_SIGKILL"})
    assert st == 200, (st, out)
    _, end, fin = rest_of(r)
    assert end and end["exitCode"] == 137 and not end["exited"], (end, fin)
    _, cend, _ = rest_of(cr)
    assert cend and cend["exitCode"] == 137, cend
    s.close()
    c.close()
    st, out = unary(sbx, "process.Process/SendSignal", {"process": {"tag": "nosuch"}, "signal": "SIGNAL_SIGKILL"})
    assert st == 404 and out["code"] == "not_found" and "nosuch" in out["message"], (st, out)
    st, out = unary(sbx, "process.Process/CloseStdin", {"process": {}})
    assert st == 400 and "process.pid or process.tag" in out["message"], (st, out)
    ok("processes by tag: Start, List, Connect, SendSignal; a tag in use and an unknown one refused")


def stream_input(sbx, messages, finish=True):
    """Opens a StreamInput request and sends `messages` as envelopes, each
    in a chunk of its own: (socket). With finish, ends the body and
    returns (socket, Reader) with the answer."""
    s = connect()
    s.sendall(head("POST", "/process.Process/StreamInput", envd_headers(sbx, None, "application/connect+json")))
    for m in messages:
        s.sendall(chunk(envelope(m)))
    if not finish:
        return s, None
    s.sendall(b"0\r\n\r\n")
    return s, Reader(s)


def check_stream_input(sbx):
    s, r, pid = start(sbx, "head", ["-n", "2"], tag="reader", stdin=True)
    # Two lines in two data messages; the stream stays open while head
    # reads them and exits: each message was acted on as it came.
    data = [{"data": {"input": {"stdin": base64.b64encode(x).decode()}}} for x in (b"one\n", b"two\n")]
    si, _ = stream_input(sbx, [{"start": {"process": {"tag": "reader"}}}, {"keepalive": {}}] + data, finish=False)
    out, end, fin = rest_of(r)
    assert out == b"one\ntwo\n" and end["exitCode"] == 0 and "error" not in fin, (out, end, fin)
    si.sendall(b"0\r\n\r\n")
    ans = Reader(si)
    assert ans.status == 200 and ans.headers["content-type"] == "application/connect+json", ans.headers
    f1, m1 = ans.envelope()
    f2, m2 = ans.envelope()
    assert (f1, m1, f2 & 2, m2) == (0, {}, 2, {}), (f1, m1, f2, m2)
    si.close()
    s.close()
    # By pid too.
    s, r, pid = start(sbx, "head", ["-n", "1"], stdin=True)
    si, ans = stream_input(sbx, [{"start": {"process": {"pid": pid}}},
                                 {"data": {"input": {"stdin": base64.b64encode(b"pid\n").decode()}}}])
    out, end, _ = rest_of(r)
    assert out == b"pid\n" and end["exitCode"] == 0, (out, end)
    f, m = ans.envelope()
    assert f == 0 and m == {}, (f, m)
    si.close()
    s.close()
    # Refusals: an unknown tag, data first, no start at all.
    for msgs, code, words in (([{"start": {"process": {"tag": "nosuch"}}}], "not_found", "tag 'nosuch'"),
                              ([{"data": {"input": {"stdin": "eA=="}}}], "invalid_argument", "start message"),
                              ([{"keepalive": {}}], "invalid_argument", "no start message"),
                              ([{"bogus": {}}], "invalid_argument", "start, data, keepalive")):
        si, ans = stream_input(sbx, msgs)
        assert ans.status == 200, ans.status
        f, m = ans.envelope()
        assert f & 2 and m["error"]["code"] == code and words in m["error"]["message"], (msgs, m)
        si.close()
    ok("StreamInput: messages acted on as they come, by tag and by pid; refusals named")


def events_until(sbx, wid, want, tok=None):
    """GetWatcherEvents until an event with `want` (name, type) came: all
    events seen."""
    seen = []
    deadline = time.monotonic() + GUARD_S
    while time.monotonic() < deadline:
        st, out = unary(sbx, "filesystem.Filesystem/GetWatcherEvents", {"watcherId": wid}, tok)
        assert st == 200, (st, out)
        seen += out.get("events", [])
        if any((e["name"], e["type"]) == want for e in seen):
            return seen
    raise AssertionError("no %r among %r" % (want, seen))


def write_file(sbx, path, data):
    body = (b"--XB\r\nContent-Disposition: form-data; name=\"file\"; filename=\"f\"\r\n"
            b"Content-Type: application/octet-stream\r\n\r\n" + data + b"\r\n--XB--\r\n")
    h = envd_headers(sbx, None, "multipart/form-data; boundary=XB")
    st, out = call("POST", "/files?" + urllib.parse.urlencode({"path": path}), h, body)
    assert st == 200, (st, out)


def check_watchers(sbx, sbx_b):
    st, _ = unary(sbx, "filesystem.Filesystem/MakeDir", {"path": "watched"})
    assert st == 200
    st, out = unary(sbx, "filesystem.Filesystem/CreateWatcher", {"path": "watched", "includeEntry": True})
    assert st == 200 and len(out["watcherId"]) == 32, (st, out)
    wid = out["watcherId"]
    write_file(sbx, "/home/user/watched/a.txt", b"hello")
    seen = events_until(sbx, wid, ("a.txt", "EVENT_TYPE_CREATE"))
    created = [e for e in seen if e["type"] == "EVENT_TYPE_CREATE"][0]
    assert created.get("entry", {}).get("path") == "/home/user/watched/a.txt", created
    # Handed out once: the next answer has none of them.
    write_file(sbx, "/home/user/watched/b.txt", b"x")
    later = events_until(sbx, wid, ("b.txt", "EVENT_TYPE_CREATE"))
    assert not any((e["name"], e["type"]) == ("a.txt", "EVENT_TYPE_CREATE") for e in later), later
    # Another tenant's sandbox token does not find it, even naming this sandbox's watcher.
    st, out = unary(sbx_b, "filesystem.Filesystem/GetWatcherEvents", {"watcherId": wid})
    assert st == 404, (st, out)
    st, out = unary(sbx, "filesystem.Filesystem/RemoveWatcher", {"watcherId": wid})
    assert st == 200 and out == {}, (st, out)
    st, out = unary(sbx, "filesystem.Filesystem/GetWatcherEvents", {"watcherId": wid})
    assert st == 404 and out["code"] == "not_found", (st, out)
    st, out = unary(sbx, "filesystem.Filesystem/CreateWatcher", {"path": "nosuch"})
    assert st == 404 and "no such directory" in out["message"], (st, out)
    # At most 8 a sandbox.
    ids = []
    for i in range(8):
        st, out = unary(sbx, "filesystem.Filesystem/CreateWatcher", {"path": "watched"})
        assert st == 200, (i, st, out)
        ids.append(out["watcherId"])
    st, out = unary(sbx, "filesystem.Filesystem/CreateWatcher", {"path": "watched"})
    assert st == 429 and out["code"] == "resource_exhausted" and "8 a sandbox" in out["message"], (st, out)
    for wid in ids[1:]:
        assert unary(sbx, "filesystem.Filesystem/RemoveWatcher", {"watcherId": wid})[0] == 200
    ok("watchers: events after CreateWatcher, handed out once, removed, the tenant's own, 8 a sandbox")
    return ids[0]


def check_watcher_of_killed(sbx, wid):
    """The sandbox is gone: its watcher answers why once, then is gone."""
    deadline = time.monotonic() + GUARD_S
    while time.monotonic() < deadline:
        st, out = unary(sbx, "filesystem.Filesystem/GetWatcherEvents", {"watcherId": wid})
        if st != 200:
            break
    assert st == 404 and "the watch ended" in out["message"], (st, out)
    st, out = unary(sbx, "filesystem.Filesystem/GetWatcherEvents", {"watcherId": wid})
    assert st == 404 and "not found" in out["message"], (st, out)
    ok("a watcher of a killed sandbox says its watch ended, then is gone")


def signature(path, op, user, token, exp=None):
    raw = "%s:%s:%s:%s" % (path, op, user, token) + (":%d" % exp if exp is not None else "")
    return "v1_" + base64.b64encode(hashlib.sha256(raw.encode()).digest()).decode().rstrip("=")


def signed(path, op, token, exp=None, user=""):
    q = {"path": path}
    if user:
        q["username"] = user
    q["signature"] = signature(path, op, user, token, exp)
    if exp is not None:
        q["signature_expiration"] = str(exp)
    return "/files?" + urllib.parse.urlencode(q)


def check_signatures(sbx, sbx_b):
    tok = sbx["envdAccessToken"]
    write_file(sbx, "/home/user/signed.txt", b"signed bytes")
    now = int(time.time())
    # No header at all: the signature finds the sandbox.
    st, out = call("GET", signed("signed.txt", "read", tok, now + 600))
    assert (st, out) == (200, b"signed bytes"), (st, out)
    st, out = call("GET", signed("signed.txt", "read", tok))
    assert (st, out) == (200, b"signed bytes"), (st, out)
    # With E2b-Sandbox-Id naming it (and no token).
    st, out = call("GET", signed("signed.txt", "read", tok), {"E2b-Sandbox-Id": sbx["sandboxID"]})
    assert (st, out) == (200, b"signed bytes"), (st, out)
    # Upload.
    body = (b"--XB\r\nContent-Disposition: form-data; name=\"file\"; filename=\"up.txt\"\r\n\r\n"
            b"uploaded\r\n--XB--\r\n")
    st, out = call("POST", signed("up.txt", "write", tok, now + 600),
                   {"Content-Type": "multipart/form-data; boundary=XB"}, body)
    assert st == 200 and json.loads(out)[0]["path"] == "/home/user/up.txt", (st, out)
    st, out = call("GET", signed("up.txt", "read", tok))
    assert (st, out) == (200, b"uploaded"), (st, out)
    # Expired.
    st, out = call("GET", signed("signed.txt", "read", tok, now - 10))
    assert st == 401 and json.loads(out) == {"code": 401, "message": "signature is already expired"}, (st, out)
    # B's token's signature opens B's own sandbox (which has no signed.txt), never A's.
    st, out = call("GET", signed("signed.txt", "read", sbx_b["envdAccessToken"]))
    assert st == 404 and sbx_b["sandboxID"] not in out.decode(), (st, out)
    # Wrong: another path's, a write's used to read, another sandbox's, a made-up one.
    for url, hdr in ((signed("up.txt", "read", tok).replace("path=up.txt", "path=signed.txt"), {}),
                     (signed("signed.txt", "write", tok), {}),
                     (signed("signed.txt", "read", tok) + "&username=user", {}),
                     (signed("signed.txt", "read", sbx_b["envdAccessToken"]), {"E2b-Sandbox-Id": sbx["sandboxID"]}),
                     ("/files?path=signed.txt&signature=v1_AAAA", {}),
                     # The traffic token (it opens exposed ports, nothing
                     # else) never signs a file URL, named or not.
                     (signed("signed.txt", "read", sbx["trafficAccessToken"]), {}),
                     (signed("signed.txt", "read", sbx["trafficAccessToken"]), {"E2b-Sandbox-Id": sbx["sandboxID"]})):
        st, out = call("GET", url, hdr)
        assert st == 401 and "signature" in json.loads(out)["message"], (url, st, out)
    ok("signed file URLs: read and write without headers, expired and wrong ones refused")


def check_traffic_token_signs_nothing():
    # Right after its create, before any envd call: the create handed out
    # the sandbox's envd token and its traffic token; a URL signed with the
    # envd token (the SDK's uploadUrl() as its first call) finds the
    # sandbox, and one signed with the traffic token (it opens exposed
    # ports, nothing else) finds nothing.
    st, c = api("POST", "/sandboxes", {"templateID": "base", "timeout": 300})
    assert st == 201, (st, c)
    try:
        body = (b"--XB\r\nContent-Disposition: form-data; name=\"file\"; filename=\"first.txt\"\r\n\r\n"
                b"first\r\n--XB--\r\n")
        st, out = call("POST", signed("first.txt", "write", c["envdAccessToken"]),
                       {"Content-Type": "multipart/form-data; boundary=XB"}, body)
        assert st == 200, ("a first call signed with the envd token", st, out)
        st, out = call("GET", signed("first.txt", "read", c["trafficAccessToken"]))
        assert st == 401 and "signature" in json.loads(out)["message"], (st, out)
    finally:
        api("DELETE", "/sandboxes/" + c["sandboxID"])
    ok("right after a create, its envd token signs file URLs, its traffic token none")


def main():
    st, a = api("POST", "/sandboxes", {"templateID": "base", "timeout": 300, "envVars": {"E2B_ENVD_TEST": "v1"}})
    assert st == 201, (st, a)
    st, b = api("POST", "/sandboxes", {"templateID": "base", "timeout": 300}, key=KEY_B)
    assert st == 201, (st, b)
    try:
        check_envs(a)
        check_tags(a)
        check_stream_input(a)
        wid = check_watchers(a, b)
        check_signatures(a, b)
        check_traffic_token_signs_nothing()
    finally:
        api("DELETE", "/sandboxes/" + b["sandboxID"], key=KEY_B)
        st, _ = api("DELETE", "/sandboxes/" + a["sandboxID"])
    assert st == 204, st
    check_watcher_of_killed(a, wid)
    print("envd.py: passed", flush=True)


if __name__ == "__main__":
    try:
        main()
    except AssertionError as e:
        print("FAIL: %s" % e, flush=True)
        sys.exit(1)
