/**
 * Pure mapping between AAP mesh runs and A2A v1.0 (the @a2a-js/sdk object
 * model, which its transports write as canonical ProtoJSON): cards, typed
 * DataParts, run states, run events, outcomes of A2A tasks and errors.
 *
 * The AAP profile's reference mappings: discover <-> agent card discovery,
 * delegate <-> SendMessage (a Task), Run <-> Task, AgentEvent <-> task status
 * and artifact updates, correlation_id <-> the task's contextId (also in the
 * task metadata under the mesh extension URI).
 */
import { Role, TaskState } from '@a2a-js/sdk'
import type { AgentCard as A2aCard, Artifact, Message, Part, Task, TaskArtifactUpdateEvent, TaskStatus, TaskStatusUpdateEvent } from '@a2a-js/sdk'
import {
  ContentTypeNotSupportedError, RequestMalformedError, TaskNotCancelableError, TaskNotFoundError, UnsupportedOperationError
} from '@a2a-js/sdk/errors'
import type { A2AError } from '@a2a-js/sdk/errors'
import { CHECKPOINT_ID_MAX_CHARS, REASON_MAX_CHARS } from '../constants.ts'
import type { AgentCard as MeshCard, CapabilityRef, CardDraft } from '../card/card.ts'
import { AapError, InvalidRequestError } from '../errors.ts'
import type { AgentEvent, Run } from '../runlog/types.ts'
import {
  A2A_JSONRPC_SUBPATH, A2A_MESH_EXTENSION_URI, A2A_PROTOCOL_VERSION, A2A_REST_SUBPATH, MEDIA_TYPES, PART_CHECKPOINT, PART_DELEGATE,
  PART_FAILURE, PART_OUTPUT, PART_PROGRESS, PART_RESUME
} from './constants.ts'
import { cutText } from '../util/text.ts'

export type JsonObject = Record<string, unknown>

export function isRecord (v: unknown): v is JsonObject {
  return typeof v === 'object' && v !== null && !Array.isArray(v)
}

// ---- parts and messages -------------------------------------------------------------

/** A typed DataPart: `data.type` names the payload, `mediaType` advertises it. */
export function dataPart (type: string, body: JsonObject): Part {
  return { content: { $case: 'data', value: { type, ...body } }, metadata: undefined, filename: '', mediaType: MEDIA_TYPES[type] ?? 'application/json' }
}

export function textPart (text: string): Part {
  return { content: { $case: 'text', value: text }, metadata: undefined, filename: '', mediaType: 'text/plain' }
}

export function message (role: Role, parts: Part[], ids: { taskId?: string, contextId?: string } = {}): Message {
  return {
    messageId: crypto.randomUUID(),
    contextId: ids.contextId ?? '',
    taskId: ids.taskId ?? '',
    role,
    parts,
    metadata: undefined,
    extensions: [A2A_MESH_EXTENSION_URI],
    referenceTaskIds: []
  }
}

/** The data of the first DataPart whose `type` is `type`, else undefined. */
export function typedData (parts: readonly Part[], type: string): JsonObject | undefined {
  for (const p of parts) {
    if (p.content?.$case === 'data' && isRecord(p.content.value) && p.content.value.type === type) return p.content.value
  }
  return undefined
}

function firstData (parts: readonly Part[]): JsonObject | undefined {
  for (const p of parts) if (p.content?.$case === 'data' && isRecord(p.content.value)) return p.content.value
  return undefined
}

/** The text parts, joined. */
export function textOf (parts: readonly Part[]): string {
  return parts.flatMap(p => p.content?.$case === 'text' ? [p.content.value] : []).join('\n')
}

export function capabilityOf (v: unknown): CapabilityRef | undefined {
  if (!isRecord(v) || typeof v.capability_id !== 'string' || typeof v.version !== 'string') return undefined
  return { capability_id: v.capability_id, version: v.version }
}

/**
 * What an A2A message asks a mesh agent to do. The mesh form is an
 * `aap.delegate.request` DataPart `{capability, input}`; a plain client may
 * send any DataPart (the input) or text (`{text}`) to an agent that offers
 * exactly one capability.
 */
export function readDelegate (msg: Message, offered: readonly CapabilityRef[]): { capability: CapabilityRef, input: JsonObject } {
  const typed = typedData(msg.parts, PART_DELEGATE)
  if (typed !== undefined) {
    const capability = typed.capability === undefined ? soleCapability(offered) : capabilityOf(typed.capability)
    if (capability === undefined) throw new InvalidRequestError(`${PART_DELEGATE}.capability must be {capability_id, version}`)
    const input = typed.input ?? {}
    if (!isRecord(input)) throw new InvalidRequestError(`${PART_DELEGATE}.input must be a JSON object`)
    return { capability, input }
  }
  const capability = soleCapability(offered)
  if (capability === undefined) {
    throw new InvalidRequestError(`the agent offers ${offered.length} capabilities: send a ${PART_DELEGATE} DataPart naming one`)
  }
  const data = firstData(msg.parts)
  if (data !== undefined) return { capability, input: data }
  const text = textOf(msg.parts)
  if (text.length > 0) return { capability, input: { text } }
  throw new InvalidRequestError('the message carries neither a DataPart nor text')
}

function soleCapability (offered: readonly CapabilityRef[]): CapabilityRef | undefined {
  return offered.length === 1 ? offered[0] : undefined
}

/** The resolution an A2A message carries for a blocked run: `aap.resume.request.resolution`, any DataPart, or `{text}`. */
export function readResume (msg: Message): JsonObject {
  const typed = typedData(msg.parts, PART_RESUME)
  if (typed !== undefined) {
    if (!isRecord(typed.resolution)) throw new InvalidRequestError(`${PART_RESUME}.resolution must be a JSON object`)
    return typed.resolution
  }
  const data = firstData(msg.parts)
  if (data !== undefined) return data
  const text = textOf(msg.parts)
  if (text.length > 0) return { text }
  throw new InvalidRequestError('a resume message carries a resolution DataPart or text')
}

/**
 * The checkpoint an A2A message answering an input-required task resolves:
 * the `checkpoint_id` of its `aap.resume.request` part when the client names
 * one (it knows what it answered), else the checkpoint the task showed it
 * was waiting on. The node refuses the resume when the run is blocked on
 * another one by then, so an answer meant for one checkpoint never resolves
 * the next.
 */
export function resumeCheckpointOf (msg: Message, task: Pick<Task, 'status'>): string | undefined {
  const named = typedData(msg.parts, PART_RESUME)?.checkpoint_id
  if (named !== undefined) {
    if (typeof named !== 'string' || named.length === 0 || named.length > CHECKPOINT_ID_MAX_CHARS) {
      throw new InvalidRequestError(`${PART_RESUME}.checkpoint_id must be a string of 1 to ${CHECKPOINT_ID_MAX_CHARS} characters`)
    }
    return named
  }
  const shown = typedData(task.status?.message?.parts ?? [], PART_CHECKPOINT)?.checkpoint_id
  return typeof shown === 'string' && shown.length > 0 ? shown : undefined
}

/** A2A message that delegates `capability` with `input` (outbound side). */
export function delegateMessage (capability: CapabilityRef, input: JsonObject, contextId: string): Message {
  const parts = [dataPart(PART_DELEGATE, { capability, input })]
  if (typeof input.text === 'string') parts.unshift(textPart(input.text))
  return message(Role.ROLE_USER, parts, { contextId })
}

/** A2A message that answers a task's input request with `resolution` (outbound side). */
export function resumeMessage (taskId: string, contextId: string, resolution: JsonObject): Message {
  const parts = [dataPart(PART_RESUME, { resolution })]
  if (typeof resolution.text === 'string') parts.unshift(textPart(resolution.text))
  return message(Role.ROLE_USER, parts, { taskId, contextId })
}

// ---- cards ---------------------------------------------------------------------------

/** A card's security: the bearer scheme, required; else (loopback: the node's operator decides who reaches it) none asked. */
function securityOf (bearer: boolean): Pick<A2aCard, 'securitySchemes' | 'securityRequirements'> {
  if (!bearer) {
    return {
      securitySchemes: {
        mesh_local: { scheme: { $case: 'httpAuthSecurityScheme', value: { description: 'none required on the loopback listener', scheme: 'none', bearerFormat: '' } } }
      },
      securityRequirements: []
    }
  }
  return {
    securitySchemes: {
      [BEARER_SCHEME]: { scheme: { $case: 'httpAuthSecurityScheme', value: { description: 'the node\'s API token (<data dir>/api-token), as "Authorization: Bearer <token>"', scheme: 'Bearer', bearerFormat: '' } } }
    },
    securityRequirements: [{ schemes: { [BEARER_SCHEME]: { list: [] } } }]
  }
}

/** The security scheme of a card served by a server that asks a bearer token (the node's API token). */
const BEARER_SCHEME = 'bearer'

/**
 * The A2A card of a mesh agent, served at `base` (its JSON-RPC and HTTP+JSON endpoints hang below it); `bearer`:
 * the server asks every request for the node's API token (server-access.ts), which the card declares.
 */
export function meshToA2aCard (card: MeshCard, base: string, opts: { bearer?: boolean } = {}): A2aCard {
  const skills = card.capabilities.map(c => ({
    id: `${c.capability_id}@${c.version}`,
    name: c.capability_id,
    description: `${c.capability_id} version ${c.version}, served by mesh agent ${card.agent_id}`,
    tags: [...card.tags, 'aap-mesh'],
    examples: [],
    inputModes: ['application/json', MEDIA_TYPES[PART_DELEGATE] ?? 'application/json'],
    outputModes: ['application/json'],
    securityRequirements: []
  }))
  return {
    name: card.name,
    description: card.description.length > 0 ? card.description : `mesh agent ${card.agent_id}`,
    supportedInterfaces: [
      { url: base + A2A_JSONRPC_SUBPATH, protocolBinding: 'JSONRPC', tenant: '', protocolVersion: A2A_PROTOCOL_VERSION },
      { url: base + A2A_REST_SUBPATH, protocolBinding: 'HTTP+JSON', tenant: '', protocolVersion: A2A_PROTOCOL_VERSION }
    ],
    provider: undefined,
    version: String(card.seq),
    capabilities: {
      streaming: true,
      pushNotifications: false,
      extendedAgentCard: false,
      extensions: [{
        uri: A2A_MESH_EXTENSION_URI,
        description: 'AAP mesh runs: typed DataParts for delegate/resume/checkpoint/output, correlation_id = contextId',
        required: false,
        params: { agent_id: card.agent_id, card_seq: card.seq, capabilities: card.capabilities }
      }]
    },
    ...securityOf(opts.bearer === true),
    defaultInputModes: ['application/json', 'text/plain'],
    defaultOutputModes: ['application/json'],
    skills,
    signatures: []
  }
}

const CAP_ID_BAD = /[^A-Za-z0-9._:/-]/g
const VERSION_BAD = /[^A-Za-z0-9.+_-]/g

/** The mesh capability that stands for an A2A skill: `a2a:<skill id>` at the card's version. */
export function skillCapability (skillId: string, cardVersion: string): CapabilityRef {
  const id = `a2a:${skillId.replace(CAP_ID_BAD, '_')}`.slice(0, 128)
  const version = cardVersion.replace(VERSION_BAD, '_').slice(0, 64)
  return { capability_id: id, version: version.length > 0 ? version : '0' }
}

/**
 * The mesh card draft of an A2A agent (its skills become capabilities; at most 32). `card` is one checked by
 * checkedCard (outbound-card.ts): an A2A server's raw card may have any shape, and this reads its fields as typed.
 */
export function a2aToMeshDraft (card: A2aCard): CardDraft {
  const capabilities = card.skills.slice(0, 32).map(s => skillCapability(s.id, card.version))
  const tags = ['a2a', ...card.skills.flatMap(s => s.tags)]
    .map(t => t.replace(CAP_ID_BAD, '_').slice(0, 64)).filter(t => t.length > 0)
  return {
    name: (card.name.length > 0 ? card.name : 'a2a agent').slice(0, 128),
    description: card.description.slice(0, 1024),
    capabilities: capabilities.length > 0 ? capabilities : [skillCapability('default', card.version)],
    tags: [...new Set(tags)].slice(0, 32)
  }
}

// ---- runs -> tasks -------------------------------------------------------------------

export function taskStateOf (run: Pick<Run, 'state' | 'failure'>): TaskState {
  switch (run.state) {
    case 'running': return TaskState.TASK_STATE_WORKING
    case 'blocked': return TaskState.TASK_STATE_INPUT_REQUIRED
    case 'completed': return TaskState.TASK_STATE_COMPLETED
    case 'failed': return run.failure?.code === 'CANCELED' ? TaskState.TASK_STATE_CANCELED : TaskState.TASK_STATE_FAILED
  }
}

export function isFinalState (s: TaskState): boolean {
  return s === TaskState.TASK_STATE_COMPLETED || s === TaskState.TASK_STATE_FAILED ||
    s === TaskState.TASK_STATE_CANCELED || s === TaskState.TASK_STATE_REJECTED
}

/** The task metadata that names the mesh run (under the extension URI). */
export function runMetadata (run: Pick<Run, 'run_id' | 'agent_id' | 'correlation_id' | 'capability'>): JsonObject {
  return { [A2A_MESH_EXTENSION_URI]: { run_id: run.run_id, agent_id: run.agent_id, correlation_id: run.correlation_id, capability: run.capability } }
}

/** The run id a task's metadata names, if any. */
export function runIdOf (task: Pick<Task, 'metadata'> | undefined): string | undefined {
  const ext = task?.metadata?.[A2A_MESH_EXTENSION_URI] as unknown
  return isRecord(ext) && typeof ext.run_id === 'string' ? ext.run_id : undefined
}

/** The status message of a run: the open checkpoint, the failure, or nothing. */
export function statusMessage (run: Run, ids: { taskId: string, contextId: string }): Message | undefined {
  if (run.state === 'blocked') {
    return message(Role.ROLE_AGENT, [dataPart(PART_CHECKPOINT, { checkpoint_id: run.checkpoint_id, reason: run.block_reason ?? '' })], ids)
  }
  if (run.state === 'failed' && run.failure !== null) {
    return message(Role.ROLE_AGENT, [dataPart(PART_FAILURE, { code: run.failure.code, message: run.failure.message })], ids)
  }
  return undefined
}

export function runStatus (run: Run, ids: { taskId: string, contextId: string }): TaskStatus {
  return { state: taskStateOf(run), message: statusMessage(run, ids), timestamp: run.updated_at }
}

export function outputArtifact (runId: string, output: JsonObject): Artifact {
  return { artifactId: `${runId}:output`, name: 'output', description: 'the run\'s output', parts: [dataPart(PART_OUTPUT, { output })], metadata: undefined, extensions: [A2A_MESH_EXTENSION_URI] }
}

/** The A2A Task that stands for a run. */
export function runToTask (run: Run, taskId: string, history: Message[] = []): Task {
  const ids = { taskId, contextId: run.correlation_id }
  return {
    id: taskId,
    contextId: run.correlation_id,
    status: runStatus(run, ids),
    artifacts: run.state === 'completed' && run.output !== null ? [outputArtifact(run.run_id, run.output)] : [],
    history,
    metadata: runMetadata(run)
  }
}

export type TaskUpdate = { kind: 'statusUpdate', data: TaskStatusUpdateEvent } | { kind: 'artifactUpdate', data: TaskArtifactUpdateEvent }

/**
 * The A2A updates that carry one run event: started/progress/resume ->
 * WORKING (progress in a DataPart), blocked -> INPUT_REQUIRED with the
 * checkpoint, completed -> the output artifact then COMPLETED, failed ->
 * FAILED (CANCELED when its delegator canceled it) with the failure.
 * Their metadata is the whole extension object (the SDK replaces the task's
 * with it, one key deep): the run, its executing agent (the event's
 * executor: after a handoff, the new one), its capability (`capability`, or
 * the one a run.started names), the correlation, and the event's seq and type.
 */
export function eventToUpdates (e: AgentEvent, ids: { taskId: string, contextId: string }, capability?: CapabilityRef): TaskUpdate[] {
  const cap = (e.type === 'run.started' ? capabilityOf(e.payload.capability) : undefined) ?? capability
  const meta = {
    [A2A_MESH_EXTENSION_URI]: { run_id: e.run_id, agent_id: e.executor, correlation_id: e.correlation_id, ...(cap === undefined ? {} : { capability: cap }), seq: e.seq, event: e.type }
  }
  const status = (state: TaskState, msg?: Message): TaskUpdate => ({
    kind: 'statusUpdate',
    data: { taskId: ids.taskId, contextId: ids.contextId, status: { state, message: msg, timestamp: e.at }, metadata: meta }
  })
  const agent = (type: string, body: JsonObject): Message => message(Role.ROLE_AGENT, [dataPart(type, body)], ids)
  switch (e.type) {
    case 'run.started': return [status(TaskState.TASK_STATE_WORKING)]
    case 'run.progress': return [status(TaskState.TASK_STATE_WORKING, agent(PART_PROGRESS, { payload: e.payload }))]
    case 'run.blocked':
      return [status(TaskState.TASK_STATE_INPUT_REQUIRED, agent(PART_CHECKPOINT, { checkpoint_id: e.payload.checkpoint_id ?? null, reason: e.payload.reason ?? '' }))]
    case 'run.completed': {
      // a handoff completes this run without output: the task goes on with the next run
      if (e.payload.transition === 'handoff') return [status(TaskState.TASK_STATE_WORKING, agent(PART_PROGRESS, { payload: e.payload }))]
      const output = isRecord(e.payload.output) ? e.payload.output : {}
      return [
        { kind: 'artifactUpdate', data: { taskId: ids.taskId, contextId: ids.contextId, artifact: outputArtifact(e.run_id, output), append: false, lastChunk: true, metadata: meta } },
        status(TaskState.TASK_STATE_COMPLETED)
      ]
    }
    case 'run.failed': {
      const failure = isRecord(e.payload.failure) ? e.payload.failure : {}
      const state = failure.code === 'CANCELED' ? TaskState.TASK_STATE_CANCELED : TaskState.TASK_STATE_FAILED
      return [status(state, agent(PART_FAILURE, { code: failure.code ?? 'INTERNAL', message: failure.message ?? '' }))]
    }
  }
}

/**
 * The A2A updates that bring a task to its run as read now (not from its
 * events): what the watch would have saved had it seen them. A run handed
 * off keeps the task working (with the handoff as progress); a completed
 * one gives its output artifact, then COMPLETED.
 */
export function runToUpdates (run: Run, ids: { taskId: string, contextId: string }): TaskUpdate[] {
  // the whole extension object, as the task's own (runMetadata), with the seq read
  const meta = { [A2A_MESH_EXTENSION_URI]: { ...runMetadata(run)[A2A_MESH_EXTENSION_URI] as JsonObject, seq: run.last_seq } }
  const update = (status: TaskStatus): TaskUpdate => ({ kind: 'statusUpdate', data: { ...ids, status, metadata: meta } })
  if (run.handoff_to !== null) {
    const payload = { transition: 'handoff', handoff_to: run.handoff_to }
    return [update({ state: TaskState.TASK_STATE_WORKING, message: message(Role.ROLE_AGENT, [dataPart(PART_PROGRESS, { payload })], ids), timestamp: run.updated_at })]
  }
  const status = update(runStatus(run, ids))
  if (run.state !== 'completed') return [status]
  const artifact: TaskUpdate = { kind: 'artifactUpdate', data: { ...ids, artifact: outputArtifact(run.run_id, run.output ?? {}), append: false, lastChunk: true, metadata: meta } }
  return [artifact, status]
}

/** Whether a task shows its run as read now: the same run, state and open checkpoint. */
export function taskShowsRun (task: Pick<Task, 'status' | 'metadata'>, run: Run): boolean {
  const state = run.handoff_to !== null ? TaskState.TASK_STATE_WORKING : taskStateOf(run)
  if (task.status?.state !== state || runIdOf(task) !== run.run_id) return false
  return run.state !== 'blocked' || typedData(task.status.message?.parts ?? [], PART_CHECKPOINT)?.checkpoint_id === run.checkpoint_id
}

// ---- A2A tasks -> run outcomes (outbound side) ---------------------------------------

export type TaskOutcome =
  | { kind: 'working', progress?: JsonObject }
  | { kind: 'blocked', reason: string, checkpoint_id: string }
  | { kind: 'completed', output: JsonObject }
  | { kind: 'failed', message: string }
  | { kind: 'canceled', message: string }

/** The output of a finished task: the mesh output part if there is one, else its artifacts as data. */
export function outputOf (artifacts: readonly Artifact[], final?: Message): JsonObject {
  for (const a of artifacts) {
    const out = typedData(a.parts, PART_OUTPUT)
    if (out !== undefined && isRecord(out.output)) return out.output
  }
  const parts = (list: readonly Part[]): unknown[] => list.map(p =>
    p.content?.$case === 'data' ? { data: p.content.value } : p.content?.$case === 'text' ? { text: p.content.value } : p.content?.$case === 'url' ? { url: p.content.value } : { media_type: p.mediaType })
  const out: JsonObject = { artifacts: artifacts.map(a => ({ artifact_id: a.artifactId, name: a.name, parts: parts(a.parts) })) }
  if (final !== undefined) out.message = parts(final.parts)
  return out
}

/** What a task's status means for the mesh run that forwards to it. `n` numbers the task's input requests. */
export function outcomeOf (taskId: string, status: TaskStatus | undefined, artifacts: readonly Artifact[], n: number): TaskOutcome {
  const msg = status?.message
  const parts = msg?.parts ?? []
  switch (status?.state) {
    case TaskState.TASK_STATE_INPUT_REQUIRED:
    case TaskState.TASK_STATE_AUTH_REQUIRED: {
      const cp = typedData(parts, PART_CHECKPOINT)
      const reason = typeof cp?.reason === 'string' && cp.reason.length > 0 ? cp.reason : textOf(parts)
      const id = typeof cp?.checkpoint_id === 'string' && cp.checkpoint_id.length > 0 ? cp.checkpoint_id : `a2a:${taskId}:${n}`
      return {
        kind: 'blocked',
        reason: cutText(reason.length > 0 ? reason : 'the A2A agent asks for input', REASON_MAX_CHARS),
        checkpoint_id: cutText(id, CHECKPOINT_ID_MAX_CHARS)
      }
    }
    case TaskState.TASK_STATE_COMPLETED: return { kind: 'completed', output: outputOf(artifacts, msg) }
    case TaskState.TASK_STATE_CANCELED: return { kind: 'canceled', message: textOf(parts) || 'the A2A task was canceled' }
    case TaskState.TASK_STATE_FAILED:
    case TaskState.TASK_STATE_REJECTED: {
      const f = typedData(parts, PART_FAILURE)
      const text = typeof f?.message === 'string' ? f.message : textOf(parts)
      const state = status.state === TaskState.TASK_STATE_REJECTED ? 'rejected' : 'failed'
      return { kind: 'failed', message: cutText(`the A2A task ${state}${text.length > 0 ? `: ${text}` : ''}`, REASON_MAX_CHARS) }
    }
    default: {
      const p = typedData(parts, PART_PROGRESS)
      if (p !== undefined && isRecord(p.payload)) return { kind: 'working', progress: p.payload }
      const text = textOf(parts)
      return text.length > 0 ? { kind: 'working', progress: { text } } : { kind: 'working' }
    }
  }
}

// ---- errors --------------------------------------------------------------------------

/** The A2A error for an AAP error (the mesh code and details ride in the error metadata). */
export function toA2aError (err: unknown): A2AError {
  if (!(err instanceof AapError)) return new UnsupportedOperationError({ message: err instanceof Error ? err.message : String(err), metadata: { aap_code: 'INTERNAL' } })
  const opts = { message: `${err.message} (${err.code})`, metadata: { aap_code: err.code } }
  switch (err.code) {
    case 'INVALID_REQUEST': return new RequestMalformedError(opts)
    case 'RUN_NOT_FOUND': return new TaskNotFoundError(opts)
    case 'INVALID_TRANSITION': return new TaskNotCancelableError(opts)
    case 'CAPABILITY_NOT_SUPPORTED': return new ContentTypeNotSupportedError(opts)
    default: return new UnsupportedOperationError(opts)
  }
}
