/**
 * The commands that drive a running node through its local API: card,
 * discover, delegate, send (one turn of a conversation), runs, block,
 * resume, cancel, handoff; events and replay (events.ts).
 */
import { randomBytes } from 'node:crypto'
import { setTimeout as sleep } from 'node:timers/promises'
import type { Command } from 'commander'
import { CLI_DISCOVER_RETRY_MS, DISCOVER_MAX_RESULTS, DISCOVER_TIMEOUT_MS, MAX_HANDOFF_DEPTH, RUN_LIST_MAX_LIMIT } from '../constants.ts'
import { ApiError, ApiUnreachableError, streamFailure, type ApiClient } from '../api/client.ts'
import { isSinceInstant } from '../api/since.ts'
import { webhookProblem } from '../api/webhook-url.ts'
import type { AgentCard, CapabilityRef, CardDraft } from '../card/card.ts'
import { DISCOVER_TIMEOUT_MAX_MS } from '../card/constants.ts'
import { RUN_STATES, type Run } from '../runlog/types.ts'
import { cardDraftFrom } from './start-args.ts'
import { cardText, cardsText, runLine, runText } from './format.ts'
import { collect, EXIT_INTERRUPTED, EXIT_REFUSED, EXIT_UNREACHABLE, idArg, jsonObjectArg, positiveInt, remoteAction, remoteCommand, seg, UnfinishedError, UsageError, type Output, type RemoteOptions } from './remote.ts'
import { callRun, callShaped, type FieldKind } from './answers.ts'
import { nonNegativeInt, registerEvents, registerReplay, runEvent } from './events.ts'
import { printable } from './printable.ts'
import { onInterrupt } from './signals.ts'
import { readPages } from './pages.ts'

interface CardState { agent_id: string, card: AgentCard | null, webhook: string | null, serving: CapabilityRef[] }
const CARD_STATE: Record<string, FieldKind> = { agent_id: 'string', card: 'object|null', webhook: 'string|null', serving: 'array' }
interface RunResult { run: Run }
const CARDS: Record<string, FieldKind> = { cards: 'array' }

/**
 * A --since the API takes: its document's pattern for the parameter (RFC
 * 3339) and a real instant (the node's own check, src/api/since.ts: month 13
 * and February 30 match the pattern).
 */
async function sinceArg (since: string): Promise<void> {
  const { default: doc } = await import('../../protocols/api.openapi.json', { with: { type: 'json' } })
  const params = doc.paths['/v1/runs'].get.parameters as ReadonlyArray<{ name?: string, schema?: { pattern?: string, maxLength?: number } }>
  const schema = params.find(p => p.name === 'since')?.schema
  const fits = schema?.pattern === undefined || new RegExp(schema.pattern).test(since)
  if (!fits || since.length > (schema?.maxLength ?? Infinity) || !isSinceInstant(since)) {
    throw new UsageError(`--since "${printable(since)}" is not an RFC 3339 instant (e.g. 2026-01-31T12:00:00Z)`)
  }
}

/** A capability the user typed; `exact` demands a version. (card.ts is loaded only here: it compiles schemas.) */
async function capabilityArg (text: string, exact: boolean): Promise<{ capability_id: string, version: string | null }> {
  const { parseCapability } = await import('../card/card.ts')
  let q
  try {
    q = parseCapability(text)
  } catch (err) {
    throw new UsageError((err as Error).message)
  }
  const version = q.version === undefined || q.version === null || q.version === '*' ? null : q.version
  if (exact && version === null) throw new UsageError(`capability "${text}" needs an exact version, e.g. ${q.capability_id}@1.0.0`)
  return { capability_id: q.capability_id, version }
}

const runResult = (r: RunResult, what?: string): { json: unknown, text: string } => ({
  json: r,
  text: what === undefined ? runText(r.run) : `${what}\n${runText(r.run)}`
})

// ---- card ---------------------------------------------------------------------------------

function registerCard (program: Command): void {
  const card = program.command('card').description('show or set this agent\'s card (and the capabilities the API serves)')

  remoteCommand(card, 'show', 'show the published card, the webhook and the capabilities served through the API')
    .action(remoteAction(async (client) => {
      const s = await callShaped<CardState>(client, 'GET', '/v1/card', CARD_STATE)
      return { json: s, text: cardText(s.agent_id, s.card, s.webhook, s.serving) }
    }))

  remoteCommand(card, 'set', 'publish a new card; the API then hands runs of its capabilities to the agent (work stream, webhook)')
    .option('--card <file>', 'a card draft, JSON: {name, description, capabilities, tags} (else the current card is the base)')
    .option('--name <name>', 'card name')
    .option('--description <text>', 'card description')
    .option('--capability <id@version>', 'a capability to add, repeatable', collect)
    .option('--tag <tag>', 'a tag to add, repeatable', collect)
    .option('--webhook <url>', 'POST each work item to this URL')
    .option('--no-webhook', 'stop POSTing work items')
    .addHelpText('after', '\nWithout --card the current card is the base: --name and --description replace its values, --capability and --tag add to its lists.\n--webhook or --no-webhook alone publishes the current card again with the new webhook. A webhook must parse as a URL, hold no credentials (user:password@) and name neither port 0 nor a port fetch blocks (WebhookUrl in protocols/api.openapi.json).')
    .action(remoteAction<RemoteOptions & { card?: string, name?: string, description?: string, capability?: string[], tag?: string[], webhook?: string | false }>(async (client, opts) => {
      if (typeof opts.webhook === 'string') {
        const problem = webhookProblem(opts.webhook)
        if (problem !== undefined) throw new UsageError(`--webhook "${printable(opts.webhook)}" cannot be used: ${problem}`)
      }
      let base: CardDraft | undefined
      if (opts.card === undefined) {
        const current = (await callShaped<CardState>(client, 'GET', '/v1/card', CARD_STATE)).card
        if (current !== null) base = { name: current.name, description: current.description, capabilities: current.capabilities, tags: current.tags }
      }
      let draft: CardDraft | undefined
      try {
        draft = await cardDraftFrom({
          ...(opts.card === undefined ? {} : { card: opts.card }),
          ...(opts.name === undefined ? {} : { name: opts.name }),
          ...(opts.description === undefined ? {} : { description: opts.description }),
          capability: opts.capability ?? [],
          tag: opts.tag ?? []
        }, base)
      } catch (err) {
        throw new UsageError((err as Error).message)
      }
      // --webhook or --no-webhook alone: the current card again, with the new webhook
      if (draft === undefined && opts.webhook !== undefined && base !== undefined) draft = base
      if (draft === undefined) {
        throw new UsageError(opts.webhook === undefined
          ? 'nothing to set: give --card, --name, --description, --capability or --tag'
          : 'no card is published yet to set the webhook of: give --card or --name (and --capability) with it')
      }
      const body: Record<string, unknown> = { card: draft }
      if (opts.webhook !== undefined) body.webhook = opts.webhook === false ? null : opts.webhook
      const s = await callShaped<CardState>(client, 'PUT', '/v1/card', CARD_STATE, body)
      return { json: s, text: cardText(s.agent_id, s.card, s.webhook, s.serving) }
    }))
}

// ---- discover, delegate ------------------------------------------------------------------------

function registerDiscover (program: Command): void {
  remoteCommand(program, 'discover', 'agent.discover: find agents by capability and/or tags')
    .option('--capability <id[@version]>', 'a capability (any version without @version)')
    .option('--tag <tag>', 'a tag the agent must have, repeatable', collect)
    .option('--limit <n>', `at most this many cards (1-${DISCOVER_MAX_RESULTS})`, positiveInt(DISCOVER_MAX_RESULTS))
    .option('--fresh', 'ask every provider again instead of using cached cards', false)
    .option('--include-self', 'include this node\'s own card when it matches', false)
    .option('--timeout-ms <ms>', `how long one lookup may collect cards (1-${DISCOVER_TIMEOUT_MAX_MS}, default ${DISCOVER_TIMEOUT_MS})`, positiveInt(DISCOVER_TIMEOUT_MAX_MS))
    .option('--wait <ms>', 'keep looking for up to this long until something is found (announcements take a moment to spread)', nonNegativeInt)
    .action(remoteAction<RemoteOptions & { capability?: string, tag?: string[], limit?: number, fresh: boolean, includeSelf: boolean, timeoutMs?: number, wait?: number }>(async (client, opts) => {
      if (opts.capability === undefined && (opts.tag ?? []).length === 0) throw new UsageError('give --capability and/or --tag')
      if ((opts.tag ?? []).includes('')) throw new UsageError('--tag must not be empty')
      if (opts.capability !== undefined) await capabilityArg(opts.capability, false)
      const query = {
        capability: opts.capability,
        tag: opts.tag,
        limit: opts.limit,
        fresh: opts.fresh ? true : undefined,
        include_self: opts.includeSelf ? true : undefined,
        timeout_ms: opts.timeoutMs
      }
      const deadline = Date.now() + (opts.wait ?? 0)
      for (;;) {
        const { cards } = await callShaped<{ cards: AgentCard[] }>(client, 'GET', '/v1/discover', CARDS, undefined, query)
        if (cards.length > 0 || Date.now() >= deadline) return { json: { cards }, text: cardsText(cards) }
        await sleep(CLI_DISCOVER_RETRY_MS)
      }
    }))
}

interface DelegateOptions extends RemoteOptions {
  capability?: string
  to?: string
  task?: string
  input: string
  parentRun?: string
  idempotencyKey?: string
  authorize?: string[]
  continue?: string
  context?: string
}

function delegateOptions (cmd: Command): Command {
  return cmd
    .option('--capability <id@version>', 'the capability to run (required unless --continue names the earlier turn)')
    .option('--to <agent id>', 'the agent to run it (default: the first one discover finds, or the agent of --continue)')
    .option('--task <id>', 'the task id, which becomes the run\'s correlation_id (default: a new one, or the task of --continue)')
    .option('--input <json|@file>', 'the input, a JSON object', '{}')
    .option('--parent-run <run id>', 'the run this delegation is part of')
    .option('--idempotency-key <key>', 'a retry with the same key returns the same run')
    .option('--authorize <agent id>', 'another agent allowed to resume or cancel, repeatable', collect)
    .option('--continue <run id>', 'the next turn of the conversation this earlier run is a turn of (protocols/turns.md)')
    .option('--context <id>', 'the conversation to continue (or start) with the agent')
}

/** The DelegateRequest body the options describe (an earlier turn named by --continue fills in agent, task and capability). */
async function delegateBody (client: Parameters<Parameters<typeof remoteAction>[0]>[0], opts: DelegateOptions): Promise<Record<string, unknown>> {
  const earlier = opts.continue === undefined ? undefined : (await callRun<RunResult>(client, 'GET', `/v1/runs/${seg(opts.continue)}`)).run
  let capability: CapabilityRef
  if (opts.capability !== undefined) {
    const c = await capabilityArg(opts.capability, true)
    capability = { capability_id: c.capability_id, version: c.version ?? '' }
  } else if (earlier !== undefined) {
    capability = earlier.capability
  } else {
    throw new UsageError('--capability is required (or --continue an earlier turn)')
  }
  const wanted = `${capability.capability_id}@${capability.version}`
  const input = await jsonObjectArg(opts.input, '--input') ?? {}
  let to = opts.to ?? earlier?.agent_id
  if (to === undefined) {
    const { cards } = await callShaped<{ cards: AgentCard[] }>(client, 'GET', '/v1/discover', CARDS, undefined, { capability: wanted, limit: 1 })
    to = cards[0]?.agent_id
    if (to === undefined) throw new UsageError(`no agent found for ${wanted}; pass --to`)
  }
  const body: Record<string, unknown> = {
    to_agent: to,
    task_id: opts.task ?? earlier?.correlation_id ?? `task-${randomBytes(8).toString('hex')}`,
    capability,
    input
  }
  if (opts.parentRun !== undefined) body.parent_run = opts.parentRun
  if (opts.idempotencyKey !== undefined) body.idempotency_key = opts.idempotencyKey
  if (opts.authorize !== undefined) body.authorized = opts.authorize
  if (opts.continue !== undefined) body.continue_run = opts.continue
  if (opts.context !== undefined) body.context_id = opts.context
  return body
}

function registerDelegate (program: Command): void {
  delegateOptions(remoteCommand(program, 'delegate', 'agent.delegate: start a run on another agent; prints the run handle at once'))
    .action(remoteAction<DelegateOptions>(async (client, opts) => {
      const r = await callRun<RunResult>(client, 'POST', '/v1/delegate', await delegateBody(client, opts))
      return runResult(r, `delegated: run ${r.run.run_id} (correlation ${r.run.correlation_id})`)
    }))

  delegateOptions(remoteCommand(program, 'send', 'one turn of a conversation: delegate, wait for the run to end, print its output (--continue <run> for the next turn)'))
    .addHelpText('after', `
Exits 0 only when the run completed. A run that failed or blocked is printed and the
command exits 1 (a blocked run waits for: aap-mesh resume <run> --checkpoint <id> --resolution ...);
3 when the node's stream ended first, ${EXIT_INTERRUPTED} when Ctrl-C ended the wait.`)
    .action(remoteAction<DelegateOptions>(async (client, opts) => {
      const body = await delegateBody(client, opts)
      const task = String(body.task_id)
      const ctl = new AbortController()
      const release = onInterrupt(() => { ctl.abort() }, ['SIGINT', 'SIGTERM'])
      let created: Run | undefined
      // the run whose end send waits for: the delegated one, then each successor it is handed off to
      let current: string | undefined
      // the last state of `current` the node told (undefined for a successor not asked about yet)
      let known: Run | undefined
      let ended: Run | undefined
      // why the wait ended before the run did, when the node's stream broke or failed
      let cut: Error | undefined
      try {
        // follow the task's events from now on, then delegate: the run's end cannot slip by unseen
        for await (const ev of client.stream(`/v1/events/${seg(task)}/stream`, { history: false }, { signal: ctl.signal })) {
          const failed = streamFailure(ev)
          if (failed !== undefined) throw new UnfinishedError(failed.code, `the node's event stream of ${task} failed: ${failed.message}`, EXIT_UNREACHABLE)
          if (ev.event === 'ready') {
            created = (await callRun<RunResult>(client, 'POST', '/v1/delegate', body)).run
            current = created.run_id
            known = created
            // a retried idempotency key may answer with a run that ended or blocked already
            if (created.state === 'running') continue
          } else {
            const e = runEvent(client, task, ev)
            if (current === undefined || e.run_id !== current || !(e.type === 'run.completed' || e.type === 'run.failed' || e.type === 'run.blocked')) continue
          }
          const end = await endOfChain(client, current)
          if (end.run !== undefined) {
            ended = end.run
            break
          }
          current = end.live
          known = end.known
        }
      } catch (err) {
        // once a run was delegated, a node that stopped or failed mid-wait must not hide which one: said below;
        // Ctrl-C before the node even answered the stream is an interruption like any other
        const typed = err instanceof ApiUnreachableError || err instanceof ApiError || err instanceof UnfinishedError
        if (!ctl.signal.aborted && !(created !== undefined && typed)) throw err
        cut = err as Error
      } finally {
        release()
      }
      if (created === undefined) {
        if (ctl.signal.aborted) throw new UnfinishedError('INTERRUPTED', `stopped before the delegation of ${task} was sent`, EXIT_INTERRUPTED)
        throw new UnfinishedError('UNREACHABLE', 'the node\'s event stream ended before the delegation was sent', EXIT_UNREACHABLE)
      }
      const delegated = created
      const waited = current ?? delegated.run_id
      let run = ended
      if (run === undefined) {
        try {
          run = (await callRun<RunResult>(client, 'GET', `/v1/runs/${seg(waited)}`)).run
        } catch (err) {
          // the node is gone (stopped, died): what it said last stands, and the run is named for a later look
          return unansweredSend(delegated, waited, known, cut ?? (err as Error), ctl.signal.aborted)
        }
      }
      const turn = run.turn === undefined ? '' : ` (turn ${run.turn} of ${run.context_id ?? run.run_id})`
      const handed = run.run_id === delegated.run_id ? '' : ` (run ${delegated.run_id} handed off)`
      const text = run.state === 'completed'
        ? `${JSON.stringify(run.output)}\nrun ${run.run_id}${turn}${handed}: completed; next turn: aap-mesh send --continue ${run.run_id} --input ...`
        : `run ${run.run_id}${turn}${handed}: ${run.state}\n${runText(run)}`
      const unfinished = sendVerdict(run, ctl.signal.aborted, cut)
      return { json: { run, ...(handed === '' ? {} : { delegated_run: delegated.run_id }) }, text, ...(unfinished === undefined ? {} : { unfinished }) }
    }))
}

/**
 * What `send` says when the node could not be asked how its wait ended (it
 * stopped or died): the run it delegated and the last state it heard of the
 * run it waited for, exit 3 (130 when SIGINT or SIGTERM ended the wait).
 */
function unansweredSend (delegated: Run, waited: string, known: Run | undefined, why: Error, interrupted: boolean): Output {
  const state = known?.run_id === waited ? known.state : 'in a state not heard of'
  const handed = waited === delegated.run_id ? '' : ` (run ${delegated.run_id} handed off)`
  const unfinished = interrupted
    ? new UnfinishedError('INTERRUPTED', `stopped waiting; run ${waited}${handed} was last ${state} (the node did not answer again: ${why.message})`, EXIT_INTERRUPTED)
    : new UnfinishedError('UNREACHABLE', `the node's event stream ended while run ${waited}${handed} is ${state}: ${why.message}; look again with aap-mesh runs show ${waited}`, EXIT_UNREACHABLE)
  const run = known?.run_id === waited ? known : undefined
  return {
    json: { run: run ?? null, delegated_run: delegated.run_id, ...(run === undefined ? { waited_run: waited } : {}) },
    text: run === undefined ? `run ${waited}${handed}: ${state}` : `run ${waited}${handed}: ${state}\n${runText(run)}`,
    unfinished
  }
}

/**
 * Where a run's line of handoffs stands: the first run of it that ended
 * without handing off or is blocked (`run`), or the live one to wait for
 * (`known`: its state as the node gave it, when it was asked).
 */
async function endOfChain (client: ApiClient, runId: string): Promise<{ run: Run, live?: undefined, known?: undefined } | { run?: undefined, live: string, known: Run | undefined }> {
  let id = runId
  for (let hop = 0; hop <= MAX_HANDOFF_DEPTH; hop++) {
    const run = (await callRun<RunResult>(client, 'GET', `/v1/runs/${seg(id)}`)).run
    if (run.state === 'running') return { live: id, known: run }
    if (run.state !== 'completed' || run.handoff_to === null) return { run }
    id = run.handoff_to.run_id
  }
  return { live: id, known: undefined }
}

/** Why `send` did not succeed: undefined for a completed run, else the reason and exit status. */
function sendVerdict (run: Run, interrupted: boolean, cut: Error | undefined): UnfinishedError | undefined {
  switch (run.state) {
    case 'completed': return undefined
    case 'failed': return new UnfinishedError(run.failure?.code ?? 'FAILED', `run ${run.run_id} failed: ${run.failure?.message ?? 'no reason given'}`, EXIT_REFUSED)
    case 'blocked': return new UnfinishedError('BLOCKED', `run ${run.run_id} is blocked on checkpoint ${run.checkpoint_id ?? '-'}; go on with aap-mesh resume ${run.run_id} --checkpoint ${run.checkpoint_id ?? '-'} --resolution '{...}'`, EXIT_REFUSED)
    default:
      if (interrupted) return new UnfinishedError('INTERRUPTED', `stopped waiting; run ${run.run_id} is ${run.state}`, EXIT_INTERRUPTED)
      return new UnfinishedError('UNREACHABLE', `the node's event stream ended while run ${run.run_id} is ${run.state}${cut === undefined ? '' : `: ${cut.message}`}`, EXIT_UNREACHABLE)
  }
}

// ---- runs and their verbs --------------------------------------------------------------------

interface RunListPage { executing: Run[], delegated: Run[], next_cursor: string | null, counts: unknown }

function registerRuns (program: Command): void {
  const runs = program.command('runs').description('runs this node executes or delegated')

  remoteCommand(runs, 'list', 'list runs: executing (this node runs them) and delegated (this node started them), a page at a time')
    .option('--state <state>', `only runs in this state (${RUN_STATES.join(', ')})`)
    .option('--correlation <id>', 'only runs of this correlation (task) id')
    .option('--agent <agent id>', 'only runs this agent executes or delegated')
    .option('--capability <id[@version]>', 'only runs of this capability (any version without @version)')
    .option('--since <time>', 'only runs this node stored at or after this instant, by its clock (RFC 3339, e.g. 2026-01-31T12:00:00Z)')
    .option('--limit <n>', `at most this many runs per page (1-${RUN_LIST_MAX_LIMIT})`, positiveInt(RUN_LIST_MAX_LIMIT))
    .option('--side <side>', 'only runs executing here (executing) or only runs delegated from here (delegated)')
    .option('--newest', 'newest first (keep it with --cursor)', false)
    .option('--cursor <cursor>', 'start at this page (the next_cursor a listing printed, with the same filters)')
    .option('--all', 'follow the cursors to the end of the listing', false)
    .action(remoteAction<RemoteOptions & { state?: string, correlation?: string, agent?: string, capability?: string, since?: string, side?: string, newest: boolean, limit?: number, cursor?: string, all: boolean }>(async (client, opts) => {
      if (opts.side !== undefined && opts.side !== 'executing' && opts.side !== 'delegated') throw new UsageError('--side must be executing or delegated')
      if (opts.state !== undefined && !(RUN_STATES as readonly string[]).includes(opts.state)) throw new UsageError(`--state must be one of ${RUN_STATES.join(', ')}`)
      if (opts.capability !== undefined) await capabilityArg(opts.capability, false)
      if (opts.since !== undefined) await sinceArg(opts.since)
      const query = { state: opts.state, correlation_id: opts.correlation, agent: opts.agent, capability: opts.capability, since: opts.since, side: opts.side, order: opts.newest ? 'newest' : undefined, limit: opts.limit }
      const list: RunListPage = { executing: [], delegated: [], next_cursor: null, counts: null }
      const { pages, unfinished } = await readPages(opts.cursor, opts.all, async cursor => callShaped<RunListPage>(client, 'GET', '/v1/runs', { executing: 'array', delegated: 'array', next_cursor: 'string|null' }, undefined, { ...query, cursor }), p => p.executing.length + p.delegated.length)
      for (const page of pages) {
        list.executing.push(...page.executing)
        list.delegated.push(...page.delegated)
        list.next_cursor = page.next_cursor
        list.counts = page.counts
      }
      const lines = [...list.executing.map(r => runLine(r, 'executing')), ...list.delegated.map(r => runLine(r, 'delegated'))]
      if (list.next_cursor !== null) lines.push(`more: --cursor ${printable(list.next_cursor)}`)
      return { json: list, text: lines.length === 0 ? 'no runs' : lines.join('\n'), ...(unfinished === undefined ? {} : { unfinished }) }
    }))

  remoteCommand(runs, 'show', 'show one run, as its executor knows it')
    .argument('<run-id>')
    .action(remoteAction(async (client, _opts, [id]) => runResult(await callRun<RunResult>(client, 'GET', `/v1/runs/${seg(idArg(id, '<run-id>'))}`))))
}

function registerVerbs (program: Command): void {
  remoteCommand(program, 'block', 'agent.block: pause a run on a checkpoint (executor side for runs run here, delegator side for runs delegated from here)')
    .argument('<run-id>')
    .requiredOption('--checkpoint <id>', 'the checkpoint (e.g. the HACP checkpoint id)')
    .option('--reason <text>', 'why', '')
    .action(remoteAction<RemoteOptions & { checkpoint: string, reason: string }>(async (client, opts, [id]) =>
      runResult(await callRun<RunResult>(client, 'POST', `/v1/runs/${seg(idArg(id, '<run-id>'))}/block`, { reason: opts.reason, checkpoint_id: opts.checkpoint }))))

  remoteCommand(program, 'resume', 'agent.resume: resolve the checkpoint of a blocked run this node delegated')
    .argument('<run-id>')
    .requiredOption('--resolution <json|@file>', 'the checkpoint resolution, a JSON object')
    .option('--checkpoint <id>', 'the checkpoint this answers: refused (INVALID_TRANSITION) if the run is blocked on another one')
    .action(remoteAction<RemoteOptions & { resolution: string, checkpoint?: string }>(async (client, opts, [id]) => {
      const run = idArg(id, '<run-id>')
      const resolution = await jsonObjectArg(opts.resolution, '--resolution')
      const body = opts.checkpoint === undefined ? { resolution } : { resolution, checkpoint_id: opts.checkpoint }
      return runResult(await callRun<RunResult>(client, 'POST', `/v1/runs/${seg(run)}/resume`, body))
    }))

  remoteCommand(program, 'cancel', 'cancel a run this node delegated (it fails with CANCELED)')
    .argument('<run-id>')
    .option('--reason <text>', 'why')
    .action(remoteAction<RemoteOptions & { reason?: string }>(async (client, opts, [id]) =>
      runResult(await callRun<RunResult>(client, 'POST', `/v1/runs/${seg(idArg(id, '<run-id>'))}/cancel`, opts.reason === undefined ? {} : { reason: opts.reason }))))

  remoteCommand(program, 'handoff', 'agent.handoff: hand a run to another agent (a new run, same correlation); prints the new run')
    .argument('<run-id>')
    .requiredOption('--to <agent id>', 'the receiving agent')
    .option('--context <json|@file>', 'context for the receiving agent, a JSON object', '{}')
    .action(remoteAction<RemoteOptions & { to: string, context: string }>(async (client, opts, [id]) => {
      const run = idArg(id, '<run-id>')
      const context = await jsonObjectArg(opts.context, '--context') ?? {}
      const r = await callRun<RunResult>(client, 'POST', `/v1/runs/${seg(run)}/handoff`, { to_agent: opts.to, context })
      return runResult(r, `handed off: new run ${r.run.run_id} on ${r.run.agent_id}`)
    }))
}

export function registerRemoteCommands (program: Command): void {
  registerCard(program)
  registerDiscover(program)
  registerDelegate(program)
  registerRuns(program)
  registerVerbs(program)
  registerEvents(program)
  registerReplay(program)
}
