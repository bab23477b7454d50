"""What a command sees inside a sandbox (DESIGN §4)."""
import os

from common import expect, expect_eq, sandbox, sandbox_user_ids, sh, sh_ok


def test_pid1_is_sandbox_init(world):
    with sandbox(world, "pid1", "--deny-all") as name:
        out = sh_ok(world, name, "cat /proc/1/comm; tr '\\0' ' ' < /proc/1/cmdline")
        expect("sandbox-init" in out, "PID 1 should be sandbox-init, /proc/1 says:", out.strip())


def test_proc_lists_only_sandbox_processes(world):
    with sandbox(world, "proc", "--deny-all") as name:
        out = sh_ok(world, name, "ls /proc | grep '^[0-9]' | tr '\\n' ' '")
        pids = [int(x) for x in out.split()]
        expect(len(pids) <= 6, "sandbox /proc lists too many processes:", pids)
        expect(1 in pids, "PID 1 missing from the sandbox's /proc:", pids)
        # The daemon's own pid (as the host numbers it) must not be visible as
        # the daemon: whatever has that number inside is not sandboxd.
        d = world.daemon.pid
        if d in pids:
            comm = sh_ok(world, name, "cat /proc/%d/comm" % d).strip()
            expect(comm != "sandboxd", "sandboxd is visible inside the sandbox")


def test_hostname_is_sandbox_name(world):
    with sandbox(world, "uts", "--deny-all") as name:
        expect_eq(sh_ok(world, name, "hostname").strip(), name, "hostname")


def test_commands_run_as_the_sandbox_user(world):
    """uid 1000 inside with a user namespace, the host's sandboxd-user
    account without one (never host uid 1000); named `sandbox` either way."""
    with sandbox(world, "uid", "--deny-all") as name:
        expect_eq(sh_ok(world, name, "id -u; id -g; id -un").split(),
                  [str(i) for i in sandbox_user_ids(world)] + ["sandbox"], "id -u, -g, -un")


def test_sudo_runs_as_root(world):
    with sandbox(world, "sudo", "--deny-all") as name:
        expect_eq(sh_ok(world, name, "id -u", "--sudo").strip(), "0", "id -u with --sudo")


def test_host_paths_outside_usr_are_invisible(world):
    secret = os.path.join(world.tmp, "host-secret")
    with open(secret, "w") as f:
        f.write("secret\n")
    with sandbox(world, "hostpath", "--deny-all") as name:
        code, out, _err = sh(world, name, "ls -d %s %s; cat %s" % (world.tmp, secret, secret),
                             "--sudo")
        expect(code != 0 and "secret" not in out,
               "host temp dir visible inside the sandbox:", out.strip()[:200])
        # /work (the checkout) is not under /usr either.
        code, out, _err = sh(world, name, "ls /work/main/Makefile", "--sudo")
        expect(code != 0, "host checkout visible inside the sandbox:", out.strip())


def test_root_write_to_etc_stays_inside(world):
    marker = "sbx-etc-%s" % world.id
    with sandbox(world, "etc", "--deny-all") as name:
        sh_ok(world, name, "echo inside > /etc/%s && cat /etc/%s" % (marker, marker), "--sudo")
        expect(not os.path.exists("/etc/" + marker), "a write to /etc inside reached the host")
        r = world.run_in_host(["test", "-e", "/etc/" + marker])
        expect(r.returncode != 0, "a write to /etc inside reached the world host")
    expect(not os.path.exists("/etc/" + marker), "a write to /etc inside reached the host")


def test_root_write_to_usr_stays_inside(world):
    target = "/usr/bin/sbx-%s" % world.id
    with sandbox(world, "usr", "--deny-all") as name:
        sh(world, name, "touch %s" % target, "--sudo")
        expect(not os.path.exists(target), "a root write to /usr inside reached the host's /usr")
