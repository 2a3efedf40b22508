/**
 * The checkpoint form and the cancel buttons of the view, in headless
 * chromium (Debian's), against real nodes. Found by session 49's review:
 * every event of the open task redrew the checkpoint forms with innerHTML,
 * so a refusal the user typed while another run of the task logged progress
 * went back to the default {"approved": true}, and pressing "Resolve" sent an
 * approval. A form now stays while its checkpoint is open, and starts empty
 * (nothing is resolved unless the user writes it). And the confirmation of a
 * cancel, asked from a list sorted again every few seconds, said only
 * "Cancel this run?": it now names the run its button belongs to.
 */
import type { Page } from 'playwright-core'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import type { ApiServer } from '../src/api/server.ts'
import type { MeshNode } from '../src/node.ts'
import { closeView, openView, type View } from './fixtures/view.ts'
import { startMesh, stopAll, until } from './helpers.ts'
import { shortRun } from './ui-short-id.ts'

const PAGE_WAIT_MS = 30_000
const GATE = { capability_id: 'cap:gate', version: '1.0.0' }
const TICK = { capability_id: 'cap:tick', version: '1.0.0' }
const TASK = 'task-ui-gate'

describe('the view\'s checkpoint form while the task logs events', () => {
  let nodes: MeshNode[]
  let A: MeshNode, B: MeshNode
  let api: ApiServer
  let view: View | undefined
  let page: Page
  let stop = false
  /** Resolved by the test: the tick run logs one progress event per resolution. */
  let tick = Promise.withResolvers<void>()
  const resolved = Promise.withResolvers<Record<string, unknown>>()

  beforeAll(async () => {
    nodes = await startMesh(2)
    ;[A, B] = nodes as [MeshNode, MeshNode]
    B.runs.handle(GATE, async (ctx) => {
      resolved.resolve(await ctx.block('deploy to production?', 'cp-deploy'))
      return { ok: true }
    })
    B.runs.handle(TICK, async (ctx) => {
      let i = 0
      for (;;) {
        await tick.promise
        if (stop) return { ticks: i }
        tick = Promise.withResolvers<void>()
        await ctx.progress({ tick: i++ })
      }
    })
    await B.publishCard({ name: 'gate', capabilities: [GATE, TICK] })
    view = await openView(A)
    ;({ api, page } = view)
  }, 600_000)

  afterAll(async () => {
    stop = true
    tick.resolve()
    await closeView(view)
    await stopAll(nodes)
  })

  const progressRows = async (): Promise<number> => (await page.$$('#events tr[data-event="run.progress"]')).length

  it('keeps what the user typed across redraws, sends it, and names the run a cancel will end', async () => {
    const gate = await A.delegate({ to_agent: B.agentId, task_id: TASK, capability: GATE, input: {} })
    await until(async () => (await A.getRun(gate.run_id)).state === 'blocked', 'the gate run to block')
    const ticker = await A.delegate({ to_agent: B.agentId, task_id: TASK, capability: TICK, input: {} })
    await view!.openTask(TASK, PAGE_WAIT_MS)
    await page.waitForSelector('#live:not(.off)', { timeout: PAGE_WAIT_MS })
    const box = 'form.checkpoint textarea'
    await page.waitForSelector(box, { timeout: PAGE_WAIT_MS })

    // the default is no decision: an empty resolution is refused in the page, the run stays blocked
    expect(await page.inputValue(box)).toBe('')
    await page.click('form.checkpoint button[type="submit"]')
    await page.waitForSelector('form.checkpoint .form-msg.error', { timeout: PAGE_WAIT_MS })
    expect((await A.getRun(gate.run_id)).state).toBe('blocked')

    // the user types a refusal; meanwhile the other run of the task logs events, each redrawing the task
    await page.fill(box, '{"approved": false}')
    for (let i = 1; i <= 3; i++) {
      tick.resolve()
      await until(async () => await progressRows() >= i, `progress event ${i} to be drawn`, PAGE_WAIT_MS)
    }
    expect(await page.inputValue(box)).toBe('{"approved": false}')
    // and it still has the focus: the user may go on typing
    expect(await page.evaluate('document.activeElement?.matches("form.checkpoint textarea") ?? false')).toBe(true)
    await page.click('form.checkpoint button[type="submit"]')
    expect(await resolved.promise).toEqual({ approved: false })

    // cancel from the runs list: the confirmation names the run of the button clicked, and that run ends
    await page.goto(`${api.url}/ui#runs`)
    const button = `#runs button[data-cancel="${ticker.run_id}"]`
    await page.waitForSelector(button, { timeout: PAGE_WAIT_MS })
    const asked = new Promise<string>(resolve => {
      page.once('dialog', (d) => { resolve(d.message()); void d.accept() })
    })
    await page.click(button)
    const message = await asked
    expect(message).toContain(shortRun(ticker.run_id))
    expect(message).toContain('cap:tick@1.0.0')
    expect(message).toContain(TASK)
    expect(message).not.toContain(shortRun(gate.run_id))
    await until(async () => (await A.getRun(ticker.run_id)).state === 'failed', 'the tick run to be canceled', PAGE_WAIT_MS)
    expect((await A.getRun(gate.run_id)).state).toBe('completed')
  }, 120_000)
})
