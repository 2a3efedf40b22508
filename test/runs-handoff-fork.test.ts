/**
 * An executor that hands one run off twice (src/events/forks.ts, protocols/handoff.md "Forks"). B executes A's
 * run; it asks D to take the run over (phase one) and hands it to C the honest way, then signs a second handoff
 * event of the same run at the same seq, naming D's successor, and confirms D with it. Each receiver checks a
 * valid event signed by the run's executor, so both successors ran, while every holder admitted only the one it
 * placed first (carried as "noticed and left alone" since session 44). Now D spreads the event that confirmed it,
 * A (the delegator, holding the other) finds the two events at one seq, keeps the proof, and cancels both
 * successors: no task line goes on from a fork.
 */
import type { PrivateKey } from '@libp2p/interface'
import { generateKeyPair } from '@libp2p/crypto/keys'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { HANDOFF_PROTOCOL } from '../src/constants.ts'
import type { MeshNode } from '../src/node.ts'
import { canonicalEvent, signEvent } from '../src/runlog/event.ts'
import { correlationTopic } from '../src/events/topic.ts'
import type { AgentEvent } from '../src/runlog/types.ts'
import { phaseOneHandoff } from './fixtures/raw-handoff.ts'
import { RawWire } from './fixtures/raw-wire.ts'
import { heldRun, holdingWorkers, startMesh, stopAll, until } from './helpers.ts'

const WORK = { capability_id: 'cap:handoff-fork', version: '1.0.0' }

describe('a run handed off twice by its executor', () => {
  let nodes: MeshNode[] = []
  let A: MeshNode, B: MeshNode, C: MeshNode, D: MeshNode
  const held = new Map<string, PromiseWithResolvers<void>>()
  let bKey: PrivateKey

  beforeAll(async () => {
    bKey = await generateKeyPair('Ed25519')
    nodes = await startMesh(4, { nodeOptions: i => (i === 1 ? { privateKey: bKey } : {}) })
    ;[A, B, C, D] = nodes as [MeshNode, MeshNode, MeshNode, MeshNode]
    await holdingWorkers([B, C, D], WORK, held)
  })
  afterAll(async () => {
    for (const g of held.values()) g.resolve()
    await stopAll(nodes)
  })

  it('the delegator finds the two handoff events, keeps the proof and cancels both successors', async () => {
    const task = 'task-handoff-fork'
    const runId = await heldRun(A, B, WORK, task, held)
    // phase one with D by hand: D creates a successor and waits for its confirmation
    const asked = await phaseOneHandoff(B, bKey, D, await B.runs.getRun(runId))
    expect(asked.ok, JSON.stringify(asked.error)).toBe(true)
    const second = asked.body!.run
    // the honest handoff to C: committed, confirmed, started, and followed by A
    const first = await A.handoff(runId, C.agentId, { note: 'over to C' })
    await until(() => held.has(first.run_id), 'C\'s successor to start')
    const honest = (await B.runs.store.log.head(runId))!
    await until(async () => (await A.events.lastEvent(runId))?.signature === honest.signature, 'A to hold the handoff event')

    // the second ending of the same run, at the same seq, naming D's successor
    const { signature: _, ...unsigned } = honest
    const forged: AgentEvent = await signEvent(bKey, { ...unsigned, payload: { ...honest.payload, handoff_to: { run_id: second.run_id, agent_id: D.agentId } } })
    const wire = await RawWire.open(B.host, D.host.peerId, HANDOFF_PROTOCOL)
    try {
      expect(await wire.call({ id: 1, type: 'confirm', body: { run_id: second.run_id, handoff_event: forged } })).toMatchObject({ ok: true, body: { run: { run_id: second.run_id } } })
    } finally {
      wire.abort()
    }
    await until(() => held.has(second.run_id), 'D\'s successor to start')

    // D spread the event that confirmed it; A holds the other: a fork, and both successors end
    await until(() => A.events.forks.found === 1, 'A to find the fork')
    await until(async () => (await C.runs.getRun(first.run_id)).state === 'failed', 'C\'s successor to be canceled')
    await until(async () => (await D.runs.getRun(second.run_id)).state === 'failed', 'D\'s successor to be canceled')
    const canceled = await D.runs.getRun(second.run_id)
    expect(JSON.stringify(canceled.failure)).toContain('forked')

    // the proof is in A's replay of the task: both events, signed by B
    const replay = await A.events.replay(task, { timeoutMs: 5_000 })
    expect(replay.forks).toHaveLength(1)
    expect(replay.forks[0]).toMatchObject({ run_id: runId, seq: honest.seq, executor: B.agentId })
    expect(replay.forks[0]!.events.map(e => e.signature).sort()).toEqual([honest.signature, forged.signature].sort())
    // found once: the relayed copies of either event are no new fork
    expect(A.events.forks.found).toBe(1)
  })

  it('an ending signed below the head held everywhere is a fork too', async () => {
    // found by a review: B hands off to C at seq 2, then signs a second ending at seq 1 naming D's successor;
    // every holder's head is at seq 2, so it was taken for an old repeat and both successors ran
    const task = 'task-handoff-fork-below'
    const found = A.events.forks.found
    const runId = await heldRun(A, B, WORK, task, held)
    const asked = await phaseOneHandoff(B, bKey, D, await B.runs.getRun(runId))
    expect(asked.ok, JSON.stringify(asked.error)).toBe(true)
    const second = asked.body!.run
    const started = (await B.runs.store.log.get(runId, 1))!
    const first = await A.handoff(runId, C.agentId, { note: 'over to C' })
    await until(() => held.has(first.run_id), 'C\'s successor to start')
    const honest = (await B.runs.store.log.head(runId))!
    expect(honest.seq).toBe(2)
    await until(async () => (await A.events.lastEvent(runId))?.signature === honest.signature, 'A to hold the handoff event')
    const { signature: _, ...unsigned } = started
    const forged = await signEvent(bKey, { ...unsigned, type: 'run.completed', payload: { ...honest.payload, handoff_to: { run_id: second.run_id, agent_id: D.agentId } } })
    const wire = await RawWire.open(B.host, D.host.peerId, HANDOFF_PROTOCOL)
    try {
      expect(await wire.call({ id: 1, type: 'confirm', body: { run_id: second.run_id, handoff_event: forged } })).toMatchObject({ ok: true })
    } finally {
      wire.abort()
    }
    await until(() => A.events.forks.found === found + 1, 'A to find the fork')
    await until(async () => (await C.runs.getRun(first.run_id)).state === 'failed', 'C\'s successor to be canceled')
    await until(async () => (await D.runs.getRun(second.run_id)).state === 'failed', 'D\'s successor to be canceled')
  })

  it('a fork that names a run of another task does not end that run', async () => {
    // found by a review: the delegator canceled whatever run the forged event named, here one it had delegated
    // to C under another task
    const victim = await heldRun(A, C, WORK, 'task-fork-victim', held)
    const task = 'task-fork-names-victim'
    const found = A.events.forks.found
    const namedOther = A.runs.forkStats.namedOther
    const runId = await heldRun(A, B, WORK, task, held)
    const head = (await B.runs.store.log.head(runId))!
    await until(async () => (await A.events.lastEvent(runId))?.signature === head.signature, 'A to hold the head')
    const { signature: _, ...unsigned } = head
    const forged = await signEvent(bKey, { ...unsigned, type: 'run.completed', payload: { transition: 'handoff', handoff_to: { run_id: victim, agent_id: C.agentId } } })
    await B.host.services.pubsub.publish(correlationTopic(task), new TextEncoder().encode(canonicalEvent(forged)))
    await until(() => A.events.forks.found === found + 1 && A.runs.forkStats.namedOther === namedOther + 1, 'A to find the fork and look at the run it names')
    expect((await C.runs.getRun(victim)).state).toBe('running')
  })
})
