/**
 * Limits of discovery (src/card) added after src/constants.ts filled up; the
 * protocol specs name them like the others (test/wire-docs.test.ts reads this
 * file too).
 */
import { CARD_CACHE_MAX_ENTRIES, CARD_FETCH_TIMEOUT_MS, CARD_TTL_MS, DHT_PROVIDERS_PER_ANSWER } from '../constants.ts'

/**
 * A cached card that lacks what a caller wants of it (the capability a
 * discover looks for, or a delegation names) is fetched again from the agent
 * before the agent counts as lacking it: the agent may have published a
 * newer card since (one that adds the capability), which its provider record
 * already names. One such fetch per agent at a time, whatever the number of
 * callers (those that come while it runs wait for it); the next may start
 * this long after it ended, and until then the cached card is the answer.
 */
export const CARD_MISMATCH_REFRESH_MS = 5_000

/** The longest time budget a caller may give one discover (DiscoverOptions.timeoutMs; DISCOVER_TIMEOUT_MS by default). */
export const DISCOVER_TIMEOUT_MAX_MS = 30_000

/**
 * Providers one peer's DHT answers may name to a discover, all its answers
 * together (an honest node names at most DHT_PROVIDERS_PER_ANSWER per
 * answer); the rest are dropped and counted.
 */
export const DISCOVER_PROVIDERS_PER_PEER_MAX = DHT_PROVIDERS_PER_ANSWER

/**
 * A card's DHT lookup ends at most this long after the first valid record
 * came (card-store.ts newestCardInDht): the newest of the records seen by
 * then is the answer, so peers that take the request and never answer cannot
 * hold it for DHT_GET_TIMEOUT_MS.
 */
export const CARD_DHT_SETTLE_MS = 500

/**
 * `getCard` asks the agent first; when the agent has not answered this long
 * after, the DHT lookup starts beside the call (card-fetch.ts), and whichever
 * valid card comes first is the answer. An offline agent then costs this
 * plus the lookup, not CARD_FETCH_TIMEOUT_MS before it.
 */
export const CARD_DHT_HEDGE_MS = 1_000

/**
 * A card fetch without the hedge (each of a discover's, which fetch-order.ts
 * bounds whole at CARD_FETCH_TIMEOUT_MS) starts reading the agent's DHT
 * record when its call to the agent has gone this long unanswered; the call
 * goes on beside it, and the first valid card is the answer (card-fetch.ts).
 * The record has the other half of the fetch's bound. Before, it was read
 * only once the call had failed: an agent whose dial hangs (a NATed agent
 * with no relay, whose addresses cannot be reached from here) took the whole
 * bound, and its record, there all along, was never read
 * (test/net/no-relay.test.ts).
 */
export const CARD_DHT_FALLBACK_AFTER_MS = CARD_FETCH_TIMEOUT_MS / 2

/**
 * A provider key whose records reached enough peers counts as announced for
 * this long (announce.ts); the card's next publication after it walks the key
 * again. The peers that took its records may have left meanwhile, and
 * kad-dht provides its keys again only DHT_REPROVIDE_THRESHOLD_MS before
 * their records expire, hours later.
 */
export const ANNOUNCE_REWALK_MS = CARD_TTL_MS

/**
 * Peers that took a provider key's records the announcer remembers per key
 * (key-holders.ts), at most; each for DHT_PROVIDER_VALIDITY_MS after its last
 * record. A card that says something new, or drops the key, sends its record
 * to them as well as to the walk's closest peers. They keep the record and
 * the card they pulled on it until it expires, whether or not a later walk
 * still finds them closest (churn, or a walk on a busy node that missed one),
 * and only a record makes them pull the new card sooner. Over three times
 * kad-dht's k: a peer the walks stopped finding is still named after a few
 * walks to other peers.
 */
export const ANNOUNCE_HOLDERS_KEPT = 64
/**
 * Failed sends of one card's record to an earlier holder (key-holders.ts),
 * after which it is no longer owed that card: it keeps the older card until
 * that is due. Without a limit, one holder that left kept its key short, and
 * walked again at every announcement.
 */
export const ANNOUNCE_HOLDER_SENDS_MAX = 2

/**
 * Agents whose highest card seq seen (and that card's expiry) the card cache
 * remembers beyond the cards it keeps (card-store.ts): a card older than one
 * seen, still unexpired, is refused even after the newer card left the cache
 * (CARD_CACHE_MAX_ENTRIES), so a flood of other cards cannot open the way to
 * a replay. Two numbers per agent, not a card: many more fit.
 */
export const CARD_SEQ_INDEX_MAX_ENTRIES = 16 * CARD_CACHE_MAX_ENTRIES

/**
 * Connected contacts of a lookup's first round a discover asks by key at once
 * (fetch-order.ts). A card one holder sends is a result only once a second
 * source backs its agent, and at rest that source is most often a second
 * holder: asked after the first had answered, it cost a second round trip in
 * most discovers (whole discover at rest p50 3.8 ms before the backing rule,
 * 8.8 ms after, 50 nodes, docs/scaling.md). Asked together, both answer in
 * one; the second answer is wasted only when a connection this node opened
 * backs every card of the first.
 */
export const CARD_KEY_ASKS_AT_ONCE = 2
/**
 * How long an answer by key, once it has checked as many cards as the
 * discover wants, waits for the answers of the contacts asked beside it
 * before it checks the rest (ask-pace.ts). Their first cards back its first
 * ones; a contact that is slow or stays silent on purpose would otherwise
 * hold its later cards back for its whole CARD_HELD_ASK_TIMEOUT_MS (500 ms),
 * while another source (a DHT answer, a connection) could back them now.
 */
export const CARD_KEY_ANSWERS_WAIT_MS = 50

/**
 * DHT card records this node stores for others, at most (record-cap.ts: up
 * to CARD_MAX_BYTES each, so 16 MiB at most); a write under a new key past it
 * is refused unless a sweep of expired records, at most once per
 * DHT_RECORDS_SWEEP_MIN_INTERVAL_MS, made room.
 */
export const DHT_RECORDS_STORED_MAX = 4096
export const DHT_RECORDS_SWEEP_MIN_INTERVAL_MS = 60_000
/** Picks of the farthest record per put when full, when another put evicted the one picked first (record-cap.ts). */
export const RECORD_EVICT_TRIES = 4

/**
 * The seed a discover sends with get_held_cards by key (protocols/card.md): the length a holder takes, in base64url
 * characters, and the random bytes the asker makes one of (16 characters).
 */
export const CARD_HELD_SEED_MIN_CHARS = 16
export const CARD_HELD_SEED_MAX_CHARS = 64
export const CARD_HELD_SEED_BYTES = 12
