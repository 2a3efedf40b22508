/**
 * A sidecar's `complete` while the delegator holds its run blocked (the held
 * output, protocols/control.md). Found by session 49's review: an output the
 * run could not take (nested past PAYLOAD_MAX_DEPTH, `parts` not a list) was
 * answered 200 and held; the resume then refused it, the held mark stayed,
 * every later `complete` was INVALID_TRANSITION, and the run stayed running
 * for good holding its slot. A held output refused at the resume for another
 * reason (too large for its event, a store that refused the write) left the
 * run the same.
 */
import { MemoryDatastore } from 'datastore-core'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { ApiClient } from '../src/api/client.ts'
import { EVENT_PAYLOAD_MAX_BYTES } from '../src/constants.ts'
import { newToken } from '../src/api/files.ts'
import { startApiServer, type ApiServer } from '../src/api/server.ts'
import type { MeshNode } from '../src/node.ts'
import type { Run } from '../src/runlog/types.ts'
import { data, Stream } from './api-helpers.ts'
import { FaultyDatastore } from './fixtures/faulty-datastore.ts'
import { rejectsWith, startMesh, stopAll, until } from './helpers.ts'

const CAP = { capability_id: 'cap:api-held-complete', version: '1.0.0' }

function deep (levels: number): Record<string, unknown> {
  let v: Record<string, unknown> = { leaf: 1 }
  for (let i = 0; i < levels; i++) v = { n: v }
  return v
}

describe('a sidecar\'s complete while the delegator holds its run blocked', () => {
  let nodes: MeshNode[] = []
  let a: MeshNode
  let apiA: ApiServer, apiB: ApiServer
  let agent: ApiClient, delegator: ApiClient
  let work: Stream
  const faulty = new FaultyDatastore(new MemoryDatastore())

  beforeAll(async () => {
    nodes = await startMesh(2, { nodeOptions: (i) => (i === 0 ? { datastore: faulty.store } : {}) })
    a = nodes[0]!
    const tokenA = newToken()
    apiA = await startApiServer(a, { token: tokenA, port: 0 })
    const tokenB = newToken()
    apiB = await startApiServer(nodes[1]!, { token: tokenB, port: 0 })
    agent = new ApiClient(apiA.url, tokenA)
    delegator = new ApiClient(apiB.url, tokenB)
    await agent.call('PUT', '/v1/card', { card: { name: 'sidecar', capabilities: [CAP] } })
    work = new Stream(agent, '/v1/work/stream')
    await work.ready()
  })

  afterAll(async () => {
    await work.close()
    await apiA.close()
    await apiB.close()
    await stopAll(nodes)
  })

  /** A run handed to the agent, then blocked by its delegator. */
  async function blockedRun (task: string): Promise<string> {
    const { run } = await delegator.call<{ run: Run }>('POST', '/v1/delegate', { to_agent: a.agentId, task_id: task, capability: CAP, input: {} })
    await work.next(e => e.event === 'work' && data(e).run.run_id === run.run_id, 'work')
    const id = encodeURIComponent(run.run_id)
    await delegator.call('POST', `/v1/runs/${id}/block`, { reason: 'a look first', checkpoint_id: `cp-${task}` })
    await work.next(e => e.event === 'blocked' && data(e).run_id === run.run_id, 'blocked')
    return run.run_id
  }

  const bad: Array<[string, Record<string, unknown>]> = [
    ['nested past PAYLOAD_MAX_DEPTH', deep(100)],
    ['with parts that are not a list', { parts: 'not-a-list' }]
  ]
  for (const [what, output] of bad) {
    it(`refuses an output ${what} at once, holds nothing, and takes a good one after`, async () => {
      const runId = await blockedRun(`held-bad-${what.length}`)
      const id = encodeURIComponent(runId)
      await rejectsWith(agent.call('POST', `/v1/runs/${id}/complete`, { output }), 'INVALID_REQUEST')
      // nothing was held: a good output is still taken while blocked, and completes the run at the resume
      const held = await agent.call<{ run: Run }>('POST', `/v1/runs/${id}/complete`, { output: { ok: what } })
      expect(held.run.state).toBe('blocked')
      await delegator.call('POST', `/v1/runs/${id}/resume`, { resolution: {} })
      await until(async () => (await a.runs.getRun(runId)).state === 'completed', 'the held output to complete the run')
      expect((await a.runs.getRun(runId)).output).toEqual({ ok: what })
      expect(a.runs.slots.heldBy(nodes[1]!.agentId)).toBe(0)
    })
  }

  it('fails the run at the resume when its held output is refused there (too large for its event), instead of leaving it running', async () => {
    const runId = await blockedRun('held-oversized')
    const id = encodeURIComponent(runId)
    // within the schema and the depth bound, so only its commit refuses it: over EVENT_PAYLOAD_MAX_BYTES
    const held = await agent.call<{ run: Run }>('POST', `/v1/runs/${id}/complete`, { output: { text: 'x'.repeat(EVENT_PAYLOAD_MAX_BYTES) } })
    expect(held.run.state).toBe('blocked')
    await delegator.call('POST', `/v1/runs/${id}/resume`, { resolution: {} })
    await until(async () => (await a.runs.getRun(runId)).state === 'failed', 'the run to fail')
    const failed = await a.runs.getRun(runId)
    expect(failed.failure?.code).toBe('HANDLER_FAILED')
    expect(failed.failure?.message).toMatch(/held output could not complete the run: .*over/)
    await work.next(e => e.event === 'ended' && data(e).run_id === runId, 'ended')
    expect(a.runs.slots.heldBy(nodes[1]!.agentId)).toBe(0)
  })

  it('writes a held output again when the store refused it at the resume', async () => {
    const runId = await blockedRun('held-store')
    const id = encodeURIComponent(runId)
    const held = await agent.call<{ run: Run }>('POST', `/v1/runs/${id}/complete`, { output: { ok: 'late' } })
    expect(held.run.state).toBe('blocked')
    // the disk fails right after the resume is committed, before the held output is written
    const off = a.runs.onEvent((event) => {
      if (event.run_id === runId && event.type === 'run.progress' && event.payload.transition === 'resume') {
        faulty.only = (key) => key.startsWith('/aap/')
        faulty.failing = true
      }
    })
    try {
      await delegator.call('POST', `/v1/runs/${id}/resume`, { resolution: {} })
      await until(() => faulty.refused >= 2, 'the held output, and its first retry, to be refused')
      expect((await a.runs.getRun(runId)).state).toBe('running')
    } finally {
      off()
      faulty.failing = false
    }
    await until(async () => (await a.runs.getRun(runId)).state === 'completed', 'the held output to complete the run once the disk takes writes')
    expect((await a.runs.getRun(runId)).output).toEqual({ ok: 'late' })
    await work.next(e => e.event === 'ended' && data(e).run_id === runId, 'ended')
  })
})
