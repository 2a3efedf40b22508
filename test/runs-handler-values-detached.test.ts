/**
 * What a handler hands over is copied as it will be signed (found by session 58's review): the event an
 * executor keeps in memory, and gives its local listeners, shared the handler's own object, so a change
 * the handler made after `ctx.progress(p)` or after returning its output changed the event; it no longer
 * matched its signature, and an encoding of the object gave another hash than the next event's `prev`.
 * A resume's resolution handed to the handler is a copy too.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { canonicalJson } from '../src/identity/signing.ts'
import type { MeshNode } from '../src/node.ts'
import { verifyEventSync } from '../src/runlog/event.ts'
import type { AgentEvent } from '../src/runlog/types.ts'
import { startMesh, stopAll, until } from './helpers.ts'

const CAP = { capability_id: 'cap:detached-values', version: '1.0.0' }

describe('values a handler hands over are copies of what is signed', () => {
  let nodes: MeshNode[] = []
  let A: MeshNode, B: MeshNode
  const seen: AgentEvent[] = []
  let handedOut: { result: string[] } | undefined
  beforeAll(async () => {
    nodes = await startMesh(2)
    ;[A, B] = nodes as [MeshNode, MeshNode]
    B.runs.handle(CAP, async (ctx) => {
      const p = { n: 1, when: new Date(0) }
      await ctx.progress(p as unknown as Record<string, unknown>)
      p.n = 2
      const resolution = await ctx.block('need a yes', 'cp-1')
      // the handler's copy of the resolution is its own
      resolution.approved = 'changed by the handler'
      handedOut = { result: ['a'] }
      return handedOut
    })
    B.runs.onEvent((e) => { seen.push(e) })
    await B.publishCard({ name: 'b', capabilities: [CAP] })
  })
  afterAll(async () => { await stopAll(nodes) })

  it('the executor\'s events match their signatures after the handler changed what it handed over', async () => {
    const run = await A.delegate({ to_agent: B.agentId, task_id: 'task-detached', capability: CAP, input: {} })
    await until(() => seen.some(e => e.run_id === run.run_id && e.type === 'run.blocked'), 'the block')
    await A.resume(run.run_id, { approved: 'yes' }, { checkpointId: 'cp-1' })
    await until(() => seen.some(e => e.run_id === run.run_id && e.type === 'run.completed'), 'the completion')
    const events = seen.filter(e => e.run_id === run.run_id)
    const progress = events.find(e => e.type === 'run.progress' && e.payload.transition === undefined) as AgentEvent
    expect(progress.payload).toEqual({ n: 1, when: '1970-01-01T00:00:00.000Z' })
    const resumed = events.find(e => e.type === 'run.progress' && e.payload.transition === 'resume') as AgentEvent
    expect((resumed.payload.resolution as Record<string, unknown>).approved).toBe('yes')
    const completed = events.find(e => e.type === 'run.completed') as AgentEvent
    // the handler's code changes the output it returned, later
    handedOut?.result.push('b')
    expect((completed.payload.output as Record<string, unknown>).result).toEqual(['a'])
    for (const e of events) {
      // a copy made from the object now verifies: the object still says what was signed
      expect(() => verifyEventSync(JSON.parse(canonicalJson(e)))).not.toThrow()
    }
    // and the stored log is the same
    const stored = await B.runs.store.log.read(run.run_id)
    expect(stored.map(e => canonicalJson(e))).toEqual(events.map(e => canonicalJson(e)))
  })
})
