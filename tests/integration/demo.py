#!/usr/bin/env python3
"""make demo: the main job, narrated, in the test world.

Starts the test world and a private sandboxd inside it, creates a deny-all
sandbox from this project's own git repository (served by the world's git
server), runs a short real job inside, shows a denied connection failing at
once, deletes the sandbox and tears everything down.
"""
import json
import os
import shutil
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import leaks  # noqa: E402
import world as W  # noqa: E402


def say(text=""):
    print(text, flush=True)


def step(text):
    say()
    say("==> " + text)


def stream(argv, d):
    """Runs sandboxctl with its output going straight to ours (streamed)."""
    t = time.monotonic()
    p = subprocess.run([W.SANDBOXCTL, "--socket", d.socket] + argv, stdin=subprocess.DEVNULL)
    return p.returncode, (time.monotonic() - t) * 1000


def main():
    if os.geteuid() != 0:
        say("demo: needs root (network namespaces)")
        return 1
    with W.World(quiet=False) as w:
        step("Test world up: world host %s (203.0.113.1), internet %s" % (w.host_ns, w.net_ns))
        say("    git server  git://%s/sandboxd.git  (a bare clone of %s at %s)"
            % (W.GIT_ADDR, W.REPO, w.git_head[:12]))
        say("    http server http://%s/   dns %s" % (W.HTTP_ADDR, W.DNS_ADDR))
        d = w.start_sandboxd()
        info = d.rpc_result("daemon.info")
        step("sandboxd %s running as pid %d (cgroups %s)"
             % (info.get("version"), d.pid, info.get("capabilities", {}).get("cgroup")))
        name = "demo-" + w.id
        step("Creating deny-all sandbox %s from the project's own repository" % name)
        t = time.monotonic()
        code, out, err = d.ctl("--json", "create", "--name", name, "--deny-all",
                               "--git", w.git_url, timeout=300)
        if code != 0:
            say("    create failed (exit %d): %s" % (code, err.strip()))
            say(d.log_tail())
            return 1
        sb = json.loads(out)
        say("    created in %.0f ms: status %s, policy %s"
            % ((time.monotonic() - t) * 1000, sb.get("status"), sb.get("networkPolicy")))
        try:
            step("Inside: who am I, where am I")
            stream(["exec", name, "--", "sh", "-c",
                    "echo \"user $(id -un) uid $(id -u) on host $(hostname)\"; "
                    "echo \"PID 1 is $(tr \"\\\\0\" \" \" < /proc/1/cmdline)\"; pwd"], d)
            step("Inside: git log --oneline | head -5")
            stream(["exec", name, "--", "sh", "-c", "git log --oneline | head -5"], d)
            step("Inside: ls")
            stream(["exec", name, "--", "ls"], d)
            if shutil.which("cc"):
                step("Inside: compile one file of the project with cc -c")
                code, ms = stream(["exec", name, "--", "sh", "-c",
                                   "cc -std=gnu11 -D_GNU_SOURCE -I. -c libcore/error.c -o /tmp/error.o "
                                   "&& ls -l /tmp/error.o"], d)
                say("    (exit %d, %.0f ms)" % (code, ms))
            step("Inside: try to reach the internet's http server at %s:80" % W.HTTP_ADDR)
            code, out, _e = d.ctl("exec", name, "--", "bash", "-c",
                                  "s=$(date +%s%N); "
                                  "err=$(timeout 5 bash -c 'echo > /dev/tcp/203.0.113.10/80' 2>&1); "
                                  "rc=$?; e=$(date +%s%N); "
                                  "echo \"exit $rc after $(( (e - s) / 1000000 )) ms: ${err##*: }\"")
            say("    " + out.strip())
            say("    (deny-all: the connect is refused at once, it never hangs)")
        finally:
            step("Deleting %s" % name)
            code, _o, err = d.ctl("rm", name)
            say("    rm exit %d %s" % (code, err.strip()))
        problems = leaks.find(w, name)
        say("    leak check: %s" % ("nothing left" if not problems else "; ".join(problems)))
        w.stop_sandboxd()
        step("Tearing the world down")
    say("    done.")
    return 0


if __name__ == "__main__":
    sys.exit(main())
