#!/usr/bin/env python3
"""Runs the SDK's node tests against a real sandboxd in the test world
(tests/integration/world.py, DESIGN §8).

    python3 sdk/typescript/test/world.py [node test files...]

Builds nothing: run `npm run build:test` first (make sdk-ts-check does).
Opens a world, starts sandboxd, and runs `node --test` in the world host's
network namespace (where the sandboxes' port endpoints listen) with:

    SANDBOXD_SOCKET        the daemon's socket
    SANDBOXD_TEST_CONTROL  a Unix socket: send "restart\\n" to restart the
                           daemon (SIGTERM, then a new one on the same state:
                           live restore), read one line "ok" or "error: ..."
    SANDBOXD_TEST_GIT_URL  the world's git repository (a copy of this one)
    SANDBOXD_TEST_REGISTRY a host of the fake internet with an HTTPS server
    SANDBOXD_TEST_TLS_URL  the daemon's TLS listener (tcp://203.0.113.1:7443),
    SANDBOXD_TEST_TLS_DIR  and the directory of `sandboxctl certs init`
                           (ca.pem, client.pem, client-key.pem)

Exit status: node's. The world is torn down on every exit.
"""
import glob
import os
import socket
import subprocess
import sys
import threading

HERE = os.path.dirname(os.path.abspath(__file__))
PKG = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(PKG, "..", "..", "tests", "integration"))

import world as W  # noqa: E402

NODE_TIMEOUT = 240
TLS_PORT = 7443  # seconds for the whole node run


def serve_control(world, path):
    srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    srv.bind(path)
    srv.listen(4)
    lock = threading.Lock()

    def handle(conn):
        with conn:
            f = conn.makefile("rwb")
            for line in f:
                cmd = line.decode().strip()
                try:
                    with lock:
                        if cmd == "restart":
                            rc = world.daemon.stop()
                            if rc != 0:
                                raise W.WorldError("sandboxd exited with %s on SIGTERM" % rc)
                            world.daemon.start()
                        else:
                            raise W.WorldError("unknown control command %r" % cmd)
                    f.write(b"ok\n")
                except Exception as e:  # report to the test, keep serving
                    f.write(("error: %s\n" % e).replace("\n", " ").encode() + b"\n")
                f.flush()

    def loop():
        while True:
            try:
                conn, _ = srv.accept()
            except OSError:
                return
            threading.Thread(target=handle, args=(conn,), daemon=True).start()

    threading.Thread(target=loop, daemon=True).start()
    return srv


def main(argv):
    if os.geteuid() != 0:
        print("sdk-ts: needs root (the test world)", file=sys.stderr)
        return 1
    files = argv or sorted(glob.glob(os.path.join(PKG, "build", "test", "*.test.js")))
    if not files:
        print("sdk-ts: no built tests; run npm run build:test", file=sys.stderr)
        return 1
    with W.World() as world:
        certs = os.path.join(world.tmp, "sdk-certs")
        subprocess.run([W.SANDBOXCTL, "certs", "init", certs, "--name", W.HOST_ADDR],
                       check=True, capture_output=True)
        tls_url = "tcp://%s:%d" % (W.HOST_ADDR, TLS_PORT)
        d = world.start_sandboxd(config={
            "listen": [tls_url], "tlsCert": os.path.join(certs, "server.pem"),
            "tlsKey": os.path.join(certs, "server-key.pem"), "tlsClientCA": os.path.join(certs, "ca.pem")})
        control = os.path.join(world.tmp, "sdk-control.sock")
        srv = serve_control(world, control)
        env = dict(os.environ, SANDBOXD_SOCKET=d.socket, SANDBOXD_TEST_CONTROL=control,
                   SANDBOXD_TEST_GIT_URL=world.git_url, SANDBOXD_TEST_REGISTRY="api.public.test",
                   SANDBOXD_TEST_WORLD=world.id, SANDBOXD_TEST_TLS_URL=tls_url,
                   SANDBOXD_TEST_TLS_DIR=certs)
        argv = ["nsenter", "--net=/run/netns/" + world.host_ns, "--",
                "node", "--test", "--test-concurrency=2", "--test-reporter=spec"]
        # Files that restart the daemon run alone, after the others.
        alone = [f for f in files if os.path.basename(f).startswith("restart.")]
        rest = [f for f in files if f not in alone]
        try:
            rc = 0
            for group in (rest, alone):
                if group:
                    p = subprocess.run(argv + group, cwd=PKG, env=env, timeout=NODE_TIMEOUT)
                    rc = rc or p.returncode
        except subprocess.TimeoutExpired:
            print("sdk-ts: node tests took longer than %ds" % NODE_TIMEOUT, file=sys.stderr)
            rc = 1
        finally:
            srv.close()
        if rc != 0:
            print("--- sandboxd log (tail) ---\n" + world.daemon.log_tail(40), file=sys.stderr)
        return rc


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
