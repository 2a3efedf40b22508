/**
 * Run outputs are pinned only within their share of the store
 * (ARTIFACT_RUN_OUTPUT_PIN_PERCENT). Every artifact a handler made was pinned
 * like the operator's own uploads, and anyone allowed to call a capability
 * starts its runs: a stranger's few runs filled the store for good, and every
 * later run output and the operator's uploads failed STORAGE_FULL until
 * someone removed artifacts by hand. Now the least recently used run outputs
 * past the share become copies, which a write may evict; the operator's
 * uploads stay pinned for good. Found by session 49's artifact review.
 */
import { readdir } from 'node:fs/promises'
import { join } from 'node:path'
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest'
import { ArtifactStore } from '../src/artifacts/store.ts'
import type { MeshNode } from '../src/node.ts'
import { TempStores } from './fixtures/artifact-stores.ts'
import { startLoneNodes, stopAll } from './helpers.ts'

const MIB = 1024 * 1024
const KIB = 1024

describe('run outputs of a node whose store holds four of them', () => {
  let nodes: MeshNode[] = []
  let A: MeshNode
  beforeAll(async () => {
    nodes = await startLoneNodes(1, { artifactStoreMaxBytes: 4 * MIB + 64 * KIB })
    A = nodes[0]!
  })
  afterAll(async () => { await stopAll(nodes) })

  it('never lock the store: older outputs become copies, and the operator\'s upload is stored pinned', async () => {
    const outputs: string[] = []
    for (let i = 0; i < 6; i++) {
      const part = await A.artifacts.put(new Uint8Array(MIB).fill(i + 1), { media_type: 'application/octet-stream', pin: 'run-output' })
      outputs.push(part.artifact)
    }
    // the two newest fit in half the store (pinned); the ones before are copies, evicted as the store filled
    expect(outputs.slice(4).map(id => A.artifacts.store.holds(id))).toEqual([{ pinned: true }, { pinned: true }])
    expect(outputs.slice(0, 4).every(id => A.artifacts.store.holds(id)?.pinned !== true)).toBe(true)
    const own = await A.artifacts.put(new Uint8Array(MIB).fill(200), { media_type: 'text/plain' })
    expect(A.artifacts.store.holds(own.artifact)).toEqual({ pinned: true })
    // and a run's output still finds room after it
    const later = await A.artifacts.put(new Uint8Array(MIB).fill(201), { media_type: 'application/octet-stream', pin: 'run-output' })
    expect(A.artifacts.store.holds(later.artifact)).toEqual({ pinned: true })
    expect(A.artifacts.store.holds(own.artifact)).toEqual({ pinned: true })
  })
})

describe('the store\'s pins of run outputs', () => {
  const stores = new TempStores()
  afterEach(async () => { await stores.cleanup() })

  async function put (s: ArtifactStore, fill: number, pin: true | 'run-output'): Promise<string> {
    return (await s.put((async function * () { yield new Uint8Array(100 * KIB).fill(fill) })(), pin)).id
  }

  it('are kept in outputs/, and the share applies again when the store opens', async () => {
    let store = await stores.open(MIB)
    const ids = [await put(store, 1, 'run-output'), await put(store, 2, 'run-output'), await put(store, 3, 'run-output')]
    const sorted = [...ids].sort()
    expect(ids.map(id => store.holds(id))).toEqual([{ pinned: true }, { pinned: true }, { pinned: true }])
    expect((await readdir(join(store.dir, 'outputs'))).sort()).toEqual(sorted)
    expect(await readdir(join(store.dir, 'pins'))).toEqual([])
    store = await stores.reopen(store)
    expect(ids.map(id => store.holds(id))).toEqual([{ pinned: true }, { pinned: true }, { pinned: true }])
    // opened with a quarter of the room: run outputs may keep 160 KiB pinned: the newest one
    await store.close()
    store = await stores.open(MIB / 4 + 64 * KIB, { dir: store.dir })
    expect(ids.map(id => store.holds(id))).toEqual([{ pinned: false }, { pinned: false }, { pinned: true }])
    expect(await readdir(join(store.dir, 'outputs'))).toEqual([ids[2]])
  })

  it('give way to the operator\'s pin of the same bytes, which does not count against the share', async () => {
    const store = await stores.open(MIB)
    const a = await put(store, 1, 'run-output')
    expect(await put(store, 1, true)).toBe(a)
    expect(await readdir(join(store.dir, 'pins'))).toEqual([a])
    // five more run outputs of 100 KiB: the share (512 KiB) holds them all with `a` no longer counted
    const more = [await put(store, 2, 'run-output'), await put(store, 3, 'run-output'), await put(store, 4, 'run-output'), await put(store, 5, 'run-output'), await put(store, 6, 'run-output')]
    expect(store.holds(a)).toEqual({ pinned: true })
    expect(more.map(id => store.holds(id)?.pinned)).toEqual([true, true, true, true, true])
    // a sixth passes it: the least recently used run output is a copy now, never the upload
    const last = await put(store, 7, 'run-output')
    expect(store.holds(more[0]!)).toEqual({ pinned: false })
    expect(store.holds(last)).toEqual({ pinned: true })
    expect(store.holds(a)).toEqual({ pinned: true })
  })
})
