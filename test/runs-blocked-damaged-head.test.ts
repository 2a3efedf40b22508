/**
 * A run that was blocked when its executor stopped, and whose last event was
 * damaged on disk meanwhile (a torn write), is not stuck blocked after the
 * restart: no resume or cancel could ever chain an event to the damaged one
 * (each failed with INTERNAL corrupt_record for good, the delegator's slot
 * held). Recovery ends it in its record alone (EXECUTOR_RESTARTED), as it
 * does a running run with a damaged head (storage-damaged-head.test.ts).
 */
import { generateKeyPair } from '@libp2p/crypto/keys'
import { MemoryDatastore } from 'datastore-core'
import { afterAll, describe, expect, it } from 'vitest'
import type { MeshNode } from '../src/node.ts'
import { EventLog } from '../src/runlog/event-log.ts'
import type { RunContext } from '../src/runs/types.ts'
import { servingNode, startLoneNodes, stopAll, until } from './helpers.ts'

const WORK = { capability_id: 'cap:blocked-damaged-head', version: '1.0.0' }
const enc = new TextEncoder()
const approval = async (ctx: RunContext): Promise<Record<string, unknown>> => ({ got: ctx.restored?.resolution ?? await ctx.block('approve?', 'cp-damaged') })

describe('storage: a damaged last event of a run blocked across a restart', () => {
  const nodes: MeshNode[] = []
  afterAll(async () => { await stopAll(nodes) })

  it('the run ends after the restart, in its record, and a resume is no longer refused as corrupt_record', async () => {
    const ds = new MemoryDatastore()
    const key = await generateKeyPair('Ed25519')
    let E = await servingNode(WORK, { datastore: ds, privateKey: key }, approval)
    const [D] = await startLoneNodes(1) as [MeshNode]
    nodes.push(D)
    await D.join(E.addresses)
    const run = await D.delegate({ to_agent: E.agentId, task_id: 'task-blocked-head', capability: WORK, input: {} })
    const log = new EventLog(ds)
    await until(async () => (await log.head(run.run_id))?.type === 'run.blocked', 'the run.blocked event to be stored')
    const seq = (await log.head(run.run_id))?.seq ?? 0
    await E.stop()
    await ds.put(EventLog.eventKey(run.run_id, seq), enc.encode('{"run_id":"x","se'))
    E = await servingNode(WORK, { datastore: ds, privateKey: key }, approval)
    nodes.push(E)
    await D.join(E.addresses)
    await E.runs.recovered()
    const ended = await E.runs.getRun(run.run_id)
    expect(ended.state).toBe('failed')
    expect(ended.failure?.code).toBe('EXECUTOR_RESTARTED')
    expect(ended.last_seq).toBe(seq)
    expect(E.runs.slots.heldBy(D.agentId)).toBe(0)
    // nothing was signed past (or at) the damaged seq
    expect(await log.get(run.run_id, seq + 1)).toBeUndefined()
    await expect(log.head(run.run_id)).rejects.toMatchObject({ code: 'INTERNAL', details: { reason: 'corrupt_record' } })
    // the delegator's resume meets an ended run, not a damaged record
    await expect(D.runs.resume(run.run_id, { ok: true })).rejects.toMatchObject({ code: 'INVALID_TRANSITION', details: { state: 'failed', command: 'resume' } })
  }, 60_000)
})
