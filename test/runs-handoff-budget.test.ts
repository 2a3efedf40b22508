/**
 * The executor's side of a control handoff calls the receiver within its own
 * request budget: a receiver that does not answer in it is reported to the
 * delegator as AGENT_NOT_FOUND by the executor, and the executor commits
 * nothing afterwards, even if the receiver answers later. And a caller with
 * default limits waits longer than a responder's budget, so it hears the
 * responder's own answer instead of giving the agent up.
 */
import { describe, expect, it, beforeAll, afterAll } from 'vitest'
import { CALL_TIMEOUT_MS, DIAL_TIMEOUT_MS, HANDLER_TIMEOUT_MS, NESTED_CALL_MARGIN_MS, RESPONSE_TIMEOUT_MS } from '../src/constants.ts'
import type { MeshNode } from '../src/node.ts'
import { holdingWorkers, nextEvent, rejectsWith, startMesh, stopAll, until } from './helpers.ts'

const WORK = { capability_id: 'cap:budget-work', version: '1.0.0' }
/** B's budget per run-protocol request: long enough for an honest request on a loaded machine. */
const BUDGET_MS = 1_500
const CONFIRM_TIMEOUT_MS = 1_500

describe('a control handoff within the executor\'s request budget', () => {
  let nodes: MeshNode[] = []
  let A: MeshNode, B: MeshNode, C: MeshNode
  const held = new Map<string, PromiseWithResolvers<void>>()

  beforeAll(async () => {
    nodes = await startMesh(3, { nodeOptions: i => (i === 1 ? { runHandlerTimeoutMs: BUDGET_MS } : { handoffConfirmTimeoutMs: CONFIRM_TIMEOUT_MS }) })
    ;[A, B, C] = nodes as [MeshNode, MeshNode, MeshNode]
    await holdingWorkers([B, C], WORK, held)
  })
  afterAll(async () => {
    for (const g of held.values()) g.resolve()
    await stopAll(nodes)
  })

  it('a caller\'s default limits outlast a responder\'s budget, and a whole call has room for a dial and a response', () => {
    expect(RESPONSE_TIMEOUT_MS).toBeGreaterThan(HANDLER_TIMEOUT_MS)
    expect(CALL_TIMEOUT_MS).toBeGreaterThanOrEqual(DIAL_TIMEOUT_MS + RESPONSE_TIMEOUT_MS)
  })

  it('a receiver slower than the budget: the delegator is told AGENT_NOT_FOUND in time, the run is not handed off, the receiver fails its successor', async () => {
    const task = 'task-budget-slow-receiver'
    const run = await A.delegate({ to_agent: B.agentId, task_id: task, capability: WORK, input: {} })
    await until(() => held.has(run.run_id), 'the run to start')
    const asked = Promise.withResolvers<void>()
    const release = Promise.withResolvers<void>()
    C.runs.setPolicy(async ({ task_id: t }) => {
      if (t === task) { asked.resolve(); await release.promise }
      return undefined
    })
    try {
      const failed = nextEvent(C, e => e.correlation_id === task && e.type === 'run.failed')
      // default caller limits: B answers the call, with its own call's error, within its budget
      const err = await rejectsWith(A.handoff(run.run_id, C.agentId, { why: 'slow receiver' }), 'AGENT_NOT_FOUND')
      // the limit of B's call to C (the client reports what was left of it)
      expect(err.details).toMatchObject({ reason: 'timeout' })
      expect(err.details?.limit_ms).toBeLessThanOrEqual(BUDGET_MS - Math.min(NESTED_CALL_MARGIN_MS, BUDGET_MS / 2))
      await asked.promise
      // only now does the receiver create its successor: B gave up its call at the budget and commits nothing
      release.resolve()
      const e = await failed
      expect(e.payload).toMatchObject({ failure: { code: 'HANDOFF_UNCONFIRMED' } })
      expect((await B.runs.getRun(run.run_id)).state).toBe('running')
      expect((await A.getRun(run.run_id)).state).toBe('running')
    } finally {
      C.runs.setPolicy(undefined)
      release.resolve()
    }
  })

  it('a receiver within the budget: the handoff goes through with default limits', async () => {
    const task = 'task-budget-prompt-receiver'
    const run = await A.delegate({ to_agent: B.agentId, task_id: task, capability: WORK, input: {} })
    await until(() => held.has(run.run_id), 'the run to start')
    const next = await A.handoff(run.run_id, C.agentId, { why: 'prompt receiver' })
    expect(next.agent_id).toBe(C.agentId)
    expect((await B.runs.getRun(run.run_id)).state).not.toBe('running')
  })
})
