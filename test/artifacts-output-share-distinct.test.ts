/**
 * The run outputs' share (ARTIFACT_RUN_OUTPUT_PIN_PERCENT) counts what each
 * artifact holds on disk: its manifest and each distinct chunk once. It
 * counted the manifest's logical `size`, so a run output of 40 identical
 * 1 MiB chunks (1 MiB on disk) counted 40 MiB against a 32 MiB share: it was
 * unpinned right after its own commit, and the next operator upload evicted
 * it. Found by session 56's artifact review.
 */
import { readdir } from 'node:fs/promises'
import { join } from 'node:path'
import { afterEach, describe, expect, it } from 'vitest'
import { ARTIFACT_CHUNK_BYTES } from '../src/constants.ts'
import type { ArtifactStore } from '../src/artifacts/store.ts'
import { TempStores, readAll } from './fixtures/artifact-stores.ts'
import { rejectsWith } from './helpers.ts'

const MIB = 1024 * 1024

/** `count` chunks, each filled with `fill(i)`. */
async function * chunks (count: number, fill: (i: number) => number): AsyncGenerator<Uint8Array> {
  for (let i = 0; i < count; i++) yield new Uint8Array(ARTIFACT_CHUNK_BYTES).fill(fill(i))
}

describe('the run outputs\' share of a 64 MiB store (32 MiB)', () => {
  const stores = new TempStores()
  afterEach(async () => { await stores.cleanup() })

  async function repeatedOutput (store: ArtifactStore): Promise<string> {
    // 40 MiB as the manifest's size, one 1 MiB chunk on disk
    const { id, size } = await store.put(chunks(40, () => 7), 'run-output')
    expect(size).toBe(40 * MIB)
    return id
  }

  it('keeps a run output of 40 identical chunks pinned: it holds 1 MiB, not 40', async () => {
    let store = await stores.open(64 * MIB)
    const id = await repeatedOutput(store)
    expect(store.holds(id)).toEqual({ pinned: true })
    expect(await readdir(join(store.dir, 'outputs'))).toEqual([id])
    // an operator upload that needs the output's room is refused; the pinned output is not evicted for it
    await rejectsWith(store.put(chunks(63, i => i + 10), true), 'STORAGE_FULL')
    expect(store.holds(id)).toEqual({ pinned: true })
    expect(await readAll(store, id)).toBe(40 * MIB)
    // the store opened again counts it the same way (scan.ts)
    store = await stores.reopen(store)
    expect(store.holds(id)).toEqual({ pinned: true })
    expect(await readdir(join(store.dir, 'outputs'))).toEqual([id])
  })

  it('counts a chunk two run outputs share in each of them (the share is per artifact, protocols/artifact.md)', async () => {
    // a: 20 distinct chunks; b: the same 20 and one more. 21 MiB on disk together, but each artifact counts what
    // it holds: 20 MiB + 21 MiB is past the 32 MiB share, so the older one becomes a copy
    const store = await stores.open(64 * MIB)
    const a = (await store.put(chunks(20, i => 100 + i), 'run-output')).id
    const b = (await store.put(chunks(21, i => 100 + i), 'run-output')).id
    expect(store.holds(a)).toEqual({ pinned: false })
    expect(store.holds(b)).toEqual({ pinned: true })
  })
})
