/**
 * An executor's ending of a run that a passing disk fault refused is written
 * again once the disk takes writes (src/runs/end-retry.ts). Found by session
 * 46's review: a handler that returned while the store refused writes had its
 * completion refused, then the failure made after it too; the run stayed
 * `running` for good, with no handler, holding its delegator's slot (and the
 * delegator's probes found a live executor, so nobody declared it). A restart
 * whose EXECUTOR_RESTARTED write was refused left its interrupted run the same.
 */
import { afterEach, describe, expect, it } from 'vitest'
import { MemoryDatastore } from 'datastore-core'
import { generateKeyPair } from '@libp2p/crypto/keys'
import { createMeshNode, type MeshNode, type MeshNodeOptions } from '../src/node.ts'
import { silentLogger } from '../src/logger.ts'
import type { RunHandler } from '../src/runs/types.ts'
import { FaultyDatastore } from './fixtures/faulty-datastore.ts'
import { servingNode, stopAll, until } from './helpers.ts'

const CAP = { capability_id: 'cap:ending-retry', version: '1.0.0' }
let nodes: MeshNode[] = []
afterEach(async () => { await stopAll(nodes); nodes = [] })

async function node (opts: Partial<MeshNodeOptions> = {}, handler?: RunHandler): Promise<MeshNode> {
  const n = await servingNode(CAP, opts, handler)
  nodes.push(n)
  return n
}

describe('an executor\'s ending refused by a passing disk fault', () => {
  it('completes the run with the handler\'s output once the disk takes writes again, and frees its slot', async () => {
    const faulty = new FaultyDatastore(new MemoryDatastore())
    const gate = Promise.withResolvers<void>()
    const x = await node({ datastore: faulty.store }, async () => {
      await gate.promise
      return { ok: 'written late' }
    })
    const d = await node()
    expect(await d.join(x.addresses)).toBeGreaterThan(0)
    const run = await d.delegate({ to_agent: x.agentId, task_id: 'ending-retry-1', capability: CAP, input: {} }, { follow: false })
    faulty.failing = true
    gate.resolve()
    // the completion, and its first retry, are refused
    await until(() => faulty.refused >= 2, 'the completion to be refused twice')
    expect((await x.runs.getRun(run.run_id)).state).toBe('running')
    faulty.failing = false
    await until(async () => (await x.runs.getRun(run.run_id)).state === 'completed', 'the run to complete once the disk takes writes')
    expect((await x.runs.getRun(run.run_id)).output).toEqual({ ok: 'written late' })
    expect(x.runs.slots.heldBy(d.agentId)).toBe(0)
  })

  it('fails a run a restart interrupted (EXECUTOR_RESTARTED) once the disk takes writes again', async () => {
    const privateKey = await generateKeyPair('Ed25519')
    const faulty = new FaultyDatastore(new MemoryDatastore())
    const started = Promise.withResolvers<void>()
    let x = await node({ datastore: faulty.store, privateKey }, async (ctx) => {
      started.resolve()
      await new Promise((resolve) => { ctx.signal.addEventListener('abort', resolve) })
      throw new Error('stopped')
    })
    const d = await node()
    expect(await d.join(x.addresses)).toBeGreaterThan(0)
    const run = await d.delegate({ to_agent: x.agentId, task_id: 'ending-retry-2', capability: CAP, input: {} }, { follow: false })
    await started.promise
    await x.stop()
    nodes = nodes.filter(n => n !== x)
    // the same node again on the same datastore, while the disk refuses the runs' event writes
    faulty.only = (key) => key.startsWith('/aap/log/')
    faulty.failing = true
    x = await createMeshNode({ listen: ['/ip4/127.0.0.1/tcp/0'], localMesh: true, logger: silentLogger(), datastore: faulty.store, privateKey })
    await x.start()
    nodes.push(x)
    await until(() => faulty.refused >= 2, 'the recovery\'s write, and its first retry, to be refused')
    expect((await x.runs.getRun(run.run_id)).state).toBe('running')
    faulty.failing = false
    await x.runs.recovered()
    const ended = await x.runs.getRun(run.run_id)
    expect(ended.state).toBe('failed')
    expect(ended.failure?.code).toBe('EXECUTOR_RESTARTED')
  })
})
