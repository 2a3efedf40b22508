/**
 * Events of a run after its executor's own end were placed like any other: the executor of a run this node
 * delegated appended, after its run.completed, more handoff completions naming made-up runs of made-up agents;
 * each was stored, put the run's state back, and named a run this node then followed and fetched. Nothing after
 * an end is placed now (a liveness verdict may still be followed by the run's own events).
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { generateKeyPair } from '@libp2p/crypto/keys'
import type { PrivateKey } from '@libp2p/interface'
import { agentIdOf } from '../src/identity/identity.ts'
import { eventHash, newRunId, signEvent } from '../src/runlog/event.ts'
import type { MeshNode } from '../src/node.ts'
import type { AgentEvent } from '../src/runlog/types.ts'
import { startMesh, stopAll, until } from './helpers.ts'
import { rawGossip } from './fixtures/raw-gossip.ts'

const CAP = { capability_id: 'cap:evsub-afterend', version: '1.0.0' }
const TASK = 'task-evsub-afterend'

describe('events after a run\'s end', () => {
  let nodes: MeshNode[] = []
  let A: MeshNode, B: MeshNode
  let bKey: PrivateKey

  beforeAll(async () => {
    bKey = await generateKeyPair('Ed25519')
    nodes = await startMesh(2, { nodeOptions: i => i === 1 ? { privateKey: bKey } : {} })
    ;[A, B] = nodes as [MeshNode, MeshNode]
    B.runs.handle(CAP, async (ctx) => {
      await new Promise(resolve => { ctx.signal.addEventListener('abort', resolve, { once: true }) })
      return { ok: true }
    })
    await B.publishCard({ name: 'evsub-afterend', capabilities: [CAP] })
  })
  afterAll(async () => { await stopAll(nodes) })

  it('are refused, and name no runs to follow', { timeout: 60_000 }, async () => {
    const x = await A.delegate({ to_agent: B.agentId, task_id: TASK, capability: CAP, input: {} })
    // A follows X, which runs (held on B)
    await until(async () => (await A.events.lastEvent(x.run_id))?.type === 'run.started', 'A to hold X\'s start')
    const g = await rawGossip(B, A, TASK)
    let head = (await A.events.lastEvent(x.run_id)) as AgentEvent
    const accepted = A.events.stats.gossip.accepted
    const fakes: string[] = []
    for (let i = 0; i < 10; i++) {
      const fake = agentIdOf(await generateKeyPair('Ed25519'))
      fakes.push(fake)
      const e = await signEvent(bKey, {
        run_id: x.run_id, correlation_id: TASK, executor: B.agentId, seq: head.seq + 1, prev: eventHash(head),
        at: new Date().toISOString(), type: 'run.completed',
        payload: { transition: 'handoff', handoff_to: { run_id: newRunId(fake), agent_id: fake }, output: null }
      })
      await g.sendJudged(e)
      head = e
    }
    const got = A.events.stats.gossip.accepted - accepted
    // the first handoff is the run's own end, and its one successor is followed; nothing after it is placed
    expect(got).toBe(1)
    expect((await A.events.lastEvent(x.run_id))?.seq).toBe(2)
    expect(A.events.participants(TASK).filter(p => fakes.includes(p))).toEqual([fakes[0]])
  })
})
