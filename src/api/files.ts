/**
 * How a local client finds a running node: `start` writes the API's bearer
 * token to <dataDir>/api-token and `{url, agent_id}` to <dataDir>/api.json,
 * both mode 0600, and removes them when it stops. Whoever can read the data
 * directory may drive the node.
 */
import { randomBytes } from 'node:crypto'
import { chmod, open, readFile, rename, rm } from 'node:fs/promises'
import { join } from 'node:path'
import { API_TOKEN_BYTES } from '../constants.ts'
import { InvalidRequestError } from '../errors.ts'

export const API_TOKEN_FILE = 'api-token'
export const API_INFO_FILE = 'api.json'

export interface ApiInfo {
  url: string
  agent_id?: string
  pid?: number
}

export function newToken (): string {
  return randomBytes(API_TOKEN_BYTES).toString('base64url')
}

/** Write a file readable by its owner only: a fresh temporary file, then a rename (never a half-written token). */
async function writePrivate (path: string, text: string): Promise<void> {
  const tmp = `${path}.${process.pid}.tmp`
  const fh = await open(tmp, 'w', 0o600)
  try {
    // the mode of open() is filtered by the umask and ignored for an existing file
    await fh.chmod(0o600)
    await fh.writeFile(text)
    await fh.sync()
  } finally {
    await fh.close()
  }
  await rename(tmp, path)
  await chmod(path, 0o600)
}

export async function writeApiFiles (dataDir: string, token: string, info: ApiInfo): Promise<void> {
  await writePrivate(join(dataDir, API_TOKEN_FILE), token + '\n')
  await writePrivate(join(dataDir, API_INFO_FILE), JSON.stringify(info) + '\n')
}

export async function removeApiFiles (dataDir: string): Promise<void> {
  await rm(join(dataDir, API_INFO_FILE), { force: true })
  await rm(join(dataDir, API_TOKEN_FILE), { force: true })
}

/** The URL and token of the node running from `dataDir`; INVALID_REQUEST when there is none. */
export async function readApiFiles (dataDir: string): Promise<{ url: string, token: string }> {
  let infoText: string
  let token: string
  try {
    infoText = await readFile(join(dataDir, API_INFO_FILE), 'utf8')
    token = (await readFile(join(dataDir, API_TOKEN_FILE), 'utf8')).trim()
  } catch (err) {
    const code = (err as { code?: string }).code
    if (code === 'ENOENT') throw new InvalidRequestError(`no running node found in ${dataDir} (no ${API_INFO_FILE}): start one with "aap-mesh start --data-dir ${dataDir}", or pass --api-url and --token`, { reason: 'no_node' })
    throw new InvalidRequestError(`cannot read the API files in ${dataDir}: ${(err as Error).message}`, { reason: 'unreadable' })
  }
  let info: unknown
  try {
    info = JSON.parse(infoText)
  } catch {
    throw new InvalidRequestError(`${join(dataDir, API_INFO_FILE)} is not JSON`, { reason: 'corrupt' })
  }
  const url = typeof info === 'object' && info !== null ? (info as Record<string, unknown>).url : undefined
  if (typeof url !== 'string' || token.length === 0) throw new InvalidRequestError(`${join(dataDir, API_INFO_FILE)} has no url, or the token file is empty`, { reason: 'corrupt' })
  return { url, token }
}
