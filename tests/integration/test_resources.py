"""Resource limits inside a sandbox: a memory hog dies alone (exit 137), a
full /tmp is a full disk, and the session and the daemon carry on."""
from common import expect, expect_eq, sandbox, sh

HOG = ("python3 -c \"b=[]\n"
       "while True: b.append(bytearray(64 << 20))\"")


def test_memory_hog_is_oom_killed_and_the_session_survives(world):
    # 1 vCPU = 2048 MiB of memory for the session.
    with sandbox(world, "oom", "--deny-all", "--vcpus", "1") as name:
        code, _out, err = sh(world, name, HOG, timeout=180)
        expect_eq(code, 137, "exit code of the memory hog (%s)" % err.strip()[-200:])
        code, out, err = sh(world, name, "echo still-here")
        expect_eq((code, out), (0, "still-here\n"), "the session after the OOM kill (%s)" % err.strip())
        info = world.rpc("daemon.info", {})
        expect("result" in info, "daemon answers after the OOM kill:", info)


def test_tmp_is_bounded_below_the_memory_limit(world):
    with sandbox(world, "tmpfull", "--deny-all", "--vcpus", "1") as name:
        code, _out, err = sh(world, name, "dd if=/dev/zero of=/tmp/big bs=1M count=3000", timeout=180)
        expect(code != 0 and "No space left" in err, "filling /tmp ends with ENOSPC:", code, err.strip()[-200:])
        code, out, err = sh(world, name, "rm -f /tmp/big; echo still-here")
        expect_eq((code, out), (0, "still-here\n"), "the session after /tmp filled up (%s)" % err.strip())
