/**
 * A task's run hands off to a run whose id sorts first (`aspecial:…` after
 * `zworker:…`): a subscription opened after the handoff replays the history
 * run by run in run id order, so the successor's events come before the
 * predecessor's run.completed{handoff}. The task still goes on with the
 * successor's events (they do not come again), and its execution ends.
 */
import { afterAll, afterEach, beforeAll, describe, expect, it, vi } from 'vitest'
import { TaskState, type Task } from '@a2a-js/sdk'
import { DefaultExecutionEventBusManager, InMemoryTaskStore, type AgentExecutionEvent } from '@a2a-js/sdk/server'
import { CONTEXT, TaskRuns, WatchBudget } from '../src/a2a/task-runs.ts'
import { A2A_INPUT_WATCHES_MAX, A2A_MESH_EXTENSION_URI, A2A_SUCCESSOR_EVENTS_KEPT_MAX } from '../src/a2a/constants.ts'
import { EventSubscription, type SubscribeOptions } from '../src/events/subscription.ts'
import { silentLogger } from '../src/logger.ts'
import type { MeshNode } from '../src/node.ts'
import type { AgentEvent, AgentEventType, Run } from '../src/runlog/types.ts'
import { startLoneNodes, stopAll } from './helpers.ts'

const CORR = 'corr-handoff-order'
const A = 'zworker:aaaa'
const B = 'aspecial:bbbb'
const CAP = { capability_id: 'work', version: '1.0.0' }
const IDS = { taskId: 'task-1', contextId: 'ctx-1' }

function ev (runId: string, seq: number, type: AgentEventType, payload: Record<string, unknown>): AgentEvent {
  return { run_id: runId, correlation_id: CORR, type, payload, at: new Date().toISOString(), seq, prev: null, executor: runId.slice(0, runId.indexOf(':')), signature: '' }
}

const A1 = ev(A, 1, 'run.started', { capability: CAP })
const A2blocked = ev(A, 2, 'run.blocked', { checkpoint_id: 'cp-1', reason: 'approve?' })
const A2progress = ev(A, 2, 'run.progress', { step: 1 })
const A3 = ev(A, 3, 'run.completed', { transition: 'handoff', handoff_to: { run_id: B, agent_id: 'aspecial' } })
const B1 = ev(B, 1, 'run.started', { capability: CAP, handoff_from: { run_id: A, agent_id: 'zworker' } })
const B2 = ev(B, 2, 'run.completed', { output: { answer: 42 } })

function runA (state: Run['state'], lastSeq: number): Run {
  const now = new Date().toISOString()
  return {
    run_id: A, agent_id: 'zworker', correlation_id: CORR, state, created_at: now, updated_at: now, capability: CAP, delegator: 'caller', authorized: [],
    parent_run: null, handoff_from: null, handoff_to: null, checkpoint_id: state === 'blocked' ? 'cp-1' : null, block_reason: null, output: null, failure: null, last_seq: lastSeq
  }
}

/** The history as the events service hands it to a push subscription: run by run, runs in sorted id order. */
function sortedHistory (events: AgentEvent[]): AgentEvent[] {
  return [...events].sort((x, y) => x.run_id < y.run_id ? -1 : x.run_id > y.run_id ? 1 : x.seq - y.seq)
}

/** What a bus update says: its kind (the state of a status update), and the run event it is of. */
function label (e: AgentExecutionEvent): string {
  if (e.kind !== 'statusUpdate' && e.kind !== 'artifactUpdate') return e.kind
  const mesh = e.data.metadata?.[A2A_MESH_EXTENSION_URI] as { run_id?: string, seq?: number } | undefined
  const what = e.kind === 'statusUpdate' ? `status:${TaskState[e.data.status?.state ?? TaskState.TASK_STATE_UNSPECIFIED]}` : e.kind
  return `${what} ${mesh?.run_id ?? '?'}#${mesh?.seq ?? '?'}`
}

describe('a2a: a handoff whose successor sorts first in the replayed history', () => {
  let node: MeshNode
  let stopping: AbortController
  let subs: EventSubscription[]

  beforeAll(async () => {
    const nodes = await startLoneNodes(1)
    node = nodes[0] as MeshNode
  })
  afterAll(async () => { await stopAll([node]) })
  afterEach(() => {
    stopping.abort()
    vi.restoreAllMocks()
  })

  /** TaskRuns over the node, its subscriptions replaying `history` first (as service.ts does). */
  function setup (history: AgentEvent[]): { runs: TaskRuns, store: InMemoryTaskStore, buses: DefaultExecutionEventBusManager } {
    stopping = new AbortController()
    subs = []
    vi.spyOn(node.events, 'subscribe').mockImplementation(async (correlationId: string, opts: SubscribeOptions = {}) => {
      // as the service's, the history comes after the caller's own step (it reads it under the correlation's lock)
      await Promise.resolve()
      const sub = new EventSubscription(correlationId, opts, () => {})
      for (const e of history) sub.deliver(e)
      subs.push(sub)
      return sub
    })
    const store = new InMemoryTaskStore()
    const buses = new DefaultExecutionEventBusManager()
    const runs = new TaskRuns({ node, log: silentLogger(), store, buses, stopping: stopping.signal }, new WatchBudget(A2A_INPUT_WATCHES_MAX))
    return { runs, store, buses }
  }

  async function saveTask (store: InMemoryTaskStore, state: TaskState): Promise<void> {
    const task: Task = { id: IDS.taskId, contextId: IDS.contextId, status: { state, message: undefined, timestamp: undefined }, artifacts: [], history: [], metadata: undefined }
    await store.save(task, CONTEXT)
  }

  it('a watched blocked task completes with the successor\'s output', async () => {
    const { runs, store } = setup(sortedHistory([A1, A2blocked, A3, B1, B2]))
    await saveTask(store, TaskState.TASK_STATE_INPUT_REQUIRED)
    const watched = runs.watch(runA('blocked', 2), IDS)
    const t = runs.get(IDS.taskId)
    expect(t).toBeDefined()
    await watched
    await t?.chain
    const task = await store.load(IDS.taskId, CONTEXT)
    expect(task?.status?.state).toBe(TaskState.TASK_STATE_COMPLETED)
    expect(JSON.stringify(task?.artifacts)).toContain('42')
    expect(runs.get(IDS.taskId)).toBeUndefined()
    expect(runs.following).toBe(0)
  })

  it('a followed task\'s execution gets the successor\'s events and ends', async () => {
    const { runs, buses } = setup(sortedHistory([A1, A2progress, A3, B1, B2]))
    const bus = buses.createOrGetByTaskId(IDS.taskId)
    const published: string[] = []
    bus.on('event', (e) => { published.push(label(e)) })
    let ended = false
    const followed = runs.follow(runA('running', 2), IDS, bus).then((r) => { ended = true; return r })
    const t = runs.get(IDS.taskId)
    // the whole history is delivered while the subscription opens
    await vi.waitFor(() => { expect(subs).toHaveLength(1) })
    expect(published).toEqual([`status:TASK_STATE_WORKING ${A}#3`, `status:TASK_STATE_WORKING ${B}#1`, `artifactUpdate ${B}#2`, `status:TASK_STATE_COMPLETED ${B}#2`])
    expect(t?.finished).toBe(true)
    expect(runs.get(IDS.taskId)).toBeUndefined()
    expect(await followed).toBe(true)
    expect(ended).toBe(true)
  })

  it('another task\'s successors in the same context do not push out its own successor\'s events', async () => {
    // an earlier turn's run handed off in the same context (the correlation): its successor sorts between A and B
    const O = 'bother:cccc'
    const others = [ev(O, 1, 'run.started', { capability: CAP, handoff_from: { run_id: 'mprev:dddd', agent_id: 'mprev' } })]
    for (let seq = 2; seq <= A2A_SUCCESSOR_EVENTS_KEPT_MAX + 1; seq++) others.push(ev(O, seq, 'run.progress', { step: seq }))
    const { runs, buses } = setup(sortedHistory([A1, A2progress, A3, B1, B2, ...others]))
    const bus = buses.createOrGetByTaskId(IDS.taskId)
    const published: string[] = []
    bus.on('event', (e) => { published.push(label(e)) })
    const followed = runs.follow(runA('running', 2), IDS, bus)
    await vi.waitFor(() => { expect(subs).toHaveLength(1) })
    // before: B's two events were the oldest kept and went for the other run's; the task stayed working
    expect(published).toEqual([`status:TASK_STATE_WORKING ${A}#3`, `status:TASK_STATE_WORKING ${B}#1`, `artifactUpdate ${B}#2`, `status:TASK_STATE_COMPLETED ${B}#2`])
    expect(await followed).toBe(true)
  })

  it('live: the successor\'s start before the predecessor\'s end', async () => {
    const { runs, buses } = setup([A1, A2progress])
    const bus = buses.createOrGetByTaskId(IDS.taskId)
    const published: string[] = []
    bus.on('event', (e) => { published.push(label(e)) })
    const followed = runs.follow(runA('running', 2), IDS, bus)
    await vi.waitFor(() => { expect(subs).toHaveLength(1) })
    const sub = subs[0] as EventSubscription
    sub.deliver(B1)
    expect(published).toEqual([])
    sub.deliver(A3)
    expect(published).toEqual([`status:TASK_STATE_WORKING ${A}#3`, `status:TASK_STATE_WORKING ${B}#1`])
    sub.deliver(B2)
    expect(published).toEqual([`status:TASK_STATE_WORKING ${A}#3`, `status:TASK_STATE_WORKING ${B}#1`, `artifactUpdate ${B}#2`, `status:TASK_STATE_COMPLETED ${B}#2`])
    expect(await followed).toBe(true)
  })
})
