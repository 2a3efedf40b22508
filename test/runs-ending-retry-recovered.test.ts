/**
 * An executor's ending that a passing disk fault refused is written again as
 * soon as the store takes a write again, not only when its retry timer fires
 * (src/runs/end-retry.ts, storeRecovered in src/storage/write-guard.ts).
 * Found by the full campaign's disk-faults part: runs whose endings fell in a
 * fault held their delegator's slots for up to RUN_WRITE_RETRY_MAX_MS after
 * the disk was fine again, until the delegator hit its share of the
 * executor's slots (DELEGATION_REFUSED, capacity) with nothing running.
 * The retry interval is made far longer than the test here, so only the
 * store's recovery can end the run in time.
 */
import { afterEach, describe, expect, it, vi } from 'vitest'
import { MemoryDatastore } from 'datastore-core'
import type { MeshNode } from '../src/node.ts'
import { FaultyDatastore } from './fixtures/faulty-datastore.ts'
import { servingNode, stopAll, until } from './helpers.ts'

vi.mock('../src/runs/constants.ts', async (orig) => ({
  ...(await orig<typeof import('../src/runs/constants.ts')>()),
  RUN_WRITE_RETRY_MIN_MS: 3_600_000,
  RUN_WRITE_RETRY_MAX_MS: 3_600_000
}))

const CAP = { capability_id: 'cap:ending-retry-recovered', version: '1.0.0' }
let nodes: MeshNode[] = []
afterEach(async () => { await stopAll(nodes); nodes = [] })

describe('an ending refused by a passing disk fault', () => {
  it('is written once the store takes a write again, and the slot it held is free', async () => {
    const faulty = new FaultyDatastore(new MemoryDatastore())
    const gate = Promise.withResolvers<void>()
    const x = await servingNode(CAP, { datastore: faulty.store }, async (ctx) => {
      if (ctx.input.held === true) await gate.promise
      return { n: ctx.input.n }
    })
    const d = await servingNode(CAP)
    nodes.push(x, d)
    expect(await d.join(x.addresses)).toBeGreaterThan(0)
    const held = await d.delegate({ to_agent: x.agentId, task_id: 'recovered-1', capability: CAP, input: { held: true, n: 1 } }, { follow: false })
    faulty.failing = true
    gate.resolve()
    await until(() => faulty.refused >= 1, 'the completion to be refused')
    expect((await x.runs.getRun(held.run_id)).state).toBe('running')
    expect(x.runs.slots.heldBy(d.agentId)).toBe(1)
    // the disk is fine again: the next delegation's commit is the store's first write since
    faulty.failing = false
    const next = await d.delegate({ to_agent: x.agentId, task_id: 'recovered-2', capability: CAP, input: { n: 2 } }, { follow: false })
    await until(async () => (await x.runs.getRun(held.run_id)).state === 'completed', 'the held run to complete once the store took a write')
    expect((await x.runs.getRun(held.run_id)).output).toEqual({ n: 1 })
    await until(async () => (await x.runs.getRun(next.run_id)).state === 'completed', 'the next run to complete')
    expect(x.runs.slots.heldBy(d.agentId)).toBe(0)
    // one refusal only: the retry did not come from its timer
    expect(faulty.refused).toBe(1)
  })
})
