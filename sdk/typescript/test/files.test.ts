import { test } from "node:test";
import assert from "node:assert/strict";
import { text } from "node:stream/consumers";
import { Sandbox, NotFoundError, InvalidParamsError } from "@sandboxd/sdk";
import { uniqueName } from "./helpers.js";

test("writeFiles, readFile (stream or null), readFileToBuffer, mkDir", async () => {
  await using sb = await Sandbox.create({ name: uniqueName("files"), networkPolicy: "deny-all" });
  const big = Buffer.alloc(9 << 20, 7); // more than one 4 MiB piece
  await sb.writeFiles([
    { path: "a/b/hello.txt", content: "hello" },
    { path: "/tmp/run.sh", content: "#!/bin/sh\necho ran\n", mode: 0o755 },
    { path: "big.bin", content: big },
  ]);
  const s = await sb.readFile("a/b/hello.txt");
  assert.ok(s);
  assert.equal(await text(s), "hello");
  assert.equal(await sb.readFile({ path: "nope" }), null);
  assert.equal(await sb.readFileToBuffer("nope"), null);
  assert.ok((await sb.readFileToBuffer("big.bin"))!.equals(big));
  assert.equal(await (await sb.runCommand("/tmp/run.sh")).stdout(), "ran\n");
  await sb.mkDir("x/y/z");
  assert.ok((await sb.fs.stat("x/y/z")).isDirectory());
});

test("sandbox.fs has the node:fs/promises names", async () => {
  await using sb = await Sandbox.create({ name: uniqueName("fs"), networkPolicy: "deny-all" });
  const fs = sb.fs;
  await fs.mkdir("d/e", { recursive: true });
  await fs.writeFile("d/e/f.txt", "one", { mode: 0o600 });
  await fs.appendFile("d/e/f.txt", "+two");
  assert.equal(await fs.readFile("d/e/f.txt", "utf8"), "one+two");
  assert.ok((await fs.readFile("d/e/f.txt")).equals(Buffer.from("one+two")));
  const st = await fs.stat("d/e/f.txt");
  assert.equal(st.size, 7);
  assert.equal(st.mode & 0o777, 0o600);
  assert.ok(st.isFile() && !st.isDirectory());
  assert.ok(st.mtime instanceof Date && !Number.isNaN(st.mtime.getTime()));
  await sb.runCommand("ln", ["-s", "d/e/f.txt", "link"]);
  assert.ok((await fs.lstat("link")).isSymbolicLink());
  await assert.rejects(fs.stat("link"), /symbolic link/);
  assert.deepEqual(await fs.readdir("d/e"), ["f.txt"]);
  const ents = await fs.readdir("d", { withFileTypes: true });
  assert.equal(ents[0]!.name, "e");
  assert.ok(ents[0]!.isDirectory());
  await fs.access("d/e/f.txt");
  await assert.rejects(fs.access("missing"), NotFoundError);
  await assert.rejects(fs.readFile("missing"), NotFoundError);
  await fs.unlink("d/e/f.txt");
  await fs.rmdir("d/e");
  await fs.writeFile("d/x", "x");
  await assert.rejects(fs.rm("d"), /./, "a non-empty directory without recursive");
  await fs.rm("d", { recursive: true });
  await fs.rm("d", { force: true });
  await assert.rejects(fs.rm("d"), NotFoundError);
});

test("writeFiles sets user xattrs that stat shows; {} removes them", async () => {
  await using sb = await Sandbox.create({ name: uniqueName("xattr"), networkPolicy: "deny-all" });
  await sb.writeFiles([{ path: "x.txt", content: "x", xattrs: { "user.origin": "ci", "user.n": "1" } }]);
  assert.deepEqual((await sb.fs.stat("x.txt")).xattrs, { "user.origin": "ci", "user.n": "1" });
  await sb.fs.writeFile("x.txt", "y", { xattrs: { "user.n": "2" } });
  assert.deepEqual((await sb.fs.stat("x.txt")).xattrs, { "user.n": "2" });
  await sb.fs.writeFile("x.txt", "z", { xattrs: {} });
  assert.deepEqual((await sb.fs.stat("x.txt")).xattrs, {});
  await assert.rejects(sb.writeFiles([{ path: "bad", content: "", xattrs: { "security.x": "1" } }]), (e: unknown) =>
    e instanceof InvalidParamsError && /files\[0\]\.xattrs/.test(String(e.field)));
});

test("sudo on file calls: root's files, refused to the sandbox user", async () => {
  await using sb = await Sandbox.create({ name: uniqueName("fsudo"), networkPolicy: "deny-all" });
  await assert.rejects(sb.fs.writeFile("/etc/sdk-sudo", "no"));
  await sb.fs.writeFile("/etc/sdk-sudo", "secret", { sudo: true, mode: 0o600 });
  const st = await sb.fs.stat("/etc/sdk-sudo", { sudo: true });
  assert.equal(st.uid, 0);
  await assert.rejects(sb.fs.readFile("/etc/sdk-sudo"));
  assert.equal(await sb.fs.readFile("/etc/sdk-sudo", { encoding: "utf8", sudo: true }), "secret");
  assert.equal((await sb.readFileToBuffer("/etc/sdk-sudo", { sudo: true }))?.toString(), "secret");
  await sb.fs.appendFile("/etc/sdk-sudo", "+more", { sudo: true });
  await sb.mkDir("/etc/sdk-dir/sub", { sudo: true });
  assert.deepEqual(await sb.fs.readdir("/etc/sdk-dir", { sudo: true }), ["sub"]);
  await sb.writeFiles([{ path: "/etc/sdk-dir/sub/f", content: "f" }], { sudo: true });
  assert.equal((await sb.fs.lstat("/etc/sdk-dir/sub/f")).uid, 0);
  await assert.rejects(sb.fs.rm("/etc/sdk-dir", { recursive: true }));
  await sb.fs.rm("/etc/sdk-dir", { recursive: true, sudo: true });
  await sb.fs.unlink("/etc/sdk-sudo", { sudo: true });
  await assert.rejects(sb.fs.access("/etc/sdk-sudo", { sudo: true }), NotFoundError);
});
