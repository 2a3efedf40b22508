import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import type { MeshNode } from '../src/node.ts'
import type { AgentEvent } from '../src/runlog/types.ts'
import { correlationTopic } from '../src/events/topic.ts'
import { startMesh, stopAll, until } from './helpers.ts'
import { collect, expectSeqOrdered, hashes, type Collector } from './events-helpers.ts'

const REVIEW = { capability_id: 'cap:code-review', version: '2.1.0' }
const TASK = 'task-events-01'

/** B runs: progress, block on a checkpoint, hand off to C with the resolution; C completes. 5 + 2 events. */
const EXPECTED_EVENTS = 7

const done = (events: AgentEvent[]): boolean => events.length >= EXPECTED_EVENTS
const isFinal = (e: AgentEvent): boolean => e.type === 'run.completed' && e.payload.transition !== 'handoff'

describe('correlated events across a 10-node mesh: delegate, block/resume, handoff, complete', () => {
  let nodes: MeshNode[] = []
  let A: MeshNode, B: MeshNode, C: MeshNode
  let early: Collector[] = []
  let late: Collector[] = []
  let watchA: Collector
  let firstRun = ''
  const resolution = { approved: true, note: 'lgtm', reviewers: ['h1'] }

  beforeAll(async () => {
    nodes = await startMesh(10)
    ;[A, B, C] = nodes as [MeshNode, MeshNode, MeshNode]
    B.runs.handle(REVIEW, async (ctx) => {
      await ctx.progress({ step: 'reading diff' })
      const res = await ctx.block('needs a human decision', 'cp-approve-1')
      await ctx.handoff(C.agentId, { reason: 'security review', resolution: res })
    })
    C.runs.handle(REVIEW, async () => ({ verdict: 'approved', by: 'C' }))
    await B.publishCard({ name: 'reviewer-b', capabilities: [REVIEW] })
    await C.publishCard({ name: 'security-c', capabilities: [REVIEW] })

    // subscribers that join before the first event exists: some know only the delegator, one only the executor
    early = await Promise.all([
      collect(nodes[3]!, TASK, { participants: [A.agentId] }),
      collect(nodes[4]!, TASK, { participants: [A.agentId] }),
      collect(nodes[5]!, TASK, { participants: [B.agentId] })
    ])

    const run = await A.delegate({ to_agent: B.agentId, task_id: TASK, capability: REVIEW, input: { pr: 42 } })
    firstRun = run.run_id
    watchA = await collect(A, TASK, { runs: [run.run_id] })
    await watchA.until(es => es.some(e => e.type === 'run.blocked'), 'the block at the delegator')
    await A.resume(run.run_id, resolution)
    await watchA.until(es => es.some(isFinal), 'the completion at the delegator')

    // subscribers that arrive after the task is over get everything over sync alone
    late = await Promise.all([
      collect(nodes[6]!, TASK, { participants: [A.agentId] }),
      collect(nodes[7]!, TASK, { participants: [C.agentId] })
    ])
  })
  afterAll(async () => { await stopAll(nodes) })

  it('gives every subscriber every event once, each run in seq order, all with the task correlation_id', async () => {
    const truth = await A.events.readCorrelation(TASK)
    const runs = [...truth.keys()]
    expect(runs).toHaveLength(2)
    const expected = new Set([...truth.values()].flatMap(hashes))
    expect(expected.size).toBe(EXPECTED_EVENTS)

    for (const c of [watchA, ...early, ...late]) {
      const events = await c.until(done, 'every event')
      expect(events).toHaveLength(EXPECTED_EVENTS)
      expectSeqOrdered(events)
      expect(new Set(hashes(events))).toEqual(expected)
      expect(events.every(e => e.correlation_id === TASK)).toBe(true)
    }
    // the executors' own logs are the reference
    const fromB = await B.events.readCorrelation(TASK)
    expect(hashes(fromB.get(firstRun)!)).toEqual(hashes(truth.get(firstRun)!))
  })

  it('carries the checkpoint on the block, the resolution on the resume and the successor on the handoff', async () => {
    const events = await early[0]!.until(done, 'every event')
    const blocked = events.find(e => e.type === 'run.blocked')!
    expect(blocked.payload.checkpoint_id).toBe('cp-approve-1')
    const resumed = events.find(e => e.payload.transition === 'resume')!
    expect(resumed.payload).toMatchObject({ checkpoint_id: 'cp-approve-1', resolution, by: A.agentId })
    expect(resumed.seq).toBe(blocked.seq + 1)
    const handoff = events.find(e => e.payload.transition === 'handoff')!
    const started = events.find(e => e.type === 'run.started' && e.executor === C.agentId)!
    expect(handoff.payload.handoff_to).toEqual({ run_id: started.run_id, agent_id: C.agentId })
    expect(started.payload.handoff_from).toEqual({ run_id: firstRun, agent_id: B.agentId })
  })

  it('replays the whole lifecycle on a node that took no part', async () => {
    const bystander = nodes[8]!
    expect(await bystander.events.readCorrelation(TASK)).toEqual(new Map())
    const replay = await bystander.events.replay(TASK, { participants: [A.agentId] })
    expect(replay.runs.map(r => [r.executor, r.started_by, r.state, r.depth])).toEqual([
      [B.agentId, 'delegate', 'completed', 0],
      [C.agentId, 'handoff', 'completed', 1]
    ])
    expect(replay.transitions.map(t => t.kind)).toEqual(['delegate', 'progress', 'block', 'resume', 'handoff', 'complete'])
    expect(replay.transitions[0]).toMatchObject({ kind: 'delegate', by: A.agentId, to: B.agentId, capability: REVIEW })
    expect(replay.transitions[2]).toMatchObject({ kind: 'block', checkpoint_id: 'cp-approve-1', reason: 'needs a human decision' })
    expect(replay.transitions[3]).toMatchObject({ kind: 'resume', checkpoint_id: 'cp-approve-1', resolution, by: A.agentId })
    expect(replay.transitions[4]).toMatchObject({ kind: 'handoff', from: { run_id: firstRun, agent_id: B.agentId }, to: { agent_id: C.agentId } })
    expect(replay.transitions[5]).toMatchObject({ kind: 'complete', output: { verdict: 'approved', by: 'C' } })
    // checkpoint and resolution: one logical pause, both ends on one record
    expect(replay.checkpoints).toEqual([expect.objectContaining({
      run_id: firstRun, checkpoint_id: 'cp-approve-1', resolution, resolved_by: A.agentId, blocked_seq: 3, resumed_seq: 4, attested: true
    })])
    expect(replay.events).toHaveLength(EXPECTED_EVENTS)
    expect(new Set(replay.events.map(e => e.correlation_id))).toEqual(new Set([TASK]))
    // the bystander now holds the logs too, and can serve them
    expect([...(await bystander.events.readCorrelation(TASK)).keys()].sort()).toEqual(replay.runs.map(r => r.run_id).sort())
  })

  it('leaves the topic once no run is running or blocked and nobody subscribes', async () => {
    const topic = correlationTopic(TASK)
    // executors publish without joining; the delegator's automatic tracking ends with the task
    expect(B.events.topics()).not.toContain(TASK)
    expect(C.events.topics()).not.toContain(TASK)
    expect(A.events.topics()).toContain(TASK)
    watchA.sub.close()
    await until(() => !A.events.topics().includes(TASK), 'the delegator leaving the topic')
    // the topic lingers for EVENTS_TOPIC_LINGER_MS, then gossipsub leaves it
    await until(() => !A.host.services.pubsub.getTopics().includes(topic), 'the delegator leaving the topic on gossip')
    // an explicit subscriber stays until it closes
    const s = early[2]!
    expect(nodes[5]!.events.topics()).toContain(TASK)
    s.sub.close()
    await until(() => !nodes[5]!.events.topics().includes(TASK), 'a closed subscriber leaving the topic')
    await until(() => !nodes[5]!.host.services.pubsub.topicValidators.has(topic), 'the validator to go with the topic')
  })
})
