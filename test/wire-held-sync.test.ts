/**
 * Guards the bound on answers a responder holds for a caller that does not read, on the real /aap/events/0.1.0
 * sync protocol (no authority needed to read; pages up to SYNC_MAX_RESPONSE_BYTES): a stranger pipelining 64
 * `run` page requests for a run of ~1 MiB of events on one stream, reading nothing, made the node build all 64
 * pages and hold ~60 MiB (a review). Now the responder holds about RESPONDER_HELD_ANSWER_MAX_BYTES (src/wire/responder.ts).
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import type { Stream } from '@libp2p/interface'
import { EVENTS_SYNC_MAX_FRAME_BYTES, EVENTS_SYNC_PROTOCOL, MAX_PIPELINED_REQUESTS_PER_STREAM, SYNC_MAX_RESPONSE_BYTES } from '../src/constants.ts'
import type { MeshNode } from '../src/node.ts'
import { RESPONDER_HELD_ANSWER_MAX_BYTES } from '../src/wire/network-constants.ts'
import { pipelinedRequests, RawWire } from './fixtures/raw-wire.ts'
import { startMesh, stopAll, until } from './helpers.ts'

const WORK = { capability_id: 'cap:big', version: '1.0.0' }
const TASK = 'task-held-sync'
const WATCH_MS = 3_000

describe('events sync pages held for a stranger that does not read', () => {
  let nodes: MeshNode[] = []
  let A: MeshNode, B: MeshNode, S: MeshNode
  let runId = ''
  beforeAll(async () => {
    nodes = await startMesh(3)
    ;[A, B, S] = nodes as [MeshNode, MeshNode, MeshNode]
    B.runs.handle(WORK, async (ctx) => {
      // ~1.1 MB of events: a page is close to SYNC_MAX_RESPONSE_BYTES
      for (let i = 1; i <= 40; i++) await ctx.progress({ i, blob: 'x'.repeat(28_000) })
      return { ok: true }
    })
    await B.publishCard({ name: 'big', capabilities: [WORK] })
    const run = await A.delegate({ to_agent: B.agentId, task_id: TASK, capability: WORK, input: {} })
    runId = (run as { run_id: string }).run_id
    await until(async () => ((await B.events.readCorrelation(TASK)).get(runId)?.some(e => e.type === 'run.completed')) ?? false, 'the big run to complete', 60_000)
  }, 90_000)
  afterAll(async () => { await stopAll(nodes) })

  it('holds a few pages, not 64, and answers them all once the stranger reads', async () => {
    const wire = await RawWire.open(S.host, B.host.peerId, EVENTS_SYNC_PROTOCOL)
    const inbound = (): Stream | undefined =>
      B.host.getConnections(S.host.peerId).flatMap(c => c.streams).find(s => s.protocol === EVENTS_SYNC_PROTOCOL && s.direction === 'inbound')
    try {
      wire.stream.pause()
      const chunk = pipelinedRequests(MAX_PIPELINED_REQUESTS_PER_STREAM, 'run', { run_id: runId })
      wire.write(chunk)
      let most = 0
      const t0 = Date.now()
      // watch B's buffered answers for a while (bounded poll): with the fault they grew to all 64 pages
      await until(() => { most = Math.max(most, inbound()?.writeBufferLength ?? 0); return Date.now() - t0 > WATCH_MS }, 'watching B')
      expect(most).toBeGreaterThan(0)
      // a page is below the frame limit the responder counts for each handler, so the bound holds exactly
      expect(most).toBeLessThanOrEqual(RESPONDER_HELD_ANSWER_MAX_BYTES)
      // a few pages (64 were ~60 MiB): as many as the bound has room for at the frame limit each
      expect(most).toBeLessThanOrEqual(Math.floor(RESPONDER_HELD_ANSWER_MAX_BYTES / EVENTS_SYNC_MAX_FRAME_BYTES) * SYNC_MAX_RESPONSE_BYTES)
      wire.stream.resume()
      for (let i = 0; i < MAX_PIPELINED_REQUESTS_PER_STREAM; i++) expect(await wire.next()).toMatchObject({ ok: true })
    } finally {
      wire.abort()
    }
  }, 60_000)
})
