/**
 * A2A agents as mesh agents (`aap-mesh start --a2a-agent <url>`): the node
 * fetches and checks an A2A v1.0 server's card, offers its skills as mesh
 * capabilities (`a2a:<skill id>` at the card's version) on its own mesh card,
 * and forwards each delegation as an A2A task with the official SDK client:
 *
 *   delegate   -> SendStreamingMessage (or SendMessage + GetTask polls when the card cannot stream),
 *                 contextId = the run's correlation_id
 *   WORKING    -> run.progress (the A2A task id first, then status messages)
 *   INPUT_REQUIRED -> run.blocked with a checkpoint; resume -> a message on the task
 *   artifacts  -> the run's output; FAILED/REJECTED -> run.failed; cancel -> CancelTask
 *
 * A server that cannot be reached fails the run with the reason.
 */
import { setTimeout as sleep } from 'node:timers/promises'
import { TaskState, type AgentCard as A2aCard, type Artifact, type Message, type SendMessageRequest, type StreamResponse, type TaskStatus } from '@a2a-js/sdk'
import { ClientFactory, DefaultAgentCardResolver, JsonRpcTransportFactory, RestTransportFactory, type Client } from '@a2a-js/sdk/client'
import type { CapabilityRef, CardDraft } from '../card/card.ts'
import { InvalidRequestError } from '../errors.ts'
import type { Logger } from '../logger.ts'
import type { MeshNode } from '../node.ts'
import type { RunContext } from '../runs/runtime.ts'
import { withDeadline, withinDeadline } from '../util/deadline.ts'
import {
  A2A_CALL_TIMEOUT_MS, A2A_CARD_FETCH_TIMEOUT_MS, A2A_OUTBOUND_AGENTS_MAX, A2A_OUTBOUND_ARTIFACT_MAX_BYTES, A2A_POLL_INTERVAL_MS,
  A2A_PROGRESS_MAX_PER_RUN, A2A_PROGRESS_MIN_INTERVAL_MS, A2A_RESPONSE_MAX_BYTES, A2A_TASK_MAX_MS, A2A_UNSEEN_TASK_PAGE_SIZE,
  A2A_UNSEEN_TASK_PAGES_MAX, A2A_UNSEEN_TASK_RETRY_MS
} from './constants.ts'
import { a2aToMeshDraft, delegateMessage, isFinalState, outcomeOf, resumeMessage, type JsonObject, type TaskOutcome } from './mapping.ts'
import { boundedFetch, ProgressGate, refusalIn, type ProgressBounds, type ProgressStats } from './outbound-bounds.ts'
import { checkedCard } from './outbound-card.ts'
import { outboundTotals } from './stats.ts'

export { A2aAnswerTooLargeError, A2aRedirectRefusedError } from './outbound-bounds.ts'

export interface BridgedAgent {
  url: string
  card: A2aCard
  /** The mesh card draft that stands for it. */
  draft: CardDraft
  /** Which A2A skill each capability forwards to. */
  skills: Map<string, string>
}

/** A node's own draft with the bridged agents' capabilities and tags added (the first bridged agent names a node without a draft). */
export function mergeDrafts (own: CardDraft | undefined, bridged: readonly CardDraft[]): CardDraft | undefined {
  if (bridged.length === 0) return own
  const base: CardDraft = own ?? { name: bridged[0]?.name ?? 'a2a agent', description: bridged[0]?.description ?? '', capabilities: [], tags: [] }
  const caps = new Map((base.capabilities ?? []).map(c => [`${c.capability_id}@${c.version}`, c]))
  const tags = new Set(base.tags ?? [])
  for (const d of bridged) {
    for (const c of d.capabilities ?? []) caps.set(`${c.capability_id}@${c.version}`, c)
    for (const t of d.tags ?? []) tags.add(t)
  }
  return { ...base, capabilities: [...caps.values()].slice(0, 32), tags: [...tags].slice(0, 32) }
}

function messageOf (err: unknown): string {
  return err instanceof Error ? err.message : String(err)
}

function sendRequest (message: Message, returnImmediately: boolean): SendMessageRequest {
  return {
    tenant: '',
    message,
    configuration: { acceptedOutputModes: [], taskPushNotificationConfig: undefined, returnImmediately },
    metadata: undefined
  }
}

/** What one forwarded A2A task has shown so far. */
class TaskView {
  taskId = ''
  /** Input requests so far (numbers the checkpoints of a server that names none). */
  inputs = 0
  status: TaskStatus | undefined
  /** The input request the run's last resume answered: a server that shows it again after the resume (the task as it stood when the answer came) asks for nothing new. */
  answered: TaskStatus | undefined
  private readonly artifacts = new Map<string, { artifact: Artifact, bytes: number }>()
  /** Bytes of the artifacts held (as JSON, their names, descriptions and metadata too): bounded by A2A_OUTBOUND_ARTIFACT_MAX_BYTES. */
  private bytes = 0

  /** Take an artifact (or parts appended to one); an error once they pass what a run's output could ever carry. */
  artifact (a: Artifact, append: boolean): void {
    let added = 0
    for (const p of a.parts) added += JSON.stringify(p).length
    const have = this.artifacts.get(a.artifactId)
    // what the artifact carries besides its parts (kept unless parts are appended to one held)
    if (!append || have === undefined) added += JSON.stringify({ ...a, parts: [] }).length
    if (append && have !== undefined) {
      have.artifact.parts.push(...a.parts)
      have.bytes += added
      this.bytes += added
    } else {
      this.bytes += added - (have?.bytes ?? 0)
      this.artifacts.set(a.artifactId, { artifact: { ...a, parts: [...a.parts] }, bytes: added })
    }
    if (this.bytes > A2A_OUTBOUND_ARTIFACT_MAX_BYTES) {
      throw new Error(`the task's artifacts passed ${A2A_OUTBOUND_ARTIFACT_MAX_BYTES} bytes, more than a run's output can carry`)
    }
  }

  list (): Artifact[] {
    return [...this.artifacts.values()].map(a => a.artifact)
  }

  /** What the task's status means for the run; the input request already answered is read as work under way. */
  outcome (): TaskOutcome {
    if (this.answered !== undefined && sameRequest(this.status, this.answered)) return { kind: 'working' }
    return outcomeOf(this.taskId, this.status, this.list(), this.inputs)
  }
}

/** The same input request: INPUT_REQUIRED or AUTH_REQUIRED with the same timestamp and message (at least one of them set). */
function sameRequest (a: TaskStatus | undefined, b: TaskStatus): boolean {
  if (a?.state !== TaskState.TASK_STATE_INPUT_REQUIRED && a?.state !== TaskState.TASK_STATE_AUTH_REQUIRED) return false
  const stamp = a.timestamp ?? ''
  const mid = a.message?.messageId ?? ''
  if (stamp === '' && mid === '') return false
  return a.state === b.state && stamp === (b.timestamp ?? '') && mid === (b.message?.messageId ?? '')
}

export class A2aOutbound {
  private readonly node: MeshNode
  private readonly log: Logger
  private readonly agents = new Map<string, BridgedAgent>()
  /** Agents being added (their cards fetched): they hold their places among A2A_OUTBOUND_AGENTS_MAX already. */
  private readonly adding = new Map<string, Promise<BridgedAgent>>()
  private readonly handlers = new Map<string, () => void>()
  private readonly progressBounds: ProgressBounds
  /** Bytes of an answer read whole (A2A_RESPONSE_MAX_BYTES); each agent's fetch bounds its redirects to its own URL (boundedFetch). */
  private readonly responseMaxBytes: number
  /** Status messages of the forwarded tasks reported cut, or not at all (ProgressGate). */
  readonly stats: ProgressStats = { progressCut: 0, progressRefused: 0 }
  /** The node's totals of the same (its metrics: stats.ts). */
  private readonly totals: ProgressStats

  /** Bound on a stream's first event (A2A_CALL_TIMEOUT_MS). */
  private readonly firstEventMs: number

  /** `opts` makes the bounds smaller than the constants (tests). */
  constructor (node: MeshNode, log: Logger, opts: { progress?: Partial<ProgressBounds>, responseMaxBytes?: number, firstEventMs?: number } = {}) {
    this.firstEventMs = opts.firstEventMs ?? A2A_CALL_TIMEOUT_MS
    this.node = node
    this.log = log
    this.totals = outboundTotals(node)
    this.progressBounds = { maxPerRun: A2A_PROGRESS_MAX_PER_RUN, minIntervalMs: A2A_PROGRESS_MIN_INTERVAL_MS, ...opts.progress }
    this.responseMaxBytes = opts.responseMaxBytes ?? A2A_RESPONSE_MAX_BYTES
  }

  list (): BridgedAgent[] {
    return [...this.agents.values()]
  }

  /** The agents as the API shows them. */
  describe (): Array<{ url: string, name: string, streaming: boolean, capabilities: CapabilityRef[] }> {
    return this.list().map(a => ({ url: a.url, name: a.card.name, streaming: a.card.capabilities?.streaming === true, capabilities: a.draft.capabilities ?? [] }))
  }

  /** The capabilities runs of which go to A2A agents (not to the local agent API). */
  served (): CapabilityRef[] {
    return this.list().flatMap(a => a.draft.capabilities ?? [])
  }

  /**
   * Register the run handlers again: the local agent API, when it starts,
   * serves every capability of the card through its work stream; the bridged
   * agents' capabilities are taken back from it here.
   */
  reclaim (): void {
    for (const register of this.handlers.values()) register()
  }

  /**
   * Fetch and check the card at `url` (an A2A server's base URL), and serve its skills on the mesh. The URL takes
   * its place among the A2A_OUTBOUND_AGENTS_MAX before the first await, so adds at once cannot pass the bound,
   * and a second add of the same URL waits for the first.
   */
  async add (url: string): Promise<BridgedAgent> {
    let base: URL
    try {
      base = new URL(url.endsWith('/') ? url : url + '/')
    } catch {
      throw new InvalidRequestError(`not a URL: ${url.slice(0, 200)}`)
    }
    if (base.protocol !== 'http:' && base.protocol !== 'https:') throw new InvalidRequestError(`an A2A agent is reached over http(s), not ${base.protocol}`)
    const known = this.agents.get(base.href) ?? this.adding.get(base.href)
    if (known !== undefined) return await known
    if (this.agents.size + this.adding.size >= A2A_OUTBOUND_AGENTS_MAX) throw new InvalidRequestError(`a node bridges at most ${A2A_OUTBOUND_AGENTS_MAX} A2A agents`)
    const adding = this.join(base)
    this.adding.set(base.href, adding)
    try {
      return await adding
    } finally {
      this.adding.delete(base.href)
    }
  }

  private async join (base: URL): Promise<BridgedAgent> {
    // the card and every call: redirects followed only within this agent's origin and below its path
    const fetchImpl = boundedFetch(this.responseMaxBytes, base)
    const resolver = new DefaultAgentCardResolver({
      fetchImpl: async (input, init) => fetchImpl(input, { ...init, signal: AbortSignal.timeout(A2A_CARD_FETCH_TIMEOUT_MS) })
    })
    let raw: unknown
    try {
      raw = await resolver.resolve(base.href)
    } catch (err) {
      throw new InvalidRequestError(`cannot fetch the A2A agent card of ${base.href}: ${messageOf(refusalIn(err) ?? err)}`)
    }
    // only the interfaces checked here are left on the card the SDK's client is made from
    const { card, moved, outside } = checkedCard(raw, base)
    if (outside > 0) this.log.warn({ url: base.href, outside }, 'a2a: the agent card names interfaces at paths outside the configured URL\'s: they are not used')
    if (moved) this.log.warn({ url: base.href, interfaces: card.supportedInterfaces.map(i => i.url) }, 'a2a: the agent card names its interfaces at another origin than the configured URL: their paths are used at the configured origin')
    if (card.skills.length === 0) this.log.warn({ url: base.href }, 'a2a: the agent card lists no skills; it is offered as a2a:default')

    const client = await new ClientFactory({ transports: [new JsonRpcTransportFactory({ fetchImpl }), new RestTransportFactory({ fetchImpl })] }).createFromAgentCard(card)
    const draft = a2aToMeshDraft(card)
    const skills = new Map<string, string>()
    const caps = draft.capabilities ?? []
    caps.forEach((c, i) => { skills.set(`${c.capability_id}@${c.version}`, card.skills[i]?.id ?? 'default') })
    for (const other of this.agents.values()) {
      const clash = caps.find(c => other.skills.has(`${c.capability_id}@${c.version}`))
      if (clash !== undefined) throw new InvalidRequestError(`${clash.capability_id}@${clash.version} is already served by the A2A agent at ${other.url}`)
    }
    const agent: BridgedAgent = { url: base.href, card, draft, skills }
    const streaming = card.capabilities?.streaming === true
    this.handlers.set(base.href, () => {
      for (const cap of caps) this.node.runs.handle(cap, async (ctx) => this.forward(agent, client, streaming, cap, ctx))
    })
    this.handlers.get(base.href)?.()
    // it moves from the agents being added to the agents, counted once among A2A_OUTBOUND_AGENTS_MAX
    this.adding.delete(base.href)
    this.agents.set(base.href, agent)
    this.log.info({ url: base.href, name: card.name, capabilities: caps.map(c => `${c.capability_id}@${c.version}`), streaming }, 'a2a: agent joined to the mesh')
    return agent
  }

  /** One mesh run, carried out as one A2A task. */
  private async forward (agent: BridgedAgent, client: Client, streaming: boolean, cap: CapabilityRef, ctx: RunContext): Promise<JsonObject> {
    if (ctx.restored !== null || ctx.handedOff !== null) {
      throw new Error(`the A2A agent ${agent.url} cannot take over this run: ${ctx.restored !== null ? 'its A2A task did not outlive the node\'s restart' : 'a handed-off run has no A2A task'}`)
    }
    const view = new TaskView()
    const contextId = ctx.run.correlation_id
    // A2A_TASK_MAX_MS bounds the task's own time, the legs between its input requests: the deadline is
    // paused while the run is blocked (a human may answer a day later) and goes on with what is left of it
    let budget = A2A_TASK_MAX_MS
    let legStart = Date.now()
    let deadline = withDeadline(ctx.signal, budget)
    let msg = delegateMessage(cap, ctx.input, contextId)
    // the message that makes the task: a run that ends before the task's first event finds the task by it
    const sent = msg.messageId
    // `unseen`: a task may be open on the server though the bridge saw none (the call was cut, or ended without a word)
    const onCancel = (unseen = true): void => {
      if (view.taskId === '') {
        if (unseen) this.cancelUnseen(agent, client, contextId, sent, ctx.run.run_id)
        return
      }
      if (view.status === undefined || isFinalState(view.status.state)) return
      client.cancelTask({ tenant: '', id: view.taskId, metadata: undefined }, { signal: AbortSignal.timeout(A2A_CALL_TIMEOUT_MS) }).then(
        () => { this.log.debug({ task_id: view.taskId, run_id: ctx.run.run_id }, 'a2a: canceled the task of a canceled run') },
        (err: unknown) => { this.log.warn({ err: messageOf(err), task_id: view.taskId, url: agent.url }, 'a2a: CancelTask failed') }
      )
    }
    const onAbort = (): void => { onCancel() }
    ctx.signal.addEventListener('abort', onAbort, { once: true })
    let blocks = 0
    let endedEarly = false
    const progress = new ProgressGate(ctx, this.log, this.progressBounds, [this.stats, this.totals])
    try {
      for (;;) {
        const signal = deadline.signal
        const outcome = streaming ? await this.stream(client, msg, view, progress, signal) : await this.poll(client, msg, view, progress, signal)
        progress.discard()
        switch (outcome.kind) {
          case 'completed': return outcome.output
          case 'failed':
          case 'canceled': throw new Error(outcome.message)
          case 'blocked': {
            blocks++
            view.inputs++
            view.answered = view.status
            deadline.clear()
            budget -= Date.now() - legStart
            const resolution = await ctx.block(outcome.reason, outcome.checkpoint_id)
            legStart = Date.now()
            deadline = withDeadline(ctx.signal, Math.max(0, budget))
            msg = resumeMessage(view.taskId, contextId, resolution)
            break
          }
          case 'working': endedEarly = true; throw new Error(`the A2A agent ${agent.url} ended its stream with the task still working (after ${blocks} input requests)`)
        }
      }
    } catch (err) {
      if (ctx.signal.aborted) throw err
      // the run fails here (its artifacts past the bound, its time limit, a broken stream): the A2A task is
      // canceled too, so the agent does not go on with work nobody will read. One whose id the bridge has not
      // seen is looked for only when the call was cut (a time bound) or the stream ended without a word of it: a
      // server that answered the call with an error (or a redirect refused) took no message
      onCancel(endedEarly || deadline.signal.aborted || cutByBridge(err))
      throw new Error(`A2A agent ${agent.url}: ${messageOf(refusalIn(err) ?? err)}`.slice(0, 1000), { cause: err })
    } finally {
      progress.close()
      deadline.clear()
      ctx.signal.removeEventListener('abort', onAbort)
    }
  }

  /**
   * Cancel the task of a run that ended before the bridge saw any event of it (its id unknown: the run canceled,
   * the stream's first event or SendMessage's answer overdue): the server may have made the task all the same, and
   * would work on for nobody. The task is found by ListTasks of the run's context (its correlation id), as the open
   * one whose history holds the message the bridge sent, and canceled; all within A2A_CALL_TIMEOUT_MS. One not
   * found (none made, a server that keeps no history or cannot list) is logged with the reason.
   */
  private cancelUnseen (agent: BridgedAgent, client: Client, contextId: string, messageId: string, runId: string): void {
    const signal = AbortSignal.timeout(A2A_CALL_TIMEOUT_MS)
    const where = { url: agent.url, run_id: runId, context_id: contextId, message_id: messageId }
    // a server may store the task only with its first event (the SDK's does), after the run ended here: none found
    // is asked again every A2A_UNSEEN_TASK_RETRY_MS while the bound lasts; a failed ListTasks is not
    const lookUp = async (): Promise<Awaited<ReturnType<typeof tasksOfMessage>>> => {
      for (;;) {
        const found = await tasksOfMessage(client, contextId, messageId, signal)
        if (found.ids.length > 0 || found.more) return found
        try {
          await sleep(A2A_UNSEEN_TASK_RETRY_MS, undefined, { signal })
        } catch {
          return found // the bound ran out: nothing more to ask
        }
      }
    }
    lookUp().then(async (found) => {
      if (found.ids.length === 0) {
        this.log.warn({ ...where, listed: found.listed, pages: found.pages }, `a2a: the run ended before its A2A task's first event, and no open task of its context shows the message that made it (${found.more ? `more than ${A2A_UNSEEN_TASK_PAGES_MAX} pages of tasks` : `none made within ${A2A_CALL_TIMEOUT_MS} ms, or the server keeps no history`}): no task canceled`)
        return
      }
      for (const id of found.ids) {
        try {
          await client.cancelTask({ tenant: '', id, metadata: undefined }, { signal })
          this.log.debug({ ...where, task_id: id }, 'a2a: canceled the task of a run that ended before its first event')
        } catch (err) {
          this.log.warn({ ...where, err: messageOf(err), task_id: id }, 'a2a: CancelTask failed for the task of a run that ended before its first event')
        }
      }
    }, (err: unknown) => {
      this.log.warn({ ...where, err: messageOf(err) }, 'a2a: the run ended before its A2A task\'s first event, and ListTasks could not find the task: no task canceled')
    })
  }

  /** Report the task id once, so the run's events name the A2A task that carries it. */
  private async noteTask (view: TaskView, id: string, progress: ProgressGate): Promise<void> {
    if (view.taskId === id || id === '') return
    view.taskId = id
    await progress.now({ a2a_task_id: id })
  }

  private async stream (client: Client, msg: Message, view: TaskView, progress: ProgressGate, signal: AbortSignal): Promise<TaskOutcome> {
    let outcome: TaskOutcome = { kind: 'working' }
    // a server that takes the request and never sends an event would hold the run for the task's whole time:
    // its first event is due within A2A_CALL_TIMEOUT_MS, as a unary call's answer is
    const first = withDeadline(signal, this.firstEventMs)
    const events: AsyncGenerator<StreamResponse> = client.sendMessageStream(sendRequest(msg, false), { signal: first.signal })
    try {
      for await (const ev of events) {
        first.clear()
        const p = ev.payload
        if (p === undefined) continue
        if (p.$case === 'message') return { kind: 'completed', output: { message: partsOf(p.value) } }
        if (p.$case === 'task') {
          await this.noteTask(view, p.value.id, progress)
          for (const a of p.value.artifacts) view.artifact(a, false)
          view.status = p.value.status
        } else if (p.$case === 'artifactUpdate') {
          if (p.value.artifact !== undefined) view.artifact(p.value.artifact, p.value.append)
          continue
        } else {
          await this.noteTask(view, p.value.taskId, progress)
          view.status = p.value.status
        }
        outcome = view.outcome()
        if (outcome.kind === 'working') {
          if (outcome.progress !== undefined && p.$case === 'statusUpdate') await progress.report(outcome.progress)
          continue
        }
        return outcome
      }
    } catch (err) {
      // the first event's bound ran out (not the task's own deadline): say which bound
      if (first.signal.aborted && !signal.aborted) throw new Error(`the A2A agent sent no event of its stream within ${this.firstEventMs} ms (A2A_CALL_TIMEOUT_MS)`, { cause: err })
      throw err
    } finally {
      first.clear()
    }
    // a stream that ended early: ask for the task as it is
    if (view.taskId === '') return outcome
    const task = await withinDeadline(signal, A2A_CALL_TIMEOUT_MS, async (s) => client.getTask({ tenant: '', id: view.taskId }, { signal: s }))
    for (const a of task.artifacts) view.artifact(a, false)
    view.status = task.status
    return view.outcome()
  }

  private async poll (client: Client, msg: Message, view: TaskView, progress: ProgressGate, signal: AbortSignal): Promise<TaskOutcome> {
    const first = await withinDeadline(signal, A2A_CALL_TIMEOUT_MS, async (s) => client.sendMessage(sendRequest(msg, true), { signal: s }))
    if (!('status' in first)) return { kind: 'completed', output: { message: partsOf(first) } }
    await this.noteTask(view, first.id, progress)
    let task = first
    let lastMessage = ''
    for (;;) {
      for (const a of task.artifacts) view.artifact(a, false)
      view.status = task.status
      const outcome = view.outcome()
      if (outcome.kind !== 'working') return outcome
      const mid = task.status?.message?.messageId ?? ''
      if (outcome.progress !== undefined && mid !== lastMessage) {
        lastMessage = mid
        await progress.report(outcome.progress)
      }
      await sleep(A2A_POLL_INTERVAL_MS, undefined, { signal })
      task = await withinDeadline(signal, A2A_CALL_TIMEOUT_MS, async (s) => client.getTask({ tenant: '', id: view.taskId }, { signal: s }))
    }
  }
}

/**
 * The open tasks of `contextId` whose history holds the message `messageId` (ListTasks, the newest first on the
 * SDK's server), read a page of A2A_UNSEEN_TASK_PAGE_SIZE at a time up to A2A_UNSEEN_TASK_PAGES_MAX pages.
 */
async function tasksOfMessage (client: Client, contextId: string, messageId: string, signal: AbortSignal): Promise<{ ids: string[], listed: number, pages: number, more: boolean }> {
  let pageToken = ''
  let listed = 0
  for (let pages = 1; ; pages++) {
    const page = await client.listTasks({
      tenant: '', contextId, status: TaskState.TASK_STATE_UNSPECIFIED, pageSize: A2A_UNSEEN_TASK_PAGE_SIZE, pageToken,
      historyLength: undefined, statusTimestampAfter: undefined, includeArtifacts: false
    }, { signal })
    listed += page.tasks.length
    const ids = page.tasks
      .filter(t => t.contextId === contextId && (t.status === undefined || !isFinalState(t.status.state)) && t.history.some(m => m.messageId === messageId))
      .map(t => t.id)
    const more = page.nextPageToken !== '' && page.tasks.length > 0
    if (ids.length > 0 || !more || pages >= A2A_UNSEEN_TASK_PAGES_MAX) return { ids, listed, pages, more: ids.length === 0 && more }
    pageToken = page.nextPageToken
  }
}

/** An error of a call the bridge cut (a time bound's abort), or one caused by such. */
function cutByBridge (err: unknown): boolean {
  const seen = new Set<unknown>()
  for (let e = err; e instanceof Error && !seen.has(e); e = e.cause) {
    seen.add(e)
    if (e.name === 'AbortError' || e.name === 'TimeoutError') return true
  }
  return false
}

function partsOf (m: Message): unknown[] {
  return m.parts.map(p => p.content?.$case === 'data' ? { data: p.content.value } : p.content?.$case === 'text' ? { text: p.content.value } : { media_type: p.mediaType })
}
