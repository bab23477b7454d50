#!/usr/bin/env python3
"""The Debian package (debian/), as `make deb` builds it: what it installs,
what its maintainer scripts do, what lintian says, and that the files it
ships work as installed (the binaries run, sysusers and tmpfiles create the
group and directories in a scratch root, daemon.json passes --check-config).
`make install` into a scratch DESTDIR still installs the same program files.

    python3 tests/deb/check.py build/deb/sandboxd_VERSION_ARCH.deb

Run by `make deb-check` (after `make deb`) and by `make check`. One line per
check, then "deb: N passed, N failed"; exit 1 on any failure.
"""
import os
import re
import shutil
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

# Every file the package must ship (paths as dpkg-deb -c lists them).
EXPECTED = {
    "/usr/sbin/sandboxd",
    "/usr/bin/sandboxctl",
    "/usr/bin/sandboxd-e2b",
    "/usr/bin/containerd-shim-sandboxd-v2",
    "/usr/libexec/sandboxd/sandbox-init",
    "/usr/libexec/sandboxd/sandbox-netd",
    "/lib/systemd/system/sandboxd.service",
    "/lib/systemd/system/sandboxd.socket",
    "/lib/systemd/system/sandboxd-e2b.service",
    "/usr/lib/sysusers.d/sandboxd.conf",
    "/usr/lib/tmpfiles.d/sandboxd.conf",
    "/etc/sandboxd/daemon.json",
    "/usr/share/man/man1/sandboxctl.1.gz",
    "/usr/share/man/man5/sandboxd-policy.5.gz",
    "/usr/share/man/man8/sandboxd.8.gz",
    "/usr/share/bash-completion/completions/sandboxctl",
    "/usr/share/doc/sandboxd/copyright",
    "/usr/share/doc/sandboxd/changelog.gz",
    "/usr/share/doc/sandboxd/README.md.gz",
    "/usr/share/doc/sandboxd/API.md.gz",
    "/usr/share/doc/sandboxd/POLICY.md.gz",
    "/usr/share/doc/sandboxd/SECURITY.md.gz",
}


def run(*argv, **kw):
    return subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                          timeout=kw.pop("timeout", 300), **kw)


def makefile_version():
    with open(os.path.join(ROOT, "Makefile")) as f:
        return re.search(r"^VERSION\s*:=\s*(\S+)", f.read(), re.M).group(1)


class Checks:
    def __init__(self, deb, scratch):
        self.deb = deb
        self.scratch = scratch
        self.root = os.path.join(scratch, "root")
        self.ctrl = os.path.join(scratch, "control")

    def check_name_and_version(self):
        version = makefile_version()
        arch = run("dpkg", "--print-architecture").stdout.strip()
        assert os.path.basename(self.deb) == "sandboxd_%s_%s.deb" % (version, arch), self.deb
        got = run("dpkg-deb", "-f", self.deb, "Package", "Version", "Architecture").stdout.split("\n")
        assert got[:3] == ["Package: sandboxd", "Version: " + version, "Architecture: " + arch], got

    def check_file_list(self):
        p = run("dpkg-deb", "-c", self.deb)
        assert p.returncode == 0, p.stdout
        files = {line.split(None, 5)[5].lstrip(".") for line in p.stdout.splitlines()
                 if not line.startswith("d")}
        missing = EXPECTED - files
        assert not missing, "missing from the package: %s" % sorted(missing)
        extra = {f for f in files - EXPECTED}
        assert not extra, "unexpected files in the package: %s" % sorted(extra)

    def check_conffile(self):
        with open(os.path.join(self.ctrl, "conffiles")) as f:
            assert f.read().split() == ["/etc/sandboxd/daemon.json"], "conffiles"

    def check_postinst(self):
        with open(os.path.join(self.ctrl, "postinst")) as f:
            text = f.read()
        order = ["systemd-sysusers ${DPKG_ROOT:+--root=\"$DPKG_ROOT\"} sandboxd.conf",
                 "systemd-tmpfiles ${DPKG_ROOT:+--root=\"$DPKG_ROOT\"} --create sandboxd.conf",
                 "deb-systemd-helper enable 'sandboxd.socket'",
                 "deb-systemd-invoke start 'sandboxd.socket'"]
        at = [text.find(s) for s in order]
        assert all(i >= 0 for i in at), "postinst lacks %s" % [s for s, i in zip(order, at) if i < 0]
        # The group exists before the socket (SocketGroup=sandboxd) starts.
        assert at == sorted(at), "postinst order: %s" % at
        # The service is socket-activated: never started by the package, and
        # restarted on upgrade only once the new binary accepts the config.
        assert "start 'sandboxd.service'" not in text, "postinst starts the service"
        check = text.find("/usr/sbin/sandboxd --check-config --quiet")
        restart = text.find("try-restart sandboxd.service")
        assert 0 <= check < restart, "postinst: check-config before try-restart"

    def check_prerm_stops_on_remove(self):
        with open(os.path.join(self.ctrl, "prerm")) as f:
            text = f.read()
        assert "deb-systemd-invoke stop sandboxd.service" in text, "prerm stops the service"
        assert "deb-systemd-invoke stop 'sandboxd.socket'" in text, "prerm stops the socket"

    def check_units(self):
        with open(os.path.join(self.root, "lib/systemd/system/sandboxd.service")) as f:
            unit = f.read()
        assert "ExecStart=/usr/sbin/sandboxd\n" in unit, unit
        assert "@SBINDIR@" not in unit, unit
        reload_lines = [l for l in unit.splitlines() if l.startswith("ExecReload=")]
        assert reload_lines and reload_lines[0] == "ExecReload=/usr/sbin/sandboxd --check-config --quiet", reload_lines
        # The E2B gateway: its own account, never started or enabled by the
        # package (its uid must first be named in daemon.json).
        with open(os.path.join(self.root, "lib/systemd/system/sandboxd-e2b.service")) as f:
            gw = f.read()
        assert "ExecStart=/usr/bin/sandboxd-e2b " in gw and "@BINDIR@" not in gw, gw
        assert "User=sandboxd-e2b\n" in gw, gw
        with open(os.path.join(self.ctrl, "postinst")) as f:
            post = f.read()
        # dh_installsystemd --no-enable --no-start: enabled again only where
        # the admin had enabled it, never started.
        assert "start 'sandboxd-e2b.service'" not in post, post
        enable = post.find("deb-systemd-helper enable 'sandboxd-e2b.service'")
        guard = post.find("if deb-systemd-helper --quiet was-enabled 'sandboxd-e2b.service'")
        assert enable < 0 or 0 <= guard < enable, post
        units = [os.path.join(self.root, "lib/systemd/system", u)
                 for u in ("sandboxd.socket", "sandboxd.service", "sandboxd-e2b.service")]
        p = run("systemd-analyze", "verify", "--man=no", *units)
        # verify looks for ExecStart= on the host, where the package is not
        # installed; every other line is a unit error (unknown key, bad value).
        bad = [l for l in p.stdout.splitlines() if l.strip() and "is not executable" not in l]
        assert not bad, p.stdout

    def check_binaries_run(self):
        sd = os.path.join(self.root, "usr/sbin/sandboxd")
        p = run(sd, "--version")
        assert p.returncode == 0 and p.stdout.strip() == "sandboxd " + makefile_version(), p.stdout
        p = run(os.path.join(self.root, "usr/bin/sandboxctl"), "--version")
        assert p.returncode == 0, p.stdout
        p = run(os.path.join(self.root, "usr/bin/sandboxd-e2b"), "--help")
        assert p.returncode == 0 and "sandboxd-e2b key add" in p.stdout, p.stdout
        p = run(sd, "--check-config", "--quiet", os.path.join(self.root, "etc/sandboxd/daemon.json"))
        assert p.returncode == 0 and p.stdout == "", "the shipped daemon.json: %s" % p.stdout
        # sandbox-init is found in the installed libexec directory (compiled in).
        with open(sd, "rb") as f:
            assert b"/usr/libexec/sandboxd/sandbox-init" in f.read(), "LIBEXECDIR is not /usr/libexec/sandboxd"

    def check_sysusers_and_tmpfiles(self):
        os.makedirs(os.path.join(self.root, "etc"), exist_ok=True)
        for name in ("passwd", "group", "shadow", "gshadow"):
            open(os.path.join(self.root, "etc", name), "a").close()
        p = run("systemd-sysusers", "--root=" + self.root, "sandboxd.conf")
        assert p.returncode == 0, p.stdout
        with open(os.path.join(self.root, "etc/group")) as f:
            assert re.search(r"^sandboxd:x:\d+:", f.read(), re.M), "group sandboxd not created"
        with open(os.path.join(self.root, "etc/passwd")) as f:
            passwd = f.read()
            assert re.search(r"^sandboxd-user:x:\d+:\d+:.*:/usr/sbin/nologin$", passwd, re.M), \
                "account sandboxd-user not created"
            assert re.search(r"^sandboxd-e2b:x:\d+:\d+:.*:/var/lib/sandboxd-e2b:/usr/sbin/nologin$", passwd, re.M), \
                "account sandboxd-e2b not created"
        with open(os.path.join(self.root, "etc/group")) as f:
            assert re.search(r"^sandboxd:x:\d+:(.*,)?sandboxd-e2b(,|$)", f.read(), re.M), \
                "sandboxd-e2b is not a member of group sandboxd"
        p = run("systemd-tmpfiles", "--root=" + self.root, "--create", "sandboxd.conf")
        assert p.returncode == 0, p.stdout
        for d, mode in (("var/lib/sandboxd", 0o711), ("var/lib/sandboxd/sandboxes", 0o700),
                        ("var/lib/sandboxd/snapshots", 0o700), ("run/sandboxd", 0o755)):
            st = os.stat(os.path.join(self.root, d))
            assert st.st_mode & 0o7777 == mode, "%s: mode %o" % (d, st.st_mode & 0o7777)

    def check_lintian(self):
        p = run("lintian", "--fail-on", "error", "--no-tag-display-limit", self.deb, timeout=600)
        errors = [l for l in p.stdout.splitlines() if l.startswith("E:")]
        assert p.returncode == 0 and not errors, p.stdout

    def check_make_install(self):
        dest = os.path.join(self.scratch, "destdir")
        p = run("make", "-C", ROOT, "--no-print-directory", "install", "DESTDIR=" + dest,
                "PREFIX=/usr", "SBINDIR=/usr/sbin", "UNITDIR=/lib/systemd/system", timeout=900)
        assert p.returncode == 0, p.stdout[-2000:]
        for f in EXPECTED:
            if f.startswith(("/usr/share/doc/", "/etc/")):
                continue  # the package's own files
            if f.endswith(".gz"):
                f = f[:-3]  # dh_installman compresses
            assert os.path.exists(dest + f), "make install did not install %s" % f


def main(argv):
    if len(argv) != 2:
        print(__doc__.strip().split("\n\n")[1].strip())
        return 2
    deb = os.path.abspath(argv[1])
    scratch = tempfile.mkdtemp(prefix="sandboxd-deb-")
    passed = failed = 0
    try:
        c = Checks(deb, scratch)
        for d in (c.root, c.ctrl):
            os.makedirs(d)
        if run("dpkg-deb", "-x", deb, c.root).returncode or run("dpkg-deb", "-e", deb, c.ctrl).returncode:
            print("FAIL deb: cannot unpack %s" % deb)
            return 1
        for name in [n for n in dir(c) if n.startswith("check_")]:
            try:
                getattr(c, name)()
                print("PASS %s" % name)
                passed += 1
            except Exception as e:
                print("FAIL %s: %s" % (name, str(e).strip()[:1500]))
                failed += 1
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    print("deb: %d passed, %d failed" % (passed, failed))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
