/**
 * The run protocols' request bodies (/aap/delegate, /aap/control,
 * /aap/handoff) and their validators, from protocols/runs.schema.json.
 */
import type { CapabilityRef } from '../card/card.ts'
import { HANDOFF_CONTEXT_MAX_BYTES, RUN_INPUT_MAX_BYTES } from '../constants.ts'
import { AapError, AgentNotFoundError, InvalidRequestError, InvalidSignatureError, RunNotFoundError } from '../errors.ts'
import type { RunTicket } from '../runlog/ticket.ts'
import type { AgentEvent, HandoffLink, Run } from '../runlog/types.ts'
import { schema } from '../schema/validate.ts'
import { grantHolds, type ResumeGrant } from '../runlog/resume-grant.ts'
import type { SignatureCache } from '../identity/signature-cache.ts'
import { nestedDeeperThan } from '../util/json-depth.ts'
import { PAYLOAD_MAX_DEPTH } from './constants.ts'
import type { TraceContext } from './trace.ts'
import type { RunCommand } from './types.ts'

export interface WireDelegate {
  to_agent: string
  task_id: string
  capability: CapabilityRef
  input: Record<string, unknown>
  parent_run: string | null
  idempotency_key?: string
  authorized?: string[]
  /** The delegator's signed ticket for the run it asks for (src/runlog/ticket.ts); required by the executor. */
  ticket?: RunTicket
  /** The next turn of the conversation this earlier run is a turn of (protocols/turns.md). */
  continue_run?: string
  /** The conversation to continue (or start) under this id. */
  context_id?: string
  /** W3C trace context of the call (trace.ts). */
  trace?: TraceContext
}

export interface WireHandoff {
  to_agent: string
  from_run: HandoffLink
  task_id: string
  capability: CapabilityRef
  input: Record<string, unknown>
  context: Record<string, unknown>
  delegator: string
  authorized: string[]
  parent_run: string | null
  /** The successor's ticket, signed by the sender (the predecessor's executor); required by the receiver. */
  ticket?: RunTicket
  /** The predecessor's run.started, with the ticket the successor inherits from; required by the receiver. */
  predecessor?: AgentEvent
  /** W3C trace context of the call (trace.ts). */
  trace?: TraceContext
}

export interface WireHandoffConfirm {
  run_id: string
  handoff_event: AgentEvent
}

export const isWireDelegate = schema<WireDelegate>('aap:runs#/definitions/DelegateRequest')
export const isWireHandoff = schema<WireHandoff>('aap:runs#/definitions/HandoffRequest')
export const isBlock = schema<{ run_id: string, trace?: TraceContext, reason: string, checkpoint_id: string }>('aap:runs#/definitions/BlockRequest')
export const isResume = schema<ResumeBody>('aap:runs#/definitions/ResumeRequest')

/** A resume request's body. */
export interface ResumeBody {
  run_id: string
  trace?: TraceContext
  resolution: Record<string, unknown>
  /** Only when the caller names the checkpoint it answers. */
  checkpoint_id?: string
  /** The resumer's signature over what it answers (resume-grant.ts). */
  grant?: string
}

/**
 * A resume request's body: `checkpoint_id` only when the caller names the
 * checkpoint it answers, `grant` only when it signed one (executors from
 * before either member refuse a body that carries it).
 */
export function resumeBody (runId: string, resolution: Record<string, unknown>, checkpointId?: string, grant?: string): ResumeBody {
  return { run_id: runId, resolution, ...(checkpointId === undefined ? {} : { checkpoint_id: checkpointId }), ...(grant === undefined ? {} : { grant }) }
}

const isRunId = schema<string>('aap:common#/definitions/RunId')
const isAgentId = schema<string>('aap:common#/definitions/AgentId')
/** A plain answer, so a string the check refuses keeps its type (for the message that names it). */
const shaped = (check: (v: unknown) => boolean, value: string): boolean => check(value)

/**
 * The profile's codes for ids that name nothing: a string that cannot be a
 * run id is RUN_NOT_FOUND ("run id is invalid"), one that cannot be an agent
 * id AGENT_NOT_FOUND ("target agent does not exist"). A value that is no
 * string at all is a malformed request, left to the request's schema.
 */
export function assertRunIdShape (runId: unknown): void {
  if (typeof runId === 'string' && !shaped(isRunId, runId)) throw new RunNotFoundError(`"${runId.slice(0, 80)}" is not a run id`, { reason: 'malformed' })
}

export function assertAgentIdShape (agentId: unknown): void {
  if (typeof agentId === 'string' && !shaped(isAgentId, agentId)) throw new AgentNotFoundError(`"${agentId.slice(0, 80)}" is not an agent id`, { reason: 'malformed' })
}

/**
 * Whether an executor refused a resume for a member it does not know
 * (`checkpoint_id`, `grant`): executors from before a member existed refuse
 * a ResumeRequest with any member their schema does not name
 * (INVALID_REQUEST at the request's top level, additional properties).
 */
export function refusedNewMember (err: unknown): boolean {
  if (!(err instanceof AapError) || err.code !== 'INVALID_REQUEST') return false
  const details = err.details ?? {}
  return details.schema === isResume.ref && details.path === '' && /additional properties/.test(err.message)
}

/**
 * The grant a resume request carries, checked against the agent that sent
 * it (the Noise-authenticated peer): undefined without one, else as the
 * resume event will carry it. INVALID_SIGNATURE when it is not that agent's
 * signature over what the request answers.
 */
export function requestGrant (req: ResumeBody, resumer: string, signatures?: SignatureCache): ResumeGrant | undefined {
  if (req.grant === undefined) return undefined
  const named = req.checkpoint_id ?? null
  if (!grantHolds(resumer, { run_id: req.run_id, checkpoint_id: named, resolution: req.resolution }, req.grant, signatures)) {
    throw new InvalidSignatureError('the resume\'s grant is not its sender\'s signature over the run, the checkpoint it names and its resolution', { reason: 'bad_grant' })
  }
  return { checkpoint_id: named, signature: req.grant }
}

/** The resume command for the state machine, which refuses it when `checkpointId` is given and is not the open checkpoint. */
export function resumeCommand (resolution: Record<string, unknown>, checkpointId?: string, grant?: ResumeGrant): Extract<RunCommand, { type: 'resume' }> {
  return { type: 'resume', resolution, ...(checkpointId === undefined ? {} : { checkpoint_id: checkpointId }), ...(grant === undefined ? {} : { grant }) }
}

export const isGetRun = schema<{ run_id: string, trace?: TraceContext }>('aap:runs#/definitions/GetRunRequest')
export const isCancel = schema<{ run_id: string, trace?: TraceContext, reason?: string }>('aap:runs#/definitions/CancelRequest')
export const isControlHandoff = schema<{ run_id: string, trace?: TraceContext, to_agent: string, context: Record<string, unknown>, to_card?: Record<string, unknown>, to_record?: string }>('aap:runs#/definitions/ControlHandoffRequest')
export const isWireHandoffConfirm = schema<WireHandoffConfirm>('aap:runs#/definitions/HandoffConfirmRequest')
export const isRun = schema<Run>('aap:runs#/definitions/Run')
/** A run's output as its Run record carries it (a completed run's). */
export const isRunOutput = schema<Record<string, unknown>>('aap:runs#/definitions/Object')
export const isExecutorLost = schema<{ run_id: string, verdict: AgentEvent }>('aap:runs#/definitions/ExecutorLostRequest')
export const isGetVerdict = schema<{ run_id: string }>('aap:runs#/definitions/GetVerdictRequest')
export const isGetVerdictResponse = schema<{ verdict: AgentEvent | null, held?: boolean }>('aap:runs#/definitions/GetVerdictResponse')

/** An object's size as JSON (as long as its canonical form: only key order differs, and it is much cheaper). */
function jsonBytes (value: Record<string, unknown>, what: string): number {
  assertPayloadValueDepth(value, what)
  return Buffer.byteLength(JSON.stringify(value))
}

/**
 * INVALID_REQUEST (too_deep) for an agent's value (input, context, output,
 * progress, resolution) nested deeper than PAYLOAD_MAX_DEPTH. Checked before
 * it is encoded: JSON.stringify recurses, and a local caller's thousands of
 * levels would run it out of stack; the run's events and answers carry the
 * value a few levels further down, under the wire's bound.
 */
export function assertPayloadValueDepth (value: unknown, what: string): void {
  if (nestedDeeperThan(value, PAYLOAD_MAX_DEPTH)) throw new InvalidRequestError(`${what} is nested deeper than ${PAYLOAD_MAX_DEPTH} levels`, { reason: 'too_deep', max: PAYLOAD_MAX_DEPTH })
}

/** INVALID_REQUEST for an input over RUN_INPUT_MAX_BYTES (oversized) or nested deeper than PAYLOAD_MAX_DEPTH (too_deep). */
export function assertInputSize (input: Record<string, unknown>, what = 'input'): void {
  const size = jsonBytes(input, what)
  if (size > RUN_INPUT_MAX_BYTES) throw new InvalidRequestError(`${what} is ${size} bytes, over ${RUN_INPUT_MAX_BYTES}`, { reason: 'oversized', max: RUN_INPUT_MAX_BYTES })
}

/** INVALID_REQUEST for a handoff context over HANDOFF_CONTEXT_MAX_BYTES (oversized) or PAYLOAD_MAX_DEPTH (too_deep). */
export function assertContextSize (context: Record<string, unknown>): void {
  const size = jsonBytes(context, 'handoff context')
  if (size > HANDOFF_CONTEXT_MAX_BYTES) throw new InvalidRequestError(`context is ${size} bytes, over ${HANDOFF_CONTEXT_MAX_BYTES}`, { reason: 'oversized', max: HANDOFF_CONTEXT_MAX_BYTES })
}
