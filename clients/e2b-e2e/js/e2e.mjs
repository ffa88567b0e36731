// The JavaScript E2B SDKs, as published (snapshots and forks included), against `cordon serve` (E2B_API_URL, E2B_SANDBOX_URL
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

  // PTYs: output through onData, typed input, resize seen by `stty size`, connect, kill.
  let term = ''
  const dec = new TextDecoder()
  const until = async (what) => {
    for (let i = 0; i < 400 && !term.includes(what); i++) await new Promise((r) => setTimeout(r, 50))
    assert.ok(term.includes(what), `${what} not seen on the terminal: ${term}`)
  }
  const enc = new TextEncoder()
  const pty = await sbx.pty.create({ cols: 80, rows: 24, onData: (d) => { term += dec.decode(d) }, envs: { P: 'js-pty' } })
  await sbx.pty.sendInput(pty.pid, enc.encode('echo $P; stty size\n'))
  await until('24 80')
  assert.ok(term.includes('js-pty'))
  await sbx.pty.resize(pty.pid, { cols: 132, rows: 50 })
  await sbx.pty.sendInput(pty.pid, enc.encode('stty size\n'))
  await until('50 132')
  await pty.disconnect()
  const again = await sbx.pty.connect(pty.pid, { onData: (d) => { term += dec.decode(d) } })
  await sbx.pty.sendInput(pty.pid, enc.encode('echo joined-$((6*7))\n'))
  await until('joined-42')
  assert.equal(await sbx.pty.kill(pty.pid), true)
  await assert.rejects(again.wait(), (e) => e instanceof CommandExitError && e.exitCode === -1)
  assert.ok(!(await sbx.commands.list()).some((p) => p.pid === pty.pid))

  // Files.
  await sbx.files.write('/home/user/js.txt', 'written by js')
  assert.equal(await sbx.files.read('/home/user/js.txt'), 'written by js')
  assert.equal(await sbx.files.exists('/home/user/js.txt'), true)
  const entries = await sbx.files.list('/home/user')
  assert.ok(entries.some((e) => e.name === 'js.txt'))
  // gzip both ways (the SDK's `gzip` option).
  const big = 'packed by js '.repeat(2000)
  await sbx.files.write('/home/user/gz.txt', big, { gzip: true })
  assert.equal(await sbx.files.read('/home/user/gz.txt', { gzip: true }), big)
  assert.equal((await sbx.commands.run('wc -c < gz.txt')).stdout.trim(), String(big.length))
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
  // Per-cell variables: there for that cell only.
  const withEnv = await sbx.runCode('import os; os.environ["CELL_ONLY"]', { envs: { CELL_ONLY: 'js-cell' } })
  assert.equal(withEnv.text, 'js-cell')
  assert.equal((await sbx.runCode('import os; os.environ.get("CELL_ONLY")')).text, undefined)
  const jsEnv = await sbx.runCode('process.env.CELL_ONLY', { context: ctx, envs: { CELL_ONLY: 'in-node' } })
  assert.equal(jsEnv.text, 'in-node')

  // Isolation holds through this door too.
  const leak = await sbx.commands.run(`env; cat /etc/shadow 2>&1 || true`)
  assert.ok(!leak.stdout.includes(process.env.E2B_API_KEY))
  assert.ok(!leak.stdout.includes('root:'))

  // Snapshots and forks (files only): a sandbox created from the snapshot, and each fork,
  // starts with the parent's files and sees none of its later writes.
  await sbx.files.write('/home/user/state.txt', 'before')
  const snap = await sbx.createSnapshot({ name: `${tag}-snap` })
  const forks = await sbx.fork({ count: 2 })
  await sbx.files.write('/home/user/state.txt', 'after')
  const fromSnap = await Base.create(snap.snapshotId, { timeoutMs: 60_000 })
  try {
    assert.equal(await fromSnap.files.read('/home/user/state.txt'), 'before')
    assert.equal(forks.length, 2)
    for (const f of forks) {
      assert.ok(!(f instanceof Error), String(f))
      assert.equal(await f.files.read('/home/user/state.txt'), 'before')
    }
    assert.ok((await sbx.listSnapshots().nextItems()).some((s) => s.snapshotId === snap.snapshotId))
  } finally {
    await fromSnap.kill()
    for (const f of forks) if (!(f instanceof Error)) await f.kill()
  }
  assert.equal(await Base.deleteSnapshot(snap.snapshotId), true)
  assert.equal(await Base.deleteSnapshot(snap.snapshotId), false)
} finally {
  await sbx.kill()
}
assert.equal(await Base.kill(sbx.sandboxId), false)

// No internet access: the info says so (this server gives E2B sandboxes none by default).
const offline = await Base.create({ timeoutMs: 60_000, allowInternetAccess: false })
try {
  assert.equal((await offline.getInfo()).allowInternetAccess, false)
} finally {
  await offline.kill()
}
console.log('e2b js sdk: ok')
