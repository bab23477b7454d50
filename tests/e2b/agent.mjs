// An E2B program written from E2B's documentation (e2b.dev/docs: sandbox
// lifecycle, commands, filesystem), run unchanged against sandboxd-e2b.
// Its environment names the server: E2B_API_URL, E2B_SANDBOX_URL,
// E2B_API_KEY, and nothing else about it. Prints one line per check;
// exits non-zero on the first failure.
import { Sandbox } from 'e2b'
import assert from 'node:assert/strict'

function ok(what) {
  console.log('ok - ' + what)
}

const sandbox = await Sandbox.create({ metadata: { purpose: 'agent' } })
ok('Sandbox.create: ' + sandbox.sandboxId)
try {
  let streamed = ''
  const result = await sandbox.commands.run('echo hi', {
    onStdout: (data) => {
      streamed += data
    },
  })
  assert.equal(result.exitCode, 0)
  assert.equal(result.stdout, 'hi\n')
  assert.equal(streamed, 'hi\n')
  ok('commands.run echo hi, stdout streamed through onStdout')

  const failed = await sandbox.commands.run('echo oops >&2; exit 3').catch((e) => e)
  assert.equal(failed.exitCode, 3)
  assert.equal(failed.stderr, 'oops\n')
  ok('commands.run of a failing command: exit code and stderr')

  const dir = '/tmp/e2b-agent'
  await sandbox.files.write(dir + '/hello.txt', 'hello from e2b\n')
  const text = await sandbox.files.read(dir + '/hello.txt')
  assert.equal(text, 'hello from e2b\n')
  ok('files.write then files.read')

  const entries = await sandbox.files.list(dir)
  assert.deepEqual(entries.map((e) => e.name), ['hello.txt'])
  assert.equal(entries[0].type, 'file')
  ok('files.list')

  const cat = await sandbox.commands.run('cat ' + dir + '/hello.txt')
  assert.equal(cat.stdout, 'hello from e2b\n')
  ok('a command sees the written file')

  const info = await sandbox.getInfo()
  assert.equal(info.sandboxId, sandbox.sandboxId)
  assert.equal(info.metadata.purpose, 'agent')
  ok('getInfo: metadata kept')

  const paginator = Sandbox.list()
  const listed = await paginator.nextItems()
  assert.ok(listed.some((s) => s.sandboxId === sandbox.sandboxId))
  ok('Sandbox.list shows it')
} finally {
  await sandbox.kill()
  ok('sandbox.kill')
}
const after = await Sandbox.list().nextItems()
assert.ok(!after.some((s) => s.sandboxId === sandbox.sandboxId))
ok('gone after kill')
