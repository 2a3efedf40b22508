/**
 * A verdict this node's own placement refuses is not published (found by
 * session 57's review): the events service placed a verdict and published it
 * whatever the placement said, so a verdict that did not extend the run's
 * log as held here (a later event of the run came first) went out to every
 * peer, which refused it too and scored the publisher down for it.
 */
import { generateKeyPair } from '@libp2p/crypto/keys'
import type { PrivateKey } from '@libp2p/interface'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import type { MeshNode } from '../src/node.ts'
import { signVerdict } from '../src/runlog/verdict.ts'
import { startMesh, stopAll, until } from './helpers.ts'

const CAP = { capability_id: 'cap:verdict-stale', version: '1.0.0' }
const TASK = 'task-verdict-stale'

describe('a verdict that does not extend the run\'s log as held', () => {
  let nodes: MeshNode[] = []
  let D: MeshNode, B: MeshNode
  let dKey: PrivateKey
  const gate = Promise.withResolvers<void>()

  beforeAll(async () => {
    dKey = await generateKeyPair('Ed25519')
    nodes = await startMesh(2, { nodeOptions: i => i === 0 ? { privateKey: dKey } : {} })
    ;[D, B] = nodes as [MeshNode, MeshNode]
    B.runs.handle(CAP, async (ctx) => {
      await ctx.progress({ step: 1 })
      await Promise.race([gate.promise, new Promise(resolve => { ctx.signal.addEventListener('abort', resolve, { once: true }) })])
      return { ok: true }
    })
    await B.publishCard({ name: 'worker', capabilities: [CAP] })
  })
  afterAll(async () => {
    gate.resolve()
    await stopAll(nodes)
  })

  it('is not published', async () => {
    const run = await D.delegate({ to_agent: B.agentId, task_id: TASK, capability: CAP, input: {} })
    await until(async () => (await D.runs.store.log.get(run.run_id, 2)) !== undefined, 'D to hold the progress event')
    const started = (await D.runs.store.log.get(run.run_id, 1))!
    // chained to seq 1, where D holds the executor's seq 2 already
    const stale = await signVerdict(dKey, D.agentId, started, 'declared on an old head')
    const before = D.events.stats.published + D.events.stats.unpublished
    await D.events.placeVerdict(stale)
    expect(D.events.stats.published + D.events.stats.unpublished).toBe(before)
    expect((await D.runs.store.log.get(run.run_id, 2))?.type).toBe('run.progress')
  })
})
