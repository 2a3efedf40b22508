/**
 * A handoff successor whose predecessor's head is a liveness verdict waits
 * (lineage_pending), as lineage.md says, for the executor's own event to
 * replace the verdict. When that event (the handoff completion that names
 * the successor) does replace it, the runs waiting on the predecessor are
 * judged again. Before the fix Placement.supersede placed it but never woke
 * them: the successor stayed pending for good, its events never stored nor
 * delivered. Found by session 45's events review.
 */
import { generateKeyPair } from '@libp2p/crypto/keys'
import type { PrivateKey } from '@libp2p/interface'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { agentIdOf } from '../src/identity/identity.ts'
import type { MeshNode } from '../src/node.ts'
import { eventHash, signEvent } from '../src/runlog/event.ts'
import { issueDelegationTicket, issueHandoffTicket } from '../src/runlog/ticket.ts'
import { signVerdict } from '../src/runlog/verdict.ts'
import { collect, type Collector } from './events-helpers.ts'
import { startMesh, stopAll } from './helpers.ts'
import { rawGossip } from './fixtures/raw-gossip.ts'

const TASK = 'task-supersede-wake'
const CAP = { capability_id: 'cap:supersede-work', version: '1.0.0' }
const at = (): string => new Date().toISOString()

describe('a successor waiting on a predecessor whose verdict the executor\'s handoff replaces', () => {
  let nodes: MeshNode[] = []
  let A: MeshNode, P: MeshNode
  let dKey: PrivateKey, xKey: PrivateKey, yKey: PrivateKey
  let onTask: Collector

  beforeAll(async () => {
    ;[dKey, xKey, yKey] = await Promise.all([generateKeyPair('Ed25519'), generateKeyPair('Ed25519'), generateKeyPair('Ed25519')])
    nodes = await startMesh(2)
    ;[A, P] = nodes as [MeshNode, MeshNode]
    onTask = await collect(A, TASK, { owner: agentIdOf(dKey) })
  })
  afterAll(async () => { await stopAll(nodes) })

  it('control: without the verdict the same successor is delivered', async () => { await scenario('task-supersede-control', false) })

  it('admits and delivers the successor once the handoff replaces the verdict', async () => { await scenario(TASK, true) })

  async function scenario (TASK: string, withVerdict: boolean): Promise<void> {
    const onA = TASK === 'task-supersede-wake' ? onTask : await collect(A, TASK, { owner: agentIdOf(dKey) })
    const D = agentIdOf(dKey)
    const X = agentIdOf(xKey)
    const Y = agentIdOf(yKey)
    const { send, sendJudged } = await rawGossip(P, A, TASK)

    const rTicket = await issueDelegationTicket(dKey, { executor: X, correlation_id: TASK, capability: CAP, parent_run: null, authorized: [D] })
    const r1 = await signEvent(xKey, {
      run_id: rTicket.run_id, correlation_id: TASK, type: 'run.started', at: at(), seq: 1, prev: null, executor: X,
      payload: { delegator: D, capability: CAP, parent_run: null, input: {}, ticket: rTicket as unknown as Record<string, unknown> }
    })
    const verdict = await signVerdict(dKey, D, r1, 'executor lost')
    const sTicket = await issueHandoffTicket(xKey, rTicket, Y)
    const s1 = await signEvent(yKey, {
      run_id: sTicket.run_id, correlation_id: TASK, type: 'run.started', at: at(), seq: 1, prev: null, executor: Y,
      payload: { delegator: D, capability: CAP, parent_run: null, handoff_from: { run_id: r1.run_id, agent_id: X }, handoff_by: X, input: {}, context: {}, ticket: sTicket as unknown as Record<string, unknown> }
    })
    const r2 = await signEvent(xKey, {
      run_id: r1.run_id, correlation_id: TASK, type: 'run.completed', at: at(), seq: 2, prev: eventHash(r1), executor: X,
      payload: { transition: 'handoff', handoff_to: { run_id: s1.run_id, agent_id: Y }, by: X }
    })
    const s2 = await signEvent(yKey, {
      run_id: s1.run_id, correlation_id: TASK, type: 'run.completed', at: at(), seq: 2, prev: eventHash(s1), executor: Y, payload: { output: { ok: true } }
    })

    for (const e of withVerdict ? [r1, verdict, s1, r2] : [r1, s1, r2]) await sendJudged(e)
    if (withVerdict) expect(A.events.stats.superseded).toBe(1)
    await send(s2)
    // the successor is the task's: the predecessor's own handoff event names it
    await onA.until(es => es.some(e => e.run_id === s1.run_id && e.seq === 2), 'the successor\'s events', 8_000)
    expect(onA.events.filter(e => e.run_id === s1.run_id).map(e => e.type)).toEqual(['run.started', 'run.completed'])
  }
})
