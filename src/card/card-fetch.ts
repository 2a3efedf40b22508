/**
 * One agent's verified card from the agent itself, with the agent's DHT
 * record as the fallback (protocols/card.md, "What the caller checks").
 *
 * The agent is asked first: its answer is its newest card. When it cannot be
 * reached or answers with an error frame, the DHT record is read. When it has
 * not answered CARD_DHT_HEDGE_MS after the call started, the DHT lookup starts
 * beside the call, and the first valid card of the two is the answer (the
 * other is cut off): an agent that is offline, or whose address takes a DHT
 * walk through peers that never answer, costs the hedge and the lookup, not
 * the whole CARD_FETCH_TIMEOUT_MS before it. A fetch without the hedge (a
 * discover's: it has other providers to turn to) starts the lookup beside
 * the call too, later: once the call has gone CARD_DHT_FALLBACK_AFTER_MS
 * unanswered. A discover bounds each fetch at CARD_FETCH_TIMEOUT_MS, which
 * the call used to fill when the agent could not be reached (its dial hung):
 * the record, there all along, was never read (test/net/no-relay.test.ts).
 * The call goes on beside the lookup, so an agent that answers late is still
 * heard, and a fetch whose lookup finds nothing ends when the call does, as
 * before (an unreachable provider holds its place in the discover no longer
 * than it did).
 *
 * An agent that answers with a card that does not verify gets no lookup (a
 * hedged one still running is cut off): its record could only be an older
 * card of the same key, and a lookup per lie would let a hostile provider slow
 * every discovery down.
 */
import type { PeerId } from '@libp2p/interface'
import type { KadDHT } from '@libp2p/kad-dht'
import { CARD_FETCH_TIMEOUT_MS } from '../constants.ts'
import { AgentNotFoundError, toAapError, type AapError } from '../errors.ts'
import type { RpcClient } from '../wire/rpc.ts'
import { verifyCard, type AgentCard } from './card.ts'
import { newestCardInDht } from './card-store.ts'
import { CARD_DHT_FALLBACK_AFTER_MS, CARD_DHT_HEDGE_MS } from './constants.ts'
import type { DiscoveryStats } from './discovery-stats.ts'
import type { CardSource } from './fetch-order.ts'
import type { SignatureCache } from '../identity/signature-cache.ts'

export interface CardFetchDeps {
  client: RpcClient
  dht: KadDHT
  stats: DiscoveryStats
  /** A card that did not verify, and who served it. */
  reject: (err: AapError, from: string) => void
  /** The node's verification cache (VerifyOptions.signatures). */
  signatures?: SignatureCache
}

export interface CardFetchOptions {
  /** Bounds the whole fetch (the agent's call and the lookup). */
  signal: AbortSignal
  /**
   * Start the DHT lookup beside a call still unanswered after CARD_DHT_HEDGE_MS (default true). A discover passes
   * false: it has other providers to turn to, and its lookup starts after CARD_DHT_FALLBACK_AFTER_MS (not counted
   * as a hedge).
   */
  hedge?: boolean
  /** Where the card came from: the agent or the DHT. */
  source?: (s: CardSource) => void
}

type PeerOutcome = { answer: Record<string, unknown> } | { error: AapError }
type DhtOutcome = { card: AgentCard } | { error: AapError }

/** The agent's verified card (not cached here), or AGENT_NOT_FOUND naming why each source failed. */
export async function fetchCard (deps: CardFetchDeps, agentId: string, peer: PeerId, opts: CardFetchOptions): Promise<AgentCard> {
  const { signal } = opts
  const callStop = new AbortController()
  const lookupStop = new AbortController()
  let lookup: Promise<DhtOutcome> | undefined
  const startLookup = (): Promise<DhtOutcome> => {
    if (lookup !== undefined) return lookup
    deps.stats.dhtFallbacks++
    lookup = newestCardInDht(deps.dht, agentId, AbortSignal.any([signal, lookupStop.signal]), deps.reject, deps.stats)
      .then(card => ({ card }), (err: unknown) => ({ error: toAapError(err) }))
    return lookup
  }
  const call: Promise<PeerOutcome> = deps.client.call(peer, 'get_card', {}, {
    signal: AbortSignal.any([signal, callStop.signal]),
    callTimeoutMs: CARD_FETCH_TIMEOUT_MS,
    responseTimeoutMs: CARD_FETCH_TIMEOUT_MS
  }).then(answer => ({ answer }), (err: unknown) => ({ error: toAapError(err) }))

  const hedged = opts.hedge !== false
  let hedgeTimer: ReturnType<typeof setTimeout> | undefined
  try {
    let outcome: PeerOutcome
    const hedge = new Promise<'hedge'>(resolve => { hedgeTimer = setTimeout(resolve, hedged ? CARD_DHT_HEDGE_MS : CARD_DHT_FALLBACK_AFTER_MS, 'hedge') })
    const first = await Promise.race([call, hedge])
    if (first !== 'hedge') {
      outcome = first
    } else {
      if (hedged) deps.stats.dhtHedges++
      const next = await Promise.race([call, startLookup().then(d => ({ dht: d }))])
      if ('dht' in next && 'card' in next.dht) {
        callStop.abort()
        opts.source?.('dht')
        return next.dht.card
      }
      // the call answered first, or the lookup found nothing: the call's outcome decides
      outcome = 'dht' in next ? await call : next
    }
    if ('answer' in outcome) {
      lookupStop.abort()
      try {
        const card = await verifyCard(outcome.answer.card, { expectAgent: agentId, ...(deps.signatures === undefined ? {} : { signatures: deps.signatures }) })
        deps.stats.fetchedCards++
        opts.source?.('agent')
        return card
      } catch (err) {
        const e = toAapError(err)
        deps.reject(e, agentId)
        throw new AgentNotFoundError(`agent ${agentId} answered with an invalid card: ${e.message}`, {
          agent_id: agentId, reason: 'invalid_card', peer_error: e.code
        }, { cause: e })
      }
    }
    const peerError = outcome.error
    const peerDetails = { peer_error: peerError.code, ...(typeof peerError.details?.reason === 'string' ? { peer_reason: peerError.details.reason } : {}) }
    if (signal.aborted && lookup === undefined) {
      throw new AgentNotFoundError(`agent ${agentId} did not answer in time`, { agent_id: agentId, reason: 'timeout', ...peerDetails }, { cause: peerError })
    }
    opts.source?.('dht')
    const found = await startLookup()
    if ('card' in found) return found.card
    throw new AgentNotFoundError(`agent ${agentId} not found: ${peerError.message}; DHT: ${found.error.message}`, {
      agent_id: agentId, ...peerDetails, dht_error: found.error.code
    }, { cause: peerError })
  } finally {
    clearTimeout(hedgeTimer)
    // nothing of this fetch outlives it
    callStop.abort()
    lookupStop.abort()
  }
}
