/**
 * Which streams carry a request that is not answered yet, for the connection
 * budget (budget.ts): closing such a connection would cut the request (a
 * delegation cut that way fails with AGENT_NOT_FOUND although both agents are
 * up). The calling side (client.ts) and the answering side (responder.ts) of
 * each aap stream register a probe for their stream; a stream this node
 * opened that is still negotiating its protocol (empty protocol) counts as
 * busy too, since it is opened for one of its own requests. One the peer
 * opened does not: nothing of a request on it has been read yet, and a peer
 * that kept one such stream always pending (libp2p's negotiation timeout is
 * per stream) would otherwise make its connection one the budget never
 * closes; some hundred throwaway peer ids doing so held a node at its hard
 * limit, refusing everyone else (found by a review).
 *
 * A circuit relay's hop and stop streams this node opened count as busy
 * too: each carries a relayed connection (a client's hop stream to its
 * relay, a relay's stop stream to a reservation holder), which closing the
 * connection cuts with whatever runs on it. Those a peer opened do not, for
 * the reason above: anyone can open hop streams to a relay, or stop streams
 * to anyone, and so keep its connection (the private node's relay is kept by
 * its worth and by the relayed connections it carries, budget.ts). A circuit
 * ends after RELAY_CONNECTION_MAX_DURATION_MS or RELAY_CONNECTION_MAX_BYTES.
 */
import { RELAY_V2_HOP_CODEC, RELAY_V2_STOP_CODEC } from '@libp2p/circuit-relay-v2'
import type { Connection, Stream } from '@libp2p/interface'

const RELAY_PROTOCOLS = new Set([RELAY_V2_HOP_CODEC, RELAY_V2_STOP_CODEC])

const probes = new WeakMap<Stream, () => boolean>()

/** `busy` says whether the stream has a request in flight right now (read at each prune round). */
export function watchRequests (stream: Stream, busy: () => boolean): void {
  probes.set(stream, busy)
}

/** Whether closing the connection now would cut a request in flight on it. */
export function carriesRequest (conn: Pick<Connection, 'streams'>): boolean {
  for (const s of conn.streams) {
    if (s.protocol === '' && s.status === 'open' && s.direction === 'outbound') return true
    if (s.status === 'open' && s.direction === 'outbound' && RELAY_PROTOCOLS.has(s.protocol)) return true
    if (probes.get(s)?.() === true) return true
  }
  return false
}
