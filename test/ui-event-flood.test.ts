/**
 * The view following a task whose run sends a flood of progress events, in
 * headless chromium. Each event on the task's stream used to reload the runs
 * list at once (two GETs of /v1/runs), so an executor anywhere in the mesh
 * could make the user's open tab send its own node a request per event. The
 * reloads are now at most one per short interval; the timeline still shows
 * every event.
 */
import { readFileSync } from 'node:fs'
import type { Page } from 'playwright-core'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import type { MeshNode } from '../src/node.ts'
import { closeView, openView, type View } from './fixtures/view.ts'
import { startMesh, stopAll, until } from './helpers.ts'

const PAGE_WAIT_MS = 30_000
const SETUP_TIMEOUT_MS = 600_000
const FLOOD = { capability_id: 'cap:flood', version: '1.0.0' }
const EVENTS = 60
const TASK = 'task-ui-flood'
/** The page's own intervals (src/ui/assets/app.js). */
const PAGE_JS = readFileSync(new URL('../src/ui/assets/app.js', import.meta.url), 'utf8')
const TIMELINE_DEBOUNCE_MS = Number(/const TIMELINE_DEBOUNCE_MS = (\d+)/.exec(PAGE_JS)?.[1])
const RUNS_REFRESH_MS = Number(/const RUNS_REFRESH_MS = (\d+)/.exec(PAGE_JS)?.[1])

describe('the view under a flood of a run\'s events', () => {
  let nodes: MeshNode[]
  let A: MeshNode, B: MeshNode
  let view: View | undefined
  let page: Page
  const go = Promise.withResolvers<void>()

  beforeAll(async () => {
    nodes = await startMesh(2)
    ;[A, B] = nodes as [MeshNode, MeshNode]
    B.runs.handle(FLOOD, async (ctx) => {
      await go.promise
      for (let i = 0; i < EVENTS; i++) await ctx.progress({ step: i })
      return { steps: EVENTS }
    })
    await B.publishCard({ name: 'flood', capabilities: [FLOOD] })
    view = await openView(A)
    page = view.page
  }, SETUP_TIMEOUT_MS)

  afterAll(async () => {
    go.resolve()
    await closeView(view)
    await stopAll(nodes)
  })

  it('reloads the runs list a few times, not once per event, and still draws every event', async () => {
    const run = await A.delegate({ to_agent: B.agentId, task_id: TASK, capability: FLOOD, input: {} })
    await view!.openTask(TASK, PAGE_WAIT_MS)
    await page.waitForSelector('#live:not(.off)', { timeout: PAGE_WAIT_MS })
    let reloads = 0
    page.on('request', (req) => {
      if (new URL(req.url()).pathname === '/v1/runs') reloads++
    })
    const from = performance.now()
    go.resolve()
    await until(async () => (await A.getRun(run.run_id)).state === 'completed', 'the run to complete')
    // the timeline catches up with every event: started, the progress events, completed
    await until(async () => (await page.$$('#events tr[data-event]')).length >= EVENTS + 2, 'the timeline to show every event', PAGE_WAIT_MS)
    const ms = performance.now() - from
    expect(reloads).toBeGreaterThan(0)
    // at most one reload (two GETs) per TIMELINE_DEBOUNCE_MS while events come, and one per RUNS_REFRESH_MS (app.js):
    // a bound by the time the flood took, as a busy machine spreads it; and well under the two GETs per event of before
    expect(reloads).toBeLessThanOrEqual(2 * (Math.ceil(ms / TIMELINE_DEBOUNCE_MS) + Math.ceil(ms / RUNS_REFRESH_MS) + 1))
    expect(reloads).toBeLessThan(EVENTS)
  }, 120_000)
})
