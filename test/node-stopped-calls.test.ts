/**
 * A MeshNode's verbs on a stopped node, and a call under way when it stops
 * (src/node.ts, src/util/lifecycle.ts): INTERNAL `reason: node_stopped`,
 * never an answer about the mesh. Found by session 59's review: on a stopped
 * node delegate and getCard said AGENT_NOT_FOUND (the agent "unreachable"),
 * getRun blamed a live executor, discover({ fresh: true }) said no agent
 * matched ([]), and a delegation under way when the node stopped failed with
 * AGENT_NOT_FOUND.
 */
import { generateKeyPair } from '@libp2p/crypto/keys'
import { peerIdFromPrivateKey } from '@libp2p/peer-id'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { AapError } from '../src/errors.ts'
import { silentLogger } from '../src/logger.ts'
import type { MeshNode } from '../src/node.ts'
import { rejectsWith, startMesh, stopAll, until } from './helpers.ts'

const CAP = { capability_id: 'cap:stopped-calls', version: '1.0.0' }

/** The call's error: INTERNAL, reason node_stopped, naming the verb. */
async function refusedAsStopped (p: Promise<unknown>, what: string): Promise<AapError> {
  const err = await rejectsWith(p, 'INTERNAL')
  expect(err.details).toEqual({ reason: 'node_stopped' })
  expect(err.message).toBe(`the node is stopped: ${what} needs a started node`)
  return err
}

describe('the verbs of a stopped MeshNode', () => {
  let nodes: MeshNode[] = []
  let A: MeshNode
  let B: MeshNode
  let runId = ''
  let stranger = ''

  beforeAll(async () => {
    nodes = await startMesh(2, { nodeOptions: () => ({ logger: silentLogger() }) })
    ;[A, B] = nodes as [MeshNode, MeshNode]
    B.runs.handle(CAP, async () => ({ ok: true }))
    await B.publishCard({ name: 'worker', capabilities: [CAP] })
    runId = (await A.delegate({ to_agent: B.agentId, task_id: 'task-before-stop', capability: CAP, input: {} })).run_id
    stranger = peerIdFromPrivateKey(await generateKeyPair('Ed25519')).toString()
    await A.stop()
  }, 60_000)
  afterAll(async () => { await stopAll(nodes) })

  it('delegate fails as stopped, not AGENT_NOT_FOUND', async () => {
    // before: AGENT_NOT_FOUND "unreachable ... aborted"
    await refusedAsStopped(A.delegate({ to_agent: B.agentId, task_id: 'task-after-stop', capability: CAP, input: {} }), 'delegate')
  })

  it('getRun of a run it delegated fails as stopped, not blaming the executor', async () => {
    // before: AGENT_NOT_FOUND naming B
    await refusedAsStopped(A.getRun(runId), 'getRun')
  })

  it('a fresh discover fails as stopped instead of finding no agent', async () => {
    // before: resolved []
    await refusedAsStopped(A.discover({ capability: { capability_id: CAP.capability_id } }, { fresh: true }), 'discover')
  })

  it('getCard of an agent it never saw fails as stopped', async () => {
    // before: AGENT_NOT_FOUND
    await refusedAsStopped(A.getCard(stranger), 'getCard')
  })

  it('every other verb that needs the mesh fails the same way', async () => {
    await refusedAsStopped(A.cancel(runId), 'cancel')
    await refusedAsStopped(A.block(runId, 'why', 'cp-1'), 'block')
    await refusedAsStopped(A.resume(runId, {}), 'resume')
    await refusedAsStopped(A.handoff(runId, B.agentId, {}), 'handoff')
    await refusedAsStopped(A.join(B.addresses), 'join')
    await refusedAsStopped(A.keepJoined(B.addresses), 'keepJoined')
    await refusedAsStopped(A.publishCard({ name: 'late', capabilities: [] }), 'publishCard')
  })

  it('started again, the node delegates and reads its runs again', async () => {
    await A.start()
    await A.join(B.addresses)
    expect((await A.getRun(runId)).state).toBe('completed')
    const run = await A.delegate({ to_agent: B.agentId, task_id: 'task-after-restart', capability: CAP, input: {} })
    expect(run.run_id).not.toBe(runId)
  }, 30_000)
})

describe('a delegation under way when its node stops', () => {
  let nodes: MeshNode[] = []
  const gate = Promise.withResolvers<void>()
  afterAll(async () => {
    gate.resolve()
    await stopAll(nodes)
  })

  it('fails as stopped, with what it met as the cause', async () => {
    nodes = await startMesh(2, { nodeOptions: () => ({ logger: silentLogger() }) })
    const [A, B] = nodes as [MeshNode, MeshNode]
    B.runs.handle(CAP, async () => ({ ok: true }))
    await B.publishCard({ name: 'slow', capabilities: [CAP] })
    let asked = false
    // B takes its time to accept: A's delegation waits on it
    B.runs.setPolicy(async () => {
      asked = true
      await gate.promise
      return undefined
    })
    const delegating = A.delegate({ to_agent: B.agentId, task_id: 'task-under-way', capability: CAP, input: {} })
    const outcome = delegating.then(() => undefined, (err: unknown) => err)
    await until(() => asked, 'B to be asked')
    await A.stop()
    const err = await outcome
    // before: AGENT_NOT_FOUND
    expect(err).toBeInstanceOf(AapError)
    expect(err).toMatchObject({ code: 'INTERNAL', details: { reason: 'node_stopped' } })
    expect((err as AapError).cause).toBeDefined()
  }, 60_000)
})
