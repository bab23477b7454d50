#!/usr/bin/env python3
"""The gateway's connection table end to end (docs/SECURITY.md §4.3), run
by tests/e2b/run.py against a gateway started with --max-conns 8
--max-conns-per-addr 4 (E2B_API_URL, E2B_API_KEY as for the node
programs). Peers are loopback addresses of their own (127.0.0.2, .3, .4:
all of 127/8 is local), so each is one address to the gateway.

- 127.0.0.2 holds its 4 idle connections: a fifth from it is answered 503
  and closed, while 127.0.0.3 is served, and a keyed client is served;
- with the table full of connections without a key (and one keyed), a new
  keyed client is served (the oldest without a key is cut for it), the
  keyed connection keeps its place and is served again.

The gateway accepts in order from one thread, so a connection made after
another is admitted after it: nothing here waits on time.
"""
import os
import sys

from rawhttp import URL, answer, check, connect

KEY = os.environ["E2B_API_KEY"]
PER_ADDR = 4
MAX = 8


def request(s, path, key=None):
    head = "GET %s HTTP/1.1\r\nHost: %s\r\n" % (path, URL.netloc)
    if key:
        head += "X-API-Key: %s\r\n" % key
    s.sendall((head + "\r\n").encode())
    return answer(s)


def main():
    held = [connect("127.0.0.2") for _ in range(PER_ADDR)]
    extra = connect("127.0.0.2")
    status, body = answer(extra)
    check(status == 503 and b"too many connections from this address" in body,
          "a connection past an address's share is answered 503: %d %s" % (status, body[:120]))
    check(extra.recv(1) == b"", "and closed")
    extra.close()

    other = connect("127.0.0.3")
    status, _ = request(other, "/health")
    check(status == 200, "another address is served while 127.0.0.2 holds its share")
    keyed = connect("127.0.0.3")
    status, body = request(keyed, "/v2/sandboxes", KEY)
    check(status == 200, "a keyed client is served too: %d %s" % (status, body[:120]))

    # 6 held: fill the table from a third address (2 more), then 2 past it:
    # each cuts the oldest connection without a key (127.0.0.2's first two).
    fill = [connect("127.0.0.4") for _ in range(MAX - 6 + 2)]
    newcomer = connect("127.0.0.1")
    status, body = request(newcomer, "/v2/sandboxes", KEY)
    check(status == 200, "with the table full of connections without a key, a keyed client is served: %d %s"
          % (status, body[:120]))
    status, _ = request(keyed, "/v2/sandboxes", KEY)
    check(status == 200, "the keyed connection kept its place and is served again")
    # Cut by then (the newcomer was admitted after the cuts): they read the end.
    check(held[0].recv(1) == b"" and held[1].recv(1) == b"", "the oldest connections without a key were cut")
    for s in held + fill + [other, keyed, newcomer]:
        s.close()
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except (AssertionError, OSError) as e:
        print("not ok - %s" % e, flush=True)
        sys.exit(1)
