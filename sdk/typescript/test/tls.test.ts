import { test } from "node:test";
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { Sandbox, SandboxClient, DaemonUnreachableError } from "@sandboxd/sdk";
import { uniqueName } from "./helpers.js";

const dir = process.env.SANDBOXD_TEST_TLS_DIR as string;
const url = process.env.SANDBOXD_TEST_TLS_URL as string;
const pem = (f: string) => readFileSync(join(dir, f));

test("a remote client over TLS 1.3 with a client certificate runs the same API", async () => {
  const client = new SandboxClient({ url, cert: pem("client.pem"), key: pem("client-key.pem"), ca: pem("ca.pem") });
  const sb = await Sandbox.create({ client, name: uniqueName("tls"), networkPolicy: "deny-all" });
  try {
    const r = await sb.runCommand("echo", ["over tls"]);
    assert.equal(await r.stdout(), "over tls\n");
    const big = Buffer.alloc(3 << 20, 1);
    await sb.writeFiles([{ path: "big", content: big }]);
    assert.ok((await sb.readFileToBuffer("big"))!.equals(big));
  } finally {
    await sb.delete();
    client.close();
  }
});

test("a TLS client without a certificate, or that does not trust the daemon, is refused", async () => {
  const noCert = new SandboxClient({ url, ca: pem("ca.pem"), reconnectTimeoutMs: 0 });
  await assert.rejects(Sandbox.get({ name: "x", client: noCert }), DaemonUnreachableError);
  noCert.close();
  const wrongCa = new SandboxClient({ url, cert: pem("client.pem"), key: pem("client-key.pem"), ca: pem("client.pem") });
  await assert.rejects(Sandbox.get({ name: "x", client: wrongCa }), (e: unknown) =>
    e instanceof DaemonUnreachableError && /certificate/i.test((e as Error).message));
  wrongCa.close();
  assert.throws(() => new SandboxClient({ url: "https://host:1" }), /tcp:\/\/host:port/);
});
