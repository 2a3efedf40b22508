/**
 * A run whose run.started a follower judged and refused (a stranger's run with no ticket, another owner's run
 * under the task id, a run past the admitted limit) never gets a head there, so its state stays 'unknown'. The
 * tail rounds took it for a run that may still move and never stopped: each round fetched it again and synced
 * the whole correlation from every participant, for as long as the correlation was followed. Now a refused (or
 * pending) run is not tailed, and the rounds end with the followed runs.
 */
import { generateKeyPair } from '@libp2p/crypto/keys'
import type { PrivateKey } from '@libp2p/interface'
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest'
import { EVENTS_SYNC_MAX_FRAME_BYTES, EVENTS_SYNC_PROTOCOL } from '../src/constants.ts'
import { correlationTopic } from '../src/events/topic.ts'
import type { MeshNode } from '../src/node.ts'
import { eventHash, newRunId, signEvent } from '../src/runlog/event.ts'
import type { AgentEvent } from '../src/runlog/types.ts'
import { serve } from '../src/wire/rpc.ts'
import { collect } from './events-helpers.ts'
import { startMesh, stopAll, until } from './helpers.ts'

// the rounds go on for a quiet watch after the last followed run ended (events-quiet-watch.test.ts); this test is
// about what keeps them going past it, so the watch is short here
vi.mock('../src/events/constants.ts', async (orig) => ({ ...(await orig<typeof import('../src/events/constants.ts')>()), EVENTS_QUIET_WATCH_MS: 1_000 }))

const WORK = { capability_id: 'cap:events-rejected-tail', version: '1.0.0' }
const enc = new TextEncoder()

interface Internals { correlations: { get: (id: string) => { runs: Map<string, { lineage: string, state: string }>, tailTimer?: unknown } | undefined } }

describe('a run whose start was refused, beside a followed run', () => {
  let nodes: MeshNode[] = []
  let A: MeshNode, B: MeshNode, H: MeshNode, F: MeshNode, P: MeshNode
  let hKey: PrivateKey
  const gates = new Map<string, PromiseWithResolvers<void>>()
  let junk: AgentEvent[] = []
  let hRunAsks = 0

  beforeAll(async () => {
    hKey = await generateKeyPair('Ed25519')
    nodes = await startMesh(5, { nodeOptions: i => i === 2 ? { privateKey: hKey } : {} })
    ;[A, B, H, F, P] = nodes as [MeshNode, MeshNode, MeshNode, MeshNode, MeshNode]
    B.runs.handle(WORK, async (ctx) => {
      await ctx.progress({ step: 1 })
      const g = Promise.withResolvers<void>()
      gates.set(ctx.run.correlation_id, g)
      await g.promise
      return { ok: true }
    })
    await B.publishCard({ name: 'worker', capabilities: [WORK] })
    await H.host.unhandle(EVENTS_SYNC_PROTOCOL)
    await serve(H.host, {
      protocol: EVENTS_SYNC_PROTOCOL,
      maxFrameBytes: EVENTS_SYNC_MAX_FRAME_BYTES,
      methods: {
        run: { handle: async (body) => { hRunAsks++; return (body as { run_id: string }).run_id === junk[0]?.run_id && hRunAsks === 1 ? { events: junk, more: false } : { events: [], more: false } } },
        correlation: { handle: async () => ({ events: [], more: false }) }
      }
    })
  }, 60_000)
  afterAll(async () => { await stopAll(nodes) })

  /** Follow a task's run to its end, with a stranger's refused run beside it when `withJunk`; the follower's track. */
  async function followedRun (task: string, withJunk: boolean): Promise<NonNullable<ReturnType<Internals['correlations']['get']>>> {
    const watch = await collect(F, task, { participants: [A.agentId, B.agentId, P.agentId] })
    const run = await A.delegate({ to_agent: B.agentId, task_id: task, capability: WORK, input: {} })
    await watch.until(es => es.some(e => e.run_id === run.run_id && e.type === 'run.progress'), 'the progress')
    const t = (F.events as unknown as Internals).correlations.get(task)
    if (t === undefined) throw new Error('no track of the followed task')
    if (withJunk) {
      const runId = newRunId(H.agentId)
      const started = await signEvent(hKey, { run_id: runId, correlation_id: task, type: 'run.started', payload: { junk: true }, at: new Date().toISOString(), seq: 1, prev: null, executor: H.agentId })
      const second = await signEvent(hKey, { run_id: runId, correlation_id: task, type: 'run.progress', payload: { junk: 2 }, at: new Date().toISOString(), seq: 2, prev: eventHash(started), executor: H.agentId })
      junk = [started, second]
      const topic = correlationTopic(task)
      await H.host.dial(F.host.peerId)
      await until(() => H.host.services.pubsub.getSubscribers(topic).some(p => p.equals(F.host.peerId)), 'H to see F on the topic')
      const before = F.events.stats.gossip.unknown_run
      await H.host.services.pubsub.publish(topic, enc.encode(JSON.stringify(second)))
      await until(() => F.events.stats.gossip.unknown_run > before, 'the junk event judged')
      await until(() => t.runs.get(runId)?.lineage === 'rejected', 'the junk run fetched and rejected')
    }
    gates.get(task)?.resolve()
    await watch.until(es => es.some(e => e.run_id === run.run_id && e.type === 'run.completed'), 'the completion')
    return t
  }

  it('lets the follower stop its tail rounds once the followed run ended, as without it', async () => {
    const control = await followedRun('task-tail-control', false)
    await until(() => control.tailTimer === undefined, 'no tail round due with only the honest run')
    const t = await followedRun('task-tail-junk', true)
    await until(() => t.tailTimer === undefined, 'no tail round due once the honest run ended', 20_000)
    expect([...t.runs.values()].map(r => r.lineage).sort()).toEqual(['admitted', 'rejected'])
  }, 120_000)
})
