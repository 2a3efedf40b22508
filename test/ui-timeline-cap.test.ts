/**
 * The view's timeline operation answers with a task's newest events only,
 * each payload once. Found by session 56's review: it answered with the
 * whole replay, each event's payload three times (the runs' events, the
 * events, the progress transitions), though the view draws only the newest
 * UI_EVENTS_SHOWN_MAX; an executor's 400 progress events of 8 KiB made a
 * 10 MB answer, fetched again after every burst. Now `max_events` (default
 * and most UI_TIMELINE_EVENTS_MAX) bounds it, `omitted` counts the rest, and
 * the page still draws the task. Real nodes, headless chromium (Debian's).
 */
import type { Page } from 'playwright-core'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import doc from '../protocols/api.openapi.json' with { type: 'json' }
import { openBrowser, type Browser } from '../scripts/lib/chromium.ts'
import { newToken } from '../src/api/files.ts'
import { responseValidator } from '../src/api/openapi.ts'
import { startApiServer, type ApiServer } from '../src/api/server.ts'
import type { MeshNode } from '../src/node.ts'
import { UI_EVENTS_SHOWN_MAX, UI_TIMELINE_EVENTS_MAX } from '../src/ui/constants.ts'
import { raw } from './api-helpers.ts'
import { startMesh, stopAll, until } from './helpers.ts'

const PAGE_WAIT_MS = 60_000
const CAP = { capability_id: 'cap:bulky', version: '1.0.0' }
const TASK = 'task-ui-bulky'
const PROGRESS = 400
const BLOB_BYTES = 8 * 1024
/** A mark in each progress payload, found once per payload in the answer's text. */
const MARK = 'bulky-payload-'

describe('the timeline of a task with many big events', () => {
  let nodes: MeshNode[]
  let A: MeshNode, B: MeshNode
  let api: ApiServer | undefined
  let browser: Browser | undefined
  let page: Page
  const token = newToken()

  beforeAll(async () => {
    nodes = await startMesh(2)
    ;[A, B] = nodes as [MeshNode, MeshNode]
    B.runs.handle(CAP, async (ctx) => {
      for (let i = 0; i < PROGRESS; i++) await ctx.progress({ a: `${MARK}${i}-`, blob: 'x'.repeat(BLOB_BYTES) })
      return { steps: PROGRESS }
    })
    await B.publishCard({ name: 'bulky', capabilities: [CAP] })
    api = await startApiServer(A, { token, port: 0 })
    browser = await openBrowser()
    page = await browser.context.newPage()
  }, 300_000)

  afterAll(async () => {
    await browser?.close()
    await api?.close()
    await stopAll(nodes)
  })

  it('answers with at most the newest max_events, each payload once, counting what it leaves out, and the page draws them', async () => {
    const run = await A.delegate({ to_agent: B.agentId, task_id: TASK, capability: CAP, input: {} })
    await until(async () => (await A.getRun(run.run_id)).state === 'completed', 'the run to complete', 120_000)
    const all = PROGRESS + 2

    const ask = async (query: string): Promise<{ status: number, body: any, text: string }> => {
      const res = await fetch(`${api!.url}/v1/events/${TASK}/timeline?timeout_ms=5000&participant=${B.agentId}${query}`, { headers: { authorization: `Bearer ${token}` } })
      const text = await res.text()
      return { status: res.status, body: JSON.parse(text), text }
    }
    const t = await ask('')
    expect(t.status).toBe(200)
    const events = t.body.replay.events as Array<{ type: string, seq: number, payload: Record<string, unknown> }>
    expect(events.length).toBe(UI_TIMELINE_EVENTS_MAX)
    expect(responseValidator('timeline', 200)!(t.body)).toBe(true)
    // the newest: the last progress events and the completion
    expect(events.at(-1)!.type).toBe('run.completed')
    expect(Math.min(...events.map(e => e.seq))).toBe(all - UI_TIMELINE_EVENTS_MAX + 1)
    expect(t.body.omitted.events).toBe(all - UI_TIMELINE_EVENTS_MAX)
    expect(t.body.checked).toEqual({ events: all, passed: all })
    expect(t.body.verdicts).toHaveLength(UI_TIMELINE_EVENTS_MAX)
    // each payload once: the runs carry no events, the transitions no payloads
    const progress = events.filter(e => e.type === 'run.progress')
    expect(t.text.split(MARK).length - 1).toBe(progress.length)
    expect(t.text.split('x'.repeat(BLOB_BYTES)).length - 1).toBe(progress.length)
    expect(t.body.replay.runs[0].events).toBeUndefined()
    expect(t.body.replay.runs[0].event_count).toBe(all)
    expect(t.text.length).toBeLessThan(UI_TIMELINE_EVENTS_MAX * (BLOB_BYTES + 2048))

    // fewer when asked, never more
    const few = await ask('&max_events=10')
    expect(few.body.replay.events).toHaveLength(10)
    expect(few.body.omitted.events).toBe(all - 10)
    expect((await ask(`&max_events=${UI_TIMELINE_EVENTS_MAX + 1}`)).status).toBe(400)
    // the document's limit is the node's constant
    const param = doc.paths['/v1/events/{correlation_id}/timeline'].get.parameters.find((p: { name: string }) => p.name === 'max_events') as unknown as { schema: { maximum: number } } | undefined
    expect(param?.schema.maximum).toBe(UI_TIMELINE_EVENTS_MAX)
    expect(UI_TIMELINE_EVENTS_MAX).toBe(UI_EVENTS_SHOWN_MAX)

    // the page still draws the task: the newest events, saying how many older ones are left out
    const code = await raw(`${api!.url}/v1/ui/login-codes`, { method: 'POST', token })
    await page.goto(code.body.url)
    await page.waitForSelector('body[data-ready="true"]', { timeout: PAGE_WAIT_MS })
    await page.goto(`${api!.url}/ui#task/${TASK}`)
    await page.waitForSelector(`#events .more[data-hidden="${all - UI_EVENTS_SHOWN_MAX}"]`, { timeout: PAGE_WAIT_MS })
    expect(await page.$$('#events tr[data-event]')).toHaveLength(UI_EVENTS_SHOWN_MAX)
    expect(await page.$$('#timeline svg g.ev')).toHaveLength(UI_EVENTS_SHOWN_MAX)
    expect(await page.$eval('#timeline .more', p => p.getAttribute('data-hidden'))).toBe(String(all - UI_EVENTS_SHOWN_MAX))
    expect(await page.$eval('#task-summary', p => p.textContent ?? '')).toContain(`${all} event(s)`)
    // a progress transition still shows its payload, read from its event
    const last = await page.$$eval('#transitions li[data-kind="progress"]', lis => lis.at(-1)?.textContent ?? '')
    expect(last).toContain(`${MARK}${PROGRESS - 1}-`)
  }, 300_000)
})
