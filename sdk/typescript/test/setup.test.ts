// getOrCreate's onCreate (docs/API.md, "Setup and readiness"): no caller
// gets the sandbox before an onCreate succeeded on it; a failed onCreate is
// run again by the next caller; a waiter takes over the setup of a creator
// that died in the middle of it.
import { test } from "node:test";
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { createInterface } from "node:readline";
import { Sandbox, SandboxClient, NotFoundError } from "@sandboxd/sdk";
import { uniqueName, until, within } from "./helpers.js";

const dist = new URL("../../dist/index.js", import.meta.url).href;

async function waiters(client: SandboxClient, name: string): Promise<number> {
  const info = await client.request<{ setup: { waiters: number } }>("sandbox.get", { name });
  return info.setup.waiters;
}

async function remove(name: string): Promise<void> {
  try {
    await (await Sandbox.get({ name })).delete();
  } catch (e) {
    if (!(e instanceof NotFoundError)) throw e;
  }
}

test("a concurrent getOrCreate gets the sandbox only after the creator's onCreate finished", async () => {
  const name = uniqueName("setup");
  const a = new SandboxClient();
  const b = new SandboxClient();
  const order: string[] = [];
  let second: Promise<Sandbox> | undefined;
  try {
    const first = await Sandbox.getOrCreate({
      client: a, name, networkPolicy: "deny-all",
      onCreate: async (sb) => {
        await sb.writeFiles([{ path: "setup.txt", content: "done" }]);
        second = Sandbox.getOrCreate({ client: b, name, networkPolicy: "deny-all", onCreate: () => { order.push("b-setup"); } })
          .then((s) => { order.push("b-got"); return s; });
        // The second caller waits on the daemon before this setup ends.
        await until(async () => (await waiters(a, name)) === 1, 60_000, "the second caller to wait");
        assert.equal(order.length, 0, "nobody got the sandbox during the setup");
        order.push("a-setup-done");
      },
    });
    const got = await within(second!, 60_000, "the second getOrCreate");
    assert.deepEqual(order, ["a-setup-done", "b-got"]);
    assert.equal(first.ready, true);
    assert.equal(got.ready, true);
    assert.equal(got.sandboxId, first.sandboxId);
    assert.equal(await got.fs.readFile("setup.txt", "utf8"), "done");
  } finally {
    await remove(name);
    a.close();
    b.close();
  }
});

test("after onCreate threw, the next getOrCreate runs onCreate again", async () => {
  const name = uniqueName("setupfail");
  const calls: string[] = [];
  try {
    await assert.rejects(Sandbox.getOrCreate({
      name, networkPolicy: "deny-all",
      onCreate: async (sb) => {
        await sb.writeFiles([{ path: "half.txt", content: "x" }]);
        throw new Error("setup broke");
      },
    }), /setup broke/);
    const left = await Sandbox.get({ name });
    assert.equal(left.ready, false, "a failed setup leaves the sandbox not ready");
    const sb = await Sandbox.getOrCreate({
      name, networkPolicy: "deny-all",
      onCreate: async (s) => { calls.push(await s.fs.readFile("half.txt", "utf8")); },
    });
    assert.deepEqual(calls, ["x"]);
    assert.equal(sb.ready, true);
    await Sandbox.getOrCreate({ name, networkPolicy: "deny-all", onCreate: () => { calls.push("again"); } });
    assert.deepEqual(calls, ["x"], "onCreate never runs on a ready sandbox");
  } finally {
    await remove(name);
  }
});

test("a waiter takes over the setup when the creator dies in the middle of onCreate", async () => {
  const name = uniqueName("setupdie");
  const script = `
import { Sandbox } from ${JSON.stringify(dist)};
await Sandbox.getOrCreate({ name: ${JSON.stringify(name)}, networkPolicy: "deny-all", onCreate: async () => {
  console.log("in-setup");
  // Never returns: the process is killed here. The interval keeps it alive
  // until then (a bare unsettled await lets Node exit at once, code 13, and
  // the setup would be released before the waiter came).
  await new Promise(() => { setInterval(() => {}, 60_000); });
} });
`;
  const child = spawn(process.execPath, ["--input-type=module", "-e", script], { stdio: ["ignore", "pipe", "pipe"] });
  let stderr = "";
  child.stderr.on("data", (d: Buffer) => { stderr += d.toString(); });
  const exited = new Promise<void>((resolve) => child.on("exit", () => resolve()));
  const other = new SandboxClient();
  try {
    const lines = createInterface({ input: child.stdout });
    const first = await within(new Promise<string>((resolve) => lines.once("line", resolve)), 120_000,
      "the child's onCreate to start");
    assert.equal(first.trim(), "in-setup", stderr);
    const waiting = Sandbox.getOrCreate({
      client: other, name, networkPolicy: "deny-all",
      onCreate: async (sb) => { await sb.writeFiles([{ path: "by-waiter", content: "1" }]); },
    });
    await until(async () => (await waiters(other, name)) === 1, 60_000, "the waiter to wait");
    assert.equal(child.exitCode ?? child.signalCode, null, "the creator is still in its onCreate: " + stderr);
    child.kill("SIGKILL");
    await exited;
    const sb = await within(waiting, 60_000, "the waiter's getOrCreate");
    assert.equal(sb.ready, true);
    assert.equal(await sb.fs.readFile("by-waiter", "utf8"), "1");
  } finally {
    if (child.exitCode === null && child.signalCode === null) child.kill("SIGKILL");
    await exited;
    await remove(name);
    other.close();
  }
});
