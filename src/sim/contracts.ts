/**
 * The four Loops inter-layer contracts, checked on a replayed trace of one
 * task (every event of every run of its correlation). Pure: a trace in, a
 * verdict per contract out, so an audit can be re-run anywhere.
 *
 * `transportLeaks` checks the first contract's transport rule on anything
 * the node hands up to L2 (API answers: cards, discover results, runs,
 * replays): no multiaddr, no `/p2p/` reference, no field that names an
 * endpoint or addresses.
 */
import type { AgentEvent } from '../runlog/types.ts'

export interface ContractVerdict {
  ok: boolean
  problems: string[]
}

export interface TraceVerdict {
  task_id: string
  capability_ref: ContractVerdict
  task_correlation: ContractVerdict
  checkpoint_block: ContractVerdict
  ownership_handoff: ContractVerdict
  ok: boolean
}

export interface TraceExpectations {
  /** Resolutions the L2 driver sent, by checkpoint id. */
  resolutions?: Record<string, unknown>
  /** The agent that raises every checkpoint (the L2 coordinator, as the runs' delegator): each block names it as `by`. */
  raisedBy?: string
  /** Handoffs the L2 driver ordered: how many ownership transfers. */
  transfers?: number
  /**
   * The task is over: every run of the trace ended (run.completed or
   * run.failed), and each run that no handoff continues (the chain's last)
   * ended in run.completed, not in a handoff or a failure.
   */
  complete?: boolean
}

const TRANSPORT_HINT = /\/(ip4|ip6|dns4|dns6|dns|tcp|udp|memory|p2p|p2p-circuit|ws|wss)\/|https?:\/\/|stdio/i

/**
 * A multiaddr component with its value (`/ip4/127.0.0.1`, `/p2p/<peer id>`,
 * `/memory/x`): a transport address inside any string. Components without a
 * value (`/ws`, `/quic-v1`, `/p2p-circuit`) always follow one of these.
 */
const MULTIADDR = /\/(ip4|ip6|ip6zone|dns4|dns6|dnsaddr|dns|tcp|udp|sctp|memory|unix|p2p|ipfs|certhash)\/[^/\s]/i
/** Fields that carry transport addresses whatever their value looks like. */
const TRANSPORT_FIELDS: ReadonlySet<string> = new Set(['endpoint', 'addresses', 'multiaddr', 'multiaddrs', 'addrs', 'listen_addrs'])

/** Where a value sits in an answer, built into text only when a leak is reported. */
interface Place { up: Place | undefined, step: string }

/** The longest place a leak report spells out (deeper places keep their tail). */
const PLACE_MAX_CHARS = 200

function spell (place: Place): string {
  const steps: string[] = []
  let length = 0
  for (let p: Place | undefined = place; p !== undefined; p = p.up) {
    if (length > PLACE_MAX_CHARS) return `…${steps.reverse().join('')}`
    steps.push(p.step)
    length += p.step.length
  }
  return steps.reverse().join('')
}

/**
 * Every place in `value` (any JSON the node hands up) that names a transport:
 * a string (value or key) holding a multiaddr or a `/p2p/` reference, or a
 * field such as `endpoint` or `addresses`. Empty when clean. Walks the value
 * without recursion, so a deeply nested answer cannot overflow the stack.
 */
export function transportLeaks (value: unknown, where = '$'): string[] {
  const leaks: string[] = []
  const todo: Array<[unknown, Place]> = [[value, { up: undefined, step: where }]]
  for (let next = todo.pop(); next !== undefined; next = todo.pop()) {
    const [v, at] = next
    if (typeof v === 'string') {
      if (MULTIADDR.test(v)) leaks.push(`${spell(at)}: names a transport address (${v.slice(0, 80)})`)
    } else if (Array.isArray(v)) {
      for (let i = v.length - 1; i >= 0; i--) todo.push([v[i], { up: at, step: `[${i}]` }])
    } else if (isRecord(v)) {
      for (const [k, item] of Object.entries(v).reverse()) {
        const place = { up: at, step: `.${k}` }
        if (TRANSPORT_FIELDS.has(k.toLowerCase())) leaks.push(`${spell(place)}: a transport field`)
        else if (MULTIADDR.test(k)) leaks.push(`${spell(at)}: a key names a transport address (${k.slice(0, 80)})`)
        todo.push([item, place])
      }
    }
  }
  return leaks
}


function verdict (problems: string[]): ContractVerdict {
  return { ok: problems.length === 0, problems }
}

function isRecord (v: unknown): v is Record<string, unknown> {
  return typeof v === 'object' && v !== null && !Array.isArray(v)
}

/**
 * What may follow a block while its checkpoint is open (state-machine.ts):
 * the delegator's resume, a failure (the delegator's cancel or verdict, or
 * the executor's DELEGATOR_LOST when nobody who may resume it answers), or
 * the delegator's handoff. Anything else (progress, a completion, the
 * executor's own handoff, another block) is the run going on by itself.
 */
function movesABlockedRun (e: AgentEvent, raisedBy: string | undefined): boolean {
  if (e.payload.transition === 'resume') return resumerProblem(e, raisedBy) === undefined
  if (e.type === 'run.failed') return true
  return e.type === 'run.completed' && e.payload.transition === 'handoff' && typeof e.payload.by === 'string' && e.payload.by !== e.executor
}

/**
 * What is wrong with who resumed a blocked run, if anything: the resume must
 * name its resumer (`by`), the resumer must not be the run's own executor (a
 * blocked run must not resume itself), and when the trace says who raises
 * the checkpoints (`raisedBy`, the delegator) it must be that agent.
 */
function resumerProblem (e: AgentEvent, raisedBy: string | undefined): string | undefined {
  const by = e.payload.by
  if (typeof by !== 'string' || by === '') return 'resume names no resumer (by)'
  if (by === e.executor) return `resumed by its own executor ${by}`
  if (raisedBy !== undefined && by !== raisedBy) return `resumed by ${by}, not the coordinator`
  return undefined
}

/** Problems of a trace that should hold a finished task: a run without an end, or a chain that ends otherwise than completed. */
function incomplete (byRun: Map<string, AgentEvent[]>): string[] {
  const problems: string[] = []
  const continued = new Set<string>()
  for (const list of byRun.values()) {
    const from = list[0]?.payload.handoff_from
    if (isRecord(from) && typeof from.run_id === 'string') continued.add(from.run_id)
  }
  for (const [runId, list] of byRun) {
    const last = list[list.length - 1]
    if (last === undefined) continue
    if (last.type !== 'run.completed' && last.type !== 'run.failed') { problems.push(`${runId}: run has no end in the trace (last is ${last.type} #${last.seq})`); continue }
    const handedOff = last.type === 'run.completed' && last.payload.transition === 'handoff'
    if (!continued.has(runId) && (handedOff || last.type === 'run.failed')) problems.push(`${runId}: the task's last run ends in ${handedOff ? 'a handoff with no successor in the trace' : 'run.failed'}, not run.completed`)
  }
  return problems
}

/**
 * The problem with a run's claim to continue another (its run.started names
 * it as `handoff_from`), if any: the predecessor must end in a handoff whose
 * `handoff_to` is this run. A predecessor missing from the trace is a problem
 * only when the trace is the whole task (`complete`); one without an end yet
 * is left to `incomplete`.
 */
function claimedPredecessor (runId: string, started: AgentEvent | undefined, byRun: Map<string, AgentEvent[]>, complete: boolean): string | undefined {
  const from = started?.type === 'run.started' ? started.payload.handoff_from : undefined
  if (!isRecord(from) || typeof from.run_id !== 'string') return undefined
  const claim = `${runId}: run.started names ${from.run_id} as handoff_from, but ${from.run_id}`
  const last = byRun.get(from.run_id)?.at(-1)
  if (last === undefined) return complete ? `${claim} is missing from the trace` : undefined
  if (last.type !== 'run.completed' && last.type !== 'run.failed') return undefined
  if (last.type !== 'run.completed' || last.payload.transition !== 'handoff') return `${claim} ends in ${last.type}, not a handoff`
  const to = last.payload.handoff_to
  const target = isRecord(to) && typeof to.run_id === 'string' ? to.run_id : undefined
  if (target === runId) return undefined
  return `${claim} handed off to ${target ?? 'no run'}`
}

export function checkTrace (taskId: string, events: AgentEvent[], expect: TraceExpectations = {}): TraceVerdict {
  const byRun = new Map<string, AgentEvent[]>()
  for (const e of events) {
    const list = byRun.get(e.run_id) ?? []
    list.push(e)
    byRun.set(e.run_id, list)
  }

  // Contract 1: capabilities only by (capability_id, version); no transport anywhere in the trace
  const cap: string[] = []
  for (const e of events) {
    if (e.type === 'run.started') {
      const c = e.payload.capability
      if (!isRecord(c) || typeof c.capability_id !== 'string' || typeof c.version !== 'string' || Object.keys(c).length !== 2) {
        cap.push(`${e.run_id}: run.started does not carry a bare CapabilityRef`)
      }
    }
    // the whole event, as an L2 caller gets it: no multiaddr, /p2p/ endpoint or URL anywhere
    if (TRANSPORT_HINT.test(JSON.stringify(e))) cap.push(`${e.run_id}#${e.seq}: event names a transport endpoint`)
    else cap.push(...transportLeaks(e.payload, `${e.run_id}#${e.seq} payload`))
  }

  // Contract 2: every run and event carries the task id as correlation_id
  const corr: string[] = []
  if (events.length === 0) corr.push('no events for the task')
  for (const e of events) if (e.correlation_id !== taskId) corr.push(`${e.run_id}#${e.seq} has correlation ${e.correlation_id}`)
  for (const [runId, list] of byRun) {
    if (list[0]?.type !== 'run.started' || list[0]?.seq !== 1) corr.push(`${runId}: trace does not start with run.started`)
    list.forEach((e, i) => { if (e.seq !== i + 1) corr.push(`${runId}: seq ${e.seq} at position ${i + 1}`) })
  }
  if (expect.complete === true) corr.push(...incomplete(byRun))

  // Contract 3: every block names a checkpoint; a resume resolves the open checkpoint as one transition
  const cp: string[] = []
  for (const [runId, list] of byRun) {
    let open: string | null = null
    for (const e of list) {
      // a blocked run must not resume itself: while its checkpoint is open only its delegator moves it
      if (open !== null && !movesABlockedRun(e, expect.raisedBy)) cp.push(`${runId}#${e.seq}: ${e.type} while checkpoint ${open} is open, before any resume`)
      if (e.type === 'run.blocked') {
        const id = e.payload.checkpoint_id
        if (typeof id !== 'string' || id === '') cp.push(`${runId}#${e.seq}: block without checkpoint_id`)
        else open = id
        if (expect.raisedBy !== undefined && e.payload.by !== expect.raisedBy) cp.push(`${runId}#${e.seq}: block raised by ${String(e.payload.by)}, not the coordinator`)
      }
      if (e.payload.transition === 'resume') {
        if (open === null) cp.push(`${runId}#${e.seq}: resume without an open checkpoint`)
        else if (e.payload.checkpoint_id !== open) cp.push(`${runId}#${e.seq}: resume names ${String(e.payload.checkpoint_id)}, open is ${open}`)
        const resumer = resumerProblem(e, expect.raisedBy)
        if (resumer !== undefined) cp.push(`${runId}#${e.seq}: ${resumer}`)
        const want = open === null ? undefined : expect.resolutions?.[open]
        if (want !== undefined && JSON.stringify(e.payload.resolution) !== JSON.stringify(want)) {
          cp.push(`${runId}#${e.seq}: resolution differs from the one the driver sent`)
        }
        open = null
      }
    }
    const last = list[list.length - 1]
    if (open !== null && last !== undefined && last.type !== 'run.completed' && last.type !== 'run.failed') {
      cp.push(`${runId}: checkpoint ${open} still open at the end of the trace`)
    }
  }
  if (expect.resolutions !== undefined) {
    const resumed = new Set(events.filter(e => e.payload.transition === 'resume').map(e => String(e.payload.checkpoint_id)))
    for (const id of Object.keys(expect.resolutions)) if (!resumed.has(id)) cp.push(`checkpoint ${id} was resolved but no resume appears`)
  }

  // Contract 4: each ownership transfer is a handoff that keeps the correlation and links both runs
  const own: string[] = []
  let transfers = 0
  for (const e of events) {
    if (e.type !== 'run.completed' || e.payload.transition !== 'handoff') continue
    transfers++
    const to = e.payload.handoff_to
    if (!isRecord(to) || typeof to.run_id !== 'string') { own.push(`${e.run_id}: handoff without a target run`); continue }
    const next = byRun.get(to.run_id)
    const started = next?.[0]
    if (started === undefined) { own.push(`${e.run_id}: handoff target ${to.run_id} is missing from the trace`); continue }
    const from = started.payload.handoff_from
    if (!isRecord(from) || from.run_id !== e.run_id) own.push(`${to.run_id}: run.started does not name ${e.run_id} as handoff_from`)
    if (started.correlation_id !== e.correlation_id) own.push(`${to.run_id}: handoff changed the correlation`)
    if (to.agent_id !== started.executor) own.push(`${e.run_id}: handoff names ${String(to.agent_id)} as the new owner, but ${to.run_id} is executed by ${started.executor}`)
    if (isRecord(from) && from.agent_id !== e.executor) own.push(`${to.run_id}: handoff_from names ${String(from.agent_id)}, but ${e.run_id} was executed by ${e.executor}`)
  }
  // ...and from the successor's side: a run that claims to take over another must be the one that run handed off to
  // (a second run claiming the same predecessor is a second owner of the task)
  for (const [runId, list] of byRun) {
    const claim = claimedPredecessor(runId, list[0], byRun, expect.complete === true)
    if (claim !== undefined) own.push(claim)
  }
  if (expect.transfers !== undefined && transfers !== expect.transfers) own.push(`expected ${expect.transfers} handoffs, found ${transfers}`)

  const result = {
    task_id: taskId,
    capability_ref: verdict(cap),
    task_correlation: verdict(corr),
    checkpoint_block: verdict(cp),
    ownership_handoff: verdict(own)
  }
  return { ...result, ok: result.capability_ref.ok && result.task_correlation.ok && result.checkpoint_block.ok && result.ownership_handoff.ok }
}
