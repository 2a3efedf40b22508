/**
 * A handler that does not heed its signal keeps running after its run is
 * canceled. Such a handler holds its node slot until it returns (its
 * delegator's share is given back at once), so the node's limit of
 * concurrent runs bounds the handlers alive: delegate-and-cancel rounds past
 * the limit are refused for capacity instead of piling up live handlers, and
 * are admitted again once those handlers return.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import type { MeshNode } from '../src/node.ts'
import { rejectsWith, startMesh, stopAll, until } from './helpers.ts'

const STUBBORN = { capability_id: 'cap:stubborn', version: '1.0.0' }
const LIMIT = 4

describe('handlers that outlive their run', () => {
  let nodes: MeshNode[] = []
  let A: MeshNode, B: MeshNode
  let alive = 0
  let started = 0
  const gate = Promise.withResolvers<void>()

  beforeAll(async () => {
    nodes = await startMesh(2, {
      bootstrapOf: i => i - 1,
      nodeOptions: i => i === 1 ? { maxConcurrentInboundRuns: LIMIT } : {}
    })
    ;[A, B] = nodes as [MeshNode, MeshNode]
    // ignores ctx.signal: returns only when the test opens the gate
    B.runs.handle(STUBBORN, async () => {
      alive++
      started++
      await gate.promise
      alive--
      return { ok: true }
    })
    await B.publishCard({ name: 'stubborn', capabilities: [STUBBORN] })
  })
  afterAll(async () => {
    gate.resolve()
    await stopAll(nodes)
  })

  it('count against the node\'s limit until they return: the next delegation is refused for capacity, then admitted again', async () => {
    for (let i = 0; i < LIMIT; i++) {
      const run = await A.delegate({ to_agent: B.agentId, task_id: `task-stubborn-${i}`, capability: STUBBORN, input: {} })
      await until(() => started === i + 1, `handler ${i} started`)
      expect((await A.cancel(run.run_id)).state).toBe('failed')
      // the delegator's share is back at once; the node slot stays with the live handler
      expect(B.runs.slots.heldBy(A.agentId)).toBe(0)
    }
    expect(alive).toBe(LIMIT)
    // more rounds: each refused while the handlers live, and no handler more is started
    for (let k = 0; k < 2; k++) {
      const err = await rejectsWith(A.delegate({ to_agent: B.agentId, task_id: `task-stubborn-over-${k}`, capability: STUBBORN, input: {} }), 'DELEGATION_REFUSED')
      expect(err.details).toMatchObject({ reason: 'capacity', limit: LIMIT, scope: 'node' })
    }
    expect(B.runs.slots.size).toBe(LIMIT)
    expect(B.runs.slots.outlivingNow).toBe(LIMIT)
    expect(B.runs.slots.outlived).toBe(LIMIT)
    expect(started).toBe(LIMIT)
    expect(alive).toBe(LIMIT)
    // the handlers return: their slots are free again
    gate.resolve()
    await until(() => alive === 0 && B.runs.slots.size === 0, 'the outliving handlers returned and their slots were freed')
    expect(B.runs.slots.outlivingNow).toBe(0)
    const again = await A.delegate({ to_agent: B.agentId, task_id: 'task-stubborn-again', capability: STUBBORN, input: {} })
    expect(again.state).toBe('running')
    await until(async () => (await B.runs.store.get(again.run_id))?.state === 'completed', 'the admitted run completed')
    await until(() => B.runs.slots.size === 0, 'the completed run gave its slot back')
  })
})
