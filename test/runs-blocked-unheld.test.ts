/**
 * A blocked run's delegator that answers it holds no live record of the run
 * (it lost its disk, or never delegated it) will never resume it: the
 * executor fails the run with DELEGATOR_LOST after BLOCKED_ORPHAN_UNHELD_ANSWERS
 * such answers in a row, long before the unreachable bound, and frees its
 * slot. A delegator that still holds its record keeps its run blocked.
 */
import { generateKeyPair } from '@libp2p/crypto/keys'
import { MemoryDatastore } from 'datastore-core'
import { afterAll, describe, expect, it } from 'vitest'
import { silentLogger } from '../src/logger.ts'
import type { MeshNode, MeshNodeOptions } from '../src/node.ts'
import { BLOCKED_ORPHAN_UNHELD_ANSWERS } from '../src/runs/constants.ts'
import { DELEGATOR_LOST } from '../src/runs/orphans.ts'
import { startLoneNodes, stopAll, until } from './helpers.ts'

const WORK = { capability_id: 'cap:blocked-unheld', version: '1.0.0' }

describe('a blocked run whose delegator no longer holds it', () => {
  const nodes: MeshNode[] = []
  afterAll(async () => { await stopAll(nodes.filter(n => n.host.status === 'started')) })

  async function node (extra: Partial<MeshNodeOptions> = {}): Promise<MeshNode> {
    const [n] = await startLoneNodes(1, { logger: silentLogger(), ...extra })
    nodes.push(n!)
    return n!
  }

  it('ends with DELEGATOR_LOST, while one its delegator holds stays blocked', async () => {
    // unreachability alone would take a minute: only the delegator's answers end the run here
    const E = await node({ liveness: { blockedOrphanAfterMs: 60_000, blockedCheckIntervalMs: 200 } })
    E.runs.handle(WORK, async (ctx) => {
      await new Promise(resolve => { ctx.signal.addEventListener('abort', resolve, { once: true }) })
      return { ok: true }
    })
    await E.publishCard({ name: 'executor', capabilities: [WORK] })
    const dKey = await generateKeyPair('Ed25519')
    const D = await node({ privateKey: dKey, datastore: new MemoryDatastore() })
    const K = await node()
    for (const n of [D, K]) await n.join(E.addresses)
    const lost = await D.delegate({ to_agent: E.agentId, task_id: 'unheld', capability: WORK, input: {} })
    await D.block(lost.run_id, 'a person decides', 'cp-1')
    const kept = await K.delegate({ to_agent: E.agentId, task_id: 'held', capability: WORK, input: {} })
    await K.block(kept.run_id, 'a person decides', 'cp-2')

    // D comes back under the same key with an empty disk: it holds no record of the run
    await D.stop()
    const D2 = await node({ privateKey: dKey, datastore: new MemoryDatastore() })
    await D2.join(E.addresses)
    await until(async () => (await E.runs.getRun(lost.run_id)).state === 'failed', 'the run D no longer holds to end', 20_000)
    expect(await E.runs.getRun(lost.run_id)).toMatchObject({ failure: { code: DELEGATOR_LOST } })
    expect(E.runs.orphans.stats.unheld).toBeGreaterThanOrEqual(BLOCKED_ORPHAN_UNHELD_ANSWERS)
    const probes = E.runs.orphans.stats.probes
    await until(() => E.runs.orphans.stats.probes >= probes + 4, 'K to be asked again')
    expect((await E.runs.getRun(kept.run_id)).state).toBe('blocked')
    expect(E.runs.slots.size).toBe(1)
  }, 60_000)
})
