/**
 * A run of this node's own (L, a sub-delegation under P) waits for its
 * parent when P is not here yet; a run under L (C, delegated by this node)
 * or L's handoff successor (S) that comes by gossip meanwhile waits for L.
 * When P comes, L is admitted, and what waits on L must be judged again:
 * L's own seq 1 and end were applied while it waited and do not come again.
 * Before the fix Placement.wake admitted L and delivered it but never woke
 * the runs waiting on it: C stayed pending (for good when L had ended, until
 * L's end otherwise) and its events were refused as lineage_pending, never
 * stored nor delivered here. Found by session 59's review.
 */
import { generateKeyPair } from '@libp2p/crypto/keys'
import type { Message } from '@libp2p/gossipsub'
import type { PrivateKey } from '@libp2p/interface'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import type { CorrTrack, Verdict } from '../src/events/track.ts'
import { agentIdOf } from '../src/identity/identity.ts'
import type { MeshNode } from '../src/node.ts'
import { eventHash, signEvent } from '../src/runlog/event.ts'
import { issueDelegationTicket, issueHandoffTicket, type RunTicket } from '../src/runlog/ticket.ts'
import type { AgentEvent, Run, RunState } from '../src/runlog/types.ts'
import { collect, type Collector } from './events-helpers.ts'
import { startMesh, stopAll } from './helpers.ts'

const CAP = { capability_id: 'cap:local-wakes', version: '1.0.0' }
const enc = new TextEncoder()
const at = (): string => new Date().toISOString()

interface PlacementView {
  judge: (t: CorrTrack, msg: Message, from: string) => Verdict | Promise<Verdict>
  onLocalEvent: (event: AgentEvent, run: Run) => void
}

describe('runs waiting on a run of this node\'s that waited for its parent', () => {
  let nodes: MeshNode[] = []
  let N: MeshNode
  let nKey: PrivateKey, oKey: PrivateKey, xKey: PrivateKey, zKey: PrivateKey
  let placement: PlacementView

  beforeAll(async () => {
    ;[nKey, oKey, xKey, zKey] = await Promise.all([generateKeyPair('Ed25519'), generateKeyPair('Ed25519'), generateKeyPair('Ed25519'), generateKeyPair('Ed25519')])
    nodes = await startMesh(1, { nodeOptions: () => ({ privateKey: nKey }) })
    N = nodes[0]!
    placement = (N.events as unknown as { placement: PlacementView }).placement
  })
  afterAll(async () => { await stopAll(nodes) })

  it('admits a child of the run once the parent comes after the run ended', async () => { await scenario('task-local-wakes-ended', 'child', true) })

  it('admits a child of the run once the parent comes while the run still runs', async () => { await scenario('task-local-wakes-running', 'child', false) })

  it('admits the run\'s handoff successor once the parent comes after the handoff', async () => { await scenario('task-local-wakes-handoff', 'successor', true) })

  async function scenario (TASK: string, kind: 'child' | 'successor', lEnds: boolean): Promise<void> {
    const [N_, O, X, Z] = [N.agentId, agentIdOf(oKey), agentIdOf(xKey), agentIdOf(zKey)]
    expect(N_).toBe(agentIdOf(nKey))
    const onN: Collector = await collect(N, TASK)
    const correlations = (N.events as unknown as { correlations: { get: (id: string) => CorrTrack | undefined, flushCopies: () => Promise<void> } }).correlations
    const t = correlations.get(TASK)!
    const started = async (key: PrivateKey, ticket: RunTicket, extra: Record<string, unknown> = {}): Promise<AgentEvent> => signEvent(key, {
      run_id: ticket.run_id, correlation_id: TASK, type: 'run.started', at: at(), seq: 1, prev: null, executor: ticket.executor,
      payload: { delegator: ticket.delegator, capability: CAP, parent_run: ticket.parent_run, input: {}, ...extra, ticket: ticket as unknown as Record<string, unknown> }
    })
    const completed = async (key: PrivateKey, prev: AgentEvent, payload: Record<string, unknown>): Promise<AgentEvent> => signEvent(key, {
      run_id: prev.run_id, correlation_id: TASK, type: 'run.completed', at: at(), seq: prev.seq + 1, prev: eventHash(prev), executor: prev.executor, payload
    })
    // P: the owner's root run on X; L: X's sub-delegation to N under P
    const pTicket = await issueDelegationTicket(oKey, { executor: X, correlation_id: TASK, capability: CAP, parent_run: null, authorized: [O] })
    const lTicket = await issueDelegationTicket(xKey, { executor: N_, correlation_id: TASK, capability: CAP, parent_run: pTicket.run_id, authorized: [X] })
    const p1 = await started(xKey, pTicket)
    const l1 = await started(nKey, lTicket)
    // W: the run waiting on L, on Z: N's sub-delegation under L, or L's handoff successor
    let w1: AgentEvent
    let l2: AgentEvent
    if (kind === 'child') {
      const cTicket = await issueDelegationTicket(nKey, { executor: Z, correlation_id: TASK, capability: CAP, parent_run: l1.run_id, authorized: [N_] })
      w1 = await started(zKey, cTicket)
      l2 = await completed(nKey, l1, { output: { ok: true } })
    } else {
      const sTicket = await issueHandoffTicket(nKey, lTicket, Z)
      w1 = await started(zKey, sTicket, { handoff_from: { run_id: l1.run_id, agent_id: N_ }, handoff_by: N_, context: {} })
      l2 = await completed(nKey, l1, { transition: 'handoff', handoff_to: { run_id: w1.run_id, agent_id: Z }, by: N_ })
    }
    const w2 = await completed(zKey, w1, { output: { ok: true } })

    // this node's own events: in its log first, then taken into the track (as the run manager does), in order
    const local = async (e: AgentEvent, state: RunState): Promise<void> => {
      await N.events.log.append([e])
      placement.onLocalEvent(e, { state } as unknown as Run)
      await t.lock.idle()
    }
    const gossip = async (e: AgentEvent): Promise<Verdict> => {
      const v = await placement.judge(t, { type: 'unsigned', topic: t.topic, data: enc.encode(JSON.stringify(e)) } as unknown as Message, Z)
      await t.lock.idle()
      return v
    }

    await local(l1, 'running')
    expect(t.runs.get(l1.run_id)?.lineage).toBe('pending')
    expect(await gossip(w1)).toBe('lineage_pending')
    if (lEnds) await local(l2, 'completed')
    expect(await gossip(p1)).toBe('accepted')
    // L is admitted and delivered from the log: its events so far
    const lHeld = lEnds ? 2 : 1
    await onN.until(es => es.filter(e => e.run_id === l1.run_id).length === lHeld, 'L\'s events')
    expect(t.runs.get(l1.run_id)?.lineage).toBe('admitted')
    expect(t.owner).toBe(O)

    // the run waiting on L was judged again when L was admitted: its start placed, its next event follows it
    expect(t.runs.get(w1.run_id)?.lineage).toBe('admitted')
    expect(await gossip(w2)).toBe('accepted')
    await onN.until(es => es.filter(e => e.run_id === w1.run_id).length === 2, 'the waiting run\'s events')
    expect(onN.events.filter(e => e.run_id === w1.run_id).map(e => e.seq)).toEqual([1, 2])
    // and stored as a copy (written with the correlation's next group commit)
    await correlations.flushCopies()
    expect((await N.events.log.get(w1.run_id, 1))?.signature).toBe(w1.signature)
    expect((await N.events.log.get(w1.run_id, 2))?.signature).toBe(w2.signature)
    if (!lEnds) await local(l2, 'completed')
    expect(onN.events.filter(e => e.run_id === l1.run_id).map(e => e.seq)).toEqual([1, 2])
    onN.sub.close()
  }
})
