/**
 * Issue #12: the input and handoff-context limits agree with what fits in a
 * signed run.started. A maximal run.started (largest input, largest context,
 * the largest ticket) signs and verifies; between real nodes, an input or a
 * context at its limit is accepted and runs, one byte over is refused with
 * INVALID_REQUEST (reason oversized), on the caller and over the wire.
 */
import { generateKeyPair } from '@libp2p/crypto/keys'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import * as C from '../src/constants.ts'
import { agentIdOf } from '../src/identity/identity.ts'
import type { MeshNode } from '../src/node.ts'
import { newRunId, signEvent, verifyEvent } from '../src/runlog/event.ts'
import { issueDelegationTicket, issueHandoffTicket, verifyTicket } from '../src/runlog/ticket.ts'
import { RawWire } from './fixtures/raw-wire.ts'
import { rejectsWith, startMesh, stopAll, until } from './helpers.ts'

const WORK = { capability_id: 'cap:' + 'w'.repeat(C.CAPABILITY_ID_MAX_CHARS - 4), version: '1.' + '0'.repeat(C.CAPABILITY_VERSION_MAX_CHARS - 2) }
const SMALL = { capability_id: 'cap:limits', version: '1.0.0' }

/** A JSON object of exactly `bytes` bytes. */
function sized (bytes: number): Record<string, unknown> {
  const o = { pad: 'x'.repeat(bytes - 10) }
  expect(Buffer.byteLength(JSON.stringify(o))).toBe(bytes)
  return o
}

describe('run limits agree with the signed run.started', () => {
  it('the largest input, context and ticket (the deepest handoff\'s, with its chain) fit in one run.started', async () => {
    const keys = await Promise.all(Array.from({ length: 3 + C.RUN_AUTHORIZED_MAX_AGENTS }, async () => generateKeyPair('Ed25519')))
    const [delegatorKey, firstKey, secondKey] = keys as [typeof keys[0], typeof keys[0], typeof keys[0]]
    const authorized = keys.slice(3).map(k => agentIdOf(k))
    const task = 't'.repeat(C.TASK_ID_MAX_CHARS)
    const parent = `${agentIdOf(delegatorKey)}:${'p'.repeat(C.RUN_ID_MAX_CHARS - agentIdOf(delegatorKey).length - 1)}`
    const origin = await issueDelegationTicket(delegatorKey, { executor: agentIdOf(firstKey), correlation_id: task, capability: WORK, parent_run: parent, authorized })
    // the deepest handoff: its ticket carries the chain of every hop before it
    let ticket = origin
    let from = firstKey
    for (let depth = 1; depth <= C.MAX_HANDOFF_DEPTH; depth++) {
      const to = depth % 2 === 1 ? secondKey : firstKey
      ticket = await issueHandoffTicket(from, ticket, agentIdOf(to))
      from = to
    }
    expect(ticket.depth).toBe(C.MAX_HANDOFF_DEPTH)
    expect(ticket.chain).toHaveLength(C.MAX_HANDOFF_DEPTH - 1)
    expect(verifyTicket(ticket).run_id).toBe(ticket.run_id)
    const executorKey = from
    const payload = {
      delegator: origin.delegator,
      capability: WORK,
      parent_run: parent,
      handoff_from: ticket.handoff_from,
      handoff_by: ticket.issuer,
      input: sized(C.RUN_INPUT_MAX_BYTES),
      context: sized(C.HANDOFF_CONTEXT_MAX_BYTES),
      ticket
    }
    const overhead = Buffer.byteLength(JSON.stringify({ ...payload, input: {}, context: {} }))
    console.info(`the largest run.started payload besides input and context: ${overhead} bytes (bound ${C.RUN_STARTED_OVERHEAD_BYTES})`)
    expect(overhead).toBeLessThan(C.RUN_STARTED_OVERHEAD_BYTES)
    const started = await signEvent(executorKey, {
      run_id: ticket.run_id, correlation_id: task, type: 'run.started', payload, at: new Date().toISOString(), seq: 1, prev: null, executor: agentIdOf(executorKey)
    })
    expect((await verifyEvent(started)).run_id).toBe(ticket.run_id)
    expect(newRunId(agentIdOf(secondKey)).length).toBeLessThanOrEqual(C.RUN_ID_MAX_CHARS)
  })

  describe('between real nodes', () => {
    let nodes: MeshNode[] = []
    let A: MeshNode, B: MeshNode, D: MeshNode
    const seen = new Map<string, number>()

    beforeAll(async () => {
      nodes = await startMesh(3)
      ;[A, B, D] = nodes as [MeshNode, MeshNode, MeshNode]
      for (const n of [B, D]) {
        n.runs.handle(SMALL, async (ctx) => {
          seen.set(ctx.run.run_id, Buffer.byteLength(JSON.stringify(ctx.input)))
          if (ctx.input.hold === undefined) return { ok: true }
          await new Promise(resolve => { ctx.signal.addEventListener('abort', resolve, { once: true }) })
          return {}
        })
        await n.publishCard({ name: 'limits', capabilities: [SMALL] })
      }
    })
    afterAll(async () => { await stopAll(nodes) })

    it(`an input of RUN_INPUT_MAX_BYTES (${C.RUN_INPUT_MAX_BYTES}) runs; one byte more is INVALID_REQUEST on the caller and over the wire`, async () => {
      const run = await A.delegate({ to_agent: B.agentId, task_id: 'task-limits-input', capability: SMALL, input: sized(C.RUN_INPUT_MAX_BYTES) })
      await until(() => seen.get(run.run_id) === C.RUN_INPUT_MAX_BYTES, 'the handler to see the whole input')
      const over = sized(C.RUN_INPUT_MAX_BYTES + 1)
      const err = await rejectsWith(A.delegate({ to_agent: B.agentId, task_id: 'task-limits-input', capability: SMALL, input: over }), 'INVALID_REQUEST')
      expect(err.details).toMatchObject({ reason: 'oversized' })
      // a caller that skips its own check meets the executor's
      const wire = await RawWire.open(A.host, B.host.peerId, C.DELEGATE_PROTOCOL)
      try {
        const ticket = await A.runs.ticketFor({ to_agent: B.agentId, task_id: 'task-limits-wire', capability: SMALL, input: over })
        const f = await wire.call({ id: 1, type: 'delegate', body: { to_agent: B.agentId, task_id: 'task-limits-wire', capability: SMALL, input: over, parent_run: null, ticket } })
        expect(f).toMatchObject({ ok: false, error: { code: 'INVALID_REQUEST', details: { reason: 'oversized' } } })
      } finally {
        wire.abort()
      }
      expect((await B.runs.list({ correlation_id: 'task-limits-wire' })).executing).toEqual([])
    })

    it(`a handoff with the largest input and a context of HANDOFF_CONTEXT_MAX_BYTES (${C.HANDOFF_CONTEXT_MAX_BYTES}) goes through; one byte more is INVALID_REQUEST`, async () => {
      const input = { pad: 'x'.repeat(C.RUN_INPUT_MAX_BYTES - Buffer.byteLength(JSON.stringify({ pad: '', hold: 1 }))), hold: 1 }
      expect(Buffer.byteLength(JSON.stringify(input))).toBe(C.RUN_INPUT_MAX_BYTES)
      const run = await A.delegate({ to_agent: B.agentId, task_id: 'task-limits-handoff', capability: SMALL, input })
      await until(() => seen.has(run.run_id), 'the first run to start')
      const err = await rejectsWith(A.handoff(run.run_id, D.agentId, sized(C.HANDOFF_CONTEXT_MAX_BYTES + 1)), 'INVALID_REQUEST')
      expect(err.details).toMatchObject({ reason: 'oversized' })
      expect((await B.runs.getRun(run.run_id)).state).toBe('running')
      const next = await A.handoff(run.run_id, D.agentId, sized(C.HANDOFF_CONTEXT_MAX_BYTES))
      await until(() => seen.get(next.run_id) === C.RUN_INPUT_MAX_BYTES, 'the successor to start with the whole input')
      await A.cancel(next.run_id)
    })
  })
})
