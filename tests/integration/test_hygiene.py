"""JSON-RPC hygiene and flow control: output pressure from a slow reader,
input that is not UTF-8 or hides a NUL, large copies with `sandboxctl cp`,
and error messages a person can act on."""
import base64
import hashlib
import os
import subprocess
import threading
import time

import world as W
from common import expect, expect_eq, rpc_ok, sandbox, sh, sh_ok

MIB = 1024 * 1024


def b64(data):
    return base64.b64encode(data).decode()


def _error(msg, what):
    expect(isinstance(msg, dict) and "error" in msg, "%s: expected an error, got" % what, str(msg)[:300])
    return msg["error"]


def test_command_output_streams_through_a_slow_reader(world):
    """50 MiB through `sandboxctl exec ... | slow reader`: every byte and the
    exit code arrive (the command waits for the reader, as with a pipe), no
    connection is dropped, and other clients get answers meanwhile."""
    total = 50 * MIB
    with sandbox(world, "slow", "--deny-all") as name:
        argv = [W.SANDBOXCTL, "--socket", world.daemon.socket, "exec", name, "--",
                "sh", "-c", "head -c 50M /dev/zero; exit 3"]
        proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE)
        got = [0]
        nonzero = [False]

        def slow_read():
            # About 12 MiB/s: far slower than the command writes.
            while True:
                chunk = proc.stdout.read1(64 * 1024)
                if not chunk:
                    return
                got[0] += len(chunk)
                if chunk.strip(b"\0"):
                    nonzero[0] = True
                time.sleep(0.005)

        reader = threading.Thread(target=slow_read)
        reader.start()
        # Other clients are served while the stream is throttled.
        worst = 0.0
        answers = 0
        while reader.is_alive() and answers < 200:
            t0 = time.monotonic()
            r = world.rpc_result("daemon.info", timeout=10)
            expect(r.get("pid") == world.daemon.pid, "daemon.info during the stream", r)
            rpc_ok(world, "sandbox.get", {"name": name}, timeout=10)
            worst = max(worst, time.monotonic() - t0)
            answers += 1
            reader.join(0.2)
        reader.join(120)
        code = proc.wait(60)
        err = proc.stderr.read().decode(errors="replace")
        expect(answers >= 3, "too few answers to other clients during the stream:", answers)
        expect(worst < 3.0, "another client waited %.1fs for an answer during the stream" % worst)
        expect_eq(got[0], total, "bytes through the slow reader (stderr: %s)" % err.strip()[:300])
        expect(not nonzero[0], "the stream held bytes other than NUL")
        expect_eq(code, 3, "exit code of the streaming command")
        expect("not reading" not in world.daemon.log_tail(200)
               and "read nothing" not in world.daemon.log_tail(200),
               "the daemon dropped a slow reader:", world.daemon.log_tail(5))
        # The sandbox works normally afterwards (its output is not left paused).
        expect_eq(sh_ok(world, name, "echo after").strip(), "after", "a command after the stream")


def test_invalid_utf8_and_nul_are_refused(world):
    with sandbox(world, "utf8", "--deny-all") as name:
        with world.daemon.connect(30) as c:
            for raw in (b"\xff", b"\xc0\x80", b"\xed\xa0\x80"):
                line = (b'{"jsonrpc":"2.0","id":1,"method":"fs.write","params":{"sandbox":"'
                        + name.encode() + b'","files":[{"path":"u-' + raw + b'","content":""}]}}\n')
                c.send_raw(line)
                msg = c.read_msg(30)
                e = _error(msg, "a line with %r" % raw)
                expect_eq(e.get("code"), -32700, "code for invalid UTF-8 %r" % raw)
                expect("not valid UTF-8 at byte %d" % line.index(raw) in e.get("message", ""),
                       "message names the byte:", e.get("message"))
            c.send_raw(b'{"jsonrpc":"2.0","id":7,"method":"fs.write","params":{"sandbox":"' + name.encode()
                       + b'","files":[{"path":"x\\u0000y","content":"aGk="}]}}\n')
            msg = c.read_msg(30)
            e = _error(msg, "a path with \\u0000")
            expect_eq((msg.get("id"), e.get("code")), (7, -32600), "id and code for a NUL in a string")
            expect("NUL" in e.get("message", ""), "message says NUL:", e.get("message"))
            # The connection still serves, and well-formed text is kept as sent.
            rpc_ok(world, "fs.write", {"sandbox": name, "files": [
                {"path": "caf\u00e9-\U0001F600", "content": b64(b"ok")}]})
        code, out, _e = sh(world, name, "ls /workspace")
        expect(code == 0 and "x" not in out.split(), "a truncated path was written:", out)
        expect("caf\u00e9-\U0001F600" in out, "the UTF-8 file name is missing:", out)


def test_cp_of_a_40mb_file_in_and_out_is_byte_identical(world):
    src = os.path.join(world.tmp, "cp-big.bin")
    data = os.urandom(40 * MIB + 12345)
    with open(src, "wb") as f:
        f.write(data)
    os.chmod(src, 0o750)
    want = hashlib.sha256(data).hexdigest()
    with sandbox(world, "cpbig", "--deny-all") as name:
        world.ctl("cp", src, "%s:/workspace/big.bin" % name, check=True, timeout=300)
        out = sh_ok(world, name, "sha256sum /workspace/big.bin; stat -c %a /workspace/big.bin")
        expect_eq(out.split()[0], want, "sha256 inside after cp in")
        expect_eq(out.split()[2], "750", "mode after cp in")
        # Copying again over a longer file truncates it first.
        small = os.path.join(world.tmp, "cp-small.bin")
        with open(small, "wb") as f:
            f.write(b"short\n")
        world.ctl("cp", small, "%s:/workspace/big.bin" % name, check=True)
        expect_eq(sh_ok(world, name, "cat /workspace/big.bin"), "short\n", "cp over a longer file")
        world.ctl("cp", src, "%s:/workspace/big.bin" % name, check=True, timeout=300)
        dst = os.path.join(world.tmp, "cp-big-out.bin")
        world.ctl("cp", "%s:/workspace/big.bin" % name, dst, check=True, timeout=300)
        with open(dst, "rb") as f:
            expect(f.read() == data, "file copied out differs from the one copied in")
        # Over the read limit: limit_exceeded, and the message names no stray field.
        sh_ok(world, name, "truncate -s 65M /workspace/huge")
        code, _o, err = world.ctl("cp", "%s:/workspace/huge" % name, os.path.join(world.tmp, "huge"),
                                  timeout=300)
        expect(code != 0, "cp of a 65 MiB file out should fail")
        expect("larger than" in err and "(path)" not in err, "cp out of a huge file:", err.strip())


def test_fs_write_append_continues_a_file(world):
    with sandbox(world, "append", "--deny-all") as name:
        rpc_ok(world, "fs.write", {"sandbox": name, "files": [
            {"path": "a.txt", "content": b64(b"one\n"), "mode": 0o600},
            {"path": "a.txt", "content": b64(b"two\n"), "append": True}]})
        rpc_ok(world, "fs.write", {"sandbox": name, "files": [
            {"path": "a.txt", "content": b64(b"three\n"), "append": True}]})
        expect_eq(sh_ok(world, name, "cat a.txt; stat -c %a a.txt"), "one\ntwo\nthree\n600\n",
                  "content and mode after appends")
        msg = world.rpc("fs.write", {"sandbox": name, "files": [
            {"path": "a.txt", "content": "", "append": "yes"}]})
        e = _error(msg, "append: \"yes\"")
        expect_eq((e.get("code"), (e.get("data") or {}).get("field")), (-32602, "files[0].append"),
                  "a wrong-typed append")
        msg = world.rpc("fs.write", {"sandbox": name, "files": [
            {"path": "missing.txt", "content": b64(b"x"), "append": True}]})
        expect("error" in msg, "append to a missing file should fail")


def test_timeout_errors_give_ms_and_a_duration(world):
    msg = world.rpc("command.run", {"sandbox": "nope", "cmd": "true", "timeoutMs": 172800000})
    e = _error(msg, "timeoutMs 48h")
    expect_eq(e.get("code"), -32602, "code")
    expect_eq(e.get("message"), "timeoutMs: 172800000 ms is over the maximum of 86400000 ms (24h)",
              "message for a 48h timeoutMs")
