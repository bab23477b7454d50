// A connection the daemon refuses (a user not in the socket's group):
// the calls fail at once with the daemon's reason as a typed error, not
// with "connection lost" after retrying.
import { test } from "node:test";
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { chmodSync, statSync } from "node:fs";
import { dirname } from "node:path";


const dist = new URL("../../dist/index.js", import.meta.url).href;

// As `nobody`: a call, and a Command.wait that would retry a lost connection.
const child = `
import { Sandbox, SandboxClient, PermissionDeniedError, SandboxError } from ${JSON.stringify(dist)};
const client = new SandboxClient({ reconnectTimeoutMs: 30000 });
const out = [];
for (let i = 0; i < 2; i++) {
  const t = Date.now();
  try {
    await Sandbox.create({ client, networkPolicy: "deny-all" });
    out.push({ ok: true });
  } catch (e) {
    out.push({ cls: e.constructor.name, typed: e instanceof PermissionDeniedError && e instanceof SandboxError,
      reason: e.reason, message: e.message, ms: Date.now() - t });
  }
}
console.log(JSON.stringify(out));
`;

test("a connection the daemon refuses fails every call at once with PermissionDeniedError", () => {
  const sock = process.env.SANDBOXD_SOCKET as string;
  // Let `nobody` reach the socket file, so that the daemon itself decides
  // (SO_PEERCRED), as with a socket group it is not in; put the modes back.
  const paths: string[] = [sock];
  for (let d = dirname(sock); d !== "/" && d !== "/tmp"; d = dirname(d)) paths.push(d);
  const modes = paths.map((p) => statSync(p).mode & 0o7777);
  try {
    chmodSync(sock, 0o666);
    for (const d of paths.slice(1)) chmodSync(d, (statSync(d).mode & 0o7777) | 0o001);
    const r = spawnSync("runuser", ["-u", "nobody", "--", process.execPath, "--input-type=module", "-e", child],
      { encoding: "utf8", timeout: 60_000, env: { ...process.env, HOME: "/" } });
    assert.equal(r.status, 0, `child exit ${r.status}: ${r.stderr}`);
    const res = JSON.parse(r.stdout.trim().split("\n").pop() as string) as Array<Record<string, unknown>>;
    for (const x of res) {
      assert.equal(x.cls, "PermissionDeniedError", JSON.stringify(x));
      assert.equal(x.typed, true);
      assert.equal(x.reason, "permission_denied");
      assert.match(String(x.message), /socket group/, "the daemon's own message");
      assert.ok((x.ms as number) < 5000, `refused promptly, not after retrying: ${x.ms} ms`);
    }
  } finally {
    paths.forEach((p, i) => chmodSync(p, modes[i]!));
  }
});
