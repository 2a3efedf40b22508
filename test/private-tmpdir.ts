/**
 * Vitest global setup: every test run gets a temporary folder of its own
 * (TMPDIR, inherited by the test workers and every process they start) and
 * removes it at the end. Nodes without a data dir keep their artifacts in a
 * temporary folder they remove when they stop; a node process a test kills
 * (kill -9 is what the crash tests are about) cannot, and its folder would
 * otherwise stay behind in the machine's /tmp after every run.
 */
import { mkdtemp, rm } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'

export default async function setup (): Promise<() => Promise<void>> {
  const dir = await mkdtemp(join(tmpdir(), 'aap-mesh-tests-'))
  process.env.TMPDIR = dir
  return async () => {
    await rm(dir, { recursive: true, force: true })
  }
}
