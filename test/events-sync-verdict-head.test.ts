/**
 * A node holds a liveness verdict as a run's head, and its executor signed
 * its own events there (r2 replaces the verdict, protocols/liveness.md) and
 * after (r3). r2's gossip is lost, r3 arrives: the gap fetch asked the
 * executor for events after the verdict's seq, chained on the verdict, and
 * took the honest answer (r3, after r2) for a broken chain: INVALID_REQUEST
 * bad_chain, the executor counted as a peer that lies, r2 and r3 never
 * placed; fetchRun from the executor failed the same way. Now the sync asks
 * from the event the verdict followed, and the executor's r2 takes the
 * verdict's place. Found by session 59's review.
 */
import { generateKeyPair } from '@libp2p/crypto/keys'
import type { PrivateKey } from '@libp2p/interface'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { EVENTS_SYNC_MAX_FRAME_BYTES, EVENTS_SYNC_PROTOCOL } from '../src/constants.ts'
import { agentIdOf } from '../src/identity/identity.ts'
import type { MeshNode } from '../src/node.ts'
import type { AgentEvent } from '../src/runlog/types.ts'
import { signVerdict } from '../src/runlog/verdict.ts'
import { serve } from '../src/wire/rpc.ts'
import { collect, type Collector } from './events-helpers.ts'
import { startMesh, stopAll, until } from './helpers.ts'
import { rawGossip } from './fixtures/raw-gossip.ts'
import { signedRun } from './fixtures/signed-run.ts'

const TASK = 'task-sync-verdict-head'
const CAP = { capability_id: 'cap:sync-verdict-head', version: '1.0.0' }

describe('a run fetched while a verdict is its head here', () => {
  let nodes: MeshNode[] = []
  let A: MeshNode, P: MeshNode, Xn: MeshNode
  let dKey: PrivateKey, xKey: PrivateKey
  let onA: Collector
  /** The executor's log, as its node serves it. */
  let xLog: AgentEvent[] = []
  let xAsks = 0

  beforeAll(async () => {
    ;[dKey, xKey] = await Promise.all([generateKeyPair('Ed25519'), generateKeyPair('Ed25519')])
    nodes = await startMesh(3, { nodeOptions: i => i === 2 ? { privateKey: xKey } : {} })
    ;[A, P, Xn] = nodes as [MeshNode, MeshNode, MeshNode]
    await Xn.host.unhandle(EVENTS_SYNC_PROTOCOL)
    await serve(Xn.host, {
      protocol: EVENTS_SYNC_PROTOCOL,
      maxFrameBytes: EVENTS_SYNC_MAX_FRAME_BYTES,
      methods: {
        run: {
          handle: async (body) => {
            xAsks++
            const req = body as { run_id: string, after_seq?: number }
            return { events: xLog.filter(e => e.run_id === req.run_id && e.seq > (req.after_seq ?? 0)), more: false }
          }
        },
        correlation: { handle: async () => ({ events: [], more: false }) }
      }
    })
    onA = await collect(A, TASK, { owner: agentIdOf(dKey) })
  }, 60_000)
  afterAll(async () => { await stopAll(nodes) })

  it('takes the executor\'s own events in the verdict\'s place, and counts the executor as no liar', async () => {
    const { sendJudged } = await rawGossip(P, A, TASK)
    const { D, X, r1, r2, r3 } = await signedRun(dKey, xKey, TASK, CAP)
    const verdict = await signVerdict(dKey, D, r1, 'executor lost')
    xLog = [r1, r2, r3]
    // r2's gossip is lost
    for (const e of [r1, verdict, r3]) await sendJudged(e)
    const stats = A.events.stats
    const fromX = (es: AgentEvent[]): boolean => es.some(e => e.run_id === r1.run_id && e.seq === 3)
    // the gap fetch asked the executor, and its answer was taken or refused
    await until(() => xAsks > 0 && ((stats.syncErrors.INVALID_REQUEST ?? 0) > 0 || fromX(onA.events)), 'the executor asked, and its answer judged')
    expect(stats.syncErrors.INVALID_REQUEST ?? 0).toBe(0)
    await onA.until(fromX, 'the executor\'s last event')
    expect(onA.events.filter(e => e.run_id === r1.run_id).map(e => `${e.seq}:${e.type}:${e.declared_by === undefined ? 'x' : 'd'}`).slice(-2))
      .toEqual(['2:run.progress:x', '3:run.completed:x'])
    // the executor answers a fetch of the run like any other: nothing new here now, and no error
    await expect(A.events.fetchRun(r1.run_id, { from: X })).resolves.toEqual([])
  })
})
