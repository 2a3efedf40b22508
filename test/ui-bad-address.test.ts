/**
 * The view opened at an address with a malformed escape (#task/%E0). Found
 * by session 56's review: decodeURIComponent threw in route(), which ended
 * main() before the view's polling started (the page said only "Could not
 * load the node"). Now it says the address names no task, and the view
 * starts. Headless chromium (Debian's), a real node.
 */
import type { Page } from 'playwright-core'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import type { MeshNode } from '../src/node.ts'
import { closeView, openView, type View } from './fixtures/view.ts'
import { startLoneNodes, stopAll } from './helpers.ts'

const PAGE_WAIT_MS = 30_000

describe('the view at a malformed task address', () => {
  let nodes: MeshNode[]
  let view: View | undefined
  let page: Page

  beforeAll(async () => {
    nodes = await startLoneNodes(1)
    view = await openView(nodes[0]!)
    page = view.page
  }, 120_000)

  afterAll(async () => {
    await closeView(view)
    await stopAll(nodes)
  })

  it('says the address names no task and starts the view', async () => {
    // logged in, at a well-formed task; then the page is loaded again at the malformed address
    await view!.openTask('task-ui-fine', PAGE_WAIT_MS)
    await page.evaluate('location.hash = "#node"')
    await page.evaluate('location.hash = "#task/%E0"')
    await page.reload()
    await page.waitForSelector('#notice:not([hidden])', { timeout: PAGE_WAIT_MS })
    expect(await page.$eval('#notice', n => n.textContent ?? '')).toContain('names no task')
    // main() went on: the view is ready and polls the node
    await page.waitForSelector('body[data-ready="true"]', { timeout: PAGE_WAIT_MS })
    await page.waitForRequest(req => new URL(req.url()).pathname === '/v1/runs', { timeout: PAGE_WAIT_MS })
    expect(await page.$eval('body', b => b.dataset.locked ?? null)).toBeNull()
  }, 120_000)
})
