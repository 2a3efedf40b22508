/**
 * Identity and storage of one node: the Ed25519 key that the agent id is
 * derived from, and the datastore that libp2p, the DHT and the run store share.
 */
import { randomBytes } from 'node:crypto'
import { link, mkdir, open, readFile, rm, stat } from 'node:fs/promises'
import { join } from 'node:path'
import { generateKeyPair, generateKeyPairFromSeed, privateKeyFromProtobuf, privateKeyToProtobuf } from '@libp2p/crypto/keys'
import { peerIdFromPrivateKey, peerIdFromPublicKey, peerIdFromString } from '@libp2p/peer-id'
import { MemoryDatastore } from 'datastore-core'
import { LevelDatastore } from 'datastore-level'
import type { PrivateKey, PeerId, PublicKey } from '@libp2p/interface'
import type { Datastore } from 'interface-datastore'
import { AgentNotFoundError, InvalidRequestError } from '../errors.ts'
import { makeRoom } from '../util/bounded.ts'
import { AGENT_ID_CACHE_ENTRIES } from './constants.ts'

export const KEY_FILE = 'peer.key'
export const DATASTORE_DIR = 'datastore'

/**
 * Load the node's key from `dataDir`, creating it (owner-only) on first
 * start. The new key is written to a file of its own, flushed to disk, then
 * linked to its name in one step: a crash never leaves a key file half
 * written, and of two processes starting at once on one data dir, the one
 * that links second reads the other's key.
 */
export async function loadOrCreateKey (dataDir: string): Promise<PrivateKey> {
  await mkdir(dataDir, { recursive: true, mode: 0o700 })
  const file = join(dataDir, KEY_FILE)
  const existing = await readKey(file)
  if (existing !== undefined) return existing
  // the node makes its key before it opens its datastore: a datastore without a key is another identity's,
  // whose runs a new key would go on writing into, signed by an agent they do not name
  if (await exists(join(dataDir, DATASTORE_DIR))) {
    throw new Error(`the data directory ${dataDir} holds a datastore but no key file ${KEY_FILE}: its runs belong to the key that is gone; ` +
      `put that key back, or move ${DATASTORE_DIR} away to start with a new identity`)
  }
  const key = await generateKeyPair('Ed25519')
  const tmp = `${file}.${process.pid}.${randomBytes(4).toString('hex')}.tmp`
  // the temporary file goes whatever happens: written, linked or refused (a full disk, say)
  try {
    const fh = await open(tmp, 'wx', 0o600)
    try {
      await fh.writeFile(privateKeyToProtobuf(key))
      await fh.sync()
    } finally {
      await fh.close()
    }
    await link(tmp, file)
    // the link is an entry of the directory: synced, so a power cut cannot take the key and leave what it signed
    await syncDir(dataDir)
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code !== 'EEXIST') throw new Error(`cannot write the node key ${file}: ${(err as Error).message}`, { cause: err })
    const theirs = await readKey(file)
    if (theirs !== undefined) return theirs
    throw err
  } finally {
    await rm(tmp, { force: true })
  }
  return key
}

/** The key in `file`; undefined when there is none; a clear error when what is there is not a key. */
async function readKey (file: string): Promise<PrivateKey | undefined> {
  let bytes: Uint8Array
  try {
    bytes = await readFile(file)
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'ENOENT') return undefined
    throw err
  }
  let key: PrivateKey
  try {
    key = privateKeyFromProtobuf(bytes)
  } catch (err) {
    throw new Error(`the key file ${file} (${bytes.byteLength} bytes) is not a private key: ${(err as Error).message}; move it away to start with a new identity`, { cause: err })
  }
  agentKey(key, `the key file ${file}`)
  // an Ed25519 key file holds the seed and the public key side by side: a damaged byte in either still
  // parses, and the node would sign nothing that verifies (a damaged public half is another agent id too)
  const whole = await generateKeyPairFromSeed('Ed25519', key.raw.subarray(0, 32))
  if (!whole.publicKey.equals(key.publicKey)) {
    throw new Error(`the key file ${file} is damaged: its public key is not the one its private key makes; restore it from a copy, or move it away to start with a new identity`)
  }
  return key
}

/**
 * `key`, when it can be an agent's: an agent id is an Ed25519 key
 * (peerIdOfAgent refuses any other), so a node started with another kind
 * would run, but no peer would take its card, events or calls.
 */
export function agentKey (key: PrivateKey, what = 'the private key'): PrivateKey {
  if (key.type !== 'Ed25519') {
    throw new InvalidRequestError(`${what} is a ${key.type} key: an agent's key is Ed25519`, { reason: 'key_type', type: key.type })
  }
  return key
}

async function exists (path: string): Promise<boolean> {
  try {
    await stat(path)
    return true
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'ENOENT') return false
    throw err
  }
}

async function syncDir (dir: string): Promise<void> {
  const fh = await open(dir, 'r')
  try {
    await fh.sync()
  } finally {
    await fh.close()
  }
}

/** The data directory's datastore is open in another process (another node on the same --data-dir). */
export class DataDirLockedError extends Error {
  readonly dataDir: string

  constructor (dataDir: string, cause: unknown) {
    super(`the datastore of ${dataDir} is held by another process (another node on this data directory)`, { cause })
    this.name = 'DataDirLockedError'
    this.dataDir = dataDir
  }
}

/** LevelDB's code for a LOCK file another process holds (classic-level). */
const LEVEL_LOCKED = 'LEVEL_LOCKED'

export async function openDatastore (dataDir: string | undefined): Promise<Datastore & { close?: () => Promise<void> }> {
  if (dataDir === undefined) return new MemoryDatastore()
  await mkdir(dataDir, { recursive: true, mode: 0o700 })
  const path = join(dataDir, DATASTORE_DIR)
  const ds = new LevelDatastore(path)
  try {
    // the level itself first, with the options LevelDatastore.open() passes: its error keeps the
    // reason (LEVEL_LOCKED), which the datastore's own open() flattens into "Database failed to open"
    await ds.db.open({ createIfMissing: true, compression: false })
  } catch (err) {
    const cause = (err as { cause?: { code?: unknown, message?: unknown } }).cause
    if (cause?.code === LEVEL_LOCKED) throw new DataDirLockedError(dataDir, err)
    const why = typeof cause?.message === 'string' ? cause.message : (err as Error).message
    throw new Error(`cannot open the datastore ${path}: ${why}`, { cause: err })
  }
  // already open: this only keeps whatever else the datastore's open() may do
  await ds.open()
  return ds
}

/** Agent ids of the keys this process holds, worked out once per key (a public key, a CID and base58 each time). */
const agentIds = new WeakMap<PrivateKey, string>()

/** The agent id of a key: its base58btc PeerId. */
export function agentIdOf (key: PrivateKey): string {
  let id = agentIds.get(key)
  if (id === undefined) {
    id = peerIdFromPrivateKey(key).toString()
    agentIds.set(key, id)
  }
  return id
}

/** Agent ids parsed before, at most AGENT_ID_CACHE_ENTRIES (only valid ones). */
const parsedIds = new Map<string, PeerId>()

/**
 * Parse an agent id into the PeerId it certifies; AGENT_NOT_FOUND if it is
 * not one. An id is its key's one encoding: the key's protobuf can be written
 * other ways (its fields in the other order) that libp2p parses as the same
 * key under another id, and one agent with many ids would count as many
 * wherever the node keeps something per agent; those are refused
 * (`reason: non_canonical`).
 */
export function peerIdOfAgent (agentId: string): PeerId {
  const known = parsedIds.get(agentId)
  if (known !== undefined) return known
  let id: PeerId
  try {
    id = peerIdFromString(agentId)
    if (id.publicKey === undefined) throw new Error('agent id does not embed a public key')
    // the profile's agent ids are Ed25519 (protocols/errors.md, common.schema.json): another key type would sign
    // what implementations that follow it refuse, and ECDSA gives one content many valid signatures
    if (id.type !== 'Ed25519') throw new Error(`agent id is a ${id.type} key, not Ed25519`)
  } catch (err) {
    throw new AgentNotFoundError(`"${agentId.slice(0, 80)}" is not a valid agent id`, { agent_id: agentId.slice(0, 128) }, { cause: err })
  }
  const canonical = peerIdFromPublicKey(id.publicKey).toString()
  if (canonical !== agentId) {
    throw new AgentNotFoundError(`"${agentId.slice(0, 80)}" is not a valid agent id: its key's agent id is ${canonical}`, { agent_id: agentId.slice(0, 128), reason: 'non_canonical' })
  }
  makeRoom(parsedIds, AGENT_ID_CACHE_ENTRIES)
  parsedIds.set(agentId, id)
  return id
}

/** The public key an agent id certifies. */
export function publicKeyOfAgent (agentId: string): PublicKey {
  const key = peerIdOfAgent(agentId).publicKey
  if (key === undefined) throw new AgentNotFoundError('agent id does not embed a public key')
  return key
}
