/**
 * The executor's view of a task id two delegators used, both with the card
 * name "alice" (a card's name is its holder's own choice). Found by session
 * 56's review: the view named agents by their card's name alone, so the two
 * owner buttons, and the timeline's "from alice", could not tell the owner
 * from a stranger copying its name; and the task summary never showed the
 * replay's lineage facts (runs rejected from the task, participants that did
 * not answer, forks). Each agent is now shown with its id beside its name,
 * and the summary lists the rejected run with its reason. Headless chromium
 * (Debian's), real nodes.
 */
import type { Page } from 'playwright-core'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { openBrowser, type Browser } from '../scripts/lib/chromium.ts'
import { newToken } from '../src/api/files.ts'
import { startApiServer, type ApiServer } from '../src/api/server.ts'
import type { MeshNode } from '../src/node.ts'
import { raw } from './api-helpers.ts'
import { startMesh, stopAll, until } from './helpers.ts'
import { shortId } from './ui-short-id.ts'

const PAGE_WAIT_MS = 30_000
const CAP = { capability_id: 'cap:same-name', version: '1.0.0' }
const TASK = 'task-ui-same-name'

describe('the executor\'s view of two delegators with one card name', () => {
  let nodes: MeshNode[]
  let A: MeshNode, B: MeshNode, C: MeshNode
  let api: ApiServer | undefined
  let browser: Browser | undefined
  let page: Page
  const token = newToken()

  beforeAll(async () => {
    nodes = await startMesh(3)
    ;[A, B, C] = nodes as [MeshNode, MeshNode, MeshNode]
    B.runs.handle(CAP, async () => ({ ok: true }))
    await B.publishCard({ name: 'exec', capabilities: [CAP] })
    await A.publishCard({ name: 'alice', capabilities: [] })
    await C.publishCard({ name: 'alice', capabilities: [] })
    await B.host.dial(A.host.getMultiaddrs()[0]!)
    await B.host.dial(C.host.getMultiaddrs()[0]!)
    api = await startApiServer(B, { token, port: 0 })
    browser = await openBrowser()
    page = await browser.context.newPage()
  }, 300_000)

  afterAll(async () => {
    await browser?.close()
    await api?.close()
    await stopAll(nodes)
  })

  it('shows each delegator\'s id beside its name, and lists the run rejected from the owner\'s task', async () => {
    const ra = await A.delegate({ to_agent: B.agentId, task_id: TASK, capability: CAP, input: {} })
    const rc = await C.delegate({ to_agent: B.agentId, task_id: TASK, capability: CAP, input: {} })
    await until(async () => (await B.getRun(ra.run_id)).state === 'completed' && (await B.getRun(rc.run_id)).state === 'completed', 'both runs done')

    // log in, and wait until the view knows both delegators' card names (from its peers list)
    const code = await raw(`${api!.url}/v1/ui/login-codes`, { method: 'POST', token })
    await page.goto(code.body.url)
    await page.waitForSelector('body[data-ready="true"]', { timeout: PAGE_WAIT_MS })
    await until(async () => {
      const rows = await page.$$eval('#peers tr[data-peer]', trs => trs.map(tr => [tr.getAttribute('data-peer'), tr.textContent ?? '']))
      return [A.agentId, C.agentId].every(id => rows.some(([p, text]) => p === id && text.includes('alice')))
    }, 'the view to know both names', PAGE_WAIT_MS)

    // the task names no owner: the view offers both, each named by its id as well as its name
    await page.evaluate(`location.hash = ${JSON.stringify(`#task/${TASK}`)}`)
    await page.waitForSelector('#task-summary button[data-owner]', { timeout: PAGE_WAIT_MS })
    const buttons = await page.$$eval('#task-summary button[data-owner]', bs => bs.map(b => ({ owner: b.getAttribute('data-owner') ?? '', text: b.textContent ?? '', title: b.getAttribute('title') })))
    expect(buttons.map(b => b.owner).sort()).toEqual([A.agentId, C.agentId].sort())
    expect(new Set(buttons.map(b => b.text)).size).toBe(2)
    for (const b of buttons) {
      expect(b.text).toContain('alice')
      expect(b.text).toContain(shortId(b.owner))
      expect(b.title).toBe(b.owner)
    }

    // A's task, or C's when the node already follows the task id as C's (owner_conflict: the view offers that one)
    await page.click(`#task-summary button[data-owner="${A.agentId}"]`)
    const shown = await page.waitForSelector('#task-summary [data-rejected-run], #task-summary button[data-owner]', { timeout: PAGE_WAIT_MS })
    let [owner, other] = [A.agentId, rc.run_id]
    if (await shown.getAttribute('data-owner') !== null) {
      expect(await page.$eval('#task-summary', s => s.textContent ?? '')).toContain(`as the task of ${C.agentId}`)
      expect(await shown.getAttribute('data-owner')).toBe(C.agentId)
      ;[owner, other] = [C.agentId, ra.run_id]
      await shown.click()
    }
    // its run "from" its owner by id, and the other's run listed as not this task's (foreign_owner)
    const rejected = await page.waitForSelector(`#task-summary [data-rejected-run="${other}"]`, { timeout: PAGE_WAIT_MS })
    expect(await rejected.getAttribute('data-reason')).toBe('foreign_owner')
    expect(await rejected.textContent()).toContain('foreign_owner')
    await page.waitForSelector('#timeline svg text.from', { timeout: PAGE_WAIT_MS })
    const from = await page.$$eval('#timeline svg text.from', ts => ts.map(t => ({ text: t.textContent ?? '', title: t.querySelector('title')?.textContent ?? '' })))
    expect(from).toHaveLength(1)
    expect(from[0]!.text).toContain('alice')
    expect(from[0]!.text).toContain(shortId(owner))
    expect(from[0]!.title).toBe(owner)
    const delegate = await page.$eval('#transitions li[data-kind="delegate"]', li => li.innerHTML)
    expect(delegate).toContain(`title="${owner}"`)
    expect(delegate).toContain(shortId(owner))
  }, 180_000)
})
