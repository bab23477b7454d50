import { test } from "node:test";
import assert from "node:assert/strict";
import { Writable } from "node:stream";
import { Sandbox, SandboxClient, CommandFinished, Command } from "@sandboxd/sdk";
import { uniqueName, until } from "./helpers.js";

function sink(): Writable & { text: () => string } {
  const parts: Buffer[] = [];
  const w = new Writable({ write(c, _e, cb) { parts.push(Buffer.from(c)); cb(); } }) as Writable & { text: () => string };
  w.text = () => Buffer.concat(parts).toString();
  return w;
}

test("runCommand in both forms: output, exit code, cwd, env, sudo, stdin, Writables", async () => {
  await using sb = await Sandbox.create({ name: uniqueName("run"), networkPolicy: "deny-all" });
  const a = await sb.runCommand("pwd");
  assert.ok(a instanceof CommandFinished);
  assert.equal(a.exitCode, 0);
  assert.equal(await a.stdout(), "/workspace\n");
  assert.ok(a.durationMs >= 0);
  const out = sink(), err = sink();
  const b = await sb.runCommand({
    cmd: "sh", args: ["-c", "cat; echo \"$X $(pwd) $(id -u)\"; echo e >&2; exit 5"], cwd: "/tmp", env: { X: "x" },
    sudo: true, stdin: "in\n", stdout: out, stderr: err,
  });
  assert.equal(b.exitCode, 5);
  assert.equal(await b.stdout(), "in\nx /tmp 0\n");
  assert.equal((await b.output("both")).split("\n").sort().join("\n"), ["", "e", "in", "x /tmp 0"].join("\n"));
  assert.equal(out.text(), "in\nx /tmp 0\n");
  assert.equal(err.text(), "e\n");
  const t = await sb.runCommand({ cmd: "sleep", args: ["30"], timeoutMs: 200 });
  assert.equal(t.exitCode, 137);
  assert.equal(t.timedOut, true);
  const missing = await sb.runCommand("no-such-program");
  assert.equal(missing.exitCode, 127);
  assert.match(await missing.stderr(), /^sandboxd: /);
});

test("a detached command: logs as they come, write, closeStdin, wait, getCommand, kill", async () => {
  await using sb = await Sandbox.create({ name: uniqueName("det"), networkPolicy: "deny-all" });
  const cat = await sb.runCommand({ cmd: "sh", args: ["-c", "while read l; do echo got-$l; echo err-$l >&2; done; echo bye"], detached: true });
  assert.ok(cat instanceof Command);
  assert.equal(cat.exitCode, null);
  const seen: string[] = [];
  const reading = (async () => { for await (const l of cat.logs()) seen.push(`${l.stream}:${l.data}`); })();
  await cat.write("a\n");
  await until(() => seen.join("").includes("stdout:got-a"), 10_000, "the first line's echo");
  await cat.write(Buffer.from("b\n"));
  await cat.closeStdin();
  const fin = await cat.wait();
  await reading;
  assert.equal(fin.exitCode, 0);
  assert.equal(await fin.stdout(), "got-a\ngot-b\nbye\n");
  assert.equal(await fin.stderr(), "err-a\nerr-b\n");
  assert.ok(seen.join("").includes("stderr:err-b"));

  const sleeper = await sb.runCommand({ cmd: "sh", args: ["-c", "echo started; exec sleep 60"], detached: true });
  // Another connection finds it by id and follows it.
  const other = new SandboxClient();
  const found = await (await Sandbox.get({ name: sb.name, client: other })).getCommand(sleeper.cmdId);
  assert.equal(found.cmdId, sleeper.cmdId);
  assert.equal(found.exitCode, null);
  const foundLogs: string[] = [];
  const following = (async () => { for await (const l of found.logs()) foundLogs.push(l.data); })();
  await until(() => foundLogs.join("").includes("started"), 10_000, "getCommand's logs");
  await sleeper.kill();
  assert.equal((await sleeper.wait()).exitCode, 128 + 15);
  assert.equal((await found.wait()).exitCode, 128 + 15);
  await following;
  other.close();
});

test("a tty command sees its size and resize()", async () => {
  await using sb = await Sandbox.create({ name: uniqueName("tty"), networkPolicy: "deny-all" });
  const c = await sb.runCommand({ cmd: "sh", args: ["-c", "stty size; read x; stty size"], tty: { rows: 24, cols: 80 }, detached: true });
  let text = "";
  const reading = (async () => { for await (const l of c.logs()) text += l.data; })();
  await until(() => text.includes("24 80"), 10_000, "the first stty size");
  await c.resize({ rows: 40, cols: 120 });
  await c.write("\n");
  const fin = await c.wait();
  await reading;
  assert.equal(fin.exitCode, 0);
  assert.match(text, /40 120/);
});

test("commands are multiplexed on one connection", async () => {
  const client = new SandboxClient();
  const sb = await Sandbox.create({ client, name: uniqueName("mux"), networkPolicy: "deny-all" });
  const runs = await Promise.all(Array.from({ length: 8 }, (_, i) =>
    sb.runCommand("sh", ["-c", `sleep 0.$((${i} % 3)); echo n${i}`])));
  assert.deepEqual(await Promise.all(runs.map((r) => r.stdout())), runs.map((_, i) => `n${i}\n`));
  const [info] = await Promise.all([sb.refresh(), sb.runCommand("true")]);
  assert.equal(info.name, sb.name);
  await sb.delete();
  client.close();
});

test("aborting runCommand rejects with the reason and kills the command", async () => {
  await using sb = await Sandbox.create({ name: uniqueName("abrt"), networkPolicy: "deny-all" });
  const ac = new AbortController();
  const p = sb.runCommand({ cmd: "sh", args: ["-c", "echo $$ > /tmp/pid; exec sleep 60"], signal: ac.signal });
  await until(async () => (await sb.readFileToBuffer("/tmp/pid")) !== null, 10_000, "the command started");
  ac.abort();
  await assert.rejects(p, (e: unknown) => (e as Error).name === "AbortError");
  await until(async () => (await sb.runCommand("sh", ["-c", "kill -0 $(cat /tmp/pid)"])).exitCode !== 0, 10_000, "the command is gone");
  await assert.rejects(sb.runCommand("true", [], { signal: AbortSignal.abort() }), (e: unknown) => (e as Error).name === "AbortError");
});

test("a command's output in memory is capped at its newest bytes; readers get all of it", async () => {
  await using sb = await Sandbox.create({ name: uniqueName("cap"), networkPolicy: "deny-all" });
  let streamed = 0;
  const counter = new Writable({ write(c, _e, cb) { streamed += c.length; cb(); } });
  // 20 MiB of "x", then a last line.
  const r = await sb.runCommand({ cmd: "sh", args: ["-c", "head -c 20971520 /dev/zero | tr '\\0' x; echo; echo the-end"], stdout: counter });
  assert.equal(r.exitCode, 0);
  assert.equal(streamed, 20971520 + 1 + 8, "the Writable got every byte");
  const out = await r.stdout();
  assert.ok(out.length <= 16 << 20, `kept ${out.length} bytes`);
  assert.ok(out.endsWith("x\nthe-end\n"), "the newest bytes are kept");
  assert.equal(r.outputTruncated, true);
});

test("listCommands gives the sandbox's commands, newest first, every page", async () => {
  await using sb = await Sandbox.create({ name: uniqueName("lscmd"), networkPolicy: "deny-all" });
  const done = await sb.runCommand({ cmd: "sh", args: ["-c", "exit 3"] });
  const long = await sb.runCommand({ cmd: "sleep", args: ["100"], detached: true });
  const listed = await sb.listCommands({ limit: 1 });
  assert.deepEqual(listed.map((c) => c.exitCode), [null, 3]);
  assert.equal(listed[0].cmdId, long.cmdId);
  assert.equal(done.exitCode, 3);
  await long.kill("SIGKILL");
  assert.equal((await long.wait()).exitCode, 137);
});
