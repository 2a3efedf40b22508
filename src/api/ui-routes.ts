/**
 * The node's browser view, served by the local API: the page and its assets
 * (src/ui/assets, read once, no network at view time), the login that turns a
 * single-use code into a session cookie, and the JSON operations only the
 * view needs (peers, a timeline with verdicts, login codes), which are
 * documented in protocols/api.openapi.json like every other operation.
 *
 * Authorization: the page and its assets accept a session cookie (HttpOnly,
 * SameSite=Strict). Browsers send that cookie to every port of the host, so
 * the cookie alone never authorizes an API call: a call of the view (GETs
 * and event streams too) carries the session's own secret in the
 * UI_SECRET_HEADER header, and that secret finds its session whatever cookie
 * comes with it (a server on another port can replace the cookie; found by
 * session 59's review: that logged the view out). The login hands the secret
 * to the page in the URL fragment, which no server sees; the page keeps it in
 * sessionStorage, which is per origin, so a page on another port cannot read
 * it. Requests to the view and requests made with its cookie or secret must
 * name the API's own address in their Host header (no DNS rebinding);
 * bearer-token requests are not checked. Login codes are minted with the
 * bearer token only. The routes under /ui are not API operations: UI_ROUTES
 * lists them.
 */
import { readFileSync, statSync } from 'node:fs'
import type { IncomingMessage } from 'node:http'
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify'
import type { Logger } from '../logger.ts'
import type { MeshNode } from '../node.ts'
import {
  UI_ASSET_MAX_BYTES, UI_PEER_LOOKUPS_IN_FLIGHT_MAX, UI_PEER_PROTOCOL_CHARS_MAX, UI_PEER_PROTOCOLS_MAX, UI_PEER_TRANSPORT_CHARS_MAX, UI_PEERS_MAX, UI_PEERS_PING_MAX, UI_PING_CACHE_MS,
  UI_PING_TIMEOUT_MS, UI_SECRET_FRAGMENT, UI_SECRET_HEADER, UI_SESSION_COOKIE_VALUES_MAX, UI_SESSION_STREAMS_CHECK_MS, uiSessionCookie
} from '../ui/constants.ts'
import { UiSessions } from '../ui/sessions.ts'
import { connectionFacts } from '../wire/connection-facts.ts'
import { HttpError } from './errors.ts'
import type { NodeMetrics } from './metrics.ts'
import { hostIsOwn } from './own-host.ts'
import { maxEventsOf, timelineAnswer } from './ui-timeline.ts'
import { whileClientHere } from './client-gone.ts'
import { makeRoom } from '../util/bounded.ts'

export { verdicts } from './ui-timeline.ts'

/** The routes of the view itself, besides the documented operations. */
export const UI_ROUTES: ReadonlyArray<{ method: string, url: string }> = [
  { method: 'GET', url: '/ui' },
  { method: 'GET', url: '/ui/login' },
  { method: 'POST', url: '/ui/logout' },
  { method: 'GET', url: '/ui/assets/:name' }
]

const ASSET_TYPES: Record<string, string> = {
  'app.js': 'text/javascript; charset=utf-8',
  'timeline.js': 'text/javascript; charset=utf-8',
  'stream.js': 'text/javascript; charset=utf-8',
  'names.js': 'text/javascript; charset=utf-8',
  'schedule.js': 'text/javascript; charset=utf-8',
  'tables.js': 'text/javascript; charset=utf-8',
  'lineage.js': 'text/javascript; charset=utf-8',
  'app.css': 'text/css; charset=utf-8'
}

function readAsset (name: string): string {
  const url = new URL(`../ui/assets/${name}`, import.meta.url)
  const size = statSync(url).size
  if (size > UI_ASSET_MAX_BYTES) throw new Error(`UI asset ${name} is ${size} bytes, over UI_ASSET_MAX_BYTES`)
  return readFileSync(url, 'utf8')
}

const INDEX_HTML = readAsset('index.html')
const ASSETS = new Map(Object.keys(ASSET_TYPES).map(name => [name, readAsset(name)]))

const SECURITY_HEADERS: Record<string, string> = {
  // everything comes from the node itself: no CDN, no inline script, no framing
  'content-security-policy': "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; form-action 'self'; base-uri 'none'; frame-ancestors 'none'",
  'x-content-type-options': 'nosniff',
  'referrer-policy': 'no-referrer',
  'cache-control': 'no-store'
}

/** True for a path of one of UI_ROUTES: anything else under /ui (dot segments, escapes) goes to the bearer check. */
function isViewRoute (path: string): boolean {
  if (path === '/ui' || path === '/ui/login' || path === '/ui/logout') return true
  return path.startsWith('/ui/assets/') && /^[A-Za-z0-9_-]+\.[a-z]+$/.test(path.slice('/ui/assets/'.length))
}

/** The session secret header of a request, when it carries exactly one. */
function secretOf (req: FastifyRequest): string | undefined {
  const v = req.headers[UI_SECRET_HEADER]
  return typeof v === 'string' ? v : undefined
}

/** The view's session cookie on the port this request came in on (see uiSessionCookie). */
function sessionCookie (req: FastifyRequest): string {
  return uiSessionCookie(req.socket.localPort ?? 0)
}

/**
 * Every value of the cookie `name` in the request, in header order, at most
 * UI_SESSION_COOKIE_VALUES_MAX: a server on another port of the host can set
 * a cookie of the same name with a longer Path, which the browser sends first,
 * so the caller looks for the live session among them, not at the first.
 */
function cookiesOf (req: FastifyRequest, name: string): string[] {
  const header = req.headers.cookie
  if (typeof header !== 'string') return []
  const out: string[] = []
  for (const part of header.split(';')) {
    const eq = part.indexOf('=')
    if (eq > 0 && part.slice(0, eq).trim() === name) out.push(part.slice(eq + 1).trim())
    if (out.length >= UI_SESSION_COOKIE_VALUES_MAX) break
  }
  return out
}

function page (title: string, text: string): string {
  const esc = (s: string): string => s.replace(/[&<>"]/g, c => `&#${c.charCodeAt(0)};`)
  return `<!doctype html><html lang="en"><head><meta charset="utf-8"><title>${esc(title)}</title>` +
    '<link rel="stylesheet" href="/ui/assets/app.css"></head>' +
    `<body class="gate"><main><h1>${esc(title)}</h1><p>${esc(text)}</p></main></body></html>`
}

interface Answer { status?: number, body: unknown, large?: true }
/** What GET /v1/peers looked up about a peer, and when. */
interface LookedUp { rtt: number | null, name: string | null, at: number }
type JsonHandler = { json: (req: FastifyRequest) => Promise<Answer> }
type PeerOf = Parameters<MeshNode['host']['services']['ping']['ping']>[0]

export interface UiRoutesOptions {
  node: MeshNode
  log: Logger
  /** The API's own URL, once it listens (for the login link). */
  url: () => string
  sessions?: UiSessions
  /** Where refused logins are counted (aap_errors_total, source ui_login), when the node serves metrics. */
  metrics?: NodeMetrics
}

export class UiRoutes {
  readonly sessions: UiSessions
  private readonly opts: UiRoutesOptions
  /** What was looked up about a peer (a ping, its card's name), reused for UI_PING_CACHE_MS. */
  private readonly lookedUp = new Map<string, LookedUp>()
  /** The look-ups under way, by peer: requests that ask at once share one (at most UI_PEER_LOOKUPS_IN_FLIGHT_MAX). */
  private readonly lookingUp = new Map<string, Promise<LookedUp>>()

  /** The key of the session that authorized each request made with one (authorize), for the streams it opens. */
  private readonly sessionOf = new WeakMap<IncomingMessage, string>()
  /** The streams each session opened: they end with it (found by session 46's review: they went on after a logout). */
  private readonly sessionStreams = new Map<string, Set<() => void>>()
  private streamCheck: NodeJS.Timeout | undefined
  /** Logins refused since start (an unknown, used or expired code): logged at debug only, so counted here. */
  private refusedLogins = 0

  constructor (opts: UiRoutesOptions) {
    this.opts = opts
    this.sessions = opts.sessions ?? new UiSessions()
  }

  /** Logins refused since start: an unknown, used or expired code. */
  get loginRefusals (): number {
    return this.refusedLogins
  }

  /** A stream opened by `req`: `close` ends it when the session that authorized it ends. Returns what forgets it. */
  watchStream (req: IncomingMessage, close: () => void): () => void {
    const session = this.sessionOf.get(req)
    if (session === undefined) return () => {}
    let streams = this.sessionStreams.get(session)
    if (streams === undefined) {
      streams = new Set()
      this.sessionStreams.set(session, streams)
    }
    const set = streams
    set.add(close)
    this.armStreamCheck()
    return () => {
      set.delete(close)
      if (set.size === 0 && this.sessionStreams.get(session) === set) this.sessionStreams.delete(session)
    }
  }

  private endStreams (session: string): void {
    const streams = this.sessionStreams.get(session)
    this.sessionStreams.delete(session)
    for (const close of streams ?? []) close()
  }

  /** A session also ends without a logout (it expires, or a newer one pushes it out): looked at every UI_SESSION_STREAMS_CHECK_MS. */
  private armStreamCheck (): void {
    if (this.streamCheck !== undefined) return
    this.streamCheck = setInterval(() => {
      for (const session of [...this.sessionStreams.keys()]) if (!this.sessions.liveKey(session)) this.endStreams(session)
      if (this.sessionStreams.size === 0) {
        clearInterval(this.streamCheck)
        this.streamCheck = undefined
      }
    }, UI_SESSION_STREAMS_CHECK_MS)
    this.streamCheck.unref()
  }

  /**
   * Called first by the API's onRequest hook. True when the request needs no
   * bearer token: a route of the view (each checks its session itself) or an
   * API call with a live session's secret in UI_SECRET_HEADER, whatever
   * cookie comes with it (the cookie is for the page and its assets). False
   * sends the request on to the bearer check. Throws for a wrong Host, and
   * for a live cookie without its secret.
   */
  authorize (req: FastifyRequest): boolean {
    const path = req.url.split('?')[0] ?? ''
    if (isViewRoute(path)) {
      this.checkHost(req)
      return true
    }
    if (typeof req.headers.authorization === 'string') return false
    const key = this.sessions.keyOfSecret(secretOf(req))
    const values = key === undefined ? cookiesOf(req, sessionCookie(req)) : []
    if (key === undefined && values.length === 0) return false
    this.checkHost(req)
    if (key === undefined && !values.some(s => this.sessions.check(s))) return false
    if (req.routeOptions?.config?.operationId === 'createLoginCode') return false
    if (key === undefined) {
      throw new HttpError(401, 'UNAUTHORIZED', `a request made with the view's session must carry the session's secret in the ${UI_SECRET_HEADER} header; open the view again with "aap-mesh ui"`, { reason: 'ui_secret' })
    }
    this.sessionOf.set(req.raw, key)
    return true
  }

  /** Refuse a Host header that is not the API's own address (own-host.ts: loopback names, where it listens, the address reached). */
  private checkHost (req: FastifyRequest): void {
    if (hostIsOwn(req.raw, [new URL(this.opts.url()).hostname])) return
    throw new HttpError(403, 'UNAUTHORIZED', `the node's view answers only at its own address, not at Host ${JSON.stringify((req.headers.host ?? '').toLowerCase().slice(0, 100))}`, { reason: 'host' })
  }

  /** The request's first session cookie value that is a live session. */
  private session (req: FastifyRequest): string | undefined {
    return cookiesOf(req, sessionCookie(req)).find(s => this.sessions.check(s))
  }

  private refuse (reply: FastifyReply, why: string): void {
    void reply.code(401).headers(SECURITY_HEADERS).type('text/html; charset=utf-8').send(page('aap-mesh: log in', why))
  }

  /** The view's routes on the API's fastify instance. */
  register (app: FastifyInstance): void {
    app.get('/ui', async (req, reply) => {
      if (this.session(req) === undefined) {
        this.refuse(reply, 'This node\'s view needs a login. Run "aap-mesh ui --data-dir <the node\'s data dir>" and open the link it prints (each link works once).')
        return reply
      }
      return reply.headers(SECURITY_HEADERS).type('text/html; charset=utf-8').send(INDEX_HTML)
    })

    app.get('/ui/login', async (req, reply) => {
      const code = (req.query as Record<string, unknown>).code
      const login = typeof code === 'string' && code.length > 0 && code.length <= 128 ? this.sessions.redeem(code) : undefined
      if (login === undefined) {
        // any web page can make the browser ask for this (a link, an image): at info level that would let
        // it write the node's log at will, so the refusal is counted and logged only at debug
        this.refusedLogins++
        this.opts.metrics?.errors.inc({ code: 'UNAUTHORIZED', source: 'ui_login' })
        this.opts.log.debug({ refusals: this.refusedLogins }, 'UI login refused: unknown, used or expired code')
        this.refuse(reply, 'This login link is unknown, used or expired. Run "aap-mesh ui" again for a new one.')
        return reply
      }
      const maxAge = Math.floor(this.sessions.sessionTtlMs / 1000)
      this.opts.log.info('UI login')
      // the code leaves the address bar (the history entry is replaced); the secret rides in the
      // fragment, which no server is sent, and the page moves it to sessionStorage at once
      return reply.code(303).headers(SECURITY_HEADERS)
        .header('set-cookie', `${sessionCookie(req)}=${login.session}; Path=/; HttpOnly; SameSite=Strict; Max-Age=${maxAge}`)
        .header('location', `/ui#${UI_SECRET_FRAGMENT}=${login.secret}`).send()
    })

    app.post('/ui/logout', async (req, reply) => {
      // the secret names the session, as for API calls: a cookie another port replaced does not keep it alive
      const session = this.sessions.keyOfSecret(secretOf(req))
      if (session === undefined) throw new HttpError(401, 'UNAUTHORIZED', `no view session, or not its secret in ${UI_SECRET_HEADER}`, { reason: 'ui_secret' })
      this.sessions.endKey(session)
      this.endStreams(session)
      this.opts.log.info('UI logout')
      return reply.code(204).header('set-cookie', `${sessionCookie(req)}=; Path=/; HttpOnly; SameSite=Strict; Max-Age=0`).send()
    })

    app.get('/ui/assets/:name', async (req, reply) => {
      const name = (req.params as Record<string, string>).name ?? ''
      const body = ASSETS.get(name)
      // the stylesheet also dresses the login page, shown before any session exists
      if (name !== 'app.css' && this.session(req) === undefined) throw new HttpError(401, 'UNAUTHORIZED', 'log in first (aap-mesh ui)')
      if (body === undefined) throw new HttpError(404, 'INVALID_REQUEST', `no asset ${name.slice(0, 64)}`, { reason: 'no_route' })
      return reply.headers(SECURITY_HEADERS).type(ASSET_TYPES[name] ?? 'application/octet-stream').send(body)
    })
  }

  /** Handlers of the view's documented operations. */
  handlers (): Record<string, JsonHandler> {
    return {
      createLoginCode: {
        json: async () => {
          const { code, expiresAt } = this.sessions.issueCode()
          return { status: 201, body: { code, url: `${this.opts.url()}/ui/login?code=${code}`, expires_at: expiresAt.toISOString() } }
        }
      },
      listPeers: { json: async () => ({ body: await this.peers() }) },
      timeline: {
        json: async (req) => {
          const correlation = (req.params as Record<string, string>).correlation_id ?? ''
          const q = req.query as Record<string, unknown>
          const list = (v: unknown): string[] => Array.isArray(v) ? v.filter((s): s is string => typeof s === 'string') : []
          const participants = list(q.participant)
          const runs = list(q.run)
          // a view that goes away (its tab closed) ends the replay at once, and the slot it holds
          const r = await whileClientHere(req.raw, async (signal) => this.opts.node.events.replay(correlation, {
            // two delegators' tasks under one id: the view names whose it shows, as the replay's caller does
            ...(typeof q.owner === 'string' ? { owner: q.owner } : {}),
            ...(participants.length > 0 ? { participants } : {}),
            ...(runs.length > 0 ? { runs } : {}),
            ...(typeof q.timeout_ms === 'number' ? { timeoutMs: q.timeout_ms } : {}),
            signal
          }))
          // the newest events only, each payload once (ui-timeline.ts): the view draws no more
          return { large: true, body: await timelineAnswer(r, maxEventsOf(q.max_events), this.opts.node.signatures) }
        }
      }
    }
  }

  private async peers (): Promise<unknown> {
    const host = this.opts.node.host
    const byPeer = new Map<string, ReturnType<typeof host.getConnections>>()
    for (const c of host.getConnections()) {
      const id = c.remotePeer.toString()
      byPeer.set(id, [...(byPeer.get(id) ?? []), c])
    }
    const ids = [...byPeer.keys()].sort().slice(0, UI_PEERS_MAX)
    let lookups = 0
    const peers = await Promise.all(ids.map(async (id) => {
      const conns = byPeer.get(id) ?? []
      const connections = conns.map(c => {
        const facts = connectionFacts(c)
        return { ...facts, transport: facts.transport.slice(0, UI_PEER_TRANSPORT_CHARS_MAX) }
      })
      const peerId = conns[0]?.remotePeer
      let protocols: string[] = []
      let protocolsTotal = 0
      if (peerId !== undefined) {
        try {
          const announced = (await host.peerStore.get(peerId)).protocols
          protocolsTotal = announced.length
          protocols = listedProtocols(announced)
        } catch (err) {
          this.opts.log.debug({ peer: id, err: (err as Error).message }, 'no peer store entry for a connected peer')
        }
      }
      const known = connections.map(c => c.rtt_ms).filter((r): r is number => r !== null)
      let latency: number | null = known.length > 0 ? Math.min(...known) : null
      let cached = this.lookedUp.get(id)
      // only a few peers per request, and per node, cost a ping or a card lookup; the rest show what is at hand
      const pending = this.lookingUp.get(id)
      if (pending !== undefined) cached = await pending
      else if ((cached === undefined || Date.now() - cached.at >= UI_PING_CACHE_MS) && peerId !== undefined && lookups < UI_PEERS_PING_MAX &&
        this.lookingUp.size < UI_PEER_LOOKUPS_IN_FLIGHT_MAX) {
        lookups++
        cached = await this.sharedLookUp(id, peerId, latency === null)
      }
      latency ??= cached?.rtt ?? null
      return { agent_id: id, name: cached?.name ?? null, connections, latency_ms: latency, protocols, protocols_total: protocolsTotal }
    }))
    return { peers, total: byPeer.size }
  }

  /** lookUp, shared with the requests that ask for the same peer while it runs (found by session 59's review: each repeated it). */
  private async sharedLookUp (id: string, peerId: PeerOf, ping: boolean): Promise<LookedUp> {
    const running = this.lookUp(id, peerId, ping).finally(() => {
      if (this.lookingUp.get(id) === running) this.lookingUp.delete(id)
    })
    this.lookingUp.set(id, running)
    return running
  }

  /** Ping a peer (when asked) and fetch its card's name, both bounded by UI_PING_TIMEOUT_MS; failures are logged and cached as unknown. */
  private async lookUp (id: string, peerId: PeerOf, ping: boolean): Promise<LookedUp> {
    const [rtt, card] = await Promise.all([
      ping
        ? this.opts.node.host.services.ping.ping(peerId, { signal: AbortSignal.timeout(UI_PING_TIMEOUT_MS) }).catch((err: unknown) => {
          this.opts.log.debug({ peer: id, err: (err as Error).message }, 'ping failed')
          return null
        })
        : Promise.resolve(null),
      this.opts.node.getCard(id, { signal: AbortSignal.timeout(UI_PING_TIMEOUT_MS) }).catch((err: unknown) => {
        this.opts.log.debug({ peer: id, err: (err as Error).message }, 'no card for a connected peer')
        return undefined
      })
    ])
    const entry = { rtt, name: card?.name ?? null, at: Date.now() }
    // the oldest look-up goes, not all of them: at UI_PEERS_MAX listed peers a clear emptied the names of
    // every peer at each stale entry, refilled UI_PEERS_PING_MAX a request (found by session 58's review)
    this.lookedUp.delete(id)
    makeRoom(this.lookedUp, UI_PEERS_MAX)
    this.lookedUp.set(id, entry)
    return entry
  }
}

/**
 * The protocols of a peer GET /v1/peers lists: `/aap/` ones first, each group
 * sorted, at most UI_PEER_PROTOCOLS_MAX, each cut to UI_PEER_PROTOCOL_CHARS_MAX
 * characters (a peer announces what it likes; found by session 56's review).
 */
export function listedProtocols (announced: readonly string[]): string[] {
  const aap = announced.filter(p => p.startsWith('/aap/')).sort()
  const rest = announced.filter(p => !p.startsWith('/aap/')).sort()
  return [...aap, ...rest].slice(0, UI_PEER_PROTOCOLS_MAX)
    .map(p => p.length <= UI_PEER_PROTOCOL_CHARS_MAX ? p : `${p.slice(0, UI_PEER_PROTOCOL_CHARS_MAX - 1)}…`)
}

