/**
 * A write that ends lets go of the chunks it counted on (borrowed) on the
 * store's turn, after every commit queued before it. Found by session 44's
 * review: abandon() let go at once, outside a turn, so a commit queued
 * earlier (or running) that staged or found the same chunk moved or kept it,
 * and then the cleanup turn deleted it: a whole artifact with a missing
 * chunk (ARTIFACT_CORRUPT) and `used` counting a chunk not on disk.
 */
import { readdir } from 'node:fs/promises'
import { join } from 'node:path'
import { afterEach, describe, expect, it, vi } from 'vitest'
import { ARTIFACT_CHUNK_BYTES } from '../src/constants.ts'
import { JSON_CODEC, RAW_CODEC, cidOf, encodeManifest } from '../src/artifacts/manifest.ts'
import type { ArtifactStore } from '../src/artifacts/store.ts'
import type { StagedWrite } from '../src/artifacts/write.ts'
import { armGate, type FsGate } from './fixtures/fs-gate.ts'
import { TempStores, readAll, diskBytes } from './fixtures/artifact-stores.ts'

const gate = vi.hoisted((): FsGate => ({ armed: false, rmCalled: new Set<string>() }))
vi.mock('node:fs/promises', async (importOriginal) => (await import('./fixtures/fs-gate.ts')).gatedFs(await importOriginal(), gate))

const stores = new TempStores()
afterEach(async () => { await stores.cleanup() })

const SIZE = 1000
const X = new Uint8Array(SIZE).fill(5)
const cidX = cidOf(RAW_CODEC, X).toString()
const manifestX = encodeManifest({ v: 1, size: SIZE, chunk_bytes: ARTIFACT_CHUNK_BYTES, chunks: [cidX] })
const idX = cidOf(JSON_CODEC, manifestX).toString()

/**
 * The scene of both cases: W3 has staged X while the store did not hold it; a
 * fetched copy A naming X was committed by another write (X in chunks/); W1
 * (a fetch of some other artifact) found X stored and counts on it; A was
 * removed, so only W1's borrow keeps X.
 */
async function scene (): Promise<{ store: ArtifactStore, w3: StagedWrite, w1: StagedWrite }> {
  const store = await stores.open()
  const w3 = await store.begin()
  await store.stage(w3, cidX, X)
  const wa = await store.begin()
  await store.stage(wa, cidX, X)
  await store.commit(wa, idX, manifestX)
  const w1 = await store.begin()
  expect(store.hasChunk(cidX, w1)).toBe(true)
  await store.remove(idX)
  expect(await readdir(join(store.dir, 'chunks'))).toEqual([cidX])
  return { store, w3, w1 }
}

describe('a write that ends lets go of the chunks it counted on after the commits before it', () => {
  it('a commit queued before the abandon moves its staged copy in; the chunk stays', async () => {
    const { store, w3, w1 } = await scene()
    // W3 commits (its turn is queued) and W1 fails at the same time
    const committed = store.commit(w3, idX, manifestX)
    const abandoned = store.abandon(w1)
    await committed
    await abandoned
    expect(store.holds(idX)).toEqual({ pinned: false })
    expect(await readdir(join(store.dir, 'chunks'))).toEqual([cidX])
    expect(await readAll(store, idX)).toBe(SIZE)
    expect(store.used).toBe(await diskBytes(store.dir))
  })

  it('a commit that found the chunk kept only by a borrow, and the borrow ends while it commits; the chunk stays', async () => {
    const { store, w3, w1 } = await scene()
    // W3's commit turn starts: X is present, so its staged copy is dropped (no borrow, refs still 0)...
    const { entered, open } = armGate(gate)
    const committed = store.commit(w3, idX, manifestX)
    // ...and while it writes its manifest W1 ends
    await entered
    const abandoned = store.abandon(w1)
    open()
    await committed
    await abandoned
    expect(store.holds(idX)).toEqual({ pinned: false })
    expect(await readAll(store, idX)).toBe(SIZE)
    expect(store.used).toBe(await diskBytes(store.dir))
  })
})
