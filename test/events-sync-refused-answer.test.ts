/**
 * A run's executor cannot be reached, so its missing events are asked of the
 * other participants, until one answers. A participant that answered only
 * with an event placement refused (a verdict it signed itself, though only
 * the run's delegator may) counted as having answered: the honest
 * participant after it was never asked, round after round. Now only the
 * events placement took count. Found by session 59's review.
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

const TASK = 'task-sync-refused-answer'
const CAP = { capability_id: 'cap:sync-refused-answer', version: '1.0.0' }

describe('a run asked of its participants while its executor is unreachable', () => {
  let nodes: MeshNode[] = []
  let A: MeshNode, P: MeshNode, H: MeshNode, G: MeshNode
  let dKey: PrivateKey, xKey: PrivateKey, hKey: PrivateKey
  let onA: Collector
  /** What each participant answers for the run. */
  const answers = new Map<string, AgentEvent[]>()
  const runAsks = new Map<string, number>()

  /** `node` answers `run` with what `answers` holds for it (after the seq asked), and `correlation` with nothing. */
  async function serveRun (node: MeshNode): Promise<void> {
    await node.host.unhandle(EVENTS_SYNC_PROTOCOL)
    await serve(node.host, {
      protocol: EVENTS_SYNC_PROTOCOL,
      maxFrameBytes: EVENTS_SYNC_MAX_FRAME_BYTES,
      methods: {
        run: {
          handle: async (body) => {
            runAsks.set(node.agentId, (runAsks.get(node.agentId) ?? 0) + 1)
            const req = body as { run_id: string, after_seq?: number }
            return { events: (answers.get(node.agentId) ?? []).filter(e => e.run_id === req.run_id && e.seq > (req.after_seq ?? 0)), more: false }
          }
        },
        correlation: { handle: async () => ({ events: [], more: false }) }
      }
    })
  }

  beforeAll(async () => {
    ;[dKey, xKey, hKey] = await Promise.all([generateKeyPair('Ed25519'), generateKeyPair('Ed25519'), generateKeyPair('Ed25519')])
    nodes = await startMesh(4, { nodeOptions: i => i === 2 ? { privateKey: hKey } : {} })
    ;[A, P, H, G] = nodes as [MeshNode, MeshNode, MeshNode, MeshNode]
    await serveRun(H)
    await serveRun(G)
    onA = await collect(A, TASK, { owner: agentIdOf(dKey), participants: [H.agentId, G.agentId] })
  }, 60_000)
  afterAll(async () => { await stopAll(nodes) })

  it('asks the next participant when one answered only with what placement refused', async () => {
    const { sendJudged } = await rawGossip(P, A, TASK)
    // the executor (X) has no node: every sync with it fails
    const { r1, r2, r3 } = await signedRun(dKey, xKey, TASK, CAP)
    // H answers with a verdict it signed itself: only the run's delegator (D) may sign one
    answers.set(H.agentId, [await signVerdict(hKey, H.agentId, r1, 'executor lost')])
    answers.set(G.agentId, [r1, r2, r3])
    // r2's gossip is lost
    for (const e of [r1, r3]) await sendJudged(e)
    const asked = (agent: MeshNode): number => runAsks.get(agent.agentId) ?? 0
    // H answers first (the participants in the order named), and refused: then G, or H once more in the next round
    await until(() => asked(G) > 0 || asked(H) > 1, 'the participants asked for the run')
    expect(asked(H)).toBeGreaterThan(0)
    expect(asked(G)).toBeGreaterThan(0)
    await onA.until(es => es.some(e => e.run_id === r1.run_id && e.seq === 3), 'the run\'s last event')
    expect(onA.events.filter(e => e.run_id === r1.run_id).map(e => e.seq)).toEqual([1, 2, 3])
  }, 60_000)
})
