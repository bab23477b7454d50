"""The egress policy engine at scale: 200 sessions' policies created,
updated and deleted leave the nftables ruleset exactly as it started, and
each policy keeps working while many others are loaded (DESIGN §5.2:
per-session elements of the shared sets and maps only, nothing left
behind)."""
import re
import time

import world as W
from common import expect, expect_eq
from test_policy_rules import NXDOMAIN, _blocked, dns

TOTAL = 200
BATCH = 100  # sessions alive at once (each runs its own DNS filter; more than the 64 host addresses sandbox-netd once took)


def _ruleset(world):
    return world.run_in_host(["nft", "list", "ruleset"], check=True).stdout


def _session_chains(text):
    """The custom sessions: their elements `"sbx<n>" : goto custom` of the
    `sessions` map (no session has a chain of its own)."""
    return sorted(re.findall(r'"(sbx\d+)" : goto custom\b', text))


def _deny_addresses(text):
    """The first address of every range of the keyed sets deny4 and
    deny4_b (policy/nftgen.h: nft prints a key as a big-endian integer,
    the interface name's 16 bytes, then the address)."""
    out = []
    for m in re.finditer(r"^\tset (deny4|deny4_b) \{\n(.*?)^\t\}", text, re.M | re.S):
        for num in re.findall(r"(\d{30,})(?:-\d+)?", m.group(2)):
            a = int(num).to_bytes(20, "big")[16:]
            out.append(".".join(str(b) for b in a))
    return out


def _pipelined(conn, method, params_list, timeout=300):
    """Sends every request before reading any answer; returns the responses
    in order."""
    ids = [conn.start(method, p) for p in params_list]
    return [conn.wait(i, timeout) for i in ids]


def _umask(world):
    with open("/proc/%d/status" % world.daemon.pid) as f:
        return next(line.split()[1] for line in f if line.startswith("Umask:"))


def test_200_sessions_policies_created_updated_and_deleted_leave_the_ruleset_as_it_was(world):
    # The test before may have just deleted its sandbox: a delete answers
    # once the session is fenced and removes its chains right after. One
    # that never goes fails here.
    W.World.wait_until(lambda: not _session_chains(_ruleset(world)), 30,
                       "the chains of the sessions deleted before this test to go")
    before = _ruleset(world)
    umask = _umask(world)
    expect_eq(_session_chains(before), [], "session chains before the test (another test left one)")
    t0 = time.monotonic()
    done = 0
    with world.daemon.connect(timeout=300) as c:
        while done < TOTAL:
            names = [world.name("scale%d" % (done + i)) for i in range(BATCH)]
            pols = [{"allow": ["api.public.test"], "subnets": {"deny": ["5.5.5.%d/32" % (100 + i)]}}
                    for i in range(BATCH)]
            made = []
            try:
                res = _pipelined(c, "sandbox.create",
                                 [{"name": n, "networkPolicy": p} for n, p in zip(names, pols)])
                made = [n for n, r in zip(names, res) if "result" in r]
                errs = [r["error"] for r in res if "error" in r]
                expect_eq(errs, [], "create errors in batch at %d" % done)
                text = _ruleset(world)
                chains = _session_chains(text)
                expect_eq(len(chains), BATCH, "custom sessions with %d created" % BATCH)
                loaded = [a for a in _deny_addresses(text) if re.match(r"5\.5\.5\.1\d\d$", a)]
                expect_eq(len(loaded), BATCH, "subnets.deny elements of %d custom sessions" % BATCH)
                upd = _pipelined(c, "sandbox.update",
                                 [{"name": n, "networkPolicy": {"allow": ["other.public.test"]}} for n in names])
                errs = [r["error"] for r in upd if "error" in r]
                expect_eq(errs, [], "update errors in batch at %d" % done)
                text = _ruleset(world)
                expect_eq(_session_chains(text), chains, "session chains after the updates (old ones replaced)")
                left = [a for a in _deny_addresses(text) if re.match(r"5\.5\.5\.1\d\d$", a)]
                expect_eq(left, [], "subnets.deny elements of the replaced policies still loaded")
                # The last session of the batch answers by its new policy.
                last = names[-1]
                expect_eq(dns(world, last, "other.public.test")["addrs"], [W.PUB_OTHER_ADDR],
                          "the updated policy of %s with %d sessions loaded" % (last, BATCH))
                _blocked(dns(world, last, "api.public.test"), NXDOMAIN)
            finally:
                dels = _pipelined(c, "sandbox.delete", [{"name": n} for n in made])
            errs = [r["error"] for r in dels if "error" in r]
            expect_eq(errs, [], "delete errors in batch at %d" % done)
            # Sessions start on concurrent worker threads; none of them may
            # change the process-wide umask (a race once left it at 0177,
            # and every later sandbox's directories unreadable inside).
            expect_eq(_umask(world), umask, "the daemon's umask after batch %d" % done)
            done += BATCH
    # A delete answers once its session is fenced; the session's chains
    # and sets go right after.
    W.World.wait_until(lambda: not _session_chains(_ruleset(world)), 120, "every deleted session's chains to go")
    after = _ruleset(world)
    expect_eq(_session_chains(after), [], "session chains after every delete")
    expect_eq(len(after.splitlines()), len(before.splitlines()),
              "nft list ruleset | wc -l before and after %d sessions (%.0fs)" % (TOTAL, time.monotonic() - t0))
    expect_eq(after, before, "the ruleset after %d sessions" % TOTAL)


test_200_sessions_policies_created_updated_and_deleted_leave_the_ruleset_as_it_was.timeout = 600
