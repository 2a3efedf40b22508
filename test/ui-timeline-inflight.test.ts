/**
 * The view's requests and drawing under a flood of a big task's events, in
 * headless chromium (Debian's), against real nodes. Found by session 49's
 * review: a new timeline GET (a full replay) started every
 * TIMELINE_DEBOUNCE_MS while events kept coming, whatever the earlier ones
 * were doing, so with a task big enough that one answer took longer, they
 * piled up in the browser and on the node; the runs list did the same; and
 * every event of the task was drawn, however many. Now one timeline request
 * (and one runs reload) is out at a time, events meanwhile cause one more
 * after it, and only the newest UI_EVENTS_SHOWN_MAX events are drawn, with a
 * line saying how many are not.
 */
import { readFileSync } from 'node:fs'
import type { Page, Request, Route } from 'playwright-core'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import type { MeshNode } from '../src/node.ts'
import { UI_EVENTS_SHOWN_MAX } from '../src/ui/constants.ts'
import { closeView, openView, type View } from './fixtures/view.ts'
import { startMesh, stopAll, until } from './helpers.ts'

const PAGE_WAIT_MS = 60_000
const CAP = { capability_id: 'cap:big-flood', version: '1.0.0' }
const TASK = 'task-ui-big-flood'
/** More events than the view draws. */
const PREFILL = UI_EVENTS_SHOWN_MAX + 20
/** The executor's pace during the flood (its own, not a wait of the test). */
const SPACING_MS = 20
/** Events the page must have followed while its requests are held, before the count is looked at. */
const SEEN_WHILE_HELD = 10

describe('the view under a flood of a big task\'s events', () => {
  let nodes: MeshNode[]
  let A: MeshNode, B: MeshNode
  let view: View | undefined
  let page: Page
  const flood = Promise.withResolvers<void>()
  let stop = false

  beforeAll(async () => {
    nodes = await startMesh(2)
    ;[A, B] = nodes as [MeshNode, MeshNode]
    B.runs.handle(CAP, async (ctx) => {
      for (let i = 0; i < PREFILL; i++) await ctx.progress({ step: i })
      await flood.promise
      let i = 0
      while (!stop) {
        await ctx.progress({ flood: i++ })
        await new Promise(resolve => setTimeout(resolve, SPACING_MS))
      }
      return { done: true }
    })
    await B.publishCard({ name: 'big', capabilities: [CAP] })
    view = await openView(A)
    page = view.page
  }, 600_000)

  afterAll(async () => {
    stop = true
    flood.resolve()
    await closeView(view)
    await stopAll(nodes)
  })

  it('the page holds the same bound as src/ui/constants.ts', () => {
    const js = readFileSync(new URL('../src/ui/assets/app.js', import.meta.url), 'utf8')
    expect(Number(/const EVENTS_SHOWN_MAX = (\d+)/.exec(js)?.[1])).toBe(UI_EVENTS_SHOWN_MAX)
  })

  it('draws the newest events only, and has one timeline request (one runs reload) out at a time', async () => {
    const run = await A.delegate({ to_agent: B.agentId, task_id: TASK, capability: CAP, input: {} })
    const total = PREFILL + 1
    await until(async () => (await A.events.replay(TASK, { participants: [B.agentId] })).events.length >= total, 'A to hold the prefill', 120_000)
    await view!.openTask(TASK, PAGE_WAIT_MS)
    await page.waitForSelector('#live:not(.off)', { timeout: PAGE_WAIT_MS })
    await page.waitForSelector(`#events .more[data-hidden="${total - UI_EVENTS_SHOWN_MAX}"]`, { timeout: PAGE_WAIT_MS })
    expect(await page.$$eval('#events tr[data-event]', rows => rows.length)).toBe(UI_EVENTS_SHOWN_MAX)
    expect(await page.$$eval('#timeline g.ev', evs => evs.length)).toBe(UI_EVENTS_SHOWN_MAX)
    expect(await page.textContent('#timeline .more')).toContain(String(total - UI_EVENTS_SHOWN_MAX))
    // the newest are the ones drawn: the last step is, the started event is not
    expect(await page.$(`#events tr[data-seq="${total}"]`)).not.toBeNull()
    expect(await page.$('#events tr[data-event="run.started"]')).toBeNull()

    // requests out at once, of the timeline and of the runs list (one reload is two GETs)
    const isTimeline = (u: string): boolean => new URL(u).pathname.endsWith('/timeline')
    const isRuns = (u: string): boolean => new URL(u).pathname === '/v1/runs'
    const out = { timeline: 0, runs: 0, maxTimeline: 0, maxRuns: 0, timelineAsked: 0 }
    page.on('request', (req) => {
      if (isTimeline(req.url())) {
        out.timelineAsked++
        out.maxTimeline = Math.max(out.maxTimeline, ++out.timeline)
      }
      if (isRuns(req.url())) out.maxRuns = Math.max(out.maxRuns, ++out.runs)
    })
    const done = (req: Request): void => {
      if (isTimeline(req.url())) out.timeline--
      if (isRuns(req.url())) out.runs--
    }
    page.on('requestfinished', done)
    page.on('requestfailed', done)
    // the node's answers are held (a big task, a slow node) while events keep coming
    const held: Route[] = []
    let holding = true
    await page.route(u => isTimeline(u.href) || isRuns(u.href), async (route) => {
      if (holding) held.push(route)
      else await route.continue()
    })
    const seen = async (): Promise<number> => Number(await page.getAttribute('#live', 'data-events'))
    const seenBefore = await seen()
    flood.resolve()
    await until(async () => out.maxTimeline > 1 || (out.timeline === 1 && await seen() >= seenBefore + SEEN_WHILE_HELD), 'the page to follow events while its timeline request is held', PAGE_WAIT_MS)
    expect(out.maxTimeline).toBe(1)
    expect(out.maxRuns).toBeLessThanOrEqual(2)
    const askedWhileHeld = out.timelineAsked

    // answered at last: one more timeline request follows for the events that came meanwhile, and is drawn
    holding = false
    for (const route of held) await route.continue()
    await until(() => out.timelineAsked > askedWhileHeld, 'the timeline request that follows the held one', PAGE_WAIT_MS)
    await until(async () => Number(await page.getAttribute('#events .more', 'data-hidden')) > total - UI_EVENTS_SHOWN_MAX, 'the events of the flood to be drawn', PAGE_WAIT_MS)
    stop = true
    await until(async () => (await A.getRun(run.run_id)).state === 'completed', 'the run to complete', PAGE_WAIT_MS)
    expect(out.maxTimeline).toBe(1)
    expect(out.maxRuns).toBeLessThanOrEqual(2)
    expect(await page.$$eval('#events tr[data-event]', rows => rows.length)).toBe(UI_EVENTS_SHOWN_MAX)
  }, 400_000)
})
