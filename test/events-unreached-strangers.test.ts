/**
 * A stranger on a followed topic that signs each startless event with a fresh key makes a fresh executor each
 * time; each such run is fetched from its executor, which nobody can dial. The failures were kept in the
 * correlation's `unreached` map (which replays list) for as long as it was followed, one per key, also after the
 * run itself was let go to make room; and a fetch stopped by that eviction was counted as the agent's TIMEOUT.
 * Now only participants and proven runs' executors are listed, and a stopped fetch is no agent's fault (and such a
 * run is asked of the peer that relayed it, not of its executor: test/events-startless-routing.test.ts).
 */
import { generateKeyPair } from '@libp2p/crypto/keys'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { EVENTS_MAX_UNPROVEN_RUNS_PER_CORRELATION } from '../src/constants.ts'
import { correlationTopic } from '../src/events/topic.ts'
import { agentIdOf } from '../src/identity/identity.ts'
import type { MeshNode } from '../src/node.ts'
import { newRunId, signEvent } from '../src/runlog/event.ts'
import { collect } from './events-helpers.ts'
import { startMesh, stopAll, until } from './helpers.ts'

const enc = new TextEncoder()

interface Internals { correlations: { get: (id: string) => { inflight: Set<unknown>, runs: Map<string, unknown>, unreached: Map<string, unknown> } | undefined } }

describe('strangers\' runs that cannot be fetched', () => {
  let nodes: MeshNode[] = []
  let F: MeshNode, H: MeshNode

  beforeAll(async () => {
    nodes = await startMesh(2)
    ;[F, H] = nodes as [MeshNode, MeshNode]
  }, 60_000)
  afterAll(async () => { await stopAll(nodes) })

  it('are counted, not listed as unreached, and an evicted fetch is not a timeout', async () => {
    const task = 'task-unreached-strangers'
    await collect(F, task, {})
    const topic = correlationTopic(task)
    await until(() => H.host.services.pubsub.getSubscribers(topic).some(p => p.equals(F.host.peerId)), 'H to see F on the topic')
    const t = (F.events as unknown as Internals).correlations.get(task)
    if (t === undefined) throw new Error('no track of the followed task')
    const n = EVENTS_MAX_UNPROVEN_RUNS_PER_CORRELATION + 44
    const judged = F.events.stats.gossip.unknown_run + F.events.stats.gossip.over_limit
    for (let i = 0; i < n; i++) {
      const key = await generateKeyPair('Ed25519')
      const exec = agentIdOf(key)
      const e = await signEvent(key, { run_id: newRunId(exec), correlation_id: task, type: 'run.progress', payload: { i }, at: new Date().toISOString(), seq: 2, prev: 'a'.repeat(64), executor: exec })
      await H.host.services.pubsub.publish(topic, enc.encode(JSON.stringify(e)))
    }
    // each run is asked of H, its relayer (its executor is reached by no one without a DHT walk: startless.ts), and
    // of H's messages only EVENTS_STARTLESS_FETCHES_PER_SOURCE at a time; what H does not hold fails as a stranger's
    await until(() => F.events.stats.gossip.unknown_run + F.events.stats.gossip.over_limit >= judged + n, 'every event judged', 120_000)
    await until(() => t.inflight.size === 0, 'every fetch to end', 120_000)
    expect(t.runs.size).toBeLessThanOrEqual(EVENTS_MAX_UNPROVEN_RUNS_PER_CORRELATION)
    expect(t.unreached.size).toBe(0)
    expect(F.events.stats.syncErrors.TIMEOUT).toBeUndefined()
  }, 180_000)
})
