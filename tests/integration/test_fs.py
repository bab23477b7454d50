"""File operations (fs.*) and `sandboxctl cp`."""
import base64
import os

from common import expect, expect_eq, rpc_ok, sandbox, sandbox_user_ids, sh, sh_ok


def b64(data):
    return base64.b64encode(data).decode()


def test_fs_write_read_stat_list_mkdir_remove(world):
    with sandbox(world, "fs", "--deny-all") as name:
        rpc_ok(world, "fs.write", {"sandbox": name, "files": [
            {"path": "a.txt", "content": b64(b"alpha\n")},
            {"path": "/workspace/sub/dir/b.sh", "content": b64(b"#!/bin/sh\necho b\n"),
             "mode": 0o755}]})
        expect_eq(sh_ok(world, name, "cat /workspace/a.txt"), "alpha\n", "file written by fs.write")
        expect_eq(sh_ok(world, name, "/workspace/sub/dir/b.sh"), "b\n", "mode 0755 applied")
        expect_eq(sh_ok(world, name, "stat -c %u:%g /workspace/a.txt").strip(),
                  "%d:%d" % sandbox_user_ids(world), "fs.write owner (the sandbox user)")
        r = rpc_ok(world, "fs.read", {"sandbox": name, "path": "/workspace/a.txt"})
        expect_eq(base64.b64decode(r["content"]), b"alpha\n", "fs.read content")
        expect_eq(r.get("size"), 6, "fs.read size")
        st = rpc_ok(world, "fs.stat", {"sandbox": name, "path": "sub/dir/b.sh"})
        expect_eq((st.get("type"), st.get("size"), st.get("mode")), ("file", 17, 0o755), "fs.stat")
        rpc_ok(world, "fs.mkdir", {"sandbox": name, "path": "/workspace/m/n"})
        ls = rpc_ok(world, "fs.list", {"sandbox": name, "path": "/workspace"})
        names = [e.get("name") for e in ls.get("entries", [])]
        expect_eq(names, sorted(names), "fs.list sorted by name")
        for n in ("a.txt", "m", "sub"):
            expect(n in names, "fs.list misses", n, names)
        rpc_ok(world, "fs.remove", {"sandbox": name, "path": "/workspace/a.txt"})
        msg = world.rpc("fs.remove", {"sandbox": name, "path": "/workspace/sub"})
        expect("error" in msg, "fs.remove of a non-empty dir without recursive should fail")
        rpc_ok(world, "fs.remove", {"sandbox": name, "path": "/workspace/sub", "recursive": True})
        code, _o, _e = sh(world, name, "test -e /workspace/a.txt || test -e /workspace/sub")
        expect(code != 0, "fs.remove left files")
        msg = world.rpc("fs.read", {"sandbox": name, "path": "/workspace/nope"})
        expect("error" in msg, "fs.read of a missing file should fail")


def test_fs_write_through_planted_symlink_stays_inside(world):
    marker = "/tmp/pwned-%s" % world.id
    with sandbox(world, "fslink", "--deny-all") as name:
        sh_ok(world, name, "ln -s / /workspace/escape")
        msg = world.rpc("fs.write", {"sandbox": name, "files": [
            {"path": "/workspace/escape" + marker, "content": b64(b"pwned\n")}]})
        expect(not os.path.exists(marker), "fs.write through a symlink reached the host:", marker)
        r = world.run_in_host(["test", "-e", marker])
        expect(r.returncode != 0, "fs.write through a symlink reached the world host")
        if "error" not in msg:
            expect_eq(sh_ok(world, name, "cat %s" % marker), "pwned\n",
                      "the file should land inside the sandbox")
        # Reading through the symlink must not read the host either.
        secret = os.path.join(world.tmp, "host-only")
        with open(secret, "w") as f:
            f.write("host secret\n")
        msg = world.rpc("fs.read", {"sandbox": name, "path": "/workspace/escape" + secret})
        got = base64.b64decode(msg.get("result", {}).get("content", "")) if "result" in msg else b""
        expect(b"host secret" not in got, "fs.read through a symlink read a host file")


def test_fs_write_refuses_etc_shadow_as_sandbox_user(world):
    with sandbox(world, "fsperm", "--deny-all") as name:
        msg = world.rpc("fs.write", {"sandbox": name, "files": [
            {"path": "/etc/passwd", "content": b64(b"root::0:0::/root:/bin/sh\n")}]})
        expect("error" in msg, "fs.write to /etc/passwd as the sandbox user should fail")


def test_cp_into_and_out_of_sandbox(world):
    src = os.path.join(world.tmp, "cp-in.bin")
    data = os.urandom(300 * 1024)
    with open(src, "wb") as f:
        f.write(data)
    with sandbox(world, "cp", "--deny-all") as name:
        world.ctl("cp", src, "%s:/workspace/in.bin" % name, check=True)
        sum_inside = sh_ok(world, name, "sha256sum /workspace/in.bin").split()[0]
        import hashlib
        expect_eq(sum_inside, hashlib.sha256(data).hexdigest(), "sha256 after cp in")
        sh_ok(world, name, "printf 'made inside\\n' > /workspace/out.txt")
        dst = os.path.join(world.tmp, "cp-out.txt")
        world.ctl("cp", "%s:/workspace/out.txt" % name, dst, check=True)
        with open(dst) as f:
            expect_eq(f.read(), "made inside\n", "file copied out")
