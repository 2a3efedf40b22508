/**
 * The local agent API: HTTP+JSON (and server-sent events) on loopback, for
 * the agent beside the node and for the aap-mesh CLI.
 *
 * Routes are generated from protocols/api.openapi.json: one per documented
 * operation, each validated with the document's schemas, each answered by the
 * handler of the same operationId below. A handler without an operation, or
 * an operation without a handler, stops the server from starting, so the
 * document and the server cannot drift apart.
 *
 * Close the server before stopping its node: closing ends the SSE streams and
 * releases their event subscriptions.
 */
import type { AddressInfo } from 'node:net'
import Fastify, { type FastifyBaseLogger, type FastifyInstance, type FastifyReply, type FastifyRequest } from 'fastify'
import pkg from '../../package.json' with { type: 'json' }
import { API_BODY_MAX_BYTES, API_CLOSE_TIMEOUT_MS, API_DEFAULT_HOST, API_DEFAULT_PORT, API_MAX_SSE_CLIENTS } from '../constants.ts'
import { parseCapability, type CardDraft } from '../card/card.ts'
import type { DiscoveryQuery } from '../card/discovery.ts'
import { InvalidRequestError, toAapError } from '../errors.ts'
import type { EventSubscription } from '../events/subscription.ts'
import { silentLogger, type Logger } from '../logger.ts'
import type { MeshNode } from '../node.ts'
import type { DelegateRequest } from '../runs/runtime.ts'
import type { Run } from '../runlog/types.ts'
import { WorkBridge } from './bridge.ts'
import { answerClientError, answerError, errorReply, HttpError, quotedPath, routerError } from './errors.ts'
import type { NodeMetrics } from './metrics.ts'
import { hostForUrl } from './own-host.ts'
import { bodyAjv, operations, paramAjv, type Operation } from './openapi.ts'
import { cardView, correlationHints, runListQuery, traceHeaders } from './query.ts'
import { SseStream, streamSlots, type SseLimits } from './sse.ts'
import type { Slots } from './slots.ts'
import { serveEventStream, type EventStreamCounts } from './event-stream.ts'
import type { A2aOutbound } from '../a2a/outbound.ts'
import { A2aApi } from '../a2a/api.ts'
import { UiRoutes } from './ui-routes.ts'
import { artifactHandlers, rawBodyScope } from './artifacts.ts'
import { API_ANSWER_IDLE_MS, API_CONNECTION_CHECK_MS, API_HEADERS_TIMEOUT_MS, API_MAX_CONNECTIONS, API_MAX_PARAM_CHARS, API_REPLAYS_CONCURRENT_MAX, API_REQUEST_TIMEOUT_MS } from './constants.ts'
import { checkAnswer, JsonAnswers, type Answer, type JsonHandler } from './answers.ts'
import { checkBearer, tokenDigest } from './bearer.ts'
import { watchClient, whileClientHere } from './client-gone.ts'
import { checkWebhook } from './webhook-url.ts'

export interface ApiServerOptions {
  /** The bearer token every request must carry. */
  token: string
  host?: string
  /** 0 picks a free port. Default API_DEFAULT_PORT. */
  port?: number
  logger?: Logger
  metrics?: NodeMetrics
  /** Streams (work and events together) open at once; default API_MAX_SSE_CLIENTS. */
  maxSseClients?: number
  sse?: SseLimits // keep-alive interval, slow-client and stall bounds of SSE streams (defaults in constants.ts; tests set them lower)
  /** Check every JSON answer against the document and answer 500 when one does not match (tests). */
  checkResponses?: boolean
  /** The longest a request may take to arrive, headers and body; default API_REQUEST_TIMEOUT_MS (tests set it lower). */
  requestTimeoutMs?: number
  /** Connections open at once; default API_MAX_CONNECTIONS (tests set it lower). */
  maxConnections?: number
  /** Replays and timelines at once; default API_REPLAYS_CONCURRENT_MAX. */
  maxReplays?: number
  /** An answer (JSON, a download) its client takes none of for this long is cut off; default API_ANSWER_IDLE_MS (tests set it lower). */
  answerIdleMs?: number
  /** Hand runs of the node's current card capabilities to the agent from the start (the sidecar of `aap-mesh start`). */
  serveCard?: boolean
  /** Called after each card the API published (e.g. to report its announcement). */
  onCardPublished?: (card: NonNullable<MeshNode['card']>) => void
  /** The node's bridged A2A agents (`start --a2a-agent`); made on first use of /v1/a2a/agents otherwise. */
  a2a?: A2aOutbound
}

export interface ApiStats {
  /** Open SSE streams. */
  streams: number
  /** Event subscriptions held for SSE streams (each closes with its stream). */
  eventSubscriptions: number
  workClients: number
  openRuns: number
  /** The most bytes any open SSE stream has written that its client has not taken yet. */
  sseBufferedBytes: number
  /** Event streams: waits for a client to read history, streams ended by a failed subscription. */
  eventStreams: EventStreamCounts
  /** Connections closed as they came because API_MAX_CONNECTIONS were open. */
  droppedConnections: number
  /** Times a work stream waited for its client to read its backlog. */
  workBacklogWaits: number
  /** Streams cut off because their client took none of their waiting output for API_SSE_STALL_MS. */
  stalledStreams: number
  /** Replays and timelines holding a slot (API_REPLAYS_CONCURRENT_MAX). */
  replays: number
  /** Answers and downloads cut off because their client took none of them for API_ANSWER_IDLE_MS. */
  idleAnswers: number
}

type StreamHandler = (req: FastifyRequest, reply: FastifyReply) => Promise<void>
type Handler = { json: JsonHandler } | { stream: StreamHandler }

declare module 'fastify' {
  interface FastifyContextConfig {
    operationId?: string
  }
}

/** Path parameters and query strings as the document's schemas have already checked them. */
type Params = Record<string, string>
interface ResumeBody { resolution: Record<string, unknown>, checkpoint_id?: string }
type Query = Record<string, unknown>

export class ApiServer {
  readonly node: MeshNode
  readonly bridge: WorkBridge
  /** The browser view: its page, login and the operations only it needs (ui-routes.ts). */
  readonly ui: UiRoutes
  private readonly app: FastifyInstance
  private readonly opts: ApiServerOptions
  private readonly tokenDigest: Buffer
  private readonly log: Logger
  private readonly streams = new Set<SseStream>()
  private readonly subscriptions = new Set<EventSubscription>()
  private readonly eventStreams: EventStreamCounts = { historyWaits: 0, failed: 0 }
  private readonly routeList: Array<{ method: string, url: string }> = []
  private readonly slots: Slots
  private readonly answers: JsonAnswers
  private droppedConnections = 0
  private workBacklogWaits = 0
  private stalledStreams = 0
  private workClients = 0
  private address?: string
  private closing?: Promise<void>
  private readonly a2a: A2aApi

  constructor (node: MeshNode, opts: ApiServerOptions) {
    this.node = node
    this.opts = opts
    this.log = opts.logger ?? silentLogger()
    this.tokenDigest = tokenDigest(opts.token)
    this.slots = streamSlots(opts.maxSseClients ?? API_MAX_SSE_CLIENTS)
    this.answers = new JsonAnswers({ checkResponses: opts.checkResponses === true, maxReplays: opts.maxReplays ?? API_REPLAYS_CONCURRENT_MAX, idleMs: opts.answerIdleMs ?? API_ANSWER_IDLE_MS, log: this.log.child({ component: 'api' }) })
    this.a2a = new A2aApi(node, this.log.child({ component: 'a2a' }), opts.a2a)
    this.bridge = new WorkBridge(node, this.log.child({ component: 'work' }))
    this.ui = new UiRoutes({ node, log: this.log.child({ component: 'ui' }), url: () => this.url, metrics: opts.metrics })
    // fastify logs every request at info: only worth it when debugging
    const verbose = this.log.level === 'debug' || this.log.level === 'trace'
    const apiLog: FastifyBaseLogger = this.log.child({ component: 'api' }, { level: verbose ? this.log.level : 'warn' })
    const requestTimeout = opts.requestTimeoutMs ?? API_REQUEST_TIMEOUT_MS
    this.app = Fastify({
      loggerInstance: apiLog,
      bodyLimit: API_BODY_MAX_BYTES,
      // a body that never finishes held its socket for good (fastify's default is no bound); SSE answers are not
      // bound by it (their requests have no body)
      requestTimeout,
      http: { connectionsCheckingInterval: Math.min(API_CONNECTION_CHECK_MS, requestTimeout), headersTimeout: Math.min(API_HEADERS_TIMEOUT_MS, requestTimeout) },
      // keep-alive sockets must not hold close() up
      forceCloseConnections: true,
      // the routes are exactly the documented operations: no implicit HEAD twins
      exposeHeadRoutes: false,
      // a run id may be long; the routes' own schemas bound every parameter
      routerOptions: { maxParamLength: API_MAX_PARAM_CHARS },
      // the router's own refusals (a malformed escape, a parameter past maxParamLength) come before any hook: they
      // answer as every other error does. Before the token check too, as they did: they quote only the request's path
      frameworkErrors: (err, req, reply) => { answerError(routerError(err, req.url), req, reply, this.opts.metrics, this.log) },
      clientErrorHandler: (err, socket) => { answerClientError(err, socket, this.opts.metrics, this.log) }
    })
    // first, before fastify's own listener can arm an answer's idle bound
    this.app.server.prependListener('request', (_req, res) => { this.answers.queued(res) })
    // past the bound a new connection is closed as it comes; said at the 1st, 2nd, 4th… drop, so a flood cannot flood the log
    this.app.server.maxConnections = opts.maxConnections ?? API_MAX_CONNECTIONS
    this.app.server.on('drop', () => {
      const n = ++this.droppedConnections
      if ((n & (n - 1)) === 0) this.log.warn({ dropped: n, max: this.app.server.maxConnections }, 'API connections at their bound: a new one was closed')
    })
    this.setup()
  }

  get url (): string {
    if (this.address === undefined) throw new Error('API server not listening')
    return this.address
  }

  /** Every route the server registered, as fastify saw it (for the drift test). */
  get routes (): ReadonlyArray<{ method: string, url: string }> {
    return this.routeList
  }

  stats (): ApiStats {
    let open = 0
    for (const s of this.subscriptions) if (!s.closed) open++
    let buffered = 0
    for (const s of this.streams) buffered = Math.max(buffered, s.buffered)
    return { streams: this.streams.size, eventSubscriptions: open, workClients: this.workClients, openRuns: this.bridge.stats.openRuns, sseBufferedBytes: buffered, eventStreams: { ...this.eventStreams }, droppedConnections: this.droppedConnections, workBacklogWaits: this.workBacklogWaits, stalledStreams: this.stalledStreams, replays: this.answers.replays, idleAnswers: this.answers.idleCut }
  }

  async listen (): Promise<string> {
    if (this.opts.serveCard === true) this.bridge.serve(this.a2a.forAgent(this.node.card?.capabilities ?? []))
    this.a2a.reclaim()
    const host = this.opts.host ?? API_DEFAULT_HOST
    await this.app.listen({ host, port: this.opts.port ?? API_DEFAULT_PORT })
    const addr = this.app.server.address() as AddressInfo
    this.address = `http://${hostForUrl(addr.address)}:${addr.port}`
    return this.address
  }

  /** End every stream (releasing its subscription), stop serving work, close the listener. */
  async close (): Promise<void> {
    this.closing ??= (async () => {
      for (const s of [...this.streams]) s.close()
      this.bridge.stop()
      const timeout = new Promise<void>(resolve => setTimeout(resolve, API_CLOSE_TIMEOUT_MS).unref())
      await Promise.race([this.app.close(), timeout])
    })()
    return this.closing
  }

  // ---- plumbing ------------------------------------------------------------------------------

  private setup (): void {
    const app = this.app
    app.addHook('onRoute', (r) => {
      for (const m of Array.isArray(r.method) ? r.method : [r.method]) this.routeList.push({ method: String(m), url: r.url ?? '' })
    })
    app.setValidatorCompiler(({ schema, httpPart }) => (httpPart === 'body' ? bodyAjv : paramAjv).compile(schema))
    // only JSON bodies: a text/plain body is refused with 415 instead of reaching a schema as a string
    app.removeContentTypeParser(['text/plain'])

    app.addHook('onRequest', async (req, reply) => {
      if (!this.ui.authorize(req)) checkBearer(req.headers.authorization, this.tokenDigest, reply)
    })

    app.setErrorHandler((err, req, reply) => { answerError(err, req, reply, this.opts.metrics, this.log) })

    // an answer going out (JSON, a download; not an SSE stream, which is hijacked and has its own stall bound) that
    // its client takes none of is cut off
    app.addHook('onSend', async (_req, reply, payload) => {
      this.answers.idle(reply.raw)
      return payload
    })

    app.setNotFoundHandler((req, reply) => {
      const { status, body } = errorReply(new HttpError(404, 'INVALID_REQUEST', `no route ${req.method} ${quotedPath(req.url)} (see protocols/api.openapi.json)`, { reason: 'no_route' }))
      void reply.code(status).send(body)
    })

    if (this.opts.checkResponses === true) {
      app.addHook('preSerialization', async (req, reply, payload) => {
        const op = req.routeOptions.config.operationId
        if (op !== undefined) checkAnswer(op, reply.statusCode, payload)
        return payload
      })
    }

    const handlers: Record<string, Handler> = { ...this.handlers(), ...this.ui.handlers(), ...artifactHandlers(this.node) }
    const documented = new Set(operations.map(o => o.operationId))
    for (const id of Object.keys(handlers)) {
      if (!documented.has(id)) throw new Error(`API handler ${id} has no operation in protocols/api.openapi.json`)
    }
    for (const op of operations) {
      const handler = handlers[op.operationId]
      if (handler === undefined) throw new Error(`operation ${op.operationId} of protocols/api.openapi.json has no handler`)
      this.route(op, handler)
    }
    this.ui.register(app)
  }

  private route (op: Operation, handler: Handler): void {
    // a body of raw bytes reaches its handler unread (req.raw), so the handler can stream it
    if (op.rawBody) rawBodyScope(this.app, (scope) => { this.routeIn(scope, op, handler) })
    else this.routeIn(this.app, op, handler)
  }

  private routeIn (app: FastifyInstance, op: Operation, handler: Handler): void {
    app.route({
      method: op.method.toUpperCase() as 'GET',
      url: op.route,
      schema: op.schema,
      config: { operationId: op.operationId },
      preValidation: async (req) => {
        if (op.schema.body === undefined || req.body !== undefined) return
        if (op.bodyRequired) throw new InvalidRequestError(`${op.method.toUpperCase()} ${op.path} needs a JSON body`, { reason: 'no_body' })
        req.body = {}
      },
      handler: 'json' in handler
        ? async (req, reply) => this.answers.answer(op.operationId, handler.json, req, reply)
        : async (req, reply) => { await handler.stream(req, reply) }
    })
  }

  private openStream (reply: FastifyReply, kind: 'work' | 'events', release: () => void): SseStream {
    reply.hijack()
    const sse = new SseStream(reply.raw, this.opts.sse)
    this.streams.add(sse)
    this.opts.metrics?.sseClients.inc({ stream: kind })
    // a stream the view opened ends with the view's session
    const unwatch = this.ui.watchStream(reply.request.raw, () => { sse.close() })
    sse.onClose(() => {
      unwatch()
      this.streams.delete(sse)
      release()
      this.opts.metrics?.sseClients.dec({ stream: kind })
      if (sse.stalled) {
        this.stalledStreams++
        this.log.warn({ stream: kind }, 'an SSE client took nothing of its stream for API_SSE_STALL_MS: cut off, its slot released')
      }
    })
    return sse
  }

  private async publishCard (draft: CardDraft): Promise<NonNullable<MeshNode['card']>> {
    const card = await this.node.publishCard(draft)
    this.opts.onCardPublished?.(card)
    return card
  }

  private cardState (addresses = false): unknown {
    const card = this.node.card
    return { agent_id: this.node.agentId, card: card === undefined ? null : cardView(card, addresses), webhook: this.bridge.webhook, serving: this.bridge.served }
  }

  // ---- operations ----------------------------------------------------------------------------

  private handlers (): Record<string, Handler> {
    const node = this.node
    const bridge = this.bridge
    const runId = (req: FastifyRequest): string => (req.params as Params).run_id ?? ''
    const body = <T>(req: FastifyRequest): T => req.body as T
    const run = (r: Run): Answer => ({ body: { run: r } })

    return {
      getNode: {
        // listen addresses are for operators (bootstrap lists), on request only: L2 sees no transport
        json: async (req) => ({ body: { agent_id: node.agentId, version: pkg.version, ...((req.query as Query).addresses === true ? { addresses: node.addresses } : {}), peers: node.host.getPeers().length } })
      },

      getCard: { json: async (req) => ({ body: this.cardState((req.query as Query).addresses === true) }) },

      listA2aAgents: { json: async () => ({ body: { agents: this.a2a.describe() } }) },

      addA2aAgent: {
        json: async (req) => {
          const added = await this.a2a.add(body<{ url: string }>(req).url, async (draft) => this.publishCard(draft))
          // the local agent is no longer handed runs of the capabilities an A2A agent now serves
          if (bridge.served.length > 0) bridge.serve(this.a2a.forAgent(bridge.served))
          this.a2a.reclaim()
          return { body: added }
        }
      },

      putCard: {
        json: async (req) => {
          const reg = body<{ card: CardDraft, webhook?: string | null }>(req)
          if (typeof reg.webhook === 'string') checkWebhook(reg.webhook) // refused before the card is published
          const draft: CardDraft = { name: reg.card.name }
          if (reg.card.description !== undefined) draft.description = reg.card.description
          if (reg.card.capabilities !== undefined) draft.capabilities = reg.card.capabilities
          if (reg.card.tags !== undefined) draft.tags = reg.card.tags
          await this.publishCard(await this.a2a.withA2a(draft))
          bridge.serve(this.a2a.forAgent(node.card?.capabilities ?? []))
          this.a2a.reclaim()
          if (reg.webhook !== undefined) bridge.setWebhook(reg.webhook)
          this.log.info({ capabilities: bridge.served.length, webhook: bridge.webhook !== null }, 'agent registered its card')
          return { body: this.cardState() }
        }
      },

      workStream: {
        stream: async (req, reply) => {
          const release = this.slots.take()
          const last = req.headers['last-event-id']
          const sse = this.openStream(reply, 'work', release)
          this.workClients++
          const detach = bridge.stream(sse, typeof last === 'string' ? Number(last) : 0, () => { this.workBacklogWaits++ })
          sse.onClose(() => {
            detach()
            this.workClients--
          })
        }
      },

      discover: {
        json: async (req) => {
          const q = req.query as Query
          const query: DiscoveryQuery = {}
          if (typeof q.capability === 'string') query.capability = parseCapability(q.capability)
          const tags = Array.isArray(q.tag) ? q.tag.filter((t): t is string => typeof t === 'string') : []
          if (tags.length > 0) query.tags = tags
          if (query.capability === undefined && query.tags === undefined) throw new InvalidRequestError('discover needs a capability and/or a tag', { reason: 'empty_query' })
          const cards = await whileClientHere(req.raw, async (signal) => node.discover(query, {
            ...(typeof q.limit === 'number' ? { limit: q.limit } : {}),
            ...(typeof q.timeout_ms === 'number' ? { timeoutMs: q.timeout_ms } : {}),
            fresh: q.fresh === true,
            includeSelf: q.include_self === true,
            signal
          }))
          return { body: { cards: cards.map(c => cardView(c, q.addresses === true)) } }
        }
      },

      delegate: {
        json: async (req) => {
          const r = body<DelegateRequest>(req)
          const { trace, ignored } = traceHeaders(req)
          if (ignored !== undefined) this.log.info({ reason: ignored }, 'a traceparent header that does not parse was set aside (W3C processing model)')
          // a client that gives up (its connection ends) before the handle is here: the run made late is canceled
          const client = watchClient(req.raw)
          try {
            const created = await node.delegate(trace === undefined ? r : { ...r, trace }, { signal: client.signal })
            this.opts.metrics?.delegations.inc({ outcome: 'ok' })
            this.log.info({ run_id: created.run_id, to: r.to_agent, task_id: r.task_id }, 'delegated')
            return { status: 202, body: { run: created } }
          } catch (err) {
            this.opts.metrics?.delegations.inc({ outcome: toAapError(err).code })
            throw err
          } finally {
            client.done()
          }
        }
      },

      listRuns: {
        json: async (req) => {
          const { filter, page } = runListQuery(req.query as Query)
          return { body: await node.runs.list(filter, page) }
        }
      },

      getRun: { json: async (req) => run(await node.getRun(runId(req))) },

      progress: { json: async (req) => run(await bridge.progress(runId(req), body<{ payload: Record<string, unknown> }>(req).payload)) },

      saveContext: { json: async (req) => ({ body: await bridge.saveContext(runId(req), body<{ context: Record<string, unknown> }>(req).context) }) },

      block: {
        json: async (req) => {
          const b = body<{ reason: string, checkpoint_id: string }>(req)
          return run(await node.block(runId(req), b.reason, b.checkpoint_id))
        }
      },

      // checkpoint_id, when given, is the checkpoint the resolution answers: the executor refuses it for any other one
      resume: { json: async (req) => run(await node.resume(runId(req), body<ResumeBody>(req).resolution, { checkpointId: body<ResumeBody>(req).checkpoint_id })) },

      complete: { json: async (req) => run(await bridge.complete(runId(req), body<{ output: Record<string, unknown> }>(req).output)) },

      fail: { json: async (req) => run(await bridge.fail(runId(req), body<{ message: string }>(req).message)) },

      cancel: { json: async (req) => run(await node.cancel(runId(req), body<{ reason?: string }>(req).reason)) },

      handoff: {
        json: async (req) => {
          const b = body<{ to_agent: string, context?: Record<string, unknown> }>(req)
          return run(await node.handoff(runId(req), b.to_agent, b.context ?? {}))
        }
      },

      eventStream: {
        stream: async (req, reply) => serveEventStream({
          node,
          reserve: () => this.slots.take(),
          open: (r, release) => this.openStream(r, 'events', release),
          subscriptions: this.subscriptions,
          log: this.log.child({ component: 'api' }),
          counts: this.eventStreams
        }, (req.params as Params).correlation_id ?? '', req.query as Query, reply)
      },

      replay: {
        json: async (req) => {
          const correlation = (req.params as Params).correlation_id ?? ''
          const q = req.query as Query
          // a client that gives up (an MCP call canceled) ends the replay at once: its slot is not held until timeout_ms
          return {
            large: true,
            body: await whileClientHere(req.raw, async (signal) => node.events.replay(correlation, {
              ...correlationHints(q),
              ...(typeof q.timeout_ms === 'number' ? { timeoutMs: q.timeout_ms } : {}),
              signal
            }))
          }
        }
      }
    }
  }
}

/** Create the API server of a started node and listen. */
export async function startApiServer (node: MeshNode, opts: ApiServerOptions): Promise<ApiServer> {
  const server = new ApiServer(node, opts)
  try {
    await server.listen()
  } catch (err) {
    await server.close().catch((closeErr: unknown) => {
      // the listen failure is what the caller hears; the failed close is said here
      opts.logger?.warn({ err: closeErr }, 'closing an API server that failed to listen failed')
    })
    throw err
  }
  return server
}

