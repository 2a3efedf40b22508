/**
 * A delegator folds its executor's signed events into its record of the run
 * (src/runs/fold-checked.ts). The event schema bounds a payload only as a
 * whole: a run.failed whose failure code the Run schema refuses, or a
 * run.blocked whose checkpoint id is past its 128 characters
 * (protocols/control.md), was written into the record and served (found by
 * session 60's review; the same values in a get_run answer are refused).
 * Now such an event is not folded, and counted.
 *
 * Real nodes over the memory transport; the executor's key is the test's, so
 * it signs what its own code never would and publishes it on the run's
 * correlation topic, as a hostile executor's code would.
 */
import { generateKeyPair } from '@libp2p/crypto/keys'
import type { PrivateKey } from '@libp2p/interface'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { correlationTopic } from '../src/events/topic.ts'
import type { MeshNode } from '../src/node.ts'
import { eventHash, signEvent } from '../src/runlog/event.ts'
import type { AgentEvent } from '../src/runlog/types.ts'
import { isRun } from '../src/runs/messages.ts'
import { startMesh, stopAll, until } from './helpers.ts'

const CAP = { capability_id: 'cap:fold-checked', version: '1.0.0' }
const enc = new TextEncoder()

describe('an executor event that would break the delegator\'s run record', () => {
  let nodes: MeshNode[] = []
  let D: MeshNode, E: MeshNode
  let eKey: PrivateKey
  const hold = Promise.withResolvers<void>()

  beforeAll(async () => {
    eKey = await generateKeyPair('Ed25519')
    nodes = await startMesh(2, { nodeOptions: i => i === 1 ? { privateKey: eKey } : {} })
    ;[D, E] = nodes as [MeshNode, MeshNode]
    // the run stays running: the executor's own code sends nothing after run.started
    E.runs.handle(CAP, async () => { await hold.promise; return { done: true } })
    await E.publishCard({ name: 'executor', capabilities: [CAP] })
  })
  afterAll(async () => {
    hold.resolve()
    await stopAll(nodes)
  })

  /** Delegate a run on `task`, wait until the delegator holds its run.started, and publish `payload` as its seq 2 of `type`. */
  async function craft (task: string, type: AgentEvent['type'], payload: Record<string, unknown>): Promise<string> {
    const run = await D.delegate({ to_agent: E.agentId, task_id: task, capability: CAP, input: {} })
    await until(async () => (await D.events.readCorrelation(task)).get(run.run_id)?.length === 1, 'the delegator to hold run.started')
    const started = (await D.events.readCorrelation(task)).get(run.run_id)![0]!
    const bad = await signEvent(eKey, {
      run_id: run.run_id, correlation_id: task, type, payload, at: new Date().toISOString(), seq: 2, prev: eventHash(started), executor: E.agentId
    })
    await E.host.services.pubsub.publish(correlationTopic(task), enc.encode(JSON.stringify(bad)))
    return run.run_id
  }

  it('is not folded: a failure code the Run schema refuses', async () => {
    const before = D.runs.store.stats.refusedEvents
    const runId = await craft('task-fold-failed', 'run.failed', { failure: { code: 'not a code!', message: 'm'.repeat(5000) } })
    await until(() => D.runs.store.stats.refusedEvents > before, 'the delegator to refuse the event')
    const record = await D.runs.store.getOutgoing(runId)
    // before: state failed, with the code and a 5000-character message, which no Run may hold
    expect(record?.state).toBe('running')
    expect(isRun(record)).toBe(true)
  })

  it('is not folded: a checkpoint id and reason past their limits', async () => {
    const before = D.runs.store.stats.refusedEvents
    const runId = await craft('task-fold-blocked', 'run.blocked', { checkpoint_id: 'c'.repeat(1000), reason: 'r'.repeat(5000) })
    await until(() => D.runs.store.stats.refusedEvents > before, 'the delegator to refuse the event')
    const record = await D.runs.store.getOutgoing(runId)
    expect(record?.state).toBe('running')
    expect(isRun(record)).toBe(true)
  })
})
