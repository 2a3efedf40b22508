/**
 * Identity and storage of one node: the Ed25519 key that the agent id is
 * derived from, and the datastore that libp2p, the DHT and the run store share.
 */
import { mkdir, readFile, writeFile, chmod } from 'node:fs/promises'
import { join } from 'node:path'
import { generateKeyPair, privateKeyFromProtobuf, privateKeyToProtobuf } from '@libp2p/crypto/keys'
import { peerIdFromPrivateKey, peerIdFromString } from '@libp2p/peer-id'
import { MemoryDatastore } from 'datastore-core'
import { LevelDatastore } from 'datastore-level'
import type { PrivateKey, PeerId, PublicKey } from '@libp2p/interface'
import type { Datastore } from 'interface-datastore'
import { AgentNotFoundError } from '../errors.ts'

export const KEY_FILE = 'peer.key'
export const DATASTORE_DIR = 'datastore'

/** Load the node's key from `dataDir`, creating it (owner-only) on first start. */
export async function loadOrCreateKey (dataDir: string): Promise<PrivateKey> {
  await mkdir(dataDir, { recursive: true, mode: 0o700 })
  const file = join(dataDir, KEY_FILE)
  try {
    return privateKeyFromProtobuf(await readFile(file))
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code !== 'ENOENT') throw err
  }
  const key = await generateKeyPair('Ed25519')
  await writeFile(file, privateKeyToProtobuf(key), { mode: 0o600, flag: 'wx' })
  await chmod(file, 0o600)
  return key
}

export async function openDatastore (dataDir: string | undefined): Promise<Datastore & { close?: () => Promise<void> }> {
  if (dataDir === undefined) return new MemoryDatastore()
  await mkdir(dataDir, { recursive: true, mode: 0o700 })
  const ds = new LevelDatastore(join(dataDir, DATASTORE_DIR))
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

/** Parse an agent id into the PeerId it certifies; AGENT_NOT_FOUND if it is not one. */
export function peerIdOfAgent (agentId: string): PeerId {
  try {
    const id = peerIdFromString(agentId)
    if (id.publicKey === undefined) throw new Error('agent id does not embed a public key')
    return id
  } catch (err) {
    throw new AgentNotFoundError(`"${agentId.slice(0, 80)}" is not a valid agent id`, { agent_id: agentId.slice(0, 128) }, { cause: err })
  }
}

/** The public key an agent id certifies. */
export function publicKeyOfAgent (agentId: string): PublicKey {
  const key = peerIdOfAgent(agentId).publicKey
  if (key === undefined) throw new AgentNotFoundError('agent id does not embed a public key')
  return key
}
