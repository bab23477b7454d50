// Run alone, after the other files (test/world.py): it restarts the daemon.
import { test } from "node:test";
import assert from "node:assert/strict";
import { Sandbox, SandboxClient } from "@sandboxd/sdk";
import { restartDaemon, uniqueName, until, within, withCleanup } from "./helpers.js";

test("across a daemon restart a command's logs resume, wait answers, and calls reconnect", async () => {
  const client = new SandboxClient();
  let reconnects = 0;
  client.on("reconnect", () => reconnects++);
  const sb = await Sandbox.create({ client, name: uniqueName("rst"), networkPolicy: "deny-all" });
  await withCleanup(async () => {
    const cmd = await sb.runCommand({ cmd: "sh", args: ["-c", "i=0; while :; do i=$((i+1)); echo tick-$i; sleep 0.1; done"], detached: true });
    const ticks: number[] = [];
    const lines: string[] = [];
    const reading = (async () => {
      let partial = "";
      for await (const l of cmd.logs()) {
        partial += l.data;
        const ls = partial.split("\n");
        partial = ls.pop() as string;
        for (const x of ls) {
          lines.push(x);
          if (/^tick-\d+$/.test(x)) ticks.push(Number(x.slice(5)));
        }
      }
    })();
    const waiting = cmd.wait();
    // A logs() or wait() that fails early fails the step that polls, with
    // its own error (never as an unhandled rejection).
    let failure: unknown;
    reading.catch((e) => { failure ??= e; });
    waiting.catch((e) => { failure ??= e; });
    const ok = () => { if (failure !== undefined) throw failure; return true; };
    const seen = () => `${ticks.length} ticks, last lines ${JSON.stringify(lines.slice(-3))}`;
    await until(() => ok() && ticks.length >= 3, 10_000, "ticks before the restart");
    const before = ticks.length;
    await restartDaemon();
    await until(() => ok() && ticks.length >= before + 5, 20_000, () => `ticks after the restart (logs resumed; ${seen()})`);
    assert.ok(ticks[ticks.length - 1]! > ticks[before - 1]!, `later ticks came after the restart (${seen()})`);
    assert.ok(reconnects >= 1, "the client reconnected");
    // The same client and sandbox keep working.
    assert.equal(await (await within(sb.runCommand("echo", ["after"]), 20_000, "a command after the restart")).stdout(), "after\n");
    await sb.refresh();
    assert.equal(sb.status, "running");
    await cmd.kill("SIGTERM");
    const fin = await within(waiting, 20_000, `the killed command's wait() (${seen()})`);
    assert.equal(fin.exitCode, 128 + 15);
    await within(reading, 20_000, `the end of logs() with the command (${seen()})`);
  }, async () => {
    try {
      await within(sb.delete(), 30_000, "sandbox.delete");
    } finally {
      client.close();
    }
  });
});
