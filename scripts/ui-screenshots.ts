/**
 * Remake the screenshots of the node's browser view in docs/:
 *
 *   node scripts/ui-screenshots.ts [--out docs]
 *
 * Three nodes in this process, on TCP loopback: "coordinator" (whose view is
 * shown), "summarizer" and "fact-checker". From the page's own form the
 * coordinator delegates a summary to the summarizer, which reports a turn,
 * blocks on a checkpoint; the checkpoint is resolved on the page; the
 * summarizer then sub-delegates a fact check to the fact-checker and hands the
 * run off to it, which publishes. That is a three-run timeline with a
 * sub-delegation and a handoff, taken as docs/ui-timeline.png; the node view
 * (card, peers, runs at a glance) is docs/ui-node.png, and the runs view with
 * the run blocked on its checkpoint is docs/ui-runs.png, its timeline with
 * the checkpoint's form docs/ui-blocked.png, and a discovery by capability
 * docs/ui-discover.png.
 */
import { mkdir } from 'node:fs/promises'
import { join, resolve } from 'node:path'
import { parseOptions } from './lib/options.ts'
import { ApiClient } from '../src/api/client.ts'
import { newToken } from '../src/api/files.ts'
import { startApiServer } from '../src/api/server.ts'
import type { CapabilityRef } from '../src/card/card.ts'
import { createMeshNode, type MeshNode } from '../src/node.ts'
import { openBrowser } from './lib/chromium.ts'

const args = parseOptions({ out: { type: 'string', default: 'docs' } }, 'usage: node scripts/ui-screenshots.ts [--out docs]')
const out = resolve(args.out)
const SUMMARIZE: CapabilityRef = { capability_id: 'cap:summarize', version: '1.0.0' }
const FACT_CHECK: CapabilityRef = { capability_id: 'cap:fact-check', version: '1.0.0' }
/** Every wait of this script gives up after this long. */
const WAIT_MS = 30_000

async function until (what: string, check: () => Promise<boolean>): Promise<void> {
  const deadline = Date.now() + WAIT_MS
  while (!(await check())) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`)
    await new Promise(resolve => setTimeout(resolve, 100))
  }
}

async function node (name: string, description: string, capabilities: CapabilityRef[], tags: string[]): Promise<MeshNode> {
  const n = await createMeshNode({ listen: ['/ip4/127.0.0.1/tcp/0'] })
  await n.start()
  await n.publishCard({ name, description, capabilities, tags })
  return n
}

const coordinator = await node('coordinator', 'Plans the work and approves checkpoints', [], ['ops'])
const summarizer = await node('summarizer', 'Summarizes documents, with a human check', [SUMMARIZE], ['text', 'review'])
const checker = await node('fact-checker', 'Checks claims and publishes', [FACT_CHECK, SUMMARIZE], ['text'])
const nodes = [coordinator, summarizer, checker]
await summarizer.join(coordinator.addresses)
await checker.join(coordinator.addresses)
await checker.join(summarizer.addresses)

summarizer.runs.handle(SUMMARIZE, async (ctx) => {
  await ctx.progress({ step: 'read', turn: 1, words: 1840 })
  const resolution = await ctx.block('approve the outline before drafting', 'approve-outline')
  const check = await summarizer.delegate({ to_agent: checker.agentId, task_id: ctx.run.correlation_id, capability: FACT_CHECK, input: { claims: 3 }, parent_run: ctx.run.run_id })
  await until('the fact check', async () => (await summarizer.getRun(check.run_id)).state === 'completed')
  await ctx.progress({ step: 'drafted', turn: 2, artifacts: [{ name: 'draft.md' }] })
  await ctx.handoff(checker.agentId, { draft: 'draft.md', notes: resolution.notes ?? '' })
})
checker.runs.handle(FACT_CHECK, async (ctx) => {
  await ctx.progress({ step: 'checked', turn: 1, artifact: { name: 'claims.json' } })
  return { verified: ctx.input.claims }
})
checker.runs.handle(SUMMARIZE, async (ctx) => {
  await ctx.progress({ step: 'publishing', artifacts: [{ name: 'summary.md' }, { name: 'summary.html' }] })
  return { published: true }
})

const token = newToken()
const api = await startApiServer(coordinator, { token, port: 0 })
const browser = await openBrowser({ width: 1440, height: 900 })
try {
  await mkdir(out, { recursive: true })
  const page = await browser.context.newPage()
  const login = await new ApiClient(api.url, token).call<{ url: string }>('POST', '/v1/ui/login-codes')
  await page.goto(login.url)
  await page.waitForSelector('body[data-ready="true"]', { timeout: WAIT_MS })

  // delegate from the page's form
  await page.click('nav a[data-view="runs"]')
  await page.fill('#delegate-form [name="capability"]', 'cap:summarize@1.0.0')
  await page.fill('#delegate-form [name="to_agent"]', summarizer.agentId)
  await page.fill('#delegate-form [name="task_id"]', 'brief-2026-11')
  await page.fill('#delegate-form [name="input"]', '{"doc": "quarterly-report.pdf"}')
  await page.click('#delegate-form button[type="submit"]')
  await page.waitForSelector('#runs tr[data-state="blocked"]', { timeout: WAIT_MS })
  await page.fill('#delegate-form [name="task_id"]', 'brief-2026-12')
  await page.screenshot({ path: join(out, 'ui-runs.png') })

  // resolve the checkpoint on the timeline
  await page.goto(`${api.url}/ui#task/brief-2026-11`)
  await page.waitForSelector('form.checkpoint[data-checkpoint="approve-outline"]', { timeout: WAIT_MS })
  await page.waitForSelector('#live:not([hidden])', { timeout: WAIT_MS })
  await page.screenshot({ path: join(out, 'ui-blocked.png') })
  await page.fill('form.checkpoint textarea', '{"approved": true, "notes": "keep it to one page"}')
  await page.click('form.checkpoint button[type="submit"]')
  await page.waitForFunction(() => {
    const doc = (globalThis as any).document
    return doc.querySelectorAll('svg.tl .lane-label').length === 3 &&
      doc.querySelectorAll('#transitions li[data-kind="complete"]').length === 2 &&
      doc.querySelector('#transitions li[data-kind="handoff"]') !== null
  }, undefined, { timeout: WAIT_MS })
  const timeline = await page.$('#view-task article.panel')
  await timeline?.screenshot({ path: join(out, 'ui-timeline.png') })

  // the node view, peers with their round trips
  await page.click('nav a[data-view="node"]')
  await page.waitForFunction(() => {
    const doc = (globalThis as any).document
    return doc.querySelectorAll('#peers tr[data-peer]').length === 2 &&
      [...doc.querySelectorAll('#peers td.num')].every((td: any) => td.textContent !== '—')
  }, undefined, { timeout: WAIT_MS })
  await page.screenshot({ path: join(out, 'ui-node.png'), fullPage: true })

  // discover by capability
  await page.click('nav a[data-view="discover"]')
  await page.fill('#discover-form [name="capability"]', 'cap:summarize')
  await page.click('#discover-form button[type="submit"]')
  await page.waitForFunction(() => (globalThis as any).document.querySelectorAll('.agent-card').length === 2, undefined, { timeout: WAIT_MS })
  await page.screenshot({ path: join(out, 'ui-discover.png') })
  process.stdout.write(`wrote ${['ui-node.png', 'ui-runs.png', 'ui-blocked.png', 'ui-timeline.png', 'ui-discover.png'].map(f => join(out, f)).join(', ')}\n`)
} finally {
  await browser.close()
  await api.close()
  await Promise.all(nodes.map(async n => n.stop()))
}
