/**
 * Agent ids this node talks to, parsed once: base58 and multihash decoding
 * is not free, and every run call names its peer by agent id.
 */
import type { PeerId } from '@libp2p/interface'
import { PEER_ID_CACHE_MAX_ENTRIES } from '../constants.ts'
import { peerIdOfAgent } from '../identity/identity.ts'

const peerIds = new Map<string, PeerId>()

/** The PeerId of an agent id; throws INVALID_REQUEST when it is not one. */
export function peerOf (agentId: string): PeerId {
  let id = peerIds.get(agentId)
  if (id === undefined) {
    id = peerIdOfAgent(agentId)
    if (peerIds.size >= PEER_ID_CACHE_MAX_ENTRIES) peerIds.clear()
    peerIds.set(agentId, id)
  }
  return id
}
