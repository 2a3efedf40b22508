/**
 * A2A tasks that wait for input, driven with the official @a2a-js/sdk client:
 * their runs are watched, so a cancel or a resume made outside A2A reaches
 * the task; a resume the SDK refuses does not resume the run; and
 * SubscribeToTask streams end with their clients and are bounded per task.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { TaskState } from '@a2a-js/sdk'
import type { StreamResponse } from '@a2a-js/sdk'
import { ClientFactory, type Client } from '@a2a-js/sdk/client'
import type { MeshNode } from '../src/node.ts'
import { silentLogger } from '../src/logger.ts'
import { A2aServer } from '../src/a2a/server.ts'
import type { MeshAgentHandler } from '../src/a2a/agent-handler.ts'
import { PART_FAILURE, PART_OUTPUT, PART_RESUME } from '../src/a2a/constants.ts'
import { MAX_CORRELATION_TOPICS } from '../src/constants.ts'
import type { AapError } from '../src/errors.ts'
import type { EventSubscription } from '../src/events/subscription.ts'
import { until } from './helpers.ts'
import { APPROVE, startA2aMesh, stopA2aMesh, type A2aMesh } from './fixtures/a2a-mesh.ts'
import { asTask, data, handlerOf, partData, runIdOf, send, stateOf, userMessage } from './fixtures/a2a-messages.ts'

const WAIT = { capability_id: 'cap:wait', version: '1.0.0' }

/** Listeners on the bus the SDK keeps for a task (0 when it keeps none). */
function busListeners (handler: MeshAgentHandler, taskId: string): number {
  const buses = (handler as unknown as { buses: { getByTaskId: (id: string) => { eventListeners: Map<unknown, unknown[]> } | undefined } }).buses
  const bus = buses.getByTaskId(taskId)
  let n = 0
  for (const wrapped of bus?.eventListeners.values() ?? []) n += wrapped.length
  return n
}

/** Read a stream to its end in the background. */
function collect (stream: AsyncGenerator<StreamResponse>, first: StreamResponse[]): Promise<StreamResponse[]> {
  return (async () => {
    const seen = [...first]
    for await (const ev of stream) seen.push(ev)
    return seen
  })()
}

describe('A2A inbound: tasks waiting for input', () => {
  let m: A2aMesh | undefined
  let worker: MeshNode, gateway: MeshNode
  let a2a: A2aServer
  let client: Client

  beforeAll(async () => {
    m = await startA2aMesh({
      more: [[WAIT, async (ctx) => {
        await new Promise<void>(resolve => { ctx.signal.addEventListener('abort', () => { resolve() }, { once: true }) })
        return {}
      }]],
      server: { maxSubscribersPerTask: 3 }
    })
    ;({ worker, gateway, a2a, client } = m)
  })
  afterAll(async () => { await stopA2aMesh(m) })

  it('a blocked run canceled outside A2A (the delegator) ends its task CANCELED, and its subscriber sees it', async () => {
    const blocked = asTask(await client.sendMessage(send(APPROVE, { doc: 1 }, 'corr-watch-cancel')))
    expect(blocked.status?.state).toBe(TaskState.TASK_STATE_INPUT_REQUIRED)
    const stream = client.resubscribeTask({ tenant: '', id: blocked.id })
    const first = await stream.next()
    expect(first.done).toBe(false)
    const streamed = collect(stream, first.done === true ? [] : [first.value])

    await gateway.cancel(runIdOf(blocked), 'the delegator changed its mind')
    expect((await gateway.getRun(runIdOf(blocked))).failure?.code).toBe('CANCELED')
    await until(async () => (await client.getTask({ tenant: '', id: blocked.id })).status?.state === TaskState.TASK_STATE_CANCELED, 'the task to show the cancel')
    const got = await client.getTask({ tenant: '', id: blocked.id })
    expect(partData(got.status?.message?.parts, PART_FAILURE)?.code).toBe('CANCELED')
    expect((await streamed).map(stateOf).filter(s => s !== undefined).at(-1)).toBe(TaskState.TASK_STATE_CANCELED)
    const handler = await handlerOf(a2a, worker.agentId)
    await until(() => handler.runs.get(blocked.id) === undefined, 'the watch of the canceled task to go')
    expect(busListeners(handler, blocked.id)).toBe(0)
  })

  it('a blocked run resumed outside A2A sets its task working, and its output reaches the task', async () => {
    const blocked = asTask(await client.sendMessage(send(APPROVE, { doc: 2 }, 'corr-watch-resume')))
    expect(blocked.status?.state).toBe(TaskState.TASK_STATE_INPUT_REQUIRED)
    const stream = client.resubscribeTask({ tenant: '', id: blocked.id })
    const first = await stream.next()
    const streamed = collect(stream, first.done === true ? [] : [first.value])

    await gateway.resume(runIdOf(blocked), { approved: true })
    const seen = await streamed
    const states = seen.map(stateOf).filter(s => s !== undefined)
    expect(states).toContain(TaskState.TASK_STATE_WORKING)
    expect(states.at(-1)).toBe(TaskState.TASK_STATE_COMPLETED)
    const got = await client.getTask({ tenant: '', id: blocked.id })
    expect(got.status?.state).toBe(TaskState.TASK_STATE_COMPLETED)
    expect(partData(got.artifacts[0]?.parts, PART_OUTPUT)?.output).toEqual({ approved: true, input: { doc: 2 } })
  })

  it('watches are bounded per server, and go when the handler closes', async () => {
    const small = await A2aServer.start(gateway, { port: 0, logger: silentLogger(), maxInputWatches: 1 })
    try {
      const c = await new ClientFactory().createFromUrl(small.clientUrl(worker.agentId))
      const older = asTask(await c.sendMessage(send(APPROVE, { doc: 3 }, 'corr-watch-bound-1')))
      const newer = asTask(await c.sendMessage(send(APPROVE, { doc: 4 }, 'corr-watch-bound-2')))
      const handler = await handlerOf(small, worker.agentId)
      expect(handler.watching).toBe(1)
      expect(handler.runs.stats.watchesDropped).toBe(1)
      expect(handler.runs.get(older.id)).toBeUndefined()
      // the newer task's watch is the one kept: a cancel outside A2A reaches it
      await gateway.cancel(runIdOf(newer), 'bounded')
      await until(async () => (await c.getTask({ tenant: '', id: newer.id })).status?.state === TaskState.TASK_STATE_CANCELED, 'the watched task to show the cancel')
      const third = asTask(await c.sendMessage(send(APPROVE, { doc: 5 }, 'corr-watch-bound-3')))
      expect(handler.watching).toBe(1)
      handler.close()
      expect(handler.watching).toBe(0)
      expect(handler.runs.get(third.id)).toBeUndefined()
      await gateway.cancel(runIdOf(older), 'cleanup')
      await gateway.cancel(runIdOf(third), 'cleanup')
    } finally {
      await small.close()
    }
  })

  it('a new task whose run cannot be followed for want of a topic takes the topic of the oldest watch', async () => {
    const waiting = asTask(await client.sendMessage(send(APPROVE, { doc: 9 }, 'corr-watch-topic')))
    const handler = await handlerOf(a2a, worker.agentId)
    expect(handler.runs.get(waiting.id)?.waiting).toBe(true)
    const dropped = handler.runs.stats.watchesDropped
    // every other topic the gateway may follow is taken by a subscriber of its own
    const subs: EventSubscription[] = []
    try {
      for (let i = 0; subs.length < MAX_CORRELATION_TOPICS; i++) {
        try {
          subs.push(await gateway.events.subscribe(`watch-topics-full-${i}`))
        } catch (err) {
          expect((err as AapError).details?.reason).toBe('topic_limit')
          break
        }
      }
      expect(gateway.events.topics()).toHaveLength(MAX_CORRELATION_TOPICS)
      const next = asTask(await client.sendMessage(send(APPROVE, { doc: 10 }, 'corr-watch-topic-new')))
      expect(next.status?.state).toBe(TaskState.TASK_STATE_INPUT_REQUIRED)
      expect(handler.runs.stats.watchesDropped).toBe(dropped + 1)
      expect(handler.runs.get(waiting.id)).toBeUndefined()
      await gateway.cancel(runIdOf(next), 'cleanup')
    } finally {
      for (const sub of subs) sub.close()
    }
    await gateway.cancel(runIdOf(waiting), 'cleanup')
  })

  it('a resume the SDK would refuse (another contextId) does not resume the run', async () => {
    const blocked = asTask(await client.sendMessage(send(APPROVE, { doc: 6 }, 'corr-watch-ctx')))
    expect(blocked.status?.state).toBe(TaskState.TASK_STATE_INPUT_REQUIRED)
    const wrong = { tenant: '', message: userMessage([data(PART_RESUME, { resolution: { approved: true } })], { taskId: blocked.id, contextId: 'corr-someone-else' }), configuration: undefined, metadata: undefined }
    await expect(client.sendMessage(wrong)).rejects.toThrow(/contextId/)
    expect((await gateway.getRun(runIdOf(blocked))).state).toBe('blocked')
    expect((await client.getTask({ tenant: '', id: blocked.id })).status?.state).toBe(TaskState.TASK_STATE_INPUT_REQUIRED)
    // the right one still resumes it, to its end
    const right = { tenant: '', message: userMessage([data(PART_RESUME, { resolution: { approved: false } })], { taskId: blocked.id, contextId: blocked.contextId }), configuration: undefined, metadata: undefined }
    const done = asTask(await client.sendMessage(right))
    expect(done.status?.state).toBe(TaskState.TASK_STATE_COMPLETED)
    expect(partData(done.artifacts[0]?.parts, PART_OUTPUT)?.output).toEqual({ approved: false, input: { doc: 6 } })
  })

  it('SubscribeToTask streams of clients that went end: no listener stays on the task\'s bus', async () => {
    const blocked = asTask(await client.sendMessage(send(APPROVE, { doc: 7 }, 'corr-watch-gone')))
    const handler = await handlerOf(a2a, worker.agentId)
    // the SDK's own listeners of the execution go once it has settled the task
    await until(() => busListeners(handler, blocked.id) === 0, 'the SDK to settle the input-required task')
    const before = 0
    const aborts: AbortController[] = []
    for (let round = 0; round < 4; round++) {
      for (let i = 0; i < 3; i++) {
        const ac = new AbortController()
        const stream = client.resubscribeTask({ tenant: '', id: blocked.id }, { signal: ac.signal })
        expect((await stream.next()).done).toBe(false)
        aborts.push(ac)
      }
      expect(busListeners(handler, blocked.id)).toBe(before + 3)
      for (const ac of aborts.splice(0)) ac.abort()
      await until(() => busListeners(handler, blocked.id) === before, 'the streams of the clients that went to end')
    }
    expect(handler.streams.subscribers(blocked.id)).toBe(0)
    expect(handler.streams.stats.clientGone).toBeGreaterThanOrEqual(12)
    await gateway.cancel(runIdOf(blocked), 'cleanup')
  })

  it('a task takes a bounded number of subscribers; past it a typed A2A error', async () => {
    const blocked = asTask(await client.sendMessage(send(APPROVE, { doc: 8 }, 'corr-watch-many')))
    const handler = await handlerOf(a2a, worker.agentId)
    const aborts: AbortController[] = []
    for (let i = 0; i < 3; i++) {
      const ac = new AbortController()
      const stream = client.resubscribeTask({ tenant: '', id: blocked.id }, { signal: ac.signal })
      expect((await stream.next()).done).toBe(false)
      aborts.push(ac)
    }
    await expect(client.resubscribeTask({ tenant: '', id: blocked.id }).next()).rejects.toThrow(/subscribers already/)
    expect(handler.streams.stats.refused).toBe(1)
    aborts.pop()?.abort()
    await until(() => handler.streams.subscribers(blocked.id) === 2, 'one subscriber to go')
    const again = client.resubscribeTask({ tenant: '', id: blocked.id })
    expect((await again.next()).done).toBe(false)
    const rest = collect(again, [])
    await gateway.cancel(runIdOf(blocked), 'cleanup')
    expect((await rest).map(stateOf).at(-1)).toBe(TaskState.TASK_STATE_CANCELED)
    for (const ac of aborts) ac.abort()
    await until(() => handler.streams.subscribers(blocked.id) === 0, 'the subscribers to go')
  })

  it('a SendStreamingMessage client that goes ends its response; the task still gets its end', async () => {
    const handler = await handlerOf(a2a, worker.agentId)
    const gone = handler.streams.stats.clientGone
    const ac = new AbortController()
    const stream = client.sendMessageStream(send(WAIT, {}, 'corr-watch-stream-gone'), { signal: ac.signal })
    const first = await stream.next()
    const task = first.done === true || first.value.payload?.$case !== 'task' ? undefined : first.value.payload.value
    expect(task).toBeDefined()
    ac.abort()
    await until(() => handler.streams.stats.clientGone === gone + 1, 'the server to end the stream of the client that went')
    expect(handler.sending).toBe(1)
    const canceled = await client.cancelTask({ tenant: '', id: task!.id, metadata: undefined })
    expect(canceled.status?.state).toBe(TaskState.TASK_STATE_CANCELED)
    await until(() => handler.sending === 0, 'the SDK\'s stream to be read to its end')
    expect((await client.getTask({ tenant: '', id: task!.id })).status?.state).toBe(TaskState.TASK_STATE_CANCELED)
  })
})
