/**
 * The view's timeline load when the request fails in the network (no answer,
 * so no ApiError). Found by session 59's review: the load's catch read
 * `err.details.reason`, which threw for a TypeError, so the notice said
 * "Cannot read properties of undefined (reading 'reason')" and the task's
 * summary showed an empty code. Headless chromium, real node; the timeline
 * request is cut by the browser (connection reset).
 */
import type { Page } from 'playwright-core'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { openBrowser, type Browser } from '../scripts/lib/chromium.ts'
import { newToken } from '../src/api/files.ts'
import { startApiServer, type ApiServer } from '../src/api/server.ts'
import type { MeshNode } from '../src/node.ts'
import { raw } from './api-helpers.ts'
import { startMesh, stopAll } from './helpers.ts'

/** Each wait for a page gives up after this long. */
const PAGE_WAIT_MS = 30_000
/** Installing chromium (apt-get) when it is missing may take minutes. */
const SETUP_TIMEOUT_MS = 600_000

describe('the view\'s timeline when its request fails in the network', () => {
  let nodes: MeshNode[]
  let api: ApiServer
  let browser: Browser
  let page: Page
  const token = newToken()

  beforeAll(async () => {
    nodes = await startMesh(1)
    api = await startApiServer(nodes[0]!, { token, port: 0 })
    browser = await openBrowser()
    page = await browser.context.newPage()
  }, SETUP_TIMEOUT_MS)

  afterAll(async () => {
    await browser?.close()
    await api.close()
    await stopAll(nodes)
  })

  it('names the network failure in the task\'s summary, not a TypeError of its own', async () => {
    const code = await raw(`${api.url}/v1/ui/login-codes`, { method: 'POST', token })
    await page.goto(code.body.url)
    await page.waitForSelector('body[data-ready="true"]', { timeout: PAGE_WAIT_MS })
    let cut = 0
    await page.route('**/timeline?**', async (route) => {
      cut++
      await route.abort('connectionreset')
    })
    await page.goto(`${api.url}/ui#task/task-x`)
    await page.waitForSelector('#task-summary .error', { timeout: PAGE_WAIT_MS })
    expect(cut).toBeGreaterThan(0)
    const summary = (await page.textContent('#task-summary .error')) ?? ''
    expect(summary).toMatch(/^error: Failed to fetch/)
    expect(await page.textContent('#notice')).not.toContain('reading \'reason\'')
    // a failed load does not lock the view
    expect(await page.getAttribute('body', 'data-locked')).toBeNull()
  }, 120_000)
})
