"""Usage figures and the metrics endpoint (sandboxd(8) METRICS): GET
/metrics on RUNDIR/metrics.sock in the Prometheus text format, the same
figures in sandbox.get (activeCpuUsageMs, memoryPeakBytes, networkTransfer,
usage) and `sandboxctl top --json`; figures move the way a user expects."""
import json
import os
import re
import socket
import subprocess
import time

import world as W
from common import expect, expect_eq, get, poll, sandbox, sh, sh_ok
from test_policy_engine import _connect, _policy_file

NOBODY = 65534
_LINE = re.compile(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{(.*)\})? (\S+)$')
_LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"')



def _http(path, request=b"GET /metrics HTTP/1.1\r\nHost: sandboxd\r\n\r\n", family=socket.AF_UNIX):
    s = socket.socket(family, socket.SOCK_STREAM)
    s.settimeout(20)
    try:
        s.connect(path)
        s.sendall(request)
        data = b""
        while True:
            b = s.recv(65536)
            if not b:
                break
            data += b
    finally:
        s.close()
    head, _, body = data.partition(b"\r\n\r\n")
    return head.decode(), body.decode()


def _parse(text):
    """{(name, ((label, value), ...)): float}"""
    out = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        m = _LINE.match(line)
        assert m, "not a Prometheus sample line: %r" % line
        labels = tuple(sorted(_LABEL.findall(m.group(3) or "")))
        out[(m.group(1), labels)] = float(m.group(4))
    return out


def _scrape(world):
    head, body = _http(os.path.join(world.daemon.run_dir, "metrics.sock"))
    expect(head.startswith("HTTP/1.1 200"), "status line: %r" % head[:80])
    expect("text/plain; version=0.0.4" in head, "content type: %r" % head)
    return _parse(body)


def _value(samples, name, **labels):
    return samples.get((name, tuple(sorted(labels.items()))))


def test_cpu_and_memory_peak_follow_a_busy_loop_and_an_allocation(world):
    with sandbox(world, "met", "--deny-all") as name:
        m0 = _scrape(world)
        cpu0 = _value(m0, "sandboxd_sandbox_cpu_seconds_total", sandbox=name)
        expect(cpu0 is not None, "cpu seconds of %s in %s" % (name, sorted(k for k in m0 if name in str(k))))
        g0 = get(world, name)[0]
        # A fixed amount of shell arithmetic (about 0.7 CPU seconds); the
        # shell's own `times` says how much CPU it used, whatever the load.
        t = time.monotonic()
        out = sh_ok(world, name, "i=0; while [ $i -lt 1000000 ]; do i=$((i+1)); done; times")
        wall = time.monotonic() - t
        mins = re.findall(r"(\d+)m([\d.]+)s", out.splitlines()[0])
        used = sum(int(a) * 60 + float(b) for a, b in mins)
        expect(used >= 0.2, "the loop used %.3f CPU s: %r" % (used, out))
        m1 = _scrape(world)
        cpu1 = _value(m1, "sandboxd_sandbox_cpu_seconds_total", sandbox=name)
        expect(cpu1 - cpu0 >= used * 0.9 and cpu1 - cpu0 <= wall + 1,
               "CPU seconds grew by %.3f; the loop used %.3f over %.1f s" % (cpu1 - cpu0, used, wall))
        g1 = get(world, name)[0]
        expect(g1["activeCpuUsageMs"] - g0["activeCpuUsageMs"] >= used * 900,
               "activeCpuUsageMs: %r -> %r" % (g0["activeCpuUsageMs"], g1["activeCpuUsageMs"]))

        # A 64 MiB string held by a shell: the peak goes past it and stays.
        peak0 = _value(m1, "sandboxd_sandbox_memory_peak_bytes", sandbox=name)
        expect(peak0 is not None and peak0 < 48 << 20, "peak before: %r" % peak0)
        sh_ok(world, name, "x=$(head -c 67108864 /dev/zero | tr '\\0' a); echo ${#x}")
        m2 = _scrape(world)
        peak = _value(m2, "sandboxd_sandbox_memory_peak_bytes", sandbox=name)
        cur = _value(m2, "sandboxd_sandbox_memory_bytes", sandbox=name)
        expect(peak >= 64 << 20, "peak after a 64 MiB allocation: %r" % peak)
        expect(cur < peak, "memory now (%r) below the peak (%r) once the shell exited" % (cur, peak))
        g2 = get(world, name)[0]
        expect(g2["memoryPeakBytes"] >= 64 << 20, "sandbox.get memoryPeakBytes: %r" % g2["memoryPeakBytes"])
        expect(g2["usage"]["pids"] >= 1, "pids: %r" % g2["usage"])
        expect(g2["usage"]["commandsStarted"] >= 2 and g2["usage"]["commandsRunning"] == 0,
               "commands: %r" % g2["usage"])
        expect_eq(_value(m2, "sandboxd_sandbox_commands_started_total", sandbox=name),
                  float(g2["usage"]["commandsStarted"]), "commands started, endpoint and sandbox.get")


def test_network_bytes_follow_a_transfer(world):
    size = 3 << 20
    with sandbox(world, "metnet", "--allow-all") as name:
        g0 = get(world, name)[0]["networkTransfer"]
        out = sh_ok(world, name, "curl -sS -m 30 -o /dev/null -w '%%{size_download}' http://%s/bytes/%d"
                    % (W.PUB_API_ADDR, size))
        expect_eq(out.strip(), str(size), "downloaded")
        g1 = get(world, name)[0]["networkTransfer"]
        expect(g1["ingress"] - g0["ingress"] >= size, "ingress %r -> %r" % (g0, g1))
        expect(g1["egress"] - g0["egress"] < size // 4, "egress stays small: %r -> %r" % (g0, g1))
        # An upload moves egress.
        out = sh_ok(world, name, "head -c 2097152 /dev/urandom > /tmp/up && curl -sS -m 30 -o /dev/null "
                    "-w '%%{http_code}' --data-binary @/tmp/up http://%s/up" % W.PUB_API_ADDR)
        expect_eq(out.strip(), "200", "upload")
        g2 = get(world, name)[0]["networkTransfer"]
        expect(g2["egress"] - g1["egress"] >= 2 << 20, "egress after a 2 MiB upload: %r -> %r" % (g1, g2))
        m = _scrape(world)
        expect(_value(m, "sandboxd_sandbox_network_receive_bytes_total", sandbox=name) >= g2["ingress"],
               "endpoint ingress")
        expect(_value(m, "sandboxd_sandbox_network_transmit_bytes_total", sandbox=name) >= g2["egress"],
               "endpoint egress")


def test_a_denial_is_counted_by_its_layer_and_rule(world):
    pol = _policy_file(world, {"allow": ["api.public.test"]})
    with sandbox(world, "metden", "--policy", pol) as name:
        c = world.daemon.connect(30)
        try:
            expect("result" in c.call("events.subscribe", {"sandbox": name, "kinds": ["denied"]}, 30), "subscribe")
            before = _scrape(world)
            code, _t = _connect(world, name, W.PUB_OTHER_ADDR)
            expect(code != 0, "the connect is refused")
            note = c.wait_note(lambda n: n.get("method") == "event" and n["params"].get("layer") == "nftables", 10)
        finally:
            c.close()
        p = note["params"]
        labels = dict(sandbox=name, layer=p["layer"], rule=p.get("rule") or "none")
        was = _value(before, "sandboxd_sandbox_denials_total", **labels) or 0
        poll(lambda: (_value(_scrape(world), "sandboxd_sandbox_denials_total", **labels) or 0) > was, 10,
             "denials_total%r grows" % labels)
        expect(get(world, name)[0]["usage"]["denials"] >= 1, "sandbox.get usage.denials")


def test_rpc_counts_and_latency_per_method(world):
    m0 = _scrape(world)
    n0 = _value(m0, "sandboxd_rpc_requests_total", method="daemon.info", outcome="ok") or 0
    e0 = _value(m0, "sandboxd_rpc_requests_total", method="sandbox.get", outcome="error") or 0
    for _ in range(3):
        world.daemon.rpc_result("daemon.info")
    world.daemon.rpc("sandbox.get", {"name": "no-such-sandbox-metrics"})
    m1 = _scrape(world)
    expect_eq(_value(m1, "sandboxd_rpc_requests_total", method="daemon.info", outcome="ok") - n0, 3.0,
              "daemon.info ok count")
    expect_eq(_value(m1, "sandboxd_rpc_requests_total", method="sandbox.get", outcome="error") - e0, 1.0,
              "sandbox.get error count")
    count = _value(m1, "sandboxd_rpc_request_duration_seconds_count", method="daemon.info")
    inf = _value(m1, "sandboxd_rpc_request_duration_seconds_bucket", method="daemon.info", le="+Inf")
    expect(count == inf and count >= 3, "histogram count %r, +Inf bucket %r" % (count, inf))


def test_only_root_and_the_group_may_read_on_either_endpoint(world):
    path = os.path.join(world.daemon.run_dir, "metrics.sock")
    st = os.stat(path)
    expect_eq(st.st_mode & 0o777, 0o660, "metrics socket mode")
    # nobody (not in the group): refused by the file mode (and by the peer check).
    p = subprocess.run(["python3", "-c", """
import os, socket, sys
os.setgroups([]); os.setgid(65534); os.setuid(65534)
s = socket.socket(socket.AF_UNIX)
try:
    s.connect(sys.argv[1]); s.sendall(b"GET /metrics HTTP/1.1\\r\\n\\r\\n"); print(repr(s.recv(100)))
except OSError as e:
    print("refused", e.errno)
""", path], capture_output=True, text=True, timeout=30)
    expect(p.stdout.startswith("refused") or p.stdout.strip() == "b''", "nobody read: %r %r" % (p.stdout, p.stderr))

    # The loopback TCP endpoint: the same audience, told apart by the owner
    # of the client socket (sock_diag).
    world.stop_sandboxd()
    port = 19464
    d = world.start_sandboxd({"metricsListen": "127.0.0.1:%d" % port}, tag="mettcp")
    client = """
import encodings.idna, os, socket, sys
if sys.argv[2] == "nobody":
    os.setgroups([]); os.setgid(65534); os.setuid(65534)
s = socket.create_connection(("127.0.0.1", int(sys.argv[1])), 10)
s.settimeout(10)
d = b""
try:
    s.sendall(b"GET /metrics HTTP/1.1\\r\\nHost: x\\r\\n\\r\\n")
    while True:
        b = s.recv(65536)
        if not b: break
        d += b
except OSError as e:
    d += ("error %d" % e.errno).encode()
sys.stdout.write(d.decode())
"""

    def tcp_get(who):
        return subprocess.run(["nsenter", "--net=/run/netns/" + d.netns, "python3", "-c", client, str(port), who],
                              capture_output=True, text=True, timeout=30)
    try:
        with sandbox(world, "mettcp", "--deny-all") as name:
            r = tcp_get("root")
            expect(r.stdout.startswith("HTTP/1.1 200"), "TCP scrape as root: %r %r" % (r.stdout[:200], r.stderr))
            expect('sandbox="%s"' % name in r.stdout, "root sees the sandbox's series over TCP")
            r = tcp_get("nobody")
            # Connected, then closed unanswered.
            expect(r.returncode == 0 and r.stderr == "" and (r.stdout == "" or r.stdout.startswith("error")),
                   "nobody over TCP: %r %r" % (r.stdout[:200], r.stderr[-300:]))
    finally:
        world.stop_sandboxd(d)
    # A member of the socket group (nobody's own group here) may.
    d = world.start_sandboxd({"metricsListen": "127.0.0.1:%d" % port, "socketGroup": "nogroup"}, tag="mettcp")
    try:
        r = tcp_get("nobody")
        expect(r.stdout.startswith("HTTP/1.1 200"), "nobody in the socket group: %r %r" % (r.stdout[:200], r.stderr))
    finally:
        world.stop_sandboxd(d)


def test_a_silent_client_does_not_hold_the_daemon(world):
    path = os.path.join(world.daemon.run_dir, "metrics.sock")
    silent = []
    try:
        for _ in range(20):  # more than the endpoint takes at once
            s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            silent.append(s)
            try:
                s.connect(path)
                s.sendall(b"GET /metr")  # half a request line, then nothing
            except (BrokenPipeError, ConnectionResetError):
                # One past what the endpoint takes at once may be closed
                # as soon as it is accepted: that is the bound at work.
                pass
        t = time.monotonic()
        expect(world.daemon.rpc_result("daemon.info") is not None, "RPC answers")
        expect(time.monotonic() - t < 5, "RPC answered while clients stall")
        # Once their deadline passes, the endpoint serves again.
        def served():
            try:
                return _http(path)[0].startswith("HTTP/1.1 200")
            except OSError:
                return False
        poll(served, 20, "the endpoint serves after the stalled clients' deadline")
        # A bad request gets an answer, not a hang.
        head, _b = _http(path, b"POST /metrics HTTP/1.1\r\nContent-Length: 0\r\n\r\n")
        expect(head.startswith("HTTP/1.1 405"), head[:60])
        head, _b = _http(path, b"GET /other HTTP/1.1\r\n\r\n")
        expect(head.startswith("HTTP/1.1 404"), head[:60])
    finally:
        for s in silent:
            s.close()


def test_top_json_is_one_shot_with_the_figures(world):
    with sandbox(world, "mettop", "--deny-all") as name:
        code, out, err = world.ctl("top", "--json")
        expect_eq(code, 0, "sandboxctl top --json: %s" % err)
        rows = json.loads(out)
        row = [r for r in rows if r["name"] == name]
        expect(len(row) == 1, "a row for %s in %s" % (name, out[:300]))
        for k in ("activeCpuUsageMs", "memoryPeakBytes", "networkTransfer", "usage", "status"):
            expect(k in row[0], "%s in %r" % (k, row[0]))


def test_a_request_in_pieces_is_answered(world):
    path = os.path.join(world.daemon.run_dir, "metrics.sock")
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(20)
    try:
        s.connect(path)
        for piece in (b"GET /met", b"rics?x=1 HTTP/1.1\r\nHo", b"st: a\r\n\r\n"):
            s.sendall(piece)
            time.sleep(0.05)  # not synchronisation: makes the pieces separate reads
        data = b""
        while True:
            b = s.recv(65536)
            if not b:
                break
            data += b
    finally:
        s.close()
    expect(data.startswith(b"HTTP/1.1 200"), "answer to a request sent in pieces: %r" % data[:80])


def test_top_table_refreshes_until_interrupted(world):
    with sandbox(world, "mettab", "--deny-all") as name:
        p = subprocess.Popen([W.SANDBOXCTL, "--socket", world.daemon.socket, "top", "--interval", "1"],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            lines = []
            deadline = time.monotonic() + 30
            # Two tables: the second has a CPU share (a refresh happened).
            def done():
                heads = [i for i, l in enumerate(lines) if l.startswith("NAME")]
                return len(heads) >= 2 and any(l.startswith(name) for l in lines[heads[1]:])
            while not done() and time.monotonic() < deadline:
                line = p.stdout.readline()
                if not line:
                    break
                lines.append(line)
        finally:
            p.kill()
            p.wait(10)
        tables = [i for i, l in enumerate(lines) if l.startswith("NAME")]
        expect(len(tables) >= 2, "two tables: %r %s" % (lines, p.stderr.read()[:300]))
        expect(all(h in lines[tables[0]] for h in ("CPU %", "MEM PEAK", "NET IN/OUT", "CMDS")), lines[tables[0]])
        rows = [l for l in lines[tables[0] + 1:tables[1] + 1] if l.startswith(name)]
        expect(len(rows) == 1, "a row for %s: %r" % (name, lines))
        second = [l for l in lines[tables[1] + 1:] if l.startswith(name)]
        expect(second and re.search(r"\d+\.\d%", second[0]), "the second table has a CPU share: %r" % second)


def test_reload_moves_and_stops_the_endpoint(world):
    world.stop_sandboxd()  # one daemon per network namespace
    d = world.start_sandboxd({}, tag="metrl")
    try:
        default = os.path.join(d.run_dir, "metrics.sock")
        expect(_http(default)[0].startswith("HTTP/1.1 200"), "served at the default path")
        other = os.path.join(d.dir, "other-metrics.sock")
        from test_reload import _hup, _rewrite
        _rewrite(d, metricsSocket=other)
        _hup(d, "applied; changed: metricsSocket")
        expect(not os.path.exists(default), "the old socket is gone")
        expect(_http(other)[0].startswith("HTTP/1.1 200"), "served at the new path")
        _rewrite(d, metrics=False)
        _hup(d, "applied; changed: metrics")
        expect(not os.path.exists(other), "metrics off: no socket")
    finally:
        world.stop_sandboxd(d)


def test_disk_used_follows_a_written_file(world):
    with sandbox(world, "metdisk", "--deny-all") as name:
        g0 = get(world, name)[0]["usage"]["diskUsedBytes"]
        if g0 is None:
            raise W.Skip("the daemon runs without disk images (diskMiB 0)")
        sh_ok(world, name, "head -c 33554432 /dev/urandom > /workspace/big && sync")
        g1 = get(world, name)[0]["usage"]["diskUsedBytes"]
        expect(g1 - g0 >= 32 << 20, "diskUsedBytes after writing 32 MiB: %r -> %r" % (g0, g1))
        expect_eq(_value(_scrape(world), "sandboxd_sandbox_disk_used_bytes", sandbox=name) >= g1, True,
                  "the endpoint's figure")
        sh_ok(world, name, "rm /workspace/big && sync")
        poll(lambda: get(world, name)[0]["usage"]["diskUsedBytes"] < g1 - (16 << 20), 20,
             "disk use falls after the file is removed")
