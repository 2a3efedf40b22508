/**
 * Issue #12, lineage: a correlation belongs to the agent that started it,
 * and a run enters it only with a proven place (protocols/lineage.md). Five
 * real nodes: owner A delegates task T to B; a stranger R tries every way in
 * (delegating under T to an honest executor C, signing runs of its own under
 * T and gossiping them, forging parent and handoff links, flooding junk runs);
 * D is a bystander. Neither the owner's nor the bystander's replay and
 * subscriptions may show one foreign run, and the real runs are not locked
 * out.
 */
import type { PrivateKey } from '@libp2p/interface'
import { generateKeyPair } from '@libp2p/crypto/keys'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { EVENTS_MAX_UNPROVEN_RUNS_PER_CORRELATION } from '../src/constants.ts'
import { correlationTopic } from '../src/events/topic.ts'
import { peerIdOfAgent } from '../src/identity/identity.ts'
import type { MeshNode } from '../src/node.ts'
import { newRunId, signEvent } from '../src/runlog/event.ts'
import { issueDelegationTicket, type RunTicket } from '../src/runlog/ticket.ts'
import type { AgentEvent } from '../src/runlog/types.ts'
import { startMesh, stopAll, until } from './helpers.ts'
import { collect, type Collector } from './events-helpers.ts'

const WORK = { capability_id: 'cap:lineage-work', version: '1.0.0' }
const TASK = 'task-lineage-owned'
const enc = new TextEncoder()

/** A run.started of a run `key`'s agent executes, carrying `ticket`, as a stranger would sign it. */
async function strangerStart (key: PrivateKey, executor: string, ticket: RunTicket | Record<string, unknown>, runId: string, extra: Record<string, unknown> = {}): Promise<AgentEvent> {
  return signEvent(key, {
    run_id: runId,
    correlation_id: TASK,
    type: 'run.started',
    payload: { delegator: executor, capability: WORK, parent_run: null, input: {}, ticket, ...extra },
    at: new Date().toISOString(),
    seq: 1,
    prev: null,
    executor
  })
}

describe('lineage: only the owner\'s runs are the owner\'s task', () => {
  let nodes: MeshNode[] = []
  let A: MeshNode, B: MeshNode, C: MeshNode, R: MeshNode, D: MeshNode
  let rKey: PrivateKey
  let onA: Collector, onD: Collector
  let ownRun = ''
  const foreign = new Set<string>()

  beforeAll(async () => {
    rKey = await generateKeyPair('Ed25519')
    nodes = await startMesh(5, { nodeOptions: i => i === 3 ? { privateKey: rKey } : {} })
    ;[A, B, C, R, D] = nodes as [MeshNode, MeshNode, MeshNode, MeshNode, MeshNode]
    for (const n of [B, C]) {
      n.runs.handle(WORK, async (ctx) => {
        await ctx.progress({ step: 'working' })
        return { done: ctx.run.run_id }
      })
      await n.publishCard({ name: `worker-${n === B ? 'b' : 'c'}`, capabilities: [WORK] })
    }
    onA = await collect(A, TASK, { owner: A.agentId })
    onD = await collect(D, TASK, { owner: A.agentId, participants: [A.agentId, B.agentId, C.agentId, R.agentId] })
  })
  afterAll(async () => { await stopAll(nodes) })

  async function strangerSeesSubscribers (topic: string): Promise<void> {
    for (const n of [A, D]) await R.host.dial(peerIdOfAgent(n.agentId))
    await until(() => [A, D].every(n => R.host.services.pubsub.getSubscribers(topic).some(p => p.toString() === n.agentId)), 'the stranger to see the subscribers')
  }

  it('the owner\'s own run is delivered and replayed everywhere', async () => {
    const run = await A.delegate({ to_agent: B.agentId, task_id: TASK, capability: WORK, input: {} })
    ownRun = run.run_id
    for (const o of [onA, onD]) await o.until(es => es.some(e => e.run_id === ownRun && e.type === 'run.completed'), 'the owner\'s run to complete')
  })

  it('route 1: a stranger delegating under my task id to an honest executor appears nowhere in my task', async () => {
    const stray = await R.delegate({ to_agent: C.agentId, task_id: TASK, capability: WORK, input: { stray: true } })
    foreign.add(stray.run_id)
    // C runs it (it is R's own task under the same id) and publishes it on the topic
    await until(async () => (await C.runs.getRun(stray.run_id)).state === 'completed', 'the stranger\'s run to end at C')
    const replayA = await A.events.replay(TASK, { participants: [B.agentId, C.agentId] })
    const replayD = await D.events.replay(TASK, { owner: A.agentId, participants: [B.agentId, C.agentId] })
    for (const r of [replayA, replayD]) {
      expect(r.owner).toBe(A.agentId)
      expect(r.runs.map(x => x.run_id)).toEqual([ownRun])
    }
    // the bystander saw it, judged it another owner's and kept none of it
    expect(replayD.rejected_runs.find(x => x.run_id === stray.run_id)?.reason ?? 'not held').toMatch(/foreign_owner|not held/)
    expect((await D.events.readCorrelation(TASK)).has(stray.run_id)).toBe(false)
    // the same task id is R's task at C, which executes R's run: each owner sees its own runs only
    const atC = await C.events.replay(TASK)
    expect(atC.owner).toBe(R.agentId)
    expect(atC.runs.map(x => x.run_id)).toEqual([stray.run_id])
  })

  it('a flood of junk runs up to the limits does not lock the real runs out', async () => {
    const topic = correlationTopic(TASK)
    // the flood is ignored (valid runs of R's own task), and gossipsub does not forward ignored messages: only
    // R's direct topic peers receive it, so R connects to A and D first, as an attacker would
    await strangerSeesSubscribers(topic)
    const flood = EVENTS_MAX_UNPROVEN_RUNS_PER_CORRELATION + 32
    for (let i = 0; i < flood; i++) {
      const t = await issueDelegationTicket(rKey, { executor: R.agentId, correlation_id: TASK, capability: WORK, parent_run: null, authorized: [] })
      const e = await strangerStart(rKey, R.agentId, t, t.run_id)
      foreign.add(e.run_id)
      await R.host.services.pubsub.publish(topic, enc.encode(JSON.stringify(e)))
    }
    await until(() => [A, D].every(n => n.events.stats.gossip.foreign_owner >= flood), 'the flood judged')
    // the owner's next runs go through as before (the flood was valid runs of R's own task: ignored, not
    // rejected, so R keeps its peer score until the forgeries below)
    const next = await A.delegate({ to_agent: B.agentId, task_id: TASK, capability: WORK, input: { after: 'flood' } })
    const viaC = await A.delegate({ to_agent: C.agentId, task_id: TASK, capability: WORK, input: { after: 'flood' } })
    for (const o of [onA, onD]) {
      await o.until(es => [next.run_id, viaC.run_id].every(id => es.some(e => e.run_id === id && e.type === 'run.completed')), 'the real runs after the flood')
    }
    const replay = await D.events.replay(TASK, { owner: A.agentId })
    expect(replay.runs.map(r => r.run_id).sort()).toEqual([ownRun, next.run_id, viaC.run_id].sort())
  })

  it('route 2 and 3: runs a stranger signs itself (own root, forged ticket, false parent or handoff link) are never stored or delivered', async () => {
    const topic = correlationTopic(TASK)
    await strangerSeesSubscribers(topic)
    const rId = R.agentId
    const forged: AgentEvent[] = []
    // its own root: a valid ticket, but R's task, not A's
    const own = await issueDelegationTicket(rKey, { executor: rId, correlation_id: TASK, capability: WORK, parent_run: null, authorized: [] })
    forged.push(await strangerStart(rKey, rId, own, own.run_id))
    // a ticket claiming A delegated it, signed by R
    const claimed = { ...own, run_id: newRunId(rId), delegator: A.agentId, issuer: A.agentId }
    forged.push(await strangerStart(rKey, rId, claimed, claimed.run_id))
    // a sub-delegation under A's run, issued by R (only B, the parent's executor, may issue one)
    const sub = await issueDelegationTicket(rKey, { executor: rId, correlation_id: TASK, capability: WORK, parent_run: ownRun, authorized: [] })
    forged.push(await strangerStart(rKey, rId, sub, sub.run_id, { parent_run: ownRun }))
    // a handoff successor of A's run that A's run never named
    const fakeHandoffId = newRunId(rId)
    const handoff = { ...own, run_id: fakeHandoffId, handoff_from: { run_id: ownRun, agent_id: B.agentId }, depth: 1, origin: { ...own, depth: 0 } }
    forged.push(await strangerStart(rKey, rId, handoff, fakeHandoffId, { handoff_from: { run_id: ownRun, agent_id: B.agentId } }))
    for (const e of forged) foreign.add(e.run_id)
    const before = [A, D].map(n => n.events.stats.gossip.foreign_owner + n.events.stats.gossip.lineage_rejected)
    for (const e of forged) await R.host.services.pubsub.publish(topic, enc.encode(JSON.stringify(e)))
    await until(() => [A, D].every((n, i) => n.events.stats.gossip.foreign_owner + n.events.stats.gossip.lineage_rejected >= (before[i] ?? 0) + forged.length), 'every forged start judged')
    for (const n of [A, D]) {
      const held = await n.events.readCorrelation(TASK)
      for (const id of foreign) expect(held.has(id), `${id} stored`).toBe(false)
    }
  })

  it('no subscriber of the owner\'s task ever got one foreign event', () => {
    for (const o of [onA, onD]) {
      expect(o.events.filter(e => foreign.has(e.run_id))).toEqual([])
      expect(new Set(o.events.map(e => e.run_id)).size).toBe(3)
    }
  })
})
