/**
 * One damaged record (a torn write, a disk fault) does not stop a node from
 * starting: a restart's reads of the live runs, the open verdict notices and
 * the run index skip it (logged, counted); a point read answers with a typed
 * error (INTERNAL, reason corrupt_record), never a SyntaxError.
 */
import { describe, expect, it } from 'vitest'
import { MemoryDatastore } from 'datastore-core'
import { Key } from 'interface-datastore'
import { createMeshNode } from '../src/node.ts'
import { silentLogger } from '../src/logger.ts'
import { RunStore } from '../src/runs/store.ts'
import { runRecord } from './fixtures/run-record.ts'

const enc = new TextEncoder()
const rec = (id: string): ReturnType<typeof runRecord> => runRecord({ run_id: `agent-x:${id}`, agent_id: 'agent-x', delegator: 'agent-me', correlation_id: 'task-z', capability: { capability_id: 'cap:z', version: '1.0.0' }, created_at: '2026-12-06T00:00:00.000Z' })

async function startOn (ds: MemoryDatastore): Promise<unknown> {
  const n = await createMeshNode({ listen: ['/ip4/127.0.0.1/tcp/0'], logger: silentLogger(), datastore: ds })
  try {
    await n.start()
    return undefined
  } catch (err) {
    return err
  } finally {
    await n.stop()
  }
}

async function storeWith (ds: MemoryDatastore, ...ids: string[]): Promise<RunStore> {
  const store = new RunStore(ds)
  await store.open()
  for (const id of ids) await store.putOutgoing(rec(id), true)
  await store.flushOutgoing()
  return store
}

describe('storage: a damaged record at restart', () => {
  it('a live delegated record that does not parse is left out, and the node starts', async () => {
    const ds = new MemoryDatastore()
    await storeWith(ds, 'a', 'b')
    await ds.put(new Key('/aap/outgoing/agent-x%3Ab'), enc.encode('{"run_id":'))
    expect(await startOn(ds)).toBeUndefined()
    const store = new RunStore(ds)
    await store.open()
    const live: string[] = []
    for await (const run of store.live('delegated')) live.push(run.run_id)
    expect(live).toEqual(['agent-x:a'])
    expect(store.stats.corruptRecords).toBe(1)
    // a point read (an API call) gets a typed error
    const err = await store.getOutgoing('agent-x:b').catch((e: unknown) => e)
    expect(err).toMatchObject({ name: 'CorruptRecordError', code: 'INTERNAL', details: { reason: 'corrupt_record' } })
  }, 30_000)

  it('an open verdict notice that does not parse is deleted, and the node starts', async () => {
    const ds = new MemoryDatastore()
    const key = new Key('/aap/verdict-notices/agent-x%3Ac')
    await ds.put(key, enc.encode('{"run_id":"agent-x:c","exec'))
    expect(await startOn(ds)).toBeUndefined()
    expect(await ds.has(key)).toBe(false)
  }, 30_000)

  it('run index summaries that do not parse: the entry stands in, the index is rebuilt at the next open, and the node starts', async () => {
    const ds = new MemoryDatastore()
    await storeWith(ds, 'd')
    for await (const { key } of ds.query({ prefix: '/aap/ridx/d/state/running/' })) await ds.put(key, enc.encode('{"r":'))
    const store = new RunStore(ds)
    await store.open()
    const live: string[] = []
    for await (const run of store.live('delegated')) live.push(run.run_id)
    expect(live).toEqual(['agent-x:d'])
    expect(store.index.stats.corrupt).toBe(1)
    expect(await startOn(ds)).toBeUndefined()
    // the start rebuilt the index from the records: the summary parses again
    for await (const { value } of ds.query({ prefix: '/aap/ridx/d/state/running/' })) expect(JSON.parse(new TextDecoder().decode(value)).r).toBe('agent-x:d')
  }, 30_000)
})
