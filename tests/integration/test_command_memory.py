"""Attack: finished commands with maximal args/cwd are kept (up to 4096 of
them) with no memory budget: each costs the root daemon ~470 KiB (the args
as a tree of 4095 cJSON strings), and command.list of 1000 of them builds a
~74 MB answer. A bounded daemon keeps this within a budget, as it does for
command logs (logBudgetMiB)."""
import json
import socket
import time

from common import expect, sandbox


def _rss_kib(pid):
    with open("/proc/%d/status" % pid) as f:
        return int([l for l in f if l.startswith("VmRSS")][0].split()[1])


def test_attack_finished_commands_with_huge_args_stay_within_a_memory_budget(world):
    d = world.daemon
    with sandbox(world, "hoard", "--deny-all") as name:
        pid = d.proc.pid
        before = _rss_kib(pid)
        args = ["A" * 14] * 4095  # within maxArgs/maxArgsBytes
        n = 300
        s = socket.socket(socket.AF_UNIX)
        s.connect(d.socket)
        f = s.makefile("rb")
        try:
            for start in range(0, n, 50):
                for i in range(start, start + 50):
                    s.sendall((json.dumps({"jsonrpc": "2.0", "id": i, "method": "command.run",
                                           "params": {"sandbox": name, "cmd": "true", "args": args,
                                                      "cwd": "/" + "c" * 4000}}) + "\n").encode())
                got = 0
                while got < 50:
                    m = json.loads(f.readline())
                    if "id" in m:
                        expect("result" in m, "command.run:", json.dumps(m)[:300])
                        got += 1
            time.sleep(2)
            grown = _rss_kib(pid) - before
            # 4096 such commands at this rate would be 16x this growth.
            expect(grown < 64 * 1024, "daemon RSS growth (KiB) for %d finished commands with large args:" % n, grown)
        finally:
            s.close()


test_attack_finished_commands_with_huge_args_stay_within_a_memory_budget.timeout = 170
