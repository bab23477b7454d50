// examples/agent.ts, run as a user would, against the test world: the git
// repository is the world's copy of this one, the "registry" is an HTTPS
// server of the fake internet.
import { test } from "node:test";
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { fileURLToPath } from "node:url";
import { Sandbox, NotFoundError } from "@sandboxd/sdk";

test("examples/agent.ts runs the agent flow end to end", async () => {
  const script = fileURLToPath(new URL("../examples/agent.js", import.meta.url));
  const registry = process.env.SANDBOXD_TEST_REGISTRY as string;
  const r = spawnSync(process.execPath, [script], {
    encoding: "utf8", timeout: 120_000,
    env: {
      ...process.env,
      AGENT_REPO_URL: process.env.SANDBOXD_TEST_GIT_URL,
      AGENT_REGISTRY: registry,
      AGENT_INSTALL: `curl -fsS -o registry-index.json http://${registry}/index.json && echo installed`,
      AGENT_TEST: `test -f README.md && test -s registry-index.json && echo tests-ran && echo tests-stderr >&2 && ` +
        `if curl -fsS -m 5 http://${registry}/leak >/dev/null 2>&1; then echo reached > result.txt; else echo offline > result.txt; fi`,
      AGENT_RESULT: "result.txt",
    },
  });
  assert.equal(r.status, 0, `agent exit ${r.status}\nstdout: ${r.stdout}\nstderr: ${r.stderr}`);
  assert.match(r.stdout, /installed\n/);
  assert.match(r.stdout, /policy now: "deny-all", deny/, "the policy was tightened live to deny-all");
  assert.match(r.stdout, /tests-ran\n/);
  assert.match(r.stderr, /tests-stderr\n/);
  assert.match(r.stdout, /result\.txt: offline/, "the tests ran with the network denied");
  // The example deleted its sandbox.
  const name = /^sandbox (\S+):/m.exec(r.stdout)?.[1];
  assert.ok(name, "the example names its sandbox");
  await assert.rejects(Sandbox.get({ name }), NotFoundError);
});
