/**
 * The end a delegator's liveness keeps when a run it was about to declare lost
 * had ended (src/runs/liveness.ts `declare`, src/runs/fold-checked.ts
 * `checkedEnd`): the executor's signed run.completed or run.failed is folded
 * into the record, and what of it breaks the Run schema (an output past
 * `maxProperties`, a failure code or message the schema refuses) is dropped,
 * not written into the record and served. Before session 61 `checkedEnd` had
 * no test of its own (session 60's note).
 *
 * The record is a real one: a run delegated between two nodes over the
 * memory transport, as the delegator holds it.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import type { MeshNode } from '../src/node.ts'
import type { Run } from '../src/runlog/types.ts'
import { checkedEnd } from '../src/runs/fold-checked.ts'
import { isRun } from '../src/runs/messages.ts'
import { startMesh, stopAll, until } from './helpers.ts'

const CAP = { capability_id: 'cap:checked-end', version: '1.0.0' }
/** One more key than the Run schema's Object allows (protocols/runs.schema.json `maxProperties`). */
const TOO_MANY_KEYS = 257

describe('the end of a run a delegator keeps from its executor\'s event', () => {
  let nodes: MeshNode[] = []
  let record: Run

  beforeAll(async () => {
    nodes = await startMesh(2)
    const [D, E] = nodes as [MeshNode, MeshNode]
    E.runs.handle(CAP, async () => ({ done: true }))
    await E.publishCard({ name: 'executor', capabilities: [CAP] })
    const run = await D.delegate({ to_agent: E.agentId, task_id: 'task-checked-end', capability: CAP, input: {} })
    await until(async () => (await D.runs.store.getOutgoing(run.run_id))?.state === 'completed', 'the delegator to record the run\'s end')
    record = (await D.runs.store.getOutgoing(run.run_id))!
    expect(isRun(record)).toBe(true)
  })
  afterAll(async () => { await stopAll(nodes) })

  it('is kept as it is when it meets the Run schema, and nothing is counted', () => {
    let refused = 0
    expect(checkedEnd(record, () => { refused++ })).toBe(record)
    expect(refused).toBe(0)
  })

  it('keeps a completed run without an output the schema refuses, and counts it', () => {
    let refused = 0
    const output = Object.fromEntries(Array.from({ length: TOO_MANY_KEYS }, (_, i) => [`k${i}`, i]))
    const kept = checkedEnd({ ...record, state: 'completed', output }, () => { refused++ })
    expect(refused).toBe(1)
    expect(kept.state).toBe('completed')
    expect(kept.output).toBeNull()
    expect(isRun(kept)).toBe(true)
  })

  it('keeps a failed run with a failure this node can record in place of one the schema refuses, and counts it', () => {
    let refused = 0
    // as it came from the wire: the type allows only the codes the schema does
    const failure = JSON.parse(JSON.stringify({ code: 'not a code!', message: 'm'.repeat(5000) })) as NonNullable<Run['failure']>
    const kept = checkedEnd({ ...record, state: 'failed', output: null, failure }, () => { refused++ })
    expect(refused).toBe(1)
    expect(kept.state).toBe('failed')
    expect(kept.failure?.code).toBe('INVALID_REQUEST')
    expect(kept.failure?.message.length).toBeLessThanOrEqual(1024)
    expect(isRun(kept)).toBe(true)
  })
})
