/**
 * A successor whose confirmation never came starts on its predecessor's signed handoff event, not on its
 * sender's word (src/runs/confirmations.ts ask). The receiver asked the sender (get_run) and started when the
 * answer named its run: a sender that hands one run off twice could confirm one receiver and, asked by the
 * other, name that one too, and both successors ran with no event of the second anywhere (found by session 47's
 * review of the fork detection). Here B hands the run to C and, asked by D (whose successor it never
 * confirmed), claims to have handed it to D: D fetches B's log, whose last event names C's successor, and
 * fails its own. And the honest case, over real sync: only B's confirmation is lost, C asks, B's log names C's
 * successor, which starts and spreads the event.
 */
import type { PrivateKey } from '@libp2p/interface'
import { generateKeyPair } from '@libp2p/crypto/keys'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import type { MeshNode } from '../src/node.ts'
import type { Run } from '../src/runlog/types.ts'
import { phaseOneHandoff } from './fixtures/raw-handoff.ts'
import { heldRun, holdingWorkers, startMesh, stopAll, until } from './helpers.ts'

const WORK = { capability_id: 'cap:handoff-ask-lie', version: '1.0.0' }
// the lie (or the lost confirmation) is set up after phase one has started the receiver's confirm timer: 10 to 40 ms
// of a quiet machine, so the timer leaves a busy one a hundred times that
const CONFIRM_TIMEOUT_MS = 4_000

describe('a receiver whose confirmation did not come, and the sender it asks', () => {
  let nodes: MeshNode[] = []
  let A: MeshNode, B: MeshNode, C: MeshNode, D: MeshNode
  let bKey: PrivateKey
  const held = new Map<string, PromiseWithResolvers<void>>()

  beforeAll(async () => {
    bKey = await generateKeyPair('Ed25519')
    nodes = await startMesh(4, { nodeOptions: i => ({ handoffConfirmTimeoutMs: CONFIRM_TIMEOUT_MS, ...(i === 1 ? { privateKey: bKey } : {}) }) })
    ;[A, B, C, D] = nodes as [MeshNode, MeshNode, MeshNode, MeshNode]
    await holdingWorkers([B, C, D], WORK, held)
  })
  afterAll(async () => {
    for (const g of held.values()) g.resolve()
    await stopAll(nodes)
  })

  it('does not start on the sender\'s word when its log hands the run to another', async () => {
    const runId = await heldRun(A, B, WORK, 'task-ask-lie', held)
    const asked = await phaseOneHandoff(B, bKey, D, await B.runs.getRun(runId))
    expect(asked.ok, JSON.stringify(asked.error)).toBe(true)
    const second = asked.body!.run
    const first = await A.handoff(runId, C.agentId, { note: 'over to C' })
    await until(() => held.has(first.run_id), 'C\'s successor to start')
    // B lies when asked about the run: it says it handed the run to D's successor
    const executor = Reflect.get(B.runs, 'executor') as { localRun: (id: string) => Promise<Run> }
    const truth = executor.localRun.bind(executor)
    executor.localRun = async (id: string) => {
      const r = await truth(id)
      return id === runId ? { ...r, handoff_to: { run_id: second.run_id, agent_id: D.agentId } } : r
    }
    const failedBefore = D.runs.handoffConfirmations.failed
    await until(() => D.runs.handoffConfirmations.failed === failedBefore + 1, 'D to decide about its successor')
    const mine = await D.runs.getRun(second.run_id)
    expect(mine.state).toBe('failed')
    expect(mine.failure).toMatchObject({ code: 'HANDOFF_UNCONFIRMED' })
    expect(JSON.stringify(mine.failure)).toContain('does not hand the run to it')
    expect(held.has(second.run_id)).toBe(false)
    // C's successor, the one B's log names, runs on
    expect((await C.runs.getRun(first.run_id)).state).toBe('running')
  })

  it('starts on the sender\'s log when only the confirmation was lost, and spreads the event that names it', async () => {
    const runId = await heldRun(A, B, WORK, 'task-ask-lost', held)
    // B's confirmation of the handoff is lost on the way (B commits the handoff, and C never hears of it)
    const executor = Reflect.get(B.runs, 'executor') as object
    const client = Reflect.get(executor, 'handoffClient') as { call: (...args: unknown[]) => Promise<unknown> }
    const send = client.call.bind(client)
    client.call = async (...args: unknown[]) => args[1] === 'confirm' ? Promise.reject(new Error('the confirmation was lost')) : send(...args)
    const asksBefore = C.runs.handoffConfirmations.startedOnAsk
    try {
      const next = await A.handoff(runId, C.agentId, { note: 'over to C' })
      await until(() => held.has(next.run_id), 'C\'s successor to start on what B\'s log says')
      expect(C.runs.handoffConfirmations.startedOnAsk).toBe(asksBefore + 1)
      // the event that named it went out: A, which follows the task, holds it
      const named = (await B.runs.store.log.head(runId))!
      expect(await A.events.lastEvent(runId)).toMatchObject({ signature: named.signature })
    } finally {
      client.call = send
    }
  })
})
