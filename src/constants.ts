/**
 * Every size, count and time the node relies on, named once and grouped by the concern that owns
 * it. Units are in the name: _BYTES, _MS, _CHARS, _ENTRIES, _MAX (a count). Protocol ids are
 * versioned: change the version when the wire format changes. Limits that the JSON Schemas in
 * protocols/ also state are kept equal to these by test/schema-limits.test.ts.
 */

// ---- protocol ids and names ------------------------------------------------------------
export const CARD_PROTOCOL = '/aap/card/0.1.0'
export const DELEGATE_PROTOCOL = '/aap/delegate/0.1.0'
export const CONTROL_PROTOCOL = '/aap/control/0.1.0'
export const HANDOFF_PROTOCOL = '/aap/handoff/0.1.0'
export const EVENTS_SYNC_PROTOCOL = '/aap/events/0.1.0'
/** The agent mesh is a DHT of its own, not the IPFS one. */
export const DHT_PROTOCOL = '/aap/kad/1.0.0'
/** Prefix of the per-correlation gossip topics; see protocols/events.md. */
export const EVENTS_TOPIC_PREFIX = '/aap/events/0.1.0/'
/** The `protocol` field of our AgentCards. */
export const CARD_PROTOCOL_NAME = 'aap-mesh/0.1.0'
/** Domain-separation prefix of the card signature. */
export const CARD_SIGNING_DOMAIN = 'aap-mesh/card/0.1.0\n'
/** Domain-separation prefix of delegation tickets. */
export const TICKET_SIGNING_DOMAIN = 'aap-mesh/ticket/0.1.0\n'
/** Domain-separation prefix of event signatures. */
export const EVENT_SIGNING_DOMAIN = 'aap-mesh/event/0.1.0\n'
/** DHT namespace for card records: key = /aap-card/<peerId>. */
export const CARD_DHT_NAMESPACE = 'aap-card'

// ---- wire: frames and streams (src/wire) --------------------------------------------------
/** Largest length-prefix we accept before the frame (varint bytes). */
export const MAX_LENGTH_PREFIX_BYTES = 4
export const CARD_MAX_FRAME_BYTES = 8 * 1024
export const DELEGATE_MAX_FRAME_BYTES = 128 * 1024
export const CONTROL_MAX_FRAME_BYTES = 128 * 1024
export const HANDOFF_MAX_FRAME_BYTES = 128 * 1024
export const EVENTS_SYNC_MAX_FRAME_BYTES = 1024 * 1024
/** Request ids run from 0 to this (the schemas' RequestEnvelope.id maximum); the caller wraps around. */
export const FRAME_ID_MAX = 0xffffffff
/** Longest request type name (RequestEnvelope.type). */
export const FRAME_TYPE_MAX_CHARS = 32
/** Error frames carry at most this much message text (ErrorFrame.message). */
export const ERROR_MESSAGE_MAX_CHARS = 1024
/** Requests a single pipelined stream may have in progress on the responder. */
export const MAX_PIPELINED_REQUESTS_PER_STREAM = 64
/** Inbound / outbound streams per protocol per connection. */
export const MAX_INBOUND_STREAMS_PER_PROTOCOL = 8
export const MAX_OUTBOUND_STREAMS_PER_PROTOCOL = 8
/** An outbound stream with no call for this long is closed; an inbound one after twice this. */
export const STREAM_IDLE_TIMEOUT_MS = 60_000
/** A frame that has started must be complete within this, or the stream is closed as truncated. */
export const FRAME_COMPLETION_TIMEOUT_MS = 5_000
/** Budget for closing a stream gracefully before it is aborted. */
export const STREAM_CLOSE_TIMEOUT_MS = 1_000
/** A raw request (src/wire/raw.ts: test kits that send frames our client never would) waits this long for its answer ... */
export const RAW_CALL_TIMEOUT_MS = 15_000
/** ... and reads answers up to this size. */
export const RAW_CALL_MAX_FRAME_BYTES = 1024 * 1024
/** Calls that gave up but still want a late answer (to undo its effect), per stream. */
export const LATE_ANSWERS_TRACKED_PER_STREAM = 256

// ---- wire: call timeouts (each a separate limit; see src/wire/rpc.ts) ------------------------
/** Connect (dial) plus protocol negotiation; a call whose dial timed out or found no address dials again (DIAL_ATTEMPTS_MAX in all) while its budget lasts. */
export const DIAL_TIMEOUT_MS = 5_000
export const DIAL_ATTEMPTS_MAX = 2
/**
 * Open connections a node keeps (the default of `maxConnections`): above it, the connection budget
 * (src/wire/budget.ts) closes the least valuable ones, never a peer it has live runs with. It does not grow with the mesh.
 */
export const CONNECTIONS_MAX = 64
/**
 * libp2p's own hard limit is the budget plus this: libp2p refuses inbound connections at its
 * limit, and a new delegation must get in before the budget trims an idle connection.
 */
export const CONNECTIONS_HEADROOM = 64
/** The peer tag that marks a peer this node has live runs with (protected from pruning), and how long one lasts unrenewed. */
export const RUN_PEER_TAG = 'aap-run'
export const RUN_PEER_TAG_VALUE = 100
export const RUN_PEER_TAG_TTL_MS = 10 * 60 * 1000
/** What each topic on which a peer is in this node's gossip mesh adds to its worth to the budget (gossipsub's own tag value; budget.ts). */
export const GOSSIP_MESH_LINK_WORTH = 100
/** A connection younger than this is not pruned (default of `connectionGraceMs`), so a request on a new connection is answered first; why 20 s: docs/simulations.md. */
export const CONNECTION_GRACE_MS = 20_000
/** How long the budget trusts a peer's tag worth it read (`peer:update` events refresh it sooner; a tag whose TTL ends sends none). */
export const BUDGET_TAG_CACHE_MS = 5_000
/** A prune round left over the budget by requests in flight comes back after this (under BUDGET_TAG_CACHE_MS, so its tag reads are still cached). */
export const BUDGET_BUSY_RECHECK_MS = 4_000
/** One connection close by the budget gives up after this long (then the connection is aborted). */
export const CONNECTION_CLOSE_TIMEOUT_MS = 1_000
/**
 * A responder's handler must answer within this; past it the responder answers
 * TIMEOUT itself. A handler that calls another agent (the executor's side of
 * a control handoff) stops that call at this limit too.
 */
export const HANDLER_TIMEOUT_MS = 8_000
/**
 * A handler that calls another agent gives that call its budget less this
 * (or less half its budget, if smaller), so a callee that does not answer is
 * reported with its own typed error (AGENT_NOT_FOUND) before the handler's
 * TIMEOUT.
 */
export const NESTED_CALL_MARGIN_MS = 1_000
/**
 * From sending a request to the last byte of its response frame. Longer than
 * HANDLER_TIMEOUT_MS, so a responder's own TIMEOUT (or a late success) reaches
 * the caller before it gives up: a caller never reports an agent as not
 * answering while that agent is still within its budget.
 */
export const RESPONSE_TIMEOUT_MS = 10_000
/** Whole call, dial included: room for a full dial and a full response. */
export const CALL_TIMEOUT_MS = 15_000

// ---- DHT (src/wire/host.ts) ---------------------------------------------------------------
/**
 * Kademlia k (peers per bucket, replicas of each record and provider key),
 * alpha (peers asked at once per lookup path) and disjoint lookup paths
 * (S/Kademlia): kad-dht's defaults, pinned here. Lookups make about k requests
 * per path. Simulations of many nodes on one CPU pass smaller figures
 * (SIM_DHT in src/sim/mesh.ts), where each request costs several ms.
 */
export const DHT_K = 20
export const DHT_ALPHA = 10
export const DHT_DISJOINT_PATHS = 10
export const DHT_GET_TIMEOUT_MS = 5_000
export const DHT_PUT_TIMEOUT_MS = 10_000
/** A provider walk's own bound, and each ADD_PROVIDER's; together under DHT_PUT_TIMEOUT_MS (src/wire/dht-provide.ts). */
export const DHT_PROVIDE_WALK_MS = 6_000
export const DHT_PROVIDE_SEND_TIMEOUT_MS = 3_000
/** Provider records: how long a node keeps a record it was given (and how long the records it gives out stay valid), how long before
 * that end kad-dht provides its own keys again, and how often it checks. A node announces each provider key until its records are out
 * (ANNOUNCE_MIN_PROVIDER_RECORDS); kad-dht's reprovider keeps it alive, and a node that left drops out of lookups within the validity. */
export const DHT_PROVIDER_VALIDITY_MS = 12 * 60 * 60 * 1000
export const DHT_REPROVIDE_THRESHOLD_MS = 6 * 60 * 60 * 1000
export const DHT_REPROVIDE_CHECK_INTERVAL_MS = 60 * 60 * 1000
/**
 * Providers a node names in one answer (a random pick when it holds more; src/wire/provider-answers.ts):
 * kad-dht names every one, so an answer grew with the mesh, at a peer-store cost on both sides. kad-dht's
 * lookup stops at k providers; a discover that wants more asks the key's closest peers itself,
 * DHT_PROVIDER_SWEEP_CONCURRENCY at a time (src/wire/dht-providers.ts).
 */
export const DHT_PROVIDERS_PER_ANSWER = 20
export const DHT_PROVIDER_SWEEP_CONCURRENCY = 3
/**
 * kad-dht pings a contact before it adds it, and a full bucket's oldest before it evicts one (src/wire/dht-contacts.ts).
 * A contact connected now, or less than DHT_CONTACT_FRESH_MS ago, counts as alive without a ping (which would dial
 * it); closes are remembered for the last DHT_CONTACTS_TRACKED peers. */
export const DHT_CONTACT_FRESH_MS = 60_000
export const DHT_CONTACTS_TRACKED = 1024
/** kad-dht's repeated work (src/wire/dht-repeats.ts): keys whose closest contacts are kept; a peer named again with the same addresses within this is not handled again; peers remembered. */
export const DHT_CLOSEST_CACHED = 256
export const DHT_NAMED_AGAIN_MS = 5_000
export const DHT_NAMED_TRACKED = 1024
/** Peer-store read cache (src/wire/peer-store-cache.ts): how long a peer read or written is answered from memory, and peers held. */
export const PEER_STORE_CACHE_TTL_MS = 5_000
export const PEER_STORE_CACHE_MAX = 1024

// ---- agent cards (src/card) --------------------------------------------------------------
export const CARD_MAX_BYTES = 4 * 1024
export const CARD_MAX_CAPABILITIES = 32
export const CARD_MAX_TAGS = 32
export const CARD_NAME_MAX_CHARS = 128
export const CARD_DESCRIPTION_MAX_CHARS = 1024
export const CARD_ENDPOINT_MAX_CHARS = 256
export const CARD_PROTOCOL_NAME_MAX_CHARS = 64
export const CARD_TAG_MAX_CHARS = 64
export const CAPABILITY_ID_MAX_CHARS = 128
export const CAPABILITY_VERSION_MAX_CHARS = 64
/** Highest card seq (a JSON-safe integer: Number.MAX_SAFE_INTEGER). */
export const CARD_SEQ_MAX = Number.MAX_SAFE_INTEGER
/** A card is valid this long after it is issued. */
export const CARD_TTL_MS = 60 * 60 * 1000
/** Re-sign the card and put its DHT record this often, well before the TTL ends (provider keys are not announced again: DHT_REPROVIDE_THRESHOLD_MS). */
export const CARD_REPUBLISH_INTERVAL_MS = 20 * 60 * 1000
/** A provider key is announced once ADD_PROVIDER reached this many peers (at most half the DHT's k, fewer in a smaller routing table); a key short of it is
 * walked again up to ANNOUNCE_MAX_RETRIES times per card, after about ANNOUNCE_RETRY_MS, then twice that (src/card/announce.ts). */
export const ANNOUNCE_MIN_PROVIDER_RECORDS = 10
export const ANNOUNCE_RETRY_MS = 30_000
export const ANNOUNCE_MAX_RETRIES = 2
export const CARD_MAX_CLOCK_SKEW_MS = 5 * 60 * 1000 // accepted clock skew when checking issued_at against now

// ---- discovery (src/card/discovery.ts) ------------------------------------------------------
export const DISCOVER_MAX_RESULTS = 64
/** Tags one discovery query may name (DiscoveryQuery.tags). */
export const DISCOVER_QUERY_MAX_TAGS = 8
/** How long one discover() may collect providers. */
export const DISCOVER_TIMEOUT_MS = 5_000
/** Card fetches in flight per discover(); one fetch's time limit, and after how long it counts as slow (DiscoveryStats). */
export const DISCOVER_FETCH_CONCURRENCY = 8
export const CARD_FETCH_TIMEOUT_MS = 2_000
export const CARD_FETCH_SLOW_MS = 500
export const CARD_CACHE_MAX_ENTRIES = 1024
/** How long a fetched card is trusted without re-fetching (still bounded by expires_at). */
export const CARD_CACHE_TTL_MS = 60_000
/**
 * Cards held for the providers whose records a node keeps (src/card/held-cards.ts): how many; agents per ask
 * (and cards per answer, within CARD_MAX_FRAME_BYTES); how long a discover waits for the holder before it
 * dials the providers; pulls in flight and waiting; how soon the same agent's card is pulled again. */
export const CARD_HELD_MAX = 1024
export const CARD_HELD_ASK_MAX = 16
export const CARD_HELD_ASK_TIMEOUT_MS = 500
export const CARD_HELD_PULL_CONCURRENCY = 4
export const CARD_HELD_PULL_QUEUE = 256
export const CARD_HELD_PULL_MIN_INTERVAL_MS = 60_000
/** A pull that ran out of time or lost its connection is tried again this long after (n times it the n-th time, half to all of that), at most this often. */
export const CARD_HELD_PULL_RETRY_MS = 30_000
export const CARD_HELD_PULL_RETRIES = 2

// ---- runs (src/runs) ------------------------------------------------------------------------
export const MAX_CONCURRENT_INBOUND_RUNS = 256
export const TASK_ID_MAX_CHARS = 128
export const RUN_ID_MAX_CHARS = 128
export const REASON_MAX_CHARS = 1024
export const CHECKPOINT_ID_MAX_CHARS = 128
export const IDEMPOTENCY_KEY_MAX_CHARS = 128
/** Agents a delegator may authorize to resume or cancel a run besides itself. */
export const RUN_AUTHORIZED_MAX_AGENTS = 16
/** Keys of any free-form object in a run request (input, resolution, output, context). */
export const JSON_OBJECT_MAX_KEYS = 256
/** Handoffs one delegated run may go through (RunTicket.depth); one more is refused. */
export const MAX_HANDOFF_DEPTH = 8
/** A handoff receiver fails the run it created if the sender has not confirmed the handoff by then. */
export const HANDOFF_CONFIRM_TIMEOUT_MS = 15_000

// ---- liveness (protocols/liveness.md) ----
/** A delegator declares the executor of its live runs lost once no probe has reached it for this long (default of `executorLostAfterMs`). */
export const EXECUTOR_LOST_AFTER_MS = 30_000
/** How often a delegator probes each executor of its live runs (default of `livenessProbeIntervalMs`). */
export const LIVENESS_PROBE_INTERVAL_MS = 5_000
/** One probe (a get_run of one of the executor's live runs) gives up after this long. */
export const LIVENESS_PROBE_TIMEOUT_MS = 5_000
/** Probes a delegator has in flight at once. */
export const LIVENESS_MAX_CONCURRENT_PROBES = 16
/** Live delegated runs the monitor watches; past it the oldest are watched no more (logged). */
export const LIVENESS_MAX_WATCHED_RUNS = 100_000
/** A declared verdict is offered to its executor, when it is back, for this long. */
export const LIVENESS_NOTICE_MAX_AGE_MS = 24 * 60 * 60 * 1000
/** A restarted executor asks a run's delegator for a verdict for at most this long before failing the run itself. */
export const LIVENESS_VERDICT_ASK_TIMEOUT_MS = 5_000
/** Longest ISO 8601 timestamp a signed record carries (RunTicket.issued_at). */
export const TIMESTAMP_MAX_CHARS = 64
/** Longest signature text a signed record carries (base64url Ed25519 is 86). */
export const SIGNATURE_MAX_CHARS = 128
/** Delegate idempotency records are kept this long. */
export const IDEMPOTENCY_TTL_MS = 24 * 60 * 60 * 1000
/** Parsed agent ids the run service keeps (cleared when full). */
export const PEER_ID_CACHE_MAX_ENTRIES = 4096
/** Outgoing run records (runs this node delegated) kept in memory after they are written. */
export const OUTGOING_RUN_CACHE_MAX_ENTRIES = 4096

// ---- the signed run log (src/runlog) --------------------------------------------------------
export const EVENT_PAYLOAD_MAX_BYTES = 32 * 1024
/**
 * A run.started payload besides input and context: the ticket (its origin,
 * the deepest handoff's chain, RUN_AUTHORIZED_MAX_AGENTS agents twice), the
 * capability and the run links. A maximal one is about 6.2 KiB
 * (test/run-limits.test.ts builds it).
 */
export const RUN_STARTED_OVERHEAD_BYTES = 8 * 1024
/** A handoff's context (JSON); its run.started carries it beside the input. */
export const HANDOFF_CONTEXT_MAX_BYTES = 8 * 1024
/**
 * A run's input (JSON). Its run.started carries it, signed, so input, a
 * handoff's context and the rest of the payload together fit in
 * EVENT_PAYLOAD_MAX_BYTES: every input that passes this check can be started.
 */
export const RUN_INPUT_MAX_BYTES = EVENT_PAYLOAD_MAX_BYTES - RUN_STARTED_OVERHEAD_BYTES - HANDOFF_CONTEXT_MAX_BYTES
export const EVENT_MAX_BYTES = 48 * 1024
/** Highest event seq a run can reach (AgentEvent.seq). */
export const EVENT_SEQ_MAX = 1_000_000_000
/** Executor public keys kept imported for event verification. */
export const EVENT_VERIFY_KEY_CACHE_ENTRIES = 4096
/** Verified event signatures (by signed bytes and signature; per SignatureCache), not checked again. ~100 B each. */
export const EVENT_VERIFIED_CACHE_ENTRIES = 16_384

// ---- correlated events: gossip, sync, subscriptions (src/events; protocols/events.md) -------
export const MAX_CORRELATION_TOPICS = 256
/** gossipsub's per-peer topic budget (bounds topics a peer can make us track). */
export const GOSSIP_MAX_TOPIC_BYTES_PER_PEER = 512 * 1024
/** gossipsub charges a topic its length plus ~1 KiB: 512 KiB lets a peer hold ~500 topics, above MAX_CORRELATION_TOPICS
 * (256) of the longest id. test/events-limits.test.ts keeps them in step. */
export const GOSSIP_TOPIC_OVERHEAD_BYTES = 1024
/**
 * gossipsub (v1.2) tells its mesh peers IDONTWANT for a message of at least this many bytes. Each is one frame
 * per mesh peer, and below a few KiB a frame costs what the duplicate it may spare does (docs/simulations.md,
 * session 20): the first event of a run (~1.2 KB, its ticket) reached subscribers 26 % sooner without them.
 */
export const GOSSIP_IDONTWANT_MIN_BYTES = 8 * 1024
/** A gossip frame read from a peer, at most (gossipsub's default): an IWANT answer is one frame of every message asked. */
export const GOSSIP_MAX_INBOUND_BYTES = 4 * 1024 * 1024
export const SYNC_MAX_EVENTS_PER_RESPONSE = 256
/** A sync response frame carries at most this many bytes of events (below EVENTS_SYNC_MAX_FRAME_BYTES). */
export const SYNC_MAX_RESPONSE_BYTES = EVENTS_SYNC_MAX_FRAME_BYTES - 64 * 1024
/** One sync page, from request to answer. */
export const SYNC_TIMEOUT_MS = 5_000
/** One sync (all its pages) must finish within this, however the responder paces its pages. */
export const SYNC_TOTAL_TIMEOUT_MS = 30_000
/** Pages one sync call follows before it gives up on a responder that never says `more: false`. */
export const SYNC_MAX_PAGES = 512
/** Syncs (dials included) a node runs at once for all its correlations. */
export const SYNC_CONCURRENCY = 16
export const SUBSCRIBER_BUFFER_MAX_EVENTS = 4096
/** Runs admitted to a correlation's task (protocols/lineage.md) a node tracks; further runs are ignored. */
export const EVENTS_MAX_RUNS_PER_CORRELATION = 1024
/**
 * Runs of a correlation not (yet) admitted that a node keeps track of: waiting
 * for an ancestor, or refused (remembered so their events are dropped
 * cheaply). Past it, refused runs are forgotten first, then the oldest
 * waiting ones, so junk runs never lock admitted ones out.
 */
export const EVENTS_MAX_UNPROVEN_RUNS_PER_CORRELATION = 256
/** Events a node stores for one run it does not execute; later ones are ignored. */
export const EVENTS_MAX_EVENTS_PER_RUN = 65_536
/** Agents a subscription dials and syncs from under one correlation. */
export const EVENTS_MAX_PARTICIPANTS = 64
/** A tracked correlation with a running or blocked run re-syncs its tails after this, doubling ... */
export const EVENTS_TAIL_SYNC_MIN_MS = 500
/**
 * ... up to this. An event a sync found (gossip missed it), or any event of a
 * correlation the node delegated into, resets it to the minimum; an event
 * gossip brought a node that only follows sets it to
 * EVENTS_TAIL_SYNC_FOLLOW_MS, so a hundred followers of a run whose events
 * come seconds apart do not each poll its executor after every event.
 */
export const EVENTS_TAIL_SYNC_MAX_MS = 30_000
export const EVENTS_TAIL_SYNC_FOLLOW_MS = 4_000
/** Each tail timer is drawn within +/- this share of its delay, so followers of one run do not sync in step. */
export const EVENTS_TAIL_SYNC_JITTER = 0.25
/**
 * Gossip events of a run that arrive ahead of its chain (seq past the next
 * one: they took a faster path than their predecessor) wait for it here, at
 * most this many per correlation and EVENTS_EARLY_MAX_BYTES in all, and are
 * relayed meanwhile; past either bound they are ignored and fetched.
 */
export const EVENTS_EARLY_MAX_PER_CORRELATION = 64
export const EVENTS_EARLY_MAX_BYTES = 512 * 1024
/** An early event's predecessor has not come by gossip after this: the run's gap is fetched by sync. */
export const EVENTS_GAP_SYNC_DELAY_MS = 200
/**
 * The last events placed per correlation whose gossip copies are relayed
 * although this node already holds them (a sync brought them first): its mesh
 * peers may still need them. Older repeats are ignored.
 */
export const EVENTS_RELAY_WINDOW = 64
/** A participant joined a correlation topic: sync from it after this unless gossip brought its events first. */
export const EVENTS_JOIN_SYNC_DELAY_MS = 100
/**
 * Copies of other nodes' events placed from gossip are written at most this
 * long after they are placed, in one batch with everything else the node
 * writes meanwhile (run.started and run.completed of a quick run, several runs
 * on a busy delegator). Every read of the log writes them first.
 */
export const EVENTS_COPY_FLUSH_MS = 10
/**
 * A correlation topic the node stops following stays joined this long
 * (ignoring its messages): the next step of the task takes it over without a
 * SUBSCRIBE, and the topics left in one window go in one UNSUBSCRIBE message
 * per peer. Lingering topics count towards MAX_CORRELATION_TOPICS.
 */
export const EVENTS_TOPIC_LINGER_MS = 100
/** replay(): rounds of "sync what is known, learn new runs and participants" before it stops. */
export const REPLAY_MAX_ROUNDS = 8
/** replay(): the whole collection, all rounds. */
export const REPLAY_TIMEOUT_MS = 20_000
/**
 * Peer score of the correlation topics: only P4 (invalid messages) is on, the
 * delivery-rate terms are off because run events are sparse. Three rejected
 * messages give 3^2 * -10 = -90, under gossipsub's graylist threshold (-80).
 */
export const EVENTS_SCORE_INVALID_WEIGHT = -10
/** Kept per decay interval (1 s): a counter of 3 falls under the graylist line after about 1.2 s, 10 after about 25 s. */
export const EVENTS_SCORE_INVALID_DECAY = 0.95
// ---- storage (src/storage) ------------------------------------------------------------------
export const STORAGE_LINGER_MAX_OPS = 512 // operations that may linger in the group committer before a batch goes out regardless

// ---- local agent API and sidecar (src/api) ---------------------------------------------------
export const API_DEFAULT_HOST = '127.0.0.1'
export const API_DEFAULT_PORT = 7410
export const API_BODY_MAX_BYTES = 256 * 1024
export const API_MAX_SSE_CLIENTS = 64
/** Random bytes of the API bearer token (new at every start). */
export const API_TOKEN_BYTES = 32
/** A comment line on every idle SSE stream this often, so dead clients are noticed. */
export const API_SSE_HEARTBEAT_MS = 15_000
/** An SSE client that lets this much output pile up unread is disconnected. */
export const API_SSE_MAX_BUFFERED_BYTES = 1024 * 1024
/** One webhook POST must be answered within this. */
export const API_WEBHOOK_TIMEOUT_MS = 5_000
/** Attempts per work item before the webhook gives up on it (the work stream still has it). */
export const API_WEBHOOK_MAX_ATTEMPTS = 5
/** Pause before the first webhook retry, doubling after each. */
export const API_WEBHOOK_RETRY_MS = 250
/** Work items waiting for the webhook; beyond this the oldest are left to the work stream. */
export const API_WEBHOOK_QUEUE_MAX_ITEMS = 1024
/** Longest webhook URL (the OpenAPI document's WebhookUrl.maxLength). */
export const API_WEBHOOK_URL_MAX_CHARS = 2048
/** Most replay collection time a caller may ask for (the document's timeout_ms maximum). */
export const API_REPLAY_MAX_TIMEOUT_MS = 60_000
/** Budget of the API's own shutdown (ending streams, closing sockets). */
export const API_CLOSE_TIMEOUT_MS = 2_000
/** Prometheus metrics listen here when --metrics-port is given without --metrics-host. */
export const METRICS_DEFAULT_HOST = '127.0.0.1'

// ---- command line (src/cli) -----------------------------------------------------------------
export const CLI_REQUEST_TIMEOUT_MS = 70_000 // the CLI gives up on a (non-streaming) API request after this (above API_REPLAY_MAX_TIMEOUT_MS)
/** `start --discover`: keep looking (announcements take a moment to spread) for at most this long. */
export const CLI_DISCOVER_DEADLINE_MS = 30_000
/** `start --discover`: pause between two lookups that found nothing. */
export const CLI_DISCOVER_RETRY_MS = 250

// ---- node defaults (src/node.ts, src/cli/start.ts) ---------------------------------------------
export const DEFAULT_DATA_DIR = '.aap-mesh'
export const DEFAULT_TCP_LISTEN = '/ip4/0.0.0.0/tcp/0'
export const STOP_TIMEOUT_MS = 5_000 // graceful stop budget of a node process

// ---- turns: conversations with an agent (protocols/turns.md) ----
/** Turns one context (conversation) holds; the next delegation into a full one is refused (DELEGATION_REFUSED, reason context_full). */
export const CONTEXT_MAX_TURNS = 64
/** The agent's saved context of a conversation, as JSON. */
export const CONTEXT_STATE_MAX_BYTES = 64 * 1024

// ---- run listing (src/runs/run-index.ts) ------------------------------------------------------
/** Runs in one page of a listing when the caller names no limit. */
export const RUN_LIST_DEFAULT_LIMIT = 100
/** Most runs in one page of a listing (the API's `limit` maximum). */
export const RUN_LIST_MAX_LIMIT = 1_000
/** Index entries one page reads at most; a page that reaches this ends early with a cursor (filters that match little). */
export const RUN_LIST_SCAN_MAX_ENTRIES = 10_000
/** Longest listing cursor accepted (the API's `cursor` maxLength). */
export const RUN_LIST_CURSOR_MAX_CHARS = 512
/** Last indexed state of this many runs is kept in memory (a miss reads the index entry). */
export const RUN_INDEX_STATE_CACHE_MAX_ENTRIES = 4_096
/** Runs written per batch while the index is rebuilt from the store (older data dirs). */
export const RUN_INDEX_REBUILD_BATCH_RUNS = 500

// ---- trace context (src/runs/trace.ts) ---------------------------------------------------------
/** A W3C traceparent (version 00 is exactly this long; the schemas' TraceContext.traceparent maxLength). */
export const TRACEPARENT_MAX_CHARS = 55
/** Longest W3C tracestate carried (the schemas' TraceContext.tracestate maxLength; W3C allows 32 members of at most 257 chars, vendors keep it far shorter). */
export const TRACESTATE_MAX_CHARS = 512

// ---- artifacts: typed outputs stored by content hash (src/artifacts, src/wire/bulk.ts) ------------
/** Versioned id of the artifact transfer protocol (protocols/artifact.md). */
export const ARTIFACT_PROTOCOL = '/aap/artifact/0.1.0'
/** Every chunk but an artifact's last holds exactly this many bytes. */
export const ARTIFACT_CHUNK_BYTES = 1024 * 1024
/** Largest artifact (the manifest's `size` maximum). */
export const ARTIFACT_MAX_BYTES = 128 * 1024 * 1024
/** Most chunks in one manifest: ARTIFACT_MAX_BYTES / ARTIFACT_CHUNK_BYTES. */
export const ARTIFACT_MAX_CHUNKS = 128
/** Longest encoded manifest (128 chunk CIDs of 59 characters each fit in half of it). */
export const ARTIFACT_MANIFEST_MAX_BYTES = 16 * 1024
/** Longest CID string accepted (artifact or chunk id). */
export const ARTIFACT_ID_MAX_CHARS = 128
/** Longest media type of a part. */
export const ARTIFACT_MEDIA_TYPE_MAX_CHARS = 255
/** Longest file name of a part. */
export const ARTIFACT_NAME_MAX_CHARS = 255
/** Request frames of the artifact protocol are small JSON objects. */
export const ARTIFACT_MAX_REQUEST_FRAME_BYTES = 4 * 1024
/** Requests an artifact stream may have waiting on the responder; more break the stream. */
export const ARTIFACT_MAX_PIPELINED_REQUESTS = 16
/** Chunk requests in flight and chunks being written, together, per fetch stream (the chunks a fetch may hold). */
export const ARTIFACT_FETCH_WINDOW_CHUNKS = 8
/** Parsed manifests a holder keeps while serving (each about ARTIFACT_MANIFEST_MAX_BYTES at most). */
export const ARTIFACT_SERVED_MANIFESTS_CACHED = 64
/** Inbound artifact streams per connection. */
export const ARTIFACT_MAX_INBOUND_STREAMS = 4
/** One chunk (or the manifest) must arrive whole within this of its request. */
export const ARTIFACT_CHUNK_TIMEOUT_MS = 15_000
/** A provider lookup in the DHT gives up after this. */
export const ARTIFACT_FIND_PROVIDERS_TIMEOUT_MS = 10_000
/** A provide (announcing that this node holds an artifact) gives up after this. */
export const ARTIFACT_PROVIDE_TIMEOUT_MS = 10_000
/** Holders tried for one fetch before it fails (hints, then DHT providers, then connected peers). */
export const ARTIFACT_MAX_HOLDERS_TRIED = 8
/** Bytes the node's artifact store may hold on disk; a put or fetch beyond this fails with STORAGE_FULL. */
export const ARTIFACT_STORE_MAX_BYTES = 1024 * 1024 * 1024
/** Parts in one run output or progress payload. */
export const ARTIFACT_MAX_PARTS = 32
/** Longest text of a text part (it travels in the signed event, so it stays well under EVENT_PAYLOAD_MAX_BYTES). */
export const PART_TEXT_MAX_CHARS = 16 * 1024
/** Largest chunk index (ChunkRequest.index maximum): ARTIFACT_MAX_CHUNKS - 1. */
export const ARTIFACT_CHUNK_INDEX_MAX = ARTIFACT_MAX_CHUNKS - 1

// ---- fault and attack campaign (issue #18: src/card/record-guard.ts, scripts/campaign) ---------
/** Where kad-dht keeps the records it stores (its default datastore prefix plus `/record/`). */
export const DHT_RECORD_DATASTORE_PREFIX = '/dht/record/'

// ---- delegate hot path (issue #17 item 4) -------------------------------------------------------
/**
 * A run peer's tag (RUN_PEER_TAG) is written to the peer store at most once
 * in this window per peer: each write is a datastore read and write plus a
 * peer:update event, which a delegation per call paid twice (once per side).
 * The tag then lasts at least RUN_PEER_TAG_TTL_MS minus this after the last run call.
 */
export const RUN_PEER_TAG_RENEW_MS = 1000
/** Peers whose last tag write is remembered for that window (the oldest are forgotten first). */
export const RUN_PEER_TAG_RENEW_MAX_PEERS = 4096
/** Tickets a node remembers having signed (a digest each), so it need not verify its own signature when their run starts. */
export const TICKETS_ISSUED_REMEMBERED = 1024
