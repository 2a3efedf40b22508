/**
 * A node holding a liveness verdict at seq N gets the executor's own event
 * N+1 (chained on the executor's own N, which liveness.md says replaces the
 * verdict) before N, as gossip may reorder. It is held as an event ahead of
 * the chain and placed once N replaces the verdict. Before the fix it was
 * `conflict`: Rejected (the honest peer that forwarded it lost peer score,
 * three make a graylist) and dropped, and the subscriber never got it.
 * Found by session 45's events review.
 */
import { generateKeyPair } from '@libp2p/crypto/keys'
import type { PrivateKey } from '@libp2p/interface'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { agentIdOf } from '../src/identity/identity.ts'
import type { MeshNode } from '../src/node.ts'
import { signVerdict } from '../src/runlog/verdict.ts'
import { collect, type Collector } from './events-helpers.ts'
import { startMesh, stopAll } from './helpers.ts'
import { rawGossip } from './fixtures/raw-gossip.ts'
import { signedRun } from './fixtures/signed-run.ts'

const TASK = 'task-verdict-reorder'
const CAP = { capability_id: 'cap:verdict-reorder', version: '1.0.0' }

describe('the executor\'s events past a verdict, reordered', () => {
  let nodes: MeshNode[] = []
  let A: MeshNode, P: MeshNode
  let dKey: PrivateKey, xKey: PrivateKey
  let onA: Collector

  beforeAll(async () => {
    ;[dKey, xKey] = await Promise.all([generateKeyPair('Ed25519'), generateKeyPair('Ed25519')])
    nodes = await startMesh(2)
    ;[A, P] = nodes as [MeshNode, MeshNode]
    onA = await collect(A, TASK, { owner: agentIdOf(dKey) })
  })
  afterAll(async () => { await stopAll(nodes) })

  it('are not rejected as a conflict, and reach the subscriber once the verdict is replaced', async () => {
    const { sendJudged } = await rawGossip(P, A, TASK)
    const { D, r1, r2, r3 } = await signedRun(dKey, xKey, TASK, CAP)
    const verdict = await signVerdict(dKey, D, r1, 'executor lost')
    for (const e of [r1, verdict, r3, r2]) await sendJudged(e)
    expect(A.events.stats.gossip.conflict).toBe(0)
    await onA.until(es => es.some(e => e.seq === 3), 'the executor\'s last event', 5_000)
    // the executor's own log, in order, the verdict replaced
    expect(onA.events.filter(e => e.run_id === r1.run_id).map(e => `${e.seq}:${e.type}:${e.declared_by === undefined ? 'x' : 'd'}`).slice(-2))
      .toEqual(['2:run.progress:x', '3:run.completed:x'])
  })
})
