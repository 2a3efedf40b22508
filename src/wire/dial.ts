/**
 * A stream to a peer whose connection is closing.
 *
 * libp2p's dialProtocol opens the stream on a connection it already has to
 * the peer. One that either side's connection budget is closing at that
 * instant refuses it (ConnectionClosedError: "The connection muxer is
 * "closed" and not "open""), and a request failed although the peer was up:
 * one task of a 100-node simulation did. Such a refusal is tried once more,
 * on a new connection (`force`), within the caller's signal; so is a stream
 * the peer's side closed or reset while the protocol was being negotiated
 * (UnexpectedEOFError "stream closed while reading 0/1 bytes": a delegation
 * of a 200-node simulation failed so, session 30). Either way no byte of the
 * caller's request was sent. Any other failure is the caller's to report.
 */
import type { Libp2p, PeerId, Stream } from '@libp2p/interface'
import { reasonOf } from '../errors.ts'
import type { Logger } from '../logger.ts'

/** What libp2p throws for a stream asked of a connection that is closing or closed. */
const CLOSING_CONNECTION_ERRORS = new Set(['ConnectionClosedError', 'ConnectionClosingError', 'MuxerClosedError'])
/** What it throws for a stream that ended while its protocol was negotiated. */
const CUT_NEGOTIATION_ERRORS = new Set(['UnexpectedEOFError', 'StreamResetError'])

export function isClosingConnectionError (err: unknown): boolean {
  const name = (err as { name?: unknown } | null)?.name
  return typeof name === 'string' && CLOSING_CONNECTION_ERRORS.has(name)
}

/** Whether `err` says the stream ended while its protocol was negotiated (nothing of a request was sent on it). */
export function isCutNegotiationError (err: unknown): boolean {
  const name = (err as { name?: unknown } | null)?.name
  return typeof name === 'string' && CUT_NEGOTIATION_ERRORS.has(name)
}

/** Streams opened on a new connection because the one they were first asked of was closing, or their negotiation was cut (all hosts of the process). */
export const dialStats = { retriedOnClosingConnection: 0, retriedOnCutNegotiation: 0 }

export async function dialStream (host: Pick<Libp2p, 'dialProtocol'>, peer: PeerId, protocol: string, opts: { signal: AbortSignal, log?: Logger }): Promise<Stream> {
  try {
    return await host.dialProtocol(peer, protocol, { signal: opts.signal })
  } catch (err) {
    const closing = isClosingConnectionError(err)
    if (opts.signal.aborted || (!closing && !isCutNegotiationError(err))) throw err
    if (closing) dialStats.retriedOnClosingConnection++
    else dialStats.retriedOnCutNegotiation++
    opts.log?.debug({ peer: peer.toString(), protocol, err: reasonOf(err) }, closing ? 'the connection was closing; opening the stream on a new one' : 'the stream ended while its protocol was negotiated; opening it on a new connection')
    return await host.dialProtocol(peer, protocol, { signal: opts.signal, force: true })
  }
}

/** Whether a stream to `peer` can open without a dial: this node holds an open connection to it. */
export function holdsConnection (host: Pick<Libp2p, 'getConnections'>, peer: PeerId): boolean {
  return host.getConnections(peer).some(c => c.status === 'open')
}

/**
 * Whether a dial to `peer` needs no peer routing (no DHT walk): this node
 * holds an open connection to it, or the peer store holds addresses for it.
 * A peer that leaves the peer store while it is read is not (NotFoundError);
 * any other failure of the read is thrown, the caller's to log.
 */
export async function dialableWithoutRouting (host: Pick<Libp2p, 'getConnections' | 'peerStore'>, peer: PeerId): Promise<boolean> {
  if (holdsConnection(host, peer)) return true
  if (!(await host.peerStore.has(peer))) return false
  try {
    return (await host.peerStore.get(peer)).addresses.length > 0
  } catch (err) {
    // removed between the two reads: not reachable without routing
    if ((err as { name?: unknown } | null)?.name === 'NotFoundError') return false
    throw err
  }
}

/**
 * Whether this node holds an open connection to `peer` that it opened itself.
 * Any peer can connect to a node, so a connection the peer opened says
 * nothing about it: what ranks peers (discovery's fetch order) asks this.
 */
export function holdsOwnConnection (host: Pick<Libp2p, 'getConnections'>, peer: PeerId): boolean {
  return host.getConnections(peer).some(c => c.status === 'open' && c.direction === 'outbound')
}
