/**
 * A delegator records as its own only the run its delegation made. It took
 * any well-formed run of the executor: an executor (hostile, or buggy) that
 * answered with another delegator's run, or a run of another task, had it
 * appear in this node's delegated list and returned to the application as
 * its handle. Found by session 45's delegate review.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { DELEGATE_MAX_FRAME_BYTES, DELEGATE_PROTOCOL } from '../src/constants.ts'
import type { MeshNode } from '../src/node.ts'
import type { Run } from '../src/runlog/types.ts'
import { method, serve } from '../src/wire/rpc.ts'
import { isWireDelegate } from '../src/runs/messages.ts'
import { rejectsWith, startMesh, stopAll } from './helpers.ts'

const CAP = { capability_id: 'cap:foreign-answer', version: '1.0.0' }

describe('a delegate answered with a run that is not the delegation\'s', () => {
  let nodes: MeshNode[] = []
  let A: MeshNode, B: MeshNode, C: MeshNode
  let foreign: Run

  beforeAll(async () => {
    nodes = await startMesh(3)
    ;[A, B, C] = nodes as [MeshNode, MeshNode, MeshNode]
    B.runs.handle(CAP, async () => ({ ok: true }))
    await B.publishCard({ name: 'b', capabilities: [CAP] })
    // a real run of B's, delegated by C
    foreign = await C.delegate({ to_agent: B.agentId, task_id: 'task-of-c', capability: CAP, input: {} })
    // B now answers every delegation with that run
    await B.host.unhandle(DELEGATE_PROTOCOL)
    await serve(B.host, {
      protocol: DELEGATE_PROTOCOL,
      maxFrameBytes: DELEGATE_MAX_FRAME_BYTES,
      methods: { delegate: method(isWireDelegate, async () => ({ run: foreign })) }
    })
  })
  afterAll(async () => { await stopAll(nodes) })

  it('is refused (INVALID_REQUEST, ticket_mismatch) and not recorded as this node\'s', async () => {
    const err = await rejectsWith(A.delegate({ to_agent: B.agentId, task_id: 'task-of-a', capability: CAP, input: {} }), 'INVALID_REQUEST')
    expect(err.details).toMatchObject({ reason: 'ticket_mismatch' })
    expect((await A.runs.list()).delegated.map(r => r.run_id)).not.toContain(foreign.run_id)
    // a retry with a key may be answered with the first request's run, but never with another task's
    const keyed = await rejectsWith(A.delegate({ to_agent: B.agentId, task_id: 'task-of-a', capability: CAP, input: {}, idempotency_key: 'k1' }), 'INVALID_REQUEST')
    expect(keyed.details).toMatchObject({ reason: 'ticket_mismatch' })
  })
})
