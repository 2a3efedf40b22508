/**
 * A run whose id is the name of another conversation (its ticket's issuer
 * chose the id: here the delegator, which names a context after a run id of
 * the executor and then signs a ticket for a run of that id, in another task)
 * is no turn of that conversation (protocols/turns.md): it never reads that
 * conversation's turns or saved context, also when its handler starts again
 * after a restart, and it cannot write the saved context (INVALID_REQUEST,
 * reason context_taken) that the conversation's next turn reads.
 */
import type { PrivateKey } from '@libp2p/interface'
import { generateKeyPair } from '@libp2p/crypto/keys'
import { MemoryDatastore } from 'datastore-core'
import { toString } from 'uint8arrays'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { DELEGATE_PROTOCOL, TICKET_SIGNING_DOMAIN } from '../src/constants.ts'
import { toAapError } from '../src/errors.ts'
import { signRaw, signingBytes } from '../src/identity/signing.ts'
import { silentLogger } from '../src/logger.ts'
import { createMeshNode, type MeshNode } from '../src/node.ts'
import type { Run } from '../src/runlog/types.ts'
import type { RunTicket } from '../src/runlog/ticket.ts'
import type { RunHandler } from '../src/runs/types.ts'
import { RawWire } from './fixtures/raw-wire.ts'
import { stopAll, until } from './helpers.ts'

const MEMO = { capability_id: 'cap:turns-taken', version: '1.0.0' }
const opts = { listen: ['/ip4/127.0.0.1/tcp/0'], localMesh: true, logger: silentLogger() }

interface Seen { saw: string | null, earlier: string[], refused: string | null }

describe('turns: a run named like another conversation is no turn of it', () => {
  const nodes: MeshNode[] = []
  const ds = new MemoryDatastore()
  let aKey: PrivateKey, bKey: PrivateKey
  let A: MeshNode, B: MeshNode
  /** What each run's handler saw, by run id (the latest start of its handler). */
  const seen = new Map<string, Seen>()

  /** Shows the saved task and the earlier turns, blocks once when asked to, then saves its own task. */
  const memo: RunHandler = async (ctx) => {
    const c = ctx.conversation
    const view: Seen = { saw: typeof c.saved?.task === 'string' ? c.saved.task : null, earlier: c.turns.map(t => t.run_id), refused: null }
    seen.set(ctx.run.run_id, view)
    if (ctx.input.block === true && ctx.restored === null) await ctx.block('wait for the restart', 'cp-taken')
    try {
      await ctx.saveContext({ task: ctx.run.correlation_id })
    } catch (err) {
      const e = toAapError(err)
      view.refused = `${e.code}/${String(e.details?.reason)}`
    }
    return { ...view }
  }

  async function startB (): Promise<MeshNode> {
    const n = await createMeshNode({ ...opts, datastore: ds, privateKey: bKey })
    await n.start()
    nodes.push(n)
    n.runs.handle(MEMO, memo)
    await n.publishCard({ name: 'memo', capabilities: [MEMO] })
    return n
  }

  beforeAll(async () => {
    aKey = await generateKeyPair('Ed25519')
    bKey = await generateKeyPair('Ed25519')
    A = await createMeshNode({ ...opts, privateKey: aKey })
    await A.start()
    nodes.push(A)
    B = await startB()
    await A.join(B.addresses)
  })
  afterAll(async () => { await stopAll(nodes) })

  const ended = async (runId: string): Promise<Run> => {
    let run: Run | undefined
    await until(async () => {
      run = await B.runs.getRun(runId)
      return run.state === 'completed' || run.state === 'failed'
    }, `run ${runId} to end`)
    return run!
  }

  /** A delegates a run of id `runId` (a ticket it signs for that id) in task `task`. */
  async function delegateAs (runId: string, task: string, input: Record<string, unknown>): Promise<void> {
    const req = { to_agent: B.agentId, task_id: task, capability: MEMO, input }
    const { signature: _old, ...unsigned } = { ...await A.runs.ticketFor(req), run_id: runId }
    const ticket: RunTicket = { ...unsigned, signature: toString(await signRaw(aKey, signingBytes(TICKET_SIGNING_DOMAIN, unsigned)), 'base64url') }
    const wire = await RawWire.open(A.host, B.host.peerId, DELEGATE_PROTOCOL)
    try {
      const answer = await wire.call({ id: 1, type: 'delegate', body: { ...req, parent_run: null, ticket } })
      expect(answer.ok).toBe(true)
    } finally {
      await wire.closeWrite()
    }
  }

  it('cannot write the saved context the conversation\'s next turn reads', async () => {
    const name = `${B.agentId}:${'c0de'.repeat(6)}`
    const r1 = await A.delegate({ to_agent: B.agentId, task_id: 'task-taken-t1', capability: MEMO, context_id: name, input: {} })
    expect((await ended(r1.run_id)).output).toEqual({ saw: null, earlier: [], refused: null })
    // a run of task T2 whose id is the conversation's name: it sees nothing of it and may not save into it
    await delegateAs(name, 'task-taken-t2', {})
    expect((await ended(name)).output).toEqual({ saw: null, earlier: [], refused: 'INVALID_REQUEST/context_taken' })
    // the conversation's next turn sees what its own turn saved
    const r2 = await A.delegate({ to_agent: B.agentId, task_id: 'task-taken-t1', capability: MEMO, context_id: name, input: {} })
    expect((await ended(r2.run_id)).output).toEqual({ saw: 'task-taken-t1', earlier: [r1.run_id], refused: null })
  })

  it('does not read the conversation when its handler starts again after a restart', async () => {
    const name = `${B.agentId}:${'beef'.repeat(6)}`
    const r1 = await A.delegate({ to_agent: B.agentId, task_id: 'task-taken-t3', capability: MEMO, context_id: name, input: {} })
    await ended(r1.run_id)
    await delegateAs(name, 'task-taken-t4', { block: true })
    await until(async () => (await B.runs.getRun(name)).state === 'blocked', 'the named run to block')
    expect(seen.get(name)).toMatchObject({ saw: null, earlier: [] })
    // the executor restarts; resumed, the run's handler starts again and reads its conversation from the store
    await B.stop()
    B = await startB()
    await A.join(B.addresses)
    await A.runs.resume(name, { ok: true })
    const run = await ended(name)
    expect(run.output).toEqual({ saw: null, earlier: [], refused: 'INVALID_REQUEST/context_taken' })
    const r2 = await A.delegate({ to_agent: B.agentId, task_id: 'task-taken-t3', capability: MEMO, context_id: name, input: {} })
    expect((await ended(r2.run_id)).output).toEqual({ saw: 'task-taken-t3', earlier: [r1.run_id], refused: null })
  })
})
