/**
 * Bounds and names of the A2A v1.0 bridge (inbound server and outbound
 * agents). Units are in the names.
 */
import { CALL_TIMEOUT_MS, CARD_FETCH_TIMEOUT_MS, DHT_GET_TIMEOUT_MS, EVENT_PAYLOAD_MAX_BYTES, MAX_CORRELATION_TOPICS } from '../constants.ts'

/** The extension a mesh agent's A2A card declares: runs, checkpoints and correlation ride A2A as below. */
export const A2A_MESH_EXTENSION_URI = 'https://aap-mesh.dev/extensions/a2a-mesh/v0.1'
/** A2A protocol version this bridge speaks (the ProtoJSON wire form of @a2a-js/sdk 1.x). */
export const A2A_PROTOCOL_VERSION = '1.0'

/** `type` of each typed DataPart (the `^[a-z_]+(\.[a-z_]+){1,2}$` form of the A2A profile examples). */
export const PART_DELEGATE = 'aap.delegate.request'
export const PART_RESUME = 'aap.resume.request'
export const PART_CHECKPOINT = 'aap.checkpoint.raised'
export const PART_PROGRESS = 'aap.run.progress'
export const PART_OUTPUT = 'aap.run.output'
export const PART_FAILURE = 'aap.run.failure'

/** Media type of each typed DataPart. */
export const MEDIA_TYPES: Readonly<Record<string, string>> = {
  [PART_DELEGATE]: 'application/vnd.aap-mesh.delegate-request+json',
  [PART_RESUME]: 'application/vnd.aap-mesh.resume-request+json',
  [PART_CHECKPOINT]: 'application/vnd.aap-mesh.checkpoint+json',
  [PART_PROGRESS]: 'application/vnd.aap-mesh.progress+json',
  [PART_OUTPUT]: 'application/vnd.aap-mesh.output+json',
  [PART_FAILURE]: 'application/vnd.aap-mesh.failure+json'
}

/** Where the inbound server serves one mesh agent: `${A2A_AGENTS_PATH}/<agent id>/...`. */
export const A2A_AGENTS_PATH = '/a2a/agents'
export const A2A_JSONRPC_SUBPATH = '/jsonrpc'
export const A2A_REST_SUBPATH = '/rest'
/** Default host of the inbound server: loopback only. */
export const A2A_DEFAULT_HOST = '127.0.0.1'

/**
 * Mesh agents the inbound server serves at once: past it the least recently used one with no open task goes, else
 * one whose open tasks only wait for input (their runs are canceled), and with none a new agent is refused.
 */
export const A2A_AGENT_HANDLERS_MAX = 256
/**
 * Runs of dropped A2A tasks (an evicted agent's open tasks, an open task dropped past its agent's bound) canceled
 * at once: no client can reach such a run again, and a blocked one would wait for ever.
 */
export const A2A_DROPPED_RUN_CANCELS_AT_ONCE = 8
/**
 * Agents' cards the inbound server looks up at once for agents it does not serve yet (each lookup within
 * A2A_CARD_RESOLVE_TIMEOUT_MS): one more is refused (DELEGATION_REFUSED, reason capacity). A lookup holds no place
 * among the A2A_AGENT_HANDLERS_MAX agents served: an agent is made room for only once its card resolved.
 */
export const A2A_CARD_LOOKUPS_MAX = 64
/**
 * Tasks the inbound server keeps per agent: past it the least recently written finished one is dropped, and when
 * all are open a new task is refused (DELEGATION_REFUSED, reason capacity).
 */
export const A2A_TASKS_MAX_PER_AGENT = 10_000
/**
 * Bytes of tasks the inbound server keeps per agent, each task counted by the length of its JSON when saved (its
 * messages, history and artifacts): past it the least recently written finished tasks are dropped, and when only
 * open tasks are left a new task is refused (DELEGATION_REFUSED, reason capacity) while the open ones go on.
 */
export const A2A_TASKS_MAX_BYTES_PER_AGENT = 16 * 1024 * 1024
/**
 * Bytes of tasks the inbound server keeps, all its agents together (A2A_AGENT_HANDLERS_MAX agents at their own bound
 * would hold 4 GiB): past it the least recently written finished task of any agent is dropped, and when only open
 * tasks are left a new task is refused (DELEGATION_REFUSED, reason capacity).
 */
export const A2A_TASKS_MAX_BYTES = 256 * 1024 * 1024
/**
 * Where the inbound server keeps its agents' tasks across restarts: a LevelDB of its own in this folder of the
 * node's data directory (a node with none keeps them in memory only). Each task is one record, written as it is
 * saved and deleted when the task is dropped, so the records are bounded as the tasks held are.
 */
export const A2A_TASK_RECORDS_DIR = 'a2a-tasks'
/** Version of a task record; one of another version is not read (skipped, and logged). */
export const A2A_TASK_RECORD_VERSION = 1
/**
 * Records read when an agent's tasks are loaded, as a multiple of its bounds (A2A_TASKS_MAX_PER_AGENT tasks,
 * A2A_TASKS_MAX_BYTES_PER_AGENT bytes): the records a server wrote are within them, so past it what is left is
 * not read (logged); a record larger than the agent's byte bound is not one this server wrote (skipped).
 */
export const A2A_TASK_RECORDS_LOAD_FACTOR = 2
/**
 * Tasks waiting for input whose runs the inbound server watches, all its agents together (a cancel, failure,
 * handoff or resume made outside A2A reaches the task through the watch). Each watch holds one of the node's
 * correlation topics, so a quarter of them at most; past it the watch of the task that has waited longest
 * goes (counted and logged), and that task shows its run's later moves no more.
 */
export const A2A_INPUT_WATCHES_MAX = MAX_CORRELATION_TOPICS / 4
/**
 * Tries again (count) of the inbound server's subscription to a task's run that was refused because the run's
 * correlation stayed busy on this node (TIMEOUT, reason correlation_busy: its lock behind a slow disk). Each try
 * waits up to EVENTS_SUBSCRIBE_BUSY_WAIT_MS (5 s) for the lock, so 12 tries are a minute of a stalled disk: a
 * hiccup is waited out, a disk stalled longer leaves the run unfollowed (counted and logged) rather than hold the
 * client's SendMessage, and a topic, for ever; the run goes on, its task shows the run as read then (the
 * SendMessage's answer), and is brought up to date when a client reads it, as one whose watch went (task-refresh.ts).
 */
export const A2A_BUSY_RETRIES_MAX = 12
/**
 * Least time between two reads of the run of a task nothing follows (its watch went, or never started) when
 * clients read the task (GetTask, ListTasks): a client polling a task asks its executor at most this often.
 */
export const A2A_TASK_REFRESH_INTERVAL_MS = 2_000
/** Bound on reading the run of a task nothing follows (get_run to its executor, handoffs followed included). */
export const A2A_TASK_REFRESH_TIMEOUT_MS = 5_000
/** Runs read at once for tasks nothing follows, per agent; past it a read task is shown as it is saved. */
export const A2A_TASK_REFRESHES_MAX = 16
/** Tasks of one ListTasks page whose runs are read (the first ones nothing follows); the rest are shown as saved. */
export const A2A_LIST_REFRESH_MAX = 8
/** Handoffs followed from a task's run to the run that carries it on now, in one read. */
export const A2A_TASK_REFRESH_HANDOFFS_MAX = 8
/**
 * Events of handoff successors (runs whose run.started names a handoff_from) one tracked task keeps while the run
 * it follows has not handed off yet: a subscription's history comes run by run in run id order, so a successor's
 * events may come before its predecessor's run.completed (as may a successor's start live). A handoff to one of
 * them goes on with its events kept; past the bound the oldest goes (logged), so a long successor shows its later
 * events only.
 */
export const A2A_SUCCESSOR_EVENTS_KEPT_MAX = 256
/** SubscribeToTask streams open at once on one task; past it a new one is refused (TooManySubscribersError). */
export const A2A_SUBSCRIBERS_MAX_PER_TASK = 8
/**
 * Streams (SubscribeToTask and SendStreamingMessage) the inbound server keeps open at once, all its agents
 * together; past it a new one is refused as one past A2A_SUBSCRIBERS_MAX_PER_TASK is (TooManyStreamsError), before
 * any mesh call. Half the server's connections, so unary calls still get in.
 */
export const A2A_STREAMS_MAX = 128
/**
 * Connections the inbound server's HTTP server takes at once (its maxConnections, well under a default limit
 * of 1024 open files): past it a new connection is closed at once (counted, and logged).
 */
export const A2A_SERVER_MAX_CONNECTIONS = 256
/**
 * Messages of a task's history the inbound server keeps (the latest; each run.progress adds one).
 * The run's own log keeps every event (GetRun, replay).
 */
export const A2A_TASK_HISTORY_MAX = 64
/** Unread output past which the inbound server cuts off an A2A client (a stream it stopped reading); it may subscribe again. */
export const A2A_MAX_UNREAD_BYTES = 1024 * 1024
/**
 * Bytes of artifact parts (as JSON) a forwarded A2A task may show: twice what a run's output can carry
 * (EVENT_PAYLOAD_MAX_BYTES), so a task that passes it fails at once rather than at its end.
 */
export const A2A_OUTBOUND_ARTIFACT_MAX_BYTES = 2 * EVENT_PAYLOAD_MAX_BYTES
/**
 * Largest body an A2A request may have (express.json's default limit, which the SDK's handlers parse with): one
 * that declares a longer Content-Length is refused before it is read, and one read past it is cut off; either
 * gets HTTP 413 with a typed error (a JSON-RPC envelope on the JSON-RPC binding).
 */
export const A2A_BODY_MAX_BYTES = 100 * 1024
/**
 * referenceTaskIds one SendMessage may name: the SDK loads (copies) each one from the task store before the
 * executor runs, and the mesh never reads them, so a request naming more is refused (-32602) before any load.
 */
export const A2A_REFERENCE_TASKS_MAX = 16
/** Age past which the inbound server resolves a served agent's mesh card again (on its next request). */
export const A2A_CARD_REFRESH_MS = 60_000
/** Bound on resolving a mesh agent's card for an A2A request. */
export const A2A_CARD_RESOLVE_TIMEOUT_MS = 10_000
/**
 * Bound on a mesh call (delegate, resume, cancel) made for an A2A request: a backstop past the
 * call's own bounds (resolving the card, then the call), so the client is told the call's own
 * typed error (AGENT_NOT_FOUND, or TIMEOUT naming the limit) rather than that it was aborted.
 */
export const A2A_MESH_CALL_TIMEOUT_MS = CARD_FETCH_TIMEOUT_MS + DHT_GET_TIMEOUT_MS + CALL_TIMEOUT_MS + 1_000

/** Bound on fetching an A2A server's agent card. */
export const A2A_CARD_FETCH_TIMEOUT_MS = 10_000
/** Bound on one unary call to an A2A server (SendMessage, GetTask, CancelTask). */
export const A2A_CALL_TIMEOUT_MS = 30_000
/** Bound on the whole forwarded A2A task of one mesh run, blocks excluded. */
export const A2A_TASK_MAX_MS = 60 * 60 * 1000
/**
 * Tasks of one ListTasks page the bridge reads looking for the task of a run that ended before any event of it
 * (the protocol's largest page), and pages read at most: the task is found by the run's context and the message
 * that made it, the newest tasks first, all within A2A_CALL_TIMEOUT_MS; past them it is not looked for further (logged).
 */
export const A2A_UNSEEN_TASK_PAGE_SIZE = 100
export const A2A_UNSEEN_TASK_PAGES_MAX = 4
/** Pause between ListTasks asks for such a task while none is found yet (a server may store it only with its first event). */
export const A2A_UNSEEN_TASK_RETRY_MS = 1000
/** Pause between GetTask polls of an A2A server that cannot stream. */
export const A2A_POLL_INTERVAL_MS = 250
/** Outbound A2A agents one node bridges. */
export const A2A_OUTBOUND_AGENTS_MAX = 16
/**
 * Bytes of one answer the bridge reads from an A2A server outside a stream: the agent card, a unary call's
 * answer (SendMessage, GetTask, CancelTask) and the body of an error. As large as one event of a stream may be
 * (the SDK's SSE reader stops an event at 4 MiB), and far more than a task the bridge can use carries
 * (A2A_OUTBOUND_ARTIFACT_MAX_BYTES of artifacts): past it the read stops, the connection is closed and the call
 * fails (the run with "too large"). A stream has no total bound, only the per-event one, so a long task streams on.
 */
export const A2A_RESPONSE_MAX_BYTES = 4 * 1024 * 1024
/**
 * run.progress events one forwarded task may report, its A2A task id included (well below the events a node
 * keeps of a run, EVENTS_MAX_EVENTS_PER_RUN, so the run's end is never past them): later status messages are
 * not reported (counted, and logged once), and the run ends as the task does.
 */
export const A2A_PROGRESS_MAX_PER_RUN = 1_000
/**
 * Least time between two run.progress events of one forwarded task: status messages that come faster are
 * coalesced, and the latest of them is reported when the time is up (unless the task blocks or ends first).
 */
export const A2A_PROGRESS_MIN_INTERVAL_MS = 1_000
/**
 * Redirects one request to an A2A server follows at most, each within the
 * configured origin and below the configured path (a server that adds a
 * trailing slash, a mounted app): one to another origin, or to another path
 * of it, is refused whatever the count, since the bridge would send the
 * delegation's body wherever the server names.
 */
export const A2A_REDIRECTS_MAX = 5
