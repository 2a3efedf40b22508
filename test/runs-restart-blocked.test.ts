/**
 * Runs that were blocked when their executor stopped, after it restarts:
 * - one its delegator declared lost meanwhile ends with the verdict, although the delegator no longer offers
 *   the notice (dropped past its bound, as after 24 h): the restart asks for it (protocols/liveness.md);
 * - a resume that comes before the capability's handler is registered again (an agent reconnecting to its node a
 *   moment after the restart) is refused, typed and retryable, and the run stays blocked for the next resume;
 * - a resume whose stored start cannot be read fails the run, instead of leaving it running with no handler.
 */
import type { PrivateKey } from '@libp2p/interface'
import { generateKeyPair } from '@libp2p/crypto/keys'
import { MemoryDatastore } from 'datastore-core'
import type { Datastore, Key } from 'interface-datastore'
import { afterEach, describe, expect, it } from 'vitest'
import { silentLogger } from '../src/logger.ts'
import { createMeshNode, type MeshNode } from '../src/node.ts'
import { EventLog } from '../src/runlog/event-log.ts'
import type { RunContext } from '../src/runs/types.ts'
import { rejectsWith, stopAll, until } from './helpers.ts'

const WORK = { capability_id: 'cap:restart-blocked', version: '1.0.0' }
const opts = { listen: ['/ip4/127.0.0.1/tcp/0'], localMesh: true, logger: silentLogger() }
/** Blocks for an approval; started again after a restart, it goes on with the resolution it was resumed with. */
const approval = async (ctx: RunContext): Promise<Record<string, unknown>> => ({ got: ctx.restored?.resolution ?? await ctx.block('approve?', 'cp-restart') })

/** A datastore whose next read of `failKey` fails as a failing disk does. */
function readFailing (): { ds: Datastore, failNext: (key: string) => void, failed: () => boolean } {
  const inner = new MemoryDatastore()
  let failKey: string | undefined
  let failed = false
  const ds = new Proxy(inner, {
    get (target, prop) {
      if (prop === 'get') {
        return async (k: Key, o?: unknown) => {
          if (k.toString() === failKey) {
            failKey = undefined
            failed = true
            throw Object.assign(new Error('IO error: /data/000042.ldb: Input/output error'), { code: 'EIO' })
          }
          return target.get(k, o as never)
        }
      }
      const v: unknown = Reflect.get(target, prop, target)
      return typeof v === 'function' ? (v as (...a: unknown[]) => unknown).bind(target) : v
    }
  }) as Datastore
  return { ds, failNext: (key) => { failKey = key }, failed: () => failed }
}

describe('runs blocked across a restart of their executor', () => {
  let nodes: MeshNode[] = []
  afterEach(async () => {
    await stopAll(nodes)
    nodes = []
  })

  async function executor (ds: Datastore, key: PrivateKey, handled = true): Promise<MeshNode> {
    const n = await createMeshNode({ ...opts, datastore: ds, privateKey: key })
    await n.start()
    nodes.push(n)
    if (handled) n.runs.handle(WORK, approval)
    await n.publishCard({ name: 'c', capabilities: [WORK] })
    return n
  }

  it('end with the verdict their delegator signed while the executor was down, once it is back', async () => {
    const ds = new MemoryDatastore()
    const key = await generateKeyPair('Ed25519')
    // maxNotices 1: of two declared runs, the older notice is dropped, as one that expired
    const A = await createMeshNode({ ...opts, liveness: { probeIntervalMs: 200, lostAfterMs: 800, maxNotices: 1 } })
    await A.start()
    nodes.push(A)
    let C = await executor(ds, key)
    await A.join(C.addresses)
    const runs = [
      await A.delegate({ to_agent: C.agentId, task_id: 'restart-blocked-1', capability: WORK, input: {} }),
      await A.delegate({ to_agent: C.agentId, task_id: 'restart-blocked-2', capability: WORK, input: {} })
    ]
    for (const r of runs) await until(async () => (await A.runs.store.log.head(r.run_id))?.seq === 2, 'the delegator to hold each run.blocked')
    await C.stop()
    for (const r of runs) await until(async () => (await A.runs.store.getOutgoing(r.run_id))?.state === 'failed', 'the delegator to declare each run lost', 20_000)
    expect(A.runs.liveness.stats.noticesDropped).toBeGreaterThanOrEqual(1)
    for (const r of runs) expect(await A.runs.store.getVerdict(r.run_id)).toBeDefined()

    C = await executor(ds, key)
    await A.join(C.addresses)
    await C.runs.recovered()
    for (const r of runs) {
      const now = await C.runs.getRun(r.run_id)
      expect(now.state).toBe('failed')
      expect(now.failure?.code).toBe('EXECUTOR_LOST')
    }
    expect(C.runs.slots.heldBy(A.agentId)).toBe(0)
  }, 60_000)

  it('stay blocked when nobody declared them lost', async () => {
    const ds = new MemoryDatastore()
    const key = await generateKeyPair('Ed25519')
    const A = await createMeshNode(opts)
    await A.start()
    nodes.push(A)
    let C = await executor(ds, key)
    await A.join(C.addresses)
    const run = await A.delegate({ to_agent: C.agentId, task_id: 'restart-blocked-kept', capability: WORK, input: {} })
    await until(async () => (await A.getRun(run.run_id)).state === 'blocked', 'the run to block')
    await C.stop()
    C = await executor(ds, key)
    await A.join(C.addresses)
    await C.runs.recovered()
    expect((await C.runs.getRun(run.run_id)).state).toBe('blocked')
    expect(C.runs.slots.heldBy(A.agentId)).toBe(1)
  }, 60_000)

  it('refuse a resume, typed, while no handler serves them again, and take the next one once it does', async () => {
    const ds = new MemoryDatastore()
    const key = await generateKeyPair('Ed25519')
    const A = await createMeshNode(opts)
    await A.start()
    nodes.push(A)
    let C = await executor(ds, key)
    await A.join(C.addresses)
    const run = await A.delegate({ to_agent: C.agentId, task_id: 'restart-blocked-early', capability: WORK, input: {} })
    await until(async () => (await A.getRun(run.run_id)).state === 'blocked', 'the run to block')
    await C.stop()
    // C is back; its agent, which registers the handler, is not yet
    C = await executor(ds, key, false)
    await A.join(C.addresses)
    await rejectsWith(A.runs.resume(run.run_id, { ok: true }), 'CAPABILITY_NOT_SUPPORTED')
    expect((await C.runs.getRun(run.run_id)).state).toBe('blocked')
    C.runs.handle(WORK, approval)
    const resumed = await A.runs.resume(run.run_id, { ok: 'now' })
    expect(resumed.state).toBe('running')
    await until(async () => (await C.runs.getRun(run.run_id)).state === 'completed', 'the run to complete with the resolution')
    expect((await C.runs.getRun(run.run_id)).output).toEqual({ got: { ok: 'now' } })
  }, 60_000)

  it('fail a resumed run whose stored start cannot be read, freeing its slot', async () => {
    const store = readFailing()
    const key = await generateKeyPair('Ed25519')
    const A = await createMeshNode(opts)
    await A.start()
    nodes.push(A)
    let C = await executor(store.ds, key)
    await A.join(C.addresses)
    const run = await A.delegate({ to_agent: C.agentId, task_id: 'restart-blocked-unread', capability: WORK, input: { n: 1 } })
    await until(async () => (await A.getRun(run.run_id)).state === 'blocked', 'the run to block')
    await C.stop()
    C = await executor(store.ds, key)
    await A.join(C.addresses)
    store.failNext(EventLog.eventKey(run.run_id, 1).toString())
    expect((await A.runs.resume(run.run_id, { ok: true })).state).toBe('running')
    await until(async () => (await C.runs.getRun(run.run_id)).state === 'failed', 'the run to fail')
    expect(store.failed()).toBe(true)
    expect((await C.runs.getRun(run.run_id)).failure).toMatchObject({ code: 'HANDLER_FAILED', message: expect.stringMatching(/start could not be read/) })
    expect(C.runs.slots.heldBy(A.agentId)).toBe(0)
  }, 60_000)
})
