/**
 * Where verified cards of other agents are kept and found besides the agent
 * itself: a bounded cache that never goes back to an older card, and the DHT,
 * read so that a replica serving an old record cannot hide a newer one.
 */
import type { PeerId } from '@libp2p/interface'
import type { KadDHT } from '@libp2p/kad-dht'
import { CARD_CACHE_MAX_ENTRIES, CARD_CACHE_TTL_MS, DHT_GET_TIMEOUT_MS } from '../constants.ts'
import { CARD_DHT_SETTLE_MS, CARD_SEQ_INDEX_MAX_ENTRIES } from './constants.ts'
import { AgentNotFoundError, toAapError, type AapError } from '../errors.ts'
import { cardRecordKey, compareCards, decodeCardRecord, verifyCard, type AgentCard } from './card.ts'

interface CacheEntry { card: AgentCard, fetchedAt: number }

/**
 * Verified cards by agent id, the oldest dropped past CARD_CACHE_MAX_ENTRIES;
 * and beside them the highest seq seen of each agent (with that card's
 * expiry), the oldest dropped past CARD_SEQ_INDEX_MAX_ENTRIES, so a card
 * pushed out of the cache by a flood of others still outranks a replay.
 */
export class CardCache {
  private readonly entries = new Map<string, CacheEntry>()
  private readonly seen = new Map<string, { seq: number, expires: number }>()

  /** The cached card when it was fetched within CARD_CACHE_TTL_MS and has not expired. */
  fresh (agentId: string): AgentCard | undefined {
    const cached = this.entries.get(agentId)
    const now = Date.now()
    if (cached !== undefined && now - cached.fetchedAt < CARD_CACHE_TTL_MS && Date.parse(cached.card.expires_at) > now) return cached.card
    return undefined
  }

  /**
   * The newer of `card` and the unexpired card cached of its agent; nothing is
   * cached (a card whose agent may not exist, e.g. a holder's). Undefined when
   * a newer unexpired card was seen but is cached no longer.
   */
  newest (card: AgentCard): AgentCard | undefined {
    const prev = this.entries.get(card.agent_id)?.card
    if (prev !== undefined && compareCards(prev, card) > 0 && Date.parse(prev.expires_at) > Date.now()) return prev
    return this.outranked(card) === undefined ? card : undefined
  }

  /**
   * A verified card a caller offers (a handoff's to_card), for its call only: `newest`, nothing cached or recorded
   * as seen. Any delegator may offer cards, refused handoffs included, so cards kept from offers would let it push
   * honest cards and their seqs out of the bounds, then have an agent's older card cached. AGENT_NOT_FOUND
   * (`reason: stale_seq`) when a newer unexpired card of the agent was seen and is cached no longer.
   */
  offered (card: AgentCard): AgentCard {
    const newest = this.newest(card)
    if (newest === undefined) throw new AgentNotFoundError(`a newer card of ${card.agent_id} was seen; the offered seq ${card.seq} is stale`, { reason: 'stale_seq', offered_seq: card.seq })
    return newest
  }

  /**
   * Cache a verified card unless a newer unexpired one is cached; returns
   * whichever is newest. AGENT_NOT_FOUND (`reason: stale_seq`) when a newer
   * unexpired card of the agent was seen and is cached no longer: the older
   * one is never the answer.
   */
  remember (card: AgentCard): AgentCard {
    const prev = this.entries.get(card.agent_id)
    if (prev !== undefined && compareCards(prev.card, card) > 0 && Date.parse(prev.card.expires_at) > Date.now()) return prev.card
    const seen = this.outranked(card)
    if (seen !== undefined) {
      throw new AgentNotFoundError(`a newer card of ${card.agent_id} was seen (seq ${seen.seq}); seq ${card.seq} is stale`, { reason: 'stale_seq', seen_seq: seen.seq, offered_seq: card.seq })
    }
    this.see(card)
    this.entries.delete(card.agent_id)
    this.entries.set(card.agent_id, { card, fetchedAt: Date.now() })
    if (this.entries.size > CARD_CACHE_MAX_ENTRIES) {
      const oldest = this.entries.keys().next().value
      if (oldest !== undefined) this.entries.delete(oldest)
    }
    return card
  }

  /**
   * `newest`, and when that is the card, its seq (and expiry) is recorded as
   * seen, and an older card cached of its agent is dropped: a holder's card a
   * discover made a result (fetch-order.ts) is verified and its agent backed,
   * so no later answer may go back to an older one. The card itself is still
   * not cached: its agent may not exist (held-cards.ts).
   */
  witness (card: AgentCard): AgentCard | undefined {
    const newest = this.newest(card)
    if (newest !== card) return newest
    this.see(card)
    const prev = this.entries.get(card.agent_id)?.card
    if (prev !== undefined && compareCards(prev, card) < 0) this.entries.delete(card.agent_id)
    return card
  }

  /** Record the card's seq as the highest seen of its agent (the caller checked that nothing outranks it). */
  private see (card: AgentCard): void {
    this.seen.delete(card.agent_id)
    this.seen.set(card.agent_id, { seq: card.seq, expires: Date.parse(card.expires_at) })
    if (this.seen.size > CARD_SEQ_INDEX_MAX_ENTRIES) {
      const oldest = this.seen.keys().next().value
      if (oldest !== undefined) this.seen.delete(oldest)
    }
  }

  /** The highest seq seen of the card's agent when it outranks the card (higher seq, or the same and a later expiry) and has not expired. */
  private outranked (card: AgentCard): { seq: number, expires: number } | undefined {
    const seen = this.seen.get(card.agent_id)
    if (seen === undefined || seen.expires <= Date.now()) return undefined
    const newer = seen.seq > card.seq || (seen.seq === card.seq && seen.expires > Date.parse(card.expires_at))
    return newer ? seen : undefined
  }
}

/** What newestCardInDht counts (DiscoveryStats). */
export interface CardLookupStats {
  dhtSettled: number
  dhtWalksEndedBadly: number
}

/**
 * The newest valid record of the agent in the DHT. kad-dht yields its pick
 * only after pushing it to replicas that hold another value, and throws when
 * one of them refuses; a replica that serves an old record and refuses the
 * correction would hide every newer one. So every valid record seen in the
 * query counts, and an error after one was seen does not lose it. Records
 * that do not verify are reported to `onRejected`.
 *
 * The answer comes CARD_DHT_SETTLE_MS after the first valid record at the
 * latest: replicas that answer at all answer within a round trip or two of
 * each other, so waiting for the rest only waits for peers that take a
 * request and never answer (each would hold the answer for
 * DHT_GET_TIMEOUT_MS). The walk itself goes on after such an answer, within
 * its own DHT_GET_TIMEOUT_MS, so kad-dht still corrects the replicas that
 * served an older record at its end; `signal` ends it only before the answer.
 */
export async function newestCardInDht (dht: KadDHT, agentId: string, signal: AbortSignal, onRejected: (err: AapError, from: string) => void, stats?: CardLookupStats): Promise<AgentCard> {
  let best: AgentCard | undefined
  let settleTimer: ReturnType<typeof setTimeout> | undefined
  let answered = false
  const { promise: settled, resolve: settle } = Promise.withResolvers<'settled'>()
  const consider = async (value: Uint8Array, from: PeerId): Promise<void> => {
    try {
      const card = await verifyCard(decodeCardRecord(value), { expectAgent: agentId })
      if (best === undefined || compareCards(card, best) > 0) best = card
      settleTimer ??= setTimeout(() => { settle('settled') }, CARD_DHT_SETTLE_MS)
    } catch (err) {
      onRejected(toAapError(err), from.toString())
    }
  }
  // the caller's signal ends the walk until there is an answer, not after
  const callerGone = new AbortController()
  const onAbort = (): void => { if (!answered) callerGone.abort(signal.reason) }
  signal.addEventListener('abort', onAbort, { once: true })
  if (signal.aborted) onAbort()
  const walk = (async (): Promise<unknown> => {
    try {
      for await (const ev of dht.get(cardRecordKey(agentId), { signal: AbortSignal.any([callerGone.signal, AbortSignal.timeout(DHT_GET_TIMEOUT_MS)]) })) {
        if (ev.name === 'VALUE') await consider(ev.value, ev.from)
        else if (ev.name === 'PEER_RESPONSE' && ev.record !== undefined) await consider(ev.record.value, ev.from)
      }
      return undefined
    } catch (err) {
      return err
    } finally {
      clearTimeout(settleTimer)
      signal.removeEventListener('abort', onAbort)
    }
  })()
  const ended = await Promise.race([walk.then(err => ({ err })), settled])
  answered = true
  if (ended === 'settled') {
    if (stats !== undefined) stats.dhtSettled++
    // the walk's own end (its corrections) is no longer the caller's business; how it ended is counted
    void walk.then(err => { if (err !== undefined && stats !== undefined) stats.dhtWalksEndedBadly++ })
    return best as AgentCard
  }
  if (best !== undefined) return best
  throw new AgentNotFoundError(ended.err === undefined ? `no valid card for ${agentId} in the DHT` : `no valid card for ${agentId} in the DHT: ${toAapError(ended.err).message}`)
}
