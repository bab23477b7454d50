// Run alone, after the other files (test/world.py): it restarts the daemon.
import { test } from "node:test";
import assert from "node:assert/strict";
import { Sandbox, SandboxClient } from "@sandboxd/sdk";
import { restartDaemon, uniqueName, until } from "./helpers.js";

test("across a daemon restart a command's logs resume, wait answers, and calls reconnect", async () => {
  const client = new SandboxClient();
  let reconnects = 0;
  client.on("reconnect", () => reconnects++);
  const sb = await Sandbox.create({ client, name: uniqueName("rst"), networkPolicy: "deny-all" });
  try {
    const cmd = await sb.runCommand({ cmd: "sh", args: ["-c", "i=0; while :; do i=$((i+1)); echo tick-$i; sleep 0.1; done"], detached: true });
    const ticks: number[] = [];
    const reading = (async () => {
      let partial = "";
      for await (const l of cmd.logs()) {
        partial += l.data;
        const lines = partial.split("\n");
        partial = lines.pop() as string;
        for (const x of lines) ticks.push(Number(x.replace("tick-", "")));
      }
    })();
    const waiting = cmd.wait();
    await until(() => ticks.length >= 3, 10_000, "ticks before the restart");
    const before = ticks.length;
    await restartDaemon();
    await until(() => ticks.length >= before + 5, 20_000, "ticks after the restart (logs resumed)");
    assert.ok(ticks[ticks.length - 1]! > ticks[before - 1]!, "later ticks came after the restart");
    assert.ok(reconnects >= 1, "the client reconnected");
    // The same client and sandbox keep working.
    assert.equal(await (await sb.runCommand("echo", ["after"])).stdout(), "after\n");
    await sb.refresh();
    assert.equal(sb.status, "running");
    await cmd.kill("SIGTERM");
    const fin = await waiting;
    assert.equal(fin.exitCode, 128 + 15);
    await reading; // the iteration ended with the command
  } finally {
    await sb.delete();
    client.close();
  }
});
