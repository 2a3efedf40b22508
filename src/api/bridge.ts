/**
 * The sidecar bridge: runs delegated to this node, handed to an agent that
 * lives in another process and speaks only HTTP.
 *
 * For every capability the agent registers, the bridge installs a RunHandler.
 * The handler does no work itself: it publishes a `work` item (to every work
 * stream client and, when one is set, to the agent's webhook) and then keeps
 * the run open while the agent drives it through the API (progress, block,
 * complete, fail, handoff). When the run is blocked on a checkpoint (by the
 * agent itself, or by the delegator or an authorized agent: an L2
 * `checkpoint.raise`) the agent gets a `blocked` item; when the checkpoint is
 * resolved it gets a `resume` item with the resolution; when the run ends by
 * any means it gets an `ended` item.
 *
 * A `complete` the agent sends while someone else holds the run blocked is
 * kept: it is answered with the run still blocked, and the run completes with
 * that output right after the resume (or the output is dropped if the run is
 * canceled meanwhile). An output the run could not take is refused at once,
 * as on a running run; a held one that the store refuses at the resume is
 * written again, and one refused otherwise fails the run (settleHeld). The
 * agent's work is never handed out twice while the node runs: a resume sends
 * a `resume` item, never a second `work` item.
 *
 * Items of open runs are kept (each run's `work` item, then its open
 * `blocked` or its latest `resume`), so an agent that connects late or
 * reconnects receives what it missed; Last-Event-ID skips what it already saw. Item ids grow by one and
 * start from the clock, in WORK_ITEM_IDS_PER_MS per millisecond, at every start, so they keep growing across
 * restarts: a Last-Event-ID from before one is below every new id unless the node handed out more than that
 * many items per millisecond it ran (or its clock went back). The ids are not saved: the bridge holds no
 * datastore (MeshNode keeps its own private).
 */
import { setTimeout as sleep } from 'node:timers/promises'
import { API_WEBHOOK_MAX_ATTEMPTS, API_WEBHOOK_QUEUE_MAX_ITEMS, API_WEBHOOK_RETRY_MS, API_WEBHOOK_TIMEOUT_MS } from '../constants.ts'
import { WORK_ITEM_IDS_PER_MS } from './constants.ts'
import { capabilityString, type CapabilityRef } from '../card/card.ts'
import { InvalidTransitionError, RunNotFoundError, toAapError, UnauthorizedError } from '../errors.ts'
import type { Logger } from '../logger.ts'
import type { MeshNode } from '../node.ts'
import type { Conversation, RunContext, RunHandler } from '../runs/runtime.ts'
import { checkOutput } from '../runs/handlers.ts'
import { writeEnding } from '../runs/end-retry.ts'
import { refusedByStore } from '../storage/write-guard.ts'
import { isTerminal, type AgentEvent, type HandoffLink, type Run } from '../runlog/types.ts'
import type { SseStream } from './sse.ts'

export type WorkItem =
  | {
    type: 'work'
    id: number
    run: Run
    input: Record<string, unknown>
    handoff: { from: HandoffLink, context: Record<string, unknown> } | null
    restored: { checkpoint_id: string | null, resolution: Record<string, unknown> } | null
    /** The conversation the run is a turn of: earlier turns and the saved context (protocols/turns.md). */
    conversation: Conversation
  }
  | { type: 'blocked', id: number, run_id: string, checkpoint_id: string, reason: string, by: string, run: Run }
  | { type: 'resume', id: number, run_id: string, checkpoint_id: string | null, resolution: Record<string, unknown>, by: string, run: Run }
  | { type: 'ended', id: number, run_id: string, run: Run }

export type WorkSink = (item: WorkItem) => void

interface OpenRun {
  ctx: RunContext
  /** The run as of its last event. */
  run: Run
  work: Extract<WorkItem, { type: 'work' }>
  /** The open checkpoint, while the run is blocked. */
  blocked?: Extract<WorkItem, { type: 'blocked' }>
  /** The latest resolution, while the run has not blocked again. */
  resume?: Extract<WorkItem, { type: 'resume' }>
  /** The output of a `complete` sent while someone else held the run blocked: it completes the run at the resume. */
  held?: Record<string, unknown>
}

function isRecord (v: unknown): v is Record<string, unknown> {
  return typeof v === 'object' && v !== null && !Array.isArray(v)
}

export class WorkBridge {
  private readonly node: MeshNode
  private readonly log: Logger
  private readonly open = new Map<string, OpenRun>()
  private readonly sinks = new Set<WorkSink>()
  private readonly serving = new Map<string, CapabilityRef>()
  private readonly offEvents: () => void
  private readonly stopping = new AbortController()
  private hook: string | null = null
  private hookQueue: WorkItem[] = []
  /** True while pumpHook runs (cleared in the same turn its queue runs dry, so an item enqueued after always starts a pump). */
  private hookPumping = false
  /** Work items the webhook took, and items it was given up on (attempts spent, or the webhook removed or replaced). */
  private hookDelivered = 0
  private hookGaveUp = 0
  // ids from an earlier start end below this one's first unless it handed out WORK_ITEM_IDS_PER_MS per ms it ran
  private seq = Date.now() * WORK_ITEM_IDS_PER_MS

  constructor (node: MeshNode, log: Logger) {
    this.node = node
    this.log = log
    this.offEvents = node.runs.onEvent((event, run) => { this.onEvent(event, run) })
  }

  // ---- registration -----------------------------------------------------------------

  /** Serve exactly these capabilities through the API (others this bridge served stop getting new work). */
  serve (capabilities: readonly CapabilityRef[]): void {
    const wanted = new Map(capabilities.map(c => [capabilityString(c), c]))
    for (const [key, cap] of this.serving) {
      if (wanted.has(key)) continue
      this.node.runs.unhandle(cap)
      this.serving.delete(key)
    }
    for (const [key, cap] of wanted) {
      if (this.serving.has(key)) continue
      // a capability served in the node's own process (the conformance agent, an embedding program) keeps its handler
      if (this.node.runs.handles(cap)) {
        this.log.info({ capability: key }, 'a capability of the card is served in process: the API does not take its work')
        continue
      }
      this.node.runs.handle(cap, this.handler)
      this.serving.set(key, { capability_id: cap.capability_id, version: cap.version })
    }
  }

  get served (): CapabilityRef[] {
    return [...this.serving.values()]
  }

  get webhook (): string | null {
    return this.hook
  }

  /** Set (or with null, remove) the webhook; a new one is sent what open runs hold. */
  setWebhook (url: string | null): void {
    if (url === this.hook) return
    this.hook = url
    this.hookQueue = []
    if (url !== null) for (const item of this.backlog(0)) this.enqueueHook(item)
  }

  /** Open runs and connected stream clients (for stats and the leak tests). */
  get stats (): { openRuns: number, sinks: number, webhookQueue: number, webhookDelivered: number, webhookGaveUp: number } {
    return { openRuns: this.open.size, sinks: this.sinks.size, webhookQueue: this.hookQueue.length, webhookDelivered: this.hookDelivered, webhookGaveUp: this.hookGaveUp }
  }

  /** Add a work stream client: it gets the items of open runs newer than `after`, then live ones. Returns its detach. */
  attach (sink: WorkSink, after = 0): () => void {
    const { backlog, detach } = this.subscribe(sink, after)
    for (const item of backlog) sink(item)
    return detach
  }

  /**
   * Serve a work stream client on `sse`: the items of open runs newer than
   * `after` at the client's pace, as an event stream's history goes out (a
   * backlog of up to MAX_CONCURRENT_INBOUND_RUNS work items, each with a
   * conversation of up to megabytes, was written at once), then `ready`, then
   * live items. Live items that come meanwhile wait behind the backlog, so
   * the ids the client sees only grow. `onWait` is told each time the
   * backlog waits for the client. Returns the client's detach.
   */
  stream (sse: SseStream, after: number, onWait: () => void): () => void {
    sse.hold()
    const send = (item: WorkItem): void => { sse.send(item.type, item, item.id) }
    const { backlog, detach } = this.subscribe(send, after)
    sse.paced(backlog, send, onWait).then((sent) => {
      if (!sent) return // the client left first
      sse.burst(() => { sse.send('ready', { stream: 'work' }) })
      sse.release()
    }, (err: unknown) => {
      this.log.error({ err }, 'a work stream\'s backlog could not be sent; the stream ends')
      sse.close()
    })
    return detach
  }

  /** Add a client that is sent live items only; the backlog newer than `after` is returned for the caller to send first. */
  private subscribe (sink: WorkSink, after: number): { backlog: WorkItem[], detach: () => void } {
    const backlog = this.backlog(after)
    this.sinks.add(sink)
    return { backlog, detach: () => { this.sinks.delete(sink) } }
  }

  stop (): void {
    this.stopping.abort()
    this.offEvents()
    for (const cap of this.serving.values()) this.node.runs.unhandle(cap)
    this.serving.clear()
    this.sinks.clear()
    this.open.clear()
    this.hookQueue = []
  }

  // ---- the agent drives its runs ---------------------------------------------------------

  /** The agent saves its context of the conversation the run is a turn of (protocols/turns.md). */
  async saveContext (runId: string, context: Record<string, unknown>): Promise<{ context_id: string, saved: Record<string, unknown> }> {
    const entry = await this.driven(runId, 'save the context of')
    await entry.ctx.saveContext(context)
    return { context_id: entry.ctx.conversation.context_id, saved: context }
  }

  async progress (runId: string, payload: Record<string, unknown>): Promise<Run> {
    const entry = await this.driven(runId, 'report progress on')
    if (entry.run.state !== 'running') throw this.notRunning(entry.run, 'progress')
    await entry.ctx.progress(payload)
    return entry.run
  }

  /**
   * Complete a run with the agent's output. While another agent (the
   * delegator, or one it authorized) holds the run blocked, the output is
   * kept and the answer is the run, still blocked; the run completes with it
   * once resumed. A block that lands while the completion is on its way has
   * the same effect. The agent's own open checkpoint is still refused: it
   * waits for its `resume` item.
   */
  async complete (runId: string, output: Record<string, unknown>): Promise<Run> {
    const entry = await this.driven(runId, 'complete')
    if (entry.held !== undefined) {
      throw new InvalidTransitionError(`run ${runId} already has its output; it completes when checkpoint ${entry.run.checkpoint_id ?? ''} is resolved`, {
        run_id: runId, state: entry.run.state, command: 'complete'
      })
    }
    const heldByOther = entry.run.state === 'blocked' && entry.blocked !== undefined && entry.blocked.by !== entry.run.agent_id
    if (entry.run.state !== 'running' && !heldByOther) throw this.notRunning(entry.run, 'complete')
    // refused now, as on a running run: an output held for the resume and refused there would be answered 200 and lost
    checkOutput(output)
    entry.held = output
    const completing = entry.ctx.complete(output)
    // a block raised while this completion waits turns it into a held one: answer now
    let off = (): void => {}
    const blockedMeanwhile = new Promise<'blocked'>(resolve => { off = entry.ctx.onBlocked(() => { resolve('blocked') }) })
    let first: 'done' | 'blocked' = 'blocked'
    try {
      if (!heldByOther) first = await Promise.race([completing.then(() => 'done' as const), blockedMeanwhile])
    } catch (err) {
      entry.held = undefined
      throw err
    } finally {
      off()
    }
    if (first === 'done') return entry.run
    this.log.info({ run_id: runId, checkpoint_id: entry.run.checkpoint_id }, 'the agent completed a run blocked by another agent; the output waits for the resume')
    this.settleHeld(runId, entry, output, completing).catch((err: unknown) => {
      this.log.error({ err, run_id: runId }, 'a run whose held output could not complete it could not be failed either; the agent may end it')
    })
    return entry.run
  }

  /**
   * Follow a held output to its end. The agent was answered already, so it
   * would never learn that it has to complete again: a completion the store
   * refused is written again until it lands (end-retry.ts), and one refused
   * otherwise fails the run, as an in-process handler's output that cannot
   * complete its run does. Either way the run never stays running for good
   * with its slot held. A run canceled or handed off meanwhile ended
   * without the output, and the agent gets its `ended` item.
   */
  private async settleHeld (runId: string, entry: OpenRun, output: Record<string, unknown>, completing: Promise<void>): Promise<void> {
    const open = (): boolean => this.open.get(runId) === entry && !isTerminal(entry.run.state)
    const retry = { runId, active: open, signal: entry.ctx.signal, log: this.log }
    let failure: unknown
    try {
      await completing
      return
    } catch (err) {
      failure = err
    }
    if (open() && refusedByStore(failure)) {
      try {
        await writeEnding(async () => { await entry.ctx.complete(output) }, retry)
        return
      } catch (err) {
        failure = err
      }
    }
    if (!open()) {
      this.log.info({ err: failure, run_id: runId, state: entry.run.state }, 'a held output could not complete its run: the run ended without it')
      return
    }
    // the run is the agent's again: if failing it fails too, it may complete or fail the run itself
    entry.held = undefined
    const why = toAapError(failure)
    this.log.warn({ err: failure, run_id: runId, code: why.code }, 'a held output could not complete its run: the run fails')
    await writeEnding(async () => { await entry.ctx.fail(`the agent's held output could not complete the run: ${why.message}`) }, retry)
  }

  async fail (runId: string, message: string): Promise<Run> {
    const entry = await this.driven(runId, 'fail')
    await entry.ctx.fail(message)
    return entry.run
  }

  /** True when the agent drives this run (it was handed out as work and has not ended). */
  drives (runId: string): boolean {
    return this.open.has(runId)
  }

  private notRunning (run: Run, what: string): InvalidTransitionError {
    return new InvalidTransitionError(`cannot ${what} run ${run.run_id} in state ${run.state}${run.state === 'blocked' ? `: it waits on checkpoint ${run.checkpoint_id ?? ''}; the resolution comes as a resume item` : ''}`, {
      run_id: run.run_id, state: run.state, command: what
    })
  }

  /** The open run the agent drives, or the error that says why it cannot. */
  private async driven (runId: string, what: string): Promise<OpenRun> {
    const entry = this.open.get(runId)
    if (entry !== undefined) return entry
    const runs = this.node.runs
    if (runs.isLocal(runId)) {
      const run = await runs.getRun(runId)
      if (isTerminal(run.state)) throw new InvalidTransitionError(`cannot ${what} run ${runId}: it is ${run.state} and read-only`, { run_id: runId, state: run.state })
      throw new UnauthorizedError(`run ${runId} is not driven through this API (a handler inside the node executes it)`, { run_id: runId, reason: 'not_bridged' })
    }
    if (await runs.store.getOutgoing(runId) !== undefined) {
      throw new UnauthorizedError(`only the executor may ${what} a run; this node delegated run ${runId}`, { run_id: runId, reason: 'not_executor' })
    }
    throw new RunNotFoundError(`no run ${runId.slice(0, 160)} is executed here`, { run_id: runId.slice(0, 128) })
  }

  // ---- runs in, items out ------------------------------------------------------------------

  private readonly handler: RunHandler = async (ctx) => {
    const run = ctx.run
    const entry: OpenRun = {
      ctx,
      run,
      work: { type: 'work', id: ++this.seq, run, input: ctx.input, handoff: ctx.handedOff, restored: ctx.restored, conversation: ctx.conversation }
    }
    this.open.set(run.run_id, entry)
    this.log.info({ run_id: run.run_id, capability: capabilityString(run.capability), item: entry.work.id }, 'work handed to the agent')
    this.publish(entry.work)
    // The run stays open until it ends (the agent completes, fails or hands it off, or the
    // delegator cancels) or the node stops: both abort the signal. Rejecting then tells the
    // runtime not to complete the run on the handler's behalf.
    await new Promise<never>((_resolve, reject) => {
      const signal = ctx.signal
      if (signal.aborted) reject(signal.reason)
      else signal.addEventListener('abort', () => { reject(signal.reason) }, { once: true })
    })
  }

  private onEvent (event: AgentEvent, run: Run): void {
    const entry = this.open.get(event.run_id)
    if (entry === undefined) return
    entry.run = run
    entry.work = { ...entry.work, run }
    if (event.type === 'run.blocked') {
      entry.resume = undefined
      const p = event.payload
      entry.blocked = {
        type: 'blocked',
        id: ++this.seq,
        run_id: run.run_id,
        checkpoint_id: typeof p.checkpoint_id === 'string' ? p.checkpoint_id : '',
        reason: typeof p.reason === 'string' ? p.reason : '',
        by: typeof p.by === 'string' ? p.by : '',
        run
      }
      this.publish(entry.blocked)
    } else if (event.type === 'run.progress' && event.payload.transition === 'resume') {
      entry.blocked = undefined
      const checkpoint = event.payload.checkpoint_id
      const resolution = event.payload.resolution
      entry.resume = {
        type: 'resume',
        id: ++this.seq,
        run_id: run.run_id,
        checkpoint_id: typeof checkpoint === 'string' ? checkpoint : null,
        resolution: isRecord(resolution) ? resolution : {},
        by: typeof event.payload.by === 'string' ? event.payload.by : '',
        run
      }
      this.publish(entry.resume)
    } else if (isTerminal(run.state)) {
      this.open.delete(run.run_id)
      this.publish({ type: 'ended', id: ++this.seq, run_id: run.run_id, run })
    }
  }

  /** Items of open runs newer than `after`, oldest first, each with the run as it is now. */
  private backlog (after: number): WorkItem[] {
    const items: WorkItem[] = []
    for (const entry of this.open.values()) {
      if (entry.work.id > after) items.push({ ...entry.work, run: entry.run })
      if (entry.blocked !== undefined && entry.blocked.id > after) items.push({ ...entry.blocked, run: entry.run })
      if (entry.resume !== undefined && entry.resume.id > after) items.push({ ...entry.resume, run: entry.run })
    }
    return items.sort((a, b) => a.id - b.id)
  }

  private publish (item: WorkItem): void {
    for (const sink of [...this.sinks]) {
      try { sink(item) } catch (err) { this.log.warn({ err }, 'a work stream client failed') }
    }
    if (this.hook !== null) this.enqueueHook(item)
  }

  // ---- webhook ---------------------------------------------------------------------------

  private enqueueHook (item: WorkItem): void {
    if (this.hookQueue.length >= API_WEBHOOK_QUEUE_MAX_ITEMS) {
      const dropped = this.hookQueue.shift()
      this.log.warn({ item: dropped?.id }, 'webhook queue full: the oldest item is left to the work stream')
    }
    this.hookQueue.push(item)
    if (this.hookPumping) return
    this.hookPumping = true
    this.pumpHook().catch((err: unknown) => { this.log.error({ err }, 'the webhook pump failed; queued items stay on the work stream') })
  }

  /** One item at a time, in order: a resume never overtakes the work it resumes. */
  private async pumpHook (): Promise<void> {
    try {
      for (let item = this.hookQueue.shift(); item !== undefined; item = this.hookQueue.shift()) {
        const url = this.hook
        if (url === null || this.stopping.signal.aborted) return
        await this.deliver(url, item)
      }
    } finally {
      this.hookPumping = false
    }
  }

  private async deliver (url: string, item: WorkItem): Promise<void> {
    let delay = API_WEBHOOK_RETRY_MS
    for (let attempt = 1; attempt <= API_WEBHOOK_MAX_ATTEMPTS; attempt++) {
      let why: string
      try {
        const res = await fetch(url, {
          method: 'POST',
          headers: { 'content-type': 'application/json', 'x-aap-work-item': String(item.id) },
          body: JSON.stringify(item),
          redirect: 'error',
          signal: AbortSignal.any([AbortSignal.timeout(API_WEBHOOK_TIMEOUT_MS), this.stopping.signal])
        })
        // the answer's body is not read; a body that fails to cancel changes nothing the status said
        await res.body?.cancel().catch((err: unknown) => { this.log.debug({ err, item: item.id }, 'a webhook answer could not be discarded') })
        if (res.ok) {
          this.hookDelivered++
          return
        }
        why = `HTTP ${res.status}`
      } catch (err) {
        if (this.stopping.signal.aborted) return
        why = (err as Error).message
      }
      if (attempt === API_WEBHOOK_MAX_ATTEMPTS || this.hook !== url) {
        this.gaveUp(url, item, attempt, why)
        return
      }
      this.log.debug({ item: item.id, attempt, why }, 'webhook delivery failed; retrying')
      // the wait's listener on the bridge's signal goes with the wait (one per retry had stayed for the node's life)
      const waited = await sleep(delay, true, { signal: this.stopping.signal }).catch(() => false)
      if (!waited) return // the node is stopping: the item stays on the work stream
      // the webhook removed or replaced during the wait is not posted to again (a new one was sent the backlog)
      if (this.hook !== url) {
        this.gaveUp(url, item, attempt, why)
        return
      }
      delay *= 2
    }
  }

  private gaveUp (url: string, item: WorkItem, attempts: number, why: string): void {
    this.hookGaveUp++
    const replaced = this.hook !== url
    this.log.warn({ item: item.id, type: item.type, attempts, why, ...(replaced ? { webhook: this.hook === null ? 'removed' : 'replaced' } : {}) }, 'webhook did not take the work item; it stays on the work stream')
  }
}
