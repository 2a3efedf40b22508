/**
 * The second phase of a handoff survives what usually goes wrong around it:
 * - the sender's caller gives up while the handoff is being committed: the
 *   committed handoff is still confirmed (the confirmation is no caller's);
 * - the confirmation is lost and the sender cannot be asked at first: the
 *   receiver asks again (HANDOFF_CONFIRM_ASKS_MAX times,
 *   HANDOFF_CONFIRM_ASK_INTERVAL_MS apart) before it fails the successor;
 * - a confirmation (or the node's stop) that comes while an ask is under way
 *   leaves the run to it: the successor never starts twice, nor after stop.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { AgentNotFoundError, RunNotFoundError } from '../src/errors.ts'
import { silentLogger } from '../src/logger.ts'
import type { MeshNode } from '../src/node.ts'
import { HandoffConfirmations } from '../src/runs/confirmations.ts'
import { HANDOFF_CONFIRM_ASK_INTERVAL_MS, HANDOFF_CONFIRM_ASKS_MAX } from '../src/runs/constants.ts'
import { SignatureCache } from '../src/runlog/event.ts'
import type { Run } from '../src/runlog/types.ts'
import { heldRun, holdingWorkers, startMesh, stopAll, until } from './helpers.ts'

const WORK = { capability_id: 'cap:confirm-asks', version: '1.0.0' }

describe('a committed handoff is confirmed even when its caller gave up during the commit', () => {
  let nodes: MeshNode[] = []
  let A: MeshNode, B: MeshNode, C: MeshNode
  const held = new Map<string, PromiseWithResolvers<void>>()

  beforeAll(async () => {
    // C would ask after a minute: a successor that starts before that was confirmed
    nodes = await startMesh(3, { nodeOptions: () => ({ handoffConfirmTimeoutMs: 60_000 }) })
    ;[A, B, C] = nodes as [MeshNode, MeshNode, MeshNode]
    await holdingWorkers([B, C], WORK, held)
  })
  afterAll(async () => {
    for (const g of held.values()) g.resolve()
    await stopAll(nodes)
  })

  it('the caller\'s signal aborts once the handoff event is committed: the successor starts all the same', async () => {
    const runId = await heldRun(A, B, WORK, 'task-confirm-caller-gone', held)
    const caller = new AbortController()
    const off = B.runs.onEvent((e) => {
      if (e.run_id === runId && e.type === 'run.completed') caller.abort(new Error('the caller left'))
    })
    try {
      const successor = await B.runs.handoff(runId, C.agentId, { why: 'caller leaves' }, { signal: caller.signal })
      expect(caller.signal.aborted).toBe(true)
      await until(() => held.has(successor.run_id), 'the successor to start on its confirmation', 20_000)
      expect((await C.runs.getRun(successor.run_id)).state).toBe('running')
    } finally {
      off()
    }
  })
})

describe('a receiver asks a sender it cannot reach again before it fails the successor', () => {
  const from = { run_id: 'pred-run', agent_id: 'sender' }
  const successor = 'succ-run'
  const naming = { run_id: 'pred-run', state: 'completed', handoff_to: { run_id: successor, agent_id: 'me' } } as unknown as Run
  const unreachable = (): AgentNotFoundError => new AgentNotFoundError('no answer', { reason: 'timeout' })

  function receiver (answers: Array<() => Promise<Run>>): { c: HandoffConfirmations, started: () => number, failed: string[], asked: () => number } {
    let asked = 0
    let started = 0
    const failed: string[] = []
    const c = new HandoffConfirmations({
      log: silentLogger(),
      signatures: new SignatureCache(),
      timeoutMs: 1,
      askIntervalMs: 1,
      getRemoteRun: async () => {
        const answer = answers[Math.min(asked, answers.length - 1)]!
        asked++
        return answer()
      },
      fail: async (_runId, message) => { failed.push(message) }
    })
    c.expect(successor, from, () => { started++ })
    return { c, started: () => started, failed, asked: () => asked }
  }

  it('the limits are named and bounded', () => {
    expect(HANDOFF_CONFIRM_ASKS_MAX).toBeGreaterThan(1)
    expect(HANDOFF_CONFIRM_ASK_INTERVAL_MS * (HANDOFF_CONFIRM_ASKS_MAX - 1)).toBeLessThanOrEqual(60_000)
  })

  it('unreachable once, then the predecessor names the successor: it starts, nothing fails', async () => {
    const r = receiver([async () => { throw unreachable() }, async () => naming])
    await until(() => r.started() > 0 || r.failed.length > 0, 'a decision')
    expect(r.started()).toBe(1)
    expect(r.failed).toEqual([])
    expect(r.c.stats).toMatchObject({ asks: 2, startedOnAsk: 1, failed: 0 })
  })

  it('never reachable: failed after HANDOFF_CONFIRM_ASKS_MAX asks, with why', async () => {
    const r = receiver([async () => { throw unreachable() }])
    await until(() => r.failed.length > 0, 'the successor to fail')
    expect(r.asked()).toBe(HANDOFF_CONFIRM_ASKS_MAX)
    expect(r.started()).toBe(0)
    expect(r.failed[0]).toMatch(/cannot be asked/)
  })

  it('an answer decides at once: a predecessor that does not name the successor, or does not exist, fails it after one ask', async () => {
    const running = receiver([async () => ({ ...naming, state: 'running', handoff_to: null }) as unknown as Run])
    const gone = receiver([async () => { throw new RunNotFoundError('no such run') }])
    await until(() => running.failed.length > 0 && gone.failed.length > 0, 'both successors to fail')
    expect([running.asked(), gone.asked()]).toEqual([1, 1])
    expect(running.failed[0]).toMatch(/is running/)
    expect(running.started() + gone.started()).toBe(0)
  })

  it('stopped while an ask is under way: the answer starts nothing and fails nothing', async () => {
    const answer = Promise.withResolvers<Run>()
    const asking = Promise.withResolvers<void>()
    const r = receiver([async () => { asking.resolve(); return answer.promise }])
    await asking.promise
    r.c.stop()
    answer.resolve(naming)
    await answer.promise
    // let the ask's continuation run
    await until(() => r.c.stats.asks === 1, 'the ask to be counted')
    await new Promise(resolve => setImmediate(resolve))
    expect(r.started()).toBe(0)
    expect(r.failed).toEqual([])
    expect(r.c.stats.startedOnAsk).toBe(0)
  })
})
