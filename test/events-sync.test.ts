/**
 * /aap/events/0.1.0 against peers that lie or stall. A real node serves the
 * sync protocol with tampered, forged, misattributed, reordered, gapped,
 * forked, foreign or empty-but-"more" pages, or never answers. Each fetch
 * must fail with a typed error and keep nothing; a subscriber that has such
 * a peer among its participants still gets the whole, verified run.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { generateKeyPair } from '@libp2p/crypto/keys'
import type { PrivateKey } from '@libp2p/interface'
import { EVENTS_SYNC_MAX_FRAME_BYTES, EVENTS_SYNC_PROTOCOL } from '../src/constants.ts'
import { eventHash, signEvent } from '../src/runlog/event.ts'
import type { MeshNode } from '../src/node.ts'
import type { AgentEvent } from '../src/runlog/types.ts'
import { serve, type CallContext } from '../src/wire/rpc.ts'
import { rejectsWith, startMesh, stopAll } from './helpers.ts'
import { collect, expectSeqOrdered, hashes } from './events-helpers.ts'

const WORK = { capability_id: 'cap:work', version: '1.0.0' }
const TASK = 'task-sync-01'
const TASK2 = 'task-sync-02'

type Lie = (body: Record<string, unknown>, ctx: CallContext) => Promise<object>

describe('syncing from peers that lie or stall', () => {
  let nodes: MeshNode[] = []
  let A: MeshNode, B: MeshNode, L: MeshNode, F: MeshNode
  let bKey: PrivateKey, lKey: PrivateKey
  let runId = ''
  let real: AgentEvent[] = []
  let otherRun: AgentEvent[] = []
  let lie: Lie = async () => ({ events: [], more: false })

  beforeAll(async () => {
    bKey = await generateKeyPair('Ed25519')
    lKey = await generateKeyPair('Ed25519')
    nodes = await startMesh(5, { nodeOptions: i => i === 1 ? { privateKey: bKey } : i === 2 ? { privateKey: lKey } : {} })
    ;[A, B, L, F] = nodes as [MeshNode, MeshNode, MeshNode, MeshNode]
    B.runs.handle(WORK, async (ctx) => {
      for (let i = 1; i <= 3; i++) await ctx.progress({ step: i })
      return { ok: true }
    })
    await B.publishCard({ name: 'worker', capabilities: [WORK] })
    for (const task of [TASK, TASK2]) {
      const watch = await collect(A, task, { participants: [B.agentId] })
      await A.delegate({ to_agent: B.agentId, task_id: task, capability: WORK, input: {} })
      await watch.until(es => es.some(e => e.type === 'run.completed'), 'the run to complete')
      watch.sub.close()
    }
    const logs = await B.events.readCorrelation(TASK)
    ;[runId] = [...logs.keys()] as [string]
    real = logs.get(runId)!
    otherRun = [...(await B.events.readCorrelation(TASK2)).values()][0]!
    expect(real.map(e => e.type)).toEqual(['run.started', 'run.progress', 'run.progress', 'run.progress', 'run.completed'])

    // L now answers every sync with whatever the current test makes it say
    await L.host.unhandle(EVENTS_SYNC_PROTOCOL)
    await serve(L.host, {
      protocol: EVENTS_SYNC_PROTOCOL,
      maxFrameBytes: EVENTS_SYNC_MAX_FRAME_BYTES,
      methods: {
        run: { handle: async (body, ctx) => lie(body as Record<string, unknown>, ctx) },
        correlation: { handle: async (body, ctx) => lie(body as Record<string, unknown>, ctx) }
      }
    })
  })
  afterAll(async () => { await stopAll(nodes) })

  const fetchFromLiar = async (code: string, say: Lie, reason?: string): Promise<void> => {
    lie = say
    const err = await rejectsWith(F.events.fetchRun(runId, { from: L.agentId, timeoutMs: 500 }), code)
    if (reason !== undefined) expect(err.details?.reason).toBe(reason)
    expect(await F.events.readCorrelation(TASK)).toEqual(new Map())
  }

  it('rejects tampered, forged and misattributed events with INVALID_SIGNATURE', async () => {
    await fetchFromLiar('INVALID_SIGNATURE', async () => ({ events: [real[0], { ...real[1]!, payload: { step: 99 } }], more: false }))
    const { signature: _s, ...unsigned } = real[1]!
    const forgedByL = await signEvent(lKey, unsigned)
    await fetchFromLiar('INVALID_SIGNATURE', async () => ({ events: [real[0], forgedByL], more: false }), 'bad_signature')
    const misattributed = await signEvent(lKey, { ...unsigned, executor: L.agentId })
    await fetchFromLiar('INVALID_SIGNATURE', async () => ({ events: [real[0], misattributed], more: false }), 'misattributed')
    await fetchFromLiar('INVALID_REQUEST', async () => ({ events: [real[0], unsigned], more: false }), 'bad_response')
  })

  it('rejects gaps, reordering, repeats, forks and unrequested events with INVALID_REQUEST', async () => {
    await fetchFromLiar('INVALID_REQUEST', async () => ({ events: [real[0], real[2]], more: false }), 'gap')
    await fetchFromLiar('INVALID_REQUEST', async () => ({ events: [real[1], real[0]], more: false }), 'gap')
    await fetchFromLiar('INVALID_REQUEST', async () => ({ events: [real[0], real[0]], more: false }), 'gap')
    await fetchFromLiar('INVALID_REQUEST', async () => ({ events: otherRun, more: false }), 'unrequested')
    // a fork signed by the real executor: valid signature, wrong predecessor
    const { signature: _s, ...unsigned } = real[2]!
    const fork = await signEvent(bKey, { ...unsigned, payload: { step: 'fork' }, prev: eventHash(real[0]!) })
    await fetchFromLiar('INVALID_REQUEST', async () => ({ events: [real[0], real[1], fork], more: false }), 'bad_chain')
    // pages that do not continue where the last one ended
    let page = 0
    await fetchFromLiar('INVALID_REQUEST', async () => (page++ === 0 ? { events: [real[0]], more: true } : { events: [real[0]], more: false }), 'gap')
  })

  it('rejects a peer that stalls, or claims more and sends nothing, or answers with something else', async () => {
    await fetchFromLiar('INVALID_REQUEST', async () => ({ events: [], more: true }), 'stall')
    await fetchFromLiar('INVALID_REQUEST', async () => ({ items: real }), 'bad_response')
    await fetchFromLiar('TIMEOUT', async (_body, ctx) => new Promise((_resolve, reject) => {
      ctx.signal.addEventListener('abort', () => { reject(new Error('gave up')) }, { once: true })
    }), 'stalled')
    // one page in time, the next never
    let page = 0
    await fetchFromLiar('TIMEOUT', async (_body, ctx) => page++ === 0
      ? { events: [real[0]], more: true }
      : new Promise((_resolve, reject) => { ctx.signal.addEventListener('abort', () => { reject(new Error('gave up')) }, { once: true }) }))
  })

  it('rejects lies on a correlation sync the same way', async () => {
    lie = async () => ({ events: [real[0], { ...real[1]!, payload: { step: 99 } }], more: false })
    await rejectsWith(F.events.fetchCorrelation(TASK, { from: L.agentId }), 'INVALID_SIGNATURE')
    lie = async () => ({ events: otherRun, more: false })
    await rejectsWith(F.events.fetchCorrelation(TASK, { from: L.agentId }), 'INVALID_REQUEST')
    lie = async () => ({ events: [real[0], real[1], real[0]], more: false })
    await rejectsWith(F.events.fetchCorrelation(TASK, { from: L.agentId }), 'INVALID_REQUEST')
    expect(await F.events.readCorrelation(TASK)).toEqual(new Map())
  })

  it('still delivers the whole verified run to a subscriber that has the liar among its participants', async () => {
    lie = async () => ({ events: [real[0], { ...real[1]!, payload: { step: 99 } }, real[2]], more: false })
    const sub = await collect(nodes[4]!, TASK, { participants: [L.agentId, A.agentId] })
    const events = await sub.until(es => es.length >= real.length, 'the whole run')
    expectSeqOrdered(events)
    expect(hashes(events)).toEqual(hashes(real))
    expect(nodes[4]!.events.stats.syncErrors.INVALID_SIGNATURE).toBeGreaterThanOrEqual(1)
    // and an honest fetch straight from the executor works and stores the run
    expect(hashes(await F.events.fetchRun(runId))).toEqual(hashes(real))
    expect(hashes((await F.events.readCorrelation(TASK)).get(runId)!)).toEqual(hashes(real))
  })
})
