/**
 * A run of one correlation, held in this node's log, was judged and admitted in another correlation's track
 * (nothing compared its run.started's correlation with the track's), so its executor could extend it there with
 * events of the other correlation: stored in the first run's log, they broke its chain for good (every replay of
 * the first correlation failed) and were handed to its subscribers. Such a run is rejected in the other track now.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { generateKeyPair } from '@libp2p/crypto/keys'
import type { PrivateKey } from '@libp2p/interface'
import { eventHash, signEvent } from '../src/runlog/event.ts'
import type { MeshNode } from '../src/node.ts'
import type { AgentEvent } from '../src/runlog/types.ts'
import { startMesh, stopAll, until } from './helpers.ts'
import { rawGossip } from './fixtures/raw-gossip.ts'

const CAP = { capability_id: 'cap:evsub-cross', version: '1.0.0' }
const C1 = 'task-evsub-cross-1'
const C2 = 'task-evsub-cross-2'

describe('a run of one correlation extended in another', () => {
  let nodes: MeshNode[] = []
  let A: MeshNode, B: MeshNode
  let bKey: PrivateKey
  const gates: Array<PromiseWithResolvers<void>> = []

  beforeAll(async () => {
    bKey = await generateKeyPair('Ed25519')
    nodes = await startMesh(2, { nodeOptions: i => i === 1 ? { privateKey: bKey } : {} })
    ;[A, B] = nodes as [MeshNode, MeshNode]
    B.runs.handle(CAP, async (ctx) => {
      if (ctx.run.correlation_id === C2) {
        const g = Promise.withResolvers<void>()
        gates.push(g)
        await Promise.race([g.promise, new Promise(resolve => { ctx.signal.addEventListener('abort', resolve, { once: true }) })])
      }
      return { ok: true }
    })
    await B.publishCard({ name: 'evsub-cross', capabilities: [CAP] })
  })
  afterAll(async () => { for (const g of gates) g.resolve(); await stopAll(nodes) })

  it('an event of C2 in a run of C1 is refused, and C1 stays whole', async () => {
    // A delegates X in C1 (ends at once) and follows it: A's log holds X's events, correlation C1
    const x = await A.delegate({ to_agent: B.agentId, task_id: C1, capability: CAP, input: {} })
    await until(async () => (await A.events.lastEvent(x.run_id))?.type === 'run.completed', 'A to hold X to its end')
    const head = (await A.events.lastEvent(x.run_id)) as AgentEvent
    const before = await A.events.readCorrelation(C1)
    expect(before.get(x.run_id)?.every(e => e.correlation_id === C1)).toBe(true)

    // A delegates Z in C2 (held): A follows C2 on gossip, with no subscriber there
    await A.delegate({ to_agent: B.agentId, task_id: C2, capability: CAP, input: {} })
    await until(() => gates.length === 1, 'Z to start')

    // B (X's executor) publishes on C2's topic an event of run X, correlation C2, chained to X's head
    const forged = await signEvent(bKey, {
      run_id: x.run_id,
      correlation_id: C2,
      executor: B.agentId,
      seq: head.seq + 1,
      prev: eventHash(head),
      at: new Date().toISOString(),
      type: 'run.progress',
      payload: { note: 'from another correlation' }
    })
    const g = await rawGossip(B, A, C2)
    await g.sendJudged(forged)

    // the event is refused (its run belongs to C1), nothing is stored
    const stored = await A.events.lastEvent(x.run_id)
    let replayErr: unknown
    try { await A.events.readCorrelation(C1) } catch (err) { replayErr = err }
    // a subscriber of C1 reads X's log from the start
    const sub = await A.events.subscribe(C1, { owner: A.agentId })
    const seen: AgentEvent[] = []
    for (;;) {
      if (await sub.pastHistory()) break
      const r = await sub.next()
      if (r.done === true) break
      seen.push(r.value)
    }
    sub.close()
    expect(stored?.seq).toBe(head.seq)
    expect(replayErr).toBeUndefined()
    expect(seen.every(e => e.correlation_id === C1)).toBe(true)
    expect(seen.map(e => e.seq)).toEqual((before.get(x.run_id) ?? []).map(e => e.seq))
  })
})
