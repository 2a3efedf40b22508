/**
 * The run index is derived from the run records, so a damaged index meta
 * record (a torn write, a disk fault) is built again at open rather than
 * stopping the node: before, `{"version":3,"secr` failed the start with a
 * SyntaxError from readJson, and `{"version":3}` with a TypeError from
 * Buffer.from. A stored run record that no longer parses is left out of the
 * rebuild with a warning, not a failed start. Found by session 56's review of
 * storage, on a real LevelDB data dir.
 */
import { mkdtemp, rm } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import type { Datastore } from 'interface-datastore'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { openDatastore } from '../src/identity/identity.ts'
import { RunStore } from '../src/runs/store.ts'
import { rawKey } from '../src/storage/range.ts'
import { runRecord } from './fixtures/run-record.ts'

const META = rawKey('/aap/ridx/meta')
const enc = new TextEncoder()

describe('a run index whose meta record is damaged', () => {
  let dir: string
  let ds: Datastore & { close?: () => Promise<void> }

  beforeAll(async () => {
    dir = await mkdtemp(join(tmpdir(), 'aap-ridx-corrupt-'))
    ds = await openDatastore(dir)
    const store = new RunStore(ds)
    await store.open()
    for (const id of ['a', 'b']) {
      await store.putOutgoing(runRecord({
        run_id: `agent-x:run-${id}`, agent_id: 'agent-x', delegator: 'agent-me', correlation_id: 'task-ridx',
        capability: { capability_id: 'cap:ridx', version: '1.0.0' }, created_at: '2026-12-06T00:00:00.000Z'
      }), true)
    }
    await store.flushOutgoing()
  })
  afterAll(async () => {
    await ds.close?.()
    await rm(dir, { recursive: true, force: true })
  })

  const listed = async (store: RunStore): Promise<string[]> =>
    (await store.page({ side: 'delegated' }, { limit: 10 })).delegated.map(r => r.run_id).sort()

  for (const [what, value] of [['cut short', '{"version":3,"secr'], ['without its secret', '{"version":3}'], ['with a secret that is not hex', '{"version":3,"secret":"zz"}']]) {
    it(`is built again at open when it is ${what}, and lists the stored runs`, async () => {
      await ds.put(META, enc.encode(value))
      const store = new RunStore(ds)
      await store.open()
      expect(await listed(store)).toEqual(['agent-x:run-a', 'agent-x:run-b'])
      // the meta record written by the rebuild is whole: the next open reads it as it is
      const again = new RunStore(ds)
      await again.open()
      expect(await listed(again)).toEqual(['agent-x:run-a', 'agent-x:run-b'])
    })
  }

  it('leaves a stored record that does not parse out of the rebuild, and lists the others', async () => {
    await ds.put(rawKey('/aap/outgoing/agent-x%3Arun-b'), enc.encode('{"run_id":'))
    await ds.put(META, enc.encode('{"version":1}'))
    const store = new RunStore(ds)
    await store.open()
    expect(await listed(store)).toEqual(['agent-x:run-a'])
  })
})
