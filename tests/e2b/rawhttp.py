"""A raw-socket HTTP/1.1 client for the Python programs of tests/e2b/
(caps.py, connects.py), which need what an HTTP library hides: the source
address of a connection, connections held idle, an answer read off a
socket the gateway closes. E2B_API_URL names the gateway, as for the node
programs."""
import os
import socket
import urllib.parse

URL = urllib.parse.urlparse(os.environ["E2B_API_URL"])
# Only a guard against a hang; no assertion depends on it.
GUARD_S = 60


def connect(src=None):
    """A connection to the gateway, from source address src (any local
    address when None)."""
    s = socket.create_connection((URL.hostname, URL.port), GUARD_S, (src, 0) if src else None)
    s.settimeout(GUARD_S)
    return s


def answer(s):
    """One answer (head and Content-Length body): (status, body)."""
    buf = b""
    while b"\r\n\r\n" not in buf:
        chunk = s.recv(65536)
        if not chunk:
            raise AssertionError("closed before an answer: %r" % buf)
        buf += chunk
    head, body = buf.split(b"\r\n\r\n", 1)
    length = 0
    for line in head.split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            length = int(value)
    while len(body) < length:
        chunk = s.recv(65536)
        if not chunk:
            break
        body += chunk
    return int(head.split(b" ")[1]), body


def check(cond, what):
    """Prints "ok - what" when cond holds; raises AssertionError(what)
    when not."""
    if not cond:
        raise AssertionError(what)
    print("ok - %s" % what, flush=True)
