/**
 * What a hostile target writes reaches the implementer's terminal and the
 * reports only cleaned and bounded: control characters (ANSI escapes, OSC
 * title sequences, BEL) are escaped, each string the target wrote is cut to
 * KIT_EVIDENCE_MAX_CHARS and each check's message to KIT_MESSAGE_MAX_CHARS.
 * And the kit holds at most KIT_MAX_EVENT_BYTES_PER_READ of one read of a
 * run's events, however many pages of genuine events the target serves.
 */
import { readFile } from 'node:fs/promises'
import { join } from 'node:path'
import { afterAll, describe, expect, it } from 'vitest'
import { CONTROL_PROTOCOL } from '../src/constants.ts'
import { KIT_EVIDENCE_MAX_CHARS, KIT_MAX_EVENT_BYTES_PER_READ, KIT_MESSAGE_MAX_CHARS } from '../src/conformance/constants.ts'
import { CheckFailure, Kit, type KitNodes } from '../src/conformance/kit.ts'
import type { ConformanceReport } from '../src/conformance/runner.ts'
import { createMeshNode, type MeshNode } from '../src/node.ts'
import { encodeFrame } from '../src/wire/framing.ts'
import { cli, TempDirs } from './cli-helpers.ts'
import { startTarget, type Target } from './fixtures/broken-targets.ts'

const CONTROL = /[\u0000-\u001f\u007f-\u009f]/

describe('a hostile target\'s text in the kit\'s output', () => {
  const dirs = new TempDirs()
  let t: Target | undefined
  afterAll(async () => {
    await t?.node.stop()
    await dirs.cleanup()
  })

  it('a 200 KB error message full of escape sequences reaches terminal and reports cleaned and cut', async () => {
    t = await startTarget()
    const evil = '\x1b]0;pwned\x07\x1b[2J\x1b[31mALL MUST PASSED\x1b[0m\u202e' + 'x'.repeat(200_000)
    // every control request is answered with the same error frame
    await t.node.host.unhandle(CONTROL_PROTOCOL)
    await t.node.host.handle(CONTROL_PROTOCOL, (stream) => {
      stream.addEventListener('message', () => {
        try {
          stream.send(encodeFrame({ id: 1, ok: false, error: { code: 'RUN_NOT_FOUND', message: evil } }))
        } catch (err) {
          stream.abort(err as Error)
        }
      }, { once: true })
    })
    const out = await dirs.make('aap-conformance-')
    const json = join(out, 'c.json')
    const md = join(out, 'c.md')
    const res = await cli(['conformance', t.address, '--json', json, '--markdown', md])
    expect(res.code, res.stderr.slice(0, 2000)).toBe(1)
    const r = JSON.parse(await readFile(json, 'utf8')) as ConformanceReport
    const quoted = r.checks.filter(c => c.message?.includes('ALL MUST PASSED') === true)
    expect(quoted.length).toBeGreaterThan(3)
    for (const c of r.checks) {
      expect((c.message ?? '').length, c.id).toBeLessThanOrEqual(KIT_MESSAGE_MAX_CHARS)
      expect(CONTROL.test(c.message ?? ''), c.id).toBe(false)
      for (const e of [...c.evidence.frames, ...c.evidence.notes, ...c.evidence.events, ...c.evidence.runs]) {
        expect(e.length, c.id).toBeLessThanOrEqual(KIT_EVIDENCE_MAX_CHARS)
        expect(CONTROL.test(e), c.id).toBe(false)
      }
    }
    // the escapes are shown, not obeyed; the target's message is cut to the evidence bound in every message
    expect(quoted[0]!.message).toContain('\\u{1b}]0;pwned\\u{7}')
    expect(quoted[0]!.message).toContain('\\u{202e}')
    expect(Math.max(...r.checks.map(c => c.message?.length ?? 0))).toBeLessThan(KIT_EVIDENCE_MAX_CHARS + 400)
    for (const text of [res.stdout, res.stderr, await readFile(md, 'utf8')]) {
      expect(text.includes('\x1b')).toBe(false)
      expect(text.includes('\x07')).toBe(false)
      expect(text.includes('\u202e')).toBe(false)
    }
    expect((await readFile(md, 'utf8')).length).toBeLessThan(200_000)
    expect(res.stderr.length).toBeLessThan(100_000)
  }, 120_000)
})

describe('the kit\'s memory for one read of a run\'s events', () => {
  const nodes: MeshNode[] = []
  afterAll(async () => { await Promise.all(nodes.map(async n => n.stop())) })

  it(`a run whose genuine events exceed KIT_MAX_EVENT_BYTES_PER_READ (${KIT_MAX_EVENT_BYTES_PER_READ}) fails the read, naming the bound`, async () => {
    const target = await createMeshNode({ listen: ['/ip4/127.0.0.1/tcp/0'] })
    const auditor = await createMeshNode({ listen: ['/ip4/127.0.0.1/tcp/0'], followDelegations: false })
    nodes.push(target, auditor)
    await target.start()
    await auditor.start()
    const cap = { capability_id: 'cap:chatty', version: '1.0.0' }
    const chunk = 'x'.repeat(31_000)
    const events = Math.ceil(KIT_MAX_EVENT_BYTES_PER_READ / chunk.length) + 10
    target.runs.handle(cap, async (ctx) => {
      for (let i = 0; i < events; i++) await ctx.progress({ i, chunk })
      return { done: true }
    })
    await target.publishCard({ name: 'chatty', capabilities: [cap], tags: [] })
    expect(await auditor.join(target.addresses)).toBe(1)
    const run = await auditor.delegate({ to_agent: target.agentId, task_id: 'chatty-1', capability: cap, input: {} })
    const done = Promise.withResolvers<void>()
    const off = target.runs.onEvent((e) => { if (e.run_id === run.run_id && e.type === 'run.completed') done.resolve() })
    if ((await target.getRun(run.run_id)).state === 'completed') done.resolve()
    await done.promise
    off()
    // the kit's bystander reads it, as every check does
    const kit = new Kit({ bystander: auditor } as unknown as KitNodes, target.agentId)
    const read = kit.scope().readEvents(run.run_id)
    await expect(read).rejects.toThrow(CheckFailure)
    await expect(read).rejects.toThrow(/more than \d+ bytes of events \(KIT_MAX_EVENT_BYTES_PER_READ\)/)
    expect(kit.events.has(run.run_id)).toBe(false)
  }, 120_000)
})
