"""The cgroup driver (daemon.json cgroupDriver; libcore/cgroup.h): chosen at
start and shown in daemon.info; systemd is taken only where systemd is the
service manager, and forcing it where it is not stops the start with a
message naming the key. (Under a real systemd: tests/systemd/.)"""
import os

import world as W
from common import expect, expect_eq


def _systemd_is_pid1():
    try:
        with open("/proc/1/comm") as f:
            return f.read().strip() == "systemd" and os.path.isdir("/run/systemd/system")
    except OSError:
        return False


def test_daemon_info_names_the_driver_chosen_at_start(world):
    info = world.daemon.rpc_result("daemon.info")
    expect_eq(info["capabilities"]["cgroupDriver"], "systemd" if _systemd_is_pid1() else "cgroupfs",
              "cgroupDriver under auto on this host")


def test_forcing_systemd_where_it_is_not_the_service_manager_fails_at_start(world):
    if _systemd_is_pid1():
        raise W.Skip("systemd is PID 1 here: the driver works (tests/systemd/ covers it)")
    world.stop_sandboxd()  # one daemon per network namespace
    d = world.add_sandboxd({"cgroupDriver": "systemd"}, tag="sysd")
    try:
        try:
            d.start()
            started = True
        except W.WorldError:
            started = False
        expect(not started, "sandboxd started with cgroupDriver systemd and no systemd")
        with open(d.log_path, errors="replace") as f:
            log = f.read()
        expect("cgroupDriver systemd" in log and "D-Bus" in log,
               "the error names the key and what is missing:\n" + log[-1500:])
    finally:
        world.stop_sandboxd(d)
