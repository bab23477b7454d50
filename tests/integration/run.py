#!/usr/bin/env python3
"""Integration test runner: the real sandboxd, sandbox-init and sandboxctl in
the test world (DESIGN §8).

    python3 tests/integration/run.py [-v] [SUBSTRING...]

Discovers tests/integration/test_*.py; every function named test_* takes one
argument, the shared World (with a running sandboxd as world.daemon), and
fails by raising. world.Skip skips. One line per test (PASS/FAIL/SKIP), then
"integration: N passed, N failed[, N skipped]". Exit 1 on any failure.

Tests are independent: each makes its own sandboxes with unique names and
deletes them. A test that stops or replaces the daemon leaves a running one
behind (the runner restarts it if not).
"""
import importlib
import os
import signal
import sys
import time
import traceback

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import world as W  # noqa: E402

# Seconds a test may run before it is stopped as hung; a test may set
# fn.timeout to more. Only a guard against a hang: every wait in a test has
# its own deadline, and a test that takes a minute alone takes several on
# a machine whose CPUs are all busy (the captures' copies, for one, yield
# the CPU to everything else).
TEST_TIMEOUT = 600


def discover(filters):
    tests = []
    for fname in sorted(os.listdir(HERE)):
        if not (fname.startswith("test_") and fname.endswith(".py")):
            continue
        mod = importlib.import_module(fname[:-3])
        fns = [(getattr(mod, n).__code__.co_firstlineno, n, getattr(mod, n))
               for n in dir(mod) if n.startswith("test_") and callable(getattr(mod, n))]
        for _line, n, fn in sorted(fns):
            full = "%s.%s" % (fname[:-3], n)
            if not filters or any(f in full for f in filters):
                tests.append((full, fn))
    return tests


class _Timeout(Exception):
    pass


def _alarm(signum, frame):
    raise _Timeout("test took longer than its limit")


def one_line(e):
    s = "%s: %s" % (type(e).__name__, e) if not isinstance(e, AssertionError) else str(e)
    s = " | ".join(x.strip() for x in s.splitlines() if x.strip())
    return s[:600] if s else type(e).__name__


def main(argv):
    verbose = "-v" in argv
    filters = [a for a in argv if not a.startswith("-")]
    tests = discover(filters)
    passed = failed = skipped = 0
    t0 = time.monotonic()
    if os.geteuid() != 0:
        print("integration: needs root (network namespaces, cgroups)")
        print("integration: 0 passed, 0 failed, %d skipped" % len(tests))
        return 1
    signal.signal(signal.SIGALRM, _alarm)
    world = W.World(quiet=False)
    try:
        world.open()
    except Exception as e:
        print("FAIL world: %s" % one_line(e))
        print("integration: 0 passed, %d failed" % len(tests))
        return 1
    try:
        for name, fn in tests:
            start = time.monotonic()
            try:
                if world.daemon is None or not world.daemon.alive():
                    world.start_sandboxd()
                signal.alarm(max(TEST_TIMEOUT, getattr(fn, "timeout", 0)))
                try:
                    fn(world)
                finally:
                    signal.alarm(0)
            except W.Skip as e:
                skipped += 1
                print("SKIP %s: %s" % (name, e), flush=True)
                continue
            except (KeyboardInterrupt, SystemExit):
                raise  # SIGINT/SIGTERM: the world is torn down, stop here
            except BaseException as e:  # a test's SystemExit is a failure too
                failed += 1
                print("FAIL %s: %s" % (name, one_line(e)), flush=True)
                if verbose:
                    traceback.print_exc(file=sys.stdout)
                d = world.daemon
                if d is not None:
                    if not d.alive():
                        print("    sandboxd exited with %s" % d.proc.returncode)
                    tail = d.log_tail(15 if not verbose else 60)
                    if tail.strip():
                        print("    sandboxd log (last lines):")
                        for line in tail.splitlines():
                            print("      " + line)
                    sys.stdout.flush()
                continue
            passed += 1
            print("PASS %s (%.1fs)" % (name, time.monotonic() - start) if verbose
                  else "PASS %s" % name, flush=True)
    finally:
        world.close()
        for e in getattr(world, "teardown_errors", []):
            print("world teardown: %s" % e)
    summary = "integration: %d passed, %d failed" % (passed, failed)
    if skipped:
        summary += ", %d skipped" % skipped
    if verbose:
        print("(%.0fs)" % (time.monotonic() - t0))
    print(summary)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
