"""Runs last: after every test deleted its sandboxes, nothing of any is left."""
import leaks


def test_nothing_left_after_all_tests(world):
    leaks.check(world, "all")
