/**
 * A subscriber's or a replay's `runs` hint counts while its caller is there
 * (RunTrack.told in src/events/track.ts). It used to mark the run as one this
 * node follows for its own reasons, for good: a hinted run that never shows
 * up (or stays blocked) kept the correlation tracked, on its gossip topic and
 * tail-synced, after every caller had gone, and a node with
 * MAX_CORRELATION_TOPICS of those refused every new subscriber.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { newRunId } from '../src/runlog/event.ts'
import type { MeshNode } from '../src/node.ts'
import { startMesh, stopAll, until } from './helpers.ts'

const CAP = { capability_id: 'cap:hinted', version: '1.0.0' }

describe('run hints of subscribers and replays', () => {
  let nodes: MeshNode[] = []
  beforeAll(async () => {
    nodes = await startMesh(2)
    nodes[1]!.runs.handle(CAP, async (ctx) => {
      // stays blocked until resumed: a live run the subscriber names
      await ctx.block('held for the test', 'cp-1')
      return { ok: true }
    })
    await nodes[1]!.publishCard({ name: 'hinted', capabilities: [CAP] })
  })
  afterAll(async () => { await stopAll(nodes) })

  it('a subscription that named a run which never shows up leaves the correlation once it closes', async () => {
    const [a, b] = nodes as [MeshNode, MeshNode]
    const sub = await a.events.subscribe('hint-never', { runs: [newRunId(b.agentId)] })
    expect(a.events.topics()).toContain('hint-never')
    expect(a.events.participants('hint-never')).toContain(b.agentId)
    sub.close()
    await until(() => !a.events.topics().includes('hint-never') && a.events.participants('hint-never').length === 0, 'the correlation to be let go')
  })

  it('a replay that named a run which never shows up leaves nothing tracked', async () => {
    const [a, b] = nodes as [MeshNode, MeshNode]
    const replay = await a.events.replay('hint-replay', { runs: [newRunId(b.agentId)], timeoutMs: 500 })
    expect(replay.runs).toHaveLength(0)
    expect(a.events.participants('hint-replay')).toEqual([])
    expect(a.events.topics()).not.toContain('hint-replay')
  })

  it('a blocked run that a subscriber named, but this node neither delegated nor executes, is let go with the subscriber', async () => {
    const [a, b] = nodes as [MeshNode, MeshNode]
    // a run this node only watches: delegated without following it, so only the subscriber's hint names it
    const run = await a.delegate({ to_agent: b.agentId, task_id: 'hint-blocked', capability: CAP, input: {} }, { follow: false })
    await until(async () => (await a.getRun(run.run_id)).state === 'blocked', 'the run to block')
    const sub = await a.events.subscribe('hint-blocked', { runs: [run.run_id] })
    const seen: string[] = []
    for await (const e of sub) {
      seen.push(e.type)
      if (e.type === 'run.blocked') break
    }
    expect(seen).toEqual(['run.started', 'run.blocked'])
    await until(() => !a.events.topics().includes('hint-blocked'), 'the correlation to be let go')
    expect(a.events.participants('hint-blocked')).toEqual([])
  })
})
