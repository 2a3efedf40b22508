/**
 * The node's browser view in a real headless browser (Debian's chromium,
 * driven by playwright-core; installed with apt-get when missing), against
 * real processes: two `aap-mesh start` nodes on TCP loopback and the Python
 * sidecar agent beside the second. The page refuses to show itself without a
 * login; `aap-mesh ui` gives a one-time link; from the page's form node 1
 * delegates to the agent; the run appears and is seen blocked; the checkpoint
 * is resolved on the page; and the timeline, updated live, shows delegate,
 * block, resume and complete with the agent's checkpoint, every event's
 * signature and chain verified.
 */
import type { Page } from 'playwright-core'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { openBrowser, type Browser } from '../scripts/lib/chromium.ts'
import { raw } from './api-helpers.ts'
import { cli, NodeProc, Proc, TempDirs } from './cli-helpers.ts'

const CAP = 'cap:summarize@1.0.0'
/** Each wait for the page gives up after this long. */
const PAGE_WAIT_MS = 30_000
/** Installing chromium (apt-get) when it is missing may take minutes. */
const SETUP_TIMEOUT_MS = 600_000

describe('the browser view, driven in headless chromium against node processes and a sidecar agent', () => {
  const dirs = new TempDirs()
  const procs: Proc[] = []
  let a: NodeProc
  let apiA: string
  let bId: string
  let agent: Proc
  let browser: Browser
  let page: Page

  function track<T extends Proc> (p: T): T {
    procs.push(p)
    return p
  }

  beforeAll(async () => {
    const [dirA, dirB] = [await dirs.make(), await dirs.make()]
    a = track(new NodeProc(dirA, ['--name', 'coordinator']))
    const sa = await a.started()
    apiA = sa.api
    const b = track(new NodeProc(dirB, ['--bootstrap', sa.addresses[0]!]))
    bId = (await b.started()).agentId
    agent = track(new Proc('python3', ['examples/python-agent.py', '--data-dir', dirB, '--name', 'summarizer']))
    await agent.event('ready')
    browser = await openBrowser()
    page = await browser.context.newPage()
  }, SETUP_TIMEOUT_MS)

  afterAll(async () => {
    await browser?.close()
    await Promise.all(procs.map(async p => p.stop('SIGKILL')))
    await dirs.cleanup()
  })

  it('refuses the page and the API to a browser without the login', async () => {
    const res = await page.goto(`${apiA}/ui`)
    expect(res?.status()).toBe(401)
    expect(await page.textContent('body')).toContain('aap-mesh ui')
    // nothing of the view's script ran: it is refused too
    expect(await page.$('body[data-ready]')).toBeNull()
    const api = await page.evaluate(async (url) => (await fetch(`${url}/v1/runs`)).status, apiA)
    expect(api).toBe(401)
    expect((await raw(`${apiA}/ui/assets/app.js`)).status).toBe(401)
  })

  it('logs in with the one-time link of `aap-mesh ui`, which works once and leaves the address bar clean', async () => {
    const ui = await cli(['ui', '--no-open', '--json', '--data-dir', a.dataDir])
    expect(ui.code, ui.stderr).toBe(0)
    const link = ui.json.url as string
    expect(link.startsWith(`${apiA}/ui/login?code=`)).toBe(true)
    await page.goto(link)
    await page.waitForSelector('body[data-ready="true"]', { timeout: PAGE_WAIT_MS })
    expect(page.url()).toBe(`${apiA}/ui`)
    expect(await page.textContent('#who-name')).toBe('coordinator')
    // the link is spent
    expect((await fetch(link, { redirect: 'manual' })).status).toBe(401)
  })

  it('delegates from the form, shows the run blocked, resolves the checkpoint and draws the timeline live', async () => {
    await page.click('nav a[data-view="runs"]')
    await page.fill('#delegate-form [name="capability"]', CAP)
    await page.fill('#delegate-form [name="to_agent"]', bId)
    await page.fill('#delegate-form [name="task_id"]', 'task-ui')
    await page.fill('#delegate-form [name="input"]', '{"text": "The mesh has no broker. Every node is equal."}')
    await page.click('#delegate-form button[type="submit"]')

    // the run appears, then the agent blocks it on its checkpoint
    const row = await page.waitForSelector('#runs tr[data-side="delegated"]', { timeout: PAGE_WAIT_MS })
    const runId = await row.getAttribute('data-run')
    expect(runId).toMatch(new RegExp(`^${bId}:`))
    const blocked = await agent.event('blocked', l => l.run_id === runId)
    const checkpoint = blocked.checkpoint_id as string
    await page.waitForSelector(`#runs tr[data-run="${runId}"][data-state="blocked"]`, { timeout: PAGE_WAIT_MS })
    expect(await page.textContent(`#runs tr[data-run="${runId}"]`)).toContain(checkpoint)

    // open the task's timeline from the list and resolve the checkpoint there
    await page.click(`#runs tr[data-run="${runId}"] a`)
    const form = await page.waitForSelector(`form.checkpoint[data-checkpoint="${checkpoint}"]`, { timeout: PAGE_WAIT_MS })
    expect(await page.$(`svg.tl g.pause.open[data-checkpoint="${checkpoint}"]`)).not.toBeNull()
    // the page follows the task's events over SSE (read with fetch, which sends the session's secret)
    await page.waitForSelector('#live:not(.off)', { timeout: PAGE_WAIT_MS })
    await form.$eval('textarea', (t, v) => { (t as unknown as { value: string }).value = v }, '{"approved": true, "by": "the page"}')
    await (await form.$('button[type="submit"]'))!.click()
    const resumed = await agent.event('resumed', l => l.run_id === runId)
    expect(resumed.resolution).toEqual({ approved: true, by: 'the page' })
    await agent.event('completed', l => l.run_id === runId)

    // the timeline catches up from the event stream, without a reload
    await page.waitForSelector('#transitions li[data-kind="complete"]', { timeout: PAGE_WAIT_MS })
    const transitions = await page.$$eval('#transitions li', lis => lis.map(li => {
      const d = (li as unknown as { dataset: Record<string, string | undefined> }).dataset
      return [d.kind, d.checkpoint ?? null]
    }))
    expect(transitions).toEqual([['delegate', null], ['progress', null], ['block', checkpoint], ['resume', checkpoint], ['complete', null]])
    expect(await page.textContent('#transitions li[data-kind="resume"]')).toContain('{"approved":true,"by":"the page"}')
    // one pause, closed, with its checkpoint and resolution
    const pause = await page.waitForSelector(`svg.tl g.pause:not(.open)[data-checkpoint="${checkpoint}"]`, { timeout: PAGE_WAIT_MS })
    expect(await pause.textContent()).toContain('"approved":true')
    expect(await page.$$eval('svg.tl g.ev', gs => gs.map(g => (g as unknown as { dataset: { kind: string } }).dataset.kind)))
      .toEqual(['started', 'progress', 'blocked', 'resume', 'completed'])
    // every event's signature and chain link verified, nothing flagged
    expect(await page.$$('svg.tl .verdict.good')).toHaveLength(5)
    expect(await page.$$('.verdict.bad')).toHaveLength(0)
    expect(await page.$$('#events tr[data-event]')).toHaveLength(5)
    expect(await page.textContent('#task-summary')).toContain('5 of 5 signatures and chain links verified')

    // and the run list says completed
    await page.click('nav a[data-view="runs"]')
    await page.waitForSelector(`#runs tr[data-run="${runId}"][data-state="completed"]`, { timeout: PAGE_WAIT_MS })
  })

  it('shows the peer and its connection, and cannot resolve a checkpoint a second time', async () => {
    await page.click('nav a[data-view="node"]')
    const peer = await page.waitForSelector(`#peers tr[data-peer="${bId}"]`, { timeout: PAGE_WAIT_MS })
    expect(await peer.textContent()).toContain('direct')
    expect(await peer.textContent()).toContain('/aap/delegate/0.1.0')
    // the same authorization as the API: resuming a completed run is refused, and said so
    const status = await page.evaluate(async ({ url, run }) => {
      const res = await fetch(`${url}/v1/runs/${encodeURIComponent(run)}/resume`, {
        method: 'POST', headers: { 'content-type': 'application/json', 'x-aap-ui': sessionStorage.getItem('aap-ui-secret') ?? '' }, body: JSON.stringify({ resolution: {} })
      })
      return res.status
    }, { url: apiA, run: (await page.getAttribute('#node-runs tr[data-node-run]', 'data-node-run'))! })
    expect(status).toBe(409)
  })
})
