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

  /** A delegator A and an executor C on `ds`; one run of A blocks on C; C stops and starts again (handling WORK when `handled`). */
  async function blockedAcrossRestart (ds: Datastore, task: string, handled = true): Promise<{ A: MeshNode, C: MeshNode, runId: string }> {
    const key = await generateKeyPair('Ed25519')
    const A = await createMeshNode(opts)
    await A.start()
    nodes.push(A)
    const before = await executor(ds, key)
    await A.join(before.addresses)
    const run = await A.delegate({ to_agent: before.agentId, task_id: task, capability: WORK, input: { n: 1 } })
    await until(async () => (await A.getRun(run.run_id)).state === 'blocked', 'the run to block')
    await before.stop()
    const C = await executor(ds, key, handled)
    await A.join(C.addresses)
    return { A, C, runId: run.run_id }
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
    const { A, C, runId } = await blockedAcrossRestart(new MemoryDatastore(), 'restart-blocked-kept')
    await C.runs.recovered()
    expect((await C.runs.getRun(runId)).state).toBe('blocked')
    expect(C.runs.slots.heldBy(A.agentId)).toBe(1)
  }, 60_000)

  it('refuse a resume, typed, while no handler serves them again, and take the next one once it does', async () => {
    // C is back; its agent, which registers the handler, is not yet
    const { A, C, runId } = await blockedAcrossRestart(new MemoryDatastore(), 'restart-blocked-early', false)
    await rejectsWith(A.runs.resume(runId, { ok: true }), 'CAPABILITY_NOT_SUPPORTED')
    expect((await C.runs.getRun(runId)).state).toBe('blocked')
    C.runs.handle(WORK, approval)
    const resumed = await A.runs.resume(runId, { ok: 'now' })
    expect(resumed.state).toBe('running')
    await until(async () => (await C.runs.getRun(runId)).state === 'completed', 'the run to complete with the resolution')
    expect((await C.runs.getRun(runId)).output).toEqual({ got: { ok: 'now' } })
  }, 60_000)

  it('fail a resumed run whose stored start cannot be read, freeing its slot', async () => {
    const store = readFailing()
    const { A, C, runId } = await blockedAcrossRestart(store.ds, 'restart-blocked-unread')
    store.failNext(EventLog.eventKey(runId, 1).toString())
    expect((await A.runs.resume(runId, { ok: true })).state).toBe('running')
    await until(async () => (await C.runs.getRun(runId)).state === 'failed', 'the run to fail')
    expect(store.failed()).toBe(true)
    expect((await C.runs.getRun(runId)).failure).toMatchObject({ code: 'HANDLER_FAILED', message: expect.stringMatching(/start could not be read/) })
    expect(C.runs.slots.heldBy(A.agentId)).toBe(0)
  }, 60_000)
})
