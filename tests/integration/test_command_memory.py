"""What the daemon keeps of finished commands stays within a byte budget
(docs/API.md "Limits": 32 MiB of kept command records, args and cwd
included, oldest finished forgotten first), and command.list pages are
bounded in bytes as well as in count (4 MiB of commands, the cursor goes
on)."""
import os
import json
import socket

from common import expect, expect_eq, sandbox

ARGS = ["A" * 14] * 4095  # within maxArgs/maxArgsBytes: ~61 KB
CWD = "/" + "c" * 4000


def _rss_kib(pid):
    with open("/proc/%d/status" % pid) as f:
        return int([l for l in f if l.startswith("VmRSS")][0].split()[1])


class _Conn:
    def __init__(self, path):
        self.s = socket.socket(socket.AF_UNIX)
        self.s.connect(path)
        self.f = self.s.makefile("rb")
        self.answers = {}

    def send(self, id_, method, params):
        self.s.sendall((json.dumps({"jsonrpc": "2.0", "id": id_, "method": method, "params": params}) + "\n").encode())

    def answer(self, id_):
        """The raw answer line to request id_ and its parsed message; answers
        come in completion order, so those of other ids are kept for later."""
        while id_ not in self.answers:
            line = self.f.readline()
            expect(line, "the daemon closed the connection")
            m = json.loads(line)
            if "id" in m:
                self.answers[m["id"]] = (line, m)
        return self.answers.pop(id_)

    def close(self):
        self.s.close()


def _run_many(conn, name, n, batch=50):
    for start in range(0, n, batch):
        ids = list(range(start, min(n, start + batch)))
        for i in ids:
            conn.send(i, "command.run", {"sandbox": name, "cmd": "true", "args": ARGS, "cwd": CWD})
        for i in ids:
            _, m = conn.answer(i)
            expect("result" in m, "command.run:", json.dumps(m)[:300])


def test_finished_commands_with_huge_args_stay_within_the_kept_bytes_budget(world):
    d = world.daemon
    with sandbox(world, "hoard", "--deny-all", "--timeout", "1h") as name:
        pid = d.proc.pid
        before = _rss_kib(pid)
        conn = _Conn(d.socket)
        try:
            # 600 such commands are ~40 MiB of args and cwd alone (~280 MiB
            # as cJSON trees); the budget keeps 32 MiB of them. The bound
            # leaves room for the requests in flight (50 parsed lines) and
            # the allocator; the count below checks the budget itself.
            _run_many(conn, name, 600)
            grown = _rss_kib(pid) - before
            # Under AddressSanitizer (make integration-asan) freed memory
            # sits in its quarantine and shadow: the bound is for the real
            # build (as test_rpc's flood bounds are).
            if "ASAN_OPTIONS" not in os.environ:
                expect(grown < 128 * 1024, "daemon RSS growth (KiB) for 600 finished commands with large args:",
                       grown)

            # command.list: pages bounded in bytes, the cursor goes on, and
            # the pages together list what is kept, once each.
            seen, cursor, pages = [], None, 0
            while True:
                params = {"name": name}
                if cursor:
                    params["cursor"] = cursor
                conn.send("L%d" % pages, "command.list", params)
                line, m = conn.answer("L%d" % pages)
                pages += 1
                expect("result" in m, "command.list:", json.dumps(m)[:300])
                expect(len(line) < 6 * 1024 * 1024, "command.list answer bytes:", len(line))
                for c in m["result"]["commands"]:
                    expect_eq(c["args"], ARGS, "args of a kept command")
                    expect_eq(c["cwd"], CWD, "cwd of a kept command")
                    seen.append(c["cmdId"])
                cursor = m["result"]["nextCursor"]
                if cursor is None:
                    break
                expect(pages < 100, "command.list pages never end")
            expect(pages > 1, "one command.list page held every kept command:", len(seen))
            expect_eq(len(set(seen)), len(seen), "commands listed twice")
            expect(100 < len(seen) < 600, "kept commands (the budget forgets the oldest):", len(seen))
            # The newest are the ones kept: the last command run is listed first.
            conn.send("G", "command.get", {"cmdId": seen[0]})
            _, m = conn.answer("G")
            expect("result" in m, "command.get of the newest:", json.dumps(m)[:300])
        finally:
            conn.close()


test_finished_commands_with_huge_args_stay_within_the_kept_bytes_budget.timeout = 1200
