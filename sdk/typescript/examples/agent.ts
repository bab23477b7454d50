// The flow an agent product runs: create a sandbox from a git repository
// with an allowlist for a package registry, install, tighten the policy live
// to deny-all, run the tests streaming their output, read a result file,
// delete.
//
//   node build/examples/agent.js
//
// Settings (environment): AGENT_REPO_URL (a git URL), AGENT_REGISTRY (the
// one host the install may reach), AGENT_INSTALL and AGENT_TEST (shell
// commands run in /workspace), AGENT_RESULT (the file the tests write).
import { Sandbox } from "@sandboxd/sdk";

const repo = process.env.AGENT_REPO_URL ?? "https://github.com/octocat/Hello-World.git";
const registry = process.env.AGENT_REGISTRY ?? "registry.npmjs.org";
const install = process.env.AGENT_INSTALL ?? "npm install";
const testCmd = process.env.AGENT_TEST ?? "npm test > result.txt";
const resultPath = process.env.AGENT_RESULT ?? "result.txt";

await using sandbox = await Sandbox.create({
  source: { type: "git", url: repo, depth: 1 },
  networkPolicy: { allow: [registry] },
  timeout: 10 * 60_000,
  signal: AbortSignal.timeout(120_000),
});
console.log(`sandbox ${sandbox.name}: ${repo} in /workspace, egress only to ${registry}`);

// Install, with the registry reachable.
const installed = await sandbox.runCommand({
  cmd: "sh", args: ["-c", install], stdout: process.stdout, stderr: process.stderr,
});
if (installed.exitCode !== 0) throw new Error(`install failed with exit ${installed.exitCode}`);

// From now on nothing leaves the sandbox: deny-all, live, from the next
// packet on (connections already open are cut too).
await sandbox.update({ networkPolicy: "deny-all" });
const check = await sandbox.checkPolicy(`https://${registry}/`);
console.log(`policy now: ${JSON.stringify(sandbox.networkPolicy)}, ${check.decision} (${check.message})`);

// Run the tests, streaming their output as it comes.
const tests = await sandbox.runCommand({ cmd: "sh", args: ["-c", testCmd], detached: true });
for await (const { stream, data } of tests.logs()) {
  (stream === "stdout" ? process.stdout : process.stderr).write(data);
}
const finished = await tests.wait();
console.log(`tests exited with ${finished.exitCode} after ${finished.durationMs} ms`);

// Read what the tests wrote.
const result = await sandbox.readFileToBuffer(resultPath);
if (result === null) throw new Error(`the tests wrote no ${resultPath}`);
console.log(`${resultPath}: ${result.toString("utf8").trim()}`);

await sandbox.delete();
process.exitCode = finished.exitCode;
