"""Snapshot export and import (snapshot.export / snapshot.import): a
snapshot moves through a file with its deletions (whiteouts) intact, and a
hostile file brings nothing in."""
import os
import tempfile

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

        code, out, err = world.ctl("snapshots", "import", path)
        expect_eq(code, 0, "import (%s)" % err.strip())
        imported = out.strip()
        got = world.rpc_result("snapshot.get", {"id": imported})
        expect_eq((got["layers"], got["sandbox"]), (2, fork), "imported snapshot's layers and sandbox")
        expect_eq(got["config"].get("persistent"), True, "imported snapshot keeps the config")
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
        os.environ["SANDBOXD_FAULT"] = "export.writing"
        try:
            d.start()
        finally:
            del os.environ["SANDBOXD_FAULT"]
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
