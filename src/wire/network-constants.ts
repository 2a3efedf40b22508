/**
 * Bounds of the node's reachability machinery: relay reservations it serves
 * and makes, AutoNAT, DCUtR and the bootstrap loop; and the Buffer pool of a
 * process of nodes. Times in ms, sizes in bytes.
 */

/** Slab of Node's Buffer pool in a process that runs nodes (buffer-pool.ts); Node 24's own is 64 KiB, Node 20's 8 KiB. */
export const BUFFER_POOL_BYTES = 8 * 1024

/**
 * Noise messages from this size up are sealed and opened by node:crypto with
 * the session key imported once (noise-crypto.ts); smaller ones by the
 * default's WebAssembly cipher, which is faster below about 700 bytes here
 * (400 B: 3.4 µs against 5.6; 1000 B: 7.3 against 5.2).
 */
export const NOISE_NATIVE_CIPHER_MIN_BYTES = 640
/**
 * A Noise message held in pieces from this size up goes through node:crypto's
 * cipher piece by piece; a smaller one is joined first (noise-crypto.ts).
 * Measured here: 64 KiB sealed per piece 29 µs against 33 joined; 1.2 KB
 * 6.9 against 5.7.
 */
export const NOISE_PIECEWISE_MIN_BYTES = 16 * 1024

/**
 * Frames a stream's outbox sends together are joined into one buffer; a
 * frame of this size or more is handed to the stream by itself, as it is
 * (outbox.ts), so a bulk answer's chunk of a MiB is not copied whole once
 * more before Noise seals it piece by piece.
 */
export const OUTBOX_JOIN_MAX_BYTES = NOISE_PIECEWISE_MIN_BYTES

/**
 * A yamux stream's receive window grows (doubles) up to this when its reader
 * keeps up (yamux-window.ts); the library's own ceiling is 16 MiB. Two
 * artifact chunks: `bench:artifact` fetched about as fast with 1, 2 or
 * 4 MiB, and about 15 % slower with the fixed 256 KiB.
 */
export const YAMUX_MAX_STREAM_WINDOW_BYTES = 2 * 1024 * 1024
/**
 * A window update that follows the previous one within this (half the window
 * read that fast: from 256 KiB, 12.8 MiB/s or more) doubles the window.
 */
export const YAMUX_WINDOW_GROW_WITHIN_MS = 10

/**
 * Reservations a relaying node holds at once (libp2p's default is 15). Each
 * holder keeps a connection to the relay that its budget keeps (budget.ts),
 * so they take at most half of CONNECTIONS_MAX (64): the relay keeps room for
 * its other peers (it was 64, the whole budget).
 */
export const RELAY_MAX_RESERVATIONS = 32
/** How long one reservation lasts before the client must renew it. */
export const RELAY_RESERVATION_TTL_MS = 60 * 60 * 1000
/** Longest a relayed connection stays open before the relay closes it (the client redials). */
export const RELAY_CONNECTION_MAX_DURATION_MS = 10 * 60 * 1000
/** Bytes (both ways) a relayed connection may carry before the relay closes it. */
export const RELAY_CONNECTION_MAX_BYTES = 32 * 1024 * 1024
/** Hop streams (reservation and connect requests) a relay handles at once. */
export const RELAY_MAX_INBOUND_HOP_STREAMS = 64
/** Stop streams (relayed connections) a relay or a client opens or accepts at once. */
export const RELAY_MAX_STOP_STREAMS = 256
/** A hop request must complete within this. */
export const RELAY_HOP_TIMEOUT_MS = 15_000
/** A reservation request on a relay must complete within this. */
export const RELAY_RESERVATION_TIMEOUT_MS = 10_000
/** Relays a private node reserves a slot on (one `/p2p-circuit` listen address each). */
export const RELAY_CLIENT_RESERVATIONS = 2
/**
 * Reservation requests a private node has out at once (libp2p's default is
 * 1). One at a time, each relay that never answered held the next back by
 * RELAY_RESERVATION_TIMEOUT_MS: five such held an honest relay's back 51 s.
 */
export const RELAY_RESERVATION_CONCURRENCY = 2 * RELAY_CLIENT_RESERVATIONS
/**
 * A private node short of relays looks for them with DHT lookups for random
 * keys (relay-client.ts): the first at once, the next after this wait, each
 * wait double the one before up to RELAY_DISCOVERY_BACKOFF_MAX_MS. A new
 * reservation, or a relay met that the node had not met before, starts the
 * waits over. libp2p ran them back to back: over 200 a second with one relay
 * in reach.
 */
export const RELAY_DISCOVERY_BACKOFF_MIN_MS = 1_000
/** The longest wait between two relay discovery lookups: a relay that joins the network is found within about this. */
export const RELAY_DISCOVERY_BACKOFF_MAX_MS = 60_000
/** Relays remembered as met (a new one restarts the discovery waits); past this the memory starts empty again. */
export const RELAY_CANDIDATES_SEEN_MAX = 1024
/**
 * Addresses of one relay a private node takes from its reservation as its
 * own circuit addresses (relay-client.ts), the one it reached the relay on
 * first. libp2p took all the relay named: 400 made the identify message
 * larger than identify's 8 KiB limit, so no peer could identify the node.
 */
export const RELAY_ADDRS_PER_RESERVATION_MAX = 4
/**
 * Relay candidates that dialed the node (it holds no connection it dialed to
 * them) a node asks for a slot at once (relay-client.ts); others wait their
 * turn. Such a peer may never answer, and each one asked holds one of the
 * RELAY_RESERVATION_CONCURRENCY requests for up to
 * RELAY_RESERVATION_TIMEOUT_MS: this many leave the rest to relays the node
 * dialed. Refusing them all (an earlier version) left an honest relay that
 * happened to dial first unused for as long as that connection stayed open.
 */
export const RELAY_INBOUND_CANDIDATES_MAX = 1
/**
 * A reservation lost while the connection to its relay stays open (a renewal
 * refused or unreadable) is asked for again on that relay after the relay
 * discovery's current wait, at most this long: libp2p never asked that relay
 * again, so one failed renewal lost the slot on it for good.
 */
export const RELAY_REASK_DELAY_MAX_MS = 10_000

/** AutoNAT: first check of this node's addresses this long after start. */
export const AUTONAT_STARTUP_DELAY_MS = 1_000
/** AutoNAT: addresses are checked again this often. */
export const AUTONAT_REFRESH_INTERVAL_MS = 60_000
/** AutoNAT: a peer asked to dial this node back must answer within this. */
export const AUTONAT_TIMEOUT_MS = 10_000

/** DCUtR: a hole punch attempt must finish within this. */
export const DCUTR_TIMEOUT_MS = 10_000
/** DCUtR: attempts per relayed connection. */
export const DCUTR_RETRIES = 3

/** Bootstrap: first wait between rounds of dials to peers that did not answer. */
export const BOOTSTRAP_RETRY_MIN_MS = 250
/** Bootstrap: the wait doubles per failed round up to this. */
export const BOOTSTRAP_RETRY_MAX_MS = 15_000
/** Bootstrap: with a bootstrap peer connected, check this often that one still is (heals partitions). */
export const BOOTSTRAP_CHECK_INTERVAL_MS = 5_000

/**
 * Connections whose peer a check of the loop without bootstrap addresses
 * reads from the peer store, at most, to find one into the mesh (a peer that
 * serves the DHT); the first found ends it. Under the connection budget's
 * bound, so every connection is read at rest.
 */
export const BOOTSTRAP_MESH_PEER_CHECKS_MAX = 64
/**
 * Bootstrap: a node that holds other connections, and whose bootstrap
 * connection was closed again after it dialed it back (the bootstrap peer's
 * budget pruned it, past CONNECTION_GRACE_MS), waits this long from that
 * redial before the next such one, doubling up to BOOTSTRAP_CHURN_MAX_MS. A
 * node that looks cut off dials at once (src/wire/bootstrap.ts).
 */
export const BOOTSTRAP_CHURN_MIN_MS = 30_000
export const BOOTSTRAP_CHURN_MAX_MS = 120_000
/** Bootstrap: one dial of a bootstrap peer must answer within this. */
export const BOOTSTRAP_DIAL_TIMEOUT_MS = 5_000

/** Largest signed peer record (libp2p envelope) a node sends along with a request or takes from one; about 40 addresses. */
export const PEER_RECORD_MAX_BYTES = 4 * 1024
/** PEER_RECORD_MAX_BYTES as base64url without padding: the schema's maxLength of such a field. */
export const PEER_RECORD_MAX_CHARS = Math.ceil(PEER_RECORD_MAX_BYTES * 4 / 3)

/**
 * A provider lookup first asks, one at a time, at most this many of the routing table's k contacts closest to the
 * key that this node holds a connection to (src/wire/dht-providers.ts): when their answers name enough providers,
 * the lookup dials nobody. Simulations' kad-dht alpha (3), so the round costs no more requests than a walk's first.
 */
export const DHT_CONNECTED_FIRST_ASKS = 3
/** The connected round's bound: requests of it still out then end, and kad-dht's walk starts. */
export const DHT_CONNECTED_ROUND_MS = 1_000
/**
 * The connected round asks its contacts one at a time; one that has not answered this long after the last ask
 * is hedged: the next is asked too (an answer at rest takes a few ms; a contact that never answers costs this).
 */
export const DHT_CONNECTED_HEDGE_MS = 50
/**
 * A provider lookup that named enough providers waits at most this long, each
 * time, for their cards to prove useless before it names more (dht-providers.ts
 * ProviderDemand): a peer that names providers that do not exist, each costing
 * a dial that runs out its time, cannot hold the lookup for the whole discover.
 */
export const DHT_LOOKUP_PATIENCE_MS = 1_000
/** A key's provider records, read for one answer, serve the answers of this long after, for at most this many keys (src/wire/provider-answers.ts). */
export const DHT_PROVIDER_READ_TTL_MS = 5_000
export const DHT_PROVIDER_READS_CACHED = 256
/**
 * The hard connection limit counts inbound connections the gater let through that are not open yet (host.ts);
 * an upgraded one opens at once, so one admitted longer ago than this is no longer counted.
 */
export const INBOUND_ADMITTED_OPEN_MS = 10_000
/**
 * Rounds of a provider lookup's sweep of the key's closest peers (dht-providers.ts): the first asks those the
 * walk did not; each next one asks again those whose last answer was a full pick (a holder names a fresh pick
 * of what it holds each time) and whose share is not spent, until a round names nobody new.
 */
export const DHT_PROVIDER_SWEEP_ROUNDS = 3

/** The first buffer of a frame's body that does not come in one chunk (framing.ts FrameDecoder); it doubles from there to the body's length. */
export const FRAME_BUFFER_START_BYTES = 4 * 1024
/**
 * Deepest nesting of objects and arrays a JSON frame may have (the envelope's
 * own levels included). Deeper is INVALID_REQUEST (reason too_deep): the
 * node's encoders recurse (JSON.stringify, the canonical form of a signed
 * record) and would run out of stack a few thousand levels down, and no
 * agent's input needs a hundred.
 */
export const FRAME_JSON_MAX_DEPTH = 128
/**
 * Provider records (kad-dht ADD_PROVIDER) one peer may have this node store
 * at once, and again per hour: a token bucket per provider
 * (provider-records.ts). kad-dht keeps every record a peer sends for any key
 * in the datastore for DHT_PROVIDER_VALIDITY_MS (12 h), so one stranger could
 * otherwise grow a node's store without end. An honest node's card keys
 * (DHT_PROVIDER_ADDS_PER_PEER_BURST covers them and a batch of artifacts) and
 * the records it provides again every few hours stay far under it. Records
 * past it are not stored, and counted.
 */
export const DHT_PROVIDER_ADDS_PER_PEER_BURST = 4096
export const DHT_PROVIDER_ADDS_PER_PEER_PER_HOUR = 4096
/** Providers whose buckets are kept (the least recently heard from go first; one that comes back starts full). */
export const DHT_PROVIDER_PEERS_TRACKED = 4096
/**
 * DHT records (kad-dht PUT_VALUE) one peer may have this node store at once,
 * and again per hour: a token bucket per sender (value-puts.ts), over the
 * last DHT_VALUE_PEERS_TRACKED senders. An honest node puts its own card
 * (again when it changes, and every CARD_REPUBLISH_INTERVAL_MS) and sends
 * corrections after its lookups; one peer id minting a key per card could
 * otherwise fill the node's bounded record store (DHT_RECORDS_STORED_MAX) alone
 * (many ids still can: the store's eviction by distance is what keeps the
 * records a node is a replica for).
 */
export const DHT_VALUE_PUTS_PER_PEER_BURST = 64
export const DHT_VALUE_PUTS_PER_PEER_PER_HOUR = 256
export const DHT_VALUE_PEERS_TRACKED = 4096

/**
 * Answer bytes a responder holds for one stream that the stream has not sent
 * on yet (its outbox and the stream's write buffer), counting each request
 * still being handled as one answer of the protocol's frame limit (no answer
 * is larger: one that would be is an INTERNAL error frame): it starts no
 * handler that could take it past this (responder.ts). A caller that asks
 * and does not read then costs the node about this much per stream, not
 * MAX_PIPELINED_REQUESTS_PER_STREAM answers (64 sync pages were 60 MiB; found
 * by a review). Four yamux windows at their largest: it lets a stream run 8
 * sync pages at once and some 60 requests of a 128 KiB protocol (delegate,
 * control, handoff). Half of it held 32 delegations in flight back: 3 to 6 %
 * fewer delegations per second at 32 in flight (bench:delegate).
 */
export const RESPONDER_HELD_ANSWER_MAX_BYTES = 4 * YAMUX_MAX_STREAM_WINDOW_BYTES
/**
 * Answer bytes one node's responders hold, over every stream of every served
 * protocol, before it aborts the streams whose callers are furthest behind
 * (held-answers.ts). Eight streams at RESPONDER_HELD_ANSWER_MAX_BYTES: one
 * peer can fill it with the eight events sync streams it may open
 * (MAX_INBOUND_STREAMS_PER_PROTOCOL), but not make the node hold more.
 */
export const RESPONDER_NODE_HELD_ANSWER_MAX_BYTES = 8 * RESPONDER_HELD_ANSWER_MAX_BYTES

/**
 * Peer-store records a node keeps in memory while its disk refuses them
 * (peer-store-memory.ts): one per peer it learnt of, its own among them. A
 * node sees far fewer peers than this while its disk is full; a write past it
 * fails as the disk made it fail.
 */
export const PEER_STORE_MEMORY_MAX = 4096

/**
 * Peer-store records a node keeps at most after a pass of the bound
 * (peer-store-bound.ts): libp2p writes one for every peer the node met or
 * only tried to dial, and ages one out only when it reads it six hours after
 * its last write. Far above what a node of a 500-node mesh learns (one per
 * peer); past it the records of peers that are not connected and carry no
 * tag go, a few hundred bytes each.
 */
export const PEER_STORE_PEERS_MAX = 4096

/** Time between two passes of the peer-store bound (peer-store-bound.ts); each counts the records' keys, and reads the records only past PEER_STORE_PEERS_MAX. */
export const PEER_STORE_PRUNE_INTERVAL_MS = 60_000

/**
 * Calls in a row that one pooled stream let time out without a single frame
 * coming back on it: the stream is then taken out of use (client.ts), so later
 * calls to the peer open a new one instead of queueing behind a stream the
 * peer no longer answers on. It kept being picked before, and each pick kept it
 * from ever counting as idle.
 */
export const RPC_SILENT_TIMEOUTS_MAX = 2
/**
 * Times a call is sent again on another stream when the stream it was given
 * turned out closed before the request left (client.ts): nothing reached the
 * peer, so nothing is done twice. A pooled or just-dialed stream can close
 * under a call (the peer's or the connection budget's pruning, an idle
 * close): at 200 nodes the simulation lost one delegation of 40 to it.
 */
export const RPC_UNSENT_RETRIES_MAX = 1

/**
 * Relay reservations one network may hold on this node at once: the remote
 * addresses of the holders are grouped by /24 (IPv4) or /48 (IPv6). Without
 * it one operator with throwaway peer ids took every slot (network.ts
 * RelayGuard). A local mesh does not apply it to loopback holders: its nodes
 * all share 127.0.0.1.
 */
export const RELAY_RESERVATIONS_PER_NETWORK_MAX = 4
/**
 * Budget worth of the connection to a relay this node holds a reservation on
 * (circuit-relay's own keep-alive tag is worth 1, the least of all): two
 * gossip mesh links (GOSSIP_MESH_LINK_WORTH, 100 each). A private node pruned
 * from its relay loses its relay address, and every relayed connection on it.
 */
export const RELAY_RESERVATION_WORTH = 200
/** Addresses of one peer kept from a DHT answer that names it (dht-repeats.ts); an answer may be up to 4 MiB. */
export const DHT_NAMED_ADDRS_MAX = 32
/**
 * Longest wait for the one lookup of a /dns, /dns4 or /dns6 name a peer
 * named, before this node dials it (address-filter.ts): what it resolves to
 * is judged as an IP would be; a name that does not resolve in time is not
 * dialed.
 */
export const ADDRESS_NAME_LOOKUP_TIMEOUT_MS = 5_000

/**
 * The dial gater never waits for a lookup (address-filter.ts mayDialNow): a
 * name is dialed once a lookup has said where it points, for this long
 * after; the first dial of a name starts its lookup and is refused. At most
 * ADDRESS_NAME_LOOKUPS_MAX lookups at once (one per name; a name past them
 * is refused without one), and ADDRESS_NAME_VERDICTS_MAX answers kept. kad-dht
 * asks whether each closer peer a walk meets is dialable, one after another:
 * a gater that awaited each lookup let a stranger hold a walk for
 * ADDRESS_NAME_LOOKUP_TIMEOUT_MS per name it named.
 */
export const ADDRESS_NAME_VERDICT_TTL_MS = 60_000
export const ADDRESS_NAME_LOOKUPS_MAX = 16
export const ADDRESS_NAME_VERDICTS_MAX = 1024

/**
 * What a request read but not yet handled costs a responder at least, in
 * bytes: a frame is a view object of about this size however short its body
 * (a zero-length frame is one byte on the wire). Counted against
 * RESPONDER_BACKLOG_MAX_BYTES.
 */
export const RESPONDER_FRAME_MIN_COST_BYTES = 128
/**
 * A responder stream's requests read but not handled yet, each at least
 * RESPONDER_FRAME_MIN_COST_BYTES: past this the stream is broken with
 * INVALID_REQUEST (`too_many_requests`) and the backlog dropped. A stream
 * reads no more while it has a backlog, so only the frames of chunks already
 * read make one: an honest caller's pipelined requests (tens of bytes each)
 * stay far below. Before, a chunk of one-byte frames became one view per
 * byte, about 120 times its size in heap, held while the caller read no
 * answers: one connection took a node over a gigabyte (session 51's review).
 */
export const RESPONDER_BACKLOG_MAX_BYTES = 1024 * 1024


/**
 * How long the routing-table upkeep (dht-upkeep.ts) waits for the ping of a
 * contact that a DHT request failed to reach before it removes the contact. Above
 * libp2p's address dial timeout (6 s), so a contact reachable at all answers.
 */
export const DHT_UPKEEP_PING_TIMEOUT_MS = 10_000

/** Contacts suspected gone (a DHT request to them failed) that wait for their check at most; each check is one ping at most. */
export const DHT_UPKEEP_SUSPECTS_MAX = 256

/**
 * Contacts the upkeep leaves in the routing table at least. When this node is
 * the one cut off, every dial fails; the contacts it keeps are where its walks
 * start again once it is back.
 */
export const DHT_UPKEEP_TABLE_FLOOR = 8

/**
 * Peers this node dialed and found serving the DHT that it remembers to rejoin
 * through when no bootstrap peer answers (remembered-peers.ts). A few suffice:
 * one that answers is a way back in, and its walks find the rest.
 */
export const REMEMBERED_PEERS_MAX = 16

/**
 * Of those, at most this many dialed at addresses of one network (/24 IPv4,
 * /48 IPv6; every DNS name counts as one network; loopback exempt, a local
 * mesh shares 127.0.0.1): a walk can dial peers a DHT answer named, and many
 * identities on one network could otherwise take every place, and so decide
 * alone where a node restarted without --bootstrap, or whose bootstrap peers
 * are gone, rejoins. A LAN-only mesh (one private /24) remembers this many,
 * enough to rejoin through.
 */
export const REMEMBERED_PEERS_PER_NETWORK_MAX = 4

/**
 * Addresses kept per remembered peer (the one its dial reached first, then
 * those it announced), and the longest kept, in printable ASCII (a DNS name
 * is at most 253; a relayed address with two peer ids about 160).
 */
export const REMEMBERED_PEER_ADDRS_MAX = 8
export const REMEMBERED_PEER_ADDR_MAX_CHARS = 256

/**
 * A stored list of remembered peers larger than this is not one this node
 * wrote: 16 peers of 8 addresses of 256 printable characters, each doubled by
 * JSON's escapes at worst, encode to about 66 KB (test/remembered-peers.test.ts
 * checks the sum).
 */
export const REMEMBERED_PEERS_RECORD_MAX_BYTES = 128 * 1024

/** Time between two writes of a changed list of remembered peers (and once when the node stops). */
export const REMEMBERED_PEERS_SAVE_INTERVAL_MS = 60_000
