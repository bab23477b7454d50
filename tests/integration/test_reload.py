"""Reload (SIGHUP, `systemctl reload sandboxd`; sandboxd(8) SIGNALS): the
daemon reads daemon.json again and applies the keys that may change live
(limits for new sandboxes, logLevel, the metrics keys); a file that does not
load is refused whole, its reason logged, and the configuration in force
kept; a changed key that needs a restart keeps its old value and is named."""
import json
import os
import signal

import world as W
from common import expect, expect_eq, create, delete


def _rewrite(d, **changes):
    path = os.path.join(d.dir, "daemon.json")
    with open(path) as f:
        cfg = json.load(f)
    cfg.update(changes)
    with open(path, "w") as f:
        json.dump(cfg, f)
    return path


def _log_has(d, needle, after):
    with open(d.log_path, "rb") as f:
        f.seek(after)
        return needle in f.read().decode(errors="replace")


def _hup(d, needle):
    """SIGHUP to the daemon (by pid) and wait for its log line."""
    at = os.path.getsize(d.log_path)
    os.kill(d.pid, signal.SIGHUP)
    W.World.wait_until(lambda: _log_has(d, needle, at), 20, "log line %r after SIGHUP" % needle)
    return at


def _max_vcpus(d):
    return d.rpc_result("daemon.info")["limits"]["maxVcpus"]


def test_reload_applies_a_good_file_and_refuses_a_bad_one(world):
    world.stop_sandboxd()  # one daemon per network namespace
    d = world.start_sandboxd({"maxVcpus": 1}, tag="reload")
    try:
        expect_eq(_max_vcpus(d), 1, "maxVcpus at start")
        code, _out, err = d.ctl("create", "--name", world.name("rl1"), "--vcpus", "2", "--deny-all")
        expect(code != 0 and "(1 to 1)" in err, "2 vCPUs refused under maxVcpus 1: %d %s" % (code, err))

        # A good file: the new limit holds for the next sandbox.
        _rewrite(d, maxVcpus=2)
        _hup(d, "reload: ")
        expect(_log_has(d, "changed: maxVcpus", 0), "the log names the changed key:\n" + d.log_tail(5))
        expect_eq(_max_vcpus(d), 2, "maxVcpus after the reload")
        name = world.name("rl2")
        code, out, err = d.ctl("--json", "create", "--name", name, "--vcpus", "2", "--deny-all", timeout=180)
        try:
            expect_eq(code, 0, "create with 2 vCPUs after the reload: %s" % err)
        finally:
            d.ctl("rm", name)

        # A bad file: refused with the reason, the old configuration kept.
        _rewrite(d, maxVcpus=0)
        at = _hup(d, "refused, the configuration in force is kept")
        expect(_log_has(d, "maxVcpus: must be an integer from 1 to 256", at),
               "the reason is logged:\n" + d.log_tail(5))
        expect(d.alive(), "the daemon still runs")
        expect_eq(_max_vcpus(d), 2, "maxVcpus kept")

        # Not JSON at all: the same.
        with open(os.path.join(d.dir, "daemon.json"), "w") as f:
            f.write("{")
        at = _hup(d, "refused, the configuration in force is kept")
        expect(_log_has(d, "not valid JSON", at), d.log_tail(5))
        expect_eq(_max_vcpus(d), 2, "maxVcpus kept")
    finally:
        world.stop_sandboxd(d)


def test_reload_keeps_keys_that_need_a_restart_and_names_them(world):
    world.stop_sandboxd()  # one daemon per network namespace
    d = world.start_sandboxd({"maxLineBytes": 65536}, tag="reload")
    try:
        _rewrite(d, maxLineBytes=4096, pidsMax=100)
        at = _hup(d, "reload: ")
        expect(_log_has(d, "need a restart, old values kept: maxLineBytes", at), d.log_tail(5))
        info = d.rpc_result("daemon.info")["limits"]
        expect_eq(info["maxLineBytes"], 65536, "maxLineBytes needs a restart")
        expect_eq(info["pidsMax"], 100, "pidsMax applies live")
    finally:
        world.stop_sandboxd(d)


def test_reload_changes_the_log_level(world):
    world.stop_sandboxd()  # one daemon per network namespace
    d = world.start_sandboxd({"logLevel": "info", "maxLineBytes": 65536}, tag="reload")
    try:
        # At warning, the info line of the reload itself is no longer written.
        # The warning naming a kept key still is: the marker that the
        # reload was handled.
        _rewrite(d, logLevel="warning", maxLineBytes=4096)
        at = _hup(d, "need a restart, old values kept: maxLineBytes")
        expect(not _log_has(d, "applied; changed", at), "an info line at level warning:\n" + d.log_tail(5))
        _rewrite(d, logLevel="info")
        _hup(d, "applied; changed: logLevel")
    finally:
        world.stop_sandboxd(d)


def test_reload_of_a_fifo_is_refused_without_blocking_the_loop(world):
    """daemon.json replaced by a FIFO nobody writes: the reload must not
    wait for a writer (the event loop would stop serving); it is refused
    with the reason logged and the configuration in force kept."""
    world.stop_sandboxd()  # one daemon per network namespace
    d = world.start_sandboxd({"maxVcpus": 1}, tag="reload")
    path = os.path.join(d.dir, "daemon.json")
    with open(path) as f:
        saved = f.read()
    try:
        os.unlink(path)
        os.mkfifo(path, 0o600)
        _hup(d, "not a regular file (a FIFO)")
        expect_eq(_max_vcpus(d), 1, "served, with maxVcpus kept, after the refused reload")
    finally:
        try:
            # A daemon stuck in open() gets a writer, so it can go on.
            fd = os.open(path, os.O_WRONLY | os.O_NONBLOCK)
            os.write(fd, b"{}")
            os.close(fd)
        except OSError:
            pass
        os.unlink(path)
        with open(path, "w") as f:
            f.write(saved)
        world.stop_sandboxd(d)
