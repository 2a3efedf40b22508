/**
 * The artifact store's files (store.ts): where a chunk, a manifest and a pin live, and how one is written into
 * place (through `tmp/`, synced, then renamed), a folder synced, and a manifest or pin taken away again. A
 * failure to write is STORAGE_FULL (storageWriteError); a failure to delete is counted and logged, and what
 * stays goes when the store opens again.
 */
import { randomBytes } from 'node:crypto'
import { rename, rm } from 'node:fs/promises'
import { join } from 'node:path'
import type { Logger } from '../logger.ts'
import { storageWriteError } from '../storage/write-guard.ts'
import { JSON_CODEC, RAW_CODEC } from './manifest.ts'
import { pinFolder } from './pins.ts'
import { canonical } from './scan.ts'
import { syncDir, writeDurably } from './write.ts'

export class StoreFiles {
  private readonly dir: string
  private readonly stats: { deleteFailures: number }
  private readonly log: Logger

  constructor (dir: string, stats: { deleteFailures: number }, log: Logger) {
    this.dir = dir
    this.stats = stats
    this.log = log
  }

  chunkPath (cid: string): string {
    return join(this.dir, 'chunks', canonical(cid, RAW_CODEC))
  }

  manifestPath (id: string): string {
    return join(this.dir, 'manifests', canonical(id, JSON_CODEC))
  }

  pinPath (id: string, pin: true | 'run-output' = true): string {
    return join(this.dir, pinFolder(pin), canonical(id, JSON_CODEC))
  }

  /** Write `bytes` to `path` whole or not at all: synced under `tmp/`, then renamed into place. */
  async write (path: string, bytes: Uint8Array): Promise<void> {
    const tmp = join(this.dir, 'tmp', randomBytes(12).toString('hex'))
    try {
      await writeDurably(tmp, bytes)
      await rename(tmp, path)
    } catch (err) {
      await rm(tmp, { force: true }).catch((e: unknown) => { this.log.debug({ err: e }, 'a temporary artifact file could not be removed (it goes when the store opens again)') })
      throw storageWriteError(err, 'artifacts')
    }
  }

  /** Sync the store's folders `subs`, so the renames into them so far outlive a power loss. */
  async sync (...subs: string[]): Promise<void> {
    for (const sub of subs) await syncDir(join(this.dir, sub)).catch((err: unknown) => { throw storageWriteError(err, 'artifacts') })
  }

  /** Delete the artifact's pin of that kind (both kinds without one). */
  async deletePin (id: string, pin?: true | 'run-output'): Promise<void> {
    for (const kind of pin === undefined ? [true, 'run-output'] as const : [pin]) {
      await rm(this.pinPath(id, kind), { force: true }).catch((err: unknown) => {
        this.stats.deleteFailures++
        this.log.warn({ err, artifact: id }, 'the pin of an artifact no longer here could not be deleted (it goes when the store opens again)')
      })
    }
  }

  /**
   * Take back the manifest a failed commit renamed into place; whether it is gone. One that stays (counted and
   * logged) names chunks the store must keep: with them the artifact is whole when the store opens again.
   */
  async unplaceManifest (id: string): Promise<boolean> {
    try {
      await rm(this.manifestPath(id), { force: true })
      return true
    } catch (err) {
      this.stats.deleteFailures++
      this.log.warn({ err, artifact: id }, 'the manifest of a failed artifact commit could not be deleted: the artifact and its chunks stay')
      return false
    }
  }
}
