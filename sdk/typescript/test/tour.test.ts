// The README's tour is examples/tour.ts verbatim, and it runs.
import { test } from "node:test";
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { spawnSync } from "node:child_process";
import { fileURLToPath } from "node:url";

const root = fileURLToPath(new URL("../../", import.meta.url));

test("the README tour is examples/tour.ts and runs", () => {
  const readme = readFileSync(root + "README.md", "utf8");
  const tour = readFileSync(root + "examples/tour.ts", "utf8");
  assert.ok(readme.includes("```ts\n" + tour + "```"), "README.md holds examples/tour.ts verbatim");
  const r = spawnSync(process.execPath, [root + "build/examples/tour.js"], { encoding: "utf8", timeout: 60_000 });
  assert.equal(r.status, 0, `tour exit ${r.status}\n${r.stdout}\n${r.stderr}`);
  assert.match(r.stdout, /0 hello from \/workspace/);
  assert.match(r.stdout, /\[stdout\] running/);
  assert.match(r.stdout, /exit 0/);
  assert.match(r.stdout, /^deny-all$/m);
  assert.match(r.stdout, /not found: not_found/);
});
