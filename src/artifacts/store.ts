/**
 * The node's artifact store on disk: `chunks/<chunk cid>` and
 * `manifests/<artifact id>`, written through `tmp/` and renamed into place.
 * A manifest is written only after all its chunks, so a manifest on disk
 * means the artifact is whole here. The total size of both folders is
 * bounded by `maxBytes`: a write that would pass it fails with STORAGE_FULL
 * and leaves nothing of itself behind.
 */
import { randomBytes } from 'node:crypto'
import { mkdir, readdir, readFile, rename, rm, stat, writeFile } from 'node:fs/promises'
import { join } from 'node:path'
import { ARTIFACT_CHUNK_BYTES, ARTIFACT_MAX_BYTES } from '../constants.ts'
import { ArtifactCorruptError, InvalidRequestError, StorageFullError } from '../errors.ts'
import type { Logger } from '../logger.ts'
import { JSON_CODEC, RAW_CODEC, cidOf, encodeManifest, parseId, verifyChunk, verifyManifest, type Manifest } from './manifest.ts'

function isMissing (err: unknown): boolean {
  return (err as NodeJS.ErrnoException).code === 'ENOENT'
}

export class ArtifactStore {
  readonly dir: string
  private readonly maxBytes: number
  private readonly log: Logger
  private usedBytes = 0

  constructor (dir: string, maxBytes: number, log: Logger) {
    this.dir = dir
    this.maxBytes = maxBytes
    this.log = log
  }

  /** Bytes the store holds on disk (and has reserved for writes in progress). */
  get used (): number {
    return this.usedBytes
  }

  get capacity (): number {
    return this.maxBytes
  }

  async open (): Promise<void> {
    for (const sub of ['chunks', 'manifests', 'tmp']) await mkdir(join(this.dir, sub), { recursive: true })
    // what a crashed write left in tmp/ is not part of any artifact
    await rm(join(this.dir, 'tmp'), { recursive: true, force: true })
    await mkdir(join(this.dir, 'tmp'), { recursive: true })
    let used = 0
    for (const sub of ['chunks', 'manifests']) {
      for (const name of await readdir(join(this.dir, sub))) used += (await stat(join(this.dir, sub, name))).size
    }
    this.usedBytes = used
  }

  private reserve (bytes: number): void {
    if (this.usedBytes + bytes > this.maxBytes) {
      throw new StorageFullError(`the artifact store holds ${this.usedBytes} of ${this.maxBytes} bytes; ${bytes} more do not fit`, { used_bytes: this.usedBytes, max_bytes: this.maxBytes, needed_bytes: bytes })
    }
    this.usedBytes += bytes
  }

  private async writeFile (path: string, bytes: Uint8Array): Promise<void> {
    const tmp = join(this.dir, 'tmp', randomBytes(12).toString('hex'))
    await writeFile(tmp, bytes)
    await rename(tmp, path)
  }

  private chunkPath (cid: string): string {
    return join(this.dir, 'chunks', cid)
  }

  private manifestPath (id: string): string {
    return join(this.dir, 'manifests', id)
  }

  private async exists (path: string): Promise<boolean> {
    try {
      await stat(path)
      return true
    } catch (err) {
      if (isMissing(err)) return false
      throw err
    }
  }

  /** Store one chunk by its id unless it is there already; true when this call wrote it. */
  private async writeChunk (cid: string, bytes: Uint8Array): Promise<boolean> {
    const path = this.chunkPath(cid)
    if (await this.exists(path)) return false
    this.reserve(bytes.byteLength)
    try {
      await this.writeFile(path, bytes)
    } catch (err) {
      this.usedBytes -= bytes.byteLength
      throw err
    }
    return true
  }

  private async writeManifest (id: string, bytes: Uint8Array): Promise<void> {
    const path = this.manifestPath(id)
    if (await this.exists(path)) return
    this.reserve(bytes.byteLength)
    try {
      await this.writeFile(path, bytes)
    } catch (err) {
      this.usedBytes -= bytes.byteLength
      throw err
    }
  }

  /** Remove chunks a failed write created (best effort, logged). */
  private async forget (cids: string[], sizes: number[]): Promise<void> {
    for (let i = 0; i < cids.length; i++) {
      try {
        await rm(this.chunkPath(cids[i] ?? ''), { force: true })
        this.usedBytes -= sizes[i] ?? 0
      } catch (err) {
        this.log.warn({ err, chunk: cids[i] }, 'a chunk of a failed artifact write could not be removed')
      }
    }
  }

  /**
   * Cut a byte stream into chunks as it arrives and store it; at most one
   * chunk is held in memory. INVALID_REQUEST (`oversized`) past
   * ARTIFACT_MAX_BYTES, STORAGE_FULL past the store's bound.
   */
  async put (source: AsyncIterable<Uint8Array>): Promise<{ id: string, size: number }> {
    const chunks: string[] = []
    const created: string[] = []
    const createdSizes: number[] = []
    let buf = new Uint8Array(ARTIFACT_CHUNK_BYTES)
    let filled = 0
    let size = 0
    const flush = async (): Promise<void> => {
      const bytes = buf.subarray(0, filled)
      const cid = cidOf(RAW_CODEC, bytes).toString()
      if (await this.writeChunk(cid, bytes)) {
        created.push(cid)
        createdSizes.push(bytes.byteLength)
      }
      chunks.push(cid)
      // the chunk is on disk: a fresh buffer, since writeFile may still hold the old one's view
      buf = new Uint8Array(ARTIFACT_CHUNK_BYTES)
      filled = 0
    }
    try {
      for await (const piece of source) {
        let at = 0
        size += piece.byteLength
        if (size > ARTIFACT_MAX_BYTES) throw new InvalidRequestError(`an artifact may hold at most ${ARTIFACT_MAX_BYTES} bytes`, { reason: 'oversized', max_bytes: ARTIFACT_MAX_BYTES })
        while (at < piece.byteLength) {
          const take = Math.min(ARTIFACT_CHUNK_BYTES - filled, piece.byteLength - at)
          buf.set(piece.subarray(at, at + take), filled)
          filled += take
          at += take
          if (filled === ARTIFACT_CHUNK_BYTES) await flush()
        }
      }
      if (filled > 0) await flush()
      const manifest: Manifest = { v: 1, size, chunk_bytes: ARTIFACT_CHUNK_BYTES, chunks }
      const bytes = encodeManifest(manifest)
      const id = cidOf(JSON_CODEC, bytes).toString()
      await this.writeManifest(id, bytes)
      return { id, size }
    } catch (err) {
      await this.forget(created, createdSizes)
      throw err
    }
  }

  /** The artifact's manifest, verified, if the whole artifact is here. */
  async manifest (id: string): Promise<Manifest | undefined> {
    const bytes = await this.manifestBytes(id)
    if (bytes === undefined) return undefined
    return verifyManifest(parseId(id, JSON_CODEC), bytes)
  }

  /** The manifest's bytes as stored (served to peers, who verify them). */
  async manifestBytes (id: string): Promise<Uint8Array | undefined> {
    try {
      return await readFile(this.manifestPath(parseId(id, JSON_CODEC).toString()))
    } catch (err) {
      if (isMissing(err)) return undefined
      throw err
    }
  }

  /** A chunk's bytes as stored (served to peers, who verify them). */
  async chunk (cid: string): Promise<Uint8Array | undefined> {
    try {
      return await readFile(this.chunkPath(parseId(cid, RAW_CODEC, 'chunk id').toString()))
    } catch (err) {
      if (isMissing(err)) return undefined
      throw err
    }
  }

  /** Keep a chunk fetched from a peer; the caller has verified it against the manifest. */
  async keepChunk (cid: string, bytes: Uint8Array): Promise<void> {
    await this.writeChunk(cid, bytes)
  }

  /** Keep a fetched manifest once all its chunks are kept: from then on the artifact is whole here. */
  async keepManifest (id: string, bytes: Uint8Array): Promise<void> {
    await this.writeManifest(id, bytes)
  }

  /** Whether chunk `cid` is stored. */
  async hasChunk (cid: string): Promise<boolean> {
    return this.exists(this.chunkPath(cid))
  }

  /**
   * The artifact's bytes, chunk by chunk, each verified as it is read (a
   * chunk damaged on disk is ARTIFACT_CORRUPT, not served).
   */
  async * read (id: string, m: Manifest): AsyncGenerator<Uint8Array> {
    for (let i = 0; i < m.chunks.length; i++) {
      const bytes = await this.chunk(m.chunks[i] ?? '')
      if (bytes === undefined) throw new ArtifactCorruptError(`chunk ${i} of ${id} is missing from the store`, { reason: 'missing_chunk', artifact: id, index: i })
      verifyChunk(id, m, i, bytes)
      yield bytes
    }
  }
}
