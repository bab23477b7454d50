import { test } from "node:test";
import assert from "node:assert/strict";
import { Sandbox, SandboxError } from "@sandboxd/sdk";
import { uniqueName, until } from "./helpers.js";

test("domain(port) is the URL of the exposed port; unexposed ports throw", async () => {
  await using sb = await Sandbox.create({ name: uniqueName("port"), networkPolicy: "deny-all", ports: [8000] });
  await sb.writeFiles([{ path: "www/index.html", content: "served from the sandbox" }]);
  await sb.runCommand({ cmd: "python3", args: ["-m", "http.server", "--bind", "127.0.0.1", "8000"], cwd: "/workspace/www", detached: true });
  const url = sb.domain(8000);
  assert.match(url, /^http:\/\/127\.0\.0\.1:\d+$/);
  let body = "";
  await until(async () => {
    // A timer of our own: AbortSignal.timeout's does not keep Node running.
    const ac = new AbortController();
    const t = setTimeout(() => ac.abort(), 2000);
    try { body = await (await fetch(url + "/index.html", { signal: ac.signal })).text(); return true; } catch { return false; } finally { clearTimeout(t); }
  }, 15_000, "the server in the sandbox");
  assert.equal(body, "served from the sandbox");
  assert.throws(() => sb.domain(9000), (e: unknown) => e instanceof SandboxError && /9000 is not exposed/.test((e as Error).message));
  await sb.update({ ports: [8000, 9000] });
  assert.match(sb.domain(9000), /^http:\/\/127\.0\.0\.1:\d+$/);
});

test("checkPolicy and events(): a denied request is decided and evented", async () => {
  const registry = process.env.SANDBOXD_TEST_REGISTRY as string;
  await using sb = await Sandbox.create({ name: uniqueName("pol"), networkPolicy: { allow: [registry] } });
  const ok = await sb.checkPolicy(`https://${registry}/x`);
  assert.equal(ok.decision, "allow");
  const no = await sb.checkPolicy("https://other.public.test/");
  assert.equal(no.decision, "deny");
  assert.equal(no.layer, "default-deny");
  assert.equal((await sb.checkPolicy({ host: "10.1.2.3", port: 443 })).decision, "deny");
  const ac = new AbortController();
  const events = sb.events({ kinds: ["denied"], signal: ac.signal });
  const got: string[] = [];
  const reading = (async () => {
    try {
      for await (const e of events) {
        assert.equal(e.sandbox, sb.name);
        got.push(String(e.host ?? e.destination ?? ""));
      }
    } catch (e) {
      if ((e as Error).name !== "AbortError") throw e;
    }
  })();
  // The subscription is made on a connection of its own: curl again until
  // an event arrives.
  await until(async () => {
    await sb.runCommand("sh", ["-c", "curl -sS -m 2 http://other.public.test/ || true"]);
    return got.some((h) => h.includes("other.public.test"));
  }, 20_000, "a denied event for other.public.test");
  ac.abort();
  await reading;
  // Tightened live: the allowed host is denied from now on.
  await sb.update({ networkPolicy: {} });
  assert.equal((await sb.checkPolicy(`https://${registry}/x`)).decision, "deny");
});
