// The JavaScript E2B SDKs, as published, against `cordon serve` (E2B_API_URL, E2B_SANDBOX_URL
// and E2B_API_KEY point them at it). Run by test_js.py, which starts the server.
import assert from 'node:assert/strict'
import { Sandbox as Base, CommandExitError } from 'e2b'
import { Sandbox } from '@e2b/code-interpreter'

const tag = `js-${Date.now()}`
const sbx = await Sandbox.create({ timeoutMs: 120_000, metadata: { tag } })
try {
  // Control plane.
  const info = await sbx.getInfo()
  assert.equal(info.sandboxId, sbx.sandboxId)
  assert.deepEqual(info.metadata, { tag })
  const listed = await Base.list({ query: { metadata: { tag } } }).nextItems()
  assert.deepEqual(listed.map((s) => s.sandboxId), [sbx.sandboxId])
  await sbx.setTimeout(60_000)

  // Commands.
  const r = await sbx.commands.run('echo $X; pwd', { envs: { X: 'from-js' } })
  assert.equal(r.stdout, 'from-js\n/home/user\n')
  await assert.rejects(sbx.commands.run('exit 4'), (e) => e instanceof CommandExitError && e.exitCode === 4)
  const bg = await sbx.commands.run('cat', { background: true, stdin: true })
  await sbx.commands.sendStdin(bg.pid, 'piped\n')
  await sbx.commands.closeStdin(bg.pid)
  assert.equal((await bg.wait()).stdout, 'piped\n')

  // Files.
  await sbx.files.write('/home/user/js.txt', 'written by js')
  assert.equal(await sbx.files.read('/home/user/js.txt'), 'written by js')
  assert.equal(await sbx.files.exists('/home/user/js.txt'), true)
  const entries = await sbx.files.list('/home/user')
  assert.ok(entries.some((e) => e.name === 'js.txt'))
  await sbx.files.remove('/home/user/js.txt')
  assert.equal(await sbx.files.exists('/home/user/js.txt'), false)

  // The code interpreter.
  const ex = await sbx.runCode('x = 20\nprint("hi")\nx + 22')
  assert.equal(ex.text, '42')
  assert.deepEqual(ex.logs.stdout, ['hi\n'])
  const err = await sbx.runCode('raise ValueError("boom")')
  assert.equal(err.error?.name, 'ValueError')
  const ctx = await sbx.createCodeContext({ language: 'javascript' })
  assert.equal((await sbx.runCode('1 + 2', { context: ctx })).text, '3')

  // Isolation holds through this door too.
  const leak = await sbx.commands.run(`env; cat /etc/shadow 2>&1 || true`)
  assert.ok(!leak.stdout.includes(process.env.E2B_API_KEY))
  assert.ok(!leak.stdout.includes('root:'))
} finally {
  await sbx.kill()
}
assert.equal(await Base.kill(sbx.sandboxId), false)
console.log('e2b js sdk: ok')
