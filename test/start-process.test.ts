/**
 * `aap-mesh start` as real child processes on TCP loopback: one publishes a
 * capability, a second joins through the first's printed address and
 * discovers it. Each process gets its own temporary data directory.
 */
import { spawn, type ChildProcess } from 'node:child_process'
import { mkdtemp, readdir, rm, stat, writeFile } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { createInterface } from 'node:readline'
import { fileURLToPath } from 'node:url'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import pkg from '../package.json' with { type: 'json' }
import { verifyCard, type AgentCard } from '../src/card/card.ts'
import { KEY_FILE } from '../src/identity/identity.ts'
import { until } from './helpers.ts'

const root = fileURLToPath(new URL('..', import.meta.url))
const MAIN = join(root, 'src/cli/main.ts')
const BIN = join(root, 'bin/aap-mesh.mjs')
const LOOPBACK = ['--listen', '/ip4/127.0.0.1/tcp/0']

type Line = Record<string, unknown>

/** A child process whose stdout JSON lines can be awaited by event name. */
class Cli {
  readonly proc: ChildProcess
  /** stdout lines that are JSON objects (the events). */
  readonly lines: Line[] = []
  /** Every stdout line as printed. */
  readonly text: string[] = []
  stderr = ''
  readonly exited: Promise<{ code: number | null, signal: NodeJS.Signals | null }>
  private readonly waiters = new Set<() => void>()

  constructor (script: string, args: string[], env: NodeJS.ProcessEnv = process.env) {
    this.proc = spawn(process.execPath, [script, ...args], { cwd: root, stdio: ['ignore', 'pipe', 'pipe'], env })
    this.proc.stderr?.setEncoding('utf8')
    this.proc.stderr?.on('data', (chunk: string) => { this.stderr += chunk })
    createInterface({ input: this.proc.stdout! }).on('line', (text) => {
      this.text.push(text)
      if (text.startsWith('{')) this.lines.push(JSON.parse(text) as Line)
      for (const w of this.waiters) w()
    })
    this.exited = new Promise(resolve => {
      this.proc.on('exit', (code, signal) => {
        for (const w of this.waiters) w()
        resolve({ code, signal })
      })
    })
  }

  get running (): boolean {
    return this.proc.exitCode === null && this.proc.signalCode === null
  }

  /** The first stdout line with this event, now or later; rejects if the process exits first. */
  async next (event: string): Promise<Line> {
    return new Promise((resolve, reject) => {
      const check = (): void => {
        const line = this.lines.find(l => l.event === event)
        if (line !== undefined) {
          this.waiters.delete(check)
          resolve(line)
        } else if (!this.running) {
          this.waiters.delete(check)
          reject(new Error(`process exited (${this.proc.exitCode ?? this.proc.signalCode}) before "${event}"; stderr:\n${this.stderr}`))
        }
      }
      this.waiters.add(check)
      check()
    })
  }
}

describe('aap-mesh start, as separate processes', () => {
  const children: Cli[] = []
  const dirs: string[] = []
  function cli (args: string[], script = MAIN, env?: NodeJS.ProcessEnv): Cli {
    const c = new Cli(script, args, env)
    children.push(c)
    return c
  }
  async function tempDir (): Promise<string> {
    const d = await mkdtemp(join(tmpdir(), 'aap-start-'))
    dirs.push(d)
    return d
  }

  let dirA: string
  let dirB: string
  beforeAll(async () => {
    dirA = await tempDir()
    dirB = await tempDir()
  })
  afterAll(async () => {
    for (const c of children) if (c.running) c.proc.kill('SIGKILL')
    await Promise.all(children.map(async c => c.exited))
    await Promise.all(dirs.map(async d => rm(d, { recursive: true, force: true })))
  })

  let first: { agentId: string, card: AgentCard }

  it('a second node started with --bootstrap of the first one\'s address discovers the first one\'s capability', async () => {
    const a = cli(['start', '--data-dir', dirA, ...LOOPBACK, '--name', 'echoer', '--capability', 'cap:echo@1.0.0', '--tag', 'demo'])
    const started = await a.next('started')
    const card = await verifyCard(started.card)
    expect(card.agent_id).toBe(started.agent_id)
    expect(card.capabilities).toEqual([{ capability_id: 'cap:echo', version: '1.0.0' }])
    expect(card.tags).toEqual(['demo'])
    const addresses = started.addresses as string[]
    expect(addresses.length).toBeGreaterThan(0)
    expect(addresses[0]).toMatch(/^\/ip4\/127\.0\.0\.1\/tcp\/\d+\/p2p\//)
    first = { agentId: card.agent_id, card }
    expect((await stat(join(dirA, KEY_FILE))).mode & 0o777).toBe(0o600)

    const b = cli(['start', '--data-dir', dirB, ...LOOPBACK, '--bootstrap', addresses[0]!, '--discover', 'cap:echo@1.0.0'])
    const joined = await b.next('started')
    expect(joined.peers).toBe(1)
    expect(joined.card).toBeNull()
    const found = await b.next('discovered')
    const cards = found.cards as unknown[]
    expect(cards).toHaveLength(1)
    expect(await verifyCard(cards[0])).toEqual(card)
    expect(found.error).toBeUndefined()

    // SIGTERM: a clean stop, then exit code 0
    b.proc.kill('SIGTERM')
    await b.next('stopped')
    expect(await b.exited).toEqual({ code: 0, signal: null })
  })

  it('restarted from the same data directory, a node keeps its agent id and re-signs its card with a higher seq; SIGINT stops it', async () => {
    const a = children[0]!
    a.proc.kill('SIGINT')
    await a.next('stopped')
    expect(await a.exited).toEqual({ code: 0, signal: null })

    // no card options: the stored card is re-published as it was, with a new seq
    const again = cli(['start', '--data-dir', dirA, ...LOOPBACK])
    const started = await again.next('started')
    expect(started.agent_id).toBe(first.agentId)
    const card = await verifyCard(started.card)
    expect(card.seq).toBeGreaterThan(first.card.seq)
    expect({ ...card, seq: 0, issued_at: '', expires_at: '', signature: '' })
      .toEqual({ ...first.card, seq: 0, issued_at: '', expires_at: '', signature: '' })
    again.proc.kill('SIGINT')
    expect(await again.exited).toEqual({ code: 0, signal: null })
  })

  it('takes its card from a --card file, with flags added to it', async () => {
    const file = join(await tempDir(), 'card.json')
    await writeFile(file, JSON.stringify({
      name: 'reviewer',
      description: 'reviews code',
      capabilities: [{ capability_id: 'cap:code-review', version: '2.1.0' }],
      tags: ['review']
    }))
    const c = cli(['start', '--data-dir', await tempDir(), ...LOOPBACK, '--card', file, '--tag', 'typescript', '--capability', 'cap:lint@1.0.0'])
    const card = await verifyCard((await c.next('started')).card)
    expect(card.name).toBe('reviewer')
    expect(card.description).toBe('reviews code')
    expect(card.capabilities).toEqual([
      { capability_id: 'cap:code-review', version: '2.1.0' },
      { capability_id: 'cap:lint', version: '1.0.0' }
    ])
    expect(card.tags).toEqual(['review', 'typescript'])
    c.proc.kill('SIGTERM')
    expect((await c.exited).code).toBe(0)
  })

  it('refuses bad options with exit code 2 and says why on stderr, without starting a node', async () => {
    const badFile = join(await tempDir(), 'bad.json')
    await writeFile(badFile, JSON.stringify({ name: 'x', capability: [] }))
    const cases: Array<[string[], RegExp]> = [
      [['--capability', 'cap:echo'], /exact version/],
      [['--capability', 'not a capability@1'], /INVALID_REQUEST/],
      [['--tag', 'has space', '--name', 'x'], /tag/],
      [['--card', badFile], /unknown field "capability"/],
      [['--card', join(badFile, 'missing.json')], /cannot read card file/],
      [['--discover', 'cap x'], /INVALID_REQUEST/]
    ]
    for (const [args, why] of cases) {
      const c = cli(['start', '--data-dir', await tempDir(), ...LOOPBACK, ...args])
      expect((await c.exited).code, args.join(' ')).toBe(2)
      expect(c.stderr, args.join(' ')).toMatch(why)
      expect(c.lines).toEqual([])
    }
  })

  it('bin/aap-mesh.mjs runs the same command line', async () => {
    const c = cli(['--version'], BIN)
    expect((await c.exited).code).toBe(0)
    // 'exit' can come before the last stdout line is read
    await until(() => c.text.length > 0, 'the version line')
    expect(c.text).toEqual([pkg.version])
    expect(c.stderr).toBe('')
  })

  it('bin/aap-mesh.mjs keeps the compiled CLI in Node\'s compile cache and runs again from it', async () => {
    const cache = await mkdtemp(join(tmpdir(), 'aap-compile-cache-'))
    try {
      const env: NodeJS.ProcessEnv = { ...process.env, NODE_COMPILE_CACHE: cache }
      delete env.NODE_DISABLE_COMPILE_CACHE
      const first = cli(['--version'], BIN, env)
      expect((await first.exited).code).toBe(0)
      // Node writes the cache as the process exits: the command's TypeScript modules are in it
      const files = (await readdir(cache, { recursive: true })).filter(f => !f.endsWith('/'))
      expect(files.length).toBeGreaterThan(10)
      const second = cli(['--version'], BIN, env)
      expect((await second.exited).code).toBe(0)
      await until(() => second.text.length > 0, 'the version line')
      expect(second.text).toEqual([pkg.version])
    } finally {
      await rm(cache, { recursive: true, force: true })
    }
  })

  it('bin/aap-mesh.mjs handing over to the pinned Node passes a SIGTERM sent to it alone on to the node, which stops cleanly', async () => {
    const dir = await tempDir()
    const c = cli(['start', '--data-dir', dir, ...LOOPBACK], BIN, { ...process.env, AAP_MESH_REEXEC: '1' })
    await c.next('started')
    c.proc.kill('SIGTERM')
    await c.next('stopped')
    expect(await c.exited).toEqual({ code: 0, signal: null })
  })
})
