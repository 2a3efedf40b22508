/**
 * The inbound A2A v1.0 server of a node (`aap-mesh start --a2a-port`): every
 * agent of the mesh is an A2A agent below `/a2a/agents/<agent id>/`:
 *
 *   .well-known/agent-card.json   its A2A card, derived from its verified mesh card
 *   jsonrpc                       the JSON-RPC 2.0 binding
 *   rest                          the HTTP+JSON binding
 *
 * and `/.well-known/agent-card.json` is the card of the node's own agent.
 * Bindings, validation, SSE and the JSON-RPC error envelopes are the
 * official @a2a-js/sdk's; the mesh side is agent-handler.ts. Who may call
 * it (a bearer token beyond loopback) and how an agent that cannot be served
 * is refused: server-access.ts.
 */
import { once } from 'node:events'
import type { AddressInfo } from 'node:net'
import type { Server } from 'node:http'
import type { Datastore } from 'interface-datastore'
import express, { type NextFunction, type Request, type Response, type Router } from 'express'
import { agentCardHandler, jsonRpcHandler, restHandler } from '@a2a-js/sdk/server/express'
import { A2A_ERROR_CODE, RequestMalformedError, toRestErrorBody } from '@a2a-js/sdk/errors'
import type { Logger } from '../logger.ts'
import type { MeshNode } from '../node.ts'
import { AgentNotFoundError, DelegationRefusedError } from '../errors.ts'
import type { AgentCard as MeshCard } from '../card/card.ts'
import {
  A2A_AGENT_HANDLERS_MAX, A2A_AGENTS_PATH, A2A_BODY_MAX_BYTES, A2A_CARD_LOOKUPS_MAX, A2A_INPUT_WATCHES_MAX, A2A_SUBSCRIBERS_MAX_PER_TASK, A2A_MAX_UNREAD_BYTES, A2A_CARD_REFRESH_MS, A2A_CARD_RESOLVE_TIMEOUT_MS, A2A_DEFAULT_HOST, A2A_JSONRPC_SUBPATH, A2A_REST_SUBPATH,
  A2A_SERVER_MAX_CONNECTIONS, A2A_STREAMS_MAX, A2A_TASKS_MAX_BYTES, A2A_TASKS_MAX_BYTES_PER_AGENT, A2A_TASKS_MAX_PER_AGENT, A2A_BUSY_RETRIES_MAX
} from './constants.ts'
import { gatewayTotals } from './stats.ts'
import { MeshAgentHandler, type MeshAgentHandlerOptions } from './agent-handler.ts'
import { meshToA2aCard } from './mapping.ts'
import { BearerGate, isJsonRpcPost, jsonRpcId, readJsonRpcBody, refuse } from './server-access.ts'
import { ClientUser, StreamBudget } from './streams.ts'
import { WatchBudget } from './task-runs.ts'
import { TaskBytesPool } from './task-store.ts'
import { TaskRecords, type TaskRecordStats } from './task-records.ts'

const AGENT_ID = /^[1-9A-HJ-NP-Za-km-z]{32,128}$/
const CARD_PATH = '/.well-known/agent-card.json'

/** The 4xx status an error carries (the body parser's have `status` and `type`); undefined for a server fault. */
function clientErrorStatus (err: unknown): number | undefined {
  if (typeof err !== 'object' || err === null) return undefined
  const e = err as { status?: unknown, statusCode?: unknown }
  const status = typeof e.status === 'number' ? e.status : e.statusCode
  return typeof status === 'number' && Number.isInteger(status) && status >= 400 && status < 500 ? status : undefined
}

export interface A2aServerOptions {
  host?: string
  /** 0: any free port */
  port: number
  logger: Logger
  /** Age past which an agent's mesh card is resolved again on its next request (default A2A_CARD_REFRESH_MS). */
  cardRefreshMs?: number
  /** Agents served at once (default A2A_AGENT_HANDLERS_MAX). */
  maxAgents?: number
  /** Unread output past which a client is cut off (default A2A_MAX_UNREAD_BYTES). */
  maxUnreadBytes?: number
  /** Tasks waiting for input whose runs are watched, all agents together (default A2A_INPUT_WATCHES_MAX). */
  maxInputWatches?: number
  /** SubscribeToTask streams open at once on one task (default A2A_SUBSCRIBERS_MAX_PER_TASK). */
  maxSubscribersPerTask?: number
  /** Streams open at once, all agents together (default A2A_STREAMS_MAX). */
  maxStreams?: number
  /** Connections the HTTP server takes at once (default A2A_SERVER_MAX_CONNECTIONS). */
  maxConnections?: number
  /** Tasks kept per agent (default A2A_TASKS_MAX_PER_AGENT). */
  maxTasksPerAgent?: number
  /** Bytes of tasks kept per agent (default A2A_TASKS_MAX_BYTES_PER_AGENT). */
  maxTaskBytesPerAgent?: number
  /** Bytes of tasks kept, all agents together (default A2A_TASKS_MAX_BYTES). */
  maxTaskBytes?: number
  /**
   * Where the tasks are kept across restarts (default: a LevelDB in A2A_TASK_RECORDS_DIR of the node's data
   * directory, opened and closed by the server; a node with none keeps them in memory only).
   */
  taskDatastore?: Datastore
  /** Tries again of a run's subscription refused for a busy correlation (default A2A_BUSY_RETRIES_MAX: task-runs.ts). */
  busyRetriesMax?: number
  /**
   * The token every request must carry as `Authorization: Bearer <token>` (server-access.ts); the cards served then
   * declare the bearer scheme. Needed on a host beyond loopback (the server does not start without it there); on
   * loopback the server is open unless one is given.
   */
  token?: string
}

/**
 * The caller of a request, carrying the signal of its response closing: a
 * stream waiting on a task's bus ends with its client (streams.ts).
 */
async function clientUser (req: Request): Promise<ClientUser> {
  const gone = new AbortController()
  const res = req.res
  if (res === undefined || res.closed) gone.abort()
  else res.once('close', () => { gone.abort() })
  return new ClientUser(gone.signal)
}

interface Entry {
  handler: MeshAgentHandler
  router: Router
  /** When the mesh card was last resolved. */
  resolvedAt: number
  refreshing?: Promise<void>
}

export class A2aServer {
  readonly url: string
  private readonly node: MeshNode
  private readonly log: Logger
  private readonly server: Server
  /** Card lookups under way for agents not served yet (they hold no place among the agents served). */
  private readonly pending = new Map<string, Promise<Entry>>()
  /** The agents served, least recently used first. */
  private readonly entries = new Map<string, Entry>()
  private closed = false
  private readonly refreshMs: number
  private readonly maxAgents: number
  private readonly maxUnread: number
  private readonly handlerOpts: MeshAgentHandlerOptions
  /** The bearer check, when the server was given a token. */
  private readonly gate: BearerGate | undefined
  /** Entries dropped to make room for another agent (their open tasks' runs canceled); clients cut off for not reading; connections closed past maxConnections. */
  readonly stats = { evicted: 0, cutOff: 0, dropped: 0 }

  private constructor (node: MeshNode, log: Logger, server: Server, url: string, refreshMs: number, maxAgents: number, maxUnread: number, handlerOpts: MeshAgentHandlerOptions, gate: BearerGate | undefined) {
    this.handlerOpts = handlerOpts
    this.gate = gate
    this.refreshMs = refreshMs
    this.maxAgents = maxAgents
    this.maxUnread = maxUnread
    this.node = node
    this.log = log
    this.server = server
    this.url = url
    // the node's A2A gateway counters show (at zero) from the server's start on (src/api/metrics.ts)
    gatewayTotals(node)
  }

  static async start (node: MeshNode, opts: A2aServerOptions): Promise<A2aServer> {
    const dataDir = node.options.dataDir
    const records = opts.taskDatastore !== undefined
      ? new TaskRecords(opts.taskDatastore, opts.logger)
      : dataDir === undefined ? undefined : await TaskRecords.open(dataDir, opts.logger)
    try {
      return await A2aServer.listen(node, opts, records)
    } catch (err) {
      await records?.close()
      throw err
    }
  }

  private static async listen (node: MeshNode, opts: A2aServerOptions, records: TaskRecords | undefined): Promise<A2aServer> {
    const app = express()
    app.disable('x-powered-by')
    const host = opts.host ?? A2A_DEFAULT_HOST
    const gate = BearerGate.forHost(host, opts.token)
    const server = app.listen(opts.port, host)
    server.maxConnections = opts.maxConnections ?? A2A_SERVER_MAX_CONNECTIONS
    await Promise.race([once(server, 'listening'), once(server, 'error').then(([err]) => { throw err })])
    const { port } = server.address() as AddressInfo
    const a2a = new A2aServer(node, opts.logger, server, `http://${host.includes(':') ? `[${host}]` : host}:${port}`, opts.cardRefreshMs ?? A2A_CARD_REFRESH_MS, opts.maxAgents ?? A2A_AGENT_HANDLERS_MAX, opts.maxUnreadBytes ?? A2A_MAX_UNREAD_BYTES, {
      watches: new WatchBudget(opts.maxInputWatches ?? A2A_INPUT_WATCHES_MAX),
      maxSubscribersPerTask: opts.maxSubscribersPerTask ?? A2A_SUBSCRIBERS_MAX_PER_TASK,
      streams: new StreamBudget(opts.maxStreams ?? A2A_STREAMS_MAX),
      maxTasks: opts.maxTasksPerAgent ?? A2A_TASKS_MAX_PER_AGENT,
      maxTaskBytes: opts.maxTaskBytesPerAgent ?? A2A_TASKS_MAX_BYTES_PER_AGENT,
      taskBytes: new TaskBytesPool(opts.maxTaskBytes ?? A2A_TASKS_MAX_BYTES),
      busyRetriesMax: opts.busyRetriesMax ?? A2A_BUSY_RETRIES_MAX,
      ...(records === undefined ? {} : { records })
    }, gate)
    server.on('drop', () => { a2a.dropped() })
    a2a.routes(app)
    return a2a
  }

  /** A connection closed at once past maxConnections: counted, and logged at the 1st, 2nd, 4th, 8th... */
  private dropped (): void {
    const n = ++this.stats.dropped
    if ((n & (n - 1)) === 0) this.log.warn({ dropped: this.stats.dropped, limit: this.server.maxConnections }, 'a2a: the server has as many connections as it takes; a new one was closed')
  }

  /** Streams open now, all agents together, and those refused past the bound. */
  get streams (): { open: number, refused: number } {
    const b = this.handlerOpts.streams
    return { open: b?.open ?? 0, refused: b?.refused ?? 0 }
  }

  /** What the task records wrote, loaded and skipped; undefined when the tasks are kept in memory only. */
  get taskRecords (): TaskRecordStats | undefined {
    return this.handlerOpts.records?.stats
  }

  /** Base URL of a mesh agent's A2A endpoints. */
  agentUrl (agentId: string): string {
    return `${this.url}${A2A_AGENTS_PATH}/${agentId}`
  }

  /** What to give an A2A SDK client's `createFromUrl`: the agent's base URL with its trailing slash (the card path resolves against it). */
  clientUrl (agentId: string): string {
    return this.agentUrl(agentId) + '/'
  }

  /** The card URL an A2A client resolves for a mesh agent. */
  agentCardUrl (agentId: string): string {
    return this.agentUrl(agentId) + CARD_PATH
  }

  /**
   * Stop serving. The tasks keep their records (a node with a data
   * directory), and the next server loads them; the runs of open ones are
   * left as they are (protocols/a2a.md, "restarts"). A new task whose run
   * started and which was not kept yet has its run canceled (agent-handler.ts).
   */
  async close (): Promise<void> {
    this.closed = true
    const handlers = [...this.entries.values()].map(e => e.handler)
    this.entries.clear()
    const closed = once(this.server, 'close')
    const done = Promise.all(handlers.map(async h => { await h.close() }))
    this.server.close()
    await done
    this.server.closeAllConnections()
    await closed
    await this.handlerOpts.records?.close()
  }

  private routes (app: express.Express): void {
    // before anything else: a request without the token is answered 401, its body unread and its agent not looked up
    if (this.gate !== undefined) app.use(this.gate.check)
    app.get(CARD_PATH, (req, res, next) => {
      const own = this.node.card
      if (own === undefined) {
        refuse(req, res, new AgentNotFoundError('this node\'s agent has no card yet', { reason: 'no_card' }))
        return
      }
      this.entry(own.agent_id).then(e => { req.url = CARD_PATH; e.router(req, res, next) }, (err: unknown) => { refuse(req, res, err) })
    })
    app.use(`${A2A_AGENTS_PATH}/:agentId`, (req: Request<{ agentId: string }>, res, next) => {
      // a body declared past the bound is refused before the agent is looked up or the body read (one sent
      // without a length is cut off at the same bound by the SDK's parser, and refused as below)
      if (Number(req.headers['content-length'] ?? 0) > A2A_BODY_MAX_BYTES) {
        this.refuseBody(req, res, 413, `the request body is over A2A_BODY_MAX_BYTES (${A2A_BODY_MAX_BYTES} bytes)`)
        return
      }
      next()
    }, readJsonRpcBody(), (req: Request<{ agentId: string }>, res: Response, next: NextFunction) => {
      // a JSON-RPC request's body is read first, so a refusal echoes its id
      const agentId = req.params.agentId
      const entry = AGENT_ID.test(agentId) ? this.entry(agentId) : Promise.reject(new AgentNotFoundError('not an agent id'))
      entry.then(e => {
        this.boundUnread(res)
        e.router(req, res, next)
      }, (err: unknown) => { refuse(req, res, err) })
    })
    app.use((err: unknown, req: Request, res: Response, _next: NextFunction) => {
      const status = clientErrorStatus(err)
      if (status !== undefined) {
        // the body parser's refusals (a body past A2A_BODY_MAX_BYTES, a charset or encoding it does not take, a
        // body cut short) are the client's doing, not a fault of the server
        const type = (err as { type?: unknown }).type
        this.log.debug({ err: (err as Error).message, type, path: req.path, status }, 'a2a: request body refused')
        this.refuseBody(req, res, status, type === 'entity.too.large' ? `the request body is over A2A_BODY_MAX_BYTES (${A2A_BODY_MAX_BYTES} bytes)` : (err as Error).message)
        return
      }
      this.log.warn({ err: (err as Error).message, path: req.path }, 'a2a: request failed')
      if (res.headersSent) res.end()
      else if (isJsonRpcPost(req)) res.status(500).json({ jsonrpc: '2.0', id: jsonRpcId(req.body), error: { code: A2A_ERROR_CODE.INTERNAL_ERROR, message: 'internal error' } })
      else res.status(500).json(toRestErrorBody(new Error('internal error'), 500))
    })
  }

  /**
   * A request body refused with a 4xx status: on the JSON-RPC binding a JSON-RPC envelope (invalid request), on
   * the others the SDK's REST error body. The path is the full one here (the agent's prefix is not stripped).
   */
  private refuseBody (req: Request, res: Response, status: number, message: string): void {
    if (res.headersSent) {
      res.end()
      return
    }
    if (isJsonRpcPost(req)) {
      res.status(status).json({ jsonrpc: '2.0', id: null, error: { code: A2A_ERROR_CODE.INVALID_REQUEST, message } })
      return
    }
    res.status(status).json(toRestErrorBody(new RequestMalformedError(message), status))
  }

  /**
   * The SDK writes a stream's events with no regard for whether its client
   * reads them: past A2A_MAX_UNREAD_BYTES unread, the client is cut off and
   * later writes go nowhere (the SDK's loop ends with the task's events).
   */
  private boundUnread (res: Response): void {
    const write = res.write.bind(res) as (...args: unknown[]) => boolean
    let cut = false
    res.write = ((...args: unknown[]): boolean => {
      if (cut) return false
      if (res.writableLength > this.maxUnread) {
        cut = true
        this.stats.cutOff++
        this.log.warn({ unread: res.writableLength, limit: this.maxUnread }, 'a2a: a client stopped reading its stream: cut off')
        res.destroy()
        return false
      }
      return write(...args)
    }) as typeof res.write
  }

  /**
   * The handler of a mesh agent, made on first use from its verified card
   * (bounded, least recently used dropped). Room is made only once the
   * card resolved: a lookup that fails (a made-up agent id) pushes no agent
   * out, and lookups under way are bounded apart (A2A_CARD_LOOKUPS_MAX).
   */
  private async entry (agentId: string): Promise<Entry> {
    const have = this.entries.get(agentId)
    if (have !== undefined) {
      this.entries.delete(agentId)
      this.entries.set(agentId, have)
      if (Date.now() - have.resolvedAt >= this.refreshMs) {
        have.refreshing ??= this.refresh(agentId, have).finally(() => { delete have.refreshing })
        await have.refreshing
      }
      return have
    }
    const under = this.pending.get(agentId)
    if (under !== undefined) return await under
    if (this.pending.size >= A2A_CARD_LOOKUPS_MAX) {
      throw new DelegationRefusedError(`this server looks up ${A2A_CARD_LOOKUPS_MAX} agents' cards already`, { reason: 'capacity', limit: A2A_CARD_LOOKUPS_MAX, bound: 'A2A_CARD_LOOKUPS_MAX' })
    }
    const made = this.meshCard(agentId).then(meshCard => this.admit(agentId, meshCard)).finally(() => { this.pending.delete(agentId) })
    this.pending.set(agentId, made)
    return await made
  }

  /** A resolved agent joins those served, made room for first (in the same turn, so the bound holds). */
  private admit (agentId: string, meshCard: MeshCard): Entry {
    if (this.closed) throw new DelegationRefusedError('this A2A server is closing', { reason: 'closing' })
    const have = this.entries.get(agentId)
    if (have !== undefined) return have
    if (this.entries.size >= this.maxAgents && !this.evictIdle()) {
      throw new DelegationRefusedError(`this server serves ${this.maxAgents} agents with open tasks already`, { reason: 'capacity', limit: this.maxAgents })
    }
    const e = this.makeEntry(agentId, meshCard)
    this.entries.set(agentId, e)
    return e
  }

  /**
   * Make room for one more agent: drop the least recently used entry with no
   * open task, else the least recently used one whose open tasks only wait
   * for input (a client may never come back for them: their runs are
   * canceled, as no client could reach them again); never one with work
   * under way (a task followed, a SendMessage in progress), nor this node's
   * own agent. False when none can go: a client reading other agents' cards
   * does not push out work another client has under way.
   */
  private evictIdle (): boolean {
    const own = this.node.card?.agent_id
    let waiting: string | undefined
    for (const [id, e] of this.entries) {
      if (id === own || e.handler.following > 0 || e.handler.sending > 0) continue
      if (e.handler.store.open === 0) return this.evict(id, e)
      waiting ??= id
    }
    return waiting !== undefined && this.evict(waiting, this.entries.get(waiting) as Entry)
  }

  private evict (id: string, e: Entry): true {
    this.entries.delete(id)
    this.stats.evicted++
    const open = e.handler.store.open
    if (open > 0) this.log.warn({ agent_id: id, open_tasks: open, limit: this.maxAgents }, 'a2a: an agent served no more to make room for another: the runs of its tasks waiting for input are canceled')
    void e.handler.end('its A2A task was dropped (the A2A server made room for another agent)')
    return true
  }

  private async meshCard (agentId: string, fresh = false): Promise<MeshCard> {
    return agentId === this.node.card?.agent_id
      ? this.node.card
      : await this.node.getCard(agentId, { signal: AbortSignal.timeout(A2A_CARD_RESOLVE_TIMEOUT_MS), fresh })
  }

  /** Resolve a served agent's card again; a newer one replaces the A2A card (a failure keeps the old one, and is logged). */
  private async refresh (agentId: string, e: Entry): Promise<void> {
    try {
      const meshCard = await this.meshCard(agentId, true)
      if (meshCard.seq !== Number(e.handler.card.version)) e.handler.update(meshCard, meshToA2aCard(meshCard, this.agentUrl(agentId), { bearer: this.gate !== undefined }))
    } catch (err) {
      this.log.warn({ err: (err as Error).message, agent_id: agentId }, 'a2a: cannot refresh the agent\'s card; serving the one held')
    }
    e.resolvedAt = Date.now()
  }

  private makeEntry (agentId: string, meshCard: MeshCard): Entry {
    const card = meshToA2aCard(meshCard, this.agentUrl(agentId), { bearer: this.gate !== undefined })
    const handler = new MeshAgentHandler(this.node, meshCard, card, this.log, this.handlerOpts)
    const router = express.Router()
    const userBuilder = clientUser
    router.use(CARD_PATH, agentCardHandler({ agentCardProvider: handler }))
    router.use(A2A_JSONRPC_SUBPATH, jsonRpcHandler({ requestHandler: handler, userBuilder }))
    router.use(A2A_REST_SUBPATH, restHandler({ requestHandler: handler, userBuilder }))
    return { handler, router, resolvedAt: Date.now() }
  }
}
