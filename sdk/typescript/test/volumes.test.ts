// Volumes: created, mounted into several sandboxes at once (read-write and
// read-only), listed, and deleted only once nothing mounts them.
import { test } from "node:test";
import assert from "node:assert/strict";
import { Sandbox, Volume, InUseError, InvalidParamsError, NotFoundError, SandboxError } from "@sandboxd/sdk";
import { uniqueName, withCleanup } from "./helpers.js";

// Deletes what a test made, sandboxes first (a mounted volume cannot go);
// what is already gone is fine.
async function cleanup(sandboxes: Sandbox[], volumes: string[]): Promise<void> {
  for (const s of sandboxes) {
    try { await s.delete(); } catch (e) { if (!(e instanceof NotFoundError)) throw e; }
  }
  for (const v of volumes) {
    try { await Volume.delete(v); } catch (e) { if (!(e instanceof NotFoundError)) throw e; }
  }
}

test("two sandboxes share a volume: one writes, the other reads; a read-only mount refuses writes; delete waits for the last mount", async () => {
  const volName = uniqueName("vol");
  const made: Sandbox[] = [];
  await withCleanup(async () => {
    const vol = await Volume.create({ name: volName, size: "64MiB", tags: { t: "share" } });
    assert.equal(vol.name, volName);
    assert.equal(vol.sizeMiB, 64, "size \"64MiB\" is sent as sizeMiB 64");
    assert.equal(typeof vol.inodes, "number");
    assert.deepEqual(vol.tags, { t: "share" });
    assert.deepEqual(vol.mountedBy, []);
    assert.ok(vol.createdAt.getTime() > 0);
    assert.equal(typeof vol.usage.usedBytes, "number");

    const writer = await Sandbox.create({ name: uniqueName("vw"), networkPolicy: "deny-all", volumes: [{ name: volName, path: "/data" }] });
    made.push(writer);
    const reader = await Sandbox.create({ name: uniqueName("vr"), networkPolicy: "deny-all", volumes: [{ name: volName, path: "/mnt/shared" }] });
    made.push(reader);
    const ro = await Sandbox.create({ name: uniqueName("vro"), networkPolicy: "deny-all", volumes: [{ name: volName, path: "/data", readOnly: true }] });
    made.push(ro);
    assert.deepEqual(writer.volumes.map((m) => [m.name, m.path]), [[volName, "/data"]]);
    assert.equal(ro.volumes[0]?.readOnly, true);

    await writer.fs.writeFile("/data/hello.txt", "from the writer");
    assert.equal(await reader.fs.readFile("/mnt/shared/hello.txt", "utf8"), "from the writer");
    const seen = await reader.runCommand("cat", ["/mnt/shared/hello.txt"]);
    assert.equal(await seen.stdout(), "from the writer");
    // The reader writes back through its own mount; the writer sees it.
    await reader.runCommand("sh", ["-c", "echo back > /mnt/shared/back.txt"]);
    assert.equal(await writer.fs.readFile("/data/back.txt", "utf8"), "back\n");

    assert.equal(await ro.fs.readFile("/data/hello.txt", "utf8"), "from the writer", "a read-only mount reads");
    const w = await ro.runCommand("sh", ["-c", "echo no > /data/ro.txt"]);
    assert.notEqual(w.exitCode, 0, "a write to a read-only mount fails");
    assert.match(await w.stderr(), /Read-only file system/);
    await assert.rejects(ro.fs.writeFile("/data/ro2.txt", "no"), SandboxError);
    assert.equal(await writer.readFileToBuffer("/data/ro.txt"), null, "nothing of the refused writes landed");
    assert.equal(await writer.readFileToBuffer("/data/ro2.txt"), null);

    await vol.refresh();
    assert.deepEqual([...vol.mountedBy].sort(), made.map((s) => s.name).sort());
    assert.ok(vol.usage.usedBytes > 0 && vol.usage.usedInodes > 0, `usage counts the files: ${JSON.stringify(vol.usage)}`);

    // Mounted: delete is refused and names who mounts it; nothing is lost.
    await assert.rejects(vol.delete(), (e: unknown) =>
      e instanceof InUseError && e.reason === "in_use" &&
      JSON.stringify([...e.sandboxes].sort()) === JSON.stringify(made.map((s) => s.name).sort()));
    await writer.delete();
    await reader.delete();
    await assert.rejects(Volume.delete(volName), (e: unknown) => e instanceof InUseError && e.sandboxes.length === 1 && e.sandboxes[0] === ro.name);
    assert.equal(await ro.fs.readFile("/data/back.txt", "utf8"), "back\n", "a refused delete kept the files");
    await ro.delete();

    assert.deepEqual((await Volume.get(volName)).mountedBy, []);
    await vol.delete();
    await assert.rejects(Volume.get({ name: volName }), NotFoundError);
    await assert.rejects(Volume.delete(volName), NotFoundError);
  }, () => cleanup(made, [volName]));
});

test("a volume outlives its sandboxes; getOrCreate and fork mount volumes too", async () => {
  const volName = uniqueName("vkeep");
  const made: Sandbox[] = [];
  await withCleanup(async () => {
    await Volume.create({ name: volName, sizeMiB: 32 });
    {
      await using first = await Sandbox.create({ networkPolicy: "deny-all", volumes: [{ name: volName, path: "/data" }] });
      await first.fs.writeFile("/data/kept.txt", "kept");
    }
    const goc = await Sandbox.getOrCreate({ name: uniqueName("vgoc"), networkPolicy: "deny-all", volumes: [{ name: volName, path: "/v" }] });
    made.push(goc);
    assert.equal(await goc.fs.readFile("/v/kept.txt", "utf8"), "kept", "a later sandbox sees what an earlier one wrote");
    const fork = await Sandbox.fork({ sourceSandbox: goc, name: uniqueName("vfork"), volumes: [{ name: volName, path: "/ro", readOnly: true }] });
    made.push(fork);
    assert.equal(await fork.fs.readFile("/ro/kept.txt", "utf8"), "kept");
    const w = await fork.runCommand("sh", ["-c", "echo x > /ro/x"]);
    assert.notEqual(w.exitCode, 0, "the fork's read-only mount refuses a write");
    // Without volumes, a fork mounts its source's (the same volume, not a copy).
    const same = await Sandbox.fork({ sourceSandbox: goc, name: uniqueName("vfork2") });
    made.push(same);
    assert.deepEqual(same.volumes.map((m) => [m.name, m.path]), [[volName, "/v"]]);
    await same.fs.writeFile("/v/from-fork.txt", "shared");
    assert.equal(await goc.fs.readFile("/v/from-fork.txt", "utf8"), "shared");
  }, () => cleanup(made, [volName]));
});

test("Volume.list pages with namePrefix and tags; a missing volume is NotFoundError", async () => {
  const prefix = uniqueName("vls");
  const names = [0, 1, 2].map((i) => `${prefix}-${i}`);
  await withCleanup(async () => {
    for (const n of names) {
      const v = await Volume.create({ name: n, size: "16", tags: { grp: prefix.slice(-20) } });
      assert.equal(v.sizeMiB, 16, "a bare number is MiB, as for sandboxctl --size");
    }
    const paged: string[] = [];
    for await (const v of Volume.list({ namePrefix: prefix, limit: 1 })) paged.push(v.name);
    assert.deepEqual(paged.sort(), names);
    const tagged: string[] = [];
    for await (const v of Volume.list({ tags: { grp: prefix.slice(-20) }, limit: 2 })) tagged.push(v.name);
    assert.deepEqual(tagged.sort(), names);
    const none: string[] = [];
    for await (const v of Volume.list({ namePrefix: `${prefix}-x` })) none.push(v.name);
    assert.deepEqual(none, []);
    await assert.rejects(Volume.get(`${prefix}-nope`), NotFoundError);
    await assert.rejects(Sandbox.create({ networkPolicy: "deny-all", volumes: [{ name: `${prefix}-nope`, path: "/data" }] }),
      NotFoundError);
  }, () => cleanup([], names));
});

test("Volume.create reads size as sandboxctl does and refuses the rest before asking the daemon", async () => {
  const name = uniqueName("vsz");
  for (const size of ["1.5G", "10GB", "1g", "lots", "", " 16"]) {
    await assert.rejects(Volume.create({ name, size }), (e: unknown) =>
      e instanceof InvalidParamsError && e.field === "size", `size ${JSON.stringify(size)}`);
  }
  await assert.rejects(Volume.create({ name, size: 1024 as unknown as string }), TypeError);
  await assert.rejects(Volume.create({ name, size: "1G", sizeMiB: 1024 }), (e: unknown) =>
    e instanceof InvalidParamsError && e.field === "size");
  await assert.rejects(Volume.get(name), NotFoundError, "none of them reached the daemon");
  // The daemon's own checks (a size of 0) come back typed with its field.
  await assert.rejects(Volume.create({ name, sizeMiB: 0 }), (e: unknown) =>
    e instanceof InvalidParamsError && e.field === "sizeMiB");
});
