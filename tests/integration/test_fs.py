"""File operations (fs.*) and `sandboxctl cp`."""
import base64
import os

import world as W
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


def _fs_read_text(world, name, path):
    """fs.read of path: (text, None) or (None, the error message)."""
    msg = world.rpc("fs.read", {"sandbox": name, "path": path})
    if "result" in msg:
        return base64.b64decode(msg["result"].get("content", "")).decode(errors="replace"), None
    return None, msg.get("error", {}).get("message", "") or "error"


def _check_fs_ops_run_confined(world, name):
    status, err = _fs_read_text(world, name, "/proc/self/status")
    expect(err is None, "fs.read /proc/self/status failed:", err)
    fields = dict(l.split(":", 1) for l in status.splitlines() if ":" in l)
    expect_eq(int(fields.get("CapEff", "x").strip(), 16), 0, "fs ops' effective capabilities")
    cmd_bnd = sh_ok(world, name, "grep CapBnd /proc/self/status").split(":", 1)[1].strip()
    expect_eq(fields.get("CapBnd", "").strip(), cmd_bnd, "fs ops' bounding set (a command's)")
    expect_eq(fields.get("NoNewPrivs", "").strip(), "1", "fs ops' no_new_privs")
    expect_eq(fields.get("Seccomp", "").strip(), "2", "fs ops' seccomp mode (filter)")
    uid = int(fields["Uid"].split()[1])
    expect_eq(uid, int(sh_ok(world, name, "id -u").strip()), "fs ops' uid (the sandbox user's)")
    expect(int(fields.get("Pid", "1").strip()) != 1, "fs ops run in sandbox-init (PID 1) itself")
    syms, err = _fs_read_text(world, name, "/proc/kallsyms")
    if syms is not None:
        addrs = [l.split()[0] for l in syms.splitlines()[:50] if l.split()]
        expect(addrs and all(int(a, 16) == 0 for a in addrs),
               "fs.read /proc/kallsyms gave kernel addresses:", addrs[:3])
    # The fs child's memory is a copy of init's: its contents are not
    # readable either (it is not dumpable).
    for p in ("/proc/1/maps", "/proc/1/smaps", "/proc/1/environ", "/proc/1/mem",
              "/proc/self/environ", "/proc/self/mem"):
        got, err = _fs_read_text(world, name, p)
        expect(err is not None, "fs.read %s (sandbox-init's memory) should be refused, got" % p,
               (got or "")[:120])
    # /proc/1/stat is world-readable; without ptrace access its addresses
    # (startcode, endcode, startstack, kstkesp, kstkeip; proc(5)) read 1 1 0 0 0.
    stat, err = _fs_read_text(world, name, "/proc/1/stat")
    expect(err is None, "fs.read /proc/1/stat failed:", err)
    expect_eq(stat.rsplit(")", 1)[1].split()[23:28], ["1", "1", "0", "0", "0"],
              "sandbox-init's addresses in /proc/1/stat")
    # The child holds none of init's fds: 0-2, its answer pipe, the listed dir.
    ents = rpc_ok(world, "fs.list", {"sandbox": name, "path": "/proc/self/fd"}).get("entries", [])
    expect(len(ents) <= 5, "the fs child holds init's fds:", [e.get("name") for e in ents])
    for p in ("/proc/1/fd", "/proc/1/map_files"):
        msg = world.rpc("fs.list", {"sandbox": name, "path": p})
        expect("error" in msg, "fs.list %s (sandbox-init's fds) should be refused:" % p, str(msg)[:200])
    # Ordinary work still runs as the sandbox user.
    rpc_ok(world, "fs.write", {"sandbox": name, "files": [{"path": "c.txt", "content": b64(b"x")}]})
    expect_eq(sh_ok(world, name, "stat -c %u /workspace/c.txt").strip(),
              sh_ok(world, name, "id -u").strip(), "fs.write owner")


def test_fs_ops_run_confined_as_the_sandbox_user_plain(world):
    with sandbox(world, "fsconf", "--deny-all", "--no-userns") as name:
        _check_fs_ops_run_confined(world, name)


def test_fs_ops_run_confined_as_the_sandbox_user_userns(world):
    info = world.rpc_result("daemon.info")
    if not (info.get("capabilities", {}).get("userns") or {}).get("available"):
        import world as W
        raise W.Skip("user namespaces are not available on this host")
    with sandbox(world, "fsconfu", "--deny-all", "--userns") as name:
        _check_fs_ops_run_confined(world, name)


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


# --- directory copies: fs.writeTar / fs.readTar and `sandboxctl cp -r` -------

def _write_tar(world, name, path, data, piece=1 << 20, sudo=False):
    """fs.writeTar begin, chunks of `piece` bytes, end, on one connection.
    Returns the first error message, or the end's result."""
    with world.daemon.connect() as c:
        params = {"sandbox": name, "path": path}
        if sudo:
            params["sudo"] = True
        msg = c.call("fs.writeTar", params)
        if "error" in msg:
            return msg
        stream = msg["result"]["stream"]
        for off in range(0, len(data), piece):
            msg = c.call("fs.writeTarChunk", {"stream": stream, "data": b64(data[off:off + piece])})
            if "error" in msg:
                return msg
        return c.call("fs.writeTarEnd", {"stream": stream})


def _read_tar(world, name, path):
    with world.daemon.connect() as c:
        msg = c.call("fs.readTar", {"sandbox": name, "path": path})
        if "error" in msg:
            return msg, b""
        stream, out = msg["result"]["stream"], b""
        while True:
            msg = c.call("fs.readTarChunk", {"stream": stream})
            if "error" in msg:
                return msg, out
            out += base64.b64decode(msg["result"]["data"])
            if msg["result"]["eof"]:
                return msg, out


def _tree(root):
    """{relative path: (kind, mode, content-or-target)} of a host tree."""
    import stat as st
    out = {}
    for d, dirs, files in W.walk(root):
        for n in dirs + files:
            p = os.path.join(d, n)
            rel = os.path.relpath(p, root)
            s = os.lstat(p)
            if st.S_ISLNK(s.st_mode):
                out[rel] = ("link", None, os.readlink(p))
            elif st.S_ISDIR(s.st_mode):
                out[rel] = ("dir", st.S_IMODE(s.st_mode), None)
            else:
                with open(p, "rb") as f:
                    out[rel] = ("file", st.S_IMODE(s.st_mode), f.read())
    return out


def _make_tree(root):
    os.makedirs(os.path.join(root, "a/b/c"))
    os.makedirs(os.path.join(root, "empty"))
    os.makedirs(os.path.join(root, "private"))
    with open(os.path.join(root, "a/b/c/deep.txt"), "w") as f:
        f.write("deep\n")
    with open(os.path.join(root, "run.sh"), "w") as f:
        f.write("#!/bin/sh\necho ran\n")
    os.chmod(os.path.join(root, "run.sh"), 0o755)
    with open(os.path.join(root, "private/key"), "w") as f:
        f.write("k\n")
    os.chmod(os.path.join(root, "private/key"), 0o600)
    os.chmod(os.path.join(root, "private"), 0o700)
    with open(os.path.join(root, "big.bin"), "wb") as f:
        f.write(os.urandom(9 * 1024 * 1024 + 123))  # several 4 MiB pieces
    os.symlink("a/b", os.path.join(root, "rel-link"))
    os.symlink("/etc/passwd", os.path.join(root, "abs-link"))
    os.symlink("missing", os.path.join(root, "dangling"))


def test_cp_r_round_trip_keeps_the_tree(world):
    _round_trip(world, None)


def test_cp_r_round_trip_through_json_chunks(world):
    # The fs.writeTarChunk / fs.readTarChunk form, as clients without fd
    # passing use it.
    _round_trip(world, {"SANDBOXCTL_CP_JSON": "1"})


def _round_trip(world, env):
    import shutil
    src = os.path.join(world.tmp, "tree-in")
    back = os.path.join(world.tmp, "tree-back")
    shutil.rmtree(src, ignore_errors=True)
    shutil.rmtree(back, ignore_errors=True)
    _make_tree(src)
    want = _tree(src)
    with sandbox(world, "cpr", "--deny-all") as name:
        world.ctl("cp", "-r", src, "%s:/workspace/tree" % name, check=True, env=env)
        inside = sh_ok(world, name, "cd /workspace/tree && find . -printf '%y %m %U %p %l\\n' | sort")
        uid = sandbox_user_ids(world)[0]
        for line in ("l 777 %s ./abs-link /etc/passwd", "l 777 %s ./rel-link a/b", "d 700 %s ./private",
                     "f 600 %s ./private/key", "f 755 %s ./run.sh", "d 755 %s ./empty"):
            want_line = line % uid
            expect(want_line in [l.strip() for l in inside.splitlines()], "missing inside:", want_line, inside)
        expect_eq(sh_ok(world, name, "/workspace/tree/run.sh"), "ran\n", "script mode kept")
        # Into an existing directory the tree keeps its name, as cp -r does.
        world.ctl("cp", "-r", src, "%s:/workspace" % name, check=True, env=env)
        expect_eq(sh_ok(world, name, "cat /workspace/tree-in/a/b/c/deep.txt"), "deep\n", "cp -r into a dir")
        world.ctl("cp", "-r", "%s:/workspace/tree" % name, back, check=True, env=env)
        code, _o, err = world.ctl("cp", "-r", "%s:/workspace/nope" % name, back + "2", env=env)
        expect(code != 0 and "nope" in err, "cp -r of a missing directory should fail naming it:", err)
        code, _o, err = world.ctl("cp", "-r", src, "%s:/etc/x" % name, env=env)
        expect(code != 0, "cp -r into /etc as the sandbox user should fail")
    got = _tree(back)
    expect_eq(sorted(got), sorted(want), "paths after the round trip")
    for k in want:
        expect_eq(got[k], want[k], "entry %s after the round trip" % k)


def test_cp_without_r_still_names_the_directory(world):
    src = os.path.join(world.tmp, "tree-plain")
    os.makedirs(src, exist_ok=True)
    with sandbox(world, "cpnr", "--deny-all") as name:
        code, _o, err = world.ctl("cp", src, "%s:/workspace/x" % name)
        expect(code != 0 and "-r" in err, "cp of a directory without -r should point at -r:", err)


def test_fs_write_tar_refuses_hostile_members(world):
    from common import tar_bytes
    import io
    import tarfile
    marker = "pwned-%s" % world.id
    cases = [
        ("dotdot", [("../%s" % marker, "file", b"x")], "/workspace/%s" % marker),
        ("deep-dotdot", [("a/../../%s" % marker, "file", b"x")], "/workspace/%s" % marker),
        ("absolute", [("/tmp/%s" % marker, "file", b"x")], "/tmp/%s" % marker),
        ("symlink-then-write", [("lnk", "symlink", "/tmp"), ("lnk/%s" % marker, "file", b"x")],
         "/tmp/%s" % marker),
        ("symlink-dotdot-then-write", [("up", "symlink", ".."), ("up/%s" % marker, "file", b"x")],
         "/workspace/%s" % marker),
        ("hardlink-absolute", [("hl", "hardlink", "/etc/shadow")], "/workspace/dst/hl"),
        ("hardlink-dotdot", [("hl", "hardlink", "../../etc/shadow")], "/workspace/dst/hl"),
        ("device", [("null2", "chr", (1, 3))], "/workspace/dst/null2"),
    ]
    with sandbox(world, "hostile", "--deny-all") as name:
        for what, entries, never in cases:
            for sudo in (False, True):
                msg = _write_tar(world, name, "/workspace/dst", tar_bytes(entries, compress=False), sudo=sudo)
                expect("error" in msg, "fs.writeTar of a tar with %s should fail (sudo %s):" % (what, sudo), msg)
                code, _o, _e = sh(world, name, "test -e %s || test -L %s" % (never, never))
                expect(code != 0, "fs.writeTar with %s wrote %s (sudo %s)" % (what, never, sudo))
                expect(not os.path.exists("/tmp/%s" % marker), "a hostile tar reached the host's /tmp")
        msg = _write_tar(world, name, "/workspace/dst", tar_bytes([("../x", "file", b"x")], compress=False))
        expect("../x" in msg.get("error", {}).get("message", ""), "the refusal names the member:", msg)
        # A FIFO and a block device are refused too; setuid bits are dropped.
        buf = io.BytesIO()
        with tarfile.open(fileobj=buf, mode="w") as t:
            ti = tarfile.TarInfo("suid")
            ti.mode, ti.size = 0o6755, 3
            t.addfile(ti, io.BytesIO(b"#!\n"))
        msg = _write_tar(world, name, "/workspace/s", buf.getvalue(), sudo=True)
        expect("result" in msg, "a setuid member is written (without the bit):", msg)
        expect_eq(sh_ok(world, name, "stat -c %a /workspace/s/suid").strip(), "755", "setuid/setgid dropped")
        for kind in (tarfile.FIFOTYPE, tarfile.BLKTYPE):
            buf = io.BytesIO()
            with tarfile.open(fileobj=buf, mode="w") as t:
                ti = tarfile.TarInfo("special")
                ti.type = kind
                t.addfile(ti)
            msg = _write_tar(world, name, "/workspace/sp", buf.getvalue(), sudo=True)
            expect("error" in msg, "a special file member should be refused:", kind, msg)
        # Not a tar at all: an error, not a hang.
        msg = _write_tar(world, name, "/workspace/junk", os.urandom(10000))
        expect("error" in msg, "fs.writeTar of random bytes should fail:", msg)
        # As the sandbox user, /etc stays out of reach.
        msg = _write_tar(world, name, "/etc", tar_bytes([("passwd", "file", b"x")], compress=False))
        expect("error" in msg, "fs.writeTar into /etc as the sandbox user should fail:", msg)


def test_fs_read_tar_and_stream_errors(world):
    import tarfile
    import io
    with sandbox(world, "rtar", "--deny-all") as name:
        sh_ok(world, name, "mkdir -p /workspace/t/d && echo hi > /workspace/t/d/f && ln -s d/f /workspace/t/l"
                           " && mkfifo /workspace/t/fifo")
        msg, data = _read_tar(world, name, "/workspace/t")
        expect("result" in msg, "fs.readTar failed:", msg)
        names = {}
        with tarfile.open(fileobj=io.BytesIO(data)) as t:
            for m in t.getmembers():
                names[m.name] = m
        expect_eq(sorted(names), ["d", "d/f", "l"], "members (the FIFO is skipped)")
        expect_eq(names["l"].linkname, "d/f", "symlink kept as a link")
        expect_eq(msg["result"].get("entries"), 3, "entries count")
        msg, _ = _read_tar(world, name, "/workspace/nope")
        expect("error" in msg, "fs.readTar of a missing directory should fail:", msg)
        msg, _ = _read_tar(world, name, "/root")
        expect("error" in msg, "fs.readTar of /root as the sandbox user should fail:", msg)
        msg = world.rpc("fs.writeTarChunk", {"stream": "nope", "data": ""})
        expect(msg.get("error", {}).get("data", {}).get("reason") == "not_found", "unknown stream:", msg)


def _fake_daemon_serving_tar(sock_path, tar):
    """A stand-in for sandboxd on sock_path that answers fs.stat with a
    directory and fs.readTar ("fd": true) by writing `tar` into the pipe it
    was sent: what a hostile sandbox could make a stream look like. Returns
    the thread; it serves one connection."""
    import json
    import socket
    import threading
    srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    srv.bind(sock_path)
    srv.listen(1)

    def serve():
        conn, _ = srv.accept()
        buf = b""
        fds = []
        with conn:
            while True:
                data, got, _flags, _addr = socket.recv_fds(conn, 1 << 16, 4)
                fds += got
                if not data:
                    break
                buf += data
                while b"\n" in buf:
                    line, buf = buf.split(b"\n", 1)
                    req = json.loads(line)
                    if req["method"] == "fs.stat":
                        result = {"type": "directory"}
                    else:
                        with os.fdopen(fds.pop(0), "wb") as pipe:
                            pipe.write(tar)
                        result = {"entries": 1, "bytes": 1}
                    conn.sendall(json.dumps({"jsonrpc": "2.0", "id": req["id"], "result": result}).encode()
                                 + b"\n")
        srv.close()

    t = threading.Thread(target=serve, daemon=True)
    t.start()
    return t


def test_cp_r_out_of_a_sandbox_refuses_a_hostile_stream_on_the_host(world):
    import subprocess
    from common import tar_bytes
    from world import SANDBOXCTL
    marker = "pwned-host-%s" % world.id
    outside = os.path.join(world.tmp, "outside")
    os.makedirs(outside, exist_ok=True)
    cases = [
        ("dotdot", [("../%s" % marker, "file", b"x")], os.path.join(world.tmp, marker)),
        ("absolute", [(os.path.join(outside, marker), "file", b"x")], os.path.join(outside, marker)),
        ("symlink-then-write", [("lnk", "symlink", outside), ("lnk/%s" % marker, "file", b"x")],
         os.path.join(outside, marker)),
        ("hardlink-out", [("hl", "hardlink", "/etc/passwd")], None),
        ("device", [("null2", "chr", (1, 3))], None),
    ]
    # The control: the same fake daemon with a benign stream is unpacked.
    sock = os.path.join(world.tmp, "fake-ok.sock")
    dst = os.path.join(world.tmp, "benign-dst")
    t = _fake_daemon_serving_tar(sock, tar_bytes([("d/ok.txt", "file", b"fine")], compress=False))
    p = subprocess.run([SANDBOXCTL, "--socket", sock, "cp", "-r", "box:/workspace/x", dst],
                       capture_output=True, text=True, timeout=60)
    t.join(10)
    expect_eq(p.returncode, 0, "cp -r of a benign stream (%s)" % p.stderr.strip())
    with open(os.path.join(dst, "d/ok.txt"), "rb") as f:
        expect_eq(f.read(), b"fine", "benign member unpacked")
    for i, (what, entries, never) in enumerate(cases):
        sock = os.path.join(world.tmp, "fake-%d.sock" % i)
        dst = os.path.join(world.tmp, "hostile-dst-%d" % i)
        t = _fake_daemon_serving_tar(sock, tar_bytes(entries, compress=False))
        p = subprocess.run([SANDBOXCTL, "--socket", sock, "cp", "-r", "box:/workspace/x", dst],
                           capture_output=True, text=True, timeout=60)
        t.join(10)
        expect(p.returncode != 0, "cp -r accepted a hostile stream (%s):" % what, p.stdout, p.stderr)
        if never:
            expect(not os.path.lexists(never), "a hostile stream wrote outside the destination:", never)
        for name in ("hl", "null2"):
            expect(not os.path.lexists(os.path.join(dst, name)), "a hostile member was written:", what, name)


def test_sandboxctl_loads_libarchive_only_for_cp(world):
    """`sandboxctl exec`, `ls` and the rest start without libarchive and
    what it pulls in (libxml2, ICU, libstdc++): it is loaded on the first
    archive call, which only `cp -r` makes (test_cp_r_round_trip_keeps_the_tree
    and the other cp -r tests run that path)."""
    import subprocess
    import world as W
    out = subprocess.run(["readelf", "-d", W.SANDBOXCTL], capture_output=True, text=True, check=True).stdout
    needed = [line.split("[", 1)[1].rstrip("]") for line in out.splitlines() if "(NEEDED)" in line]
    expect(needed and not [n for n in needed if "archive" in n or "xml" in n or "icu" in n],
           "sandboxctl's start-up libraries: %s" % needed)
    with sandbox(world, "lazy", "--deny-all") as name:
        expect_eq(sh_ok(world, name, "echo ok"), "ok\n", "sandboxctl exec without libarchive loaded")


def test_fs_write_sets_user_xattrs_and_stat_list_show_them(world):
    """fs.write xattrs: the file's user.* attributes become exactly those
    given (set as the sandbox user, other namespaces untouched), fs.stat
    and fs.list show them; an overwrite with {} clears them; a write
    without xattrs leaves them; bad names and values are refused naming
    the field; a file the sandbox user may not write gets none."""
    with sandbox(world, "fsx", "--deny-all") as name:
        rpc_ok(world, "fs.write", {"sandbox": name, "files": [
            {"path": "d/x.txt", "content": b64(b"x"), "xattrs": {"user.e2b.author": "mish", "user.k": "v 1"}}]})
        st = rpc_ok(world, "fs.stat", {"sandbox": name, "path": "d/x.txt"})
        expect_eq(st.get("xattrs"), {"user.e2b.author": "mish", "user.k": "v 1"}, "fs.stat xattrs")
        # Set out of band, seen too; a value that is not printable is left out.
        sh_ok(world, name, "python3 -c \"import os; os.setxattr('/workspace/d/x.txt', 'user.oob', b'yes'); "
                           "os.setxattr('/workspace/d/x.txt', 'user.bin', b'\\\\x00\\\\x01')\"")
        ls = rpc_ok(world, "fs.list", {"sandbox": name, "path": "d"})
        expect_eq([e.get("xattrs") for e in ls["entries"]],
                  [{"user.e2b.author": "mish", "user.k": "v 1", "user.oob": "yes"}], "fs.list xattrs")
        # Without xattrs: left as they are.
        rpc_ok(world, "fs.write", {"sandbox": name, "files": [{"path": "d/x.txt", "content": b64(b"y")}]})
        st = rpc_ok(world, "fs.stat", {"sandbox": name, "path": "d/x.txt"})
        expect_eq(sorted(st.get("xattrs", {})), ["user.e2b.author", "user.k", "user.oob"], "kept without xattrs")
        # Exactly those given: the rest removed.
        rpc_ok(world, "fs.write", {"sandbox": name, "files": [
            {"path": "d/x.txt", "content": b64(b"z"), "xattrs": {"user.k": "2"}}]})
        st = rpc_ok(world, "fs.stat", {"sandbox": name, "path": "d/x.txt"})
        expect_eq(st.get("xattrs"), {"user.k": "2"}, "replaced")
        expect_eq(sh_ok(world, name, "cat /workspace/d/x.txt"), "z", "content written with xattrs")
        rpc_ok(world, "fs.write", {"sandbox": name, "files": [{"path": "d/x.txt", "content": b64(b""), "xattrs": {}}]})
        st = rpc_ok(world, "fs.stat", {"sandbox": name, "path": "d/x.txt"})
        expect("xattrs" not in st, "xattrs {} clears them:", st)
        for bad, words in (({"trusted.x": "v"}, "user. namespace"), ({"user.": "v"}, "user. namespace"),
                           ({"user.a": "a\nb"}, "printable ASCII"), ({"user.a": 1}, "printable ASCII"),
                           ([], "must be an object")):
            msg = world.rpc("fs.write", {"sandbox": name, "files": [
                {"path": "d/y.txt", "content": b64(b"y"), "xattrs": bad}]})
            err = msg.get("error", {})
            expect(words in err.get("message", ""), "refusal of", bad, "should say", words, err)
            expect_eq(err.get("data", {}).get("field"), "files[0].xattrs", "the field named")
        code, _o, _e = sh(world, name, "test -e /workspace/d/y.txt")
        expect(code != 0, "a refused write made its file")
        # A file of root's the sandbox user may not write: refused, unchanged.
        msg = world.rpc("fs.write", {"sandbox": name, "files": [
            {"path": "/etc/hostname", "content": b64(b"h"), "xattrs": {"user.a": "b"}}]})
        expect("error" in msg, "xattrs on a file the sandbox user may not write")


def test_fs_calls_with_sudo_run_as_root_in_the_sandbox(world):
    """fs.* with sudo: root's files are read and written, what it makes is
    root's; without sudo the same calls are refused (the sandbox user);
    sudo does not reach the host (a planted symlink stays inside)."""
    with sandbox(world, "fssudo", "--deny-all") as name:
        sh_ok(world, name, "true")
        msg = world.rpc("fs.write", {"sandbox": name, "files": [{"path": "/root/r.txt", "content": b64(b"r")}]})
        expect("error" in msg, "the sandbox user wrote into /root")
        rpc_ok(world, "fs.write", {"sandbox": name, "sudo": True, "files": [
            {"path": "/root/sub/r.txt", "content": b64(b"root's"), "mode": 0o600, "xattrs": {"user.a": "b"}}]})
        st = rpc_ok(world, "fs.stat", {"sandbox": name, "path": "/root/sub/r.txt", "sudo": True})
        expect_eq((st.get("uid"), st.get("gid"), st.get("mode"), st.get("xattrs")), (0, 0, 0o600, {"user.a": "b"}),
                  "a file written with sudo is root's")
        r = rpc_ok(world, "fs.read", {"sandbox": name, "path": "/root/sub/r.txt", "sudo": True})
        expect_eq(base64.b64decode(r["content"]), b"root's", "fs.read with sudo")
        msg = world.rpc("fs.read", {"sandbox": name, "path": "/root/sub/r.txt"})
        expect("error" in msg, "the sandbox user read root's 0600 file")
        ls = rpc_ok(world, "fs.list", {"sandbox": name, "path": "/root/sub", "sudo": True})
        expect_eq([e["name"] for e in ls["entries"]], ["r.txt"], "fs.list with sudo")
        rpc_ok(world, "fs.mkdir", {"sandbox": name, "path": "/opt/made", "sudo": True})
        expect_eq(sh_ok(world, name, "stat -c %u /opt/made").strip(), "0", "fs.mkdir with sudo: root's")
        rpc_ok(world, "fs.remove", {"sandbox": name, "path": "/root/sub", "recursive": True, "sudo": True})
        code, _o, _e = sh(world, name, "test -e /root/sub", "--sudo")
        expect(code != 0, "fs.remove with sudo left /root/sub")
        msg = world.rpc("fs.stat", {"sandbox": name, "path": "/root", "sudo": "yes"})
        expect("sudo" in msg.get("error", {}).get("message", ""), "a non-boolean sudo is refused naming it", msg)
        # Root in the sandbox only: a symlink planted toward / resolves inside.
        marker = "/tmp/pwned-sudo-%s" % world.id
        sh_ok(world, name, "ln -s / /workspace/escape")
        world.rpc("fs.write", {"sandbox": name, "sudo": True, "files": [
            {"path": "/workspace/escape" + marker, "content": b64(b"x")}]})
        expect(not os.path.exists(marker), "fs.write with sudo through a symlink reached the host:", marker)
