/**
 * A handoff successor's run slot is charged to its sender (protocols/handoff.md,
 * check 10): so is it after the receiver restarts with the successor blocked.
 * Before, recovery charged every restored run to its delegator, so after a
 * restart the sender's share was free again and the delegator's spent by a
 * run it never sent here. Found by session 45's review.
 */
import type { PrivateKey } from '@libp2p/interface'
import { generateKeyPair } from '@libp2p/crypto/keys'
import { mkdtemp, rm } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { createMeshNode, type MeshNode } from '../src/node.ts'
import { holdingWorkers, startLoneNodes, stopAll, until } from './helpers.ts'

const WORK = { capability_id: 'cap:slots-restart', version: '1.0.0' }

describe('run slots after a restart', () => {
  let dataDir = ''
  let cKey: PrivateKey
  let A: MeshNode, B: MeshNode, C: MeshNode
  const held = new Map<string, PromiseWithResolvers<void>>()
  const opts = { listen: ['/ip4/127.0.0.1/tcp/0'], localMesh: true }

  const startC = async (): Promise<MeshNode> => {
    const n = await createMeshNode({ ...opts, dataDir: join(dataDir, 'c'), privateKey: cKey })
    await n.start()
    n.runs.handle(WORK, async (ctx) => {
      await ctx.block('waiting for the delegator', 'cp-slots')
      return { ok: true }
    })
    await n.publishCard({ name: 'c', capabilities: [WORK] })
    return n
  }

  beforeAll(async () => {
    dataDir = await mkdtemp(join(tmpdir(), 'aap-slots-restart-'))
    cKey = await generateKeyPair('Ed25519')
    ;[A, B] = await startLoneNodes(2) as [MeshNode, MeshNode]
    await holdingWorkers([B], WORK, held)
    C = await startC()
    await A.join(B.addresses)
    await C.join(B.addresses)
  })
  afterAll(async () => {
    for (const g of held.values()) g.resolve()
    await stopAll([A, B, C])
    await rm(dataDir, { recursive: true, force: true })
  })

  it('a blocked handoff successor restored after a restart is charged to its sender, not its delegator', async () => {
    const run = await A.delegate({ to_agent: B.agentId, task_id: 'task-slots-restart', capability: WORK, input: {} })
    await until(() => held.has(run.run_id), 'the run to start on B')
    const successor = await B.runs.handoff(run.run_id, C.agentId, {})
    await until(async () => (await C.runs.getRun(successor.run_id)).state === 'blocked', 'the successor to block on C')
    expect([C.runs.slots.heldBy(B.agentId), C.runs.slots.heldBy(A.agentId)]).toEqual([1, 0])

    await C.stop()
    C = await startC()
    await until(async () => (await C.runs.getRun(successor.run_id)).state === 'blocked', 'the successor restored on C')
    expect([C.runs.slots.heldBy(B.agentId), C.runs.slots.heldBy(A.agentId)]).toEqual([1, 0])
  })
})
