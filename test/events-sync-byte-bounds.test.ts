/**
 * Two bounds on what the events service reads, measured as they say:
 * - a replay reads at most REPLAY_MAX_BYTES of events as JSON: it counted
 *   UTF-16 code units, so a log of non-ASCII text (up to three bytes a code
 *   unit in UTF-8) went up to three times past the bound;
 * - eventFrom wants one event of a run, and asked its executor for a whole
 *   page after it (up to SYNC_MAX_EVENTS_PER_RESPONSE events read and sent):
 *   now it asks for one.
 * Found by session 59's review.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { EVENTS_SYNC_MAX_FRAME_BYTES, EVENTS_SYNC_PROTOCOL } from '../src/constants.ts'
import { runPage, type SyncRunRequest } from '../src/events/sync.ts'
import type { MeshNode } from '../src/node.ts'
import { serve } from '../src/wire/rpc.ts'
import { startMesh, stopAll, until } from './helpers.ts'

const CAP = { capability_id: 'cap:sync-byte-bounds', version: '1.0.0' }
const TASK = 'task-sync-byte-bounds'
const STEPS = 4

describe('the bounds on what the events service reads', () => {
  let nodes: MeshNode[] = []
  let A: MeshNode, B: MeshNode
  let runId = ''

  beforeAll(async () => {
    nodes = await startMesh(2)
    ;[A, B] = nodes as [MeshNode, MeshNode]
    B.runs.handle(CAP, async (ctx) => {
      for (let i = 0; i < STEPS; i++) await ctx.progress({ step: i, text: '€'.repeat(4000) })
      return { ok: true }
    })
    await B.publishCard({ name: 'b', capabilities: [CAP] })
    const run = await A.delegate({ to_agent: B.agentId, task_id: TASK, capability: CAP, input: {} })
    runId = run.run_id
    await until(async () => (await A.events.lastEvent(runId))?.type === 'run.completed', 'A to hold the whole run')
  }, 60_000)
  afterAll(async () => { await stopAll(nodes) })

  it('a replay counts the bytes of its events, not their UTF-16 length', async () => {
    const held = await A.events.readCorrelation(TASK)
    const chars = [...held.values()].flat().reduce((n, e) => n + JSON.stringify(e).length, 0)
    // 4000 three-byte characters a progress event: well past the bound in bytes, within it in code units
    await expect(A.events.readCorrelation(TASK, chars + 100)).rejects.toMatchObject({ code: 'INVALID_REQUEST', details: { reason: 'replay_too_large', max_bytes: chars + 100 } })
  })

  it('eventFrom asks the executor for the one event it wants', async () => {
    let sent = 0
    await B.host.unhandle(EVENTS_SYNC_PROTOCOL)
    await serve(B.host, {
      protocol: EVENTS_SYNC_PROTOCOL,
      maxFrameBytes: EVENTS_SYNC_MAX_FRAME_BYTES,
      methods: {
        run: {
          handle: async (body) => {
            const page = await runPage(B.events.log, body as SyncRunRequest)
            sent += page.events.length
            return page
          }
        },
        correlation: { handle: async () => ({ events: [], more: false }) }
      }
    })
    const e = await A.events.eventFrom(runId, 1)
    expect(e?.type).toBe('run.started')
    // the run holds STEPS + 2 events: a page after seq 0 would have carried them all
    expect(sent).toBe(1)
  })
})
