/**
 * A subscriber that names only the task's owner (`subscribe(task, { owner })`,
 * GET /v1/tasks/{id}/events?owner=) syncs from that owner like from any
 * participant. Before, the owner was no participant: such a subscriber's one
 * way to a run's events was gossip, and when gossip missed a run's first
 * event (a first publish on a fresh topic, a bystander connected to neither
 * the executor nor the owner) no sync ever fetched it (found by session 51's
 * look at a CI flake of runs-handoff-honest-orphan, whose bystander subscribes
 * so). Also: a participant that joins while no run is known starts the tail's
 * rounds over from their least delay.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { EVENTS_TAIL_SYNC_MIN_MS } from '../src/constants.ts'
import type { MeshNode } from '../src/node.ts'
import type { AgentEvent } from '../src/runlog/types.ts'
import { holdingWorkers, startMesh, stopAll, until } from './helpers.ts'
import { loseGossip } from './fixtures/lose-gossip.ts'

const WORK = { capability_id: 'cap:owner-sync', version: '1.0.0' }

interface Internals { correlations: { get: (id: string) => { tailDelay: number } | undefined } }

describe('a subscriber that names only the task\'s owner', () => {
  let nodes: MeshNode[] = []
  let A: MeshNode, B: MeshNode, E: MeshNode
  const held = new Map<string, PromiseWithResolvers<void>>()

  beforeAll(async () => {
    nodes = await startMesh(5)
    ;[A, B, , , E] = nodes as [MeshNode, MeshNode, MeshNode, MeshNode, MeshNode]
    await holdingWorkers([B], WORK, held)
  })
  afterAll(async () => {
    for (const g of held.values()) g.resolve()
    await stopAll(nodes)
  })

  it('gets a run whose start gossip lost, by sync from the owner', async () => {
    const task = 'task-owner-sync-lost'
    const seen: AgentEvent[] = []
    const sub = await E.events.subscribe(task, { owner: A.agentId })
    void (async () => { for await (const e of sub) seen.push(e) })()
    expect(E.events.participants(task)).toContain(A.agentId)
    const drop = loseGossip(E, task, e => e.type === 'run.started')
    const syncs0 = E.events.stats.syncRequests.correlation
    const r = await A.delegate({ to_agent: B.agentId, task_id: task, capability: WORK, input: {} })
    await until(() => held.has(r.run_id), 'R to start')
    await until(() => seen.some(e => e.run_id === r.run_id && e.seq === 1), 'the subscriber to hold R\'s start')
    // gossip did bring it and it was lost: the subscriber's copy came by a sync
    expect(drop.lost).toBeGreaterThan(0)
    expect(E.events.stats.syncRequests.correlation).toBeGreaterThan(syncs0)
    sub.close()
  })

  it('a participant joining while no run is known starts the tail\'s rounds over from their least delay', async () => {
    const task = 'task-owner-sync-join'
    const sub = await E.events.subscribe(task, { owner: A.agentId })
    const t = (E.events as unknown as Internals).correlations.get(task)!
    // the subscriber has waited long for the task: its rounds came further and further apart
    t.tailDelay = 16 * EVENTS_TAIL_SYNC_MIN_MS
    // the owner joins the topic (as it does when it delegates)
    const onA = await A.events.subscribe(task)
    await until(() => t.tailDelay === EVENTS_TAIL_SYNC_MIN_MS, 'the tail delay to start over')
    onA.close()
    sub.close()
  })
})
