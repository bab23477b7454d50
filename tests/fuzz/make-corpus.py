#!/usr/bin/env python3
"""Writes the seed corpora of the fuzz targets (tests/fuzz/corpus/<target>/)
from real inputs: the policy examples of docs/POLICY.md and the unit tests,
DNS queries and answers as resolvers send them, request heads as curl and
browsers send them, tar archives shaped like snapshot and runtime imports,
and JSON-RPC lines of docs/API.md. Run it again after changing an input."""
import hashlib, io, json, os, re, struct, tarfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))


def put(target, data):
    if isinstance(data, str):
        data = data.encode()
    d = os.path.join(HERE, "corpus", target)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, hashlib.sha1(data).hexdigest()[:16]), "wb") as f:
        f.write(data)


def policies():
    out = ['"allow-all"', '"deny-all"', '{"allow": ["api.example.com", "*.github.com:443"]}',
           '{"allow": {"api.test": [{"match": {"path": {"startsWith": "/v1"}, "method": ["POST"]},'
           ' "transform": [{"headers": {"authorization": "Bearer x"}}]}]}}',
           '{"allow": ["*"], "subnets": {"deny": ["203.0.113.0/24"], "allow": ["198.51.100.0/24"]}}',
           '{"allow": {"svc.test": [{"match": {"queryString": [{"key": {"exact": "q"}, "value": {"regex": "a.*"}}],'
           ' "headers": [{"key": {"exact": "X-Kind"}, "value": {"exact": "t"}}]},'
           ' "forwardURL": "https://fwd.example.com/base/"}]}}']
    text = open(os.path.join(ROOT, "docs", "POLICY.md")).read()
    for block in re.findall(r"```(?:json)?\n(.*?)```", text, re.S):
        try:
            j = json.loads(block)
        except ValueError:
            continue
        if isinstance(j, dict) and "networkPolicy" in j:
            j = j["networkPolicy"]
        out.append(json.dumps(j))
    return out


def dns_name(n):
    return b"".join(bytes([len(l)]) + l.encode() for l in n.split(".") if l) + b"\0"


def dns_query(qid, name, qtype, edns=False):
    q = struct.pack(">HHHHHH", qid, 0x0100, 1, 0, 0, 1 if edns else 0) + dns_name(name) + struct.pack(">HH", qtype, 1)
    if edns:
        q += b"\0" + struct.pack(">HHIH", 41, 1232, 0, 0)
    return q


def dns_answer(qid, name, qtype, rdatas):
    a = struct.pack(">HHHHHH", qid, 0x8180, 1, len(rdatas), 0, 0) + dns_name(name) + struct.pack(">HH", qtype, 1)
    for rtype, rdata in rdatas:
        a += b"\xc0\x0c" + struct.pack(">HHIH", rtype, 1, 300, len(rdata)) + rdata
    return a


def dns():
    cases = [("api.test", 1, [(1, bytes([203, 0, 113, 7]))]),
             ("www.example.com", 1, [(5, dns_name("cdn.example.com")), (1, bytes([198, 51, 100, 9]))]),
             ("www.example.com", 28, [(28, bytes(15) + b"\x01")]),
             ("svc.test", 1, [(1, bytes([10, 0, 0, 1]))]),
             ("evil.test", 1, [(1, bytes([1, 2, 3, 4]))]),
             ("api.test", 16, [(16, b"\x05hello")])]
    for i, (name, qtype, rr) in enumerate(cases):
        q = dns_query(0x1234 + i, name, qtype, edns=i % 2 == 1)
        a = dns_answer(0, name, qtype, rr)
        yield struct.pack(">H", len(q)) + q + a


def http():
    yield "GET / HTTP/1.1\r\nHost: api.test\r\nUser-Agent: curl/7.88.1\r\nAccept: */*\r\n\r\n"
    yield ("POST /v1/chat?q=a+b HTTP/1.1\r\nHost: api.test:443\r\nContent-Type: application/json\r\n"
           "Content-Length: 2\r\n\r\n{}")
    yield "GET http://api.test/x HTTP/1.1\r\nHost: api.test\r\nConnection: keep-alive\r\n\r\n"
    yield "PUT /u HTTP/1.1\r\nHost: api.test\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n"
    yield "HEAD /h HTTP/1.0\r\n\r\n"
    yield "CONNECT api.test:443 HTTP/1.1\r\nHost: api.test:443\r\n\r\n"


def tar_of(members, mode="w"):
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode=mode) as t:
        for name, kind, data in members:
            ti = tarfile.TarInfo(name)
            if kind == "dir":
                ti.type = tarfile.DIRTYPE
            elif kind == "link":
                ti.type, ti.linkname = tarfile.LNKTYPE, data
                data = b""
            elif kind == "sym":
                ti.type, ti.linkname = tarfile.SYMTYPE, data
                data = b""
            elif kind == "chr":
                ti.type = tarfile.CHRTYPE
                data = b""
            ti.size = len(data) if kind == "file" else 0
            t.addfile(ti, io.BytesIO(data) if kind == "file" else None)
    return buf.getvalue()


def tars():
    snap = [("snapshot.json", "file", b'{"sandbox":"a"}'), ("layers/0/", "dir", None),
            ("layers/0/workspace/", "dir", None), ("layers/0/workspace/f", "file", b"x"),
            ("layers/0/workspace/g", "link", "layers/0/workspace/f"),
            ("layers/0/workspace/s", "sym", "../etc"), ("layers/0/old", "chr", None)]
    yield tar_of(snap)
    yield tar_of(snap, "w:gz")
    yield tar_of([("./bin/", "dir", None), ("./bin/sh", "file", b"\x7fELF"), ("./etc/passwd", "file", b"root:x:0:0::/:/bin/sh\n")])
    yield tar_of([("layers/0/../x", "file", b"x"), ("/abs", "file", b"y"), ("layers/1//z", "file", b"z")])


def rpc():
    lines = ['{"jsonrpc":"2.0","id":1,"method":"t.echo","params":{"a":[1,2]}}',
             '{"jsonrpc":"2.0","id":"x","method":"t.params","params":{"s":"v","b":true,"i":7,"d":"1m30s","o":{},"a":[]}}',
             '{"jsonrpc":"2.0","id":2,"method":"t.params","params":{"i":"12","d":-1}}',
             '{"jsonrpc":"2.0","method":"t.echo"}',
             '{"jsonrpc":"2.0","id":3,"method":"t.fail"}\n{"jsonrpc":"2.0","id":4,"method":"nope"}',
             '[1,2]', '{"jsonrpc":"1.0","id":5,"method":"t.echo"}',
             '{"jsonrpc":"2.0","id":6,"method":"sandbox.create","params":{"name":"a","source":{"type":"empty"}}}']
    for l in lines:
        yield l + "\n"


def agent():
    meta = json.dumps({"cmdId": "cmd-0123456789abcdef", "cmd": "sh", "args": ["-c", "echo hi"], "cwd": "/workspace",
                       "sudo": False, "tty": False, "detached": True, "startedMs": 1764580000000})
    lst = json.dumps({"ev": "list", "commands": [{"id": 1, "pid": 42, "exited": False, "meta": meta}]})
    yield "\n".join([lst, '{"ev":"started","id":1,"pid":42}', '{"ev":"output","id":1,"stream":"stdout","data":"aGkK"}',
                     '{"ev":"output","id":1,"stream":"stderr","data":"ZXJyCg=="}', '{"ev":"exit","id":1,"code":0}'])
    yield '{"ev":"fs","req":1,"result":{"type":"dir","size":4096}}\n{"ev":"fs","req":2,"errno":2,"message":"no such file"}'
    yield '{"ev":"error","message":"malformed packet: \\u001b[31m"}\n{"ev":"exit","id":7,"code":137,"error":"x"}'
    yield lst + "\n" + lst
    # A run with a flow-control window: "started" says init keeps it, then
    # output the daemon credits (agent.h "window", "credit").
    yield "\n".join([lst, '{"ev":"started","id":1,"pid":42,"window":1048576}',
                     '{"ev":"output","id":1,"stream":"stdout","data":"aGkK"}',
                     '{"ev":"started","id":1,"pid":42,"window":-5e300}'])


def main():
    for p in policies():
        put("policy", p)
    for p in ["api.example.com\nwww.Example.COM.:443\n10.0.0.0/8\n10.1.2.3",
              "*.github.com:443\napi.github.com:443\n2001:db8::/32\n2001:db8::1",
              "*\n[::ffff:127.0.0.1]:80\n::ffff:0:0/96\n0x7f.1",
              "www*.com\n127.1\n192.168.0.5/24\n::1"]:
        put("match", p)
    for d in dns():
        put("dns", d)
    for h in http():
        put("http", h)
    for t in tars():
        put("tar", t)
    for r in rpc():
        put("rpc", r)
    for a in agent():
        put("agent", a)


main()
