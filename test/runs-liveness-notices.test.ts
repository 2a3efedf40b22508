/**
 * protocols/liveness.md, the notices of verdicts an executor has not seen: a
 * delegator whose executor vanished with many live runs offers their notices
 * one round per executor per interval, and a round ends at the first notice
 * that does not reach it; the open notices are bounded (the oldest dropped,
 * counted, and closed in the store). Once the executor answers again, one
 * round settles all of its notices.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { CONTROL_PROTOCOL } from '../src/constants.ts'
import { createMeshNode, type MeshNode } from '../src/node.ts'
import { until } from './helpers.ts'

const GATE = { capability_id: 'cap:notices-gate', version: '1.0.0' }
const RUNS = 5
const MAX_NOTICES = 4

interface HandlerRecord { handler: Parameters<MeshNode['host']['handle']>[1], options: Parameters<MeshNode['host']['handle']>[2] }

describe('liveness: open notices cost one call per unreached executor per interval, and are bounded', () => {
  let A: MeshNode, B: MeshNode
  const gates: Array<PromiseWithResolvers<void>> = []
  const runIds: string[] = []

  beforeAll(async () => {
    const opts = { listen: ['/ip4/127.0.0.1/tcp/0'], localMesh: true }
    A = await createMeshNode({ ...opts, liveness: { lostAfterMs: 1500, probeIntervalMs: 200, maxNotices: MAX_NOTICES } })
    B = await createMeshNode(opts)
    for (const n of [A, B]) await n.start()
    await B.join([A.addresses[0]!])
    B.runs.handle(GATE, async () => {
      const gate = Promise.withResolvers<void>()
      gates.push(gate)
      await gate.promise
      return { done: true }
    })
    await B.publishCard({ name: 'gated', capabilities: [GATE] })
  })
  afterAll(async () => {
    for (const g of gates) g.resolve()
    for (const n of [A, B]) await n.stop()
  })

  it('an executor cut off with five live runs: four notices kept, one round and one call per interval; all four settle once it answers', async () => {
    for (let i = 0; i < RUNS; i++) {
      const run = await A.delegate({ to_agent: B.agentId, task_id: `task-notices-${i}`, capability: GATE, input: {} })
      runIds.push(run.run_id)
    }
    await until(() => gates.length === RUNS, 'every handler at work')
    await until(() => A.runs.liveness.watching.runs === RUNS, 'every run watched')

    // B stops serving run control (probes, verdict notices) and its open control streams end
    const registrar = (B.host as unknown as { components: { registrar: { getHandler: (p: string) => HandlerRecord } } }).components.registrar
    const control = registrar.getHandler(CONTROL_PROTOCOL)
    await B.host.unhandle(CONTROL_PROTOCOL)
    for (const c of B.host.getConnections()) for (const st of c.streams) if (st.protocol === CONTROL_PROTOCOL) st.abort(new Error('cut off by the test'))

    await until(async () => {
      for (const id of runIds) if ((await A.runs.store.getOutgoing(id))?.failure?.code !== 'EXECUTOR_LOST') return false
      return true
    }, 'the delegator to declare every run lost', 30_000)
    const s = A.runs.liveness.stats
    expect(s.declared).toBe(RUNS)
    expect(s.noticesDropped).toBe(RUNS - MAX_NOTICES)
    expect(A.runs.liveness.openNotices).toBe(MAX_NOTICES)

    // three rounds while B does not answer: each ends at its first offer (before: every notice offered each interval)
    const rounds0 = s.noticeRounds
    const offers0 = s.noticeOffers
    await until(() => s.noticeRounds >= rounds0 + 3, 'three rounds of offers')
    const rounds = s.noticeRounds - rounds0
    const offers = s.noticeOffers - offers0
    expect(offers).toBeGreaterThanOrEqual(rounds - 1)
    expect(offers).toBeLessThanOrEqual(rounds + 1)
    expect(s.noticesDelivered).toBe(0)

    // B answers again: the next round settles its four notices one after the other
    await B.host.handle(CONTROL_PROTOCOL, control.handler, control.options)
    await until(() => A.runs.liveness.openNotices === 0, 'every open notice settled', 30_000)
    expect(s.noticesDelivered).toBe(MAX_NOTICES)
    // the kept four reached the executor, which ended them with the verdict; the dropped one never did
    for (const id of runIds.slice(RUNS - MAX_NOTICES)) {
      expect((await B.runs.store.get(id))?.failure?.code).toBe('EXECUTOR_LOST')
    }
    expect((await B.runs.store.get(runIds[0]!))?.state).toBe('running')
    // and none is left in the store for a restart to offer again
    const stored: string[] = []
    for await (const { notice } of A.runs.store.notices(RUNS)) stored.push(notice.run_id)
    expect(stored).toEqual([])
  })
})
