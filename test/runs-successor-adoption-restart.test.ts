/**
 * A delegator records the successor of a run handed off (adoption): the
 * handed-off run's record is written, then its successor's executor is
 * asked (get_run), then the successor's record is written. A delegator
 * killed between those two writes came back with the handed-off record
 * alone: no restart looked for the successor again, so liveness never
 * watched it, and, blocked, its executor's orphan check heard "not held"
 * from the live delegator and failed it with DELEGATOR_LOST. Now the
 * handed-off record is written with a mark of its successor, and a start
 * asks after every successor still marked.
 */
import { generateKeyPair } from '@libp2p/crypto/keys'
import { MemoryDatastore } from 'datastore-core'
import type { Batch, Datastore, Key, Pair } from 'interface-datastore'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { silentLogger } from '../src/logger.ts'
import type { MeshNode, MeshNodeOptions } from '../src/node.ts'
import { holdingWorkers, startLoneNodes, stopAll, until } from './helpers.ts'

const WORK = { capability_id: 'cap:successor-adoption-restart', version: '1.0.0' }

/**
 * A memory datastore that stops taking writes the moment a batch holds a key
 * `crashOn` picks, the way the disk of a killed process does: what was
 * committed before stays, that batch and everything after never reach it.
 */
function crashable (inner: Datastore): { store: Datastore, crashOn: (when: (key: string) => boolean) => void, crashed: () => boolean } {
  let when: ((key: string) => boolean) | undefined
  let dead = false
  const batch = (): Batch => {
    const b = inner.batch()
    const keys: string[] = []
    return {
      put: (k: Key, v: Uint8Array) => { keys.push(k.toString()); b.put(k, v) },
      delete: (k: Key) => { keys.push(k.toString()); b.delete(k) },
      commit: async () => {
        if (!dead && when !== undefined && keys.some(when)) dead = true
        if (!dead) await b.commit()
      }
    }
  }
  const methods: Record<PropertyKey, unknown> = {
    batch,
    put: async (k: Key, v: Uint8Array, o?: unknown) => dead ? k : inner.put(k, v, o as never),
    delete: async (k: Key, o?: unknown) => { if (!dead) await inner.delete(k, o as never) },
    putMany: async function * (source: AsyncIterable<Pair> | Iterable<Pair>, o?: unknown) {
      if (!dead) return yield * inner.putMany(source, o as never)
      for await (const p of source) yield p.key
    },
    deleteMany: async function * (source: AsyncIterable<Key> | Iterable<Key>, o?: unknown) {
      if (!dead) return yield * inner.deleteMany(source, o as never)
      yield * source
    }
  }
  const store = new Proxy(inner, {
    get (target, prop) {
      if (Object.hasOwn(methods, prop)) return methods[prop]
      const v: unknown = Reflect.get(target, prop, target)
      return typeof v === 'function' ? (v as (...a: unknown[]) => unknown).bind(target) : v
    }
  })
  return { store, crashOn: (w) => { when = w }, crashed: () => dead }
}

describe('a delegator killed while it records the successor of a run handed off', () => {
  const nodes: MeshNode[] = []
  const held = new Map<string, PromiseWithResolvers<void>>()
  let B: MeshNode, C: MeshNode, D2: MeshNode
  let runId: string, successor: string

  async function node (extra: Partial<MeshNodeOptions> = {}): Promise<MeshNode> {
    const [n] = await startLoneNodes(1, { logger: silentLogger(), ...extra })
    nodes.push(n!)
    return n!
  }

  beforeAll(async () => {
    // C's orphan check asks often; only the delegator's "not held" answers could end the run in this test's time
    C = await node({ liveness: { blockedOrphanAfterMs: 600_000, blockedCheckIntervalMs: 150 } })
    C.runs.handle(WORK, async (ctx) => {
      await ctx.block('a person decides', 'cp-successor')
      await new Promise(resolve => { ctx.signal.addEventListener('abort', resolve, { once: true }) })
      return { ok: true }
    })
    await C.publishCard({ name: 'successor-executor', capabilities: [WORK] })
    B = await node()
    await holdingWorkers([B], WORK, held)
    await B.join(C.addresses)

    const disk = new MemoryDatastore()
    const crash = crashable(disk)
    const dKey = await generateKeyPair('Ed25519')
    const D = await node({ privateKey: dKey, datastore: crash.store })
    await D.join(B.addresses)
    await D.join(C.addresses)
    const run = await D.delegate({ to_agent: B.agentId, task_id: 'adoption-restart', capability: WORK, input: {} })
    runId = run.run_id
    await until(() => held.has(runId), 'the run to start on B')
    // D is killed as it writes the successor's record: that write, and all after it, never reach its disk
    const own = `/aap/outgoing/${encodeURIComponent(runId)}`
    crash.crashOn(key => key.startsWith('/aap/outgoing/') && key !== own)
    successor = (await B.runs.handoff(runId, C.agentId, {})).run_id
    await until(() => crash.crashed(), "D's write of the successor's record")
    await until(async () => (await C.runs.getRun(successor)).state === 'blocked', 'the successor to block on C')
    await D.stop()

    // the disk as the kill left it: the handed-off record names the successor, no record of the successor
    D2 = await node({ privateKey: dKey, datastore: disk })
    await D2.join(C.addresses)
  }, 90_000)
  afterAll(async () => {
    for (const g of held.values()) g.resolve()
    await stopAll(nodes.filter(n => n.host.status === 'started'))
  })

  it('records the successor when it starts again, and watches it', async () => {
    expect((await D2.runs.store.getOutgoing(runId))?.handoff_to?.run_id).toBe(successor)
    await until(async () => (await D2.runs.store.getOutgoing(successor)) !== undefined, 'a record of the successor at the restarted delegator')
    expect(await D2.runs.store.getOutgoing(successor)).toMatchObject({ delegator: D2.agentId, agent_id: C.agentId, handoff_from: { run_id: runId } })
    await until(() => D2.runs.liveness.watching.runs >= 1, 'liveness to watch the successor')
  }, 60_000)

  it("keeps the blocked successor: its executor's orphan check hears that the delegator holds it", async () => {
    const answered = (): number => C.runs.orphans.stats.probes - C.runs.orphans.stats.probeFailures
    const from = answered()
    await until(async () => answered() >= from + 12 || (await C.runs.getRun(successor)).state !== 'blocked', '12 answered orphan checks of the successor')
    expect((await C.runs.getRun(successor)).state).toBe('blocked')
    expect(C.runs.orphans.stats.unheld).toBe(0)
  }, 60_000)
})
