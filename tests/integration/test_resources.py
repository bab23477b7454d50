"""Resource limits inside a sandbox: a memory hog dies alone (exit 137), the
session and the daemon carry on."""
from common import expect, expect_eq, sandbox, sh


def test_memory_hog_in_tmpfs_is_oom_killed_and_the_session_survives(world):
    # 1 vCPU = 2048 MiB of memory; /tmp is a tmpfs charged to the session.
    with sandbox(world, "oom", "--deny-all", "--vcpus", "1") as name:
        code, _out, err = sh(world, name, "dd if=/dev/zero of=/tmp/big bs=1M count=3000 2>/dev/null",
                             timeout=180)
        expect_eq(code, 137, "exit code of the memory hog (%s)" % err.strip()[:200])
        code, out, err = sh(world, name, "rm -f /tmp/big; echo still-here")
        expect_eq((code, out), (0, "still-here\n"), "the session after the OOM kill (%s)" % err.strip())
        info = world.rpc("daemon.info", {})
        expect("result" in info, "daemon answers after the OOM kill:", info)
