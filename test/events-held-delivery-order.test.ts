/**
 * A run of this node's own (L, a sub-delegation under P) waits for its
 * parent while P is fetched; a subscriber S is live. When P comes, L is
 * admitted and S is handed L's events read from the log, on the
 * correlation's lock. Before the fix an event of L committed while the lock
 * was busy (queued on it ahead of that read) went to S at once when its
 * turn came: S, at #0 of L, was handed L#2 and failed (INTERNAL, reason
 * order), and the read found no subscriber. Now the read hands S L's events
 * in order, the ones taken in while it waited among them; normal delivery
 * (nothing busy) is unchanged, and a read that fails ends S with its reason
 * and does not keep L's later events from a subscriber not behind. Found by
 * session 59's review.
 */
import { generateKeyPair } from '@libp2p/crypto/keys'
import type { Message } from '@libp2p/gossipsub'
import type { PrivateKey } from '@libp2p/interface'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import type { CorrTrack, Verdict } from '../src/events/track.ts'
import { agentIdOf } from '../src/identity/identity.ts'
import type { MeshNode } from '../src/node.ts'
import { eventHash, signEvent } from '../src/runlog/event.ts'
import type { EventLog } from '../src/runlog/event-log.ts'
import { issueDelegationTicket } from '../src/runlog/ticket.ts'
import type { AgentEvent, Run, RunState } from '../src/runlog/types.ts'
import { collect } from './events-helpers.ts'
import { startMesh, stopAll } from './helpers.ts'

const CAP = { capability_id: 'cap:held-delivery', version: '1.0.0' }
const enc = new TextEncoder()
const at = (): string => new Date().toISOString()

interface PlacementView {
  judge: (t: CorrTrack, msg: Message, from: string) => Verdict | Promise<Verdict>
  onLocalEvent: (event: AgentEvent, run: Run) => void
}

describe('a run of this node\'s admitted while the correlation\'s lock is busy', () => {
  let nodes: MeshNode[] = []
  let N: MeshNode
  let nKey: PrivateKey, oKey: PrivateKey, xKey: PrivateKey
  let placement: PlacementView

  beforeAll(async () => {
    ;[nKey, oKey, xKey] = await Promise.all([generateKeyPair('Ed25519'), generateKeyPair('Ed25519'), generateKeyPair('Ed25519')])
    nodes = await startMesh(1, { nodeOptions: () => ({ privateKey: nKey }) })
    N = nodes[0]!
    placement = (N.events as unknown as { placement: PlacementView }).placement
  })
  afterAll(async () => { await stopAll(nodes) })

  /** P (the owner's root run on X), L (X's sub-delegation to N under P): L#1 committed and pending, S live. */
  async function setup (TASK: string): Promise<{
    t: CorrTrack, p1: AgentEvent, l1: AgentEvent, l2: AgentEvent, l3: AgentEvent, onN: Awaited<ReturnType<typeof collect>>
    local: (e: AgentEvent, state: RunState) => Promise<void>, judgeP: () => Verdict | Promise<Verdict>
  }> {
    const [N_, O, X] = [N.agentId, agentIdOf(oKey), agentIdOf(xKey)]
    const onN = await collect(N, TASK)
    const correlations = (N.events as unknown as { correlations: { get: (id: string) => CorrTrack | undefined } }).correlations
    const t = correlations.get(TASK)!
    const pTicket = await issueDelegationTicket(oKey, { executor: X, correlation_id: TASK, capability: CAP, parent_run: null, authorized: [O] })
    const lTicket = await issueDelegationTicket(xKey, { executor: N_, correlation_id: TASK, capability: CAP, parent_run: pTicket.run_id, authorized: [X] })
    const started = async (key: PrivateKey, ticket: typeof pTicket): Promise<AgentEvent> => signEvent(key, {
      run_id: ticket.run_id, correlation_id: TASK, type: 'run.started', at: at(), seq: 1, prev: null, executor: ticket.executor,
      payload: { delegator: ticket.delegator, capability: CAP, parent_run: ticket.parent_run, input: {}, ticket: ticket as unknown as Record<string, unknown> }
    })
    const next = async (prev: AgentEvent, type: 'run.progress' | 'run.completed', payload: Record<string, unknown>): Promise<AgentEvent> => signEvent(nKey, {
      run_id: prev.run_id, correlation_id: TASK, type, at: at(), seq: prev.seq + 1, prev: eventHash(prev), executor: prev.executor, payload
    })
    const p1 = await started(xKey, pTicket)
    const l1 = await started(nKey, lTicket)
    const l2 = await next(l1, 'run.progress', { step: 1 })
    const l3 = await next(l2, 'run.completed', { output: { ok: true } })
    // this node's own events: in its log first, then taken into the track (as the run manager does)
    const local = async (e: AgentEvent, state: RunState): Promise<void> => {
      await N.events.log.append([e])
      placement.onLocalEvent(e, { state } as unknown as Run)
    }
    const judgeP = (): Verdict | Promise<Verdict> => placement.judge(t, { type: 'unsigned', topic: t.topic, data: enc.encode(JSON.stringify(p1)) } as unknown as Message, X)
    await local(l1, 'running')
    await t.lock.idle()
    expect(t.runs.get(l1.run_id)?.lineage).toBe('pending')
    return { t, p1, l1, l2, l3, onN, local, judgeP }
  }

  it('hands a live subscriber the run\'s events in order when one was committed while the lock was busy', async () => {
    const { t, l1, l2, l3, onN, local, judgeP } = await setup('task-held-delivery-busy')
    const gate = Promise.withResolvers<void>()
    const busy = t.lock.run(async () => gate.promise)
    const v = judgeP() // P#1 queued on the lock (T)
    await local(l2, 'running') // L#2 queued behind it (A)
    gate.resolve()
    await busy
    expect(await v).toBe('accepted')
    await t.lock.idle(); await t.lock.idle()
    expect(t.runs.get(l1.run_id)?.lineage).toBe('admitted')
    expect(onN.sub.closed, 'subscription closed').toBe(false)
    await onN.until(es => es.filter(e => e.run_id === l1.run_id).length === 2, 'L\'s events')
    expect(onN.events.filter(e => e.run_id === l1.run_id).map(e => e.seq)).toEqual([1, 2])
    expect(t.runs.get(l1.run_id)?.heldDelivery).not.toBe(true)
    // and the run's next event, with nothing queued, goes straight to the subscriber
    await local(l3, 'completed')
    await onN.until(es => es.filter(e => e.run_id === l1.run_id).length === 3, 'L\'s end')
    expect(onN.events.filter(e => e.run_id === l1.run_id).map(e => e.seq)).toEqual([1, 2, 3])
    expect(onN.sub.closed).toBe(false)
    onN.sub.close()
  })

  it('delivers as before when nothing is busy: the held start read from the log, the next event at once', async () => {
    const { t, l1, l2, l3, onN, local, judgeP } = await setup('task-held-delivery-idle')
    expect(await judgeP()).toBe('accepted')
    await onN.until(es => es.some(e => e.run_id === l1.run_id), 'L\'s start')
    await t.lock.idle()
    expect(t.runs.get(l1.run_id)?.lineage).toBe('admitted')
    await local(l2, 'running')
    await local(l3, 'completed')
    await onN.until(es => es.filter(e => e.run_id === l1.run_id).length === 3, 'L\'s events')
    expect(onN.events.filter(e => e.run_id === l1.run_id).map(e => e.seq)).toEqual([1, 2, 3])
    expect(onN.sub.closed).toBe(false)
    onN.sub.close()
  })

  it('a log read that fails ends the subscriber it left behind with its reason, and later events are delivered again', async () => {
    const TASK = 'task-held-delivery-fails'
    // a second subscriber, that holds L up to #2 already: not behind when the read fails
    const ahead = await collect(N, TASK)
    const { t, l1, l2, l3, onN, local, judgeP } = await setup(TASK)
    ahead.sub.startAfter(l1.run_id, 2)
    const log = N.events.log as EventLog
    const readAll = log.readAll
    let failed = 0
    log.readAll = async function * (runId: string, pageSize?: number) {
      if (runId === l1.run_id && failed === 0) {
        failed++
        throw new Error('disk read error (test)')
      }
      yield * readAll.call(log, runId, pageSize)
    }
    try {
      const gate = Promise.withResolvers<void>()
      const busy = t.lock.run(async () => gate.promise)
      const v = judgeP()
      await local(l2, 'running')
      gate.resolve()
      await busy
      expect(await v).toBe('accepted')
      await t.lock.idle(); await t.lock.idle()
    } finally {
      log.readAll = readAll
    }
    expect(failed).toBe(1)
    expect(onN.sub.closed).toBe(true)
    const err = await onN.sub.next().then(() => undefined, (e: unknown) => e)
    expect((err as { details?: { reason?: string } }).details?.reason).toBe('log_read')
    expect(t.runs.get(l1.run_id)?.heldDelivery).not.toBe(true)
    // the mark is not left behind: the run's next event goes to the subscriber that was not behind
    expect(ahead.sub.closed).toBe(false)
    await local(l3, 'completed')
    await ahead.until(es => es.some(e => e.run_id === l1.run_id), 'L\'s end')
    expect(ahead.events.filter(e => e.run_id === l1.run_id).map(e => e.seq)).toEqual([3])
    expect(ahead.sub.closed).toBe(false)
    ahead.sub.close()
  })
})
