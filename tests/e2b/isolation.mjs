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

    // Exposed ports by host name: A's private sandbox's port is opened by
    // its own traffic token only, never by B's sandbox's.
    const ap = await Sandbox.create({ network: { allowPublicTraffic: false } })
    try {
      await ap.commands.run('cd /tmp && python3 -m http.server 8000', { background: true })
      const url = `https://${ap.getHost(8000)}/`
      const get = (token) => fetch(url, token ? { headers: { 'e2b-traffic-access-token': token } } : {})
      for (const end = Date.now() + 20_000; (await get(ap.trafficAccessToken)).status !== 200;) {
        if (Date.now() > end) throw new Error('http.server of A\'s sandbox did not answer')
        await new Promise((r) => setTimeout(r, 200))
      }
      assert.equal((await get(b.trafficAccessToken)).status, 403)
      assert.equal((await get(null)).status, 403)
      // B's own sandbox through A's: B's token names B's sandbox only.
      const bUrl = `https://${b.getHost(8000)}/`
      const bGet = await fetch(bUrl, { headers: { 'e2b-traffic-access-token': ap.trafficAccessToken } })
      assert.equal(bGet.status, 403)
      console.log('ok - key B\'s traffic token does not open A\'s private port (nor A\'s B\'s)')
    } finally {
      await ap.kill()
    }
  } finally {
    await b.kill()
  }
} finally {
  await a.kill()
}
