/**
 * The verified chunks of fetches that failed, kept for a while so that the next fetch of the same artifact asks
 * holders only for the chunks still missing (protocols/artifact.md, "Storage"). A failed fetch's write stays
 * staged in the store's `tmp/` (store.ts), counted against the store's bound, with the manifest it verified.
 * Bounded: at most ARTIFACT_KEPT_FETCHES_MAX writes holding ARTIFACT_KEPT_FETCH_MAX_BYTES together (the oldest
 * go first), each for ARTIFACT_KEPT_FETCH_TTL_MS; and all go when a write needs room the store cannot make
 * otherwise (the store's `spare`), so a kept chunk never makes a write fail with STORAGE_FULL.
 */
import type { Logger } from '../logger.ts'
import { ARTIFACT_KEPT_FETCH_MAX_BYTES, ARTIFACT_KEPT_FETCH_TTL_MS, ARTIFACT_KEPT_FETCHES_MAX } from './constants.ts'
import type { Manifest } from './manifest.ts'
import type { ArtifactStore } from './store.ts'
import type { StagedWrite } from './write.ts'

/** A manifest verified against its id, and its bytes as the holder sent them (the store writes those). */
export interface VerifiedManifest { m: Manifest, bytes: Uint8Array }

/** The write of a failed fetch (its staged chunks verified) and the manifest it had verified. */
export interface KeptFetch { w: StagedWrite, manifest: VerifiedManifest }

interface Entry extends KeptFetch {
  /** Bytes its staged chunks take in the store. */
  bytes: number
  timer: ReturnType<typeof setTimeout>
}

/** What kept fetches have done, for metrics and tests. */
export interface KeptFetchStats {
  /** Failed fetches whose chunks were kept. */
  kept: number
  /** Kept fetches a later fetch of the same artifact went on from. */
  resumed: number
  /** Kept fetches dropped unused: past the bounds or the time to live, for room, or at stop. */
  dropped: number
}

export class KeptFetches {
  /** Artifact id to what a failed fetch of it left, oldest first. */
  private readonly kept = new Map<string, Entry>()
  private bytes = 0
  /** Kept writes being let go: their chunks count against the store's bound until their removal ends. */
  private readonly ending = new Set<Promise<void>>()
  private closed = false
  readonly stats: KeptFetchStats = { kept: 0, resumed: 0, dropped: 0 }
  private readonly store: ArtifactStore
  private readonly log: Logger

  constructor (store: ArtifactStore, log: Logger) {
    this.store = store
    this.log = log
  }

  /** Bytes the kept chunks take in the store. */
  get heldBytes (): number {
    return this.bytes
  }

  /** Keep fetches from now on (the service started, again after a stop). */
  open (): void {
    this.closed = false
  }

  /** What a failed fetch of `id` left, taken out: the fetch that takes it commits it, or keeps or abandons it again. */
  take (id: string): KeptFetch | undefined {
    const e = this.kept.get(id)
    if (e === undefined) return undefined
    this.forget(id, e)
    this.stats.resumed++
    return { w: e.w, manifest: e.manifest }
  }

  /** Keep the write of a failed fetch of `id`, or abandon it when there is nothing worth keeping; the oldest kept go past the bounds. */
  async keep (id: string, f: KeptFetch): Promise<void> {
    let bytes = 0
    for (const n of f.w.staged.values()) bytes += n
    // nothing staged, more than the bound alone, or whole here by now (a fetch of it that ran meanwhile, an upload)
    if (this.closed || bytes === 0 || bytes > ARTIFACT_KEPT_FETCH_MAX_BYTES || this.store.holds(id) !== undefined) {
      await this.end(f.w)
      return
    }
    const gone: StagedWrite[] = []
    // an older failed fetch of the same artifact (one ran while the other ended): the newer one is kept
    const before = this.kept.get(id)
    if (before !== undefined) {
      this.forget(id, before)
      gone.push(before.w)
    }
    for (const [old, e] of this.kept) {
      if (this.kept.size < ARTIFACT_KEPT_FETCHES_MAX && this.bytes + bytes <= ARTIFACT_KEPT_FETCH_MAX_BYTES) break
      this.forget(old, e)
      gone.push(e.w)
    }
    const timer = setTimeout(() => { void this.drop(id) }, ARTIFACT_KEPT_FETCH_TTL_MS)
    timer.unref?.()
    this.kept.set(id, { w: f.w, manifest: f.manifest, bytes, timer })
    this.bytes += bytes
    this.stats.kept++
    this.stats.dropped += gone.length
    await Promise.all(gone.map(async w => { await this.end(w) }))
  }

  /** Drop what is kept of `id`, if anything. */
  async drop (id: string): Promise<void> {
    const e = this.kept.get(id)
    if (e === undefined) return
    this.forget(id, e)
    this.stats.dropped++
    await this.end(e.w)
  }

  /**
   * Drop everything kept (the store needs the room), and wait until every kept write being let go is gone; whether
   * any was. A write that needs room while another's drop is under way finds nothing kept, but the room is still
   * coming (the store counts the chunks until their removal ends): it waits for that drop too, and is told so.
   */
  async dropAll (): Promise<boolean> {
    const all = [...this.kept]
    for (const [id, e] of all) this.forget(id, e)
    this.stats.dropped += all.length
    for (const [, e] of all) void this.end(e.w)
    if (this.ending.size === 0) return false
    await Promise.all(this.ending)
    return true
  }

  /** Drop everything and keep nothing more until `open` (the service stops, its store closes next). */
  async close (): Promise<void> {
    this.closed = true
    await this.dropAll()
  }

  private forget (id: string, e: Entry): void {
    clearTimeout(e.timer)
    this.kept.delete(id)
    this.bytes -= e.bytes
  }

  /** Let a kept write go (never rejects: a failure is logged); `dropAll` waits on it while it runs. */
  private async end (w: StagedWrite): Promise<void> {
    const ending = this.store.abandon(w).catch((err: unknown) => {
      this.log.warn({ err, dir: w.dir }, 'the kept chunks of a failed artifact fetch could not be let go (they go when the store opens again)')
    }).finally(() => { this.ending.delete(ending) })
    this.ending.add(ending)
    await ending
  }
}
