/**
 * A handoff successor whose sender never confirmed it (its commit of the handoff was refused) is failed by its
 * receiver (HANDOFF_UNCONFIRMED). When the receiver's own disk refused that fail, the successor stayed running
 * for good: no handler, its sender's slot held, and nobody knowing of it. The fail is now written again once the
 * disk takes writes.
 */
import { MemoryDatastore } from 'datastore-core'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { silentLogger } from '../src/logger.ts'
import { createMeshNode, type MeshNode } from '../src/node.ts'
import { FaultyDatastore } from './fixtures/faulty-datastore.ts'
import { holdingWorkers, rejectsWith, stopAll, until } from './helpers.ts'

const WORK = { capability_id: 'cap:handoff-unconfirmed-disk', version: '1.0.0' }
// the receiver's disk is set to refuse after the sender's handoff call returns, while the confirm timer phase one
// started runs (a few ms of a quiet machine): the timer leaves a busy one far more than that
const CONFIRM_TIMEOUT_MS = 3_000

describe('an unconfirmed handoff successor on a disk that refused its fail', () => {
  const held = new Map<string, PromiseWithResolvers<void>>()
  const sender = new FaultyDatastore(new MemoryDatastore())
  const receiver = new FaultyDatastore(new MemoryDatastore())
  let A: MeshNode, B: MeshNode, C: MeshNode
  beforeAll(async () => {
    const base = { listen: ['/ip4/127.0.0.1/tcp/0'], localMesh: true, logger: silentLogger() }
    A = await createMeshNode(base); await A.start()
    B = await createMeshNode({ ...base, datastore: sender.store }); await B.start()
    C = await createMeshNode({ ...base, datastore: receiver.store, handoffConfirmTimeoutMs: CONFIRM_TIMEOUT_MS }); await C.start()
    await holdingWorkers([B, C], WORK, held)
    await A.join(B.addresses)
    await C.join(B.addresses)
    await A.join(C.addresses)
  })
  afterAll(async () => {
    for (const g of held.values()) g.resolve()
    sender.failing = false
    receiver.failing = false
    await stopAll([A, B, C])
  })

  it('is failed once the disk takes writes again, and its slot is freed', async () => {
    const run = await A.delegate({ to_agent: B.agentId, task_id: 'handoff-unconfirmed-disk', capability: WORK, input: {} })
    await until(() => held.has(run.run_id), 'the run to start on B')
    // the sender's commit of the handoff is refused: the successor on C is never confirmed
    sender.only = k => k.startsWith('/aap/runs/')
    sender.failing = true
    await rejectsWith(B.runs.handoff(run.run_id, C.agentId, {}), 'STORAGE_FULL')
    sender.failing = false
    expect(C.runs.slots.heldBy(B.agentId)).toBe(1)
    // the receiver's disk refuses the fail, then takes writes again
    receiver.only = k => k.startsWith('/aap/runs/')
    receiver.failing = true
    await until(() => C.runs.handoffConfirmations.failed === 1 && receiver.refused > 0, 'C to try failing the successor on its refusing disk', 15_000)
    receiver.failing = false
    const successor = (await C.runs.list({ side: 'executing' })).executing.find(r => r.handoff_from?.run_id === run.run_id)
    expect(successor).toBeDefined()
    await until(async () => (await C.runs.getRun(successor?.run_id ?? '')).state === 'failed', 'the successor to fail', 15_000)
    expect((await C.runs.getRun(successor?.run_id ?? '')).failure?.code).toBe('HANDOFF_UNCONFIRMED')
    expect(C.runs.slots.heldBy(B.agentId)).toBe(0)
    expect(held.has(successor?.run_id ?? '')).toBe(false)
  }, 60_000)
})
