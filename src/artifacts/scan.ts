/**
 * What an artifact store finds on disk when it opens (store.ts): it clears
 * `tmp/` (writes a crash cut short), reads every manifest into the catalog,
 * least recently stored first, drops pins (`pins/`, and run outputs' in
 * `outputs/`, pins.ts) whose artifact is gone, and
 * deletes the chunks no manifest names (left by a write killed between its
 * chunks' move and its manifest, or by a removal cut short). It orders the
 * artifacts by their manifests' mtimes, which the store moves forward as they
 * are used (persistUse). Also the file helpers the store shares with it.
 */
import { mkdir, readdir, readFile, rename, rm, stat, utimes, writeFile } from 'node:fs/promises'
import { join } from 'node:path'
import type { Logger } from '../logger.ts'
import type { Catalog, CatalogEntry } from './catalog.ts'
import { ARTIFACT_USE_PERSIST_MS } from './constants.ts'
import { JSON_CODEC, RAW_CODEC, distinctChunkBytes, parseId, verifyManifest } from './manifest.ts'

/** Manifests read at once when a store opens. */
const OPEN_MANIFEST_READS_AT_ONCE = 32

/** A canonical id (CIDv1, base32) whatever multibase a peer's manifest spelled it in. */
export const canonical = (id: string, codec: number): string => parseId(id, codec, codec === RAW_CODEC ? 'chunk id' : 'artifact id').toString()

/** The canonical id, or undefined for a name that is no id of that codec. */
export function canonicalOrUndefined (name: string, codec: number): string | undefined {
  try {
    return canonical(name, codec)
  } catch {
    return undefined
  }
}

export function isMissing (err: unknown): boolean {
  return (err as NodeJS.ErrnoException).code === 'ENOENT'
}

/** The size of the file at `path`, undefined when there is none (or something else is there). */
export async function fileSize (path: string): Promise<number | undefined> {
  try {
    const st = await stat(path)
    return st.isFile() ? st.size : undefined
  } catch (err) {
    if (isMissing(err)) return undefined
    throw err
  }
}

/**
 * Write an artifact's last use to its manifest's mtime, at most once per
 * ARTIFACT_USE_PERSIST_MS, so the store opened again evicts by use, not by
 * when it was stored. A failure is counted and logged.
 */
export function persistUse (manifestPath: string, artifact: string, e: CatalogEntry, stats: { useWriteFailures: number }, log: Logger): void {
  if (e.lastUsed - e.persistedUse < ARTIFACT_USE_PERSIST_MS) return
  e.persistedUse = e.lastUsed
  utimes(manifestPath, new Date(e.lastUsed), new Date(e.lastUsed)).catch((err: unknown) => {
    stats.useWriteFailures++
    log.warn({ err, artifact }, 'the use of an artifact could not be written to its manifest: a restart orders it as older')
  })
}

export interface ScanStats {
  /** What `open` found: chunks no manifest named (removed), and manifests it could not read (nothing swept then). */
  orphanChunksSwept: number
  unreadableManifests: number
}

/** What the store (store.ts) has done, for metrics and tests. */
export interface ArtifactStoreStats extends ScanStats {
  /** Artifacts taken away on purpose (`remove`). */
  removed: number
  /** Copies fetched from peers evicted to make room for a write. */
  evicted: number
  /** Files of removed artifacts that could not be deleted (logged; they go when the store opens again). */
  deleteFailures: number
  /** Uses that could not be written to a manifest's mtime (logged; the order after a restart is older). */
  useWriteFailures: number
}

/**
 * A store written before pins existed (no `pins/`) evicted nothing: every
 * artifact in it was kept for good, the node's own uploads and its runs'
 * outputs among them. Read with today's rules those would be copies fetched
 * from peers, and the first write short of room would delete them. So each
 * of its manifests is pinned, as an upload is. The pins are made in `tmp/`
 * and moved into place in one rename: a crash halfway leaves no `pins/`,
 * and the next start does it again. A new store gets an empty `pins/`.
 */
async function pinLegacyStore (dir: string, log: Logger): Promise<void> {
  try {
    await stat(join(dir, 'pins'))
    return
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code !== 'ENOENT') throw err
  }
  const building = join(dir, 'tmp', 'pins')
  await mkdir(building, { recursive: true })
  let pinned = 0
  for (const name of await readdir(join(dir, 'manifests'))) {
    if (canonicalOrUndefined(name, JSON_CODEC) !== name) continue
    await writeFile(join(building, name), new Uint8Array(0))
    pinned++
  }
  await rename(building, join(dir, 'pins'))
  if (pinned > 0) log.info({ pinned }, 'an artifact store from before pins existed: every artifact in it is pinned, as it was kept for good')
}

/**
 * Fill `catalog` from the store in `dir`; returns the bytes its files take
 * (chunks and manifests, files there that are no chunk or manifest
 * included) and whether every manifest could be read. When one cannot, its
 * chunks are not known: no chunk is deleted, now or while the store is open.
 */
export async function scanStore (dir: string, catalog: Catalog, stats: ScanStats, log: Logger): Promise<{ used: number, chunksKnown: boolean }> {
  for (const sub of ['chunks', 'manifests', 'outputs', 'tmp']) await mkdir(join(dir, sub), { recursive: true })
  await rm(join(dir, 'tmp'), { recursive: true, force: true })
  await mkdir(join(dir, 'tmp'), { recursive: true })
  await pinLegacyStore(dir, log)
  const pins = new Set(await readdir(join(dir, 'pins')))
  // pinned as run outputs only (an upload of the same bytes pinned them for good: `pins/` wins)
  const outputs = new Set(await readdir(join(dir, 'outputs')))
  const found: Array<{ id: string, bytes: number, size: number, held: number, mtime: number, chunks: string[] }> = []
  let used = 0
  let chunksKnown = true
  const names = await readdir(join(dir, 'manifests'))
  for (let i = 0; i < names.length; i += OPEN_MANIFEST_READS_AT_ONCE) {
    await Promise.all(names.slice(i, i + OPEN_MANIFEST_READS_AT_ONCE).map(async (name) => {
      const path = join(dir, 'manifests', name)
      const st = await stat(path)
      used += st.size
      // names that are no artifact id are no manifest (an editor's or a file manager's file): left alone
      const id = st.isFile() ? canonicalOrUndefined(name, JSON_CODEC) : undefined
      if (id === undefined || id !== name) return
      try {
        const m = verifyManifest(parseId(id, JSON_CODEC), await readFile(path))
        found.push({ id, bytes: st.size, size: m.size, held: st.size + distinctChunkBytes(m), mtime: st.mtimeMs, chunks: m.chunks.map(c => canonical(c, RAW_CODEC)) })
      } catch (err) {
        stats.unreadableManifests++
        chunksKnown = false
        log.warn({ err, artifact: id }, 'an artifact manifest on disk cannot be read: no chunk is deleted while the store is open')
      }
    }))
  }
  found.sort((a, b) => a.mtime - b.mtime)
  for (const f of found) {
    const output = !pins.has(f.id) && outputs.has(f.id)
    catalog.add(f.id, { manifestBytes: f.bytes, size: f.size, heldBytes: f.held, pinned: pins.has(f.id) || output, output, lastUsed: f.mtime, persistedUse: f.mtime, readers: 0 }, f.chunks)
  }
  const manifests = new Set(names)
  for (const [sub, set] of [['pins', pins], ['outputs', outputs]] as const) {
    for (const pin of set) {
      // a pin whose manifest is gone (a removal or a write cut short): nothing to keep; one whose manifest
      // is there but could not be read stays, so the artifact is still pinned once it reads again
      if (manifests.has(pin)) continue
      await rm(join(dir, sub, pin), { recursive: true, force: true })
    }
  }
  for (const entry of await readdir(join(dir, 'chunks'), { withFileTypes: true })) {
    const path = join(dir, 'chunks', entry.name)
    // only files named by a chunk id are chunks; anything else there is left alone (and counted)
    const cid = entry.isFile() && canonicalOrUndefined(entry.name, RAW_CODEC) === entry.name ? entry.name : undefined
    const size = (await stat(path)).size
    if (cid !== undefined && chunksKnown && !catalog.named(cid)) {
      await rm(path, { force: true })
      stats.orphanChunksSwept++
      continue
    }
    if (cid !== undefined) catalog.addChunk(cid, size)
    used += size
  }
  if (stats.orphanChunksSwept > 0) log.info({ chunks: stats.orphanChunksSwept }, 'removed artifact chunks no manifest names (left by writes that did not finish)')
  return { used, chunksKnown }
}
