"""sandboxctl as a user meets it (DESIGN §6 "CLI"): the command verbs that
reach a detached command, the timeout message of exec, exit codes and error
messages that name the flag typed, update with nothing to change, snapshot
listing aliases and order, clean runtime import paths, and help that lists
what each verb accepts."""
import json
import os
import re
import subprocess
import tempfile

from common import create, delete, expect, expect_eq, poll, rpc_ok, sandbox, sandbox_rpc, tar_bytes


def _detach(world, name, script, *flags):
    code, out, err = world.ctl("exec", "--detach", *flags, name, "--", "sh", "-c", script)
    expect_eq(code, 0, "exec --detach (%s)" % err.strip())
    cmd_id = out.strip()
    expect(cmd_id.startswith("cmd-"), "exec --detach prints a command id:", repr(out))
    return cmd_id


def test_command_verbs_reach_a_detached_command(world):
    with sandbox(world, "cmdverbs", "--deny-all") as name:
        cmd_id = _detach(world, name, "echo to-out; echo to-err >&2; exit 7")
        code, out, err = world.ctl("command", "wait", cmd_id)
        expect_eq(code, 7, "command wait exits with the command's code (%s)" % err.strip())
        code, out, err = world.ctl("command", "logs", cmd_id)
        expect_eq((code, out, err), (0, "to-out\n", "to-err\n"), "command logs: stdout and stderr apart")
        code, out, err = world.ctl("--json", "command", "get", cmd_id)
        expect_eq(code, 0, "command get (%s)" % err.strip())
        got = json.loads(out)
        expect_eq((got["cmdId"], got["exitCode"], got["timedOut"]), (cmd_id, 7, False), "command get --json")
        code, out, _e = world.ctl("command", "get", cmd_id)
        expect("exitCode: 7" in out, "command get shows the exit code:", out)

        # A running command: get says so, kill --signal TERM ends it, wait
        # reports 128+15.
        cmd_id = _detach(world, name, "exec sleep 300")
        got = json.loads(world.ctl("--json", "command", "get", cmd_id, check=True)[1])
        expect_eq(got["exitCode"], None, "exitCode of a running command")
        code, out, err = world.ctl("command", "kill", cmd_id, "--signal", "TERM")
        expect_eq((code, out), (0, ""), "command kill (%s)" % err.strip())
        code, _o, err = world.ctl("command", "wait", cmd_id)
        expect_eq(code, 128 + 15, "command wait after kill --signal TERM (%s)" % err.strip())

        cmd_id = _detach(world, name, "exec sleep 300")
        code, _o, err = world.ctl("command", "kill", cmd_id)
        expect_eq(code, 0, "command kill without --signal (%s)" % err.strip())
        code, _o, _e = world.ctl("command", "wait", cmd_id)
        expect_eq(code, 128 + 9, "the default signal is KILL")

    code, _o, err = world.ctl("command", "wait", "cmd-0000000000000000")
    expect_eq(code, 4, "command wait of an unknown id (%s)" % err.strip())
    code, _o, err = world.ctl("command", "kill", "cmd-0000000000000000", "--signal", "NOPE")
    expect_eq(code, 2, "a signal the daemon does not know is a usage error (%s)" % err.strip())
    expect("--signal" in err, "the error names --signal:", err.strip())
    code, _o, err = world.ctl("command", "frob", "cmd-0000000000000000")
    expect_eq(code, 2, "an unknown command subcommand (%s)" % err.strip())
    code, _o, err = world.ctl("command", "wait")
    expect_eq(code, 2, "command wait without an id (%s)" % err.strip())


def test_exec_timeout_says_the_command_was_killed_for_it(world):
    with sandbox(world, "cmdtimeout", "--deny-all") as name:
        code, _o, err = world.ctl("exec", "--timeout", "1s", name, "--", "sleep", "30")
        expect_eq(code, 137, "exit code of a command killed by its timeout")
        lines = [l for l in err.splitlines() if l.strip()]
        expect(len(lines) == 1 and "timeout" in lines[0] and "1s" in lines[0],
               "one stderr line names the timeout:", repr(err))
        # Any other SIGKILL is not blamed on a timeout.
        code, _o, err = world.ctl("exec", "--timeout", "5m", name, "--", "sh", "-c", "kill -9 $$")
        expect_eq(code, 137, "exit code of a command that killed itself")
        expect("timeout" not in err, "no timeout message for another SIGKILL:", repr(err))
        # The detached shape: the daemon's record says it too.
        cmd_id = _detach(world, name, "exec sleep 30", "--timeout", "1s")
        code, _o, err = world.ctl("command", "wait", cmd_id)
        expect_eq(code, 137, "command wait of a timed-out command")
        expect("timeout" in err, "command wait says it timed out:", repr(err))
        got = json.loads(world.ctl("--json", "command", "get", cmd_id, check=True)[1])
        expect_eq(got["timedOut"], True, "timedOut in command get")


def test_daemon_refusals_of_typed_values_are_usage_errors_naming_the_flag(world):
    name = world.name("badtimeout")
    code, _o, err = world.ctl("create", "--name", name, "--deny-all", "--timeout", "25h")
    expect_eq(code, 2, "create --timeout 25h is a usage error like --timeout 0 (%s)" % err.strip())
    expect("create: --timeout:" in err and "(timeout)" not in err,
           "the error names --timeout, not the JSON field:", err.strip())
    code, _o, err = world.ctl("create", "--name", name, "--deny-all", "--env", "A=1", "--snapshot",
                              "snap-0000000000000000")
    expect_eq(code, 4, "create from an unknown snapshot (%s)" % err.strip())
    expect("source.snapshotId" not in err and err.count("(") <= 1,
           "one hint, no JSON field:", err.strip())
    code, _o, err = world.ctl("create", "--name", name, "--deny-all", "--tag", "a=1", "--tag", "b=1",
                              "--tag", "c=1", "--tag", "d=1", "--tag", "e=1", "--tag", "f=1")
    expect(code != 0 and "--tag" in err and "tags" not in err, "six tags name --tag:", code, err.strip())
    with sandbox(world, "badupdate", "--deny-all") as sb:
        maxv = world.rpc_result("daemon.info", {})["limits"]["maxVcpus"]
        code, _o, err = world.ctl("update", sb, "--vcpus", str(maxv + 1))
        expect_eq(code, 2, "update --vcpus over the maximum (%s)" % err.strip())
        expect("--vcpus" in err and "resources" not in err, "the error names --vcpus:", err.strip())
        code, _o, err = world.ctl("update", sb)
        expect_eq(code, 2, "update with nothing to change (%s)" % err.strip())
        expect("nothing to change" in err and "--timeout" in err, "the error says what can change:",
               err.strip())
    code, _o, _e = world.ctl("get", name)
    expect_eq(code, 4, "no sandbox was created by the refused creates")


def test_snapshots_aliases_list_oldest_first(world):
    name, _c, _o, _e = create(world, "snaplist", "--deny-all", "--persistent")
    ids = []
    try:
        for _ in range(3):
            code, out, err = world.ctl("snapshot", name)
            expect_eq(code, 0, "snapshot (%s)" % err.strip())
            ids.append(out.strip())
        outs = [world.ctl(*args) for args in (("snapshots",), ("snapshots", "ls"), ("snapshots", "list"))]
        expect_eq([o[0] for o in outs], [0, 0, 0], "exit codes of snapshots, snapshots ls, snapshots list")
        expect(outs[0][1] == outs[1][1] == outs[2][1], "the three spellings print the same table:", outs)
        rows = [l.split() for l in outs[0][1].splitlines()[1:]]
        created = [r[2] for r in rows]
        expect_eq(created, sorted(created), "CREATED column order")
        mine = [r[0] for r in rows if r[0] in ids]
        expect_eq(mine, ids, "our snapshots in the order they were taken")
        listed = json.loads(world.ctl("--json", "snapshots", "ls", check=True)[1])["snapshots"]
        expect_eq([s["id"] for s in listed if s["id"] in ids], ids, "--json order")

        out_dir = tempfile.mkdtemp(dir=world.tmp)
        path = os.path.join(out_dir, "taken.tar.zst")
        with open(path, "w") as f:
            f.write("already here")
        code, _o, err = world.ctl("snapshots", "export", ids[0], path)
        expect_eq(code, 5, "export over an existing file is a conflict (%s)" % err.strip())
        expect("exists" in err, "the error says the file exists:", err.strip())
        with open(path) as f:
            expect_eq(f.read(), "already here", "the existing file is untouched")
    finally:
        for i in ids:
            world.ctl("snapshots", "rm", i)
        delete(world, name)


def test_runtime_import_sends_a_resolved_path(world):
    rt = world.name("cleanpath")
    work = tempfile.mkdtemp(dir=world.tmp)
    os.makedirs(os.path.join(work, "sub"))
    with open(os.path.join(work, "rootfs.tar.gz"), "wb") as f:
        f.write(tar_bytes([("etc", "dir", None), ("etc/marker", "file", b"x\n")]))
    os.symlink(os.path.join(work, "rootfs.tar.gz"), os.path.join(work, "link.tar.gz"))
    old = os.getcwd()
    try:
        os.chdir(os.path.join(work, "sub"))
        code, _o, err = world.ctl("runtime", "import", rt, "./../sub/../link.tar.gz")
        expect_eq(code, 0, "runtime import (%s)" % err.strip())
        runtimes = json.loads(world.ctl("--json", "runtime", "list", check=True)[1])["runtimes"]
        src = [r["source"] for r in runtimes if r["name"] == rt]
        expect_eq(src[0].get("path") if src else None, os.path.realpath(os.path.join(work, "rootfs.tar.gz")),
                  "the runtime's source path")
    finally:
        os.chdir(old)
        world.ctl("runtime", "rm", rt)


VERBS = ("create", "get-or-create", "ls", "get", "extend", "fs", "exec", "command", "stop", "update", "fork", "snapshot", "snapshots",
         "runtime", "volume", "rm", "cp", "policy", "events", "daemon", "certs", "top", "ps", "pause", "resume",
         "set-timeout", "container")


def test_help_lists_every_verb_and_only_flags_the_verb_takes(world):
    code, top, _e = world.ctl("--help")
    expect_eq(code, 0, "sandboxctl --help")
    for verb in VERBS:
        expect(re.search(r"^  %s\b" % verb, top, re.M), "top-level help lists %s:" % verb, top)
    for flag in ("--timeout", "--vcpus", "--detach", "--signal", "--expire", "--kind", "--snapshot"):
        expect(flag in top, "top-level help shows %s" % flag)
    bogus = os.path.join(world.tmp, "no-daemon.sock")
    for verb in VERBS:
        code, text, err = world.ctl(verb, "--help")
        expect_eq(code, 0, "%s --help (%s)" % (verb, err.strip()))
        expect(text.startswith("Usage: sandboxctl %s" % verb), "%s --help usage line:" % verb, text[:80])
        # Every flag a verb's help names is one its parser takes: an
        # unknown one would make getopt say "unrecognized option".
        # Flags quoted as part of another command ("create --snapshot ID",
        # "exec --detach", "debootstrap --variant") belong to that one.
        own = re.sub(r"\b(create|exec|debootstrap) --[\w=-]+", "", text)
        for flag in sorted(set(re.findall(r"(?<![\w-])--[a-z][a-z-]+", own))):
            args = [verb, flag, "x"] if verb != "exec" else [verb, flag, "x", "y", "--", "true"]
            _c, _o, err = world.ctl("--socket", bogus, *args, input="")
            expect("unrecognized option" not in err, "%s --help names %s, which %s refuses:" % (verb, flag, verb),
                   err.strip())


def _expires(world, name):
    return json.loads(world.ctl("--json", "get", name, check=True)[1])["expiresAt"]


def test_extend_moves_the_expiry_and_update_shows_the_sandbox(world):
    with sandbox(world, "extend", "--deny-all", "--timeout", "5m") as name:
        before = _expires(world, name)
        code, out, err = world.ctl("--json", "extend", name, "10m")
        expect_eq(code, 0, "extend (%s)" % err.strip())
        after = json.loads(out)
        expect_eq(after["name"], name, "extend --json prints the sandbox")
        expect(after["expiresAt"] > before, "extend moves expiresAt later:", before, after["expiresAt"])
        code, out, err = world.ctl("extend", name, "1m")
        expect(code == 0 and ("name: %s\n" % name) in out and "expiresAt: " in out,
               "extend shows the sandbox as get does:", code, out, err)
        code, _o, err = world.ctl("extend", name, "soon")
        expect(code == 2 and "DURATION" in err, "a bad duration is a usage error:", code, err.strip())
        code, _o, err = world.ctl("extend", name)
        expect_eq(code, 2, "extend without a duration (%s)" % err.strip())
        # update prints the updated sandbox, like get, and with --json.
        code, out, err = world.ctl("update", name, "--tag", "stage=two")
        expect(code == 0 and "tags.stage: two" in out and ("name: %s" % name) in out,
               "update shows the updated sandbox:", code, out, err)
        code, out, err = world.ctl("--json", "update", name, "--tag", "stage=three")
        expect_eq((code, json.loads(out)["tags"]), (0, {"stage": "three"}), "update --json (%s)" % err.strip())
    code, _o, err = world.ctl("extend", world.name("nosuch"), "1m")
    expect_eq(code, 4, "extend of an unknown sandbox (%s)" % err.strip())


def test_get_resume_and_get_or_create(world):
    name = world.name("goc")
    try:
        code, out, err = world.ctl("get-or-create", "--name", name, "--deny-all", "--persistent",
                                   "--timeout", "5m", timeout=180)
        expect_eq(code, 0, "get-or-create of a new sandbox (%s)" % err.strip())
        expect("created: true\n" in out and "differs: -\n" in out and ("name: %s\n" % name) in out,
               "get-or-create says it created the sandbox:", out)
        code, out, err = world.ctl("--json", "get-or-create", "--name", name, "--deny-all", "--persistent",
                                   "--timeout", "7m", "--tag", "k=v", timeout=180)
        expect_eq(code, 0, "get-or-create of an existing sandbox (%s)" % err.strip())
        got = json.loads(out)
        expect_eq((got["created"], sorted(got["differs"]), got["sandbox"]["name"]),
                  (False, ["tags", "timeout"], name), "get-or-create --json of an existing sandbox")
        code, out, _e = world.ctl("get-or-create", "--name", name, "--timeout", "7m")
        expect("created: false\n" in out and "differs: timeout\n" in out, "differs in human output:", out)
        code, _o, err = world.ctl("get-or-create", "--deny-all")
        expect(code == 2 and "--name" in err, "get-or-create needs --name:", code, err.strip())

        world.ctl("stop", name, check=True)
        got = json.loads(world.ctl("--json", "get", name, check=True)[1])
        expect_eq(got["status"], "stopped", "status after stop")
        code, out, err = world.ctl("--json", "get", "--resume", name, timeout=180)
        expect_eq(code, 0, "get --resume (%s)" % err.strip())
        expect_eq(json.loads(out)["status"], "running", "get --resume resumes a stopped persistent sandbox")
        code, out, _e = world.ctl("get", name, "--resume")
        expect("status: running" in out, "get --resume of a running sandbox shows it:", out)
    finally:
        delete(world, name)


def test_ls_limit_and_cursor_page_through(world):
    prefix = world.name("page")
    names = []
    try:
        for i in range(3):
            n, _c, _o, _e = create(world, "page%d" % i, "--deny-all", "--tag", "pageset=%s" % prefix)
            names.append(n)
        seen = []
        cursor = None
        for _ in range(5):
            args = ["ls", "--tag", "pageset=%s" % prefix, "--limit", "2"] + (["--cursor", cursor] if cursor else [])
            code, out, err = world.ctl(*args)
            expect_eq(code, 0, "ls --limit (%s)" % err.strip())
            lines = out.splitlines()
            expect(lines[0].startswith("NAME"), "a table:", out)
            cursor = None
            for line in lines[1:]:
                if line.startswith("next cursor: "):
                    cursor = line[len("next cursor: "):]
                else:
                    seen.append(line.split()[0])
            expect(len([l for l in lines[1:] if not l.startswith("next cursor")]) <= 2, "at most 2 rows:", out)
            if not cursor:
                break
        expect_eq(sorted(seen), sorted(names), "ls --limit 2 pages through every sandbox once")
        got = json.loads(world.ctl("--json", "ls", "--tag", "pageset=%s" % prefix, "--limit", "1", check=True)[1])
        expect(len(got["sandboxes"]) == 1 and got["nextCursor"], "ls --json --limit 1:", got)
        code, _o, err = world.ctl("ls", "--limit", "0")
        expect(code == 2 and "1 to 1000" in err, "--limit 0 names the range:", code, err.strip())
    finally:
        for n in names:
            delete(world, n)


def test_fs_verbs_on_name_path(world):
    with sandbox(world, "fsverbs", "--deny-all") as name:
        code, _o, err = world.ctl("fs", "mkdir", "%s:/tmp/a/b" % name)
        expect(code != 0, "fs mkdir without -p needs the parent:", code, err.strip())
        code, _o, err = world.ctl("fs", "mkdir", "-p", "%s:/tmp/a/b" % name)
        expect_eq(code, 0, "fs mkdir -p (%s)" % err.strip())
        world.ctl("cp", "-", "%s:/tmp/a/b/f.txt" % name, input="hello\n", check=True)
        code, out, err = world.ctl("fs", "ls", "%s:/tmp/a/b" % name)
        expect(code == 0 and out.startswith("TYPE") and re.search(r"^file\s+\d{4}\s+6\s+\S+\s+f\.txt$", out, re.M),
               "fs ls lists the file:", code, out, err)
        got = json.loads(world.ctl("--json", "fs", "ls", "%s:/tmp/a" % name, check=True)[1])
        expect_eq([(e["name"], e["type"]) for e in got["entries"]], [("b", "directory")], "fs ls --json")
        code, out, err = world.ctl("fs", "stat", "%s:/tmp/a/b/f.txt" % name)
        expect(code == 0 and "type: file" in out and "size: 6" in out, "fs stat:", code, out, err)
        code, out, err = world.ctl("fs", "--json", "stat", "%s:/tmp/a/b/f.txt" % name)
        expect(code == 0 and json.loads(out)["size"] == 6, "fs options before the subcommand:", code, out, err)
        code, _o, err = world.ctl("fs", "rm", "%s:/tmp/a" % name)
        expect(code != 0, "fs rm of a full directory without -r fails:", code, err.strip())
        code, _o, err = world.ctl("fs", "rm", "-r", "%s:/tmp/a" % name)
        expect_eq(code, 0, "fs rm -r (%s)" % err.strip())
        code, _o, err = world.ctl("fs", "stat", "%s:/tmp/a" % name)
        expect_eq(code, 4, "fs stat after rm -r (%s)" % err.strip())
        code, _o, err = world.ctl("fs", "ls", "/tmp/a")
        expect(code == 2 and "NAME:PATH" in err, "fs wants NAME:PATH:", code, err.strip())
        code, _o, err = world.ctl("fs", "stat", "-r", "%s:/tmp" % name)
        expect_eq(code, 2, "-r belongs to fs rm (%s)" % err.strip())


def test_a_typo_option_is_one_line_naming_it(world):
    for args in (["update", "x", "--nmae", "y"], ["create", "--vcpsu", "2"], ["exec", "-x", "n", "--", "true"],
                 ["ls", "--limt", "2"], ["--bogus"]):
        code, out, err = world.ctl(*args)
        lines = err.splitlines()
        expect(code == 2 and len(lines) == 1 and "unrecognized option" in lines[0] and args[-1 if args[0] == "--bogus" else 0] in err,
               "one line for %r:" % (args,), code, repr(err))
        expect(re.search(r"'(--nmae|--vcpsu|-x|--limt|--bogus)'", lines[0]), "the line names the option:", lines[0])
    for args, want in ((["update", "x", "--vcpus"], "'--vcpus' needs a value"),
                       (["get", "--resume=yes", "x"], "'--resume' takes no value"),
                       (["create", "--deny"], "'--deny' is ambiguous")):
        code, _o, err = world.ctl(*args)
        expect(code == 2 and err.count("\n") == 1 and want in err, "one line for %r:" % (args,), repr(err))


COMPLETION = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "cli",
                          "sandboxctl.bash-completion")


def _completion_tables():
    text = open(COMPLETION).read()
    shared = dict(re.findall(r'^\s*local (\w+_opts)="([^"]*)"', text, re.M))
    verbs = re.search(r'^\s*local verbs="([^"]*)"', text, re.M).group(1).split()
    table = re.search(r"local -A opts=\((.*?)\n\s*\)", text, re.S).group(1)
    opts = {}
    for verb, value in re.findall(r'\[([a-z-]+)\]="([^"]*)"', table):
        for var, words in shared.items():
            value = value.replace("$" + var, words)
        opts[verb] = set(value.split())
    return verbs, opts


def _complete(world, *words):
    """What the completion offers after `sandboxctl WORDS` (the last word is
    the one being completed)."""
    script = ('source %s; COMP_WORDS=(sandboxctl %s); COMP_CWORD=%d; _sandboxctl; '
              'printf "%%s\\n" "${COMPREPLY[@]}"' % (COMPLETION, " ".join("'%s'" % w for w in words), len(words)))
    out = subprocess.run(["bash", "--norc", "-c", script], capture_output=True, text=True, timeout=30,
                         env={"PATH": os.environ["PATH"], "SANDBOXD_SOCKET": world.tmp + "/none.sock"})
    return set(out.stdout.split())


def test_bash_completion_lists_every_verb_and_option(world):
    verbs, opts = _completion_tables()
    expect_eq(sorted(verbs), sorted(VERBS), "the completion's verbs are the CLI's")
    expect_eq(sorted(opts), sorted(VERBS), "the completion has an option list for every verb")
    bogus = os.path.join(world.tmp, "no-daemon.sock")
    for verb in VERBS:
        _c, text, _e = world.ctl(verb, "--help")
        own = re.sub(r"\b(create|exec|debootstrap) --[\w=-]+", "", text)
        helped = set(re.findall(r"(?<![\w-])--?[a-z][a-z-]*", own)) - {"--json", "--help", "--socket"}
        helped = {f for f in helped if f.startswith("--") or re.search(r"(?<![\w-])%s\b" % f, own)}
        expect(helped <= opts[verb], "the completion of %s lacks" % verb, sorted(helped - opts[verb]))
        for flag in sorted(opts[verb]):
            args = [verb, flag, "x"] if verb != "exec" else [verb, flag, "x", "y", "--", "true"]
            _c, _o, err = world.ctl("--socket", bogus, *args, input="")
            expect("unrecognized option" not in err, "the completion offers %s %s, which it refuses:" % (verb, flag),
                   err.strip())
    expect("get-or-create" in _complete(world, "get"), "verbs complete")
    expect_eq(_complete(world, "get", "--re"), {"--resume"}, "options complete per verb")
    expect("--cursor" in _complete(world, "ls", "--"), "ls options complete")
    expect_eq(_complete(world, "fs", "m"), {"mkdir"}, "fs subcommands complete")


def test_out_of_range_values_give_the_valid_range(world):
    limits = world.rpc_result("daemon.info", {})["limits"]
    maxv, maxt = limits["maxVcpus"], limits["maxTimeoutMs"]
    name = world.name("range")
    for args, want in (
            (["create", "--name", name, "--deny-all", "--vcpus", str(maxv + 91)],
             "create: --vcpus: %d is out of range (1 to %d)" % (maxv + 91, maxv)),
            (["create", "--name", name, "--deny-all", "--vcpus", "0"], "create: --vcpus: 0 is out of range (1 to %d)" % maxv),
            (["update", name, "--vcpus", str(maxv + 1)], "update: --vcpus: %d is out of range (1 to %d)" % (maxv + 1, maxv)),
            (["create", "--name", name, "--deny-all", "--timeout", "%dms" % (maxt + 1)],
             "create: --timeout: %dms is out of range (1ms to " % (maxt + 1)),
            (["update", name, "--port", "70000"], "update: --port: 70000 is out of range (1 to 65535)"),
            (["create", "--name", name, "--deny-all", "--port", "0"], "create: --port: 0 is out of range (1 to 65535)"),
            (["ls", "--limit", "1001"], "ls: --limit: 1001 is out of range (1 to 1000)")):
        code, _o, err = world.ctl(*args)
        expect(code == 2 and err.count("\n") == 1 and want in err, "%r gives the range:" % (args,), code, repr(err))
    code, _o, _e = world.ctl("get", name)
    expect_eq(code, 4, "no sandbox was created by the refused creates")


def test_sandboxctl_starts_without_openssl_and_loads_it_for_tls(world):
    """A local `sandboxctl exec` does not load libssl or libcrypto (their
    loading and relocation were a third of its run time): OpenSSL is loaded
    on the first call of `certs init` or of `--host` TLS, which still work
    (test_remote.py drives --host against a real TLS listener)."""
    import world as W
    out = subprocess.run(["readelf", "-d", W.SANDBOXCTL], capture_output=True, text=True, check=True).stdout
    needed = [line.split("[", 1)[1].rstrip("]") for line in out.splitlines() if "(NEEDED)" in line]
    expect(needed and not [n for n in needed if "libssl" in n or "libcrypto" in n],
           "sandboxctl's start-up libraries: %s" % needed)
    with sandbox(world, "nossl", "--deny-all") as name:
        code, out, err = world.ctl("exec", name, "--", "echo", "ok")
        expect_eq((code, out), (0, "ok\n"), "sandboxctl exec without OpenSSL loaded (%s)" % err.strip())
    with tempfile.TemporaryDirectory() as d:
        code, out, err = world.ctl("certs", "init", d)
        expect_eq(code, 0, "certs init loads OpenSSL on first use (%s)" % err.strip())
        for f in ("ca.pem", "server.pem", "server-key.pem", "client.pem"):
            expect(os.path.exists(os.path.join(d, f)), "certs init wrote", f, os.listdir(d))


def _read_until(proc, want, secs, what):
    """Reads proc's stdout (a pipe) until it holds `want`, for at most
    `secs`; returns what was read."""
    import select
    import time
    got = b""
    deadline = time.monotonic() + secs
    while want not in got:
        left = deadline - time.monotonic()
        expect(left > 0, what + " (not within %ds)" % secs, repr(got))
        ready, _w, _x = select.select([proc.stdout], [], [], min(left, 1.0))
        if ready:
            chunk = os.read(proc.stdout.fileno(), 65536)
            expect(chunk, what + " (stdout closed)", repr(got))
            got += chunk
    return got


def test_command_logs_follow_prints_output_as_it_comes_and_exits_0_at_the_end(world):
    import world as W
    with sandbox(world, "follow", "--deny-all") as name:
        cmd_id = _detach(world, name, "echo one; while [ ! -e /tmp/go ]; do sleep 0.1; done; "
                                      "echo two; echo err >&2; exit 3")
        argv = [W.SANDBOXCTL, "--socket", world.daemon.socket, "command", "logs", "-f", cmd_id]
        p = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        try:
            first = _read_until(p, b"one\n", 60, "command logs -f prints output written so far")
            expect(p.poll() is None, "command logs -f goes on while the command runs")
            world.ctl("exec", name, "--", "touch", "/tmp/go", check=True)
            rest, err = p.communicate(timeout=60)
        finally:
            if p.poll() is None:
                p.kill()
                p.wait()
        expect_eq((p.returncode, first + rest, err), (0, b"one\ntwo\n", b"err\n"),
                  "command logs -f: every byte once, stdout and stderr apart, exit 0 at the end")
        code, out, err = world.ctl("command", "logs", "--follow", cmd_id)
        expect_eq((code, out, err), (0, "one\ntwo\n", "err\n"), "command logs -f of an ended command")
        code, out, err = world.ctl("--json", "command", "logs", "-f", cmd_id)
        expect_eq((code, out), (2, ""), "command logs -f --json is a usage error")
        code, _o, err = world.ctl("command", "logs", "-f", "cmd-0000000000000000")
        expect_eq(code, 4, "command logs -f of an unknown id (%s)" % err.strip())


def test_ps_lists_a_sandbox_s_commands_newest_first_and_after_a_restart(world):
    with sandbox(world, "ps", "--deny-all") as name:
        code, _o, err = world.ctl("exec", name, "--", "sh", "-c", "exit 5")
        expect_eq(code, 5, "exec (%s)" % err.strip())
        running = _detach(world, name, "exec sleep 300")
        code, out, err = world.ctl("ps", name)
        lines = out.splitlines()
        expect(code == 0 and len(lines) == 3 and lines[0].split() == ["ID", "STATUS", "EXIT", "STARTED", "COMMAND"],
               "ps: a header and two commands:", code, out, err)
        expect(re.match(r"^%s\s+running\s+-\s+\S+\s+sh -c 'exec sleep 300'$" % running, lines[1]),
               "the running command first:", lines[1])
        expect(re.match(r"^cmd-\w{16}\s+exited\s+5\s+\S+\s+sh -c 'exit 5'$", lines[2]), "the exited one:", lines[2])
        got = json.loads(world.ctl("--json", "ps", name, check=True)[1])
        expect_eq([(c["cmdId"] == running, c["exitCode"]) for c in got["commands"]], [(True, None), (False, 5)],
                  "ps --json: the commands as command.get shows them")
        expect_eq(got["nextCursor"], None, "ps --json gives every page")
        code, out, err = world.ctl("ps", name, "--limit", "1")
        m = re.search(r"^next cursor: (\S+)$", out, re.M)
        expect(code == 0 and running in out and m, "ps --limit 1: the newest and a cursor:", code, out, err)
        code, out, err = world.ctl("ps", name, "--limit", "1", "--cursor", m.group(1))
        expect(code == 0 and "exited" in out and running not in out and "next cursor" not in out,
               "ps --cursor: the next page:", code, out, err)
        # The method refuses what it does not know, as every method does.
        for params, field in (({"name": name, "limt": 1}, "limt"), ({"name": name, "cursor": "x"}, "cursor"),
                              ({"name": name, "cursor": "1." + "x" * 100}, "cursor"), ({"name": name, "limit": 0}, "limit")):
            e = world.rpc("command.list", params).get("error") or {}
            expect(e.get("code") == -32602 and (e.get("data") or {}).get("field") == field,
                   "command.list %r is refused naming %s:" % (params, field), e)
        # After a restart the re-adopted commands are listed, same ids.
        d = world.daemon
        expect_eq(d.stop(), 0, "sandboxd exit status on SIGTERM")
        d.start()
        got = json.loads(world.ctl("--json", "ps", name, check=True)[1])
        expect_eq([(c["cmdId"], c["exitCode"]) for c in got["commands"]][:1], [(running, None)],
                  "ps after a restart lists the running command")
        world.ctl("command", "kill", running, check=True)
    code, _o, err = world.ctl("ps", world.name("nosuch"))
    expect_eq(code, 4, "ps of an unknown sandbox (%s)" % err.strip())


def test_pause_and_resume_freeze_and_thaw_a_sandbox(world):
    with sandbox(world, "pause", "--deny-all") as name:
        code, out, err = world.ctl("pause", name)
        expect_eq((code, out), (0, ""), "pause prints nothing (%s)" % err.strip())
        got = json.loads(world.ctl("--json", "get", name, check=True)[1])
        expect_eq(got["session"]["paused"], True, "session.paused after pause")
        code, _o, err = world.ctl("exec", name, "--", "true")
        expect(code != 0 and "paused" in err, "exec in a paused sandbox is refused:", code, err)
        code, out, err = world.ctl("--json", "resume", name)
        expect_eq((code, json.loads(out)["session"]["paused"] if code == 0 else None), (0, False),
                  "resume --json shows the thawed sandbox (%s)" % err.strip())
        code, out, _e = world.ctl("exec", name, "--", "echo", "ok")
        expect_eq((code, out), (0, "ok\n"), "exec after resume")
    code, _o, err = world.ctl("pause", world.name("nosuch"))
    expect_eq(code, 4, "pause of an unknown sandbox (%s)" % err.strip())


def test_rm_takes_several_names_and_force_ignores_missing_ones(world):
    a, _c, _o, _e = create(world, "rma", "--deny-all")
    b, _c, _o, _e = create(world, "rmb", "--deny-all")
    missing = world.name("rmgone")
    code, out, err = world.ctl("rm", a, missing, b)
    lines = err.splitlines()
    expect(code == 4 and out == "" and len(lines) == 1 and missing in lines[0],
           "rm A MISSING B: one error naming the missing one, exit 4:", code, repr(err))
    for n in (a, b):
        expect_eq(world.ctl("get", n)[0], 4, "rm removed %s despite the failure before it" % n)
    code, out, err = world.ctl("rm", "-f", a, missing)
    expect_eq((code, out, err), (0, "", ""), "rm -f of names already gone")
    code, out, err = world.ctl("--json", "rm", a, missing)
    expect(code == 4 and out == "" and len(err.splitlines()) == 1, "rm --json of two missing names:", code, out, err)
    got = json.loads(err)["error"]
    expect_eq(sorted(e["name"] for e in got["data"]["errors"]), sorted([a, missing]),
              "one error object naming each failure")
    code, _o, err = world.ctl("rm")
    expect_eq(code, 2, "rm without a name (%s)" % err.strip())


def test_fs_stat_shows_the_mode_in_octal(world):
    with sandbox(world, "fsstat", "--deny-all") as name:
        world.ctl("exec", name, "--", "sh", "-c", "echo x > /tmp/f && chmod 640 /tmp/f", check=True)
        code, out, err = world.ctl("fs", "stat", "%s:/tmp/f" % name)
        expect(code == 0 and re.search(r"^mode: 0640$", out, re.M), "fs stat mode in octal:", code, out, err)
        got = json.loads(world.ctl("--json", "fs", "stat", "%s:/tmp/f" % name, check=True)[1])
        expect_eq(got["mode"], 0o640, "fs stat --json keeps the number")


def _complete_names(world, socket, *words):
    import world as W
    script = ('source %s; COMP_WORDS=(sandboxctl %s); COMP_CWORD=%d; _sandboxctl; '
              'printf "%%s\\n" "${COMPREPLY[@]}"' % (COMPLETION, " ".join("'%s'" % w for w in words), len(words)))
    out = subprocess.run(["bash", "--norc", "-c", script], capture_output=True, text=True, timeout=60,
                         env={"PATH": os.path.dirname(W.SANDBOXCTL) + ":" + os.environ["PATH"],
                              "SANDBOXD_SOCKET": socket})
    expect_eq(out.stderr, "", "completion is quiet on stderr")
    return set(out.stdout.split())


def test_bash_completion_of_sandbox_snapshot_and_runtime_names(world):
    with sandbox(world, "compl", "--deny-all", "--persistent") as name:
        snap = world.ctl("snapshot", name, check=True)[1].strip()
        try:
            sock = world.daemon.socket
            for words, want in ((("get", name[:-2]), name), (("ps", ""), name), (("pause", ""), name),
                                (("rm", "-f", ""), name), (("create", "--snapshot", ""), snap),
                                (("snapshots", "rm", ""), snap), (("create", "--runtime", ""), "host"),
                                (("runtime", "rm", ""), "host")):
                got = _complete_names(world, sock, *words)
                expect(want in got, "completing %r offers %s:" % (words, want), sorted(got)[:20])
            # --socket on the command line is the daemon asked.
            got = _complete_names(world, world.tmp + "/none.sock", "--socket", sock, "get", "")
            expect(name in got, "completion asks the --socket given:", sorted(got)[:20])
            # No daemon: nothing offered, nothing printed.
            expect_eq(_complete_names(world, world.tmp + "/none.sock", "get", ""), set(),
                      "no names without a daemon")
        finally:
            world.ctl("snapshots", "rm", snap)


def test_json_errors_are_one_object_on_stderr_for_every_verb(world):
    bogus = os.path.join(world.tmp, "no-daemon.sock")
    missing = world.name("jsonerr")
    cases = [(["--socket", bogus, "--json", verb, "x"] if verb not in ("certs", "cp", "exec") else
              ["--socket", bogus, "--json", verb]) for verb in VERBS]
    cases += [["--json", "get", missing], ["get", missing, "--json"], ["--json", "get", "--bogus", "x"],
              ["--json", "frob"], ["--json", "rm", missing], ["--json", "command", "wait", "cmd-0000000000000000"],
              ["--json", "fs", "stat", missing + ":/x"], ["--json", "create", "--vcpus", "0"],
              ["--json", "ps", missing], ["--json", "pause", missing], ["--json", "exec", missing, "--", "true"]]
    for args in cases:
        code, out, err = world.ctl(*args)
        lines = err.splitlines()
        expect(code != 0 and out == "" and len(lines) == 1, "%r: one line on stderr, none on stdout:" % (args,),
               code, repr(out), repr(err))
        got = json.loads(lines[0])
        e = got.get("error") or {}
        expect(list(got) == ["error"] and isinstance(e.get("code"), int) and e.get("message")
               and e.get("data", {}).get("exitCode") == code,
               "%r: {error: {code, message, data: {exitCode}}}:" % (args,), got)
    code, _o, err = world.ctl("--json", "get", missing)
    e = json.loads(err)["error"]
    expect_eq((code, e["code"], e["data"]["reason"]), (4, -32000, "not_found"), "the daemon's code and reason")
    code, _o, err = world.ctl("get", missing)
    expect(code == 4 and err.startswith("sandboxctl: get %s:" % missing), "without --json: the text line", err)



def test_command_logs_follow_goes_on_across_a_daemon_restart(world):
    import world as W
    with sandbox(world, "followrst", "--deny-all") as name:
        cmd_id = _detach(world, name, "echo one; while [ ! -e /tmp/go ]; do sleep 0.1; done; echo two; exit 0")
        argv = [W.SANDBOXCTL, "--socket", world.daemon.socket, "command", "logs", "-f", cmd_id]
        p = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        try:
            first = _read_until(p, b"one\n", 60, "command logs -f prints output written so far")
            d = world.daemon
            expect_eq(d.stop(), 0, "sandboxd exit status on SIGTERM")
            d.start()
            world.ctl("exec", name, "--", "touch", "/tmp/go", check=True)
            rest, err = p.communicate(timeout=90)
        finally:
            if p.poll() is None:
                p.kill()
                p.wait()
        expect_eq((p.returncode, first + rest, err), (0, b"one\ntwo\n", b""),
                  "command logs -f across a restart: every byte once, exit 0")


# A file name chosen by code in the sandbox to act on the operator's
# terminal: an OSC title with BEL, a clear screen, and a newline that would
# print a made-up "deleted file" line in fs watch.
_HOSTILE = "\x1b]0;PWNED\x07\x1b[2Jz\ndeleted file FORGED"
_HOSTILE_SHOWN = "\\x1b]0;PWNED\\x07\\x1b[2Jz\\ndeleted file FORGED"


def _make_files(world, name, *names):
    """Creates /workspace/N for each name from inside the sandbox (the
    names pass as hex, so no argv or shell quoting is involved)."""
    script = "import sys\nfor h in sys.argv[1:]: open('/workspace/' + bytes.fromhex(h).decode(), 'w').close()"
    world.ctl("exec", name, "--", "python3", "-c", script, *[n.encode().hex() for n in names], check=True)


def test_fs_ls_and_stat_show_control_characters_in_names_escaped(world):
    with sandbox(world, "escls", "--deny-all") as name:
        _make_files(world, name, _HOSTILE, "café")
        code, out, err = world.ctl("fs", "ls", name + ":/workspace")
        expect_eq(code, 0, "fs ls (%s)" % err.strip())
        expect(not re.search("[\x00-\x08\x0b-\x1f\x7f]", out), "fs ls prints no control character:", repr(out))
        rows = out.splitlines()[1:]
        expect([r for r in rows if r.endswith(" " + _HOSTILE_SHOWN)] and
               [r for r in rows if r.endswith(" café")] and
               not [r for r in rows if not r.endswith((" " + _HOSTILE_SHOWN, " café"))],
               "one row per file, the name escaped, café unchanged, no forged row:", repr(out))
        code, out, err = world.ctl("fs", "stat", name + ":/workspace/" + _HOSTILE)
        expect_eq(code, 0, "fs stat of the hostile name (%s)" % err.strip())
        expect(not re.search("[\x00-\x08\x0b-\x1f\x7f]", out) and _HOSTILE_SHOWN in out,
               "fs stat shows the name escaped:", repr(out))
        expect(all(re.match(r"^[\w.\[\]]+: ", l) for l in out.splitlines()),
               "fs stat: only key: value lines, none forged:", repr(out))
        code, out, err = world.ctl("fs", "stat", name + ":/workspace/café", check=True)
        expect("/workspace/café" in out or "café" in out, "fs stat keeps café as it is:", repr(out))
        # An error relayed from the daemon that names the path escapes it too.
        code, out, err = world.ctl("fs", "ls", name + ":/workspace/" + _HOSTILE + "/x")
        expect(code != 0 and not re.search("[\x00-\x08\x0b-\x1f\x7f]", err) and len(err.splitlines()) == 1,
               "fs ls error: one line, no control character:", code, repr(err))


def test_fs_watch_prints_one_escaped_line_per_event_and_no_forged_line(world):
    import signal
    import world as W
    with sandbox(world, "escwatch", "--deny-all") as name:
        argv = [W.SANDBOXCTL, "--socket", world.daemon.socket, "fs", "watch", name + ":/workspace"]
        p = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        try:
            first = p.stderr.readline().decode()
            expect(first.startswith("watching "), "first line of fs watch on stderr:", first)
            _make_files(world, name, _HOSTILE, "café", "marker")
            got = _read_until(p, b"marker\n", 60, "fs watch prints the marker's event")
            p.send_signal(signal.SIGINT)
            expect_eq(p.wait(30), 130, "fs watch exits 130 on Ctrl-C")
        finally:
            if p.poll() is None:
                p.kill()
                p.wait()
        text = got.decode()
        expect(not re.search("[\x00-\x08\x0b-\x1f\x7f]", text.replace("\n", "")),
               "fs watch prints no control character:", repr(text))
        lines = text.splitlines()
        pattern = r"^(created|modified|deleted) file /workspace/(%s|café|marker)$" % re.escape(_HOSTILE_SHOWN)
        expect(all(re.match(pattern, l) for l in lines), "every line is one event of one of the files:", repr(text))
        expect("created file /workspace/" + _HOSTILE_SHOWN in lines and "created file /workspace/café" in lines,
               "the hostile name escaped, café unchanged:", repr(text))
        expect(not [l for l in lines if l.startswith("deleted file FORGED")], "no forged line:", repr(text))


def test_ps_shows_control_characters_in_command_lines_escaped(world):
    with sandbox(world, "escps", "--deny-all") as name:
        world.ctl("exec", name, "--", "printf", "%s", "\x1b[2J\x1b]0;PS\x07 café", check=True)
        code, out, err = world.ctl("ps", name)
        expect_eq(code, 0, "ps (%s)" % err.strip())
        expect(not re.search("[\x00-\x08\x0b-\x1f\x7f]", out), "ps prints no control character:", repr(out))
        expect("printf %s '\\x1b[2J\\x1b]0;PS\\x07 café'" in out, "ps shows the command line escaped:", repr(out))


def test_get_and_ls_show_control_characters_in_tags_escaped(world):
    # A tag is a client's text: another client (or a script fed from the
    # sandbox) may put escapes in it.
    with sandbox(world, "esctag", "--deny-all", "--tag", "note=\x1b]0;T\x07a\nname: forged café") as name:
        code, out, err = world.ctl("get", name)
        expect_eq(code, 0, "get (%s)" % err.strip())
        expect(not re.search("[\x00-\x08\x0b-\x1f\x7f]", out), "get prints no control character:", repr(out))
        expect("tags.note: \\x1b]0;T\\x07a\\nname: forged café\n" in out and
               not [l for l in out.splitlines() if l.startswith("name: forged")],
               "get shows the tag escaped on one line:", repr(out))
        code, out, err = world.ctl("ls", "--tag", "note=\x1b]0;T\x07a\nname: forged café")
        expect_eq(code, 0, "ls --tag (%s)" % err.strip())
        expect(name in out and not re.search("[\x00-\x08\x0b-\x1f\x7f]", out),
               "ls --tag finds it and prints no control character:", repr(out))


def _get(world, name):
    return json.loads(world.ctl("--json", "get", name, check=True)[1])


def test_set_timeout_ends_the_session_sooner_or_pauses_it(world):
    """set-timeout moves the running session's end to DURATION from now
    (earlier here) without changing the sandbox's own timeout; at that end
    a persistent sandbox stops; with --on-timeout pause the session is
    paused instead, and resume thaws it."""
    with sandbox(world, "settime", "--deny-all", "--persistent", "--timeout", "10m") as name:
        before = _expires(world, name)
        code, out, err = world.ctl("--json", "set-timeout", name, "5m")
        expect_eq(code, 0, "set-timeout 5m (%s)" % err.strip())
        got = json.loads(out)
        expect(got["expiresAt"] < before, "the session ends earlier:", got["expiresAt"], before)
        expect_eq(got["timeout"], 600000, "the sandbox's own timeout")
        expect_eq(got["session"]["onTimeout"], "stop", "session.onTimeout")
        code, out, err = world.ctl("set-timeout", name, "1s")
        expect_eq(code, 0, "set-timeout 1s (%s)" % err.strip())
        expect(re.search(r"^expiresAt: ", out, re.M), "set-timeout shows the sandbox:", out)
        poll(lambda: _get(world, name)["status"] == "stopped", 30, "the sandbox stopped at its new expiry")
        code, _o, err = world.ctl("set-timeout", name, "1m")
        expect_eq(code, 1, "set-timeout of a stopped sandbox (%s)" % err.strip())
        expect("sandbox_stopped" in err or "not running" in err or "stopped" in err,
               "the error says it is stopped:", err.strip())
    with sandbox(world, "setpause", "--deny-all", "--timeout", "10m") as name:
        code, _o, err = world.ctl("set-timeout", name, "1s", "--on-timeout", "later")
        expect_eq(code, 2, "a bad --on-timeout is a usage error (%s)" % err.strip())
        expect("--on-timeout" in err, "the error names the flag:", err.strip())
        code, _o, err = world.ctl("set-timeout", name, "10")
        expect_eq(code, 2, "a timeout under 1s is refused as a usage error (%s)" % err.strip())
        code, out, err = world.ctl("--json", "set-timeout", name, "1s", "--on-timeout", "pause")
        expect_eq(code, 0, "set-timeout --on-timeout pause (%s)" % err.strip())
        expect_eq(json.loads(out)["session"]["onTimeout"], "pause", "session.onTimeout")
        poll(lambda: _get(world, name)["session"]["paused"], 30, "the session paused at its expiry")
        expect_eq(_get(world, name)["status"], "running", "a paused session still runs")
        code, _o, err = world.ctl("exec", name, "--", "true")
        expect_eq(code, 1, "exec into the paused sandbox is refused (%s)" % err.strip())
        world.ctl("resume", name, check=True)
        code, out, err = world.ctl("exec", name, "--", "echo", "thawed")
        expect_eq((code, out), (0, "thawed\n"), "exec after resume (%s)" % err.strip())
    code, _o, err = world.ctl("set-timeout", world.name("nosuch"), "1m")
    expect_eq(code, 4, "set-timeout of an unknown sandbox (%s)" % err.strip())


def test_snapshot_tags_and_snapshots_ls_filters(world):
    """snapshot --tag labels the snapshot; snapshots ls --tag lists only
    those that carry every given tag, --sandbox only one sandbox's."""
    name, _c, _o, _e = create(world, "snaptag", "--deny-all")
    ids = []
    tag = world.name("t")
    try:
        code, out, err = world.ctl("snapshot", name)
        expect_eq(code, 0, "snapshot (%s)" % err.strip())
        ids.append(out.strip())
        code, out, err = world.ctl("snapshot", name, "--tag", "suite=" + tag, "--tag", "kind=base")
        expect_eq(code, 0, "snapshot --tag (%s)" % err.strip())
        ids.append(out.strip())
        got = json.loads(world.ctl("--json", "snapshots", "ls", "--tag", "suite=" + tag, check=True)[1])["snapshots"]
        expect_eq([s["id"] for s in got], [ids[1]], "snapshots ls --tag: only the tagged one")
        expect_eq(got[0]["tags"], {"suite": tag, "kind": "base"}, "its tags")
        code, out, err = world.ctl("snapshots", "ls", "--tag", "suite=" + tag)
        expect_eq(code, 0, "snapshots ls --tag (%s)" % err.strip())
        expect_eq([l.split()[0] for l in out.splitlines()[1:]], [ids[1]], "the table's rows")
        got = json.loads(world.ctl("--json", "snapshots", "--tag", "suite=" + tag, "--tag", "kind=other",
                                   check=True)[1])["snapshots"]
        expect_eq(got, [], "every tag must match")
        got = json.loads(world.ctl("--json", "snapshots", "ls", "--sandbox", name, check=True)[1])["snapshots"]
        expect_eq([s["id"] for s in got], ids, "snapshots ls --sandbox: the sandbox's, oldest first")
        code, _o, err = world.ctl("snapshot", name, "--tag", "novalue")
        expect_eq(code, 2, "snapshot --tag without = (%s)" % err.strip())
        code, _o, err = world.ctl("snapshots", "rm", ids[0], "--tag", "a=b")
        expect_eq(code, 2, "--tag is an option of ls only (%s)" % err.strip())
    finally:
        for i in ids:
            world.ctl("snapshots", "rm", i)
        delete(world, name)


def test_container_pause_and_resume(world):
    """container pause freezes one container of a sandbox (a command into
    it is refused) and resume thaws it; container ls shows which."""
    with sandbox_rpc(world, "ctrcli") as name:
        rpc_ok(world, "container.create", {"sandbox": name, "name": "a", "runtime": "host"})
        code, out, err = world.ctl("container", "ls", name)
        expect_eq(code, 0, "container ls (%s)" % err.strip())
        rows = [l.split() for l in out.splitlines()]
        expect_eq([r[:3] for r in rows[1:]], [["a", "host", "no"]], "container ls rows")
        code, out, err = world.ctl("container", "pause", name, "a")
        expect_eq((code, out), (0, ""), "container pause prints nothing (%s)" % err.strip())
        expect_eq(rpc_ok(world, "container.get", {"sandbox": name, "name": "a"})["paused"], True, "a is paused")
        expect_eq(world.ctl("container", "ls", name, check=True)[1].splitlines()[1].split()[2], "yes",
                  "container ls shows it paused")
        code, _o, err = world.ctl("exec", "--container", "a", name, "--", "true")
        expect_eq(code, 1, "exec into the paused container is refused (%s)" % err.strip())
        expect("paused" in err, "the message says it is paused:", err.strip())
        code, out, err = world.ctl("--json", "container", "resume", name, "a")
        expect_eq(code, 0, "container resume (%s)" % err.strip())
        expect_eq(json.loads(out)["paused"], False, "--json shows the container")
        code, out, err = world.ctl("exec", "--container", "a", name, "--", "echo", "thawed")
        expect_eq((code, out), (0, "thawed\n"), "exec after the resume (%s)" % err.strip())
        code, _o, err = world.ctl("container", "pause", name, "nosuch")
        expect_eq(code, 4, "pause of an unknown container (%s)" % err.strip())
        code, _o, err = world.ctl("container", "pause", name)
        expect_eq(code, 2, "pause without NAME (%s)" % err.strip())
