"""Runs last: after every test deleted its sandboxes, nothing of any is left."""
import leaks


def test_nothing_left_after_all_tests(world):
    leaks.check(world, "all")


def test_daemon_shuts_down_cleanly(world):
    """SIGTERM ends sandboxd with status 0. Under `make integration-asan` a
    memory error or leak at exit makes the status non-zero and fails this."""
    from common import expect_eq
    d = world.daemon
    rc = world.stop_sandboxd(d)
    tail = d.log_tail(40)
    world.start_sandboxd()
    expect_eq(rc, 0, "sandboxd exit status on SIGTERM (log:\n%s\n)" % tail)
