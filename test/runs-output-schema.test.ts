/**
 * A run's record must stay one the Run schema takes (protocols/runs.schema.json),
 * since every caller checks the runs it is answered with: a handler's output or
 * failure message that broke it made the run unreadable over the wire, and its
 * delegator's liveness probes then took the live executor for lost.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import type { MeshNode } from '../src/node.ts'
import type { Actor, RunCommand } from '../src/runs/types.ts'
import type { Run } from '../src/runlog/types.ts'
import { startMesh, stopAll, until } from './helpers.ts'
import { cutText } from '../src/util/text.ts'

const WIDE = { capability_id: 'cap:wide-output', version: '1.0.0' }
const LIST = { capability_id: 'cap:list-output', version: '1.0.0' }
const WIDE_CTX = { capability_id: 'cap:wide-complete', version: '1.0.0' }
const LONG_FAIL = { capability_id: 'cap:long-fail', version: '1.0.0' }
const SLOW = { capability_id: 'cap:slow', version: '1.0.0' }
const EMOJI_FAIL = { capability_id: 'cap:emoji-fail', version: '1.0.0' }

const wide = (): Record<string, number> => Object.fromEntries(Array.from({ length: 300 }, (_, i) => [`k${i}`, i]))

describe('a handler\'s output and failure message keep the run readable', () => {
  let nodes: MeshNode[] = []
  let A: MeshNode, B: MeshNode

  beforeAll(async () => {
    nodes = await startMesh(2)
    ;[A, B] = nodes as [MeshNode, MeshNode]
    B.runs.handle(WIDE, async () => wide())
    B.runs.handle(LIST, async () => [1, 2, 3] as unknown as Record<string, unknown>)
    B.runs.handle(WIDE_CTX, async (ctx) => {
      await ctx.complete(wide())
      return {}
    })
    B.runs.handle(LONG_FAIL, async (ctx) => {
      await ctx.fail('x'.repeat(1500))
      return {}
    })
    // the bound falls between the two halves of an emoji
    B.runs.handle(EMOJI_FAIL, async (ctx) => {
      await ctx.fail(`${'x'.repeat(999)}\u{1F600} and more`)
      return {}
    })
    await B.publishCard({ name: 'b', capabilities: [WIDE, LIST, WIDE_CTX, LONG_FAIL, EMOJI_FAIL] })
  })
  afterAll(async () => { await stopAll(nodes) })

  async function ended (capability: typeof WIDE, taskId: string): Promise<Run> {
    const run = await A.delegate({ to_agent: B.agentId, task_id: taskId, capability, input: {} }, { follow: false })
    await until(async () => ['completed', 'failed'].includes((await B.runs.getRun(run.run_id)).state), 'B ends the run')
    // read at the delegator over the wire, as its liveness probes read it
    return A.getRun(run.run_id)
  }

  it('a returned output the Run schema refuses (300 members) fails the run, which stays readable', async () => {
    const run = await ended(WIDE, 'task-wide')
    expect(run.state).toBe('failed')
    expect(run.failure?.code).toBe('HANDLER_FAILED')
    expect(run.failure?.message).toMatch(/output/)
  })

  it('an output that is not an object fails the run', async () => {
    const run = await ended(LIST, 'task-list')
    expect(run.state).toBe('failed')
    expect(run.failure?.code).toBe('HANDLER_FAILED')
  })

  it('ctx.complete with such an output is refused, and the run fails readable', async () => {
    const run = await ended(WIDE_CTX, 'task-wide-ctx')
    expect(run.state).toBe('failed')
    expect(run.failure?.code).toBe('HANDLER_FAILED')
  })

  it('ctx.fail\'s message is cut before a character the bound would halve (no lone surrogate in a signed event)', async () => {
    const run = await ended(EMOJI_FAIL, 'task-emoji-fail')
    expect(run.failure?.message).toBe('x'.repeat(999))
  })

  it('ctx.fail with a message over the schema\'s bound is cut, and the run stays readable', async () => {
    const run = await ended(LONG_FAIL, 'task-long-fail')
    expect(run.state).toBe('failed')
    expect(run.failure?.message).toBe('x'.repeat(1000))
  })
})

describe('a message cut to its bound', () => {
  it('never ends in half a character, nor keeps a lone surrogate', () => {
    expect(cutText(`${'x'.repeat(999)}\u{1F600}`, 1000)).toBe('x'.repeat(999))
    expect(cutText(`${'x'.repeat(998)}\u{1F600}`, 1000)).toBe(`${'x'.repeat(998)}\u{1F600}`)
    expect(cutText('short', 1000)).toBe('short')
    // a lone surrogate already in the text is no character either: it becomes U+FFFD
    expect(cutText('a\ud800b', 1000)).toBe('a\ufffdb')
  })
})

describe('a liveness probe answered with a run the delegator cannot take', () => {
  let nodes: MeshNode[] = []
  afterAll(async () => { await stopAll(nodes) })

  it('counts as a sign of life for a while: the delegator declares nothing, then declares the run lost past the bound', async () => {
    nodes = await startMesh(2, { nodeOptions: (i) => i === 0 ? { liveness: { lostAfterMs: 600, probeIntervalMs: 100 } } : {} })
    const [A, B] = nodes as [MeshNode, MeshNode]
    B.runs.handle(SLOW, async (ctx) => {
      await new Promise((resolve) => ctx.signal.addEventListener('abort', resolve))
      return {}
    })
    await B.publishCard({ name: 'b', capabilities: [SLOW] })
    const run = await A.delegate({ to_agent: B.agentId, task_id: 'task-unreadable', capability: SLOW, input: {} }, { follow: false })
    // an executor whose record of the run breaks the schema (another implementation, or an older bug):
    // its get_run answers are refused by the delegator's checks
    const executor = (B.runs as unknown as { executor: { apply: (id: string, c: RunCommand, a: Actor) => Promise<Run> } }).executor
    await executor.apply(run.run_id, { type: 'progress', payload: {} }, { role: 'executor' })
    await executor.apply(run.run_id, { type: 'complete', output: wide() }, { role: 'executor' })
    const answered = A.runs.liveness.stats.probesAnsweredUnread
    // past lostAfterMs (600 ms) of probes answered with the unreadable run, well before 4 × lostAfterMs: timed on
    // the clock from the first such answer (eight answers, counted, took 645 ms here and could take 2.4 s on a busy
    // machine)
    await until(() => A.runs.liveness.stats.probesAnsweredUnread > answered, 'a probe answered with the unreadable run', 15_000)
    const since = performance.now()
    await until(() => A.runs.liveness.stats.probesAnsweredUnread >= answered + 3 && performance.now() - since > 700, 'probes answered with the unreadable run past lostAfterMs', 15_000)
    expect(A.runs.liveness.stats.declared).toBe(0)
    const mine = (await A.runs.list()).delegated.find(r => r.run_id === run.run_id)
    expect(mine?.state).toBe('running')
    // but not for good: past LIVENESS_UNREAD_BOUND_FACTOR × lostAfterMs of such answers the run is declared lost
    await until(() => A.runs.liveness.stats.unreadDeclared === 1, 'the unreadable run declared lost', 15_000)
    const ended = (await A.runs.list()).delegated.find(r => r.run_id === run.run_id)
    expect(ended?.state).toBe('failed')
    expect(ended?.failure?.code).toBe('EXECUTOR_LOST')
    expect(ended?.failure?.message).toMatch(/answered every probe of the run for \d+ ms \(bound 2400 ms\)/)
    expect(A.runs.liveness.watching.runs).toBe(0)
  })
})
