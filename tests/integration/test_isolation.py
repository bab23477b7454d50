"""Two daemons never step on each other: one sandboxd per network namespace
(a second one there is refused before it touches the first one's nftables
table or veths), one per state directory, and a daemon that shares the
first one's cgroup (another network namespace, another state dir) neither
sweeps nor reuses the first one's session cgroups."""
import os
import subprocess

import world as W
from common import expect, expect_eq, sandbox, sh_ok

REFUSED_NETNS = ("another sandboxd (pid %d) manages this network namespace; "
                 "give each daemon its own network namespace")


def _start_refused(d):
    """Starts daemon d, which must exit at start; returns its log."""
    try:
        d.start(deadline_s=20.0)
    except W.WorldError:
        return d.log_tail(20)
    d.stop()
    raise AssertionError("a second sandboxd started where it must be refused")


def _table_present(world, ns=None):
    argv = ["nft", "list", "table", "inet", "sandboxd"]
    if ns:
        return subprocess.run(["ip", "netns", "exec", ns] + argv, capture_output=True,
                              stdin=subprocess.DEVNULL).returncode == 0
    return world.run_in_host(argv).returncode == 0


def _session_dirs(world, name):
    """Every cgroup directory named `name` below a sandboxd-sessions* parent
    of this world's cgroups."""
    found = []
    for top in world.cgroup_dirs:
        for root, dirs, _files in W.walk(top):
            if os.path.basename(root).startswith("sandboxd-sessions"):
                found += [os.path.join(root, x) for x in dirs if x == name]
                dirs[:] = []
    return found


def _session_parents(world):
    found = set()
    for top in world.cgroup_dirs:
        for root, dirs, _files in W.walk(top):
            if os.path.basename(root).startswith("sandboxd-sessions"):
                found.add(root)
                dirs[:] = []
    return found


def test_second_daemon_in_the_same_network_namespace_is_refused_and_the_first_keeps_working(world):
    first = world.daemon
    with sandbox(world, "iso-netns", "--deny-all") as name:
        expect_eq(sh_ok(world, name, "echo before").strip(), "before", "exec before")
        second = world.add_sandboxd(tag="second")
        log = _start_refused(second)
        expect(second.proc.returncode != 0, "refused daemon's exit status:", second.proc.returncode)
        expect(REFUSED_NETNS % first.pid in log, "refusal message not in the log:\n", log)
        # The refused daemon touched nothing of the first one's.
        expect(first.alive(), "first sandboxd died")
        expect(_table_present(world), "the first daemon's nftables table is gone")
        expect_eq(sh_ok(world, name, "echo after").strip(), "after", "exec after the refusal")
        expect(_session_dirs(world, name), "the sandbox's session cgroup is gone")


def test_daemon_sharing_the_cgroup_from_another_netns_leaves_the_first_daemons_sessions_alone(world):
    ns = "sbxw-alt-" + world.id
    subprocess.run(["ip", "netns", "add", ns], check=True, capture_output=True)
    world.netns_made.append(ns)
    try:
        with sandbox(world, "iso-cg", "--deny-all") as name:
            sh_ok(world, name, "echo up")
            parents_before = _session_parents(world)
            # Same cgroup (the world's), another network namespace and state
            # dir: it starts, and its start-up sweep must not reach our session.
            second = world.add_sandboxd(tag="alt", netns=ns)
            second.start()
            try:
                expect_eq(sh_ok(world, name, "echo still").strip(), "still", "exec after the second start")
                # The same sandbox name in the second daemon is another cgroup.
                code, _o, err = second.ctl("create", "--name", name, "--deny-all", timeout=180)
                expect_eq(code, 0, "create of the same name in the second daemon (%s)" % err.strip())
                dirs = _session_dirs(world, name)
                expect_eq(len(set(os.path.dirname(d) for d in dirs)) >= 2, True,
                          "distinct session parents for %s (%s)" % (name, dirs))
                code, _o, err = second.ctl("rm", name)
                expect_eq(code, 0, "rm in the second daemon (%s)" % err.strip())
            finally:
                rc = second.stop()
            expect_eq(rc, 0, "second sandboxd exit status (log:\n%s\n)" % second.log_tail(20))
            # Its shutdown removed its own table, in its own namespace only.
            expect(not _table_present(world, ns), "the second daemon left its table")
            expect_eq(_session_parents(world), parents_before,
                      "session parent cgroups after the second daemon stopped")
            expect(_table_present(world), "the first daemon's table went with the second daemon")
            expect_eq(sh_ok(world, name, "echo alive").strip(), "alive", "exec after the second stopped")
            expect(_session_dirs(world, name), "the first daemon's session cgroup is gone")
    finally:
        subprocess.run(["ip", "netns", "del", ns], capture_output=True)
        if ns in world.netns_made:
            world.netns_made.remove(ns)


def test_second_daemon_on_the_same_state_dir_is_refused(world):
    first = world.daemon
    ns = "sbxw-alt-" + world.id
    subprocess.run(["ip", "netns", "add", ns], check=True, capture_output=True)
    world.netns_made.append(ns)
    try:
        with sandbox(world, "iso-state", "--deny-all") as name:
            second = world.add_sandboxd(tag="same-state", netns=ns, state_dir=first.state_dir)
            log = _start_refused(second)
            expect("another sandboxd uses the state directory %s" % first.state_dir in log,
                   "refusal message not in the log:\n", log)
            expect(os.path.isdir(os.path.join(first.state_dir, "sandboxes", name)),
                   "the refused daemon removed the first one's sandbox")
            expect_eq(sh_ok(world, name, "echo ok").strip(), "ok", "exec after the refusal")
    finally:
        subprocess.run(["ip", "netns", "del", ns], capture_output=True)
        if ns in world.netns_made:
            world.netns_made.remove(ns)
