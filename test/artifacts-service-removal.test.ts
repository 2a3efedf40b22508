/**
 * The artifact service over its store, on a lone real host. Found by session
 * 44's review: (1) `open()` handed back a read that had not started, and the
 * artifact counted as being read only from its first chunk, so an eviction
 * in between took it after the API had answered 200 and its length; now the
 * read holds it from the moment it is made. (2) A manifest read for a peer
 * that raced a removal filled the served-manifest cache after the removal,
 * so the removed artifact's chunks were still served; now it is not cached.
 */
import { mkdtemp, rm } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { afterEach, describe, expect, it, vi } from 'vitest'
import { ARTIFACT_CHUNK_BYTES } from '../src/constants.ts'
import { Artifacts } from '../src/artifacts/service.ts'
import type { MeshHost } from '../src/wire/host.ts'
import { JSON_CODEC, RAW_CODEC, cidOf, encodeManifest, type Manifest } from '../src/artifacts/manifest.ts'
import { silentLogger } from '../src/logger.ts'
import { startLoopbackHost } from './helpers.ts'

/** When armed, the next read of a manifest returns its bytes only after `release` (the read itself happened). */
const gate = vi.hoisted(() => ({ armed: false, entered: undefined as undefined | (() => void), release: undefined as undefined | Promise<void> }))
vi.mock('node:fs/promises', async (importOriginal) => {
  const fs = await importOriginal<typeof import('node:fs/promises')>()
  const readFile = (async (path: Parameters<typeof fs.readFile>[0], opts?: Parameters<typeof fs.readFile>[1]) => {
    const bytes = await fs.readFile(path, opts ?? null)
    if (gate.armed && String(path).includes('/manifests/')) {
      gate.armed = false
      gate.entered?.()
      await gate.release
    }
    return bytes
  }) as typeof fs.readFile
  return { ...fs, readFile, default: { ...fs, readFile } }
})

const dirs: string[] = []
const services: Artifacts[] = []
const hosts: MeshHost[] = []
afterEach(async () => {
  for (const s of services.splice(0)) await s.stop()
  for (const h of hosts.splice(0)) await h.stop()
  for (const d of dirs.splice(0)) await rm(d, { recursive: true, force: true })
})

async function service (maxBytes: number): Promise<Artifacts> {
  const d = await mkdtemp(join(tmpdir(), 'aap-artifact-svc-'))
  dirs.push(d)
  const host = await startLoopbackHost()
  hosts.push(host)
  const a = new Artifacts({ host, dir: d, maxBytes, logger: silentLogger() })
  await a.start()
  services.push(a)
  return a
}

/** A fetched copy, committed the way fetchFromEach does. */
async function copy (a: Artifacts, bytes: Uint8Array): Promise<string> {
  const cid = cidOf(RAW_CODEC, bytes).toString()
  const manifest = encodeManifest({ v: 1, size: bytes.byteLength, chunk_bytes: ARTIFACT_CHUNK_BYTES, chunks: [cid] })
  const id = cidOf(JSON_CODEC, manifest).toString()
  const w = await a.store.begin()
  if (!a.store.hasChunk(cid, w)) await a.store.stage(w, cid, bytes)
  await a.store.commit(w, id, manifest)
  return id
}

describe('the artifact service and removals', () => {
  it('an artifact opened for download is not evicted before its first chunk is pulled', async () => {
    const SIZE = 1000
    const a = await service(2 * (SIZE + 200))
    const id = await copy(a, new Uint8Array(SIZE).fill(1))
    // what GET /v1/artifacts/{id} does before it sets 200 + content-length
    const { chunks } = await a.open(id)
    // an upload meanwhile needs room: the copy is the only one it could evict, and it is being read
    await a.put(new Uint8Array(SIZE).fill(2), { media_type: 'application/octet-stream' })
    await expect(a.put(new Uint8Array(SIZE).fill(3), { media_type: 'application/octet-stream' })).rejects.toMatchObject({ code: 'STORAGE_FULL' })
    expect(a.store.stats.evicted).toBe(0)
    // the body stream's first pull
    expect((await chunks.next()).value?.byteLength).toBe(SIZE)
    expect((await chunks.next()).done).toBe(true)
    // read through, it may go
    await a.put(new Uint8Array(SIZE).fill(3), { media_type: 'application/octet-stream' })
    expect(a.store.stats.evicted).toBe(1)
  })

  it('a download closed before its first pull lets go of the artifact', async () => {
    const SIZE = 1000
    const a = await service(2 * (SIZE + 200))
    const id = await copy(a, new Uint8Array(SIZE).fill(1))
    const { chunks } = await a.open(id)
    // the client went away before the body was read (Readable.from calls return on destroy)
    await chunks.return(undefined)
    await a.put(new Uint8Array(SIZE).fill(2), { media_type: 'application/octet-stream' })
    await a.put(new Uint8Array(SIZE).fill(3), { media_type: 'application/octet-stream' })
    expect(a.store.stats.evicted).toBe(1)
    expect(a.store.holds(id)).toBeUndefined()
  })

  it('a manifest read for a peer that raced a removal does not leave the removed artifact in the served cache', async () => {
    const a = await service(64 * ARTIFACT_CHUNK_BYTES)
    const id = await copy(a, new Uint8Array(1000).fill(4))
    let open!: () => void
    gate.release = new Promise<void>(resolve => { open = resolve })
    const entered = new Promise<void>(resolve => { gate.entered = resolve })
    gate.armed = true
    // a peer's chunk request: cache miss, the manifest is read...
    const served = (a as unknown as { servedManifest: (id: string) => Promise<Manifest | undefined> }).servedManifest(id)
    await entered
    // ...the operator removes the artifact (forget() runs: nothing cached yet)...
    await a.remove(id)
    open()
    // ...and the read that had finished does not fill the cache afterwards
    expect(await served).toBeUndefined()
    const cache = (a as unknown as { served: Map<string, Manifest> }).served
    expect(a.store.holds(id)).toBeUndefined()
    expect(cache.has(id)).toBe(false)
  })
})
