"""Progress of a slow create (docs/API.md, sandbox.create "progress"): with
"progress": true the daemon sends sandbox.progress notifications on the
create's connection while a git or tarball source is fetched, all before
the answer; without it, none. `sandboxctl create` shows them on a terminal
only: one line on stderr, cleared before the name is printed; nothing with
--json or when stderr is not a terminal."""
import os
import pty
import select
import subprocess

import leaks
import world as W
from common import delete, expect, expect_eq, tar_bytes


def _tarball_url(world):
    # 2 MiB that do not compress, so the download takes more than one read.
    blob = os.urandom(2 << 20)
    return world.add_http_file("progress.tar.gz", tar_bytes([("blob", "file", blob)]))


def _create(world, name, source, progress):
    params = {"name": name, "networkPolicy": "deny-all", "source": source}
    if progress is not None:
        params["progress"] = progress
    with world.daemon.connect(180) as c:
        msg = c.call("sandbox.create", params, 180)
        notes = [n for n in c.notes if isinstance(n, dict) and n.get("method") == "sandbox.progress"]
    return msg, notes


def test_create_with_progress_is_told_each_stage_before_its_answer(world):
    # A shallow clone runs the git program: its --progress lines are read.
    cases = (({"type": "git", "url": world.git_url}, {"cloning"}),
             ({"type": "git", "url": world.git_url, "depth": 1}, {"cloning"}),
             ({"type": "tarball", "url": _tarball_url(world)}, {"downloading", "extracting"}))
    for source, want in cases:
        name = world.name("prog")
        try:
            msg, notes = _create(world, name, source, True)
            expect("error" not in msg, "create from %s: %s" % (source["type"], msg.get("error")))
            expect(notes, "no sandbox.progress notification before the answer (%s)" % source["type"])
            for n in notes:
                expect("id" not in n, "a notification carries no id: %r" % n)
                p = n["params"]
                expect_eq(p["name"], name, "the notification names the sandbox")
                expect(isinstance(p["bytes"], (int, float)) and p["bytes"] >= 0, "bytes: %r" % p)
                expect(p["stage"] in ("cloning", "resolving", "checking out", "downloading", "extracting"),
                       "a known stage: %r" % p)
            stages = {n["params"]["stage"] for n in notes}
            expect(want <= stages, "%s: stages %s, wanted at least %s" % (source["type"], sorted(stages),
                                                                           sorted(want)))
            if source["type"] == "git":
                last = [n["params"] for n in notes if n["params"]["stage"] == "cloning"][-1]
                expect(last.get("objects", 0) > 0 and last.get("objects") == last.get("totalObjects"),
                       "the clone's objects are counted to the end: %r" % last)
            if source["type"] == "tarball":
                last = [n["params"] for n in notes if n["params"]["stage"] == "downloading"][-1]
                expect(last["bytes"] > 0, "the download's bytes are counted: %r" % last)
        finally:
            delete(world, name)
        leaks.check(world, name)


def test_create_without_progress_gets_no_notification(world):
    for progress in (None, False):
        name = world.name("noprog")
        try:
            msg, notes = _create(world, name, {"type": "git", "url": world.git_url}, progress)
            expect("error" not in msg, "create: %s" % msg.get("error"))
            expect_eq(notes, [], "sandbox.progress notifications with progress %r" % progress)
        finally:
            delete(world, name)


def test_progress_must_be_a_boolean(world):
    msg = world.rpc("sandbox.create", {"progress": "yes", "networkPolicy": "deny-all"})
    expect_eq(msg.get("error", {}).get("code"), -32602, "progress: \"yes\": %r" % msg)
    expect_eq(msg["error"].get("data", {}).get("field"), "progress", "the field named")


def _ctl_on_terminal(world, *args):
    """sandboxctl ARGS with stderr a terminal (a pty), stdout a pipe:
    (exit code, stdout, everything written to the terminal)."""
    master, slave = pty.openpty()
    argv = [W.SANDBOXCTL, "--socket", world.daemon.socket] + list(args)
    env = dict(os.environ)
    env.pop("SANDBOXD_SOCKET", None)
    p = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=slave, env=env)
    os.close(slave)
    term = b""
    try:
        while True:
            r, _w, _x = select.select([master], [], [], 180)
            if not r:
                raise AssertionError("sandboxctl wrote nothing for 180 s")
            try:
                chunk = os.read(master, 4096)
            except OSError:  # EIO: every writer of the terminal is gone
                break
            if not chunk:
                break
            term += chunk
        out = p.stdout.read().decode(errors="replace")
        code = p.wait(timeout=60)
    finally:
        os.close(master)
        if p.poll() is None:
            p.kill()
            p.wait()
    return code, out, term.decode(errors="replace")


def test_cli_create_shows_progress_on_a_terminal_only(world):
    name = world.name("progcli")
    try:
        code, out, term = _ctl_on_terminal(world, "create", "--name", name, "--deny-all", "--git", world.git_url)
        expect_eq(code, 0, "create on a terminal (%s)" % term[-300:])
        expect_eq(out.strip(), name, "stdout holds the name only")
        expect("%s: cloning" % name in term, "the terminal shows the stage: %r" % term[-300:])
        expect(term.endswith("\r\x1b[K"), "the progress line is cleared at the end: %r" % term[-80:])
    finally:
        delete(world, name)
    # --json: nothing on the terminal but the answer on stdout.
    name = world.name("progjson")
    try:
        code, out, term = _ctl_on_terminal(world, "--json", "create", "--name", name, "--deny-all",
                                           "--git", world.git_url)
        expect_eq(code, 0, "create --json (%s)" % term[-300:])
        expect_eq(term, "", "nothing on the terminal with --json")
    finally:
        delete(world, name)
    # stderr not a terminal: nothing on it.
    name = world.name("prognotty")
    try:
        code, out, err = world.ctl("create", "--name", name, "--deny-all", "--git", world.git_url, timeout=180)
        expect_eq((code, out.strip(), err), (0, name, ""), "create with stderr a pipe")
    finally:
        delete(world, name)
