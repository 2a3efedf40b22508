/**
 * The pins of run outputs (protocols/artifact.md, "What stays"). The node's
 * own uploads are pinned for good (`pins/<id>`); an artifact a run of its
 * agent made is pinned as a run output (`outputs/<id>`), and run outputs
 * together keep at most ARTIFACT_RUN_OUTPUT_PIN_PERCENT of the store's bounds
 * pinned. Anyone allowed to call a capability starts its runs: with every
 * output pinned, a stranger's few hundred runs filled the store for good, and
 * every later output and the operator's own uploads failed STORAGE_FULL. Past
 * the share, the least recently used run outputs become copies (their
 * `outputs/` file goes), which a write may evict like a fetched copy.
 */
import { rm } from 'node:fs/promises'
import { join } from 'node:path'
import type { Logger } from '../logger.ts'
import type { Catalog } from './catalog.ts'
import { ARTIFACT_RUN_OUTPUT_PIN_PERCENT } from './constants.ts'

/**
 * How a commit keeps what it stores: `false` a copy the store may evict, `true`
 * pinned for good, `'run-output'` pinned within the run outputs' share.
 */
export type Pin = boolean | 'run-output'

/** The folder of a pin of that kind. */
export function pinFolder (pin: true | 'run-output'): string {
  return pin === 'run-output' ? 'outputs' : 'pins'
}

/**
 * Unpin the least recently used run outputs until those pinned are within
 * their share of `maxBytes` and `maxArtifacts`. An `outputs/` file that
 * cannot be deleted is counted and logged: the artifact is a copy until the
 * store opens again, which pins it again and applies the share anew.
 */
export async function boundOutputs (catalog: Catalog, dir: string, maxBytes: number, maxArtifacts: number, stats: { deleteFailures: number }, log: Logger): Promise<void> {
  const bytes = Math.floor(maxBytes * ARTIFACT_RUN_OUTPUT_PIN_PERCENT / 100)
  const count = Math.floor(maxArtifacts * ARTIFACT_RUN_OUTPUT_PIN_PERCENT / 100)
  const unpinned: string[] = []
  while (catalog.outputBytes > bytes || catalog.outputCount > count) {
    const id = catalog.unpinOldestOutput()
    if (id === undefined) break
    unpinned.push(id)
  }
  if (unpinned.length === 0) return
  catalog.orderCopies()
  log.info({ artifacts: unpinned.length, pinned_bytes: catalog.outputBytes, max_pinned_bytes: bytes }, 'run outputs past their share of the artifact store were unpinned: they are copies now')
  for (const id of unpinned) {
    await rm(join(dir, 'outputs', id), { force: true }).catch((err: unknown) => {
      stats.deleteFailures++
      log.warn({ err, artifact: id }, 'the pin of a run output past its share could not be deleted (it is a copy until the store opens again)')
    })
  }
}
