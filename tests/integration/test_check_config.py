"""`sandboxd --check-config [FILE]` (sandboxd(8)): validates a daemon.json
as the daemon would, prints the effective configuration as JSON, exit 0; on
a bad file one error naming the key and the fix, exit 1. It runs as an
unprivileged user and creates nothing: no state or run directory, no socket.
"""
import json
import os
import shutil
import subprocess
import tempfile

import world as W
from common import expect, expect_eq

NOBODY = 65534


def _as_nobody():
    os.setgroups([])
    os.setgid(NOBODY)
    os.setuid(NOBODY)


class _Dir:
    """A directory nobody can read, removed afterwards."""

    def __enter__(self):
        self.path = tempfile.mkdtemp(prefix="check-config-")
        os.chmod(self.path, 0o755)
        return self

    def write(self, name, text):
        p = os.path.join(self.path, name)
        with open(p, "w") as f:
            f.write(text)
        os.chmod(p, 0o644)
        return p

    def __exit__(self, *exc):
        shutil.rmtree(self.path, ignore_errors=True)


def _check(*args):
    p = subprocess.run([W.SANDBOXD, "--check-config", *args], preexec_fn=_as_nobody,
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=30)
    return p.returncode, p.stdout, p.stderr


def test_check_config_prints_every_key_with_defaults_and_touches_nothing(world):
    with _Dir() as d:
        state = os.path.join(d.path, "state")
        run = os.path.join(d.path, "run")
        path = d.write("daemon.json", json.dumps({
            "maxVcpus": 12, "stateDir": state, "runDir": run,
            "socket": os.path.join(run, "s.sock"), "localSourceRoots": ["/srv"]}))
        rc, out, err = _check(path)
        expect_eq(rc, 0, "exit status; stderr: %s" % err)
        cfg = json.loads(out)
        expect_eq(cfg["maxVcpus"], 12, "the file's value")
        expect_eq(cfg["stateDir"], state, "the file's value")
        expect_eq(cfg["localSourceRoots"], ["/srv"], "the file's value")
        # Defaults of keys the file does not name, as sandboxd(8) gives them.
        expect_eq(cfg["pidsMax"], 4096, "default pidsMax")
        expect_eq(cfg["logBudgetMiB"], 256, "default logBudgetMiB")
        expect_eq(cfg["diskMiB"], 2048, "default diskMiB")
        expect_eq(cfg["networkPool"], "10.201.0.0/16", "default networkPool")
        expect(cfg["proxyUpstreamCA"] is None, "proxyUpstreamCA unset: %r" % cfg["proxyUpstreamCA"])
        for key in ("socket", "runDir", "socketGroup", "maxLineBytes", "defaultTimeoutMs", "maxTimeoutMs",
                    "stopGraceMs", "commandLogBytes", "diskInodes", "maxSourceBytes", "initPath",
                    "runtimeCache", "bootstrapTimeoutMs", "userns", "usernsBase", "usernsSize"):
            expect(key in cfg, "%s missing from %s" % (key, out))
        expect(not os.path.exists(state) and not os.path.exists(run),
               "--check-config created %s" % os.listdir(d.path))
        # The printed configuration is itself a valid file (null keys aside).
        again = d.write("again.json", json.dumps({k: v for k, v in cfg.items() if v is not None}))
        rc, out2, err = _check(again)
        expect_eq(rc, 0, "the printed configuration loads back; stderr: %s" % err)
        expect_eq(json.loads(out2), cfg, "same effective configuration")


def test_check_config_unknown_key_suggests_the_close_one(world):
    with _Dir() as d:
        rc, out, err = _check(d.write("daemon.json", '{"pidsMac": 100}'))
        expect(rc != 0, "exit status %d" % rc)
        expect_eq(out, "", "nothing on stdout")
        expect("unknown key 'pidsMac'" in err and 'did you mean "pidsMax"?' in err, err)


def test_check_config_refuses_wrong_type_range_and_duplicates(world):
    cases = [
        ('{"maxVcpus": "4"}', "maxVcpus: must be an integer from 1 to 256"),
        ('{"userns": "yes"}', "userns: must be true or false"),
        ('{"stateDir": 7}', "stateDir: must be a string"),
        ('{"logBudgetMiB": 0}', "logBudgetMiB: must be an integer from 1 to 1048576"),
        ('{"pidsMax": 5000000}', "pidsMax: must be an integer from 16 to 4194304"),
        ('{"diskMiB": 1}', "diskMiB: must be 0 (unbounded) or from 16"),
        ('{"usernsSize": 100000}', "usernsSize: 100000 is not a multiple of 65536"),
        ('{"defaultTimeoutMs": 7200000, "maxTimeoutMs": 3600000}', "exceeds maxTimeoutMs"),
        ('{"maxVcpus": 4, "maxVcpus": 4}', "maxVcpus: key given more than once"),
        ('{"MaxVcpus": 4}', 'did you mean "maxVcpus"?'),
        ('{"maxVcpus": 4', "not valid JSON"),
    ]
    with _Dir() as d:
        for text, needle in cases:
            rc, out, err = _check(d.write("daemon.json", text))
            expect(rc != 0, "%s: exit status %d" % (text, rc))
            expect(needle in err, "%s: %r not in %r" % (text, needle, err))


def test_check_config_missing_file_is_an_error(world):
    with _Dir() as d:
        missing = os.path.join(d.path, "nope.json")
        rc, out, err = _check(missing)
        expect(rc != 0, "exit status %d" % rc)
        expect(missing in err and "No such file" in err, err)
        # Named with --config instead of as the operand: the same.
        p = subprocess.run([W.SANDBOXD, "--config", missing, "--check-config"], preexec_fn=_as_nobody,
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=30)
        expect(p.returncode != 0 and missing in p.stderr, p.stderr)
        # The operand belongs to --check-config only.
        p = subprocess.run([W.SANDBOXD, missing], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                           text=True, timeout=30)
        expect_eq(p.returncode, 2, "a stray operand is a usage error")


def test_check_config_quiet_prints_only_errors(world):
    """--quiet (ExecReload=, the package's postinst): exit status alone on a
    good file, the error on stderr on a bad one."""
    with _Dir() as d:
        rc, out, err = _check("--quiet", d.write("good.json", '{"maxVcpus": 4}'))
        expect_eq((rc, out, err), (0, "", ""), "a good file under --quiet")
        rc, out, err = _check("--quiet", d.write("bad.json", '{"maxVcpus": 0}'))
        expect(rc == 1 and out == "" and "maxVcpus: must be an integer from 1 to 256" in err,
               "a bad file under --quiet: %d %r %r" % (rc, out, err))
        p = subprocess.run([W.SANDBOXD, "--quiet"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                           text=True, timeout=30)
        expect_eq(p.returncode, 2, "--quiet without --check-config is a usage error")


def test_check_config_default_network_policy_is_validated_and_shown(world):
    """daemon.json defaultNetworkPolicy: allow-all when unset, any
    networkPolicy value otherwise (header values printed redacted); a bad
    one is refused naming the key and where in it."""
    with _Dir() as d:
        rc, out, err = _check(d.write("none.json", "{}"))
        expect_eq(rc, 0, "exit status; stderr: %s" % err)
        expect_eq(json.loads(out)["defaultNetworkPolicy"], "allow-all", "the default when unset")
        rc, out, err = _check(d.write("deny.json", '{"defaultNetworkPolicy": "deny-all"}'))
        expect_eq(rc, 0, "exit status; stderr: %s" % err)
        expect_eq(json.loads(out)["defaultNetworkPolicy"], "deny-all", "the file's value")
        doc = {"allow": {"api.public.test": [{"transform": [{"headers": {"authorization": "Bearer sk-9"}}]}]}}
        rc, out, err = _check(d.write("rules.json", json.dumps({"defaultNetworkPolicy": doc})))
        expect_eq(rc, 0, "exit status; stderr: %s" % err)
        expect("sk-9" not in out and "<redacted>" in out, "the header value is redacted: %s" % out)
        for text, needle in (
                ('{"defaultNetworkPolicy": "deny"}', 'defaultNetworkPolicy: unknown policy "deny"'),
                ('{"defaultNetworkPolicy": null}', 'defaultNetworkPolicy: must be "allow-all"'),
                ('{"defaultNetworkPolicy": {"allow": ["*.com"]}}', "defaultNetworkPolicy.allow[0]"),
                ('{"defaultNetworkPolicy": {"subnets": {"allow": ["10.0.0.5/8"]}}}',
                 "defaultNetworkPolicy.subnets.allow[0]")):
            rc, out, err = _check(d.write("bad.json", text))
            expect(rc == 1 and out == "", "%s: exit %d, stdout %r" % (text, rc, out))
            expect(needle in err, "%s: %r not in %r" % (text, needle, err))
