import { test } from "node:test";
import assert from "node:assert/strict";
import {
  Sandbox, Snapshot, NotFoundError, AlreadyExistsError, InvalidPolicyError, InvalidParamsError,
  SandboxError, SourceFailedError, SandboxClient, DaemonUnreachableError, SandboxStoppedError, LimitExceededError, UnavailableError,
} from "@sandboxd/sdk";
import { uniqueName, until } from "./helpers.js";

test("await using stops (and so deletes) a non-persistent sandbox when the scope exits", async () => {
  const name = uniqueName("using");
  {
    await using sb = await Sandbox.create({ name, networkPolicy: "deny-all", env: { A: "1" }, tags: { t: "x" } });
    assert.equal(sb.name, name);
    assert.equal(sb.status, "running");
    assert.deepEqual(sb.env, { A: "1" });
    assert.deepEqual(sb.tags, { t: "x" });
    assert.equal(sb.networkPolicy, "deny-all");
    assert.match(sb.sandboxId, /^[0-9a-f]{32}$/);
  }
  await assert.rejects(Sandbox.get({ name }), NotFoundError);
});

test("get resumes a stopped persistent sandbox with its files; stop keeps it", async () => {
  const name = uniqueName("persist");
  const sb = await Sandbox.create({ name, networkPolicy: "deny-all", persistent: true, timeout: 60_000, resources: { vcpus: 1 } });
  try {
    assert.equal(sb.persistent, true);
    assert.equal(sb.timeout, 60_000);
    await sb.writeFiles([{ path: "kept.txt", content: "kept" }]);
    await sb.stop();
    assert.equal(sb.status, "stopped");
    await assert.rejects(sb.extendTimeout(1000), (e: unknown) => e instanceof SandboxStoppedError && e.reason === "sandbox_stopped");
    const again = await Sandbox.get({ name });
    assert.equal(again.status, "running", "get resumed the session");
    assert.equal((await again.readFileToBuffer("kept.txt"))?.toString(), "kept");
  } finally {
    await sb.delete();
  }
  await assert.rejects(Sandbox.get({ name }), NotFoundError);
});

test("getOrCreate runs onCreate once, only when it creates", async () => {
  const name = uniqueName("goc");
  let calls = 0;
  const onCreate = async (s: Sandbox) => {
    calls++;
    await s.writeFiles([{ path: "setup.txt", content: "done" }]);
  };
  const a = await Sandbox.getOrCreate({ name, networkPolicy: "deny-all", onCreate });
  try {
    const b = await Sandbox.getOrCreate({ name, networkPolicy: "deny-all", timeout: 120_000, onCreate });
    assert.equal(calls, 1);
    assert.equal(b.name, name);
    assert.deepEqual(b.differs, ["timeout"]);
    assert.equal(await b.fs.readFile("setup.txt", "utf8"), "done");
  } finally {
    await a.delete();
  }
});

test("fork copies the filesystem and takes overrides; update changes config live", async () => {
  await using src = await Sandbox.create({ name: uniqueName("src"), networkPolicy: "deny-all" });
  await src.writeFiles([{ path: "f.txt", content: "from source" }]);
  await using child = await Sandbox.fork({ sourceSandbox: src, name: uniqueName("fork"), env: { FORKED: "yes" } });
  assert.equal(await child.fs.readFile("f.txt", "utf8"), "from source");
  assert.deepEqual(child.env, { FORKED: "yes" });
  const r = await child.runCommand("sh", ["-c", "echo $FORKED"]);
  assert.equal(await r.stdout(), "yes\n");
  await child.update({ env: { FORKED: "no" }, tags: { k: "v" }, timeout: 200_000 });
  assert.deepEqual(child.tags, { k: "v" });
  assert.equal(child.timeout, 200_000);
  assert.equal(await (await child.runCommand("sh", ["-c", "echo $FORKED"])).stdout(), "no\n");
  const before = child.expiresAt!.getTime();
  await child.extendTimeout(60_000);
  assert.ok(child.expiresAt!.getTime() >= before + 59_000, "extendTimeout moved expiresAt");
  await src.refresh();
  assert.equal(src.status, "running");
});

test("list iterates over every cursor page with namePrefix and tags", async () => {
  const prefix = uniqueName("ls");
  const made: Sandbox[] = [];
  try {
    for (let i = 0; i < 3; i++) made.push(await Sandbox.create({ name: `${prefix}-${i}`, networkPolicy: "deny-all", tags: { grp: prefix.slice(-20) } }));
    const names: string[] = [];
    for await (const sb of Sandbox.list({ namePrefix: prefix, limit: 1 })) names.push(sb.name);
    assert.deepEqual(names.sort(), made.map((s) => s.name).sort());
    const tagged: string[] = [];
    for await (const sb of Sandbox.list({ tags: { grp: prefix.slice(-20) }, limit: 2 })) tagged.push(sb.name);
    assert.equal(tagged.length, 3);
  } finally {
    for (const s of made) await s.delete();
  }
});

test("snapshot, Snapshot.list/get, create from it, snapshot.delete", async () => {
  await using sb = await Sandbox.create({ name: uniqueName("snap"), networkPolicy: "deny-all" });
  await sb.writeFiles([{ path: "s.txt", content: "snapped" }]);
  const snap = await sb.snapshot({ expiration: 3_600_000 });
  assert.match(snap.snapshotId, /^snap-/);
  assert.equal(snap.sourceSandboxName, sb.name);
  assert.ok(snap.expiresAt && snap.expiresAt.getTime() > Date.now());
  const listed = await Snapshot.list({ sandbox: sb.name });
  assert.deepEqual(listed.map((s) => s.snapshotId), [snap.snapshotId]);
  assert.equal((await Snapshot.get({ snapshotId: snap.snapshotId })).snapshotId, snap.snapshotId);
  {
    await using restored = await Sandbox.create({ source: { type: "snapshot", snapshotId: snap.snapshotId }, networkPolicy: "deny-all" });
    assert.equal(await restored.fs.readFile("s.txt", "utf8"), "snapped");
  }
  await snap.delete();
  await assert.rejects(Snapshot.get({ snapshotId: snap.snapshotId }), NotFoundError);
});

test("create from git clones the repository into /workspace", async () => {
  await using sb = await Sandbox.create({ source: { type: "git", url: process.env.SANDBOXD_TEST_GIT_URL as string, depth: 1 }, networkPolicy: "deny-all" });
  assert.ok((await sb.fs.readdir("/workspace")).includes("Makefile"));
});

test("errors are typed with the daemon's code, reason and field", async () => {
  const name = uniqueName("err");
  await using sb = await Sandbox.create({ name, networkPolicy: "deny-all" });
  await assert.rejects(Sandbox.create({ name }), (e: unknown) =>
    e instanceof AlreadyExistsError && e instanceof SandboxError && e.code === -32000 && e.reason === "already_exists");
  await assert.rejects(Sandbox.create({ networkPolicy: { allow: ["https://x.example.com/"] } }), (e: unknown) =>
    e instanceof InvalidPolicyError && e.field === "networkPolicy.allow[0]");
  await assert.rejects(Sandbox.create({ timeout: 1 }), (e: unknown) =>
    e instanceof InvalidParamsError && e.code === -32602 && e.field === "timeout");
  await assert.rejects(Sandbox.create({ source: { type: "git", url: "git://203.0.113.9/no-such.git" }, networkPolicy: "deny-all" }),
    SourceFailedError);
  await assert.rejects(sb.getCommand("cmd-nope"), NotFoundError);
  await sb.runCommand("truncate", ["-s", "65M", "/tmp/huge"]);
  await assert.rejects(sb.readFileToBuffer("/tmp/huge"), (e: unknown) => e instanceof LimitExceededError && /64 MiB/.test((e as Error).message));
  const bad = new SandboxClient({ socketPath: "/nonexistent/sandboxd.sock" });
  await assert.rejects(Sandbox.get({ name, client: bad }), (e: unknown) =>
    e instanceof DaemonUnreachableError && /\/nonexistent\/sandboxd\.sock/.test((e as Error).message));
});

test("an aborted create rejects with the signal's reason", async () => {
  const ac = new AbortController();
  const name = uniqueName("abort");
  const p = Sandbox.create({ name, networkPolicy: "deny-all", signal: ac.signal });
  ac.abort();
  await assert.rejects(p, (e: unknown) => (e as Error).name === "AbortError");
  // Whatever the daemon managed before the cancel is cleaned up here.
  try { await (await Sandbox.get({ name })).delete(); } catch (e) { if (!(e instanceof NotFoundError)) throw e; }
  await assert.rejects(Sandbox.create({ signal: AbortSignal.abort() }), (e: unknown) => (e as Error).name === "AbortError");
});

test("aborting a create while the daemon works on it cancels it there: no sandbox is left", async () => {
  const name = uniqueName("cancel");
  const ac = new AbortController();
  // A clone takes long enough for the request to reach the daemon first.
  const p = Sandbox.create({ name, source: { type: "git", url: process.env.SANDBOXD_TEST_GIT_URL as string }, networkPolicy: "deny-all", signal: ac.signal });
  setTimeout(() => ac.abort(), 50);
  await assert.rejects(p, (e: unknown) => (e as Error).name === "AbortError");
  // The name comes free once the daemon has undone the create (without the
  // cancel the clone finishes and the name stays taken).
  let fresh: Sandbox | undefined;
  await until(async () => {
    try { fresh = await Sandbox.create({ name, networkPolicy: "deny-all" }); return true; } catch (e) {
      if (e instanceof AlreadyExistsError) return false;
      throw e;
    }
  }, 10_000, "the cancelled create to be undone");
  try {
    assert.deepEqual(await fresh!.fs.readdir("/workspace"), [], "nothing of the cancelled clone");
  } finally {
    await fresh!.delete();
  }
});

// The call is aborted once its request is on the wire (setImmediate runs
// after the microtasks that write it), so the daemon gets the cancel.
function abortWhenSent(ac: AbortController): void {
  setImmediate(() => ac.abort());
}

test("aborting a snapshot cancels it on the daemon: no snapshot is left and the sandbox runs on", async () => {
  await using sb = await Sandbox.create({ name: uniqueName("scan"), networkPolicy: "deny-all" });
  await sb.writeFiles(Array.from({ length: 200 }, (_, i) => ({ path: `f${i}`, content: "x".repeat(100) })));
  const ac = new AbortController();
  const p = sb.snapshot({ signal: ac.signal });
  abortWhenSent(ac);
  await assert.rejects(p, (e: unknown) => (e as Error).name === "AbortError");
  // A command runs once the sandbox is thawed again, i.e. once the daemon
  // has dropped the capture; then no snapshot of it exists.
  assert.equal(await (await sb.runCommand("cat", ["f7"])).stdout(), "x".repeat(100));
  await until(async () => (await Snapshot.list({ sandbox: sb.name })).length === 0, 10_000,
    "no snapshot of the sandbox after the aborted one");
});

test("UnavailableError: a policy update of a paused sandbox is refused for now, and works once resumed", async () => {
  await using sb = await Sandbox.create({ name: uniqueName("unav"), networkPolicy: "deny-all" });
  await sb.client.request("sandbox.pause", { name: sb.name });
  try {
    await assert.rejects(sb.update({ networkPolicy: "allow-all" }), (e: unknown) =>
      e instanceof UnavailableError && e instanceof SandboxError && e.code === -32000 && e.reason === "unavailable");
  } finally {
    await sb.client.request("sandbox.resume", { name: sb.name });
  }
  assert.equal((await sb.update({ networkPolicy: "allow-all" })).networkPolicy, "allow-all");
});

test("setTimeout shortens the running session: a persistent sandbox stops soon after, its own timeout unchanged", async () => {
  const sb = await Sandbox.create({ name: uniqueName("settime"), networkPolicy: "deny-all", persistent: true, timeout: 600_000 });
  try {
    const before = sb.expiresAt!.getTime();
    await sb.setTimeout(300_000);
    assert.ok(sb.expiresAt!.getTime() < before, "a shorter timeout moved expiresAt earlier");
    assert.equal(sb.timeout, 600_000, "the sandbox's own timeout is update's, not setTimeout's");
    assert.equal(sb.onTimeout, "stop");
    await sb.setTimeout(1000);
    await until(async () => (await sb.refresh()).status === "stopped", 30_000, () => `a stop at the new expiry (status ${sb.status})`);
    await assert.rejects(sb.setTimeout(5000), SandboxStoppedError);
  } finally {
    await sb.delete();
  }
});

test("setTimeout with onTimeout pause pauses the session at its expiry; resume thaws it", async () => {
  await using sb = await Sandbox.create({ name: uniqueName("setpause"), networkPolicy: "deny-all", timeout: 600_000 });
  await assert.rejects(sb.setTimeout(1000, { onTimeout: "later" as "stop" }), (e: unknown) =>
    e instanceof InvalidParamsError && e.field === "onTimeout");
  await sb.setTimeout(1000, { onTimeout: "pause" });
  assert.equal(sb.onTimeout, "pause");
  await until(async () => (await sb.refresh()).paused, 30_000, "the session paused at its expiry");
  assert.equal(sb.status, "running");
  await assert.rejects(sb.runCommand("true"), UnavailableError);
  await sb.resume();
  assert.equal(sb.paused, false);
  assert.equal(await (await sb.runCommand("echo", ["thawed"])).stdout(), "thawed\n");
  await sb.pause();
  assert.equal(sb.paused, true);
  await sb.resume();
});

test("snapshot tags: Snapshot.list by tags returns only the tagged snapshot", async () => {
  await using sb = await Sandbox.create({ name: uniqueName("snaptag"), networkPolicy: "deny-all" });
  const tag = uniqueName("t");
  const plain = await sb.snapshot();
  const tagged = await sb.snapshot({ tags: { suite: tag, kind: "base" } });
  try {
    assert.deepEqual(tagged.tags, { suite: tag, kind: "base" });
    assert.deepEqual(plain.tags, {});
    const byTag = await Snapshot.list({ tags: { suite: tag } });
    assert.deepEqual(byTag.map((s) => s.snapshotId), [tagged.snapshotId]);
    assert.deepEqual(byTag[0].tags, { suite: tag, kind: "base" });
    assert.deepEqual(await Snapshot.list({ tags: { suite: tag, kind: "other" } }), []);
    assert.equal((await Snapshot.list({ sandbox: sb.name })).length, 2);
  } finally {
    await plain.delete();
    await tagged.delete();
  }
});
