/**
 * A stream opened with the view's session (cookie + secret) ends with the
 * session. Found by session 46's review: it was checked once, when it opened,
 * so after a logout (or the session's expiry) the work stream kept handing
 * out run inputs and an event stream kept sending a task's events, with no
 * session. A logout ends them at once; a session pushed out by newer ones
 * (UI_MAX_SESSIONS) ends them within UI_SESSION_STREAMS_CHECK_MS. A stream
 * opened with the API token is not the view's, and stays.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { newToken } from '../src/api/files.ts'
import { startApiServer, type ApiServer } from '../src/api/server.ts'
import type { MeshNode } from '../src/node.ts'
import { UI_MAX_SESSIONS, UI_SECRET_FRAGMENT, UI_SECRET_HEADER, uiSessionCookie } from '../src/ui/constants.ts'
import { raw } from './api-helpers.ts'
import { startMesh, stopAll, until } from './helpers.ts'

describe('streams of a view session', () => {
  let nodes: MeshNode[]
  let api: ApiServer
  const token = newToken()

  beforeAll(async () => {
    nodes = await startMesh(1)
    api = await startApiServer(nodes[0]!, { token, port: 0 })
  })

  afterAll(async () => {
    await api?.close()
    await stopAll(nodes)
  })

  async function login (): Promise<{ cookie: string, secret: string }> {
    const code = await raw(`${api.url}/v1/ui/login-codes`, { method: 'POST', token })
    const res = await fetch(code.body.url, { redirect: 'manual' })
    const name = uiSessionCookie(Number(new URL(api.url).port))
    const cookie = (res.headers.get('set-cookie') ?? '').split(';')[0]!
    expect(cookie.startsWith(`${name}=`)).toBe(true)
    const secret = new RegExp(`#${UI_SECRET_FRAGMENT}=(.+)$`).exec(res.headers.get('location') ?? '')![1]!
    return { cookie, secret }
  }

  it('ends the streams a session opened when the session ends (Log out)', async () => {
    const { cookie, secret } = await login()
    const headers = { cookie, [UI_SECRET_HEADER]: secret, accept: 'text/event-stream' }
    const ctl = new AbortController()
    try {
      const work = await fetch(`${api.url}/v1/work/stream`, { headers, signal: ctl.signal })
      expect(work.status).toBe(200)
      const events = await fetch(`${api.url}/v1/events/task-ui-logout/stream?history=false`, { headers, signal: ctl.signal })
      expect(events.status).toBe(200)
      await until(() => api.stats().streams === 2, 'both streams open')

      const out = await raw(`${api.url}/ui/logout`, { method: 'POST', headers: { cookie, [UI_SECRET_HEADER]: secret } })
      expect(out.status).toBe(204)
      expect((await raw(`${api.url}/v1/node`, { headers: { cookie, [UI_SECRET_HEADER]: secret } })).status).toBe(401)
      // the session is gone: what it opened is closed too
      await until(() => api.stats().streams === 0, 'the session\'s streams closed after logout')
    } finally {
      ctl.abort()
    }
  })

  it('ends them when newer sessions push the session out, and leaves a stream of the API token open', async () => {
    const { cookie, secret } = await login()
    const ctl = new AbortController()
    try {
      const viewStream = await fetch(`${api.url}/v1/events/task-ui-pushed/stream?history=false`, { headers: { cookie, [UI_SECRET_HEADER]: secret, accept: 'text/event-stream' }, signal: ctl.signal })
      expect(viewStream.status).toBe(200)
      const tokenStream = await fetch(`${api.url}/v1/events/task-ui-pushed/stream?history=false`, { headers: { authorization: `Bearer ${token}`, accept: 'text/event-stream' }, signal: ctl.signal })
      expect(tokenStream.status).toBe(200)
      await until(() => api.stats().streams === 2, 'both streams open')
      for (let i = 0; i < UI_MAX_SESSIONS; i++) await login()
      expect((await raw(`${api.url}/v1/node`, { headers: { cookie, [UI_SECRET_HEADER]: secret } })).status).toBe(401)
      await until(() => api.stats().streams === 1, 'the pushed-out session\'s stream to close')
      // the token's stream goes on: it still gets what happens on the correlation
      const reader = tokenStream.body!.getReader()
      const first = new TextDecoder().decode((await reader.read()).value)
      expect(first).toMatch(/event: ready/)
    } finally {
      ctl.abort()
    }
  })
})
