#!/usr/bin/env python3
"""Small servers and probes of the test world, run inside its namespaces.

  servers.py http ADDR PORT DIR LOG   serve DIR over HTTP/1.0, log each request
  servers.py tcp ADDR PORT LOG        accept TCP, log the peer, echo, close
  servers.py wait-tcp ADDR PORT SECS  exit 0 once ADDR:PORT accepts, 1 at the deadline

Each server prints "ready" on stdout once it listens, so the harness waits
for that line instead of sleeping. Log lines are appended and flushed at
once: tests read them to see whether a connection arrived.
"""
import http.server
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
    elif mode == "wait-tcp":
        return wait_tcp(argv[2], int(argv[3]), float(argv[4]))
    else:
        print("unknown mode " + mode, file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
