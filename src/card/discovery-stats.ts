/**
 * Counters of a node's discovery service, for metrics, tests and
 * simulations: what announcing and looking up cost and how it ended.
 */

/** Counters a caller (metrics, tests, simulations) can read. */
export interface DiscoveryStats {
  rejectedCards: number
  fetchedCards: number
  /** DHT lookups of one agent's card (card-fetch.ts); of them, those started beside a call the agent had not answered within CARD_DHT_HEDGE_MS, and those answered CARD_DHT_SETTLE_MS after their first valid record (before the walk ended), and of those, walks that then ran out of time or failed (a refused correction, DHT_GET_TIMEOUT_MS). */
  dhtFallbacks: number
  dhtHedges: number
  dhtSettled: number
  dhtWalksEndedBadly: number
  /** Announcements of this node's card that reached at least one peer. */
  announcements: number
  /** Providers whose card could not be fetched or verified during a discover; of them, fetches that ran out their own time (CARD_FETCH_TIMEOUT_MS) and fetches the discover's deadline ended. */
  unreachableProviders: number
  providerFetchTimeouts: number
  providerFetchesCutShort: number
  /** Card fetches that ended (answered or not) CARD_FETCH_SLOW_MS or more after they started. */
  slowProviderFetches: number
  /** Announcements that failed with an error (not just reached nobody). */
  failedAnnouncements: number
  /** DHT walks started to announce a provider key (one per key the node did not announce yet, and per retry of a short one). */
  providerWalks: number
  /** Provider records those walks sent (ADD_PROVIDER), walks cut at DHT_PROVIDE_WALK_MS (records sent to the closest that answered), walks that sent fewer than enough (announce.ts), and retries of such keys. */
  providerRecordsSent: number
  /** ADD_PROVIDER sends that failed or got no answer within DHT_PROVIDE_SEND_TIMEOUT_MS. */
  providerRecordsFailed: number
  /** Peers that refused or failed this node's card record put (a replica whose record store is full, protocols/card.md, among them). */
  cardPutsRefused: number
  providerWalksCut: number
  /** Provider walks that ended once converged, before kad-dht's own end (src/wire/dht-provide.ts WalkProgress). */
  providerWalksConverged: number
  shortProviderWalks: number
  announceRetries: number
  /** Provider keys withdrawn because a newer card no longer names them. */
  withdrawnKeys: number
  /** Cached cards that lacked what a discover or delegation asked of them, fetched again from their agent (CARD_MISMATCH_REFRESH_MS). */
  mismatchRefreshes: number
  /** Provider lookups (DHT walks) started by discovers. */
  lookups: number
  /** Peers that answered a lookup, and requests of a lookup that failed (the walk goes on). */
  lookupAnswers: number
  /** Of the answers, those of contacts this node held a connection to, asked before any walk (src/wire/dht-providers.ts). */
  connectedAnswers: number
  /** GET_PROVIDERS sent in that round, one at a time; of them, those sent because the one before was slow (DHT_CONNECTED_HEDGE_MS). */
  connectedAsks: number
  connectedHedges: number
  /** Lookups that went on to kad-dht's walk: the connected round named too few providers (the others dialed nobody for it). */
  lookupWalks: number
  lookupErrors: number
  /** Providers the lookups named, other than this node and repeats. */
  lookupProviders: number
  /** New providers an answer named past its peer's share of one discover (DISCOVER_PROVIDERS_PER_PEER_MAX, src/wire/dht-providers.ts): dropped, not counted above, and still named if another peer names them. */
  providersOverShare: number
  /** Waits of a lookup for named providers to prove useless that ran out (DHT_LOOKUP_PATIENCE_MS): it named more all the same. */
  lookupsWaitedOut: number
  /** Lookups that found providers past kad-dht's walk (this node's own records, the key's closest peers: src/wire/dht-providers.ts), and those providers. */
  providerSweeps: number
  sweptProviders: number
  /** Discovers whose deadline (DISCOVER_TIMEOUT_MS or the caller's signal) ended them before the lookup did. */
  discoversCutShort: number
  /** Cards held for others (held-cards.ts): pulled from their agents, pulls that failed, pulls dropped with the queue full, pulls not made because the provider's connection had closed by their turn, cards handed out. */
  heldCardPulls: number
  heldCardPullFailures: number
  /** Of the failed pulls: those that ran out of time, those whose stream or connection was lost (or could not be opened), and those whose card did not verify; the rest were refused by the provider (a typed error). */
  heldCardPullTimeouts: number
  heldCardPullsLost: number
  heldCardPullsInvalid: number
  heldCardPullsDropped: number
  heldCardPullsSkipped: number
  /** Failed pulls (out of time, connection lost) set to be tried again later. */
  heldCardPullRetries: number
  heldCardsServed: number
  /** get_held_cards asked by provider key, answered here. */
  heldKeyAnswers: number
  /** Asks this node's discovers sent to a peer whose DHT answer named providers, asks that failed, and the verified cards they brought. */
  heldCardAsks: number
  heldCardAskFailures: number
  heldCardsReceived: number
  /** Agents whose matching card a holder sent while no other source had named them (fetch-order.ts `backed`): asked for their card themselves. */
  heldCardsUnbacked: number
  /** get_held_cards asked by provider key (of the contact the lookup asks first), and those that failed or ran out of time. */
  heldKeyAsks: number
  heldKeyAskFailures: number
  /** Of `heldKeyAsks`, those sent to a further connected contact because the asks before left cards wanted. */
  heldKeyAsksNext: number
}

export function newDiscoveryStats (): DiscoveryStats {
  return {
    rejectedCards: 0,
    fetchedCards: 0,
    dhtFallbacks: 0,
    dhtHedges: 0,
    dhtSettled: 0,
    dhtWalksEndedBadly: 0,
    announcements: 0,
    unreachableProviders: 0,
    providerFetchTimeouts: 0,
    providerFetchesCutShort: 0,
    slowProviderFetches: 0,
    failedAnnouncements: 0,
    providerWalks: 0,
    providerRecordsSent: 0,
    providerRecordsFailed: 0,
    cardPutsRefused: 0,
    providerWalksCut: 0,
    providerWalksConverged: 0,
    shortProviderWalks: 0,
    announceRetries: 0,
    withdrawnKeys: 0,
    mismatchRefreshes: 0,
    lookups: 0,
    lookupAnswers: 0,
    connectedAnswers: 0,
    connectedAsks: 0,
    connectedHedges: 0,
    lookupWalks: 0,
    lookupErrors: 0,
    lookupProviders: 0,
    providersOverShare: 0,
    lookupsWaitedOut: 0,
    providerSweeps: 0,
    sweptProviders: 0,
    discoversCutShort: 0,
    heldCardPulls: 0,
    heldCardPullFailures: 0,
    heldCardPullTimeouts: 0,
    heldCardPullsLost: 0,
    heldCardPullsInvalid: 0,
    heldCardPullsDropped: 0,
    heldCardPullsSkipped: 0,
    heldCardPullRetries: 0,
    heldCardsServed: 0,
    heldKeyAnswers: 0,
    heldCardAsks: 0,
    heldCardAskFailures: 0,
    heldCardsReceived: 0,
    heldCardsUnbacked: 0,
    heldKeyAsks: 0,
    heldKeyAskFailures: 0,
    heldKeyAsksNext: 0
  }
}
