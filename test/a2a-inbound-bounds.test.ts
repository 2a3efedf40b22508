/**
 * The inbound A2A server's bounds on what its clients make it hold: the
 * bytes of an agent's tasks (finished ones go first, oldest first; with only
 * open ones left a new task is refused before any run starts), the streams
 * open at once on the whole server (past them a typed A2A error, as past the
 * subscribers of one task), and its connections (past them a new one is
 * closed at once). Real nodes; the A2A side is @a2a-js/sdk's client.
 */
import { connect, type Socket } from 'node:net'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { TaskState } from '@a2a-js/sdk'
import { ClientFactory, type Client } from '@a2a-js/sdk/client'
import { A2aServer, type A2aServerOptions } from '../src/a2a/server.ts'
import { silentLogger } from '../src/logger.ts'
import type { MeshNode } from '../src/node.ts'
import { startLoneNodes, stopAll, until } from './helpers.ts'
import { startA2aMesh, stopA2aMesh, type A2aMesh } from './fixtures/a2a-mesh.ts'
import { asTask, handlerOf, send } from './fixtures/a2a-messages.ts'

const ECHO = { capability_id: 'cap:echo', version: '1.0.0' }
const ASK = { capability_id: 'cap:ask', version: '1.0.0' }
const WAIT = { capability_id: 'cap:wait', version: '1.0.0' }
/** Characters of the input of each task of the bytes test: a handful of tasks fill its budget. */
const PAD = 'p'.repeat(6_000)
const TASK_BYTES_BUDGET = 40_000

describe('A2A inbound: bounds on what clients make the server hold', () => {
  let m: A2aMesh
  let asked = 0
  let waited = 0
  const servers: A2aServer[] = []
  const extra: MeshNode[] = []

  /** Another A2A server on the gateway, with its own bounds, and a client of the worker on it. */
  async function serve (opts: Partial<Omit<A2aServerOptions, 'port' | 'logger'>>): Promise<{ a2a: A2aServer, client: Client }> {
    const a2a = await A2aServer.start(m.gateway, { port: 0, logger: silentLogger(), ...opts })
    servers.push(a2a)
    return { a2a, client: await new ClientFactory().createFromUrl(a2a.clientUrl(m.worker.agentId)) }
  }

  beforeAll(async () => {
    m = await startA2aMesh({
      more: [
        [ECHO, async (ctx) => ({ echo: ctx.input })],
        [ASK, async (ctx) => {
          asked++
          return { resolution: await ctx.block('a human decides', `cp-${ctx.run.run_id.slice(-12)}`) }
        }],
        [WAIT, async (ctx) => {
          waited++
          await new Promise<void>(resolve => { ctx.signal.addEventListener('abort', () => { resolve() }, { once: true }) })
          return {}
        }]
      ]
    })
  })
  afterAll(async () => {
    for (const s of servers) await s.close()
    await stopAll(extra)
    await stopA2aMesh(m)
  })

  it('an agent\'s tasks are bounded in bytes: finished ones go first, then new tasks are refused', async () => {
    const { a2a, client } = await serve({ maxTaskBytesPerAgent: TASK_BYTES_BUDGET })
    const finished: string[] = []
    for (let i = 0; i < 6; i++) {
      const t = asTask(await client.sendMessage(send(ECHO, { i, pad: PAD })))
      expect(t.status?.state).toBe(TaskState.TASK_STATE_COMPLETED)
      finished.push(t.id)
    }
    await expect(client.getTask({ tenant: '', id: finished[0]! })).rejects.toThrow(/no task|not found/i)
    expect((await handlerOf(a2a, m.worker.agentId)).store.droppedForBytes).toBeGreaterThan(0)
    expect((await client.getTask({ tenant: '', id: finished.at(-1)! })).status?.state).toBe(TaskState.TASK_STATE_COMPLETED)

    // open tasks (waiting for input) push the finished ones out, then fill the budget: the next one is refused
    const open: string[] = []
    let refused: unknown
    for (let i = 0; i < 30 && refused === undefined; i++) {
      try {
        const t = asTask(await client.sendMessage(send(ASK, { i, pad: PAD })))
        expect(t.status?.state).toBe(TaskState.TASK_STATE_INPUT_REQUIRED)
        open.push(t.id)
      } catch (err) {
        refused = err
      }
    }
    expect(String(refused)).toMatch(/A2A_TASKS_MAX_BYTES_PER_AGENT/)
    expect(String(refused)).toMatch(/DELEGATION_REFUSED/)
    expect(open.length).toBeGreaterThan(1)
    // the refused task started no run, and every open task is still there
    expect(asked).toBe(open.length)
    for (const id of open) expect((await client.getTask({ tenant: '', id })).status?.state).toBe(TaskState.TASK_STATE_INPUT_REQUIRED)
    for (const id of finished) await expect(client.getTask({ tenant: '', id })).rejects.toThrow(/no task|not found/i)

    // an open task that ends makes room again
    const canceled = await client.cancelTask({ tenant: '', id: open[0]!, metadata: undefined })
    expect(canceled.status?.state).toBe(TaskState.TASK_STATE_CANCELED)
    expect(asTask(await client.sendMessage(send(ECHO, { again: true }))).status?.state).toBe(TaskState.TASK_STATE_COMPLETED)
    for (const id of open.slice(1)) await client.cancelTask({ tenant: '', id, metadata: undefined })
  })

  it('the tasks of all agents together are bounded in bytes: any agent\'s oldest finished task goes, then new tasks are refused', async () => {
    // a second agent the same server serves, on a node of its own
    const [other] = await startLoneNodes(1)
    extra.push(other!)
    expect(await other!.join(m.gateway.addresses)).toBe(1)
    let otherAsked = 0
    other!.runs.handle(ECHO, async (ctx) => ({ echo: ctx.input }))
    other!.runs.handle(ASK, async (ctx) => {
      otherAsked++
      return { resolution: await ctx.block('a human decides', `cp-${ctx.run.run_id.slice(-12)}`) }
    })
    await other!.publishCard({ name: 'other', capabilities: [ECHO, ASK] })
    const { a2a, client: toWorker } = await serve({ maxTaskBytes: TASK_BYTES_BUDGET })
    const toOther = await new ClientFactory().createFromUrl(a2a.clientUrl(other!.agentId))
    const workerTasks: string[] = []
    for (let i = 0; i < 4; i++) workerTasks.push(asTask(await toWorker.sendMessage(send(ECHO, { i, pad: PAD }))).id)
    // the other agent has tasks of its own: the worker's oldest finished ones make room for them
    for (let i = 0; i < 4; i++) expect(asTask(await toOther.sendMessage(send(ECHO, { i, pad: PAD }))).status?.state).toBe(TaskState.TASK_STATE_COMPLETED)
    await expect(toWorker.getTask({ tenant: '', id: workerTasks[0]! })).rejects.toThrow(/no task|not found/i)
    const stores = [(await handlerOf(a2a, m.worker.agentId)).store, (await handlerOf(a2a, other!.agentId)).store]
    expect(stores[0]!.bytes + stores[1]!.bytes).toBeLessThanOrEqual(TASK_BYTES_BUDGET)
    expect(stores[0]!.bytes).toBeLessThan(TASK_BYTES_BUDGET)

    // open tasks fill the server's bytes: the next task is refused, whichever agent it is for
    const open: string[] = []
    let refused: unknown
    for (let i = 0; i < 30 && refused === undefined; i++) {
      try {
        open.push(asTask(await toOther.sendMessage(send(ASK, { i, pad: PAD }))).id)
      } catch (err) {
        refused = err
      }
    }
    expect(String(refused)).toMatch(/A2A_TASKS_MAX_BYTES /)
    expect(String(refused)).toMatch(/DELEGATION_REFUSED/)
    expect(otherAsked).toBe(open.length)
    await expect(toWorker.sendMessage(send(ECHO, { refused: true }))).rejects.toThrow(/A2A_TASKS_MAX_BYTES /)
    for (const id of open) expect((await toOther.getTask({ tenant: '', id })).status?.state).toBe(TaskState.TASK_STATE_INPUT_REQUIRED)

    // an open task that ends makes room again, for the other agent too
    await toOther.cancelTask({ tenant: '', id: open[0]!, metadata: undefined })
    expect(asTask(await toWorker.sendMessage(send(ECHO, { again: true }))).status?.state).toBe(TaskState.TASK_STATE_COMPLETED)
    for (const id of open.slice(1)) await toOther.cancelTask({ tenant: '', id, metadata: undefined })
  })

  it('the server keeps a bounded number of streams open; past it a stream is refused (typed) before any run starts', async () => {
    const { a2a, client } = await serve({ maxStreams: 2 })
    const blocked = asTask(await client.sendMessage(send(ASK, { streams: true })))
    const aborts: AbortController[] = []
    for (let i = 0; i < 2; i++) {
      const ac = new AbortController()
      const stream = client.resubscribeTask({ tenant: '', id: blocked.id }, { signal: ac.signal })
      expect((await stream.next()).done).toBe(false)
      aborts.push(ac)
    }
    await expect(client.resubscribeTask({ tenant: '', id: blocked.id }).next()).rejects.toThrow(/2 streams open already/)
    expect(a2a.streams.open).toBe(2)
    const waitedBefore = waited
    await expect(client.sendMessageStream(send(WAIT, {})).next()).rejects.toThrow(/2 streams open already/)
    expect(a2a.streams.refused).toBe(2)
    expect(waited).toBe(waitedBefore)
    // a client that goes gives its stream back
    aborts.pop()?.abort()
    await until(() => a2a.streams.open === 1, 'the stream of the client that went to end')
    const ac = new AbortController()
    const stream = client.sendMessageStream(send(WAIT, {}), { signal: ac.signal })
    const first = await stream.next()
    expect(first.done).toBe(false)
    const task = first.done === true || first.value.payload?.$case !== 'task' ? undefined : first.value.payload.value
    expect(task).toBeDefined()
    await client.cancelTask({ tenant: '', id: task!.id, metadata: undefined })
    await client.cancelTask({ tenant: '', id: blocked.id, metadata: undefined })
    for (const a of [...aborts, ac]) a.abort()
    await until(() => a2a.streams.open === 0, 'every stream to end')
  })

  it('the server takes a bounded number of connections; past it a new one is closed at once', async () => {
    // no client of the SDK here: its connections would count
    const a2a = await A2aServer.start(m.gateway, { port: 0, logger: silentLogger(), maxConnections: 2 })
    servers.push(a2a)
    const { hostname, port } = new URL(a2a.url)
    const open = async (): Promise<{ socket: Socket, closed: () => boolean }> => {
      const socket = connect(Number(port), hostname)
      let closed = false
      socket.on('close', () => { closed = true })
      socket.on('error', () => { closed = true })
      await new Promise<void>((resolve, reject) => { socket.once('connect', resolve); socket.once('error', reject) })
      return { socket, closed: () => closed }
    }
    const held = [await open(), await open()]
    const third = await open()
    await until(() => third.closed(), 'the server to close the connection past its bound', 5_000)
    expect(a2a.stats.dropped).toBe(1)
    expect(held.every(h => !h.closed())).toBe(true)
    for (const h of held) h.socket.destroy()
    // once they are gone, a client gets in again
    await until(async () => (await fetch(a2a.agentCardUrl(m.worker.agentId)).then(r => r.ok, () => false)), 'a new connection to be served', 5_000)
  })
})
