/**
 * A stopped node commits nothing more. Found by session 46's review: stop()
 * aborted the handlers' signals but a handler that did not heed its signal (a
 * slow tool call) could still commit afterwards. With the same datastore
 * started again, recovery had failed the run at seq 2 (EXECUTOR_RESTARTED);
 * the old instance then wrote its own seq 2, run.completed, over it: two
 * signed events at one seq, and the record flipped to completed. Now the old
 * instance's calls are refused (INTERNAL, reason stopping) and the log keeps
 * what the new instance wrote.
 */
import { afterEach, describe, expect, it } from 'vitest'
import { MemoryDatastore } from 'datastore-core'
import { generateKeyPair } from '@libp2p/crypto/keys'
import { createMeshNode, type MeshNode } from '../src/node.ts'
import { silentLogger } from '../src/logger.ts'
import { toAapError, type AapError } from '../src/errors.ts'
import { stopAll } from './helpers.ts'

const CAP = { capability_id: 'cap:stopped-writes', version: '1.0.0' }
let nodes: MeshNode[] = []
afterEach(async () => { await stopAll(nodes); nodes = [] })

describe('a node stopped while a handler still works', () => {
  it('refuses the handler\'s later calls: the restarted node\'s log stays as it wrote it', async () => {
    const privateKey = await generateKeyPair('Ed25519')
    const ds = new MemoryDatastore()
    const gate = Promise.withResolvers<void>()
    const started = Promise.withResolvers<void>()
    const refused = Promise.withResolvers<AapError>()
    const mk = async (): Promise<MeshNode> => {
      const n = await createMeshNode({ listen: ['/ip4/127.0.0.1/tcp/0'], localMesh: true, logger: silentLogger(), datastore: ds, privateKey })
      await n.start()
      nodes.push(n)
      // a handler that does not heed its signal
      n.runs.handle(CAP, async (ctx) => {
        started.resolve()
        await gate.promise
        try {
          await ctx.progress({ late: true })
        } catch (err) {
          refused.resolve(toAapError(err))
        }
        return { ok: true }
      })
      await n.publishCard({ name: 'stopped-writes', capabilities: [CAP] })
      return n
    }
    const x1 = await mk()
    const d = await createMeshNode({ listen: ['/ip4/127.0.0.1/tcp/0'], localMesh: true, logger: silentLogger() })
    await d.start()
    nodes.push(d)
    expect(await d.join(x1.addresses)).toBeGreaterThan(0)
    const run = await d.delegate({ to_agent: x1.agentId, task_id: 'stopped-writes-1', capability: CAP, input: {} }, { follow: false })
    await started.promise
    await x1.stop()
    nodes = nodes.filter(n => n !== x1)
    const x2 = await mk()
    await x2.runs.recovered()
    const failed = await x2.runs.store.log.get(run.run_id, 2)
    expect(failed?.type).toBe('run.failed')

    // the old instance's handler goes on now
    gate.resolve()
    const err = await refused.promise
    expect(err.code).toBe('INTERNAL')
    expect(err.details?.reason).toBe('stopping')
    expect(await x2.runs.store.log.get(run.run_id, 2)).toEqual(failed)
    expect(await x2.runs.store.log.get(run.run_id, 3)).toBeUndefined()
    expect((await x2.runs.store.get(run.run_id))?.state).toBe('failed')
  })
})
