/**
 * The node's artifact store on disk: `chunks/<chunk cid>`, `manifests/<artifact id>`, and `pins/<artifact id>`
 * or `outputs/<artifact id>` (pins.ts), written through `tmp/` and renamed into place (files.ts). The chunks of a write in
 * progress (an upload, or a fetch from peers) wait in `tmp/<write>/` and move into `chunks/` with the manifest:
 * a manifest on disk means the artifact is whole here, and a write that fails takes away only what it staged.
 * A chunk leaves `chunks/` only when no manifest names it and no write in progress counts on it (the catalog,
 * catalog.ts, keeps that count), so a chunk that complete artifacts share is never lost to another write's
 * failure or to a removal.
 *
 * The total size is bounded by `maxBytes`. A write that would pass it first evicts copies (fetched from peers,
 * or run outputs past their share, pins.ts), least recently used first (never a pinned artifact, nor one being
 * read); if that is not enough it fails with STORAGE_FULL and leaves nothing of itself behind. `remove` takes
 * any artifact away on purpose.
 */
import { randomBytes } from 'node:crypto'
import { mkdir, readFile, rename, rm } from 'node:fs/promises'
import { join, resolve } from 'node:path'
import { ArtifactCorruptError, ArtifactNotFoundError, StorageFullError } from '../errors.ts'
import type { Logger } from '../logger.ts'
import { storageWriteError } from '../storage/write-guard.ts'
import { JSON_CODEC, RAW_CODEC, checkHeldLengths, distinctChunkBytes, parseId, verifyChunk, verifyManifest, type Manifest } from './manifest.ts'
import { Catalog, letGo } from './catalog.ts'
import { putStream } from './chunker.ts'
import { StagedWrite, chunkNotHeld, storeClosed, writeDurably, writeSettled } from './write.ts'
import { StoreFiles } from './files.ts'
import { canonical, canonicalOrUndefined, fileSize, isMissing, persistUse, scanStore, type ArtifactStoreStats } from './scan.ts'
import { ARTIFACT_STORE_MAX_ARTIFACTS } from './constants.ts'
import { boundOutputs, pinFolder, type Pin } from './pins.ts'
import { heldIterator } from '../util/held-iterator.ts'

/**
 * Store folders open in this process: a second store on the same folder would sweep (and clear `tmp/` of) the first
 * one's writes. Across processes the node's LevelDB lock on its data directory keeps a second node out.
 */
const openDirs = new Set<string>()

/** An artifact in the store's listing (GET /v1/artifacts). */
export interface StoredArtifact { artifact: string, size: number, pinned: boolean, last_used: string }

/** Why an artifact left the store: removed on purpose, or evicted to make room. */
export type RemovedBy = 'removed' | 'evicted'

export class ArtifactStore {
  readonly dir: string
  private readonly maxBytes: number
  private readonly maxArtifacts: number
  private readonly log: Logger
  private usedBytes = 0
  readonly stats: ArtifactStoreStats = { orphanChunksSwept: 0, unreadableManifests: 0, removed: 0, evicted: 0, deleteFailures: 0, useWriteFailures: 0 }
  private readonly catalog = new Catalog()
  private readonly files: StoreFiles
  /** False when a manifest could not be read at open: its chunks are not known, so no chunk is deleted. */
  private chunksKnown = true
  private opened = false
  private closed = false
  /** Commits and removals one at a time: a chunk two writes staged moves into `chunks/` once, and is counted once. */
  private turns: Promise<void> = Promise.resolve()
  /** Told of every artifact that leaves the store (the service stops serving and announcing it). */
  onRemoved?: (id: string, by: RemovedBy) => void
  /**
   * Asked to free what it can when a write needs room that evicting copies did not make; whether it freed any.
   * The service drops the chunks it kept of failed fetches (kept.ts): they never make a write fail.
   */
  spare?: () => Promise<boolean>

  constructor (dir: string, maxBytes: number, log: Logger, maxArtifacts = ARTIFACT_STORE_MAX_ARTIFACTS) {
    this.dir = dir
    this.maxBytes = maxBytes
    this.maxArtifacts = maxArtifacts
    this.log = log
    this.files = new StoreFiles(dir, this.stats, log)
  }

  /** Bytes the store holds on disk (and has reserved for writes in progress). */
  get used (): number {
    return this.usedBytes
  }

  get capacity (): number {
    return this.maxBytes
  }

  /** Artifacts whole in the store. */
  get count (): number {
    return this.catalog.size
  }

  /** The bound on `count`. */
  get maxCount (): number {
    return this.maxArtifacts
  }

  async open (): Promise<void> {
    const dir = resolve(this.dir)
    if (openDirs.has(dir)) throw new Error(`the artifact store ${dir} is open already in this process`)
    openDirs.add(dir)
    this.opened = true
    const found = await scanStore(this.dir, this.catalog, this.stats, this.log)
    this.usedBytes = found.used
    this.chunksKnown = found.chunksKnown
    // the share applies to what an earlier run of the node pinned too (its bounds may have changed since)
    await this.boundOutputs()
  }

  private async boundOutputs (): Promise<void> {
    await boundOutputs(this.catalog, this.dir, this.maxBytes, this.maxArtifacts, this.stats, this.log)
  }

  /**
   * No write commits after this (a write in progress fails with `store_closed`); the commit or removal under
   * way, if any, ends first. The folder may then be opened again.
   */
  async close (): Promise<void> {
    if (!this.opened || this.closed) return
    this.closed = true
    await this.turns
    openDirs.delete(resolve(this.dir))
  }

  /** Run `fn` after every commit and removal before it (whether they failed or not). */
  private turn<T> (fn: () => Promise<T>, what: string): Promise<T> {
    const t = this.turns.then(fn)
    // the next turn waits for this one, not for its success (its caller has the error)
    this.turns = t.then(() => {}, (err: unknown) => { this.log.debug({ err }, `an artifact ${what} failed`) })
    return t
  }

  /** Count `bytes` against the bound, evicting fetched copies first when they do not fit, then what `spare` frees. */
  private async room (bytes: number): Promise<void> {
    if (this.usedBytes + bytes <= this.maxBytes) {
      this.usedBytes += bytes
      return
    }
    const evict = async (): Promise<void> => await this.turn(async () => {
      await this.evictFor(bytes, 0)
      this.reserve(bytes)
    }, 'eviction')
    try {
      await evict()
    } catch (err) {
      // not on a turn: what `spare` drops lets its chunks go on a turn of its own
      if (!(err instanceof StorageFullError) || !(await this.spare?.() ?? false)) throw err
      await evict()
    }
  }

  /** On a turn: evict the least recently used copies until `bytes` and `artifacts` more fit, or none is left to evict. */
  private async evictFor (bytes: number, artifacts: number): Promise<void> {
    while (this.usedBytes + bytes > this.maxBytes || this.catalog.size + artifacts > this.maxArtifacts) {
      // chunks unknown (a manifest unreadable at open): an eviction could free nothing but manifests
      const id = this.chunksKnown ? this.catalog.evictable() : undefined
      if (id === undefined) return
      await this.removeOnTurn(id, 'evicted')
    }
  }

  private reserve (bytes: number): void {
    if (this.usedBytes + bytes > this.maxBytes) {
      throw new StorageFullError(`the artifact store holds ${this.usedBytes} of ${this.maxBytes} bytes; ${bytes} more do not fit`, { used_bytes: this.usedBytes, max_bytes: this.maxBytes, needed_bytes: bytes })
    }
    this.usedBytes += bytes
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

  /** Whether chunk `cid` is stored, or staged by `w`. With `w`, a stored chunk is kept for it until it ends (it may name it unstaged). */
  hasChunk (cid: string, w?: StagedWrite): boolean {
    return this.chunkSize(cid, w) !== undefined
  }

  /** The recorded size of chunk `cid` if it is stored or staged by `w` (kept for `w` as `hasChunk` does), else undefined. */
  chunkSize (cid: string, w?: StagedWrite): number | undefined {
    const id = canonical(cid, RAW_CODEC)
    const size = w?.staged.get(id) ?? this.catalog.chunkSize(id)
    if (size !== undefined && w !== undefined && !w.settled && !w.staged.has(id) && !w.borrowed.has(id)) {
      w.borrowed.add(id)
      this.catalog.borrow(id)
    }
    return size
  }

  /** Keep one chunk for write `w` (verified by the caller) unless the store or `w` holds it already; stages of one write may run at once. */
  async stage (w: StagedWrite, cid: string, bytes: Uint8Array): Promise<void> {
    if (this.closed) throw storeClosed()
    if (w.settled) throw writeSettled()
    const id = canonical(cid, RAW_CODEC)
    const earlier = w.writing.get(id)
    if (earlier !== undefined) return await earlier
    const writing = this.stageOnce(w, id, bytes)
    w.writing.set(id, writing)
    try {
      await writing
    } finally {
      w.writing.delete(id)
    }
  }

  private async stageOnce (w: StagedWrite, cid: string, bytes: Uint8Array): Promise<void> {
    if (this.hasChunk(cid, w)) return
    await this.room(bytes.byteLength)
    try {
      await writeDurably(join(w.dir, cid), bytes)
    } catch (err) {
      this.usedBytes -= bytes.byteLength
      // a full or failing disk is STORAGE_FULL, as the datastore's is: the fetch stops, no other holder is tried
      throw storageWriteError(err, 'artifacts')
    }
    w.staged.set(cid, bytes.byteLength)
  }

  /**
   * The write is whole: its chunks move into `chunks/`, then its manifest is written; from then on the artifact
   * is here. `pin` true keeps it until it is removed on purpose (the node's own uploads), `'run-output'` while
   * run outputs stay within their share (pins.ts); false: a copy the store may evict.
   */
  async commit (w: StagedWrite, id: string, manifest: Uint8Array, pin: Pin = false): Promise<void> {
    try {
      if (!(await this.turn(async () => await this.commitOnTurn(w, id, manifest, pin, this.spare !== undefined), 'commit'))) {
        // the manifest's room, past the copies: what `spare` frees, off the turn (what it drops goes on turns of its own)
        await this.spare?.()
        await this.turn(async () => await this.commitOnTurn(w, id, manifest, pin, false), 'commit')
      }
    } finally {
      await this.abandon(w)
    }
  }

  /** On a turn: `commit`; false, with nothing done, when the manifest does not fit and `spare` is to be asked first. */
  private async commitOnTurn (w: StagedWrite, id: string, manifest: Uint8Array, pin: Pin, spare: boolean): Promise<boolean> {
    if (this.closed) throw storeClosed()
    // a write abandoned (a commit of it that failed) has nothing staged any more: it must not become a manifest
    if (w.settled) throw writeSettled()
    const key = canonical(id, JSON_CODEC)
    const here = this.catalog.get(key)
    if (here !== undefined) {
      await this.moveStaged(w)
      // an upload pins for good what a run output or a copy only kept; a run output pins a copy
      if (pin !== false && (!here.pinned || (pin === true && here.output === true))) {
        await this.files.write(this.files.pinPath(key, pin), new Uint8Array(0))
        // the pin is on disk before the write is answered, or a power loss leaves the upload a copy; one not synced goes
        await this.files.sync(pinFolder(pin)).catch(async (err: unknown) => {
          await this.files.deletePin(key, pin)
          throw err
        })
        if (pin === true) this.catalog.pin(key)
        else this.catalog.pinOutput(key)
      }
      this.touch(key)
      if (pin === 'run-output') await this.boundOutputs()
      return true
    }
    const m = verifyManifest(parseId(key, JSON_CODEC), manifest)
    const chunks = m.chunks.map(c => canonical(c, RAW_CODEC))
    // a chunk at a place that holds another length, or held nowhere: never whole (checked before anything moves)
    const sizes = chunks.map(c => w.staged.get(c) ?? this.catalog.chunkSize(c))
    checkHeldLengths(key, m, i => sizes[i])
    const missing = sizes.indexOf(undefined)
    if (missing >= 0) throw chunkNotHeld(id, missing)
    // the manifest's room first: a store too full for it refuses the write before any chunk has moved
    await this.evictFor(manifest.byteLength, 1)
    if (this.catalog.size + 1 > this.maxArtifacts) {
      throw new StorageFullError(`the artifact store holds ${this.catalog.size} artifacts, its most`, { reason: 'too_many_artifacts', max_artifacts: this.maxArtifacts })
    }
    if (spare && this.usedBytes + manifest.byteLength > this.maxBytes) return false
    this.reserve(manifest.byteLength)
    // a manifest and a pin already on disk: one that could not be read at open (counted then), and its pin;
    // with every manifest read at open there is none, and nothing to look for
    const [oldManifest, oldPin, oldOutput] = this.stats.unreadableManifests === 0 ? [] : await Promise.all([fileSize(this.files.manifestPath(key)), fileSize(this.files.pinPath(key)), fileSize(this.files.pinPath(key, 'run-output'))])
    // the pin this commit writes (none where one as strong is on disk), and how the artifact is kept then
    const wrote = pin === true ? (oldPin === undefined ? pin : undefined) : (pin === 'run-output' && oldPin === undefined && oldOutput === undefined ? pin : undefined)
    const kept: Pin = pin === true || oldPin !== undefined ? true : pin === 'run-output' || oldOutput !== undefined ? 'run-output' : false
    // set once the manifest is renamed into place (over the old one, if any); a failure after it must take it back
    let placed = false
    let failed: { err: unknown } | undefined
    try {
      await this.moveStaged(w)
      // the chunks' renames are on disk before a manifest names them, and the manifest's (and pin's) before the commit ends
      await this.files.sync('chunks')
      if (wrote !== undefined) await this.files.write(this.files.pinPath(key, wrote), new Uint8Array(0))
      await this.files.write(this.files.manifestPath(key), manifest)
      placed = true
      await this.files.sync(...(wrote !== undefined ? [pinFolder(wrote), 'manifests'] : ['manifests']))
    } catch (err) {
      // the manifest goes before its chunks: one left without them counts as whole at the next open, and is never
      // fetched again; one that cannot go keeps them (below)
      if (!placed || await this.files.unplaceManifest(key)) {
        this.usedBytes -= manifest.byteLength + (placed ? oldManifest ?? 0 : 0)
        // a pin this commit wrote must not pin a later copy of the same id
        if (wrote !== undefined) await this.files.deletePin(key, wrote)
        // chunks that moved and that no manifest names now: they go
        await this.deleteChunks(letGo(chunks.map(c => this.catalog.orphan(c))))
        throw err
      }
      // the manifest stays, so its chunks and pin do too: the artifact is here as the next open finds it, and the
      // caller still hears why the commit failed
      failed = { err }
    }
    if (oldManifest !== undefined) this.usedBytes -= oldManifest
    this.catalog.add(key, { manifestBytes: manifest.byteLength, size: m.size, heldBytes: manifest.byteLength + distinctChunkBytes(m), pinned: kept !== false, output: kept === 'run-output', lastUsed: Date.now(), persistedUse: Date.now(), readers: 0 }, chunks)
    if (kept === 'run-output') await this.boundOutputs()
    if (failed !== undefined) throw failed.err
    return true
  }

  /** Move a write's staged chunks into `chunks/` (a chunk another write brought meanwhile is kept once, counted once). */
  private async moveStaged (w: StagedWrite): Promise<void> {
    for (const [cid, size] of w.staged) {
      if (this.catalog.hasChunk(cid)) {
        await rm(join(w.dir, cid), { force: true })
        this.usedBytes -= size
      } else {
        try {
          await rename(join(w.dir, cid), this.files.chunkPath(cid))
        } catch (err) {
          throw storageWriteError(err, 'artifacts')
        }
        this.catalog.addChunk(cid, size)
      }
      w.staged.delete(cid)
    }
  }

  /** The write failed, or was committed: what it staged goes, and the chunks it counted on are let go (best effort, logged). */
  async abandon (w: StagedWrite): Promise<void> {
    if (w.settled) return
    w.settled = true
    // what it staged is its own: it goes at once, so a write that needs room does not wait for a turn
    try {
      await rm(w.dir, { recursive: true, force: true })
      for (const size of w.staged.values()) this.usedBytes -= size
      w.staged.clear()
    } catch (err) {
      this.log.warn({ err, dir: w.dir }, 'the chunks of a failed artifact write could not be removed (they go when the store opens again)')
    }
    const borrowed = [...w.borrowed]
    w.borrowed.clear()
    if (borrowed.length === 0) return
    // on a turn: a commit before it that names one of these chunks has counted it by then, so only a chunk
    // no manifest names goes (one whose artifact was removed while this write counted on it)
    const letThemGo = (): Array<[string, number]> => letGo(borrowed.map(cid => this.catalog.release(cid)))
    if (this.closed) letThemGo()
    else await this.turn(async () => { await this.deleteChunks(letThemGo()) }, 'cleanup')
  }

  /**
   * Take an artifact out of the store, pinned or not, and the chunks no other artifact names; returns the bytes
   * freed. ARTIFACT_NOT_FOUND when it is not here. A read of it in progress ends with it (`reason: removed`).
   */
  async remove (id: string): Promise<number> {
    const key = canonical(id, JSON_CODEC)
    return await this.turn(async () => {
      if (this.closed) throw storeClosed()
      return await this.removeOnTurn(key, 'removed')
    }, 'removal')
  }

  private async removeOnTurn (id: string, by: RemovedBy): Promise<number> {
    const e = this.catalog.get(id)
    if (e === undefined) throw new ArtifactNotFoundError(`no artifact ${id} here`, { artifact: id })
    let chunks: string[] = []
    try {
      chunks = verifyManifest(parseId(id, JSON_CODEC), await readFile(this.files.manifestPath(id))).chunks.map(c => canonical(c, RAW_CODEC))
    } catch (err) {
      // its chunks stay counted on until the store opens again, which sweeps what no manifest names
      this.stats.deleteFailures++
      this.log.warn({ err, artifact: id }, 'the manifest of an artifact being removed cannot be read: its chunks stay until the store opens again')
    }
    // a read opened meanwhile keeps the copy (evictFor takes the next); else out of the catalog now, before the rm
    if (by === 'evicted' && e.readers > 0) return 0
    const output = e.output === true
    const unnamed = this.catalog.remove(id, chunks)
    // the manifest first: from then on the artifact is not here (a crash after it leaves chunks the next open sweeps)
    try {
      await rm(this.files.manifestPath(id), { force: true })
    } catch (err) {
      this.catalog.restore(id, e, output, chunks, unnamed)
      throw storageWriteError(err, 'artifacts')
    }
    const before = this.usedBytes
    this.usedBytes -= e.manifestBytes
    // whether or not it was pinned: a pin left by an earlier failed commit goes too
    await this.files.deletePin(id)
    await this.deleteChunks(unnamed)
    if (by === 'removed') this.stats.removed++
    else this.stats.evicted++
    this.log.info({ artifact: id, by, freed_bytes: before - this.usedBytes, pinned: e.pinned }, by === 'removed' ? 'artifact removed' : 'artifact copy evicted to make room')
    this.onRemoved?.(id, by)
    return before - this.usedBytes
  }

  /**
   * Delete chunks the catalog let go (out of `present` already), and stop counting them. Not while a manifest
   * unreadable at open may name them: they stay, and stay counted.
   */
  private async deleteChunks (chunks: Array<[string, number]>): Promise<void> {
    if (!this.chunksKnown) {
      for (const [cid, size] of chunks) this.catalog.addChunk(cid, size)
      return
    }
    for (const [cid, size] of chunks) {
      this.usedBytes -= size
      await rm(this.files.chunkPath(cid), { force: true }).catch((err: unknown) => {
        this.stats.deleteFailures++
        this.log.warn({ err, chunk: cid }, 'an artifact chunk no manifest names could not be deleted (it goes when the store opens again)')
      })
    }
  }

  /** Used now (read, served, fetched again): the last to be evicted, and after a restart too (scan.ts persistUse). */
  touch (id: string): void {
    const key = canonicalOrUndefined(id, JSON_CODEC)
    const e = key === undefined ? undefined : this.catalog.touch(key)
    if (key !== undefined && e !== undefined) persistUse(this.files.manifestPath(key), key, e, this.stats, this.log)
  }

  /** A page of the artifacts here, in id order, after the artifact `after` (a canonical id; see protocols/artifact.md). */
  list (after: string | undefined, limit: number): StoredArtifact[] {
    return this.catalog.page(after, limit).map(([artifact, e]) => ({ artifact, size: e.size, pinned: e.pinned, last_used: new Date(e.lastUsed).toISOString() }))
  }

  /** Whether the artifact is whole here, and whether it is pinned. */
  holds (id: string): { pinned: boolean } | undefined {
    const key = canonicalOrUndefined(id, JSON_CODEC)
    const e = key === undefined ? undefined : this.catalog.get(key)
    return e === undefined ? undefined : { pinned: e.pinned }
  }

  /**
   * Cut a byte stream into chunks as it arrives and store it, pinned (true: for good; `'run-output'`: within the run
   * outputs' share); one chunk at most in memory. INVALID_REQUEST (`oversized`) past ARTIFACT_MAX_BYTES, STORAGE_FULL past the bound.
   */
  async put (source: AsyncIterable<Uint8Array>, pin: true | 'run-output' = true): Promise<{ id: string, size: number }> {
    return await putStream(this, source, pin)
  }

  /** The artifact's manifest, verified, if the whole artifact is here. */
  async manifest (id: string): Promise<Manifest | undefined> {
    const bytes = await this.manifestBytes(id)
    if (bytes === undefined) return undefined
    return verifyManifest(parseId(id, JSON_CODEC), bytes)
  }

  /** The manifest's bytes as stored (served to peers, who verify them), if the artifact is whole here. */
  async manifestBytes (id: string): Promise<Uint8Array | undefined> {
    const key = canonical(id, JSON_CODEC)
    if (this.catalog.get(key) === undefined) return undefined
    try {
      return await readFile(this.files.manifestPath(key))
    } catch (err) {
      if (isMissing(err)) return undefined
      throw err
    }
  }

  /** A chunk's bytes as stored (served to peers, who verify them). */
  async chunk (cid: string): Promise<Uint8Array | undefined> {
    try {
      return await readFile(this.files.chunkPath(cid))
    } catch (err) {
      if (isMissing(err)) return undefined
      throw err
    }
  }

  /**
   * The artifact's bytes, chunk by chunk, each verified as it is read (a chunk damaged on disk is
   * ARTIFACT_CORRUPT, not served). From this call until the iterator ends (read to its end, failed, or closed
   * with `return`) the artifact is not evicted; if it is removed meanwhile the read ends with
   * ARTIFACT_NOT_FOUND (`reason: removed`).
   */
  read (id: string, m: Manifest): AsyncGenerator<Uint8Array> {
    const key = canonical(id, JSON_CODEC)
    const entry = this.catalog.get(key)
    if (entry === undefined) return this.readChunks(id, key, m)
    entry.readers++
    this.touch(key)
    return heldIterator(this.readChunks(id, key, m), () => { entry.readers-- })
  }

  private async * readChunks (id: string, key: string, m: Manifest): AsyncGenerator<Uint8Array> {
    for (let i = 0; i < m.chunks.length; i++) {
      const bytes = await this.chunk(m.chunks[i] ?? '')
      if (bytes === undefined) {
        if (this.catalog.get(key) === undefined) throw new ArtifactNotFoundError(`artifact ${id} was removed from this node while it was read`, { artifact: id, reason: 'removed' })
        throw new ArtifactCorruptError(`chunk ${i} of ${id} is missing from the store`, { reason: 'missing_chunk', artifact: id, index: i })
      }
      verifyChunk(id, m, i, bytes)
      yield bytes
    }
  }
}
