"""Snapshot export and import (snapshot.export / snapshot.import): a
snapshot moves through a file with its deletions (whiteouts) intact, and a
hostile file brings nothing in."""
import os
import tempfile

import world as W

from common import create, delete, expect, expect_eq, sh, sh_ok, tar_bytes


def _layers(world):
    d = os.path.join(world.daemon.state_dir, "layers")
    return sorted(os.listdir(d)) if os.path.isdir(d) else []


def _snapshot_ids(world):
    return sorted(s["id"] for s in world.rpc_result("snapshot.list", {})["snapshots"])


def test_export_import_round_trip_keeps_files_and_deletions(world):
    base, _c, _o, _e = create(world, "iobase", "--deny-all", "--persistent")
    fork = world.name("iofork")
    restored = world.name("iorest")
    snap = imported = None
    out_dir = tempfile.mkdtemp(dir=world.tmp)
    try:
        sh_ok(world, base, "echo gone > /workspace/a && echo kept > /workspace/b")
        world.ctl("stop", base, check=True)
        code, _o, err = world.ctl("fork", base, "--name", fork)
        expect_eq(code, 0, "fork of the stopped base (%s)" % err.strip())
        # The fork's delete of a lower file is a whiteout in its upper.
        sh_ok(world, fork, "rm /workspace/a")
        code, out, err = world.ctl("snapshot", fork)
        expect_eq(code, 0, "snapshot (%s)" % err.strip())
        snap = out.strip()
        expect_eq(world.rpc_result("snapshot.get", {"id": snap})["layers"], 2, "layers in the snapshot")

        path = os.path.join(out_dir, "snap.tar.zst")
        code, out, err = world.ctl("snapshots", "export", snap, path)
        expect_eq((code, out), (0, path + "\n"), "export exit and output (%s)" % err.strip())
        expect(os.path.getsize(path) > 0, "exported file is empty")
        code, _o, err = world.ctl("snapshots", "export", snap, path)
        expect(code != 0 and "exists" in err, "export over an existing file refused:", code, err.strip())
        code, _o, err = world.ctl("snapshots", "rm", snap)
        expect_eq(code, 0, "snapshots rm (%s)" % err.strip())
        snap = None
        delete(world, fork)
        delete(world, base)
        expect_eq(_layers(world), [], "layers left once the snapshot and its sandboxes are gone")

        code, out, err = world.ctl("snapshots", "import", path, "--config")
        expect_eq(code, 0, "import (%s)" % err.strip())
        imported = out.strip()
        got = world.rpc_result("snapshot.get", {"id": imported})
        expect_eq((got["layers"], got["sandbox"]), (2, fork), "imported snapshot's layers and sandbox")
        expect_eq(got["config"].get("networkPolicy"), "deny-all", "imported snapshot keeps the asked-for config")
        expect_eq(len(_layers(world)), 2, "layer directories after import")
        code, _o, err = world.ctl("create", "--name", restored, "--deny-all", "--snapshot", imported)
        expect_eq(code, 0, "create from the imported snapshot (%s)" % err.strip())
        code, out, _e = sh(world, restored, "cat /workspace/b; ls /workspace/a 2>&1 >/dev/null; echo end")
        expect(code == 0 and out.startswith("kept\n") and "No such file" in out and out.endswith("end\n"),
               "b kept, a still deleted:", out)
    finally:
        delete(world, restored)
        delete(world, fork)
        delete(world, base)
        for s in (snap, imported):
            if s:
                world.rpc("snapshot.delete", {"id": s})
    expect_eq(_layers(world), [], "layers left after deleting everything")


def _import_refused(world, entries, member):
    before_snaps = _snapshot_ids(world)
    before_layers = _layers(world)
    fd, path = tempfile.mkstemp(suffix=".tar.gz", dir=world.tmp)
    with os.fdopen(fd, "wb") as f:
        f.write(tar_bytes(entries))
    code, _o, err = world.ctl("snapshots", "import", path)
    expect(code != 0, "a hostile import succeeded:", member)
    expect(member in err, "the error names the member %r:" % member, err.strip())
    expect_eq(_layers(world), before_layers, "layers dir after a refused import of %r" % member)
    expect_eq(_snapshot_ids(world), before_snaps, "snapshots after a refused import of %r" % member)


def test_import_refuses_traversal_absolute_names_and_devices(world):
    record = b'{"sandbox": "x", "createdAt": "2026-01-01T00:00:00Z", "config": {}}'
    good = [("snapshot.json", "file", record), ("layers/0", "dir", None), ("layers/0/ok", "file", b"ok")]
    _import_refused(world, good + [("layers/0/../../x", "file", b"x")], "layers/0/../../x")
    _import_refused(world, good + [("../x", "file", b"x")], "../x")
    _import_refused(world, good + [("/abs", "file", b"x")], "/abs")
    _import_refused(world, good + [("layers/0/null", "chr", (1, 3))], "layers/0/null")
    _import_refused(world, good + [("layers/0/l", "symlink", "/etc"), ("layers/0/l/passwd", "file", b"x")],
                    "layers/0/l/passwd")
    _import_refused(world, good + [("layers/1/h", "hardlink", "layers/0/ok")], "layers/1/h")
    expect(not os.path.exists(os.path.join(world.daemon.state_dir, "x")), "a file escaped the layers dir")


def test_export_of_unknown_snapshot_is_not_found(world):
    path = os.path.join(tempfile.mkdtemp(dir=world.tmp), "none.tar.zst")
    code, _o, err = world.ctl("snapshots", "export", "snap-0000", path)
    expect_eq(code, 4, "export of an unknown snapshot: exit code (%s)" % err.strip())
    expect("snap-0000" in err, "the error names the snapshot:", err.strip())
    expect(not os.path.exists(path), "no file written for an unknown snapshot")
    r = world.rpc("snapshot.import", {"path": "relative.tar"})
    expect_eq((r.get("error") or {}).get("data", {}).get("field"), "path", "a relative import path is refused")


def test_import_drops_setuid_and_foreign_xattrs(world):
    import io
    import tarfile
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as t:
        rec = b'{"sandbox": "x", "createdAt": "2026-01-01T00:00:00Z", "config": {}}'
        ti = tarfile.TarInfo("snapshot.json")
        ti.size = len(rec)
        t.addfile(ti, io.BytesIO(rec))
        ti = tarfile.TarInfo("layers/0")
        ti.type, ti.mode = tarfile.DIRTYPE, 0o755
        t.addfile(ti)
        ti = tarfile.TarInfo("layers/0/suid")
        ti.mode, ti.size = 0o4755, 2
        ti.pax_headers = {"SCHILY.xattr.user.kept": "yes", "SCHILY.xattr.trusted.other": "x"}
        t.addfile(ti, io.BytesIO(b"hi"))
    fd, path = tempfile.mkstemp(suffix=".tar", dir=world.tmp)
    with os.fdopen(fd, "wb") as f:
        f.write(buf.getvalue())
    before = set(_layers(world))
    code, out, err = world.ctl("snapshots", "import", path)
    expect_eq(code, 0, "import (%s)" % err.strip())
    snap = out.strip()
    try:
        new = sorted(set(_layers(world)) - before)
        expect_eq(len(new), 1, "new layer directories")
        f = os.path.join(world.daemon.state_dir, "layers", new[0], "suid")
        expect_eq(oct(os.stat(f).st_mode & 0o7777), oct(0o755), "mode without setuid")
        expect_eq(sorted(os.listxattr(f)), ["user.kept"], "xattrs kept")
    finally:
        world.rpc("snapshot.delete", {"id": snap})
    expect(not set(_layers(world)) - before, "layers left after deleting the imported snapshot")


def test_import_keeps_only_the_overlay_xattrs_that_hide(world):
    """Of overlayfs' xattrs an imported layer keeps only trusted.overlay.opaque
    and trusted.overlay.whiteout; redirect, metacopy, origin (which point
    overlayfs at other files) and other trusted.* and security.* are
    dropped. Read on the layer in the state directory."""
    import io
    import tarfile
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as t:
        rec = b'{"sandbox": "x", "createdAt": "2026-01-01T00:00:00Z", "config": {}}'
        ti = tarfile.TarInfo("snapshot.json")
        ti.size = len(rec)
        t.addfile(ti, io.BytesIO(rec))
        for d in ("layers/0", "layers/0/opq"):
            ti = tarfile.TarInfo(d)
            ti.type, ti.mode = tarfile.DIRTYPE, 0o755
            if d.endswith("opq"):
                ti.pax_headers = {"SCHILY.xattr.trusted.overlay.opaque": "y",
                                  "SCHILY.xattr.trusted.overlay.redirect": "/../../../tmp"}
            t.addfile(ti)
        ti = tarfile.TarInfo("layers/0/meta")
        ti.mode, ti.size = 0o644, 2
        ti.pax_headers = {"SCHILY.xattr.trusted.overlay.metacopy": "",
                          "SCHILY.xattr.trusted.overlay.redirect": "/../../../tmp",
                          "SCHILY.xattr.trusted.overlay.origin": "x",
                          "SCHILY.xattr.trusted.overlay.upper": "x",
                          "SCHILY.xattr.trusted.overlay.opaquex": "y",
                          "SCHILY.xattr.security.evil": "x",
                          "SCHILY.xattr.user.kept": "yes"}
        t.addfile(ti, io.BytesIO(b"hi"))
        ti = tarfile.TarInfo("layers/0/opq/gone")
        ti.mode, ti.size = 0o644, 0
        ti.pax_headers = {"SCHILY.xattr.trusted.overlay.whiteout": "y"}
        t.addfile(ti, io.BytesIO(b""))
    fd, path = tempfile.mkstemp(suffix=".tar", dir=world.tmp)
    with os.fdopen(fd, "wb") as f:
        f.write(buf.getvalue())
    before = set(_layers(world))
    code, out, err = world.ctl("snapshots", "import", path)
    expect_eq(code, 0, "import (%s)" % err.strip())
    snap = out.strip()
    try:
        new = sorted(set(_layers(world)) - before)
        expect_eq(len(new), 1, "new layer directories")
        top = os.path.join(world.daemon.state_dir, "layers", new[0])
        expect_eq(sorted(os.listxattr(os.path.join(top, "meta"))), ["user.kept"], "xattrs kept on meta")
        expect_eq(sorted(os.listxattr(os.path.join(top, "opq"))), ["trusted.overlay.opaque"],
                  "xattrs kept on the opaque directory")
        expect_eq(sorted(os.listxattr(os.path.join(top, "opq", "gone"))), ["trusted.overlay.whiteout"],
                  "xattrs kept on the xattr whiteout")
    finally:
        world.rpc("snapshot.delete", {"id": snap})


# ------------------------------------------------ an imported file's config

HOSTILE_CONFIG = {
    "userns": False,
    "networkPolicy": {"allow": ["evil.test"]},
    "ports": [22],
    "env": {"LD_PRELOAD": "/nonexistent/evil.so"},
    "tags": {"from": "file"},
    "timeout": 600000,
    "persistent": True,
}


def _snapshot_file(world, config, tag):
    import json
    rec = json.dumps({"sandbox": "evil", "createdAt": "2026-01-01T00:00:00Z", "config": config}).encode()
    entries = [("snapshot.json", "file", rec), ("layers/0", "dir", None),
               ("layers/0/marker", "file", b"from-file\n")]
    fd, path = tempfile.mkstemp(suffix="-%s.tar.gz" % tag, dir=world.tmp)
    with os.fdopen(fd, "wb") as f:
        f.write(tar_bytes(entries))
    return path


def _userns_daemon(world):
    import world as W
    world.stop_sandboxd()
    try:
        return world.start_sandboxd({"userns": True}, tag="unsimp")
    except Exception as e:  # WorldError: this host cannot run user namespaces
        world.stop_sandboxd()
        world.start_sandboxd()
        raise W.Skip("a daemon with \"userns\": true does not start here: %s" % str(e)[-200:])


def _uid_map(world, name):
    return " ".join(sh_ok(world, name, "cat /proc/self/uid_map").split())


def test_imported_config_is_not_applied_without_config_and_never_turns_userns_off(world):
    d = _userns_daemon(world)
    path = _snapshot_file(world, HOSTILE_CONFIG, "plain")
    snap = name = own_name = None
    try:
        r = d.rpc_result("snapshot.import", {"path": path})
        snap = r["id"]
        name = world.name("impplain")
        sb = d.rpc_result("sandbox.create", {"name": name, "source": {"type": "snapshot", "snapshotId": snap}},
                          timeout=180)
        expect(_uid_map(world, name) != "0 0 4294967295", "uid_map is not the host's identity map:",
               _uid_map(world, name))
        expect_eq(sb.get("userns"), True, "userns of a sandbox made from a file saying userns:false")
        expect_eq(sb.get("networkPolicy"), "allow-all", "the file's policy is not applied")
        expect_eq(sb.get("ports"), [], "the file's ports are not applied")
        expect("LD_PRELOAD" not in (sb.get("env") or {}), "the file's env is not applied:", sb.get("env"))
        expect_eq(sb.get("tags"), {}, "the file's tags are not applied")
        expect_eq(sb.get("timeout"), 300000, "the daemon's default timeout, not the file's")
        expect_eq(sh_ok(world, name, "echo \"[$LD_PRELOAD]\"; cat /marker"), "[]\nfrom-file\n",
                  "no LD_PRELOAD inside; the file's layer is there")
        expect_eq(r["config"], {}, "the imported snapshot carries no config")
        expect_eq(r.get("configImported"), False, "the answer says no config was taken")
        expect_eq(sorted(r.get("configIgnored") or []),
                  ["env", "networkPolicy", "persistent", "ports", "tags", "timeout", "userns"],
                  "the answer lists the file's keys left out")
        # The caller still chooses, from its own parameters.
        own_name = world.name("impown")
        code, _o, err = d.ctl("create", "--name", own_name, "--deny-all", "--port", "8080", "--snapshot", snap)
        expect_eq(code, 0, "create with the caller's own options (%s)" % err.strip())
        own = d.rpc_result("sandbox.get", {"name": own_name})
        expect_eq((own.get("networkPolicy"), [p.get("port") for p in own.get("ports")]), ("deny-all", [8080]),
                  "the caller's policy and ports")
    finally:
        for n in (name, own_name):
            if n:
                d.ctl("rm", n)
        if snap:
            d.rpc("snapshot.delete", {"id": snap})
        world.stop_sandboxd(d)
        world.start_sandboxd()


def test_imported_config_with_config_true_is_validated_and_userns_only_strengthens(world):
    d = _userns_daemon(world)
    snaps, names = [], []
    try:
        path = _snapshot_file(world, HOSTILE_CONFIG, "taken")
        r = d.rpc_result("snapshot.import", {"path": path, "config": True})
        snaps.append(r["id"])
        name = world.name("imptaken")
        names.append(name)
        sb = d.rpc_result("sandbox.create", {"name": name, "source": {"type": "snapshot", "snapshotId": r["id"]}},
                          timeout=180)
        expect(_uid_map(world, name) != "0 0 4294967295", "uid_map is not the host's identity map")
        expect_eq(sb.get("userns"), True, "userns stays on with config: true")
        expect_eq(r.get("configImported"), True, "the answer says the config was taken")
        expect_eq(sorted(r["config"]), ["env", "networkPolicy", "ports", "tags", "timeout"],
                  "what was taken (userns:false and persistent never are)")
        expect_eq(sorted(r.get("configIgnored") or []), ["persistent", "userns"], "what was left out")
        expect_eq(sb.get("networkPolicy"), {"allow": ["evil.test"]}, "the asked-for policy applies")
        expect_eq([p.get("port") for p in sb.get("ports")], [22], "the asked-for ports apply")
        expect_eq((sb.get("env"), sb.get("tags")), ({"LD_PRELOAD": "/nonexistent/evil.so"}, {"from": "file"}),
                  "the asked-for env and tags apply")
        expect_eq(sb.get("persistent"), False, "persistent never comes from a file")
        expect_eq(sb.get("timeout"), 600000, "the asked-for timeout applies")

        # Limits and policies are checked as sandbox.create params are; a bad
        # one fails the whole import, naming the field, and leaves nothing.
        before = (_snapshot_ids(world), _layers(world))
        for bad, field in (({"resources": {"vcpus": 99}}, "config.resources.vcpus"),
                           ({"timeout": 10 ** 12}, "config.timeout"),
                           ({"networkPolicy": {"allow": ["www*.com"]}}, "config.networkPolicy.allow[0]"),
                           ({"ports": [0]}, "config.ports"),
                           ({"env": {"A=B": "x"}}, "config.env.A=B"),
                           ({"userns": "no"}, "config.userns"),
                           ({"env": {}, "Env": {"LD_PRELOAD": "x"}}, "config")):
            e = d.rpc("snapshot.import", {"path": _snapshot_file(world, bad, "bad"), "config": True}).get("error")
            expect(e is not None, "an import with", bad, "succeeded")
            expect_eq((e.get("data") or {}).get("field", "")[:len(field)], field, "field of the refused %s" % bad)
            expect(field in e.get("message", ""), "the message names %s:" % field, e.get("message"))
            expect_eq((_snapshot_ids(world), _layers(world)), before, "left behind by the refused %s" % bad)
        # Without config the same file imports: its values are not taken.
        r = d.rpc_result("snapshot.import", {"path": _snapshot_file(world, {"resources": {"vcpus": 99}}, "v"),
                                             "config": False})
        snaps.append(r["id"])
        expect_eq(r["config"], {}, "vcpus 99 not taken without config")

        # A file taken with a user namespace restores only with one.
        r = d.rpc_result("snapshot.import", {"path": _snapshot_file(world, {"userns": True}, "uns")})
        snaps.append(r["id"])
        expect_eq(r["config"], {"userns": True}, "userns: true is kept even without config")
        e = d.rpc("sandbox.create", {"name": world.name("impoff"), "userns": False,
                                     "source": {"type": "snapshot", "snapshotId": r["id"]}}).get("error")
        expect(e is not None and (e.get("data") or {}).get("field") == "userns",
               "create with userns:false from a userns snapshot is refused:", e)
    finally:
        for n in names:
            d.ctl("rm", n)
        for s in snaps:
            d.rpc("snapshot.delete", {"id": s})
        world.stop_sandboxd(d)
        world.start_sandboxd()


def test_cli_import_config_flag(world):
    path = _snapshot_file(world, {"tags": {"from": "file"}}, "cli")
    snaps = []
    try:
        for args, tags in (((), None), (("--config",), {"from": "file"})):
            code, out, err = world.ctl("snapshots", "import", path, *args)
            expect_eq(code, 0, "snapshots import %s (%s)" % (" ".join(args), err.strip()))
            expect_eq(("tags" in err, "--config" in err), (not args, not args),
                      "stderr says what was not taken and how to take it: %r" % err)
            snaps.append(out.strip())
            got = world.rpc_result("snapshot.get", {"id": snaps[-1]})
            expect_eq(got["config"].get("tags"), tags, "tags after snapshots import %s" % " ".join(args))
    finally:
        for s in snaps:
            world.rpc("snapshot.delete", {"id": s})


def test_export_killed_midway_leaves_no_file_and_the_next_export_works(world):
    name, _c, _o, _e = create(world, "iokill", "--deny-all")
    snap = imported = None
    out_dir = tempfile.mkdtemp(dir=world.tmp)
    path = os.path.join(out_dir, "snap.tar.zst")
    d = world.daemon
    try:
        # Incompressible data, so the archive is past libarchive's and
        # zstd's buffers (bytes in the file) when the fault point is hit.
        sh_ok(world, name, "head -c 8000000 /dev/urandom > /workspace/blob && sha256sum /workspace/blob > /workspace/sum")
        code, out, err = world.ctl("snapshot", name)
        expect_eq(code, 0, "snapshot (%s)" % err.strip())
        snap = out.strip()
        delete(world, name)
        name = None
        d.stop()
        d.start(binary=W.FAULTS_SANDBOXD, env={"SANDBOXD_FAULT": "export.writing"})
        try:
            d.rpc("snapshot.export", {"id": snap, "path": path}, timeout=60)
        except (OSError, ValueError, ConnectionError):
            pass
        d.proc.wait(30)
        expect(not os.path.lexists(path), "a killed export left a file at the path (%d bytes)"
               % (os.path.getsize(path) if os.path.exists(path) else -1))
        # A leftover of an export killed on a filesystem without O_TMPFILE.
        stale = os.path.join(out_dir, ".snap.tar.zst.export-0123456789abcdef")
        with open(stale, "wb") as f:
            f.write(b"partial")
        d.start()
        code, out, err = world.ctl("snapshots", "export", snap, path)
        expect_eq((code, out), (0, path + "\n"), "the next export (%s)" % err.strip())
        expect(not os.path.lexists(stale), "the stale hidden file of an interrupted export is removed")
        expect_eq(sorted(os.listdir(out_dir)), ["snap.tar.zst"], "files in the export directory")
        code, out, err = world.ctl("snapshots", "import", path)
        expect_eq(code, 0, "import of the export (%s)" % err.strip())
        imported = out.strip()
        name, _c, _o, _e = create(world, "iokill2", "--deny-all", "--snapshot", imported)
        code, out, err = sh(world, name, "sha256sum -c /workspace/sum")
        expect_eq(code, 0, "the imported snapshot has the whole file (%s %s)" % (out.strip(), err.strip()))
    finally:
        if not d.alive():
            d.start()
        if name:
            delete(world, name)
        for s in (snap, imported):
            if s:
                world.ctl("snapshots", "rm", s)
