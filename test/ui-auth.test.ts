/**
 * The browser view's login and authorization, over real HTTP against a real
 * node's API: single-use, expiring login codes exchanged for an HttpOnly,
 * SameSite=Strict cookie and a redirect whose URL fragment carries the
 * session's secret; the page and the API refused without a login; every
 * cookie-authenticated API call (reads and streams too) refused without the
 * session's own secret; a Host header other than the API's own refused for
 * the view and its cookie, never for the bearer token; login codes minted
 * with the bearer token only. And the timeline's verdicts: a tampered,
 * missing or re-chained event is called out.
 */
import { request } from 'node:http'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { newToken } from '../src/api/files.ts'
import { startApiServer, type ApiServer } from '../src/api/server.ts'
import { verdicts } from '../src/api/ui-routes.ts'
import { connectionType } from '../src/wire/connection-facts.ts'
import { buildReplay } from '../src/events/replay.ts'
import type { MeshNode } from '../src/node.ts'
import type { AgentEvent } from '../src/runlog/types.ts'
import { UI_LOGIN_CODE_TTL_MS, UI_MAX_LOGIN_CODES, UI_SECRET_FRAGMENT, UI_SECRET_HEADER, uiSessionCookie } from '../src/ui/constants.ts'
import { UiSessions } from '../src/ui/sessions.ts'
import { raw } from './api-helpers.ts'
import { startMesh, stopAll } from './helpers.ts'

const CAP = { capability_id: 'cap:ui-auth', version: '1.0.0' }

/** A GET with the given Host header (fetch will not send one of its own choosing). */
async function getWithHost (url: string, host: string, headers: Record<string, string> = {}): Promise<{ status: number, body: any }> {
  const u = new URL(url)
  return new Promise((resolve, reject) => {
    const req = request({ host: u.hostname, port: u.port, path: u.pathname + u.search, headers: { ...headers, host } }, (res) => {
      let text = ''
      res.setEncoding('utf8')
      res.on('data', (d: string) => { text += d })
      res.on('end', () => { resolve({ status: res.statusCode ?? 0, body: (res.headers['content-type'] ?? '').includes('json') ? JSON.parse(text) : text }) })
      res.on('error', reject)
    })
    req.on('error', reject)
    req.end()
  })
}

describe('the browser view: login and authorization', () => {
  let nodes: MeshNode[]
  let a: MeshNode
  let b: MeshNode
  let api: ApiServer
  /** The session cookie's name on this API (one name per port). */
  let COOKIE = ''
  const token = newToken()

  beforeAll(async () => {
    nodes = await startMesh(2)
    ;[a, b] = nodes as [MeshNode, MeshNode]
    api = await startApiServer(a, { token, port: 0 })
    COOKIE = uiSessionCookie(Number(new URL(api.url).port))
  })

  afterAll(async () => {
    await api.close()
    await stopAll(nodes)
  })

  async function loginCode (): Promise<{ code: string, url: string }> {
    const res = await raw(`${api.url}/v1/ui/login-codes`, { method: 'POST', token })
    expect(res.status).toBe(201)
    return res.body
  }

  /** Log in with a fresh code: the session cookie (name=value) and the session's secret from the redirect's fragment. */
  async function login (): Promise<{ cookie: string, secret: string }> {
    const name = COOKIE
    const { url } = await loginCode()
    const res = await fetch(url, { redirect: 'manual' })
    const cookie = res.headers.get('set-cookie') ?? ''
    const m = new RegExp(`^${name}=([^;]+)`).exec(cookie)
    if (m === null) throw new Error(`no session cookie: ${cookie}`)
    const secret = new RegExp(`^/ui#${UI_SECRET_FRAGMENT}=([A-Za-z0-9_-]+)$`).exec(res.headers.get('location') ?? '')?.[1]
    if (secret === undefined) throw new Error(`no secret in the redirect: ${res.headers.get('location')}`)
    return { cookie: `${name}=${m[1]!}`, secret }
  }

  it('refuses the page, its script and the API without a login', async () => {
    const page = await raw(`${api.url}/ui`)
    expect(page.status).toBe(401)
    expect(page.headers.get('content-type')).toMatch(/text\/html/)
    expect(page.body).toContain('aap-mesh ui')
    expect((await raw(`${api.url}/ui/assets/app.js`)).status).toBe(401)
    expect((await raw(`${api.url}/v1/node`)).status).toBe(401)
    expect((await raw(`${api.url}/v1/node`, { headers: { cookie: `${COOKIE}=forged` } })).status).toBe(401)
  })

  it('exchanges a code once for an HttpOnly, SameSite=Strict session and redirects to a URL whose fragment holds the secret', async () => {
    const { code, url } = await loginCode()
    expect(url).not.toContain(token)
    const res = await fetch(url, { redirect: 'manual' })
    expect(res.status).toBe(303)
    const location = res.headers.get('location') ?? ''
    expect(location).toMatch(new RegExp(`^/ui#${UI_SECRET_FRAGMENT}=[A-Za-z0-9_-]{40,}$`))
    expect(location).not.toContain(code)
    const cookie = res.headers.get('set-cookie') ?? ''
    // the secret is not the session id
    expect(cookie).not.toContain(location.split('=')[1]!)
    expect(cookie).toMatch(new RegExp(`^${COOKIE}=[A-Za-z0-9_-]{40,}; Path=/; HttpOnly; SameSite=Strict; Max-Age=\\d+$`))
    expect(cookie).not.toContain(code)
    expect(cookie).not.toContain(token)
    // the same code again: refused
    const again = await fetch(url, { redirect: 'manual' })
    expect(again.status).toBe(401)
    expect(again.headers.get('set-cookie')).toBeNull()
    // a made-up code, and none at all
    expect((await fetch(`${api.url}/ui/login?code=nope`, { redirect: 'manual' })).status).toBe(401)
    expect((await fetch(`${api.url}/ui/login`, { redirect: 'manual' })).status).toBe(401)

    const session = cookie.split(';')[0]!
    const page = await raw(`${api.url}/ui`, { headers: { cookie: session } })
    expect(page.status).toBe(200)
    expect(page.body).toContain('<script type="module" src="/ui/assets/app.js">')
    expect(page.headers.get('content-security-policy')).toContain("default-src 'none'")
    expect(page.body).not.toContain(token)
    const script = await raw(`${api.url}/ui/assets/app.js`, { headers: { cookie: session } })
    expect(script.status).toBe(200)
    expect(script.headers.get('content-type')).toMatch(/javascript/)
  })

  it('lets a session call the API only with its own secret, GETs and streams too, and never mint login codes', async () => {
    const { cookie, secret } = await login()
    const other = await login()
    // the cookie alone, or with a made-up secret: refused, reads included
    const wrong: Array<Record<string, string>> = [{ cookie }, { cookie, [UI_SECRET_HEADER]: '1' }]
    for (const headers of wrong) {
      const refused = await raw(`${api.url}/v1/node`, { headers })
      expect(refused.status).toBe(401)
      expect(refused.body.error).toMatchObject({ code: 'UNAUTHORIZED', details: { reason: 'ui_secret' } })
      expect((await raw(`${api.url}/v1/events/ui-auth-0/stream?history=false`, { headers })).status).toBe(401)
      expect((await raw(`${api.url}/v1/discover?capability=cap:x&fresh=true`, { headers })).status).toBe(401)
    }
    expect(api.stats().streams).toBe(0)
    // a session's secret is its session's, whatever cookie comes with it (another port can replace the cookie)
    expect((await raw(`${api.url}/v1/node`, { headers: { cookie, [UI_SECRET_HEADER]: other.secret } })).status).toBe(200)
    const node = await raw(`${api.url}/v1/node`, { headers: { cookie, [UI_SECRET_HEADER]: secret } })
    expect(node.status).toBe(200)
    expect(node.body.agent_id).toBe(a.agentId)
    await b.publishCard({ name: 'b', capabilities: [CAP] })
    b.runs.handle(CAP, async (ctx) => { await ctx.block('wait', 'cp-ui'); return {} })
    const body = JSON.stringify({ to_agent: b.agentId, task_id: 'ui-auth-1', capability: CAP, input: {} })
    for (const headers of wrong) {
      expect((await raw(`${api.url}/v1/delegate`, { method: 'POST', body, headers })).status).toBe(401)
    }
    expect((await a.runs.list()).delegated).toHaveLength(0)
    const made = await raw(`${api.url}/v1/delegate`, { method: 'POST', body, headers: { cookie, [UI_SECRET_HEADER]: secret } })
    expect(made.status).toBe(202)
    expect(made.body.run.delegator).toBe(a.agentId)
    // minting a login code takes the bearer token, not a session
    expect((await raw(`${api.url}/v1/ui/login-codes`, { method: 'POST', headers: { cookie, [UI_SECRET_HEADER]: secret } })).status).toBe(401)
    // the bearer token keeps working for other clients
    expect((await raw(`${api.url}/v1/runs`, { token })).status).toBe(200)
    // logging out takes the secret too, and ends the session
    expect((await raw(`${api.url}/ui/logout`, { method: 'POST', headers: { cookie, [UI_SECRET_HEADER]: 'x' } })).status).toBe(401)
    expect((await raw(`${api.url}/v1/node`, { headers: { cookie, [UI_SECRET_HEADER]: secret } })).status).toBe(200)
    expect((await raw(`${api.url}/ui/logout`, { method: 'POST', headers: { cookie, [UI_SECRET_HEADER]: secret } })).status).toBe(204)
    expect((await raw(`${api.url}/v1/node`, { headers: { cookie, [UI_SECRET_HEADER]: secret } })).status).toBe(401)
    expect((await raw(`${api.url}/ui`, { headers: { cookie } })).status).toBe(401)
  })

  it('answers the view and its cookie only at the API\'s own address; the bearer token at any Host', async () => {
    const { cookie, secret } = await login()
    const port = new URL(api.url).port
    const session = { cookie, [UI_SECRET_HEADER]: secret }
    for (const host of [`127.0.0.1:${port}`, `localhost:${port}`, `LOCALHOST:${port}`]) {
      expect((await getWithHost(`${api.url}/v1/node`, host, session)).status).toBe(200)
      expect((await getWithHost(`${api.url}/ui`, host, { cookie })).status).toBe(200)
    }
    // a DNS name rebound to 127.0.0.1, or the right name on another port: refused
    for (const host of [`rebound.example:${port}`, `127.0.0.1:${Number(port) + 1}`, 'localhost', `127.0.0.1.example:${port}`]) {
      const refused = await getWithHost(`${api.url}/v1/node`, host, session)
      expect(refused.status).toBe(403)
      expect(refused.body.error.details).toEqual({ reason: 'host' })
      expect((await getWithHost(`${api.url}/ui`, host, { cookie })).status).toBe(403)
      expect((await getWithHost(`${api.url}/ui/login?code=x`, host)).status).toBe(403)
    }
    // the CLI and agents use the bearer token, whatever name they reach the API by
    expect((await getWithHost(`${api.url}/v1/node`, `rebound.example:${port}`, { authorization: `Bearer ${token}` })).status).toBe(200)
  })

  it('login codes expire after UI_LOGIN_CODE_TTL_MS and are bounded in number', () => {
    let now = 1_000_000
    const s = new UiSessions({ now: () => now })
    const late = s.issueCode().code
    now += UI_LOGIN_CODE_TTL_MS
    expect(s.redeem(late)).toBeUndefined()
    const codes = Array.from({ length: UI_MAX_LOGIN_CODES + 1 }, () => s.issueCode().code)
    expect(s.stats.codes).toBe(UI_MAX_LOGIN_CODES)
    expect(s.redeem(codes[0]!)).toBeUndefined()
    const login = s.redeem(codes.at(-1)!)
    expect(login).toBeDefined()
    const { session, secret } = login!
    expect(s.check(session)).toBe(true)
    expect(s.checkSecret(session, secret)).toBe(true)
    expect(s.checkSecret(session, undefined)).toBe(false)
    expect(s.checkSecret(session, `${secret}x`)).toBe(false)
    expect(s.checkSecret(secret, session)).toBe(false)
    now += s.sessionTtlMs
    expect(s.check(session)).toBe(false)
    expect(s.checkSecret(session, secret)).toBe(false)
  })

  it('names a connection through a circuit relay relayed, any other direct', () => {
    const relay = '12D3KooWRelayRelayRelayRelayRelayRelayRelayRelayRelay'
    expect(connectionType(`/ip4/127.0.0.1/tcp/4001/p2p/${relay}/p2p-circuit`)).toBe('relayed')
    expect(connectionType('/ip4/127.0.0.1/tcp/4001')).toBe('direct')
    expect(connectionType('/memory/a')).toBe('direct')
  })

  it('calls out an event whose signature, seq or chain link does not hold', async () => {
    const r = await a.events.replay('ui-auth-1', { participants: [b.agentId], timeoutMs: 5000 })
    const events = r.events
    expect(events.map(e => e.type)).toEqual(['run.started', 'run.blocked'])
    expect((await verdicts(r)).map(v => [v.signature, v.chain])).toEqual([['valid', 'linked'], ['valid', 'linked']])
    const logs = (list: AgentEvent[]): Map<string, AgentEvent[]> => new Map([[list[0]!.run_id, list]])
    const tampered = { ...events[1]!, payload: { ...events[1]!.payload, reason: 'changed' } }
    expect((await verdicts(buildReplay('ui-auth-1', logs([events[0]!, tampered])))).map(v => v.signature)).toEqual(['valid', 'invalid'])
    expect((await verdicts(buildReplay('ui-auth-1', logs([events[1]!])))).map(v => v.chain)).toEqual(['gap'])
    const rechained = { ...events[1]!, prev: '00'.repeat(32) }
    expect((await verdicts(buildReplay('ui-auth-1', logs([events[0]!, rechained]))))[1]).toMatchObject({ signature: 'invalid', chain: 'broken' })
  })

  it('two nodes\' views on one host keep separate sessions (the cookie is named per port)', async () => {
    const tokenB = newToken()
    const apiB = await startApiServer(b, { token: tokenB, port: 0 })
    try {
      const codeB = (await raw(`${apiB.url}/v1/ui/login-codes`, { method: 'POST', token: tokenB })).body as { code: string }
      const res = await fetch(`${apiB.url}/ui/login?code=${codeB.code}`, { redirect: 'manual' })
      const cookieB = (res.headers.get('set-cookie') ?? '').split(';')[0] ?? ''
      const secretB = (res.headers.get('location') ?? '').split('=')[1] ?? ''
      const nameB = uiSessionCookie(Number(new URL(apiB.url).port))
      expect(nameB).not.toBe(COOKIE)
      expect(cookieB.startsWith(`${nameB}=`)).toBe(true)
      const { cookie: cookieA, secret: secretA } = await login()
      // a browser sends both cookies to both ports: each API takes its own and both sessions stay valid
      const both = `${cookieA}; ${cookieB}`
      expect((await raw(`${api.url}/v1/node`, { headers: { cookie: both, [UI_SECRET_HEADER]: secretA } })).status).toBe(200)
      expect((await raw(`${apiB.url}/v1/node`, { headers: { cookie: both, [UI_SECRET_HEADER]: secretB } })).status).toBe(200)
      // one node's session (or secret) is not the other's
      expect((await raw(`${apiB.url}/v1/node`, { headers: { cookie: cookieA, [UI_SECRET_HEADER]: secretA } })).status).toBe(401)
      expect((await raw(`${apiB.url}/v1/node`, { headers: { cookie: both, [UI_SECRET_HEADER]: secretA } })).status).toBe(401)
    } finally {
      await apiB.close()
    }
  })
})
