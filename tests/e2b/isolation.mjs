// Key isolation: a sandbox made with key A is invisible to key B
// (E2B_API_KEY_B): not listed, not found, not killable, and its envd
// refuses B's requests. Only the E2B SDK and its documented options.
import { Sandbox } from 'e2b'
import assert from 'node:assert/strict'

const keyB = process.env.E2B_API_KEY_B
const a = await Sandbox.create()
try {
  const listedB = await Sandbox.list({ apiKey: keyB }).nextItems()
  assert.ok(!listedB.some((s) => s.sandboxId === a.sandboxId))
  console.log('ok - key B does not list key A\'s sandbox')

  await assert.rejects(Sandbox.getInfo(a.sandboxId, { apiKey: keyB }), /not found/i)
  console.log('ok - key B gets not found for it')

  const killed = await Sandbox.kill(a.sandboxId, { apiKey: keyB })
  assert.equal(killed, false)
  assert.equal(await a.isRunning(), true)
  console.log('ok - key B cannot kill it')

  // Envd access tokens are per sandbox: B's sandbox's token does not
  // open A's envd (the request the SDK would send, with B's token).
  const b = await Sandbox.create({ apiKey: keyB })
  try {
    const listDir = (token) =>
      fetch(process.env.E2B_SANDBOX_URL + '/filesystem.Filesystem/ListDir', {
        method: 'POST',
        headers: {
          'Content-Type': 'application/json',
          'E2b-Sandbox-Id': a.sandboxId,
          'X-Access-Token': token,
        },
        body: JSON.stringify({ path: '/tmp', depth: 1 }),
      })
    assert.equal((await listDir(a.envdAccessToken)).status, 200)
    assert.equal((await listDir(b.envdAccessToken)).status, 401)
    console.log('ok - key B\'s sandbox token does not open A\'s envd')
  } finally {
    await b.kill()
  }
} finally {
  await a.kill()
}
