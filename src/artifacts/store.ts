/**
 * The node's artifact store on disk: `chunks/<chunk cid>` and
 * `manifests/<artifact id>`, written through `tmp/` and renamed into place.
 * The chunks of a write in progress (an upload, or a fetch from peers) wait
 * in `tmp/<write>/` and move into `chunks/` with the manifest: a manifest on
 * disk means the artifact is whole here, a write that fails takes away only
 * what it staged, and nothing in `chunks/` is ever removed, so a chunk that
 * complete artifacts share is never lost to another write's failure. The
 * total size is bounded by `maxBytes`: a write that would pass it fails with
 * STORAGE_FULL and leaves nothing of itself behind.
 */
import { randomBytes } from 'node:crypto'
import { mkdir, readdir, readFile, rename, rm, stat, writeFile } from 'node:fs/promises'
import { join, resolve } from 'node:path'
import { ARTIFACT_CHUNK_BYTES, ARTIFACT_MAX_BYTES } from '../constants.ts'
import { AapError, ArtifactCorruptError, InvalidRequestError, StorageFullError } from '../errors.ts'
import type { Logger } from '../logger.ts'
import { storageWriteError } from '../storage/write-guard.ts'
import { JSON_CODEC, RAW_CODEC, cidOf, encodeManifest, parseId, verifyChunk, verifyManifest, type Manifest } from './manifest.ts'

function isMissing (err: unknown): boolean {
  return (err as NodeJS.ErrnoException).code === 'ENOENT'
}

/** Manifests read at once when a store opens (the sweep of chunks no manifest names). */
const OPEN_MANIFEST_READS_AT_ONCE = 32

/**
 * Store folders open in this process: a second store on the same folder
 * would sweep (and clear `tmp/` of) the first one's writes. Across processes
 * the node's LevelDB lock on its data directory keeps a second node out.
 */
const openDirs = new Set<string>()

/** A canonical id (CIDv1, base32) whatever multibase a peer's manifest spelled it in. */
const canonical = (id: string, codec: number): string => parseId(id, codec, codec === RAW_CODEC ? 'chunk id' : 'artifact id').toString()

function storeClosed (): AapError {
  return new AapError('INTERNAL', 'the artifact store closed before the write was whole', { reason: 'store_closed' })
}

function writeSettled (): AapError {
  return new AapError('INTERNAL', 'the artifact write was committed or abandoned already', { reason: 'write_settled' })
}

/** One write in progress: the chunks it stored that `chunks/` did not hold, waiting in `dir` (see ArtifactStore.commit). */
export class StagedWrite {
  readonly dir: string
  /** Chunk id to its bytes on disk. */
  readonly staged = new Map<string, number>()
  /** Chunks being written now, so a second stage of the same chunk (an artifact that repeats one) waits for the first. */
  readonly writing = new Map<string, Promise<void>>()
  settled = false

  constructor (dir: string) {
    this.dir = dir
  }
}

export class ArtifactStore {
  readonly dir: string
  private readonly maxBytes: number
  private readonly log: Logger
  private usedBytes = 0
  /** What `open` found: chunks no manifest named (removed), and manifests it could not read (nothing swept then). */
  readonly stats = { orphanChunksSwept: 0, unreadableManifests: 0 }
  private opened = false
  private closed = false
  /** Commits one at a time: a chunk two writes staged moves into `chunks/` once, and is counted once. */
  private committing: Promise<void> = Promise.resolve()

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
    const dir = resolve(this.dir)
    if (openDirs.has(dir)) throw new Error(`the artifact store ${dir} is open already in this process`)
    openDirs.add(dir)
    this.opened = true
    for (const sub of ['chunks', 'manifests', 'tmp']) await mkdir(join(this.dir, sub), { recursive: true })
    // what a crashed write left in tmp/ is not part of any artifact
    await rm(join(this.dir, 'tmp'), { recursive: true, force: true })
    await mkdir(join(this.dir, 'tmp'), { recursive: true })
    await this.sweepOrphans()
    let used = 0
    for (const sub of ['chunks', 'manifests']) {
      for (const name of await readdir(join(this.dir, sub))) used += (await stat(join(this.dir, sub, name))).size
    }
    this.usedBytes = used
  }

  /**
   * No write commits after this (a write in progress fails with
   * `store_closed`); the commit under way, if any, ends first. The folder may
   * then be opened again.
   */
  async close (): Promise<void> {
    if (!this.opened || this.closed) return
    this.closed = true
    await this.committing
    openDirs.delete(resolve(this.dir))
  }

  /**
   * Remove the chunks no manifest names. A write moves its chunks into
   * `chunks/` before it writes its manifest, so a node killed (or a manifest
   * write failed) in between leaves chunks no artifact uses, counted against
   * the bound for good. While the node runs such a chunk may be counted on by
   * a write in progress (stage skips chunks `chunks/` holds), so they go only
   * here, before any write. A manifest that cannot be read stops the sweep:
   * its chunks are not known.
   */
  private async sweepOrphans (): Promise<void> {
    const named = new Set<string>()
    const ids = await readdir(join(this.dir, 'manifests'))
    // names that are no artifact id are no manifest (an editor's or a file manager's file): left alone
    const manifests = ids.filter(id => { try { canonical(id, JSON_CODEC); return true } catch { return false } })
    for (let i = 0; i < manifests.length; i += OPEN_MANIFEST_READS_AT_ONCE) {
      await Promise.all(manifests.slice(i, i + OPEN_MANIFEST_READS_AT_ONCE).map(async (id) => {
        try {
          const m = verifyManifest(parseId(id, JSON_CODEC), await readFile(join(this.dir, 'manifests', id)))
          for (const cid of m.chunks) named.add(canonical(cid, RAW_CODEC))
        } catch (err) {
          this.stats.unreadableManifests++
          this.log.warn({ err, artifact: id }, 'an artifact manifest on disk cannot be read: no chunk is swept')
        }
      }))
    }
    if (this.stats.unreadableManifests > 0) return
    for (const entry of await readdir(join(this.dir, 'chunks'), { withFileTypes: true })) {
      // only files named by a chunk id are chunks; anything else there is left alone
      if (!entry.isFile()) continue
      let cid: string
      try {
        cid = canonical(entry.name, RAW_CODEC)
      } catch {
        continue
      }
      if (named.has(cid)) continue
      await rm(join(this.dir, 'chunks', entry.name), { force: true })
      this.stats.orphanChunksSwept++
    }
    if (this.stats.orphanChunksSwept > 0) this.log.info({ chunks: this.stats.orphanChunksSwept }, 'removed artifact chunks no manifest names (left by writes that did not finish)')
  }

  private reserve (bytes: number): void {
    if (this.usedBytes + bytes > this.maxBytes) {
      throw new StorageFullError(`the artifact store holds ${this.usedBytes} of ${this.maxBytes} bytes; ${bytes} more do not fit`, { used_bytes: this.usedBytes, max_bytes: this.maxBytes, needed_bytes: bytes })
    }
    this.usedBytes += bytes
  }

  private async writeFile (path: string, bytes: Uint8Array): Promise<void> {
    const tmp = join(this.dir, 'tmp', randomBytes(12).toString('hex'))
    try {
      await writeFile(tmp, bytes)
      await rename(tmp, path)
    } catch (err) {
      await rm(tmp, { force: true }).catch((e: unknown) => { this.log.debug({ err: e }, 'a temporary artifact file could not be removed (it goes when the store opens again)') })
      throw storageWriteError(err, 'artifacts')
    }
  }

  private chunkPath (cid: string): string {
    return join(this.dir, 'chunks', canonical(cid, RAW_CODEC))
  }

  private manifestPath (id: string): string {
    return join(this.dir, 'manifests', canonical(id, JSON_CODEC))
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

  /** A new write: stage its chunks with `stage`, then `commit` it or `abandon` it (exactly one of them). */
  async begin (): Promise<StagedWrite> {
    const w = new StagedWrite(join(this.dir, 'tmp', `w-${randomBytes(12).toString('hex')}`))
    try {
      await mkdir(w.dir)
    } catch (err) {
      throw storageWriteError(err, 'artifacts')
    }
    return w
  }

  /** Whether chunk `cid` is stored, or staged by `w`. */
  async hasChunk (cid: string, w?: StagedWrite): Promise<boolean> {
    return w?.staged.has(cid) === true || await this.exists(this.chunkPath(cid))
  }

  /** Keep one chunk for write `w` (verified by the caller) unless the store or `w` holds it already; stages of one write may run at once. */
  async stage (w: StagedWrite, cid: string, bytes: Uint8Array): Promise<void> {
    if (this.closed) throw storeClosed()
    if (w.settled) throw writeSettled()
    const earlier = w.writing.get(cid)
    if (earlier !== undefined) return await earlier
    const writing = this.stageOnce(w, cid, bytes)
    w.writing.set(cid, writing)
    try {
      await writing
    } finally {
      w.writing.delete(cid)
    }
  }

  private async stageOnce (w: StagedWrite, cid: string, bytes: Uint8Array): Promise<void> {
    if (await this.hasChunk(cid, w)) return
    this.reserve(bytes.byteLength)
    try {
      await writeFile(join(w.dir, cid), bytes)
    } catch (err) {
      this.usedBytes -= bytes.byteLength
      // a full or failing disk is STORAGE_FULL, as the datastore's is: the fetch stops, no other holder is tried
      throw storageWriteError(err, 'artifacts')
    }
    w.staged.set(cid, bytes.byteLength)
  }

  /** The write is whole: its chunks move into `chunks/`, then its manifest is written; from then on the artifact is here. */
  async commit (w: StagedWrite, id: string, manifest: Uint8Array): Promise<void> {
    const turn = this.committing.then(async () => {
      if (this.closed) throw storeClosed()
      // a write abandoned (a commit of it that failed) has nothing staged any more: it must not become a manifest
      if (w.settled) throw writeSettled()
      // the manifest's room first: a store too full for it refuses the write before any chunk has moved
      const manifestPath = this.manifestPath(id)
      const fresh = !(await this.exists(manifestPath))
      if (fresh) this.reserve(manifest.byteLength)
      try {
        await this.moveStaged(w)
        if (fresh) await this.writeFile(manifestPath, manifest)
      } catch (err) {
        if (fresh) this.usedBytes -= manifest.byteLength
        throw err
      }
    })
    // the next commit waits for this one, not for its success (its caller has the error)
    this.committing = turn.then(() => {}, (err: unknown) => { this.log.debug({ err, artifact: id }, 'an artifact commit failed') })
    try {
      await turn
    } finally {
      await this.abandon(w)
    }
  }

  /** Move a write's staged chunks into `chunks/` (a chunk another write brought meanwhile is kept once, counted once). */
  private async moveStaged (w: StagedWrite): Promise<void> {
    for (const [cid, size] of w.staged) {
      const path = this.chunkPath(cid)
      if (await this.exists(path)) {
        await rm(join(w.dir, cid), { force: true })
        this.usedBytes -= size
      } else {
        try {
          await rename(join(w.dir, cid), path)
        } catch (err) {
          throw storageWriteError(err, 'artifacts')
        }
      }
      w.staged.delete(cid)
    }
  }

  /** The write failed: what it staged goes, and only that (best effort, logged). */
  async abandon (w: StagedWrite): Promise<void> {
    if (w.settled) return
    w.settled = true
    try {
      await rm(w.dir, { recursive: true, force: true })
      for (const size of w.staged.values()) this.usedBytes -= size
      w.staged.clear()
    } catch (err) {
      this.log.warn({ err, dir: w.dir }, 'the chunks of a failed artifact write could not be removed (they go when the store opens again)')
    }
  }

  /**
   * Cut a byte stream into chunks as it arrives and store it; at most one
   * chunk is held in memory. INVALID_REQUEST (`oversized`) past
   * ARTIFACT_MAX_BYTES, STORAGE_FULL past the store's bound.
   */
  async put (source: AsyncIterable<Uint8Array>): Promise<{ id: string, size: number }> {
    const chunks: string[] = []
    const w = await this.begin()
    let buf = new Uint8Array(ARTIFACT_CHUNK_BYTES)
    let filled = 0
    let size = 0
    const flush = async (): Promise<void> => {
      const bytes = buf.subarray(0, filled)
      const cid = cidOf(RAW_CODEC, bytes).toString()
      await this.stage(w, cid, bytes)
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
      await this.commit(w, id, bytes)
      return { id, size }
    } finally {
      await this.abandon(w)
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
      return await readFile(this.manifestPath(id))
    } catch (err) {
      if (isMissing(err)) return undefined
      throw err
    }
  }

  /** A chunk's bytes as stored (served to peers, who verify them). */
  async chunk (cid: string): Promise<Uint8Array | undefined> {
    try {
      return await readFile(this.chunkPath(cid))
    } catch (err) {
      if (isMissing(err)) return undefined
      throw err
    }
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
