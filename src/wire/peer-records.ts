/**
 * Signed peer records sent along with a request, so that the one who gets
 * the request can reach a third agent without looking it up.
 *
 * A peer record is the agent's own signed envelope of its addresses (libp2p's
 * `peerRecordEnvelope`, which identify brings on every connection). When a
 * delegator asks an executor to hand a run to an agent it has just found,
 * it holds that agent's record; sent with the request, it spares the executor
 * a DHT walk for the agent's addresses before its dial, and the handoff does
 * not fail when that walk finds nothing (it did on a 500-node simulation).
 *
 * Above this file the record is an opaque string: no other layer sees an
 * address. A record is checked by the peer store (the envelope's signature,
 * and that it is the named agent's); one that is not valid, too large or not
 * base64url is refused and counted, and the request goes on without it: the
 * dial can still look the agent up.
 */
import type { PeerId } from '@libp2p/interface'
import type { Logger } from '../logger.ts'
import type { MeshHost } from './host.ts'
import { PEER_RECORD_MAX_BYTES, PEER_RECORD_MAX_CHARS } from './network-constants.ts'

/** What this node did with the peer records it was sent. */
export interface PeerRecordStats {
  /** Records added to the peer store. */
  taken: number
  /** Records the peer store did not take: no newer than the one it holds, or another agent's (the store says no more). */
  notTaken: number
  /** Records refused before the store: not base64url, too large, or an envelope whose signature does not hold. */
  refused: number
}

const stats = new WeakMap<MeshHost, PeerRecordStats>()

/** What `host` did with the peer records it was sent; zeros when it was sent none. */
export function peerRecordStats (host: MeshHost): PeerRecordStats {
  let s = stats.get(host)
  if (s === undefined) {
    s = { taken: 0, notTaken: 0, refused: 0 }
    stats.set(host, s)
  }
  return s
}

const BASE64URL = /^[A-Za-z0-9_-]+$/

/**
 * The signed peer record this node holds of `peer`, as base64url without
 * padding, to send along with a request; undefined when it holds none (or
 * one larger than PEER_RECORD_MAX_BYTES).
 */
export async function heldPeerRecord (host: MeshHost, peer: PeerId, log: Logger): Promise<string | undefined> {
  try {
    const envelope = (await host.peerStore.get(peer)).peerRecordEnvelope
    if (envelope === undefined || envelope.byteLength > PEER_RECORD_MAX_BYTES) return undefined
    return Buffer.from(envelope.buffer, envelope.byteOffset, envelope.byteLength).toString('base64url')
  } catch (err) {
    // a peer the store has no entry for has no record to send
    if ((err as { name?: string }).name !== 'NotFoundError') log.debug({ err, peer: peer.toString() }, 'could not read a peer record to send')
    return undefined
  }
}

/**
 * Add a peer record of `peer` that came with a request to the peer store.
 * True when it was taken; false (counted; a refusal also logged at debug)
 * when it was not. Never throws: a bad record is the sender's mistake, not the
 * request's end.
 */
export async function takePeerRecord (host: MeshHost, peer: PeerId, record: string, log: Logger): Promise<boolean> {
  const s = peerRecordStats(host)
  if (record.length > PEER_RECORD_MAX_CHARS || !BASE64URL.test(record)) {
    s.refused++
    log.debug({ peer: peer.toString(), chars: record.length }, 'refused a peer record that is not base64url within PEER_RECORD_MAX_BYTES')
    return false
  }
  try {
    const taken = await host.peerStore.consumePeerRecord(Buffer.from(record, 'base64url'), { expectedPeer: peer })
    if (taken) s.taken++
    else s.notTaken++
    return taken
  } catch (err) {
    s.refused++
    log.debug({ err, peer: peer.toString() }, 'refused a peer record')
    return false
  }
}
