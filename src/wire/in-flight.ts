/**
 * Which streams carry a request that is not answered yet, for the connection
 * budget (budget.ts): closing such a connection would cut the request (a
 * delegation cut that way fails with AGENT_NOT_FOUND although both agents are
 * up). The calling side (client.ts) and the answering side (responder.ts) of
 * each aap stream register a probe for their stream; a stream still
 * negotiating its protocol (empty protocol, bounded by libp2p's negotiation
 * timeout) counts as busy too, since it is opened for a request.
 */
import type { Connection, Stream } from '@libp2p/interface'

const probes = new WeakMap<Stream, () => boolean>()

/** `busy` says whether the stream has a request in flight right now (read at each prune round). */
export function watchRequests (stream: Stream, busy: () => boolean): void {
  probes.set(stream, busy)
}

/** Whether closing the connection now would cut a request in flight on it. */
export function carriesRequest (conn: Pick<Connection, 'streams'>): boolean {
  for (const s of conn.streams) {
    if (s.protocol === '' && s.status === 'open') return true
    if (probes.get(s)?.() === true) return true
  }
  return false
}
