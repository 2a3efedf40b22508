/**
 * One write into the artifact store in progress (store.ts): what it staged
 * in its own folder under `tmp/`, and the chunks of `chunks/` it counts on.
 */
import { open, writeFile } from 'node:fs/promises'
import { AapError } from '../errors.ts'

/**
 * Write `bytes` to a new file at `path` and sync it to disk before it is
 * renamed into place: a rename the disk keeps after a power loss then names
 * the whole file, not an empty or short one (which the store would go on
 * taking for a chunk it holds, and serve).
 */
export async function writeDurably (path: string, bytes: Uint8Array): Promise<void> {
  await writeFile(path, bytes, { flush: true })
}

/** Sync a folder, so the renames into it so far outlive a power loss. */
export async function syncDir (dir: string): Promise<void> {
  const fh = await open(dir, 'r')
  try {
    await fh.sync()
  } finally {
    await fh.close()
  }
}

export function storeClosed (): AapError {
  return new AapError('INTERNAL', 'the artifact store closed before the write was whole', { reason: 'store_closed' })
}

/** A manifest committed with a chunk neither stored nor staged by its write: it would say the artifact is whole when it is not. */
export function chunkNotHeld (artifact: string, index: number): AapError {
  return new AapError('INTERNAL', `chunk ${index} of ${artifact} is neither stored nor staged by the write`, { reason: 'chunk_not_held', artifact, index })
}

export function writeSettled (): AapError {
  return new AapError('INTERNAL', 'the artifact write was committed or abandoned already', { reason: 'write_settled' })
}

/** One write in progress: the chunks it stored that `chunks/` did not hold, waiting in `dir` (see ArtifactStore.commit). */
export class StagedWrite {
  readonly dir: string
  /** Chunk id to its bytes on disk. */
  readonly staged = new Map<string, number>()
  /** Chunks of `chunks/` this write found there and will name (kept there until it ends). */
  readonly borrowed = new Set<string>()
  /** Chunks being written now, so a second stage of the same chunk (an artifact that repeats one) waits for the first. */
  readonly writing = new Map<string, Promise<void>>()
  settled = false

  constructor (dir: string) {
    this.dir = dir
  }
}
