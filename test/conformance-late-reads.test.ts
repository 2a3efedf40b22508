/**
 * How the kit takes a read of a target's events that it cannot finish
 * (protocols/conformance.md):
 *
 *  - no-late-runs reads every refused task again at the end; when the target
 *    answers that read with an error frame (a busy target's TIMEOUT,
 *    correlation_busy) before the whole task was read, a late run is neither
 *    shown nor ruled out: the check is undecided (inconclusive), whether or
 *    not the task had a parent run, never a pass;
 *  - one read takes at most KIT_MAX_SYNC_PAGES pages: a target whose last
 *    allowed page still says `more: true` fails the check that read it
 *    (run reads, correlation reads, and no-late-runs' raw read alike).
 *
 * The target is a real node whose /aap/events/0.1.0 is served again with the
 * node's own pages, altered per test: busy after some page, or one event a page.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { EVENTS_SYNC_MAX_FRAME_BYTES, EVENTS_SYNC_PROTOCOL } from '../src/constants.ts'
import { LATE_CHECKS } from '../src/conformance/checks-final.ts'
import { KIT_MAX_SYNC_PAGES } from '../src/conformance/constants.ts'
import { CheckFailure, Kit, Undecided, type KitNodes } from '../src/conformance/kit.ts'
import { AapError } from '../src/errors.ts'
import { correlationPage, isSyncCorrelationRequest, isSyncRunRequest, runPage } from '../src/events/sync.ts'
import { createMeshNode, type MeshNode } from '../src/node.ts'
import { method, serve } from '../src/wire/rpc.ts'

/** How the target serves its events: as it would; busy from the given page of a correlation read on (`busyFrom`); one event a page. */
interface Serving { busyFrom?: number, onePerPage?: boolean }

const check = LATE_CHECKS.find(c => c.id === 'no-late-runs')!
/** More events than one read may take one a page. */
const EVENTS = KIT_MAX_SYNC_PAGES + 8

describe('the kit\'s reads that cannot be finished', () => {
  const nodes: MeshNode[] = []
  let target: MeshNode
  let auditor: MeshNode
  let parent: string
  let task: string
  let serving: Serving = {}
  /** The page of the current correlation read (the busy target counts them). */
  let page = 0

  beforeAll(async () => {
    target = await createMeshNode({ listen: ['/ip4/127.0.0.1/tcp/0'] })
    auditor = await createMeshNode({ listen: ['/ip4/127.0.0.1/tcp/0'], followDelegations: false })
    nodes.push(target, auditor)
    await target.start()
    await auditor.start()
    const cap = { capability_id: 'cap:long-log', version: '1.0.0' }
    target.runs.handle(cap, async (ctx) => {
      for (let i = 0; i < EVENTS; i++) await ctx.progress({ i })
      return { done: true }
    })
    await target.publishCard({ name: 'long-log', capabilities: [cap], tags: [] })
    expect(await auditor.join(target.addresses)).toBe(1)
    const done = Promise.withResolvers<void>()
    const off = target.runs.onEvent((e) => { if (e.type === 'run.completed') done.resolve() })
    const run = await auditor.delegate({ to_agent: target.agentId, task_id: 'late-reads-1', capability: cap, input: {} })
    if ((await target.getRun(run.run_id)).state === 'completed') done.resolve()
    await done.promise
    off()
    parent = run.run_id
    task = run.correlation_id
    // the node's own pages, altered as `serving` says
    const log = target.events.log
    await target.host.unhandle(EVENTS_SYNC_PROTOCOL)
    await serve(target.host, {
      protocol: EVENTS_SYNC_PROTOCOL,
      maxFrameBytes: EVENTS_SYNC_MAX_FRAME_BYTES,
      methods: {
        run: method(isSyncRunRequest, async (req) => runPage(log, serving.onePerPage === true ? { ...req, limit: 1 } : req)),
        correlation: method(isSyncCorrelationRequest, async (req) => {
          // each read starts again at page 1
          page = req.after_run === undefined ? 1 : page + 1
          if (serving.busyFrom !== undefined && page >= serving.busyFrom) {
            throw new AapError('TIMEOUT', `correlation ${req.correlation_id} is busy`, { reason: 'correlation_busy' })
          }
          const served = await correlationPage(log, serving.onePerPage === true ? { ...req, limit: 1 } : req)
          // busy from page 2: page 1 claims more, so the kit asks again
          return serving.busyFrom !== undefined ? { ...served, more: true } : served
        })
      }
    })
  }, 120_000)

  afterAll(async () => { await Promise.all(nodes.map(async n => n.stop())) })

  /** no-late-runs over one refused task of `task` (runs in `allowed` existed before the refusal), the target serving as `how`. */
  async function lateVerdict (how: Serving, allowed: string[]): Promise<string> {
    serving = how
    const kit = new Kit({ bystander: auditor } as unknown as KitNodes, target.agentId)
    // read long ago: the check does not wait
    kit.noRun.push({ check: 'forged-handoff', correlation: task, what: 'the forged handoff', allowed, at: 0 })
    try {
      await check.run(kit.scope('no-late-runs'))
      return 'pass'
    } catch (err) {
      if (err instanceof Undecided) return `undecided: ${err.message}`
      if (err instanceof CheckFailure) return `fail: ${err.message}`
      throw err
    }
  }

  it('a task read whole, holding only its parent run, passes', async () => {
    expect(await lateVerdict({}, [parent])).toBe('pass')
  })

  it('an error frame for the whole re-read of a task with a parent run is undecided, not a pass', async () => {
    expect(await lateVerdict({ busyFrom: 1 }, [parent])).toMatch(/^undecided: 1 refused task\(s\) cannot be read again whole: .*TIMEOUT: correlation .* is busy/)
  }, 60_000)

  it('an error frame on page 2, after a page 1 that claimed more, is undecided too', async () => {
    expect(await lateVerdict({ busyFrom: 2 }, [parent])).toMatch(/^undecided: .*page 2: TIMEOUT/)
  }, 60_000)

  it('an error frame for a task that must have no run at all is undecided, not a failure that blames the target', async () => {
    expect(await lateVerdict({ busyFrom: 1 }, [])).toMatch(/^undecided: /)
  }, 60_000)

  it('a run seen before the error frame is still a late run', async () => {
    expect(await lateVerdict({ busyFrom: 2 }, [])).toMatch(new RegExp(`^fail: 1 refused task\\(s\\) have runs after all: .*1 run\\(s\\) exist for ${task} later: ${parent}`))
  }, 60_000)

  it(`a run read that still says more after KIT_MAX_SYNC_PAGES (${KIT_MAX_SYNC_PAGES}) pages fails, naming the bound`, async () => {
    serving = { onePerPage: true }
    const kit = new Kit({ bystander: auditor } as unknown as KitNodes, target.agentId)
    const read = kit.scope().readEvents(parent)
    await expect(read).rejects.toThrow(CheckFailure)
    await expect(read).rejects.toThrow(`events of ${parent}: the target still claims more events after ${KIT_MAX_SYNC_PAGES} pages (KIT_MAX_SYNC_PAGES)`)
  }, 60_000)

  it('a correlation read past the page bound fails, and so does no-late-runs over it', async () => {
    serving = { onePerPage: true }
    const kit = new Kit({ bystander: auditor } as unknown as KitNodes, target.agentId)
    await expect(kit.scope().readCorrelation(task)).rejects.toThrow(`events of correlation ${task}: the target still claims more events after ${KIT_MAX_SYNC_PAGES} pages (KIT_MAX_SYNC_PAGES)`)
    expect(await lateVerdict({ onePerPage: true }, [parent])).toMatch(new RegExp(`^fail: .*cannot be read again: .*after ${KIT_MAX_SYNC_PAGES} pages \\(KIT_MAX_SYNC_PAGES\\)`))
  }, 60_000)
})
