/**
 * The browser view's login and authorization, over real HTTP against a real
 * node's API: single-use, expiring login codes exchanged for an HttpOnly,
 * SameSite=Strict cookie and a redirect to a clean URL; the page and the API
 * refused without a login; cookie-authenticated changes refused without the
 * CSRF header; login codes minted with the bearer token only. And the
 * timeline's verdicts: a tampered, missing or re-chained event is called out.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { newToken } from '../src/api/files.ts'
import { startApiServer, type ApiServer } from '../src/api/server.ts'
import { connectionType, verdicts } from '../src/api/ui-routes.ts'
import { buildReplay } from '../src/events/replay.ts'
import type { MeshNode } from '../src/node.ts'
import type { AgentEvent } from '../src/runlog/types.ts'
import { UI_CSRF_HEADER, UI_LOGIN_CODE_TTL_MS, UI_MAX_LOGIN_CODES, uiSessionCookie } from '../src/ui/constants.ts'
import { UiSessions } from '../src/ui/sessions.ts'
import { raw } from './api-helpers.ts'
import { startMesh, stopAll } from './helpers.ts'

const CAP = { capability_id: 'cap:ui-auth', version: '1.0.0' }

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

  /** Log in with a fresh code; the session cookie's value. */
  async function login (): Promise<string> {
    const { url } = await loginCode()
    const res = await fetch(url, { redirect: 'manual' })
    const cookie = res.headers.get('set-cookie') ?? ''
    const m = new RegExp(`^${COOKIE}=([^;]+)`).exec(cookie)
    if (m === null) throw new Error(`no session cookie: ${cookie}`)
    return m[1]!
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

  it('exchanges a code once for an HttpOnly, SameSite=Strict session and redirects to a URL without it', async () => {
    const { code, url } = await loginCode()
    expect(url).not.toContain(token)
    const res = await fetch(url, { redirect: 'manual' })
    expect(res.status).toBe(303)
    expect(res.headers.get('location')).toBe('/ui')
    const cookie = res.headers.get('set-cookie') ?? ''
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

  it('lets a session call the API: reads freely, changes only with the CSRF header, never mints login codes', async () => {
    const cookie = `${COOKIE}=${await login()}`
    const node = await raw(`${api.url}/v1/node`, { headers: { cookie } })
    expect(node.status).toBe(200)
    expect(node.body.agent_id).toBe(a.agentId)
    await b.publishCard({ name: 'b', capabilities: [CAP] })
    b.runs.handle(CAP, async (ctx) => { await ctx.block('wait', 'cp-ui'); return {} })
    const body = JSON.stringify({ to_agent: b.agentId, task_id: 'ui-auth-1', capability: CAP, input: {} })
    const refused = await raw(`${api.url}/v1/delegate`, { method: 'POST', body, headers: { cookie } })
    expect(refused.status).toBe(403)
    expect(refused.body.error).toMatchObject({ code: 'UNAUTHORIZED', details: { reason: 'csrf' } })
    expect((await a.runs.list()).delegated).toHaveLength(0)
    const made = await raw(`${api.url}/v1/delegate`, { method: 'POST', body, headers: { cookie, [UI_CSRF_HEADER]: '1' } })
    expect(made.status).toBe(202)
    expect(made.body.run.delegator).toBe(a.agentId)
    // minting a login code takes the bearer token, not a session
    expect((await raw(`${api.url}/v1/ui/login-codes`, { method: 'POST', headers: { cookie, [UI_CSRF_HEADER]: '1' } })).status).toBe(401)
    // the bearer token keeps working for other clients
    expect((await raw(`${api.url}/v1/runs`, { token })).status).toBe(200)
    // logging out ends the session
    expect((await raw(`${api.url}/ui/logout`, { method: 'POST', headers: { cookie, [UI_CSRF_HEADER]: '1' } })).status).toBe(204)
    expect((await raw(`${api.url}/v1/node`, { headers: { cookie } })).status).toBe(401)
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
    const session = s.redeem(codes.at(-1)!)
    expect(session).toBeDefined()
    expect(s.check(session!)).toBe(true)
    now += s.sessionTtlMs
    expect(s.check(session!)).toBe(false)
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
    expect(verdicts(r).map(v => [v.signature, v.chain])).toEqual([['valid', 'linked'], ['valid', 'linked']])
    const logs = (list: AgentEvent[]): Map<string, AgentEvent[]> => new Map([[list[0]!.run_id, list]])
    const tampered = { ...events[1]!, payload: { ...events[1]!.payload, reason: 'changed' } }
    expect(verdicts(buildReplay('ui-auth-1', logs([events[0]!, tampered]))).map(v => v.signature)).toEqual(['valid', 'invalid'])
    expect(verdicts(buildReplay('ui-auth-1', logs([events[1]!]))).map(v => v.chain)).toEqual(['gap'])
    const rechained = { ...events[1]!, prev: '00'.repeat(32) }
    expect(verdicts(buildReplay('ui-auth-1', logs([events[0]!, rechained])))[1]).toMatchObject({ signature: 'invalid', chain: 'broken' })
  })

  it('two nodes\' views on one host keep separate sessions (the cookie is named per port)', async () => {
    const tokenB = newToken()
    const apiB = await startApiServer(b, { token: tokenB, port: 0 })
    try {
      const codeB = (await raw(`${apiB.url}/v1/ui/login-codes`, { method: 'POST', token: tokenB })).body as { code: string }
      const res = await fetch(`${apiB.url}/ui/login?code=${codeB.code}`, { redirect: 'manual' })
      const cookieB = (res.headers.get('set-cookie') ?? '').split(';')[0] ?? ''
      const nameB = uiSessionCookie(Number(new URL(apiB.url).port))
      expect(nameB).not.toBe(COOKIE)
      expect(cookieB.startsWith(`${nameB}=`)).toBe(true)
      const cookieA = `${COOKIE}=${await login()}`
      // a browser sends both cookies to both ports: each API takes its own and both sessions stay valid
      const both = `${cookieA}; ${cookieB}`
      expect((await raw(`${api.url}/v1/node`, { headers: { cookie: both } })).status).toBe(200)
      expect((await raw(`${apiB.url}/v1/node`, { headers: { cookie: both } })).status).toBe(200)
      // one node's session is not the other's
      expect((await raw(`${apiB.url}/v1/node`, { headers: { cookie: cookieA } })).status).toBe(401)
    } finally {
      await apiB.close()
    }
  })
})
