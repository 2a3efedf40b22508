/**
 * Checks that read back, once every other check and its cleanup is done,
 * what the others left on the target: no run appeared for a task the target
 * refused, and every run of the target the kit learned of serves its whole
 * log, ending with the event of the run's state, each event a transition the
 * profile allows from the state before it (a canceled run ending failed). Runs ended by a cleanup
 * cancel are judged here too: no other check reads them after the cancel.
 * What run-logs reads stays in the kit, so the correlation checks that run
 * after it (runs-correlation, events-correlation) judge every run and event.
 */
import type { Run } from '../runlog/types.ts'
import { EVENTS_SYNC_PROTOCOL } from '../constants.ts'
import { KIT_LATE_RUN_MIN_AGE_MS, KIT_LOG_READ_TRIES, KIT_MAX_EVENT_BYTES_PER_READ, KIT_MAX_SYNC_PAGES } from './constants.ts'
import { CheckFailure, errorText, expect, pastPageBound, Undecided, type NoRunExpected, type Scope, type WireEvent } from './kit.ts'
import { payloadOf, type Check } from './checks-common.ts'

/** The event a run's log ends with in each state (protocols/events.md): running ends with its start or a progress (a resume is one). */
const END_OF_STATE: Record<Run['state'], readonly string[]> = {
  running: ['run.started', 'run.progress'],
  blocked: ['run.blocked'],
  completed: ['run.completed'],
  failed: ['run.failed']
}

function ofTarget (s: Scope, runId: string): boolean {
  return runId.split(':')[0] === s.kit.target
}

/** `seq:type` of a log's last few events. */
function shape (events: WireEvent[]): string {
  const tail = events.slice(-5).map(e => `${String(e.seq)}:${String(e.type)}`).join(' ')
  return events.length > 5 ? `… ${tail}` : tail
}

/**
 * The state a log gives, folded through the profile's transitions: run.started
 * only at seq 1; run.blocked and a plain run.progress only while running; a
 * resume (run.progress with transition resume) only while blocked;
 * run.completed while running (a handoff's while blocked too: the delegator
 * may hand a blocked run on); run.failed while running or blocked; nothing
 * after run.completed or run.failed. A string says the first step that is not
 * a transition of the profile.
 */
function foldLog (events: WireEvent[]): Run['state'] | string {
  let state: Run['state'] | undefined
  for (const e of events) {
    const type = String(e.type)
    const step = `${String(e.seq)}:${type}`
    if (type === 'run.started') {
      if (state !== undefined || e.seq !== 1) return `${step}: run.started only begins a log, at seq 1`
      state = 'running'
      continue
    }
    if (state === undefined) return `${step} before run.started`
    if (state === 'completed' || state === 'failed') return `${step} after the run ended ${state}`
    const how = payloadOf(e).transition
    const from: Record<string, { states: readonly string[], to: Run['state'] } | undefined> = {
      'run.blocked': { states: ['running'], to: 'blocked' },
      'run.progress': how === 'resume' ? { states: ['blocked'], to: 'running' } : { states: ['running'], to: 'running' },
      'run.completed': { states: how === 'handoff' ? ['running', 'blocked'] : ['running'], to: 'completed' },
      'run.failed': { states: ['running', 'blocked'], to: 'failed' }
    }
    const t = from[type]
    if (t === undefined) return `${step}: not an event type of the profile`
    if (!t.states.includes(state)) return `${step}${how === 'resume' ? ' (a resume)' : ''} while ${state}: the profile allows it only from ${t.states.join(' or ')}`
    state = t.to
  }
  return state ?? 'no event'
}

/** What is wrong with one run's log against its Run (undefined: nothing); its correlation is judged by events-correlation. */
function judgeLog (run: Run, events: WireEvent[], canceled: boolean): string | undefined {
  const last = events.at(-1)
  if (last === undefined) return 'the target serves no event of it'
  if (events[0]?.type !== 'run.started') return `its log starts with ${String(events[0]?.type)}, not run.started`
  if (last.seq !== run.last_seq) return `its log ends at seq ${String(last.seq)} (${shape(events)}) but the run's last_seq is ${run.last_seq}: the log is ${Number(last.seq) < run.last_seq ? 'cut short' : 'ahead of the run'}`
  if (!END_OF_STATE[run.state].includes(String(last.type))) return `the run is ${run.state} but its log ends with ${String(last.type)} (${shape(events)}); ${run.state} ends with ${END_OF_STATE[run.state].join(' or ')}`
  const to = run.handoff_to?.run_id
  if (to !== undefined && (payloadOf(last).handoff_to as { run_id?: unknown } | undefined)?.run_id !== to) return `the run was handed off to ${to} but its last event does not name it`
  const folded = foldLog(events)
  if (folded !== run.state) {
    return folded === 'running' || folded === 'blocked' || folded === 'completed' || folded === 'failed'
      ? `its log folds through the profile's transitions to ${folded}, but the run is ${run.state} (${shape(events)})`
      : `its log breaks the profile's transitions: ${folded} (${shape(events)})`
  }
  if (canceled && (run.state !== 'failed' || last.type !== 'run.failed')) return `the target accepted a cancel of it, yet it is ${run.state} and its log ends with ${String(last.type)} (${shape(events)}); a canceled run ends failed, with run.failed`
  return undefined
}

/** One run read back: its Run, then its whole log, again while a running run moves on between the two reads. */
async function readBack (s: Scope, runId: string): Promise<string | undefined> {
  for (let i = 1; ; i++) {
    let run: Run
    let events: WireEvent[]
    try {
      run = await s.getRun(runId)
      events = await s.readEvents(runId)
    } catch (err) {
      if (!(err instanceof CheckFailure)) throw err
      return err.message
    }
    const moved = run.state !== 'completed' && run.state !== 'failed' && Number(events.at(-1)?.seq) > run.last_seq
    if (moved && i < KIT_LOG_READ_TRIES) continue
    return judgeLog(run, events, s.kit.canceled.has(runId))
  }
}

/** What a raw read of a correlation listed: its run ids, and why the list may not be whole (undefined: every page was read). */
interface Served {
  ids: Set<string>
  /** Records were served (with or without a run id). */
  records: number
  /** The target answered a page with an error frame: what is past it is unknown. */
  unread?: string
  /** The target served more than a read may take, or claimed more without a record to page on from: the target is wrong. */
  wrong?: string
}

/**
 * The run ids of every record the target serves for `correlation`, taken raw
 * (nothing verified): how a late run is still seen when other records of the
 * same task cannot be read as AgentEvents. Bounded like every read of the
 * kit (KIT_MAX_SYNC_PAGES, KIT_MAX_EVENT_BYTES_PER_READ); it says why it
 * stopped when that was before the last page.
 */
async function servedRunIds (s: Scope, correlation: string): Promise<Served> {
  const out: Served = { ids: new Set<string>(), records: 0 }
  const what = `events of correlation ${correlation}`
  let cursor: Record<string, unknown> = {}
  let bytes = 0
  for (let page = 0; page < KIT_MAX_SYNC_PAGES; page++) {
    const frame = await s.call(s.n.bystander, EVENTS_SYNC_PROTOCOL, 'correlation', { correlation_id: correlation, ...cursor })
    if (!frame.ok) return { ...out, unread: `${what}, page ${page + 1}: ${errorText(frame)}` }
    bytes += Buffer.byteLength(JSON.stringify(frame.body ?? null))
    if (bytes > KIT_MAX_EVENT_BYTES_PER_READ) return { ...out, wrong: `${what}: the target served more than ${KIT_MAX_EVENT_BYTES_PER_READ} bytes of events (KIT_MAX_EVENT_BYTES_PER_READ)` }
    const records: unknown[] = Array.isArray(frame.body?.events) ? frame.body.events as unknown[] : []
    out.records += records.length
    for (const r of records) {
      const id = (typeof r === 'object' && r !== null ? r as WireEvent : {}).run_id
      if (typeof id === 'string') out.ids.add(id)
    }
    if (frame.body?.more !== true) return out
    const last = records.at(-1) as WireEvent | undefined
    if (typeof last?.run_id !== 'string' || typeof last.seq !== 'number') return { ...out, wrong: `${what}: the target claims more events but its last record names no run_id and seq to page on from` }
    cursor = { after_run: last.run_id, after_seq: last.seq }
  }
  return { ...out, wrong: pastPageBound(what).message }
}

/** The verdict on one refused task read again: a late run (or a wrong answer) fails, an unread rest is undecided. */
interface Late { fail?: string, undecided?: string }

/** What the target serves now for a task that must have no run (other than `allowed`): nothing, when the whole correlation was read and holds none. */
async function lateRuns (s: Scope, n: NoRunExpected): Promise<Late> {
  let events: WireEvent[]
  try {
    events = await s.readCorrelation(n.correlation)
  } catch (err) {
    if (!(err instanceof CheckFailure)) throw err
    // a late run among records that cannot be read is still a late run: the run ids the records name tell it
    const served = await servedRunIds(s, n.correlation)
    const hidden = [...served.ids].filter(r => !n.allowed.includes(r))
    for (const r of hidden) s.kit.learn(r, n.correlation)
    if (hidden.length > 0) return { fail: `${n.what}: refused, yet ${hidden.length} run(s) exist for ${n.correlation} later: ${hidden.join(', ')} (not all their records can be read: ${err.message})` }
    if (served.wrong !== undefined) return { fail: `${n.what}: ${n.correlation} cannot be read again: ${served.wrong}` }
    // an error frame hides what lies past it, a late run too: neither shown nor ruled out
    if (served.unread !== undefined) return { undecided: `${n.what}: ${n.correlation} cannot be read again whole (${served.unread}), so a late run is neither shown nor ruled out` }
    // a task that must have no event at all: a record of any kind shows something exists
    if (n.allowed.length === 0 && served.records > 0) return { fail: `${n.what}: refused, yet the target serves ${served.records} record(s) for ${n.correlation} later (${err.message})` }
    // read whole, raw: no run but the allowed ones; their records are judged by run-logs, which reads each run of the target
    s.note(`${n.correlation} read again raw only (${err.message}): no run but ${n.allowed.length === 0 ? 'none' : n.allowed.join(', ')}`)
    return {}
  }
  const runs = [...new Set(events.map(e => String(e.run_id)))].filter(r => !n.allowed.includes(r))
  if (runs.length === 0) return {}
  for (const r of runs) s.cite(r, events.filter(e => e.run_id === r))
  return { fail: `${n.what}: refused, yet ${runs.length} run(s) exist for ${n.correlation} later: ${runs.join(', ')}` }
}

export const LATE_CHECKS: Check[] = [
  {
    id: 'no-late-runs',
    title: 'every task the target refused (and showed no run for at once) still has no run at the end of the kit run, seconds later',
    run: async (s) => {
      const youngest = Math.max(0, ...s.kit.noRun.map(n => n.at))
      const wait = youngest + KIT_LATE_RUN_MIN_AGE_MS - Date.now()
      if (wait > 0) await new Promise(resolve => setTimeout(resolve, wait))
      s.live()
      const found: string[] = []
      const unsure: string[] = []
      for (const n of s.kit.noRun) {
        const late = await lateRuns(s, n)
        if (late.undecided !== undefined) unsure.push(`${n.check}: ${late.undecided}`)
        if (late.fail === undefined) continue
        s.kit.lateFailures.set(n.check, [...(s.kit.lateFailures.get(n.check) ?? []), late.fail])
        found.push(`${n.check}: ${late.fail}`)
      }
      s.note(`${s.kit.noRun.length} refused task(s) read again`)
      if (s.kit.noRun.length === 0) s.nothingSeen('no refused task to read again')
      expect(found.length === 0, `${found.length} refused task(s) have runs after all: ${found.join('; ')}`)
      // pass only when every refused task was read whole
      if (unsure.length > 0) throw new Undecided(`${unsure.length} refused task(s) cannot be read again whole: ${unsure.join('; ')}`)
    }
  },
  {
    id: 'run-logs',
    title: 'every run of the target the kit learned of, read back at the end (get_run, then its whole log): the log starts with run.started, ends at Run.last_seq, its last event is the one of the run\'s state, it folds through the profile\'s transitions to the run\'s state, and a run whose cancel the target accepted ends failed with run.failed',
    run: async (s) => {
      const ids = new Set([...s.kit.handles.keys(), ...s.kit.expected.keys(), ...s.kit.events.keys(), ...s.kit.known.keys(), ...s.kit.canceled])
      const runs = [...ids].filter(id => ofTarget(s, id)).sort()
      const bad: string[] = []
      for (const runId of runs) {
        // a check stopped for time ends here, not with one failed read per run
        s.live()
        const wrong = await readBack(s, runId)
        // a failed read names the run already
        if (wrong !== undefined) bad.push(wrong.includes(runId) ? wrong : `${runId}: ${wrong}`)
      }
      s.note(`${runs.length} runs of the target read back`)
      if (runs.length === 0) s.nothingSeen('the kit learned of no run of the target')
      expect(bad.length === 0, `${bad.length} of ${runs.length} run(s) of the target: ${bad.slice(0, 4).join('; ')}`)
    }
  }
]
