/**
 * A delegator's verdict whose failure message is longer than a Run's failure holds (REASON_MAX_CHARS) is refused
 * as bad_verdict. Before, the executor adopted it as it was: its Run record then broke the Run schema, and every
 * peer's get_run of the run was refused (INVALID_REQUEST) from then on, authorized agents included.
 */
import { generateKeyPair } from '@libp2p/crypto/keys'
import type { PrivateKey } from '@libp2p/interface'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { CONTROL_MAX_FRAME_BYTES, CONTROL_PROTOCOL, REASON_MAX_CHARS } from '../src/constants.ts'
import { peerIdOfAgent } from '../src/identity/identity.ts'
import type { MeshNode } from '../src/node.ts'
import { eventHash, signEvent } from '../src/runlog/event.ts'
import type { AgentEvent } from '../src/runlog/types.ts'
import { RpcClient } from '../src/wire/rpc.ts'
import { startMesh, stopAll, until } from './helpers.ts'

const WAIT = { capability_id: 'cap:verdict-message-bound', version: '1.0.0' }

describe('a verdict message past the Run schema', () => {
  let nodes: MeshNode[] = []
  let A: MeshNode, B: MeshNode, C: MeshNode
  let aKey: PrivateKey

  beforeAll(async () => {
    aKey = await generateKeyPair('Ed25519')
    nodes = await startMesh(3, { nodeOptions: i => (i === 0 ? { privateKey: aKey } : {}) })
    ;[A, B, C] = nodes as [MeshNode, MeshNode, MeshNode]
    B.runs.handle(WAIT, async (ctx) => { await ctx.block('waiting', 'cp-1'); return {} })
    await B.publishCard({ name: 'b', capabilities: [WAIT] })
  })
  afterAll(async () => { await stopAll(nodes) })

  it('is refused as bad_verdict; the run stays readable to its authorized agents', async () => {
    const run = await A.delegate({ to_agent: B.agentId, task_id: 'task-verdict-message-bound', capability: WAIT, input: {}, authorized: [C.agentId] })
    await until(async () => (await B.runs.getRun(run.run_id)).state === 'blocked', 'blocked')
    const head = (await B.events.lastEvent(run.run_id))!
    const verdictOf = async (message: string): Promise<AgentEvent> => signEvent(aKey, {
      run_id: head.run_id,
      correlation_id: head.correlation_id,
      type: 'run.failed',
      payload: { failure: { code: 'EXECUTOR_LOST', message }, reason: 'executor_lost', by: A.agentId, after_seq: head.seq },
      at: new Date().toISOString(),
      seq: head.seq + 1,
      prev: eventHash(head),
      executor: head.executor,
      declared_by: A.agentId
    })
    const client = new RpcClient(A.host, { protocol: CONTROL_PROTOCOL, maxFrameBytes: CONTROL_MAX_FRAME_BYTES })
    try {
      const refused = await client.call(peerIdOfAgent(B.agentId), 'executor_lost', { run_id: run.run_id, verdict: await verdictOf('x'.repeat(REASON_MAX_CHARS + 1)) }, {})
        .then(() => undefined, (err: { code?: string, details?: { reason?: string } }) => ({ code: err.code, reason: err.details?.reason }))
      expect(refused).toEqual({ code: 'INVALID_REQUEST', reason: 'bad_verdict' })
      expect((await B.runs.getRun(run.run_id)).state).toBe('blocked')
      // one at the bound is taken, and the run it ends stays readable by the agents it authorized
      await client.call(peerIdOfAgent(B.agentId), 'executor_lost', { run_id: run.run_id, verdict: await verdictOf('y'.repeat(REASON_MAX_CHARS)) }, {})
    } finally {
      client.close()
    }
    const local = await B.runs.getRun(run.run_id)
    expect(local.state).toBe('failed')
    expect(local.failure?.message.length).toBeLessThanOrEqual(REASON_MAX_CHARS)
    const read = await C.runs.getRun(run.run_id).then(r => r.state, (err: { code?: string }) => err.code)
    expect(read).toBe('failed')
  })
})
