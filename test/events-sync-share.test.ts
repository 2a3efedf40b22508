/**
 * A node's SYNC_CONCURRENCY sync slots were shared by every correlation and every peer with no share per peer:
 * a stranger on one followed topic that announced 16 runs of its own and answered each fetch of them slowly
 * (within every timeout) held every slot, and every other sync of the node waited (an honest fetch took 22 s in
 * the review). Now one agent gets at most SYNC_CONCURRENCY_PER_AGENT slots, and the honest fetch goes on beside
 * the stranger's held ones.
 */
import { generateKeyPair } from '@libp2p/crypto/keys'
import type { PrivateKey } from '@libp2p/interface'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { EVENTS_SYNC_MAX_FRAME_BYTES, EVENTS_SYNC_PROTOCOL, SYNC_CONCURRENCY } from '../src/constants.ts'
import { SYNC_CONCURRENCY_PER_AGENT } from '../src/events/constants.ts'
import { correlationTopic } from '../src/events/topic.ts'
import type { MeshNode } from '../src/node.ts'
import { eventHash, newRunId, signEvent } from '../src/runlog/event.ts'
import type { AgentEvent } from '../src/runlog/types.ts'
import { serve } from '../src/wire/rpc.ts'
import { collect } from './events-helpers.ts'
import { startMesh, stopAll, until } from './helpers.ts'

const WORK = { capability_id: 'cap:sync-share', version: '1.0.0' }
const enc = new TextEncoder()

describe('sync slots shared per agent', () => {
  let nodes: MeshNode[] = []
  let A: MeshNode, B: MeshNode, H: MeshNode, F: MeshNode
  let hKey: PrivateKey
  let hAsks = 0
  const hold = Promise.withResolvers<void>()
  const chains = new Map<string, AgentEvent[]>()

  async function eventOf (runId: string, task: string, seq: number): Promise<AgentEvent> {
    let chain = chains.get(runId)
    if (chain === undefined) chains.set(runId, chain = [])
    while (chain.length < seq) {
      const prev = chain.at(-1)
      chain.push(await signEvent(hKey, {
        run_id: runId, correlation_id: task, type: prev === undefined ? 'run.started' : 'run.progress', payload: { n: chain.length + 1 },
        at: new Date().toISOString(), seq: chain.length + 1, prev: prev === undefined ? null : eventHash(prev), executor: H.agentId
      }))
    }
    const e = chain[seq - 1]
    if (e === undefined) throw new Error('no such event')
    return e
  }

  beforeAll(async () => {
    hKey = await generateKeyPair('Ed25519')
    nodes = await startMesh(4, { nodeOptions: i => i === 2 ? { privateKey: hKey } : {} })
    ;[A, B, H, F] = nodes as [MeshNode, MeshNode, MeshNode, MeshNode]
    B.runs.handle(WORK, async (ctx) => {
      await ctx.progress({ step: 1 })
      return { ok: true }
    })
    await B.publishCard({ name: 'worker', capabilities: [WORK] })
    await H.host.unhandle(EVENTS_SYNC_PROTOCOL)
    await serve(H.host, {
      protocol: EVENTS_SYNC_PROTOCOL,
      maxFrameBytes: EVENTS_SYNC_MAX_FRAME_BYTES,
      methods: {
        // the stranger holds every fetch of its runs (as one that answers just within the time would)
        run: { handle: async () => { hAsks++; await hold.promise; return { events: [], more: false } } },
        correlation: { handle: async () => ({ events: [], more: false }) }
      }
    })
  }, 60_000)
  afterAll(async () => {
    hold.resolve()
    await stopAll(nodes)
  })

  it('lets an honest fetch go on while a stranger holds its share of the node\'s syncs', async () => {
    const done = await A.delegate({ to_agent: B.agentId, task_id: 'task-share-honest', capability: WORK, input: {} })
    await until(async () => (await B.events.lastEvent(done.run_id))?.type === 'run.completed', 'the honest run to end')

    // F follows a task; the stranger H announces SYNC_CONCURRENCY runs of its own on it
    const task = 'task-share-stranger'
    await collect(F, task, {})
    const topic = correlationTopic(task)
    await H.host.dial(F.host.peerId)
    await until(() => H.host.services.pubsub.getSubscribers(topic).some(p => p.equals(F.host.peerId)), 'H to see F on the topic')
    const before = F.events.stats.gossip.unknown_run
    for (let i = 0; i < SYNC_CONCURRENCY; i++) {
      const runId = newRunId(H.agentId)
      await H.host.services.pubsub.publish(topic, enc.encode(JSON.stringify(await eventOf(runId, task, 2))))
    }
    await until(() => F.events.stats.gossip.unknown_run >= before + SYNC_CONCURRENCY, 'the stranger\'s events judged')
    await until(() => hAsks >= SYNC_CONCURRENCY_PER_AGENT, 'F fetching the stranger\'s runs')

    const got = await F.events.fetchRun(done.run_id)
    expect(got.map(e => e.type)).toEqual(['run.started', 'run.progress', 'run.completed'])
    // the stranger's fetches were all still held: none had to time out to make room, and it had its share only
    expect(F.events.stats.syncErrors.TIMEOUT ?? 0).toBe(0)
    expect(F.events.stats.syncErrors.AGENT_NOT_FOUND ?? 0).toBe(0)
    expect(hAsks).toBe(SYNC_CONCURRENCY_PER_AGENT)
  }, 90_000)
})
