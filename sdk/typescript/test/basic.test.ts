import { test } from "node:test";
import assert from "node:assert/strict";
import { Sandbox } from "@sandboxd/sdk";
import { uniqueName } from "./helpers.js";

test("create, run a command, read its output, delete", async () => {
  const t0 = Date.now();
  await using sb = await Sandbox.create({ name: uniqueName("basic"), networkPolicy: "deny-all" });
  console.log("create ms", Date.now() - t0);
  assert.equal(sb.status, "running");
  const r = await sb.runCommand("sh", ["-c", "echo out; echo err >&2; exit 3"]);
  assert.equal(r.exitCode, 3);
  assert.equal(await r.stdout(), "out\n");
  assert.equal(await r.stderr(), "err\n");
  console.log("total ms", Date.now() - t0);
});
