/**
 * The node's key file: created whole (written to a file of its own, flushed,
 * then linked to its name), one key for two starts at once on one data dir,
 * and a clear error, not a cryptic one, for a file that is not a key, for a
 * damaged one that still parses, and for a data dir whose datastore outlived
 * its key (it started as a new agent before, and wrote events signed by it
 * into the old agent's runs).
 */
import { mkdir, mkdtemp, readdir, readFile, rm, stat, writeFile } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { generateKeyPair, privateKeyToProtobuf } from '@libp2p/crypto/keys'
import { afterAll, describe, expect, it } from 'vitest'
import { agentIdOf, DATASTORE_DIR, KEY_FILE, loadOrCreateKey, openDatastore } from '../src/identity/identity.ts'
import { silentLogger } from '../src/logger.ts'
import { createMeshNode } from '../src/node.ts'

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

  // the file is a 4-byte protobuf header, the 32-byte seed, then the 32-byte public key
  for (const [what, at] of [['seed', 10], ['public half', 67]] as const) {
    it(`one flipped bit in the ${what} is refused at load, and the file left as it is`, async () => {
      const d = await dir()
      const good = await loadOrCreateKey(d)
      const file = join(d, KEY_FILE)
      const bytes = Buffer.from(await readFile(file))
      expect(bytes.length).toBe(68)
      bytes[at] = (bytes[at] as number) ^ 1
      await writeFile(file, bytes)
      await expect(loadOrCreateKey(d)).rejects.toThrow(/key file .* is damaged/)
      expect(Buffer.from(await readFile(file)).equals(bytes)).toBe(true)
      // put back, it is the same identity
      bytes[at] = (bytes[at] as number) ^ 1
      await writeFile(file, bytes)
      expect(agentIdOf(await loadOrCreateKey(d))).toBe(agentIdOf(good))
    })
  }

  // an agent id is an Ed25519 key: before, a secp256k1 key started a node whose own agent id no peer took
  it('a key of another kind is refused at load and as a start option, with a typed error', async () => {
    const d = await dir()
    const other = await generateKeyPair('secp256k1')
    await writeFile(join(d, KEY_FILE), privateKeyToProtobuf(other))
    await expect(loadOrCreateKey(d)).rejects.toMatchObject({ code: 'INVALID_REQUEST', details: { reason: 'key_type', type: 'secp256k1' } })
    const node = await createMeshNode({ privateKey: other, listen: ['/ip4/127.0.0.1/tcp/0'], localMesh: true, logger: silentLogger() })
    await expect(node.start()).rejects.toMatchObject({ code: 'INVALID_REQUEST', details: { reason: 'key_type' } })
  })

  it('a datastore whose key is gone is refused, not started under a new key', async () => {
    const d = await dir()
    await loadOrCreateKey(d)
    const ds = await openDatastore(d)
    await ds.close?.()
    await rm(join(d, KEY_FILE))
    await expect(loadOrCreateKey(d)).rejects.toThrow(/holds a datastore but no key file/)
    expect(await readdir(d)).toEqual([DATASTORE_DIR])
    // a node on that data dir does not start either
    const node = await createMeshNode({ dataDir: d, listen: ['/ip4/127.0.0.1/tcp/0'], localMesh: true, logger: silentLogger() })
    await expect(node.start()).rejects.toThrow(/no key file/)
    // moved away, the data dir starts anew
    await rm(join(d, DATASTORE_DIR), { recursive: true })
    await mkdir(d, { recursive: true })
    await expect(loadOrCreateKey(d)).resolves.toBeDefined()
  })
})
