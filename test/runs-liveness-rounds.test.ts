/**
 * The liveness monitor's rounds of notices (protocols/liveness.md), driven
 * through its ports: the probe it sends is a function here, as the run
 * client is in the node. A notice the executor answers and refuses does not
 * hold back its other notices (only an executor that is not reached ends a
 * round), and notices read back at start are offered oldest first.
 */
import { generateKeyPair } from '@libp2p/crypto/keys'
import { MemoryDatastore } from 'datastore-core'
import { afterEach, describe, expect, it } from 'vitest'
import { AapError, AgentNotFoundError } from '../src/errors.ts'
import { silentLogger } from '../src/logger.ts'
import { LivenessMonitor } from '../src/runs/liveness.ts'
import { RunStore } from '../src/runs/store.ts'
import type { Run } from '../src/runlog/types.ts'
import type { MeshHost } from '../src/wire/host.ts'
import { until } from './helpers.ts'

const EXECUTOR = '12D3KooWExecutorOfTheseRuns'
const DELEGATOR = '12D3KooWDelegatorOfTheseRuns'

function runOf (id: string): Run {
  const at = new Date(0).toISOString()
  return {
    run_id: `${EXECUTOR}:${id}`, agent_id: EXECUTOR, correlation_id: 'task-rounds', state: 'failed', created_at: at, updated_at: at,
    capability: { capability_id: 'cap:rounds', version: '1.0.0' }, delegator: DELEGATOR, authorized: [], parent_run: null,
    handoff_from: null, handoff_to: null, checkpoint_id: null, block_reason: null, output: null,
    failure: { code: 'EXECUTOR_LOST', message: 'declared' }, last_seq: 1
  }
}

/** Only connection events are asked of the host. */
const quietHost = { addEventListener: () => {}, removeEventListener: () => {} } as unknown as MeshHost

describe('liveness rounds of notices', () => {
  let monitor: LivenessMonitor | undefined
  afterEach(async () => { await monitor?.stop() })

  async function start (store: RunStore, probe: (runId: string) => Promise<Run>): Promise<LivenessMonitor> {
    const m = new LivenessMonitor({
      host: quietHost, agentId: DELEGATOR, key: await generateKeyPair('Ed25519'), store, log: silentLogger(),
      probe: async (runId) => probe(runId),
      notify: async () => { throw new Error('no verdict is chained in these notices') },
      probeIntervalMs: 20
    })
    m.connect({ lastEvent: async () => undefined, onDeclared: async () => {}, onUnchained: () => {}, reconcile: async () => 'kept' })
    await m.start()
    return m
  }

  it('a notice the executor refuses leaves its other notices to go on; one it cannot reach ends the round', async () => {
    const store = new RunStore(new MemoryDatastore())
    for (const [i, id] of ['a', 'b', 'c'].entries()) {
      await store.putNotice({ run_id: `${EXECUTOR}:${id}`, executor: EXECUTOR, since: Date.now() - 3 + i, before: runOf(id) })
    }
    let reachable = true
    const asked: string[] = []
    monitor = await start(store, async (runId) => {
      asked.push(runId)
      if (!reachable) throw new AgentNotFoundError('not reached', { reason: 'unreachable' })
      if (runId.endsWith(':a')) throw new AapError('UNAUTHORIZED', 'the executor refuses this one')
      return runOf(runId.slice(EXECUTOR.length + 1))
    })
    // the oldest is refused in every round; the two behind it settle in the first
    await until(() => monitor!.openNotices === 1, 'the two notices behind the refused one settled')
    expect(monitor.stats.noticesDelivered).toBe(2)
    expect(asked.slice(0, 3)).toEqual(['a', 'b', 'c'].map(id => `${EXECUTOR}:${id}`))

    // unreached now: each round asks once and ends
    reachable = false
    const rounds0 = monitor.stats.noticeRounds
    await until(() => monitor!.stats.noticeRounds >= rounds0 + 3, 'three rounds while the executor is not reached')
    const at = { rounds: monitor.stats.noticeRounds, offers: monitor.stats.noticeOffers }
    await until(() => monitor!.stats.noticeRounds >= at.rounds + 3, 'three more rounds')
    const rounds = monitor.stats.noticeRounds - at.rounds
    const offers = monitor.stats.noticeOffers - at.offers
    expect(Math.abs(offers - rounds)).toBeLessThanOrEqual(1)
    expect(monitor.openNotices).toBe(1)
    const left: string[] = []
    for await (const { notice } of store.notices(10)) left.push(notice.run_id)
    expect(left).toEqual([`${EXECUTOR}:a`])
  })

  it('offers the notices read back at start oldest first, whatever the order of their run ids', async () => {
    const store = new RunStore(new MemoryDatastore())
    const now = Date.now()
    const since: Record<string, number> = { a: now - 1000, b: now - 3000, c: now - 2000 }
    for (const id of ['a', 'b', 'c']) await store.putNotice({ run_id: `${EXECUTOR}:${id}`, executor: EXECUTOR, since: since[id]!, before: runOf(id) })
    const asked: string[] = []
    monitor = await start(store, async (runId) => {
      asked.push(runId)
      return runOf(runId.slice(EXECUTOR.length + 1))
    })
    await until(() => monitor!.openNotices === 0, 'every notice settled')
    expect(asked).toEqual(['b', 'c', 'a'].map(id => `${EXECUTOR}:${id}`))
  })
})
