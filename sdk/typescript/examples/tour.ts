import { Sandbox, Snapshot, NotFoundError } from "@sandboxd/sdk";

// A sandbox that may reach one host; stopped (and so deleted) when the scope ends.
await using sandbox = await Sandbox.create({
  networkPolicy: { allow: ["registry.npmjs.org"] },
  env: { GREETING: "hello" },
  timeout: 5 * 60_000,
});

// Run a command and wait for it.
const r = await sandbox.runCommand("sh", ["-c", "echo $GREETING from $(pwd)"]);
console.log(r.exitCode, await r.stdout()); // 0 "hello from /workspace\n"

// Files.
await sandbox.writeFiles([{ path: "app/main.sh", content: "echo running; sleep 0.2; echo done\n", mode: 0o755 }]);
console.log(await sandbox.fs.readdir("app")); // [ "main.sh" ]

// A long-running command: stream its output, then wait for its exit.
const cmd = await sandbox.runCommand({ cmd: "app/main.sh", detached: true });
for await (const { stream, data } of cmd.logs()) process.stdout.write(`[${stream}] ${data}`);
console.log("exit", (await cmd.wait()).exitCode);

// The policy, as the sandbox's enforcement sees it; then tightened live.
console.log((await sandbox.checkPolicy("https://example.com/")).decision); // "deny"
await sandbox.update({ networkPolicy: "deny-all" }); // nothing leaves it from the next packet on
console.log(sandbox.networkPolicy); // "deny-all"

// Snapshot it, start a second sandbox from the snapshot.
const snap = await sandbox.snapshot();
{
  await using copy = await Sandbox.create({ source: { type: "snapshot", snapshotId: snap.snapshotId } });
  console.log((await copy.readFileToBuffer("app/main.sh"))?.length);
}
await snap.delete();

// Errors are typed.
try {
  await Sandbox.get({ name: "no-such-sandbox" });
} catch (e) {
  if (e instanceof NotFoundError) console.log("not found:", e.reason);
  else throw e;
}
console.log((await Snapshot.list()).length >= 0);
