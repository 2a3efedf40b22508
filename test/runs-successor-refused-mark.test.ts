/**
 * A refused successor's mark outlived its delete. A delegator's record that
 * names a successor is written with a mark of it (adoptions.ts); the store
 * hands the record to its listeners before that write is queued, and a
 * successor its named agent does not execute is refused at once (no
 * network): the refused path deleted the mark without waiting for the
 * record's write, so the delete could reach the disk first and the write put
 * the mark back. The delegator then answered get_verdict held: true for a
 * run it never recorded, until its next start (found by session 59's
 * review). Now the record is durable before a refused successor's mark goes,
 * as for one adopted or held.
 */
import { generateKeyPair } from '@libp2p/crypto/keys'
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest'
import { agentIdOf } from '../src/identity/identity.ts'
import { silentLogger } from '../src/logger.ts'
import type { MeshNode } from '../src/node.ts'
import { verdictOn } from '../src/runs/recovery.ts'
import type { Run } from '../src/runlog/types.ts'
import { startLoneNodes, stopAll } from './helpers.ts'

const CAP = { capability_id: 'cap:successor-refused-mark', version: '1.0.0' }

describe('a successor refused at once', () => {
  let nodes: MeshNode[] = []
  let D: MeshNode

  beforeAll(async () => {
    nodes = await startLoneNodes(1, { logger: silentLogger() })
    D = nodes[0]!
  })
  afterAll(async () => {
    await stopAll(nodes)
  })

  it('leaves no mark: the delegator does not say it holds a run it never recorded', async () => {
    const store = D.runs.store
    const X = agentIdOf(await generateKeyPair('Ed25519'))
    const V = agentIdOf(await generateKeyPair('Ed25519'))
    // a handoff naming a successor its named agent (X) does not execute (the run id names V): refused with no call
    const successor = `${V}:victim-run`
    const at = new Date().toISOString()
    const pred: Run = {
      run_id: `${X}:handed-off`, agent_id: X, correlation_id: 'task-successor-refused-mark', state: 'completed', created_at: at, updated_at: at,
      capability: CAP, delegator: D.agentId, authorized: [], parent_run: null, handoff_from: null, handoff_to: null,
      checkpoint_id: null, block_reason: null, output: null, failure: null, last_seq: 1
    }
    const settled = Promise.withResolvers<void>()
    const settle = store.adoptions.settle.bind(store.adoptions)
    vi.spyOn(store.adoptions, 'settle').mockImplementation(async (runId) => {
      try {
        await settle(runId)
      } finally {
        if (runId === successor) settled.resolve()
      }
    })
    await store.putOutgoing(pred, true)
    await store.noteOutgoing({ ...pred, last_seq: 2, handoff_to: { run_id: successor, agent_id: X } }, false)
    await settled.promise
    await store.flushOutgoing()
    expect(D.runs.successorStats.refused).toBe(1)
    expect(await store.getOutgoing(successor)).toBeUndefined()
    // before: { marked: true, held: true } (the record's write, behind the delete, put the mark back)
    expect({ marked: await store.adoptions.marked(successor), held: (await verdictOn(store, D.agentId, successor)).held }).toEqual({ marked: false, held: false })
  })
})
