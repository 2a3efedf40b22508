/**
 * The view redraws a task's timeline at most once per TIMELINE_DEBOUNCE_MS,
 * also while events keep coming. Found by session 46's review: its timer was
 * restarted on every event (scheduleTimeline in src/ui/assets/app.js), so a
 * run logging progress closer together than that (an executor anywhere in the
 * mesh decides) froze the timeline, its states and its checkpoints at what
 * they were when the task was opened, for as long as it went on. Headless
 * chromium (Debian's), real nodes.
 */
import type { Page } from 'playwright-core'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import type { MeshNode } from '../src/node.ts'
import { closeView, openView, type View } from './fixtures/view.ts'
import { startMesh, stopAll, until } from './helpers.ts'

const PAGE_WAIT_MS = 30_000
const CAP = { capability_id: 'cap:steady', version: '1.0.0' }
const TASK = 'task-ui-steady'
const SPACING_MS = 40
const MAX_EVENTS = 1000

describe('the view following a run that never pauses', () => {
  let nodes: MeshNode[]
  let A: MeshNode, B: MeshNode
  let view: View | undefined
  let page: Page
  const go = Promise.withResolvers<void>()
  let stop = false
  let sent = 0

  beforeAll(async () => {
    nodes = await startMesh(2)
    ;[A, B] = nodes as [MeshNode, MeshNode]
    B.runs.handle(CAP, async (ctx) => {
      await go.promise
      while (!stop && sent < MAX_EVENTS) {
        await ctx.progress({ step: sent++ })
        await new Promise(resolve => setTimeout(resolve, SPACING_MS))
      }
      return { steps: sent }
    })
    await B.publishCard({ name: 'steady', capabilities: [CAP] })
    view = await openView(A)
    page = view.page
  }, 600_000)

  afterAll(async () => {
    stop = true
    go.resolve()
    await closeView(view)
    await stopAll(nodes)
  })

  it('redraws the timeline while the events keep coming', async () => {
    await A.delegate({ to_agent: B.agentId, task_id: TASK, capability: CAP, input: {} })
    await view!.openTask(TASK, PAGE_WAIT_MS)
    await page.waitForSelector('#live:not(.off)', { timeout: PAGE_WAIT_MS })
    await page.waitForSelector('#events tr[data-event]', { timeout: PAGE_WAIT_MS })
    const before = (await page.$$('#events tr[data-event]')).length
    go.resolve()
    // the run goes on logging an event every SPACING_MS; the page should show some of them while it does
    await until(async () => (await page.$$('#events tr[data-event]')).length >= before + 20, 'the timeline to show new events during the run', 10_000)
    // drawn while the run still logs: it has not ended
    expect(sent).toBeLessThan(MAX_EVENTS)
    expect(stop).toBe(false)
  }, 120_000)
})
