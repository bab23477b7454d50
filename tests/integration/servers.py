#!/usr/bin/env python3
"""Small servers and probes of the test world, run inside its namespaces.

  servers.py http ADDR PORT DIR LOG   serve DIR over HTTP/1.0, log each request
  servers.py tcp ADDR PORT LOG        accept TCP, log the peer, echo, close
  servers.py wait-tcp ADDR PORT SECS  exit 0 once ADDR:PORT accepts, 1 at the deadline
  servers.py stall ADDR PORT LOG      HTTP that answers 200 and a few body bytes,
                                      then sends nothing more: a source that
                                      never finishes; logs "open PATH" and
                                      "closed PATH" per connection
  servers.py web CONFIG.json          several HTTP(S) and TCP listeners in one process

`web` takes a JSON list of listeners, each {"kind", "addr", "port", "log",
"cert"?, "key"?, "dir"?}; a listener with cert and key speaks TLS:
  echo    answers every request with JSON {method, path, headers, body_len}
          and logs the same object as one line; GET /bytes/N answers N
          bytes (a download for the benchmarks)
  static  serves "dir" (a bare git repository for the dumb HTTP protocol)
          and logs each request's method, path and headers
  tcp     logs every connection's peer (and the first bytes it sent), then
          closes: a listener that must see nothing

Each server prints "ready" on stdout once it listens, so the harness waits
for that line instead of sleeping. Log lines are appended and flushed at
once: tests read them to see whether a connection arrived.
"""
import http.server
import json
import os
import socket
import socketserver
import sys
import threading
import time


def log_line(path, text):
    with open(path, "a") as f:
        f.write(text + "\n")
        f.flush()


def serve_http(addr, port, directory, log):
    class Handler(http.server.SimpleHTTPRequestHandler):
        def __init__(self, *a, **kw):
            super().__init__(*a, directory=directory, **kw)

        def log_message(self, fmt, *args):
            log_line(log, "%s %s" % (self.client_address[0], fmt % args))

    class Server(socketserver.ThreadingMixIn, http.server.HTTPServer):
        daemon_threads = True
        allow_reuse_address = True

    srv = Server((addr, port), Handler)
    print("ready", flush=True)
    srv.serve_forever()


def serve_tcp(addr, port, log):
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind((addr, port))
    s.listen(64)
    print("ready", flush=True)

    def handle(c, peer):
        log_line(log, "%s:%d" % peer)
        c.settimeout(2)
        try:
            data = c.recv(4096)
            if data:
                c.sendall(data)
        except OSError:
            pass
        c.close()

    while True:
        c, peer = s.accept()
        threading.Thread(target=handle, args=(c, peer), daemon=True).start()


def _log_json(path, obj):
    log_line(path, json.dumps(obj, sort_keys=True))


class _Quiet(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    log_path = None

    def log_message(self, fmt, *args):
        pass

    def _record(self):
        rec = {"method": self.command, "path": self.path, "headers": [[k, v] for k, v in self.headers.items()]}
        _log_json(self.log_path, rec)
        return rec


class EchoHandler(_Quiet):
    def _any(self):
        n = int(self.headers.get("content-length") or 0)
        body = self.rfile.read(n) if n else b""
        rec = self._record()
        if self.command == "GET" and self.path.startswith("/bytes/"):
            return self._bytes(int(self.path.split("/")[2]))
        rec["body_len"] = len(body)
        out = json.dumps(rec).encode()
        self.send_response(200)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(out)))
        self.end_headers()
        self.wfile.write(out)

    def _bytes(self, n):
        self.send_response(200)
        self.send_header("content-type", "application/octet-stream")
        self.send_header("content-length", str(n))
        self.end_headers()
        chunk = b"\x5a" * (1 << 20)
        while n > 0:
            k = min(n, len(chunk))
            self.wfile.write(chunk[:k])
            n -= k

    do_GET = do_POST = do_PUT = do_DELETE = do_PATCH = do_HEAD = _any


class StaticHandler(http.server.SimpleHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    log_path = None

    def log_message(self, fmt, *args):
        pass

    def send_head(self):
        _log_json(self.log_path, {"method": self.command, "path": self.path,
                                  "headers": [[k, v] for k, v in self.headers.items()]})
        return super().send_head()


def _web_listener(spec):
    import functools
    import ssl
    kind = spec["kind"]
    if kind == "tcp":
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        s.bind((spec["addr"], spec["port"]))
        s.listen(64)

        def loop():
            while True:
                c, peer = s.accept()
                c.settimeout(1)
                try:
                    data = c.recv(512)
                except OSError:
                    data = b""
                log_line(spec["log"], "%s:%d %r" % (peer[0], peer[1], data[:200]))
                c.close()
        return loop
    base = EchoHandler if kind == "echo" else StaticHandler
    attrs = {"log_path": spec["log"]}
    handler = type("H", (base,), attrs)
    if kind == "static":
        handler = functools.partial(handler, directory=spec["dir"])

    class Server(socketserver.ThreadingMixIn, http.server.HTTPServer):
        daemon_threads = True
        allow_reuse_address = True
    srv = Server((spec["addr"], spec["port"]), handler)
    if spec.get("cert"):
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.load_cert_chain(spec["cert"], spec["key"])
        ctx.set_alpn_protocols(["http/1.1"])
        srv.socket = ctx.wrap_socket(srv.socket, server_side=True, do_handshake_on_connect=False)
        # The handshake in the handler's thread, not in accept(): a client
        # that stalls it (a refused SNI) must not block the next one.
        def finish_request(request, client_address):
            try:
                request.settimeout(10)
                request.do_handshake()
            except (OSError, ssl.SSLError):
                return
            handler(request, client_address, srv)
        srv.finish_request = finish_request
    return srv.serve_forever


def serve_web(config_path):
    with open(config_path) as f:
        specs = json.load(f)
    loops = [_web_listener(s) for s in specs]
    print("ready", flush=True)
    for fn in loops[1:]:
        threading.Thread(target=fn, daemon=True).start()
    loops[0]()


def serve_stall(addr, port, log):
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind((addr, port))
    s.listen(64)
    print("ready", flush=True)

    def handle(c):
        data = b""
        while b"\r\n\r\n" not in data and len(data) < 65536:
            chunk = c.recv(4096)
            if not chunk:
                break
            data += chunk
        first = data.split(b"\r\n", 1)[0].decode(errors="replace").split(" ")
        path = first[1] if len(first) > 1 else "?"
        log_line(log, "open %s" % path)
        try:
            # Headers and the first bytes of a gzip stream, then silence.
            c.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/octet-stream\r\n"
                      b"Content-Length: 100000000\r\n\r\n\x1f\x8b\x08\x00")
            # Held open until the client goes: recv returns b"" then.
            while c.recv(4096):
                pass
        except OSError:
            pass
        log_line(log, "closed %s" % path)
        c.close()

    while True:
        c, _peer = s.accept()
        threading.Thread(target=handle, args=(c,), daemon=True).start()


def wait_tcp(addr, port, secs):
    deadline = time.monotonic() + secs
    while time.monotonic() < deadline:
        try:
            socket.create_connection((addr, port), timeout=0.5).close()
            return 0
        except OSError:
            time.sleep(0.05)
    return 1


def main(argv):
    mode = argv[1]
    if mode == "http":
        serve_http(argv[2], int(argv[3]), argv[4], argv[5])
    elif mode == "tcp":
        serve_tcp(argv[2], int(argv[3]), argv[4])
    elif mode == "stall":
        serve_stall(argv[2], int(argv[3]), argv[4])
    elif mode == "web":
        serve_web(argv[2])
    elif mode == "wait-tcp":
        return wait_tcp(argv[2], int(argv[3]), float(argv[4]))
    else:
        print("unknown mode " + mode, file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
