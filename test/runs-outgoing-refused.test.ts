/**
 * A delegator's record of a run it delegated is readable in memory at once
 * and written behind (RunStore.putOutgoing). Found by session 46's review: a
 * write of it the disk refused was only logged, so memory stayed ahead of the
 * disk for good. A run delegate() had acknowledged was missing from the
 * listing and forgotten at a restart; a record whose `completed` write was
 * refused stayed listed (and counted) as running. Refused records are now
 * written again once the disk takes writes (src/runs/refused-records.ts).
 */
import { afterEach, describe, expect, it } from 'vitest'
import { MemoryDatastore } from 'datastore-core'
import { generateKeyPair } from '@libp2p/crypto/keys'
import type { MeshNode, MeshNodeOptions } from '../src/node.ts'
import type { RunHandler } from '../src/runs/types.ts'
import { FaultyDatastore } from './fixtures/faulty-datastore.ts'
import { servingNode, stopAll, until } from './helpers.ts'

const CAP = { capability_id: 'cap:outgoing-refused', version: '1.0.0' }
let nodes: MeshNode[] = []
afterEach(async () => { await stopAll(nodes); nodes = [] })

async function node (opts: Partial<MeshNodeOptions> = {}, handler?: RunHandler): Promise<MeshNode> {
  const n = await servingNode(CAP, opts, handler)
  nodes.push(n)
  return n
}

/** A store whose writes of delegator's records fail while `failing`. */
function outgoingFaults (): FaultyDatastore {
  const f = new FaultyDatastore(new MemoryDatastore())
  f.only = (key) => key.startsWith('/aap/outgoing/')
  return f
}

const delegatedIds = async (n: MeshNode, state?: 'completed'): Promise<string[]> =>
  (await n.runs.list({ side: 'delegated', ...(state === undefined ? {} : { state }) })).delegated.map(r => r.run_id)

describe('a delegator\'s record the disk refused', () => {
  it('is written once the disk takes writes: listed, and still known after a restart', async () => {
    const privateKey = await generateKeyPair('Ed25519')
    const f = outgoingFaults()
    let d = await node({ datastore: f.store, privateKey })
    const x = await node()
    expect(await d.join(x.addresses)).toBeGreaterThan(0)
    f.failing = true
    const run = await d.delegate({ to_agent: x.agentId, task_id: 'outgoing-refused-1', capability: CAP, input: {} }, { follow: false })
    await until(() => f.refused > 0, 'the record\'s write to be refused')
    expect(await delegatedIds(d)).toEqual([])
    f.failing = false
    await until(async () => (await delegatedIds(d)).includes(run.run_id), 'the record to be written again')
    expect(d.runs.store.refused.stats.rewritten).toBeGreaterThan(0)
    await d.stop()
    nodes = nodes.filter(n => n !== d)
    d = await node({ datastore: f.store, privateKey })
    expect(await delegatedIds(d)).toEqual([run.run_id])
  })

  it('in a new state is listed in that state once the disk takes writes', async () => {
    const f = outgoingFaults()
    const d = await node({ datastore: f.store })
    const gate = Promise.withResolvers<void>()
    const x = await node({}, async () => { await gate.promise; return { ok: true } })
    expect(await d.join(x.addresses)).toBeGreaterThan(0)
    const run = await d.delegate({ to_agent: x.agentId, task_id: 'outgoing-refused-2', capability: CAP, input: {} })
    await d.runs.store.flushOutgoing()
    expect(await delegatedIds(d)).toEqual([run.run_id])
    f.failing = true
    gate.resolve()
    await until(async () => f.refused > 0 && (await d.runs.store.getOutgoing(run.run_id))?.state === 'completed', 'the completed record\'s write to be refused')
    expect(await delegatedIds(d, 'completed')).toEqual([])
    f.failing = false
    await until(async () => (await delegatedIds(d, 'completed')).includes(run.run_id), 'the listing to show the run completed')
    expect((await d.runs.list({ side: 'delegated' })).counts.delegated).toMatchObject({ running: 0, completed: 1 })
  })
})
