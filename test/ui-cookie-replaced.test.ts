/**
 * A server on another port of 127.0.0.1 replaces the view's session cookie
 * (cookies are not scoped by port, and a server's Set-Cookie may replace an
 * HttpOnly one). Found by session 59's review: an API call needed a live
 * cookie before its secret was looked at, so `aap_ui_session_<port>=junk;
 * Path=/` from any local page logged the view out at will. The secret the
 * tab holds names its session, whatever cookie comes with it; the cookie
 * alone still drives nothing. Headless chromium, real node.
 */
import type { Page } from 'playwright-core'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import type { Browser } from '../scripts/lib/chromium.ts'
import type { ApiServer } from '../src/api/server.ts'
import type { MeshNode } from '../src/node.ts'
import { UI_SECRET_HEADER, uiSessionCookie } from '../src/ui/constants.ts'
import { raw } from './api-helpers.ts'
import { startMesh, stopAll } from './helpers.ts'
import {
  closeView, openView, PAGE_WAIT_MS, SECRET_KEY, serveOtherPort, SETUP_TIMEOUT_MS, type OtherPort, type View
} from './fixtures/view.ts'

describe('the view\'s session cookie replaced by a server on another port', () => {
  let nodes: MeshNode[]
  let view: View | undefined
  let evil: OtherPort | undefined
  let api: ApiServer
  let evilUrl = ''
  let browser: Browser
  let page: Page
  let cookieName = ''

  beforeAll(async () => {
    nodes = await startMesh(1)
    view = await openView(nodes[0]!)
    api = view.api
    browser = view.browser
    page = view.page
    cookieName = uiSessionCookie(Number(new URL(api.url).port))
    evil = await serveOtherPort((_req, res) => {
      res.writeHead(200, { 'content-type': 'text/html', 'set-cookie': `${cookieName}=junk; Path=/` })
      res.end('<!doctype html><title>elsewhere</title>')
    })
    evilUrl = evil.url
  }, SETUP_TIMEOUT_MS)

  afterAll(async () => {
    await closeView(view)
    await evil?.close()
    await stopAll(nodes)
  })

  /** What the view's tab gets for GET /v1/node, made as the page makes its calls (its secret in the header, its cookies). */
  async function nodeStatus (): Promise<number> {
    return page.evaluate(async ([header, key]) => {
      const res = await fetch('/v1/node', { headers: { [header!]: sessionStorage.getItem(key!) ?? '' }, credentials: 'same-origin' })
      return res.status
    }, [UI_SECRET_HEADER, SECRET_KEY])
  }

  it('keeps the tab that holds the secret logged in; the cookie alone still drives nothing', async () => {
    await view!.logIn(PAGE_WAIT_MS)
    expect(await nodeStatus()).toBe(200)
    const live = (await browser.context.cookies(api.url)).find(c => c.name === cookieName)?.value

    const other = await browser.context.newPage()
    await other.goto(`${evilUrl}/`)
    await other.close()
    // the browser now holds the junk value in place of the session's
    expect((await browser.context.cookies(api.url)).filter(c => c.name === cookieName).map(c => c.value)).toEqual(['junk'])

    expect(await nodeStatus()).toBe(200)
    // the session's cookie without its secret, or with a wrong one, is still refused
    const cookie = `${cookieName}=${live ?? ''}`
    expect((await raw(`${api.url}/v1/node`, { headers: { cookie } })).status).toBe(401)
    expect((await raw(`${api.url}/v1/node`, { headers: { cookie, [UI_SECRET_HEADER]: 'nope' } })).status).toBe(401)

    // Log out still ends the session on the node: its secret and its cookie then drive nothing
    const secret = (await page.evaluate((k) => sessionStorage.getItem(k), SECRET_KEY))!
    expect((await raw(`${api.url}/v1/node`, { headers: { [UI_SECRET_HEADER]: secret } })).status).toBe(200)
    await page.click('#logout')
    await page.waitForSelector('body[data-locked="true"]', { timeout: PAGE_WAIT_MS })
    expect((await raw(`${api.url}/v1/node`, { headers: { [UI_SECRET_HEADER]: secret } })).status).toBe(401)
    expect((await raw(`${api.url}/ui`, { headers: { cookie } })).status).toBe(401)
  }, 120_000)
})
