/**
 * The view's session cookie among cookies of the same name tossed by a server
 * on another port of the host (cookies are not scoped by port, and one set
 * with a longer Path is sent first). Found by session 49's review: only the
 * first value was looked at, so `name=junk; Path=/v1` from any local server
 * refused every API call of the user's tab, across new logins, until the
 * user cleared cookies. The first value that is a live session counts, among
 * at most UI_SESSION_COOKIE_VALUES_MAX. Also: refused logins, which any web
 * page can make the browser ask for, are counted and logged at debug only.
 * Real node, real HTTP.
 */
import { Writable } from 'node:stream'
import { pino } from 'pino'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { newToken } from '../src/api/files.ts'
import { NodeMetrics } from '../src/api/metrics.ts'
import { startApiServer, type ApiServer } from '../src/api/server.ts'
import type { MeshNode } from '../src/node.ts'
import { UI_SECRET_FRAGMENT, UI_SECRET_HEADER, UI_SESSION_COOKIE_VALUES_MAX, uiSessionCookie } from '../src/ui/constants.ts'
import { raw } from './api-helpers.ts'
import { startMesh, stopAll } from './helpers.ts'

describe('the view\'s session cookie among tossed ones', () => {
  let nodes: MeshNode[]
  let api: ApiServer
  const metrics = new NodeMetrics()
  let COOKIE = ''
  const token = newToken()
  const lines: Array<{ level: number, msg: string }> = []

  beforeAll(async () => {
    nodes = await startMesh(1)
    const sink = new Writable({
      write (chunk: Buffer, _enc, done) {
        for (const line of chunk.toString('utf8').split('\n')) if (line !== '') lines.push(JSON.parse(line))
        done()
      }
    })
    api = await startApiServer(nodes[0]!, { token, port: 0, logger: pino({ level: 'info' }, sink), metrics })
    COOKIE = uiSessionCookie(Number(new URL(api.url).port))
  })

  afterAll(async () => {
    await api.close()
    await stopAll(nodes)
  })

  async function login (): Promise<{ cookie: string, secret: string }> {
    const { body } = await raw(`${api.url}/v1/ui/login-codes`, { method: 'POST', token })
    const res = await fetch(body.url, { redirect: 'manual' })
    const session = new RegExp(`^${COOKIE}=([^;]+)`).exec(res.headers.get('set-cookie') ?? '')?.[1]
    const secret = new RegExp(`^/ui#${UI_SECRET_FRAGMENT}=([A-Za-z0-9_-]+)$`).exec(res.headers.get('location') ?? '')?.[1]
    if (session === undefined || secret === undefined) throw new Error('no session from the login')
    return { cookie: `${COOKIE}=${session}`, secret }
  }

  it('takes the live session among junk values of its cookie name, for the API, the page and the logout', async () => {
    const { cookie, secret } = await login()
    // what the browser sends after a server on another port set `<name>=junk; Path=/v1`: the longer path first
    const tossed = `${COOKIE}=junk; other=1; ${cookie}`
    const node = await raw(`${api.url}/v1/node`, { headers: { cookie: tossed, [UI_SECRET_HEADER]: secret } })
    expect(node.status).toBe(200)
    expect(node.body.agent_id).toBe(nodes[0]!.agentId)
    expect((await raw(`${api.url}/ui`, { headers: { cookie: `${COOKIE}=junk; ${cookie}` } })).status).toBe(200)
    expect((await raw(`${api.url}/ui/assets/app.js`, { headers: { cookie: `${COOKIE}=junk; ${cookie}` } })).status).toBe(200)
    // a live session with the wrong secret is still refused, junk or not
    const wrong = await raw(`${api.url}/v1/node`, { headers: { cookie: tossed, [UI_SECRET_HEADER]: 'nope' } })
    expect(wrong.status).toBe(401)
    expect(wrong.body.error.details.reason).toBe('ui_secret')
    // and the values looked at are bounded: a live one behind too many junk ones is not found for the page; an API
    // call is found by its secret, whatever cookies come with it (session 59's review: a replaced cookie logged the view out)
    const flood = `${Array.from({ length: UI_SESSION_COOKIE_VALUES_MAX }, (_, i) => `${COOKIE}=junk${i}`).join('; ')}; ${cookie}`
    expect((await raw(`${api.url}/ui`, { headers: { cookie: flood } })).status).toBe(401)
    expect((await raw(`${api.url}/v1/node`, { headers: { cookie: flood, [UI_SECRET_HEADER]: secret } })).status).toBe(200)
    expect((await raw(`${api.url}/ui/logout`, { method: 'POST', headers: { cookie: tossed, [UI_SECRET_HEADER]: secret } })).status).toBe(204)
    expect((await raw(`${api.url}/v1/node`, { headers: { cookie: tossed, [UI_SECRET_HEADER]: secret } })).status).toBe(401)
  })

  it('counts refused logins and logs them below info (any page can make the browser ask)', async () => {
    const before = api.ui.loginRefusals
    for (const q of ['?code=nope', '', '?code=']) {
      expect((await fetch(`${api.url}/ui/login${q}`, { redirect: 'manual' })).status).toBe(401)
    }
    expect(api.ui.loginRefusals).toBe(before + 3)
    // and in the node's metrics, where an operator watching for someone guessing codes sees them
    expect(await metrics.text()).toContain(`aap_errors_total{code="UNAUTHORIZED",source="ui_login"} ${before + 3}`)
    expect(lines.filter(l => l.msg.startsWith('UI login refused'))).toEqual([])
    // a good login is still logged at info
    await login()
    expect(lines.some(l => l.msg === 'UI login' && l.level === 30)).toBe(true)
  })
})
