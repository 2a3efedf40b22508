/**
 * A failed write frees what it staged at once, not on the store's turn: a
 * write that needs room meanwhile finds it. Session 44's second review: the
 * first mend of abandon() freed it only after its cleanup turn, behind every
 * turn queued before, so such a write met STORAGE_FULL with room there.
 */
import { afterEach, describe, expect, it, vi } from 'vitest'
import { ARTIFACT_CHUNK_BYTES } from '../src/constants.ts'
import { JSON_CODEC, RAW_CODEC, cidOf, encodeManifest } from '../src/artifacts/manifest.ts'
import { until } from './helpers.ts'
import { armGate, type FsGate } from './fixtures/fs-gate.ts'
import { TempStores } from './fixtures/artifact-stores.ts'

const gate = vi.hoisted((): FsGate => ({ armed: false, rmCalled: new Set<string>() }))
vi.mock('node:fs/promises', async (importOriginal) => (await import('./fixtures/fs-gate.ts')).gatedFs(await importOriginal(), gate))

const stores = new TempStores()
afterEach(async () => { await stores.cleanup() })

function artifact (bytes: Uint8Array): { id: string, manifest: Uint8Array, cid: string, bytes: Uint8Array } {
  const cid = cidOf(RAW_CODEC, bytes).toString()
  const manifest = encodeManifest({ v: 1, size: bytes.byteLength, chunk_bytes: ARTIFACT_CHUNK_BYTES, chunks: [cid] })
  return { id: cidOf(JSON_CODEC, manifest).toString(), manifest, cid, bytes }
}

describe('a failed write frees its staged bytes at once', () => {
  it('while a commit holds the store\'s turn, a write that fits once the failed one is gone is stored', async () => {
    const store = await stores.open(3000)
    const p = artifact(new Uint8Array(1000).fill(1))
    const wp = await store.begin()
    await store.stage(wp, p.cid, p.bytes)
    await store.commit(wp, p.id, p.manifest, true)
    // W1 (a fetch) borrows P's chunk and stages 1000 bytes of its own
    const w1 = await store.begin()
    expect(store.hasChunk(p.cid, w1)).toBe(true)
    await store.stage(w1, cidOf(RAW_CODEC, new Uint8Array(1000).fill(2)).toString(), new Uint8Array(1000).fill(2))
    // W3 commits (pinned, small) and its turn is held in its pin write
    const c = artifact(new Uint8Array(10).fill(3))
    const w3 = await store.begin()
    await store.stage(w3, c.cid, c.bytes)
    const { entered, open } = armGate(gate)
    const committed = store.commit(w3, c.id, c.manifest, true)
    await entered
    // W1 fails while W3's commit holds the turn: its staged bytes go at once (its borrow is let go on the turn)
    const usedWithW1 = store.used
    const abandoned = store.abandon(w1)
    const w2 = await store.begin()
    try {
      await until(() => store.used === usedWithW1 - 1000, 'the failed write\'s staged bytes freed')
      expect(gate.rmCalled.has(w1.dir)).toBe(true)
      // W2 needs 1000 bytes, and they are there
      const d2 = new Uint8Array(1000).fill(4)
      await store.stage(w2, cidOf(RAW_CODEC, d2).toString(), d2)
    } finally {
      // whatever happened, W3's commit goes on (the store closes after the test)
      open()
    }
    await committed
    await abandoned
    expect(store.used).toBeLessThanOrEqual(store.capacity)
    await store.abandon(w2)
  })
})
