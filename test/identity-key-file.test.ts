/**
 * The node's key file: created whole (written to a file of its own, flushed,
 * then linked to its name), one key for two starts at once on one data dir,
 * and a clear error, not a cryptic one, for a file that is not a key.
 */
import { mkdtemp, readdir, rm, stat, writeFile } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { afterAll, describe, expect, it } from 'vitest'
import { agentIdOf, KEY_FILE, loadOrCreateKey } from '../src/identity/identity.ts'

describe('the key file', () => {
  const dirs: string[] = []
  const dir = async (): Promise<string> => {
    const d = await mkdtemp(join(tmpdir(), 'aap-key-'))
    dirs.push(d)
    return d
  }
  afterAll(async () => { for (const d of dirs) await rm(d, { recursive: true, force: true }) })

  it('two starts at once on one data dir end with one key, owner-only, and no file left over', async () => {
    const d = await dir()
    const keys = await Promise.all(Array.from({ length: 4 }, async () => loadOrCreateKey(d)))
    expect(new Set(keys.map(k => agentIdOf(k))).size).toBe(1)
    expect(await readdir(d)).toEqual([KEY_FILE])
    expect((await stat(join(d, KEY_FILE))).mode & 0o777).toBe(0o600)
    // and the next start reads it
    expect(agentIdOf(await loadOrCreateKey(d))).toBe(agentIdOf(keys[0]!))
  })

  it('an empty or damaged key file is named in a clear error, and left as it is', async () => {
    const d = await dir()
    await writeFile(join(d, KEY_FILE), new Uint8Array(0))
    await expect(loadOrCreateKey(d)).rejects.toThrow(/key file .* \(0 bytes\) is not a private key.*move it away/)
    expect((await stat(join(d, KEY_FILE))).size).toBe(0)
  })
})
