/**
 * Campaign part "slow-clients": the local agent API of an executor node (in
 * this process, with a delegator node beside it, on TCP 127.0.0.1) faced with
 * clients that stop reading or never answer, while runs keep coming:
 *  - work-stream readers and event-stream readers that read their first bytes
 *    and then stop reading (their sockets stay open);
 *  - a webhook that takes each POST and never answers;
 *  - an agent that never takes the work it is handed (nobody completes the
 *    bridged runs), round after round, until the delegator cancels them;
 *  - one work reader and one idle event reader that do read.
 * Must: every stalled reader is cut off, no stream or event subscription
 * outlives its client, the webhook queue stays within
 * API_WEBHOOK_QUEUE_MAX_ITEMS, the webhook is called and at most one call hangs at a time,
 * the reading work client gets every run's work item without being cut off,
 * every idle stream gets keep-alives, the heap after GC grows less than
 * 50 MB, and every run stays readable, listed, replayable and cancelable.
 */
import { mkdtemp, rm } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { request, createServer, type IncomingMessage, type ClientRequest, type Server } from 'node:http'
import type { AddressInfo } from 'node:net'
import { setFlagsFromString } from 'node:v8'
import { runInNewContext } from 'node:vm'
import { ApiClient } from '../../src/api/client.ts'
import { newToken } from '../../src/api/files.ts'
import { startApiServer, type ApiServer } from '../../src/api/server.ts'
import { API_WEBHOOK_QUEUE_MAX_ITEMS, RUN_INPUT_MAX_BYTES } from '../../src/constants.ts'
import { silentLogger } from '../../src/logger.ts'
import { createMeshNode, type MeshNode } from '../../src/node.ts'
import { mb } from './common.ts'
import { READER_READY_TIMEOUT_MS } from './constants.ts'
import type { Must, PartResult } from './report.ts'

export interface SlowClientOptions {
  /** Rounds of delegations the agent never takes (each round is then canceled). */
  rounds: number
  runsPerRound: number
  slowWorkReaders: number
  slowEventReaders: number
  /** Progress events (each near the payload limit) the chatty run sends to the event readers. */
  chattyEvents: number
  /** The API's SSE bound and keep-alive for this part. */
  maxBufferedBytes: number
  heartbeatMs: number
  seed: number
}

const TITLE = 'SSE consumers that stop reading, hanging webhooks, agents that never take work'
const SIDE = { capability_id: 'cap:campaign-sidecar', version: '1.0.0' }
const CHATTY = { capability_id: 'cap:campaign-chatty', version: '1.0.0' }
const HEAP_GROWTH_MAX_MB = 50
/** Every wait of this part is bounded by this. */
const WAIT_MS = 60_000

export interface Reader { req: ClientRequest, res?: IncomingMessage, bytes: number, text: string, ended: boolean, keepAlives: number, keep: boolean }

/**
 * An SSE reader on a raw socket; `keep` keeps its text (to count items), otherwise only bytes.
 * Resolves once its stream is ready ("event: ready", or any first bytes without `keep`);
 * rejects when the stream fails, ends first, or is not ready within `readyTimeoutMs`.
 */
export async function reader (url: string, token: string, keep: boolean, readyTimeoutMs = READER_READY_TIMEOUT_MS): Promise<Reader> {
  return new Promise((resolve, reject) => {
    const r: Reader = { req: undefined as unknown as ClientRequest, bytes: 0, text: '', ended: false, keepAlives: 0, keep }
    let settled = false
    const timeout = AbortSignal.timeout(readyTimeoutMs)
    const fail = (err: Error): void => {
      if (settled) return
      settled = true
      timeout.removeEventListener('abort', onTimeout)
      r.ended = true
      r.req.destroy()
      reject(err)
    }
    const onTimeout = (): void => { fail(new Error(`stream ${url}: not ready within ${readyTimeoutMs} ms (READER_READY_TIMEOUT_MS; ${r.bytes} bytes read)`)) }
    timeout.addEventListener('abort', onTimeout, { once: true })
    r.req = request(url, { headers: { authorization: `Bearer ${token}`, accept: 'text/event-stream' } }, (res) => {
      r.res = res
      if (res.statusCode !== 200) { fail(new Error(`stream ${url}: HTTP ${res.statusCode ?? 0}`)); res.resume(); return }
      res.setEncoding('utf8')
      res.on('data', (chunk: string) => {
        r.bytes += chunk.length
        r.keepAlives += chunk.split(': keep-alive\n').length - 1
        if (r.keep) r.text += chunk
        if (!settled && (r.text.includes('event: ready') || !r.keep)) {
          settled = true
          timeout.removeEventListener('abort', onTimeout)
          resolve(r)
        }
      })
      const end = (): void => {
        if (!settled) fail(new Error(`stream ${url}: ended before it was ready (${r.bytes} bytes read)`))
        r.ended = true
      }
      res.on('end', end)
      res.on('close', end)
      res.on('error', end)
    })
    r.req.on('error', (err) => { r.ended = true; fail(err) })
    r.req.end()
  })
}

/**
 * Whether the stream readers were cut as they must be, from the clients'
 * view once the stalled ones read again: every stalled reader saw its
 * stream end, and neither reading client (the work reader, the idle event
 * reader) was cut.
 */
export function cutMusts (stalled: Array<Pick<Reader, 'ended'>>, live: Pick<Reader, 'ended'>, idle: Pick<Reader, 'ended'>): { stalledNotCut: number, musts: Must[] } {
  // counted per client: the server's count less two could hide a stalled reader left open behind a reading one cut (or go negative)
  const stalledNotCut = stalled.filter(r => !r.ended).length
  return {
    stalledNotCut,
    musts: [
      { figure: 'stalled readers not cut off (the clients\' view, once they read again)', value: stalledNotCut, max: 0 },
      { figure: 'reading clients cut off (the work reader, the idle event reader)', value: [live, idle].filter(r => r.ended).length, max: 0 }
    ]
  }
}

/** Wait for `cond`, at most `ms`: whether it came true (a figure, not a failure, when it did not). */
async function waitFor (cond: () => boolean | Promise<boolean>, ms = WAIT_MS): Promise<boolean> {
  const deadline = Date.now() + ms
  while (!(await cond())) {
    if (Date.now() > deadline) return false
    await new Promise(resolve => setTimeout(resolve, 20))
  }
  return true
}

function gcHeap (): number {
  setFlagsFromString('--expose-gc')
  const gc = runInNewContext('gc') as () => void
  gc()
  gc()
  return process.memoryUsage().heapUsed
}

export async function runSlowClients (o: SlowClientOptions): Promise<PartResult> {
  const result: PartResult = { name: 'slow-clients', title: TITLE, built: true, ran: true }
  let crashes = 0
  const onCrash = (err: unknown): void => { crashes++; console.error('slow-clients: uncaught', err) }
  process.on('uncaughtException', onCrash)
  process.on('unhandledRejection', onCrash)
  let a: MeshNode | undefined
  let b: MeshNode | undefined
  let api: ApiServer | undefined
  let hook: Server | undefined
  let tmp: string | undefined
  const readers: Reader[] = []
  try {
    // the webhook: takes every POST and never answers
    let hookRequests = 0
    let hookOpen = 0
    let hookMaxOpen = 0
    hook = createServer((req) => {
      hookRequests++
      hookOpen++
      hookMaxOpen = Math.max(hookMaxOpen, hookOpen)
      req.on('close', () => { hookOpen-- })
      req.resume()
    })
    await new Promise<void>(resolve => hook?.listen(0, '127.0.0.1', resolve))
    const hookUrl = `http://127.0.0.1:${(hook.address() as AddressInfo).port}/never-answers`

    // both nodes keep their runs in LevelDB (as a real node does), so the heap figure is what the node holds, not the runs' data
    tmp = await mkdtemp(join(tmpdir(), 'aap-campaign-slow-'))
    // one delegator leaves every round's runs untaken at once, beside its chatty run: its share of the executor's run slots must hold them all
    // (MAX_INBOUND_RUNS_PER_DELEGATOR, 64, would refuse the 65th, which is what runs-slots.test.ts shows, not this part)
    a = await createMeshNode({ listen: ['/ip4/127.0.0.1/tcp/0'], localMesh: true, logger: silentLogger(), dataDir: join(tmp, 'executor'), maxInboundRunsPerDelegator: o.runsPerRound + 1 })
    await a.start()
    b = await createMeshNode({ listen: ['/ip4/127.0.0.1/tcp/0'], localMesh: true, logger: silentLogger(), dataDir: join(tmp, 'delegator') })
    await b.start()
    if (await b.join(a.addresses) === 0) throw new Error('the delegator could not reach the executor')
    const x = a
    const d = b
    const token = newToken()
    api = await startApiServer(x, { token, port: 0, logger: silentLogger(), sse: { maxBufferedBytes: o.maxBufferedBytes, heartbeatMs: o.heartbeatMs } })
    const s = api
    const client = new ApiClient(s.url, token)
    // the chatty capability runs inside the node: its progress events feed the event streams
    let releaseChatty = (): void => {}
    x.runs.handle(CHATTY, async (ctx) => {
      const blob = 'e'.repeat(RUN_INPUT_MAX_BYTES - 1024)
      for (let i = 0; i < o.chattyEvents; i++) await ctx.progress({ i, blob })
      await new Promise<void>(resolve => { releaseChatty = resolve; ctx.signal.addEventListener('abort', () => { resolve() }, { once: true }) })
      return { events: o.chattyEvents }
    })
    await client.call('PUT', '/v1/card', { card: { name: 'campaign-sidecar', capabilities: [SIDE] }, webhook: hookUrl })
    // the card gets the chatty capability after the agent registered: the bridge serves the sidecar one only
    await x.publishCard({ name: 'campaign-sidecar', capabilities: [SIDE, CHATTY] })
    const heapBefore = gcHeap()

    // readers: the ones that stall read their first bytes and stop
    const base = s.url
    const chattyTask = 'task-campaign-chatty'
    const live = await reader(`${base}/v1/work/stream`, token, true)
    const idle = await reader(`${base}/v1/events/task-campaign-idle/stream?history=false`, token, false)
    readers.push(live, idle)
    const slowWork: Reader[] = []
    for (let i = 0; i < o.slowWorkReaders; i++) slowWork.push(await reader(`${base}/v1/work/stream`, token, false))
    const slowEvents: Reader[] = []
    for (let i = 0; i < o.slowEventReaders; i++) slowEvents.push(await reader(`${base}/v1/events/${chattyTask}/stream`, token, false))
    readers.push(...slowWork, ...slowEvents)
    for (const r of [...slowWork, ...slowEvents]) r.res?.pause()
    const keepAlivesAt = (r: Reader): number => r.keepAlives

    // the chatty run: its events flood the stalled event readers
    const started = performance.now()
    const chatty = await d.delegate({ to_agent: x.agentId, task_id: chattyTask, capability: CHATTY, input: {} }, { signal: AbortSignal.timeout(WAIT_MS), follow: false })

    // rounds of work nobody takes, each canceled by the delegator at its end
    const input = { blob: 'w'.repeat(RUN_INPUT_MAX_BYTES - 2048) }
    let runs = 0
    let unreadable = 0
    let unlisted = 0
    let unreplayable = 0
    let cancelFailed = 0
    let workMissing = 0
    let hookQueueMax = 0
    const sample = setInterval(() => { hookQueueMax = Math.max(hookQueueMax, s.bridge.stats.webhookQueue) }, 5)
    try {
      for (let round = 0; round < o.rounds; round++) {
        const task = `task-campaign-untaken-${o.seed}-${round}`
        const ids: string[] = []
        for (let i = 0; i < o.runsPerRound; i++) {
          ids.push((await d.delegate({ to_agent: x.agentId, task_id: task, capability: SIDE, input: { ...input, i } }, { signal: AbortSignal.timeout(WAIT_MS), follow: false })).run_id)
          runs++
          hookQueueMax = Math.max(hookQueueMax, s.bridge.stats.webhookQueue)
        }
        // the reading client got every work item; the runs wait, readable, listed, replayable
        if (!await waitFor(() => ids.every(id => live.text.includes(`"run_id":"${id}"`)))) {
          workMissing += ids.filter(id => !live.text.includes(`"run_id":"${id}"`)).length
        }
        for (const id of ids) {
          try {
            if ((await d.getRun(id, { signal: AbortSignal.timeout(WAIT_MS) })).state !== 'running') unreadable++
          } catch { unreadable++ }
        }
        const listed = new Set((await x.runs.list({ correlation_id: task, side: 'executing' }, { limit: o.runsPerRound })).executing.map(r => r.run_id))
        unlisted += ids.filter(id => !listed.has(id)).length
        const replay = await x.events.replay(task)
        const replayed = new Set(replay.events.filter(e => e.type === 'run.started').map(e => e.run_id))
        unreplayable += ids.filter(id => !replayed.has(id)).length
        for (const id of ids) {
          try {
            const run = await d.cancel(id, 'the agent never took it', { signal: AbortSignal.timeout(WAIT_MS) })
            if (run.state !== 'failed') cancelFailed++
          } catch { cancelFailed++ }
        }
        live.text = live.text.slice(-1024) // what was checked need not be kept
      }
    } finally {
      clearInterval(sample)
    }
    // the server's view: a stalled reader is cut off once its unread output passes the bound (on a write: an event or a keep-alive)
    await waitFor(() => s.stats().streams === 2, 20_000)
    const floodSeconds = (performance.now() - started) / 1000
    const serverStreams = s.stats().streams
    // the clients' view: once they read again they see their stream end (a paused reader sees nothing)
    for (const r of [...slowWork, ...slowEvents]) r.res?.resume()
    await waitFor(() => [...slowWork, ...slowEvents].every(r => r.ended), 20_000)
    const cut = cutMusts([...slowWork, ...slowEvents], live, idle)
    const stalledNotCut = cut.stalledNotCut
    const clientsSawCut = [...slowWork, ...slowEvents].filter(r => r.ended).length
    const stats = s.stats()
    const leakedSubscriptions = stalledNotCut > 0 ? 0 : stats.eventSubscriptions - 1
    releaseChatty()
    const chattyEnd = await x.getRun(chatty.run_id)
    const idleNoKeepAlive = keepAlivesAt(idle) > 0 ? 0 : 1
    for (const r of readers) r.req.destroy()
    await waitFor(() => s.stats().streams === 0, 10_000)
    const streamsAfter = s.stats().streams
    const heapAfter = gcHeap()
    const growth = mb(heapAfter - heapBefore)
    result.musts = [
      ...cut.musts,
      { figure: 'streams or event subscriptions that outlived their client', value: Math.max(0, leakedSubscriptions) + streamsAfter, max: 0 },
      { figure: 'webhook queue high-water mark', value: hookQueueMax, max: API_WEBHOOK_QUEUE_MAX_ITEMS },
      { figure: 'webhook calls hanging at once', value: hookMaxOpen, max: 1 },
      // the hanging webhook is half of this part's attack: a run in which it was never called proves nothing of it
      { figure: 'webhook never called (1 when it received no POST)', value: hookRequests === 0 ? 1 : 0, max: 0 },
      { figure: 'work items the reading client missed', value: workMissing, max: 0 },
      { figure: 'idle streams without a keep-alive', value: idleNoKeepAlive, max: 0 },
      { figure: 'runs not readable, not listed or not replayable while untaken', value: unreadable + unlisted + unreplayable, max: 0 },
      { figure: 'untaken runs the delegator could not cancel', value: cancelFailed, max: 0 },
      { figure: 'heap growth after GC (MB)', value: Math.max(0, growth), max: HEAP_GROWTH_MAX_MB },
      { figure: 'crashes (uncaught errors, unhandled rejections)', value: crashes, max: 0 }
    ]
    result.figures = [
      ['stalled readers (work stream / event stream) and the streams open at the server after the flood', `${slowWork.length} / ${slowEvents.length}; ${serverStreams} open, the 2 reading clients' included (the clients saw ${clientsSawCut} of ${slowWork.length + slowEvents.length} cut once they read again)`],
      ['bytes a stalled work reader / event reader got before its cut (what the kernel socket buffers held; read after)', `${Math.max(...slowWork.map(r => r.bytes))} / ${Math.max(...slowEvents.map(r => r.bytes))}`],
      ['SSE bound and keep-alive of this part', `${o.maxBufferedBytes} bytes unread, every ${o.heartbeatMs} ms`],
      ['runs the agent never took (rounds × runs)', `${runs} (${o.rounds} × ${o.runsPerRound}), input ${JSON.stringify(input).length} bytes each`],
      ['chatty run: progress events near the payload limit', `${o.chattyEvents} (run ${chattyEnd.state} with ${chattyEnd.last_seq} events)`],
      ['webhook POSTs received (none answered) / high-water mark of its queue', `${hookRequests} / ${hookQueueMax} (bound ${API_WEBHOOK_QUEUE_MAX_ITEMS})`],
      ['keep-alives on the idle event stream', keepAlivesAt(idle)],
      ['seconds from the first flood until every stalled reader was cut', Math.round(floodSeconds)],
      ['heap after GC (this process: both nodes and the clients), before → after', `${mb(heapBefore)} MB → ${mb(heapAfter)} MB (growth ${growth} MB)`]
    ]
    result.notes = [
      `Seed ${o.seed}; two nodes in this process on TCP 127.0.0.1, the API on the executor. A stalled reader reads up to its "ready" event (or its first bytes) and then stops reading with its socket open. A webhook that never answers holds one POST for API_WEBHOOK_TIMEOUT_MS, then retries with backoff; the items behind it wait in its queue, oldest left to the work stream past the bound (the queue holds the items with their inputs: up to API_WEBHOOK_QUEUE_MAX_ITEMS of about 15 kB here, most of the heap growth). Each round's untaken runs are read from the delegator, listed and replayed at the executor, then canceled by the delegator.`
    ]
  } catch (err) {
    result.error = (err as Error).stack ?? (err as Error).message
  } finally {
    for (const r of readers) r.req.destroy()
    await api?.close().catch((err: unknown) => { console.error('slow-clients: api close', err) })
    await b?.stop().catch((err: unknown) => { console.error('slow-clients: delegator stop', err) })
    await a?.stop().catch((err: unknown) => { console.error('slow-clients: executor stop', err) })
    hook?.closeAllConnections()
    await new Promise<void>(resolve => { hook?.close(() => { resolve() }) ?? resolve() })
    if (tmp !== undefined) await rm(tmp, { recursive: true, force: true })
    process.off('uncaughtException', onCrash)
    process.off('unhandledRejection', onCrash)
  }
  return result
}
