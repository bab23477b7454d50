import { test } from "node:test";
import assert from "node:assert/strict";
import { Sandbox, NotFoundError, type WatchEvent } from "@sandboxd/sdk";
import { uniqueName } from "./helpers.js";

test("sandbox.watch iterates created, modified, renamed and deleted; a signal ends it", async () => {
  await using sb = await Sandbox.create({ name: uniqueName("watch"), networkPolicy: "deny-all" });
  const ac = new AbortController();
  let started!: () => void;
  const ready = new Promise<void>((r) => { started = r; });
  const seen: WatchEvent[] = [];
  const done = (async () => {
    try {
      for await (const e of sb.watch("/workspace", { recursive: true, signal: ac.signal, onStarted: started })) {
        seen.push(e);
        if (e.type === "deleted" && e.path === "/workspace/d/b.txt") ac.abort(new Error("enough"));
      }
    } catch (e) {
      if ((e as Error).message !== "enough") throw e;
    }
  })();
  await ready;
  await sb.runCommand("sh", ["-c", "mkdir d && echo hi > d/a.txt && mv d/a.txt d/b.txt && rm d/b.txt"]);
  await done;
  const has = (t: string, p: string) => seen.some((e) => e.type === t && e.path === p);
  assert.ok(has("created", "/workspace/d"), JSON.stringify(seen));
  assert.ok(seen.find((e) => e.path === "/workspace/d")?.isDir === true);
  assert.ok(has("created", "/workspace/d/a.txt"), JSON.stringify(seen));
  assert.ok(seen.some((e) => e.type === "renamed" && e.path === "/workspace/d/b.txt" && e.oldPath === "/workspace/d/a.txt"),
    JSON.stringify(seen));
  assert.ok(has("deleted", "/workspace/d/b.txt"), JSON.stringify(seen));
});

test("sandbox.watch of a missing path throws NotFoundError; the iteration ends when the sandbox stops", async () => {
  await using sb = await Sandbox.create({ name: uniqueName("watchend"), networkPolicy: "deny-all", persistent: true });
  await assert.rejects(async () => { for await (const _ of sb.watch("missing")) { /* none */ } }, NotFoundError);
  let started!: () => void;
  const ready = new Promise<void>((r) => { started = r; });
  const it = (async () => { let n = 0; for await (const _ of sb.watch("/workspace", { onStarted: started })) n++; return n; })();
  await ready;
  await sb.stop();
  assert.equal(typeof (await it), "number");
  await sb.delete();
});

test("a finished command reports its usage", async () => {
  await using sb = await Sandbox.create({ name: uniqueName("usage"), networkPolicy: "deny-all" });
  const fin = await sb.runCommand("true");
  assert.ok(fin.usage, "usage of true");
  assert.ok(fin.usage.cpuMs >= 0 && fin.usage.cpuMs < 1000, JSON.stringify(fin.usage));
  assert.ok(fin.usage.memoryPeakBytes > 0 && fin.usage.memoryPeakBytes < 256 << 20, JSON.stringify(fin.usage));
});
