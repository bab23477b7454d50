// More of E2B's documented SDK surface against sandboxd-e2b: the
// filesystem calls (makeDir, exists, getInfo, rename, remove), background
// commands (list, kill by pid), a command's envs, cwd and user, and
// options sandboxd-e2b does not serve yet, which must fail loudly (E2B's
// error shape, naming what is missing), never be ignored.
import { Sandbox, FileNotFoundError, ALL_TRAFFIC } from 'e2b'
import assert from 'node:assert/strict'
import http from 'node:http'
import net from 'node:net'

function ok(what) {
  console.log('ok - ' + what)
}

const s = await Sandbox.create({ envs: { FROM_CREATE: 'yes' }, timeoutMs: 120_000 })
try {
  assert.equal(await s.files.makeDir('/tmp/m/n'), true)
  assert.equal(await s.files.makeDir('/tmp/m/n'), false)
  ok('files.makeDir: true, then false when it exists')

  await s.files.write('/tmp/m/n/f.txt', 'abc')
  const moved = await s.files.rename('/tmp/m/n/f.txt', '/tmp/m/g.txt')
  assert.equal(moved.path, '/tmp/m/g.txt')
  const info = await s.files.getInfo('/tmp/m/g.txt')
  assert.equal(info.type, 'file')
  assert.equal(info.size, 3)
  assert.ok(info.modifiedTime.getFullYear() >= 2024)
  assert.equal(await s.files.exists('/tmp/m/n/f.txt'), false)
  ok('files.rename and files.getInfo')

  // watchDir: events arrive as they happen (waited for, with a deadline).
  await s.files.makeDir('/tmp/w')
  const seen = []
  const isNew = (e) => e.name === 'new.txt' && e.type === 'create'
  let arrived
  const created = new Promise((resolve) => {
    arrived = resolve
  })
  const handle = await s.files.watchDir('/tmp/w', (e) => {
    seen.push(e)
    if (isNew(e)) arrived()
  })
  await s.files.write('/tmp/w/new.txt', 'x')
  let timer
  await Promise.race([created, new Promise((resolve) => (timer = setTimeout(resolve, 30_000)))])
  clearTimeout(timer)
  await handle.stop()
  assert.ok(seen.some(isNew), JSON.stringify(seen))
  ok('files.watchDir reports a created file by its name')

  await s.files.remove('/tmp/m')
  assert.equal(await s.files.exists('/tmp/m'), false)
  ok('files.remove of a tree')

  await assert.rejects(s.files.read('/tmp/none'), FileNotFoundError)
  ok('files.read of a missing file: FileNotFoundError')

  const bg = await s.commands.run('sleep 300', { background: true })
  const procs = await s.commands.list()
  assert.ok(procs.some((p) => p.pid === bg.pid && p.args.join(' ').includes('sleep 300')))
  assert.equal(await s.commands.kill(bg.pid), true)
  const ended = await bg.wait().catch((e) => e)
  assert.equal(ended.exitCode, 137)
  assert.ok(!(await s.commands.list()).some((p) => p.pid === bg.pid))
  ok('a background command: listed by pid, killed')

  const left = await s.commands.run('sleep 300', { background: true })
  await left.disconnect()
  assert.ok((await s.commands.list()).some((p) => p.pid === left.pid))
  assert.equal(await s.commands.kill(left.pid), true)
  ok('a background command the caller disconnected from runs on (as in envd), then is killed')

  assert.equal((await s.commands.run('cat; echo done')).stdout, 'done\n')
  ok('a command\'s stdin is closed (stdin: false)')

  const cat = await s.commands.run('cat', { background: true, stdin: true })
  await s.commands.sendStdin(cat.pid, 'hello stdin\n')
  await s.commands.closeStdin(cat.pid)
  assert.equal((await cat.wait()).stdout, 'hello stdin\n')
  ok('commands: stdin true, sendStdin, closeStdin')

  let screen = ''
  const decoder = new TextDecoder()
  const term = await s.pty.create({ cols: 80, rows: 24, onData: (d) => (screen += decoder.decode(d)) })
  await s.pty.resize(term.pid, { cols: 100, rows: 30 })
  await s.pty.sendInput(term.pid, new TextEncoder().encode('stty size; exit 0\n'))
  await term.wait()
  assert.match(screen, /30 100/)
  ok('pty.create, resize, sendInput; output as pty data')

  const big = 'x'.repeat(20 * 1024 * 1024) + 'end'
  await s.files.write('/tmp/big', big)
  assert.equal((await s.files.read('/tmp/big')).length, big.length)
  assert.equal((await s.commands.run('stat -c %s /tmp/big')).stdout, `${big.length}\n`)
  ok('a 20 MiB file written and read back')

  assert.equal((await s.commands.run('echo $FOO $FROM_CREATE', { envs: { FOO: 'bar' } })).stdout, 'bar yes\n')
  assert.equal((await s.commands.run('pwd', { cwd: '/tmp' })).stdout, '/tmp\n')
  assert.equal((await s.commands.run('id -u', { user: 'root' })).stdout, '0\n')
  ok('commands.run with envs (and the sandbox\'s), cwd, user root')

  // Files as root: relative paths below /root, root's files, a 0600 file
  // the sandbox user cannot read.
  await s.files.write('r.txt', 'as root', { user: 'root' })
  await s.commands.run('chmod 600 /root/r.txt', { user: 'root' })
  assert.equal(await s.files.read('/root/r.txt', { user: 'root' }), 'as root')
  const rinfo = await s.files.getInfo('r.txt', { user: 'root' })
  assert.equal(rinfo.path, '/root/r.txt')
  assert.equal(rinfo.owner, 'root')
  await assert.rejects(s.files.read('/root/r.txt'))
  assert.ok((await s.files.list('/root', { user: 'root' })).some((e) => e.name === 'r.txt'))
  ok('files as root: written, read, listed and stat\'d under /root; refused to the sandbox user')

  // As envd: a file's missing parents are made for E2B's user even where
  // it may not make them (in /), owned by it; a file it may not write is
  // still refused.
  await s.files.write('/e2bnew/sub/f.txt', 'made')
  assert.equal(await s.files.read('/e2bnew/sub/f.txt'), 'made')
  assert.equal((await s.files.getInfo('/e2bnew')).owner, 'user')
  assert.equal((await s.files.getInfo('/e2bnew/sub/f.txt')).owner, 'user')
  await assert.rejects(s.files.write('/etc/hostname', 'x'))
  await assert.rejects(s.files.write('/root/nope/f.txt', 'x'))
  ok('a file\'s missing parents are made for the user (as envd), owned by it; other refusals stay')

  assert.equal(await s.pause(), true)
  assert.equal(await s.pause(), false)
  assert.equal((await s.getInfo()).state, 'paused')
  const back = await Sandbox.connect(s.sandboxId)
  assert.equal((await s.getInfo()).state, 'running')
  assert.equal((await back.commands.run('echo back')).stdout, 'back\n')
  ok('pause (twice: false), then Sandbox.connect resumes it')

  const before = (await s.getInfo()).endAt.getTime()
  await s.setTimeout(600_000)
  const after = (await s.getInfo()).endAt.getTime()
  assert.ok(after > before + 400_000, `endAt ${before} -> ${after}`)
  ok('setTimeout moves the end later')
  await s.setTimeout(60_000)
  const sooner = (await s.getInfo()).endAt.getTime()
  assert.ok(sooner < before, `endAt ${before} -> ${sooner}`)
  await s.setTimeout(600_000)
  assert.ok((await s.getInfo()).endAt.getTime() > sooner)
  ok('setTimeout to an earlier end moves it earlier (and back later)')

  await assert.rejects(
    Sandbox.create({ network: { allowOut: ['5.5.5.10'], denyOut: ['5.5.5.0/24'] } }),
    /allowOut cannot reopen part of denyOut/
  )
  await assert.rejects(
    Sandbox.create({ network: { maskRequestHost: 'x.example' } }),
    /network.maskRequestHost: not served/
  )
  await assert.rejects(Sandbox.create({ lifecycle: { onTimeout: { action: 'pause', keepMemory: false } } }),
                       /autoPauseMemory: false .* is not served/)
  ok('what is not served yet is refused, naming it')

  // File metadata: the file's user.e2b.* xattrs, the key lower-cased.
  assert.deepEqual((await s.files.write('/tmp/m.txt', 'x', { metadata: { a: 'b', Up: 'c' } })).metadata, { a: 'b', up: 'c' })
  assert.deepEqual((await s.files.getInfo('/tmp/m.txt')).metadata, { a: 'b', up: 'c' })
  assert.equal((await s.commands.run('getfattr --only-values -n user.e2b.a /tmp/m.txt || ' +
    'python3 -c "import os; print(os.getxattr(\'/tmp/m.txt\', \'user.e2b.a\').decode(), end=\'\')"')).stdout, 'b')
  ok('file metadata: the user.e2b.* extended attributes of the file')

  // Snapshot names (sandbox.snapshot tags): listed by name, and a template.
  await s.files.write('/home/user/named.txt', 'in the named snapshot')
  const named = await Sandbox.createSnapshot(s.sandboxId, { name: 'more-named' })
  try {
    assert.deepEqual(named.names, ['more-named'])
    const byName = await Sandbox.listSnapshots({ name: 'more-named' }).nextItems()
    assert.deepEqual(byName.map((x) => x.snapshotId), [named.snapshotId])
    assert.equal((await Sandbox.listSnapshots({ name: 'more-named-not' }).nextItems()).length, 0)
    const fromName = await Sandbox.create('more-named')
    try {
      assert.equal(await fromName.files.read('/home/user/named.txt'), 'in the named snapshot')
    } finally {
      await fromName.kill()
    }
    ok('a named snapshot: its names, listSnapshots by name, and Sandbox.create(name) from it')
  } finally {
    await Sandbox.deleteSnapshot(named.snapshotId)
  }

  // E2B's user `user`: home /home/user, where relative paths and a
  // process without cwd go.
  assert.equal((await s.commands.run('pwd; echo $HOME; getent passwd user | cut -d: -f6')).stdout,
               '/home/user\n/home/user\n/home/user\n')
  await s.files.write('rel.txt', 'relative')
  assert.equal(await s.files.read('/home/user/rel.txt'), 'relative')
  assert.equal((await s.files.getInfo('rel.txt')).owner, 'user')
  ok('the base template has the user `user` with home /home/user, where relative paths resolve')

  // E2B's host names PORT-ID.DOMAIN (wildcard DNS, no E2B_SANDBOX_URL):
  // envd's port 49983 routes to that sandbox's envd (its token still
  // needed); another port is the sandbox's own server on it (getHost()).
  const byHost = (port, token, id = s.sandboxId) => new Promise((resolve, reject) => {
    const u = new URL(process.env.E2B_SANDBOX_URL)
    const req = http.request({
      host: u.hostname, port: u.port, path: '/health', method: 'GET',
      headers: { Host: `${port}-${id}.e2b.test`, ...(token ? { 'X-Access-Token': token } : {}) },
    }, (res) => { let b = ''; res.on('data', (d) => { b += d }); res.on('end', () => resolve([res.statusCode, b])) })
    req.on('error', reject)
    req.end()
  })
  assert.equal((await byHost(49983, s.envdAccessToken))[0], 204)
  ok('the host name 49983-ID.DOMAIN routes to envd')

  // Bytes straight to the gateway's plain listener, all that comes back.
  const raw = (bytes, until) => new Promise((resolve, reject) => {
    const u = new URL(process.env.E2B_SANDBOX_URL)
    const sock = net.connect(Number(u.port), u.hostname)
    let got = ''
    sock.on('data', (d) => {
      got += d
      if (until && until(got)) { sock.destroy(); resolve(got) }
    })
    sock.on('end', () => resolve(got))
    sock.on('error', reject)
    // A bound on a test that would hang, not a synchronisation.
    sock.setTimeout(20_000, () => { sock.destroy(); resolve(got) })
    sock.write(bytes)
  })
  // Polls (a deadline, not a sleep) until a server started in a sandbox answers.
  const until = async (what, f) => {
    for (const end = Date.now() + 20_000; ; await new Promise((r) => setTimeout(r, 200))) {
      const v = await f()
      if (v) return v
      if (Date.now() > end) throw new Error('not ready: ' + what)
    }
  }
  await s.files.write('/tmp/www/who.txt', 'public one')
  await s.commands.run('cd /tmp/www && python3 -m http.server 8000', { background: true })
  const pub = `https://${s.getHost(8000)}`
  assert.match(pub, /^https:\/\/8000-sbx-[0-9a-z-]+\.e2b\.test:49984$/)
  const first = await until('http.server', async () => {
    const r = await fetch(pub + '/who.txt')
    return r.status === 200 ? r : null
  })
  assert.equal(await first.text(), 'public one')
  ok('getHost(8000): https://8000-ID.DOMAIN reaches the sandbox\'s server on port 8000 (public by default)')

  const closed = await fetch(`https://${s.getHost(8001)}/`)
  assert.equal(closed.status, 502)
  assert.deepEqual(await closed.json(),
                   { sandboxId: s.sandboxId, message: 'The sandbox is running but port is not open', port: 8001, code: 502 })
  ok('a port nothing listens on: 502, E2B\'s "port is not open"')
  // Probing: each closed port is taken out of the sandbox's ports again,
  // so 20 of them (more than sandboxd's 15) never fill the list.
  for (let port = 9001; port <= 9020; port++) {
    const r = await fetch(`https://${s.getHost(port)}/`)
    assert.equal(r.status, 502)
    assert.equal((await r.json()).message, 'The sandbox is running but port is not open', `port ${port}`)
  }
  assert.equal((await fetch(pub + '/who.txt')).status, 200)
  ok('probing 20 closed ports leaves the sandbox\'s ports as they were')

  // An upgrade: every byte after the head goes to the sandbox's port and back.
  await s.files.write('/tmp/echo.py', [
    'import socket',
    's = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)',
    's.bind(("127.0.0.1", 8002)); s.listen()',
    'while True:',
    '    c, _ = s.accept(); b = b""',
    '    while b"\\r\\n\\r\\n" not in b: b += c.recv(4096)',
    '    c.sendall(b"HTTP/1.1 101 Switching Protocols\\r\\nUpgrade: echo\\r\\nConnection: Upgrade\\r\\n\\r\\n")',
    '    rest = b.split(b"\\r\\n\\r\\n", 1)[1]',
    '    c.sendall(rest.upper())',
    '    while True:',
    '        d = c.recv(4096)',
    '        if not d: break',
    '        c.sendall(d.upper())',
    '    c.close()',
  ].join('\n'))
  await s.commands.run('python3 /tmp/echo.py', { background: true })
  const upgrade = `GET /ws HTTP/1.1\r\nHost: 8002-${s.sandboxId}.e2b.test\r\nConnection: Upgrade\r\nUpgrade: echo\r\n\r\nhello`
  const echoed = await until('echo.py', async () => {
    const got = await raw(upgrade, (g) => g.includes('HELLO') || g.includes('"code":502'))
    return got.includes('HELLO') ? got : null
  })
  assert.match(echoed, /^HTTP\/1.1 101 Switching Protocols\r\n/)
  ok('an Upgrade request: the bytes after the head reach the port and come back')

  // allowPublicTraffic false: the port needs the sandbox's traffic token.
  const priv = await Sandbox.create({ network: { allowPublicTraffic: false } })
  try {
    assert.ok(priv.trafficAccessToken)
    await priv.files.write('/tmp/www/who.txt', 'private one')
    await priv.commands.run('cd /tmp/www && python3 -m http.server 8000', { background: true })
    const url = `https://${priv.getHost(8000)}/who.txt`
    const anon = await fetch(url)
    assert.equal(anon.status, 403)
    assert.match((await anon.json()).message, /e2b-traffic-access-token: missing/)
    const other = await fetch(url, { headers: { 'e2b-traffic-access-token': s.trafficAccessToken } })
    assert.equal(other.status, 403)
    const envdTok = await fetch(url, { headers: { 'e2b-traffic-access-token': priv.envdAccessToken } })
    assert.equal(envdTok.status, 403)
    const withTok = await until('private http.server', async () => {
      const r = await fetch(url, { headers: { 'e2b-traffic-access-token': priv.trafficAccessToken } })
      return r.status === 200 ? r : null
    })
    assert.equal(await withTok.text(), 'private one')
    ok('allowPublicTraffic false: 403 without its traffic token (or with another sandbox\'s, or its envd token); 200 with it')

    // Host tricks: a second request on a relayed connection naming the
    // private sandbox still goes to the first one's port (the connection
    // is that port's: echo.py answers it in capitals); a Host of another
    // domain, in capitals or with a bad port is the control API's, which
    // wants a key.
    const privUp = `HOST: 8000-${priv.sandboxId.toUpperCase()}.E2B.TEST`
    const two = await raw(`GET / HTTP/1.1\r\nHost: 8002-${s.sandboxId}.e2b.test\r\n\r\n` +
                          `GET /who.txt HTTP/1.1\r\nHost: 8000-${priv.sandboxId}.e2b.test\r\n\r\n`,
                          (g) => g.includes(privUp))
    assert.match(two, /^HTTP\/1.1 101 /)
    assert.ok(two.includes('GET /WHO.TXT HTTP/1.1\r\n' + privUp), two)
    assert.ok(!two.includes('private one'))
    for (const h of [`8000-${priv.sandboxId}.evil.test`, `8000-${priv.sandboxId.toUpperCase()}.e2b.test`,
                     `08000-${priv.sandboxId}.e2b.test`, `70000-${priv.sandboxId}.e2b.test`,
                     `8000-${priv.sandboxId}.e2b.test:1`]) {
      const got = await raw(`GET /who.txt HTTP/1.1\r\nHost: ${h}\r\nConnection: close\r\n\r\n`)
      assert.match(got, /^HTTP\/1.1 401 /, h)
      assert.ok(!got.includes('private one'), h)
    }
    // Two Hosts, or an absolute URL naming another sandbox: 400, never relayed.
    const dup = await raw(`GET /who.txt HTTP/1.1\r\nHost: 8000-${s.sandboxId}.e2b.test\r\n` +
                          `Host: 8000-${priv.sandboxId}.e2b.test\r\nConnection: close\r\n\r\n`)
    assert.match(dup, /^HTTP\/1.1 400 /)
    const abs = await raw(`GET http://8000-${priv.sandboxId}.e2b.test/who.txt HTTP/1.1\r\n` +
                          `Host: 8000-${s.sandboxId}.e2b.test\r\nConnection: close\r\n\r\n`)
    assert.match(abs, /^HTTP\/1.1 400 /)
    // Request smuggling: a head the gateway cannot read one way only is
    // refused, not relayed.
    const smuggle = await raw(`POST / HTTP/1.1\r\nHost: 8000-${s.sandboxId}.e2b.test\r\nContent-Length: 4\r\n` +
                              `Transfer-Encoding: chunked\r\n\r\n0\r\n\r\nGET /who.txt HTTP/1.1\r\nHost: 8000-` +
                              `${priv.sandboxId}.e2b.test\r\n\r\n`)
    assert.match(smuggle, /^HTTP\/1.1 400 /)
    assert.ok(!smuggle.includes('private one'))
    ok('host-name tricks and smuggling reach no other sandbox\'s port')
  } finally {
    await priv.kill()
  }
  const gone = await fetch(`https://${priv.getHost(8000)}/`)
  assert.equal(gone.status, 502)
  assert.equal((await gone.json()).message, 'The sandbox was not found')
  ok('a killed sandbox\'s port: 502 "The sandbox was not found"')

  // Connect: a running process's output from the moment of connecting,
  // then its end.
  const reader = await s.commands.run('read l; echo "got $l"', { background: true, stdin: true })
  let relayed = ''
  const attached = await s.commands.connect(reader.pid, { onStdout: (d) => { relayed += d } })
  await s.commands.sendStdin(reader.pid, 'line\n')
  const done = await attached.wait()
  assert.equal(done.exitCode, 0)
  assert.equal(relayed, 'got line\n')
  ok('commands.connect follows a running process to its end')

  // api.public.test and other.public.test are hosts of the test world's
  // fake internet: what a sandbox resolves shows what its policy opens.
  const lookup = (name) => `getent hosts ${name} >/dev/null && echo resolved || echo no-dns`
  const resolves = async (sbx, name) => (await sbx.commands.run(lookup(name))).stdout === 'resolved\n'
  const open = await Sandbox.create({ allowInternetAccess: true })
  const denied = await Sandbox.create({ allowInternetAccess: false })
  const only = await Sandbox.create({ network: { allowOut: ['api.public.test'], denyOut: [ALL_TRAFFIC] } })
  const but = await Sandbox.create({ network: { denyOut: ['5.5.5.11'] } })
  try {
    // Five sandboxes of this key now: listed two a page, none twice.
    const pager = Sandbox.list({ limit: 2 })
    const ids = []
    while (pager.hasNext) ids.push(...(await pager.nextItems()).map((x) => x.sandboxId))
    assert.equal(ids.length, 5)
    assert.deepEqual(new Set(ids), new Set([s, open, denied, only, but].map((x) => x.sandboxId)))
    ok('Sandbox.list pages with limit and nextToken')

    assert.equal(await resolves(open, 'api.public.test'), true)
    assert.equal(await resolves(denied, 'api.public.test'), false)
    ok('allowInternetAccess false: deny-all (true: allow-all)')
    assert.equal(await resolves(only, 'api.public.test'), true)
    assert.equal(await resolves(only, 'other.public.test'), false)
    ok('allowOut a domain with denyOut allTraffic: only that domain')
    assert.equal(await resolves(but, 'api.public.test'), true)
    assert.equal(await resolves(but, 'other.public.test'), false)
    ok('denyOut an address: everything but it')
    await but.updateNetwork({ allowOut: ['other.public.test'], denyOut: [ALL_TRAFFIC] })
    assert.equal(await resolves(but, 'api.public.test'), false)
    assert.equal(await resolves(but, 'other.public.test'), true)
    await but.updateNetwork({})
    assert.equal(await resolves(but, 'api.public.test'), true)
    ok('updateNetwork replaces the egress config of a running sandbox ({} opens it all)')

    // network.rules: a header transform, applied by sandboxd's egress
    // proxy (the world's api.public.test echoes the headers it got); the
    // sandbox itself never sees the value.
    const rules = { 'api.public.test': [{ transform: { headers: { 'X-From-Rules': 'r-1' } } }] }
    const ruled = await Sandbox.create({ network: { rules } })
    try {
      const got = async (sbx) => {
        const r = await sbx.commands.run('curl -sS -m 10 https://api.public.test/e2b-rules')
        return Object.fromEntries(JSON.parse(r.stdout).headers.map(([k, v]) => [k.toLowerCase(), v]))
      }
      assert.equal((await got(ruled))['x-from-rules'], 'r-1')
      assert.equal((await ruled.commands.run('env; cat /proc/1/environ 2>/dev/null; true')).stdout.includes('r-1'), false)
      await ruled.updateNetwork({ rules: { 'api.public.test': [{ transform: { headers: { 'X-From-Rules': 'r-2' } } }] } })
      assert.equal((await got(ruled))['x-from-rules'], 'r-2')
      ok('network.rules header transforms reach the host (and updateNetwork replaces them)')
    } finally {
      await ruled.kill()
    }
    await assert.rejects(
      Sandbox.create({ network: { denyOut: [ALL_TRAFFIC], allowOut: ['other.public.test'], rules } }),
      /network.rules.api.public.test: the host is not allowed/
    )
    ok('a rule never opens a host')
  } finally {
    for (const sbx of [open, denied, only, but]) await sbx.kill()
  }
} finally {
  await s.kill()
}
