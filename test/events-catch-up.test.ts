/**
 * A subscription read as an iterator takes a correlation's history at the
 * consumer's pace: a log longer than the subscription's buffer is read page
 * by page from the log, the events that come meanwhile are read there too,
 * and the subscription goes live once it has caught up. Before, the whole
 * history went into the buffer at subscribe time and a history longer than
 * the buffer failed the subscription before its consumer read anything.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import type { MeshNode } from '../src/node.ts'
import type { AgentEvent } from '../src/runlog/types.ts'
import type { EventSubscription } from '../src/events/subscription.ts'
import { startMesh, stopAll, until } from './helpers.ts'
import { expectSeqOrdered } from './events-helpers.ts'

const CHATTY = { capability_id: 'cap:chatty', version: '1.0.0' }
const BEFORE = 300
const DURING = 120
/** Far less than the history: the buffer the old code overflowed. */
const BUFFER = 40

/** Read from an iterator subscription until `done` holds (the subscription stays open), with a hook after each event. */
async function readUntil (sub: EventSubscription, done: (events: AgentEvent[]) => boolean, each: (events: AgentEvent[]) => Promise<void> = async () => {}): Promise<AgentEvent[]> {
  const events: AgentEvent[] = []
  while (!done(events)) {
    const r = await sub.next()
    if (r.done === true) throw new Error(`the subscription ended after ${events.length} events`)
    events.push(r.value)
    await each(events)
  }
  return events
}

describe('an iterator subscription catches up on a long history at its own pace', () => {
  let nodes: MeshNode[] = []
  let A: MeshNode, B: MeshNode
  let runId = ''
  const more = Promise.withResolvers<void>()
  const finish = Promise.withResolvers<void>()

  beforeAll(async () => {
    nodes = await startMesh(2)
    ;[A, B] = nodes as [MeshNode, MeshNode]
    B.runs.handle(CHATTY, async (ctx) => {
      for (let i = 0; i < BEFORE; i++) await ctx.progress({ phase: 'before', i })
      await more.promise
      for (let i = 0; i < DURING; i++) await ctx.progress({ phase: 'during', i })
      await finish.promise
      return { said: BEFORE + DURING }
    })
    await B.publishCard({ name: 'chatty', capabilities: [CHATTY] })
    runId = (await A.delegate({ to_agent: B.agentId, task_id: 'task-catch-up', capability: CHATTY, input: {} })).run_id
    // the history is there before anyone subscribes: run.started and BEFORE progress events, at the executor and the delegator
    await until(async () => (await B.events.readCorrelation('task-catch-up')).get(runId)?.length === BEFORE + 1, 'the history at the executor')
    await until(async () => (await A.events.readCorrelation('task-catch-up')).get(runId)?.length === BEFORE + 1, 'the history at the delegator')
  })
  afterAll(async () => {
    more.resolve()
    finish.resolve()
    await stopAll(nodes)
  })

  it('reads a history many times its buffer, then what came while it read, then live events, each once and in order', async () => {
    // at the executor (its own run) and at the delegator (its copy of the run)
    const subs = [
      await B.events.subscribe('task-catch-up', { maxBuffered: BUFFER }),
      await A.events.subscribe('task-catch-up', { maxBuffered: BUFFER, runs: [runId] })
    ]
    const reads = subs.map(async (sub, k) => readUntil(sub, es => es.at(-1)?.type === 'run.completed', async (es) => {
      // half-way through the old history, the run says more (these land in the log while the consumer is behind)
      if (k === 0 && es.length === 100) more.resolve()
      // once the consumer has read what came during its catch-up, the run ends: that event comes live
      if (k === 0 && es.length === BEFORE + 1 + DURING) finish.resolve()
    }))
    const all = await Promise.all(reads)
    for (const events of all) {
      expect(events).toHaveLength(BEFORE + DURING + 2)
      expectSeqOrdered(events)
      expect(events.map(e => e.seq)).toEqual(Array.from({ length: BEFORE + DURING + 2 }, (_, i) => i + 1))
      expect(events.filter(e => e.payload.phase === 'during')).toHaveLength(DURING)
    }
    for (const sub of subs) sub.close()
  })

  it('still fails a consumer that stops reading once it is live and more than its buffer behind', async () => {
    const sub = await B.events.subscribe('task-catch-up', { maxBuffered: BUFFER })
    // catch up on everything (the run ended in the test before), then stop reading: caught up, it is live
    const history = await readUntil(sub, es => es.length === BEFORE + DURING + 2)
    expect(history.at(-1)?.type).toBe('run.completed')
    // a new run of the task says more than the buffer holds while nobody reads
    const second = await A.delegate({ to_agent: B.agentId, task_id: 'task-catch-up', capability: CHATTY, input: {} })
    await until(async () => ((await B.events.readCorrelation('task-catch-up')).get(second.run_id)?.length ?? 0) > BUFFER + 2, 'the second run past the buffer')
    await expect(async () => { for await (const e of sub) expect(e.correlation_id).toBe('task-catch-up') }).rejects.toMatchObject({ code: 'INTERNAL', details: { reason: 'overflow' } })
  })

  it('says where the history ends (pastHistory), without waiting for a live event', async () => {
    // every run of the task has ended: what the log holds is the whole history
    await until(async () => [...(await B.events.readCorrelation('task-catch-up')).values()].every(es => es.at(-1)?.type === 'run.completed'), 'every run of the task to end')
    const logs = await B.events.readCorrelation('task-catch-up')
    const total = [...logs.values()].reduce((n, es) => n + es.length, 0)
    expect(total).toBeGreaterThan(BUFFER * 2)
    const sub = await B.events.subscribe('task-catch-up', { maxBuffered: BUFFER })
    let read = 0
    while (!await sub.pastHistory()) {
      const r = await sub.next()
      expect(r.done).toBe(false)
      read++
    }
    expect(read).toBe(total)
    // asked again, with nothing live to hand out, it answers at once
    expect(await sub.pastHistory()).toBe(true)
    sub.close()
    const live = await B.events.subscribe('task-catch-up', { history: false })
    expect(await live.pastHistory()).toBe(true)
    live.close()
  })
})
