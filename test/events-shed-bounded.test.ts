/**
 * Gossip shed while a correlation's lock is behind (placement.ts, shed.ts)
 * keeps what waits for the lock bounded however many runs the gossip names.
 * Found by session 52's review: each shed event of a new run armed its own
 * lock.idle() callback holding its RunTrack until the lock drained, so a
 * stranger minting run ids (one signed event each) grew the node's memory
 * with every message during exactly the stall the shedding is for. Now one
 * wait per correlation holds the ids of at most twice the runs it tracks.
 */
import { generateKeyPair } from '@libp2p/crypto/keys'
import type { Message } from '@libp2p/gossipsub'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { EVENTS_MAX_UNPROVEN_RUNS_PER_CORRELATION } from '../src/constants.ts'
import { EVENTS_LOCK_WAITING_MAX } from '../src/events/constants.ts'
import type { ShedFetches } from '../src/events/shed.ts'
import type { CorrTrack } from '../src/events/track.ts'
import { agentIdOf } from '../src/identity/identity.ts'
import type { MeshNode } from '../src/node.ts'
import { newRunId, signEvent } from '../src/runlog/event.ts'
import { startMesh, stopAll, until } from './helpers.ts'

const TASK = 'task-shed-bounded'
const RUNS = 2000
const enc = new TextEncoder()

describe('gossip shed behind a correlation\'s lock', () => {
  let nodes: MeshNode[] = []
  let A: MeshNode

  beforeAll(async () => {
    nodes = await startMesh(1)
    A = nodes[0]!
  })
  afterAll(async () => { await stopAll(nodes) })

  it('waits once per correlation, for at most twice the runs it tracks, however many runs the gossip names', async () => {
    const stranger = await generateKeyPair('Ed25519')
    const strangerId = agentIdOf(stranger)
    await A.events.subscribe(TASK, { participants: [] })
    const t = (A.events as unknown as { correlations: { get: (id: string) => CorrTrack | undefined } }).correlations.get(TASK)!
    const placement = (A.events as unknown as { placement: { judge: (t: CorrTrack, m: Message) => unknown, shedFetches: ShedFetches } }).placement
    // the lock is behind: one task held (a stalled write), EVENTS_LOCK_WAITING_MAX behind it
    const gate = Promise.withResolvers<void>()
    const held: Array<Promise<unknown>> = []
    for (let i = 0; i <= EVENTS_LOCK_WAITING_MAX; i++) held.push(t.lock.run(async () => { await gate.promise }))
    await until(() => t.lock.waiting >= EVENTS_LOCK_WAITING_MAX, 'the lock to be behind')
    let waits = 0
    const idle = t.lock.idle.bind(t.lock)
    t.lock.idle = async () => { waits++; return idle() }
    const shedBefore = A.events.stats.lockShed
    for (let i = 0; i < RUNS; i++) {
      const e = await signEvent(stranger, {
        run_id: newRunId(strangerId), correlation_id: TASK, type: 'run.progress', payload: { i },
        at: new Date().toISOString(), seq: 2, prev: 'a'.repeat(64), executor: strangerId
      })
      placement.judge(t, { type: 'unsigned', topic: t.topic, data: enc.encode(JSON.stringify(e)) } as unknown as Message)
    }
    expect(A.events.stats.lockShed - shedBefore).toBe(RUNS)
    expect(t.runs.size).toBeLessThanOrEqual(EVENTS_MAX_UNPROVEN_RUNS_PER_CORRELATION)
    expect(waits).toBe(1)
    expect(placement.shedFetches.armed(t)).toBeLessThanOrEqual(2 * t.runs.size + 1)
    gate.resolve()
    await Promise.allSettled(held)
    await until(() => placement.shedFetches.armed(t) === 0, 'the wait to end once the lock drained')
  })
})
