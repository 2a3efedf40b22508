/**
 * What the artifact store holds, in memory, so that it can decide what may go
 * without reading the disk: its artifacts, least recently used first; which
 * of them it keeps (pinned: the node's own uploads, and its agent's run
 * outputs within their share) and which it may evict (copies fetched from
 * peers, and run outputs past their share); how many
 * manifests name each chunk in `chunks/`; and which chunks writes in
 * progress found there and count on. The store (store.ts) changes the files
 * and keeps this in step; nothing here touches the disk.
 */

/** The chunks the catalog let go (out of `present`), for the store to delete. */
export function letGo (chunks: Array<[string, number] | undefined>): Array<[string, number]> {
  return chunks.filter((c): c is [string, number] => c !== undefined)
}

export interface CatalogEntry {
  /** Bytes of the manifest file. */
  manifestBytes: number
  /** Bytes of the artifact (its manifest's `size`). */
  size: number
  /**
   * Bytes it holds on disk: its manifest and each distinct chunk it names once (manifest.ts `distinctChunkBytes`),
   * what the run outputs' share counts. A chunk another artifact names too is counted in each of them.
   */
  heldBytes: number
  /** Kept until removed on purpose (DELETE /v1/artifacts/{artifact}); a copy fetched from peers is not. */
  pinned: boolean
  /** Pinned as a run output only: kept while run outputs stay within their share (pins.ts), a copy after. */
  output?: boolean
  /** When it was last stored, read or served (before the store opened: its manifest's mtime). */
  lastUsed: number
  /** The `lastUsed` last written to the manifest's mtime (store.ts `used`). */
  persistedUse: number
  /** Reads of it in progress here: an artifact being read is not evicted. */
  readers: number
}

export class Catalog {
  /** Artifact id to its entry, least recently used first. */
  private readonly entries = new Map<string, CatalogEntry>()
  /** The copies (not pinned) among them, in the same order: what an eviction looks at, however many are pinned. */
  private copies = new Map<string, CatalogEntry>()
  /** The run outputs pinned (`output`), in the same order, and the bytes they hold (`heldBytes`, summed). */
  private readonly outputs = new Map<string, CatalogEntry>()
  private outputBytesNow = 0
  /** Chunk id to its size on disk, for every chunk in `chunks/`. */
  private readonly present = new Map<string, number>()
  /** Chunk id to how many manifests name it. */
  private readonly refs = new Map<string, number>()
  /** Chunk id to how many writes in progress found it in `chunks/` and will name it. */
  private readonly borrows = new Map<string, number>()

  get size (): number {
    return this.entries.size
  }

  get (id: string): CatalogEntry | undefined {
    return this.entries.get(id)
  }

  /** A whole artifact, named by its manifest's chunks (ids as in `chunks/`, repeats allowed). */
  add (id: string, entry: CatalogEntry, chunks: readonly string[]): void {
    this.entries.set(id, entry)
    if (!entry.pinned) this.copies.set(id, entry)
    else if (entry.output === true) this.addOutput(id, entry)
    for (const cid of new Set(chunks)) this.refs.set(cid, (this.refs.get(cid) ?? 0) + 1)
  }

  /** Used now: it goes to the end of the eviction order. Returns its entry, if it is here. */
  touch (id: string, now = Date.now()): CatalogEntry | undefined {
    const e = this.entries.get(id)
    if (e === undefined) return undefined
    e.lastUsed = now
    this.entries.delete(id)
    this.entries.set(id, e)
    if (this.copies.delete(id)) this.copies.set(id, e)
    if (this.outputs.delete(id)) this.outputs.set(id, e)
    return e
  }

  /** The artifact is kept for good from now on (the node stored the same bytes itself). */
  pin (id: string): void {
    const e = this.entries.get(id)
    if (e === undefined) return
    this.dropOutput(id, e)
    e.pinned = true
    this.copies.delete(id)
  }

  /** A copy is pinned as a run output from now on (a run of this node's made the same bytes). */
  pinOutput (id: string): void {
    const e = this.entries.get(id)
    if (e === undefined || e.pinned) return
    e.pinned = true
    this.copies.delete(id)
    this.addOutput(id, e)
  }

  /** Run outputs pinned now, and their bytes. */
  get outputCount (): number {
    return this.outputs.size
  }

  get outputBytes (): number {
    return this.outputBytesNow
  }

  /**
   * The least recently used run output pinned becomes a copy (returned; undefined when none is pinned). Call
   * `orderCopies` after a run of these: it joins the copies in its place of the eviction order.
   */
  unpinOldestOutput (): string | undefined {
    const first = this.outputs.entries().next()
    if (first.done === true) return undefined
    const [id, e] = first.value
    this.dropOutput(id, e)
    e.pinned = false
    this.copies.set(id, e)
    return id
  }

  /** Put the copies back in the order of their last use (after `unpinOldestOutput` added some at the end). */
  orderCopies (): void {
    const copies = new Map<string, CatalogEntry>()
    for (const [id, e] of this.entries) if (!e.pinned) copies.set(id, e)
    this.copies = copies
  }

  private addOutput (id: string, e: CatalogEntry): void {
    e.output = true
    this.outputs.set(id, e)
    this.outputBytesNow += e.heldBytes
  }

  private dropOutput (id: string, e: CatalogEntry): void {
    if (!this.outputs.delete(id)) return
    e.output = false
    this.outputBytesNow -= e.heldBytes
  }

  /**
   * The artifact is gone: the chunks its manifest named that no other
   * manifest names and no write counts on leave `present`, and are returned
   * with their sizes (for the store to delete).
   */
  remove (id: string, chunks: readonly string[]): Array<[string, number]> {
    const e = this.entries.get(id)
    if (e !== undefined) this.dropOutput(id, e)
    this.entries.delete(id)
    this.copies.delete(id)
    const unnamed: Array<[string, number]> = []
    for (const cid of new Set(chunks)) {
      const n = (this.refs.get(cid) ?? 0) - 1
      if (n > 0) {
        this.refs.set(cid, n)
        continue
      }
      this.refs.delete(cid)
      const orphan = this.takeOrphan(cid)
      if (orphan !== undefined) unnamed.push(orphan)
    }
    return unnamed
  }

  /**
   * Undo `remove` (the store could not delete the manifest): the entry is back, last in the eviction order, with the
   * chunks its manifest names and those `remove` let go. `output`: it was a run output pinned within the share.
   */
  restore (id: string, e: CatalogEntry, output: boolean, chunks: readonly string[], unnamed: ReadonlyArray<[string, number]>): void {
    if (output) e.output = true
    this.add(id, e, chunks)
    for (const [cid, size] of unnamed) this.present.set(cid, size)
  }

  /** Up to `limit` artifacts whose ids sort after `after` (all of them without it), in id order. */
  page (after: string | undefined, limit: number): Array<[string, CatalogEntry]> {
    const ids: string[] = []
    for (const id of this.entries.keys()) if (after === undefined || id > after) ids.push(id)
    ids.sort()
    return ids.slice(0, limit).map(id => [id, this.entries.get(id) as CatalogEntry])
  }

  /** The least recently used artifact that may be evicted: not pinned, not being read. */
  evictable (): string | undefined {
    for (const [id, e] of this.copies) {
      if (e.readers === 0) return id
    }
    return undefined
  }

  hasChunk (cid: string): boolean {
    return this.present.has(cid)
  }

  /** The size on disk of a chunk in `chunks/`, undefined when it is not there. */
  chunkSize (cid: string): number | undefined {
    return this.present.get(cid)
  }

  addChunk (cid: string, size: number): void {
    this.present.set(cid, size)
  }

  named (cid: string): boolean {
    return (this.refs.get(cid) ?? 0) > 0
  }

  /** A write in progress counts on this chunk of `chunks/`: it is not deleted while it does. */
  borrow (cid: string): void {
    this.borrows.set(cid, (this.borrows.get(cid) ?? 0) + 1)
  }

  /** The write ended; returns the chunk and its size if nothing names it or counts on it any more (for the store to delete). */
  release (cid: string): [string, number] | undefined {
    const n = (this.borrows.get(cid) ?? 0) - 1
    if (n > 0) {
      this.borrows.set(cid, n)
      return undefined
    }
    this.borrows.delete(cid)
    return this.orphan(cid)
  }

  /** If no manifest names this chunk of `chunks/` and no write counts on it: out of `present`, returned with its size (for the store to delete). */
  orphan (cid: string): [string, number] | undefined {
    return this.refs.has(cid) ? undefined : this.takeOrphan(cid)
  }

  private takeOrphan (cid: string): [string, number] | undefined {
    if (this.borrows.has(cid)) return undefined
    const size = this.present.get(cid)
    if (size === undefined) return undefined
    this.present.delete(cid)
    return [cid, size]
  }
}
