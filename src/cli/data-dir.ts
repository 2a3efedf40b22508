/**
 * The data directory `start` runs from holds the node key (peer.key: whoever
 * reads it acts as this agent) and, while the node runs, the API token. A
 * new one is made private (0700; identity.ts makes it so too). An existing
 * one open to its group or to others is used as it is, since refusing it would
 * stop nodes that ran from it before, but the operator is told on stderr.
 */
import { mkdir, stat } from 'node:fs/promises'
import { join } from 'node:path'
import { KEY_FILE } from '../identity/identity.ts'

/** Permission bits of the group and of others. */
const SHARED_BITS = 0o077

/**
 * Make `dataDir` (0700) when it is not there yet; else one warning line per
 * part of it that its group or others may read, through `warn`.
 */
export async function prepareDataDir (dataDir: string, warn: (text: string) => void): Promise<void> {
  // Windows has no POSIX modes: its ACLs are not read here
  if (process.platform === 'win32') return
  const dir = await modeOf(dataDir)
  if (dir === undefined) {
    await mkdir(dataDir, { recursive: true, mode: 0o700 })
    return
  }
  if ((dir & SHARED_BITS) !== 0) {
    warn(`the data directory ${dataDir} is open to its group or others (mode ${octal(dir)}): they may read what the node writes there; chmod 700 ${dataDir}`)
  }
  const keyFile = join(dataDir, KEY_FILE)
  const key = await modeOf(keyFile)
  if (key !== undefined && (key & SHARED_BITS) !== 0) {
    warn(`the node key ${keyFile} is open to its group or others (mode ${octal(key)}): whoever reads it can act as this agent; chmod 600 ${keyFile}`)
  }
}

/** The permission bits of `path`; undefined when nothing is there (a failure of another kind is thrown: the node would meet it next). */
async function modeOf (path: string): Promise<number | undefined> {
  try {
    return (await stat(path)).mode & 0o777
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'ENOENT') return undefined
    throw err
  }
}

function octal (mode: number): string {
  return `0${mode.toString(8).padStart(3, '0')}`
}
