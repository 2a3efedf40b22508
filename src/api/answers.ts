/**
 * How the API sends what it answers (besides SSE streams, sse.ts):
 *
 * - a large JSON answer (a replay, the view's timeline) is made into text a
 *   slice per turn (API_JSON_BYTES_PER_TURN), and checked against the
 *   document when the server checks its answers (tests);
 * - replays and timelines take a slot each (API_REPLAYS_CONCURRENT_MAX,
 *   together) while they are made and sent: each may hold up to
 *   REPLAY_MAX_BYTES of events; past the bound, 429 (reason
 *   `too_many_replays`);
 * - an answer or a download its client takes none of for API_ANSWER_IDLE_MS
 *   is cut off with its socket (idle()); a pipelined answer queued behind
 *   it is not (queued()).
 */
import type { ServerResponse } from 'node:http'
import type { FastifyReply, FastifyRequest } from 'fastify'
import type { Logger } from '../logger.ts'
import { jsonInTurns } from '../util/json-in-turns.ts'
import { API_JSON_BYTES_PER_TURN } from './constants.ts'
import { HttpError } from './errors.ts'
import { responseValidator } from './openapi.ts'
import { Slots } from './slots.ts'

/** `large`: the body may be megabytes (a replay): its JSON is made a slice per turn (API_JSON_BYTES_PER_TURN). */
export interface Answer { status?: number, body: unknown, large?: true }
export type JsonHandler = (req: FastifyRequest) => Promise<Answer>

/** The operations that may read up to REPLAY_MAX_BYTES of events each: they share the replay slots. */
export const REPLAY_OPERATIONS: ReadonlySet<string> = new Set(['replay', 'timeline'])

export interface JsonAnswersOptions {
  /** Check every JSON answer against the document (tests). */
  checkResponses: boolean
  /** Replays and timelines at once (API_REPLAYS_CONCURRENT_MAX). */
  maxReplays: number
  /** An answer its client takes none of for this long is cut off (API_ANSWER_IDLE_MS). */
  idleMs: number
  log: Logger
}

export class JsonAnswers {
  private readonly opts: JsonAnswersOptions
  /**
   * A replay or timeline's slot is given back once the handler is done and
   * its response is closed (sent, or its client gone): the answer's text
   * stays in memory until its socket took it.
   */
  private readonly replaySlots: Slots
  private cut = 0

  constructor (opts: JsonAnswersOptions) {
    this.opts = opts
    this.replaySlots = new Slots(opts.maxReplays, (limit) => new HttpError(429, 'INVALID_REQUEST', `too many replays and timelines at once (limit ${limit}); retry when one has ended`, { reason: 'too_many_replays', limit }))
  }

  /** Replays and timelines holding a slot. */
  get replays (): number {
    return this.replaySlots.taken
  }

  /** Answers and downloads cut off because their client took none of them for the idle bound. */
  get idleCut (): number {
    return this.cut
  }

  /** Answer `op` with `handler`'s answer (in a replay slot for a replay or a timeline). */
  async answer (op: string, handler: JsonHandler, req: FastifyRequest, reply: FastifyReply): Promise<unknown> {
    const release = REPLAY_OPERATIONS.has(op) ? this.replaySlots.take(reply.raw) : undefined
    try {
      const answer = await handler(req)
      void reply.code(answer.status ?? 200)
      if (answer.large !== true) return answer.body
      // sent as text, so preSerialization (the documented-schema check) does not see it: checked here
      if (this.opts.checkResponses) checkAnswer(op, reply.statusCode, answer.body)
      const text = await jsonInTurns(answer.body, API_JSON_BYTES_PER_TURN)
      return await reply.type('application/json; charset=utf-8').send(text)
    } finally {
      release?.()
    }
  }

  /**
   * Call for every response as it is made (before idle() or an SSE stream
   * arms its own bound). One queued behind another on its connection (HTTP
   * pipelining) takes the socket as the one before left it: with that one's
   * idle bound armed. Its handler may take longer (a replay that reads, a
   * delegation), and the socket was destroyed under it: the timeout found no
   * listener on it, so Node destroyed the socket. The bound is taken off as
   * it takes the socket (the server has none of its own: fastify's
   * connectionTimeout is 0); its own answer arms it again.
   */
  queued (res: ServerResponse): void {
    if (res.socket !== null) return
    res.once('socket', (socket) => { socket.setTimeout(0) })
  }

  /**
   * Cut `res` off, socket and all, once its client has taken none of it for
   * the idle bound (the socket's inactivity timeout; each write it takes, even
   * in part, puts it off). Node sets its own keep-alive timeout on the socket
   * when the answer is done.
   */
  idle (res: ServerResponse): void {
    res.setTimeout(this.opts.idleMs, () => {
      const n = ++this.cut
      // said at the 1st, 2nd, 4th… cut, so clients that never read cannot flood the log
      if ((n & (n - 1)) === 0) this.opts.log.warn({ cut: n, waiting: res.writableLength }, 'an API client took nothing of its answer for API_ANSWER_IDLE_MS: its connection was closed')
      res.destroy()
    })
  }
}

/** Throw INTERNAL when `payload` breaks the schema documented for `op`'s `status` answer (tests' response checks). */
export function checkAnswer (op: string, status: number, payload: unknown): void {
  const check = responseValidator(op, status)
  if (check !== undefined && check(payload) !== true) {
    const first = check.errors?.[0]
    throw new HttpError(500, 'INTERNAL', `answer of ${op} (${status}) breaks the documented schema at ${first?.instancePath ?? ''}: ${first?.message ?? ''}`)
  }
}
