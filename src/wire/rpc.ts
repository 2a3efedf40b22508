/**
 * The node's request/response layer over libp2p streams, and with the rest
 * of src/wire the only code that does raw stream I/O.
 *
 * Every aap protocol is request/response over length-prefixed JSON frames
 * (framing.ts). A stream carries many requests: each request has an `id` and
 * its response echoes it, so a caller keeps one long-lived stream per peer
 * and protocol and pipelines calls on it instead of paying a stream
 * negotiation per call (client.ts). Responders never throw at the caller:
 * every failure is an error frame with a typed code (responder.ts). Frames a
 * stream sends in one turn of the event loop leave in one write (outbox.ts).
 * See protocols/README.md.
 *
 * Timeouts, as the caller sees them (all AGENT_NOT_FOUND with
 * `details.reason = "timeout"` and `details.timeout` naming the limit, since an
 * agent that does not answer is, for the profile, unavailable):
 *  - `dial`: connect + protocol negotiation (DIAL_TIMEOUT_MS), made again when
 *    it timed out or found no address, DIAL_ATTEMPTS_MAX dials in all, while
 *    the call's budget lasts;
 *  - `response`: from writing the request to its whole response frame (RESPONSE_TIMEOUT_MS);
 *  - `call`: the whole call, dial included (CALL_TIMEOUT_MS).
 * A responder whose handler overruns HANDLER_TIMEOUT_MS answers TIMEOUT itself.
 */
import type { Libp2p, PeerId } from '@libp2p/interface'
import type { Logger } from '../logger.ts'
import type { Validator } from '../schema/validate.ts'
import type { HeldAnswers } from './held-answers.ts'

export { encodeFrame, FrameDecoder } from './framing.ts'
export { serve } from './responder.ts'
export { RpcClient } from './client.ts'

/** What a responder learns about a call: the authenticated peer, never a payload claim. */
export interface CallContext {
  /** The Noise-authenticated remote peer. */
  peer: PeerId
  /** Aborted when the stream closes or the handler overruns its time. */
  signal: AbortSignal
}

export interface RpcMethod {
  handle: (body: unknown, ctx: CallContext) => Promise<object>
  /**
   * Told, once per successful `handle`, whether its answer was handed to the
   * stream (`delivered`) or not (the stream was gone, or the handler overran
   * its time and the caller was already told TIMEOUT). A method that creates
   * state uses it to start work only once the caller has its answer, or to
   * undo what nobody will ever hear about.
   */
  settled?: (result: object, delivered: boolean) => void
}

/** A method whose request body is checked against its schema before `fn` sees it. */
export function method<Req, Res extends object> (
  request: Validator<Req>,
  fn: (req: Req, ctx: CallContext) => Promise<Res>,
  settled?: (result: Res, delivered: boolean) => void
): RpcMethod {
  const m: RpcMethod = { handle: async (body, ctx) => fn(request.assert(body, 'request body'), ctx) }
  if (settled !== undefined) m.settled = (result, delivered) => { settled(result as Res, delivered) }
  return m
}

export interface RpcProtocol {
  protocol: string
  maxFrameBytes: number
  methods: Record<string, RpcMethod>
  maxInboundStreams?: number
  maxOutboundStreams?: number
  handlerTimeoutMs?: number
  /** A frame that has started must be complete within this (default FRAME_COMPLETION_TIMEOUT_MS). */
  frameTimeoutMs?: number
  /** The logger of the service that answers (component `wire` of the process logger without one). */
  log?: Logger
  /** Told when a stream stops reading because its caller does not read the answers it has (tests, metrics). */
  onReadsHeld?: (peer: PeerId) => void
  /** The bound on unread answers this protocol shares (default: its node's, held-answers.ts). */
  heldAnswers?: HeldAnswers
}

export interface CallOptions {
  signal?: AbortSignal
  dialTimeoutMs?: number
  /** From the write of the request to its whole response frame. */
  responseTimeoutMs?: number
  /** The whole call, dial included. */
  callTimeoutMs?: number
}

/** Options of `RpcClient.call` that only code in this repository uses. */
export interface InternalCallOptions extends CallOptions {
  /**
   * Called with the body of a success answer that arrives after the call gave
   * up (timeout or abort), so the caller can clean up what the responder did.
   */
  onLateAnswer?: (body: Record<string, unknown>) => void
}

export type RpcHost = Pick<Libp2p, 'handle' | 'unhandle' | 'dialProtocol'>
