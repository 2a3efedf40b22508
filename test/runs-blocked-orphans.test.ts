/**
 * A delegator may block a run it delegated, and a blocked run holds its run
 * slot until it ends. Strangers with fresh keys (one per share of the slots)
 * delegate a run each, block it and leave: without a check on the executor's
 * side the slots stay held for good, across restarts, and every honest
 * delegator is refused. The executor asks the delegators of its blocked runs
 * now and then whether they are there (orphans.ts): a run whose delegator
 * stays out of reach past the bound fails with DELEGATOR_LOST and frees its
 * slot; a run whose delegator answers stays blocked however long it waits.
 */
import type { PrivateKey } from '@libp2p/interface'
import { generateKeyPair } from '@libp2p/crypto/keys'
import { MemoryDatastore } from 'datastore-core'
import { afterAll, describe, expect, it } from 'vitest'
import { silentLogger } from '../src/logger.ts'
import { createMeshNode, type MeshNode, type MeshNodeOptions } from '../src/node.ts'
import { DELEGATOR_LOST } from '../src/runs/orphans.ts'
import { stopAll, until } from './helpers.ts'

const WORK = { capability_id: 'cap:blocked-orphans', version: '1.0.0' }
const opts = { listen: ['/ip4/127.0.0.1/tcp/0'], localMesh: true, logger: silentLogger() }
const ORPHAN_AFTER_MS = 3_000
const CHECK_MS = 200

describe('blocked runs whose delegator is gone for good', () => {
  const nodes: MeshNode[] = []
  afterAll(async () => { await stopAll(nodes.filter(n => n.host.status === 'started')) })

  let ds = new MemoryDatastore()
  let eKey: PrivateKey

  async function executor (extra: Partial<MeshNodeOptions> = {}): Promise<MeshNode> {
    // 4 slots, 1 per delegator (the default share: a quarter)
    const n = await createMeshNode({ ...opts, ...extra, datastore: ds, privateKey: eKey, maxConcurrentInboundRuns: 4 })
    await n.start()
    nodes.push(n)
    // the work goes on until the run ends (a block does not end it)
    n.runs.handle(WORK, async (ctx) => {
      await new Promise(resolve => { ctx.signal.addEventListener('abort', resolve, { once: true }) })
      return { ok: true }
    })
    await n.publishCard({ name: 'executor', capabilities: [WORK] })
    return n
  }

  async function delegator (E: MeshNode): Promise<MeshNode> {
    const n = await createMeshNode(opts)
    await n.start()
    nodes.push(n)
    await n.join(E.addresses)
    return n
  }

  it('end, freeing their slots (after a restart too), while a blocked run whose delegator answers stays blocked', async () => {
    eKey = await generateKeyPair('Ed25519')
    // the default bounds (hours) while the slots are taken
    let E = await executor()
    const parked: string[] = []
    for (let i = 0; i < 4; i++) {
      const S = await delegator(E)
      const run = await S.delegate({ to_agent: E.agentId, task_id: `park-${i}`, capability: WORK, input: {} })
      // the delegator's own block: the run holds its slot until it ends
      await S.block(run.run_id, 'parked', `cp-${i}`)
      parked.push(run.run_id)
      await S.stop()
    }
    expect(E.runs.slots.size).toBe(4)

    // the executor restarts with small bounds: the blocked runs it recovers are checked too
    await E.stop()
    E = await executor({ liveness: { blockedOrphanAfterMs: ORPHAN_AFTER_MS, blockedCheckIntervalMs: CHECK_MS } })
    await E.runs.recovered()
    expect(E.runs.slots.size).toBe(4)
    await until(() => E.runs.slots.size === 0, 'the parked runs to end', 20_000)
    for (const runId of parked) {
      expect(await E.runs.getRun(runId)).toMatchObject({ state: 'failed', failure: { code: DELEGATOR_LOST } })
    }
    expect(E.runs.orphans.stats.ended).toBe(4)
    expect(E.runs.orphans.stats.probeFailures).toBeGreaterThan(0)

    // an honest delegator is served again, and its own blocked run, while it answers, is kept
    const H = await delegator(E)
    const run = await H.delegate({ to_agent: E.agentId, task_id: 'honest', capability: WORK, input: {} })
    await H.block(run.run_id, 'a person decides', 'cp-honest')
    const probes = E.runs.orphans.stats.probes
    const rounds = E.runs.orphans.stats.rounds
    // well past the bound: rounds enough for two bounds, and H asked more than once
    await until(() => E.runs.orphans.stats.rounds >= rounds + 2 * ORPHAN_AFTER_MS / CHECK_MS && E.runs.orphans.stats.probes >= probes + 2, 'rounds past the bound', 30_000)
    expect((await E.runs.getRun(run.run_id)).state).toBe('blocked')
    expect(E.runs.orphans.stats.ended).toBe(4)
    expect(E.runs.slots.size).toBe(1)

    // and once H is gone for good too, its run ends
    await H.stop()
    await until(() => E.runs.slots.size === 0, 'the honest run to end once its delegator is gone', 20_000)
    expect(await E.runs.getRun(run.run_id)).toMatchObject({ state: 'failed', failure: { code: DELEGATOR_LOST } })
  }, 120_000)

  it('stay blocked while an agent the run authorizes to resume it answers, though its delegator is gone', async () => {
    ds = new MemoryDatastore()
    eKey = await generateKeyPair('Ed25519')
    const E = await executor({ liveness: { blockedOrphanAfterMs: ORPHAN_AFTER_MS, blockedCheckIntervalMs: CHECK_MS } })
    const R = await delegator(E)
    const D = await delegator(E)
    const run = await D.delegate({ to_agent: E.agentId, task_id: 'with-resumer', capability: WORK, input: {}, authorized: [R.agentId] })
    await D.block(run.run_id, 'R decides', 'cp-r')
    await D.stop()
    const { rounds, probeFailures } = E.runs.orphans.stats
    await until(() => E.runs.orphans.stats.rounds >= rounds + 2 * ORPHAN_AFTER_MS / CHECK_MS && E.runs.orphans.stats.probeFailures > probeFailures, 'rounds past the bound', 30_000)
    expect((await E.runs.getRun(run.run_id)).state).toBe('blocked')
    // the resumer can still resume it
    await R.resume(run.run_id, { ok: true })
    expect((await E.runs.getRun(run.run_id)).state).toBe('running')
  }, 60_000)
})
