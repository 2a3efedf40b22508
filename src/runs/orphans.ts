/**
 * The executor's watch on the blocked runs it holds (protocols/liveness.md).
 * Liveness runs on the delegator's side: a blocked run waits for its
 * delegator's resume, however long the human behind it takes, and holds its
 * run slot until it ends. A delegator that blocks its runs and leaves for
 * good (throwaway keys, one per share of the slots) would hold every slot
 * for ever, across restarts. So the delegator of each blocked run, and each
 * agent the run authorizes to resume it, is asked now and then (get_verdict)
 * whether it is there. A run whose delegator and resumers have all been out
 * of reach for BLOCKED_ORPHAN_AFTER_MS, or whose delegator answers that it
 * holds no record of it, ends failed with DELEGATOR_LOST, and its slot is
 * free again. Any answer, or a new connection, from the delegator keeps the
 * run blocked; a verdict the delegator signed ends the run with that verdict.
 * The delegator writes the list of resumers itself, and may name this node
 * or any node that is always online: a resumer's answer keeps the run only
 * up to BLOCKED_ORPHAN_RESUMER_MAX_MS past the delegator's last sign of life,
 * and this node, which never resumes a run it executes, counts for nothing.
 */
import type { Connection } from '@libp2p/interface'
import { LIVENESS_MAX_CONCURRENT_PROBES, LIVENESS_VERDICT_ASK_TIMEOUT_MS } from '../constants.ts'
import { toAapError, unreached } from '../errors.ts'
import type { Logger } from '../logger.ts'
import type { AgentEvent, Run, RunFailure } from '../runlog/types.ts'
import { Limiter } from '../util/concurrency.ts'
import type { MeshHost } from '../wire/host.ts'
import type { CallOptions } from '../wire/rpc.ts'
import {
  BLOCKED_ORPHAN_AFTER_MS, BLOCKED_ORPHAN_CHECK_INTERVAL_MS, BLOCKED_ORPHAN_PROBES_PER_ROUND, BLOCKED_ORPHAN_RESUMER_MAX_MS, BLOCKED_ORPHAN_UNHELD_ANSWERS
} from './constants.ts'

/** Why a blocked run ended when nobody who may resume it could be found (protocols/errors.md). */
export const DELEGATOR_LOST: RunFailure['code'] = 'DELEGATOR_LOST'

export interface OrphanOptions {
  /** Nobody who may resume a blocked run was heard from for this long: it fails (default BLOCKED_ORPHAN_AFTER_MS). */
  blockedOrphanAfterMs?: number
  /** How often they are asked (default BLOCKED_ORPHAN_CHECK_INTERVAL_MS). */
  blockedCheckIntervalMs?: number
}

/** What a delegator (or resumer) answered: its verdict on the run, and, when it says, whether it holds a live record of it. */
export interface DelegatorAnswer { verdict: AgentEvent | null, held?: boolean }

export interface OrphanInit extends OrphanOptions {
  agentId: string
  host: MeshHost
  log: Logger
  /** The blocked runs this node executes now. */
  blocked: () => AsyncIterable<Run>
  /** get_verdict at `agent` about the run. */
  ask: (agent: string, runId: string, opts: CallOptions) => Promise<DelegatorAnswer>
  /** Take the delegator's verdict (recovery.ts adoptVerdict). */
  adoptVerdict: (runId: string, verdict: AgentEvent, peer: string) => Promise<Run>
  /** Fail the run with `code` when it is still blocked and `still` holds, on the run's lock; undefined when it was not failed. */
  failBlocked: (runId: string, code: RunFailure['code'], message: string, still: (run: Run) => boolean) => Promise<Run | undefined>
}

export interface OrphanStats {
  /** Check rounds run. */
  rounds: number
  /** get_verdict asks sent to delegators and resumers of blocked runs. */
  probes: number
  /** Asks that did not reach the agent. */
  probeFailures: number
  /** Delegators that answered they hold no live record of a run they were asked about. */
  unheld: number
  /** Runs ended with their delegator's verdict, found by an ask. */
  verdicts: number
  /** Blocked runs failed with DELEGATOR_LOST. */
  ended: number
}

export class BlockedOrphans {
  readonly stats: OrphanStats = { rounds: 0, probes: 0, probeFailures: 0, unheld: 0, verdicts: 0, ended: 0 }
  readonly afterMs: number
  readonly intervalMs: number
  /** How long past its delegator's last sign of life a resumer's answers may keep a run (BLOCKED_ORPHAN_RESUMER_MAX_MS, in ratio with afterMs). */
  readonly resumerMaxMs: number
  private readonly i: OrphanInit
  /** By agent: when it was last heard from (or first needed, when never). Only agents of blocked runs are kept. */
  private readonly heard = new Map<string, number>()
  /** By agent: its last answer that was not an error, which is all a resumer's presence is taken from. */
  private readonly answered = new Map<string, number>()
  /** Agents with an ask in flight. */
  private readonly probing = new Set<string>()
  /** By agent: when it was last asked (never: not there), so every agent gets its turn, whatever answers. */
  private readonly asked = new Map<string, number>()
  /** By agent: the asks so far, to take its runs in turn. */
  private readonly turns = new Map<string, number>()
  /** By run: its delegator's "not held" answers in a row. */
  private readonly unheldRuns = new Map<string, number>()
  private readonly limiter = new Limiter(LIVENESS_MAX_CONCURRENT_PROBES)
  private readonly stopping = new AbortController()
  private readonly inflight = new Set<Promise<void>>()
  private timer?: ReturnType<typeof setInterval>
  private round?: Promise<void>

  constructor (init: OrphanInit) {
    this.i = init
    this.afterMs = init.blockedOrphanAfterMs ?? BLOCKED_ORPHAN_AFTER_MS
    this.intervalMs = init.blockedCheckIntervalMs ?? BLOCKED_ORPHAN_CHECK_INTERVAL_MS
    // a smaller first bound (tests) shrinks the second with it: it is never shorter than the first
    this.resumerMaxMs = this.afterMs * (BLOCKED_ORPHAN_RESUMER_MAX_MS / BLOCKED_ORPHAN_AFTER_MS)
  }

  start (): void {
    this.i.host.addEventListener('connection:open', this.onConnection)
    this.timer = setInterval(() => { this.tick() }, this.intervalMs)
    this.timer.unref?.()
  }

  async stop (): Promise<void> {
    clearInterval(this.timer)
    this.i.host.removeEventListener('connection:open', this.onConnection)
    this.stopping.abort(new Error('node stopping'))
    await this.round
    await Promise.allSettled([...this.inflight])
  }

  /** A connection with a delegator or resumer of a blocked run opened: it is there. */
  private readonly onConnection = (evt: CustomEvent<Connection>): void => {
    const agent = evt.detail.remotePeer.toString()
    if (this.heard.has(agent)) this.heard.set(agent, Date.now())
  }

  /** One round at a time: a slow store or many runs never stacks rounds up. */
  private tick (): void {
    if (this.round !== undefined) return
    this.round = this.check().catch((err: unknown) => {
      this.i.log.error({ err: toAapError(err) }, 'a check of blocked runs\' delegators failed')
    }).finally(() => { this.round = undefined })
  }

  /**
   * Who may resume the run, besides this node: an executor never resumes a
   * run it executes, so a run that names it among its resumers gains nothing.
   */
  private parties (run: Run): string[] {
    return [...new Set([run.delegator, ...run.authorized])].filter(a => a !== this.i.agentId)
  }

  /** The agents the run authorizes to resume it, other than its delegator and this node. */
  private resumers (run: Run): string[] {
    return this.parties(run).filter(a => a !== run.delegator)
  }

  /** Past this time a resumer's answer no longer keeps the run: resumerMaxMs after its delegator's last sign of life. */
  private resumerCap (run: Run, now: number): number {
    return (this.heard.get(run.delegator) ?? now) + this.resumerMaxMs - this.afterMs
  }

  /**
   * How long the run has gone unheard from: since its delegator's last sign
   * of life, or a resumer's last answer, whichever came later; but a
   * resumer's answer counts at most up to resumerCap, so the run ends
   * resumerMaxMs after its delegator was last heard from, whoever else
   * answers. 0 when this node is its delegator (it is always there).
   */
  private silence (run: Run, now: number): number {
    if (run.delegator === this.i.agentId) return 0
    let last = this.heard.get(run.delegator) ?? now
    const cap = this.resumerCap(run, now)
    for (const r of this.resumers(run)) {
      const t = this.answered.get(r)
      if (t !== undefined) last = Math.max(last, Math.min(t, cap))
    }
    return now - last
  }

  /** Whom to ask about the run: its delegator, and its resumers while their answers may still keep it. */
  private askable (run: Run, now: number): string[] {
    return now < this.resumerCap(run, now) ? this.parties(run) : this.parties(run).filter(a => a === run.delegator)
  }

  private async check (): Promise<void> {
    this.stats.rounds++
    const now = Date.now()
    const runsOf = new Map<string, Run[]>()
    const orphans: Run[] = []
    const needy: Run[] = []
    const blocked = new Set<string>()
    for await (const run of this.i.blocked()) {
      if (this.stopping.signal.aborted) return
      if (run.state !== 'blocked') continue
      blocked.add(run.run_id)
      for (const p of this.parties(run)) {
        if (!this.heard.has(p)) this.heard.set(p, now)
        const list = runsOf.get(p)
        if (list === undefined) runsOf.set(p, [run])
        else list.push(run)
      }
      const silence = this.silence(run, now)
      if (silence >= this.afterMs) orphans.push(run)
      // a run one of whose parties was heard from within the interval needs no ask
      else if (silence >= this.intervalMs) needy.push(run)
    }
    // agents of no blocked run any more are forgotten: the maps stay as small as the blocked runs' parties
    for (const agent of this.heard.keys()) {
      if (!runsOf.has(agent)) { this.heard.delete(agent); this.answered.delete(agent); this.asked.delete(agent); this.turns.delete(agent) }
    }
    for (const runId of this.unheldRuns.keys()) {
      if (!blocked.has(runId)) this.unheldRuns.delete(runId)
    }
    for (const run of orphans) {
      const silent = this.silence(run, Date.now())
      const resumers = this.resumers(run).length > 0
        ? ` (an agent it authorized keeps a run at most ${this.resumerMaxMs} ms past its delegator's last sign of life)`
        : ''
      await this.end(run, `nobody who may resume the run could be reached for ${silent} ms (bound ${this.afterMs} ms)${resumers}`,
        (r) => this.silence(r, Date.now()) >= this.afterMs)
    }
    // one party of each run that needs an ask, the one asked longest ago; then those asked longest ago first:
    // agents that never answer (a run may name any ids it likes as resumers) go in turn with the rest, never
    // ahead of them every round
    const askedAt = (a: string): number => this.asked.get(a) ?? 0
    const due = new Set<string>()
    for (const run of needy) {
      let pick: string | undefined
      for (const p of this.askable(run, now)) {
        if (!this.probing.has(p) && (pick === undefined || askedAt(p) < askedAt(pick))) pick = p
      }
      if (pick !== undefined) due.add(pick)
    }
    const chosen = [...due].sort((a, b) => askedAt(a) - askedAt(b)).slice(0, BLOCKED_ORPHAN_PROBES_PER_ROUND)
    for (const agent of chosen) {
      this.asked.set(agent, Date.now())
      const runs = runsOf.get(agent) ?? []
      const turn = this.turns.get(agent) ?? 0
      this.turns.set(agent, turn + 1)
      const run = runs[turn % runs.length]
      if (run !== undefined) this.spawn(agent, run)
    }
  }

  private spawn (agent: string, run: Run): void {
    this.probing.add(agent)
    const p = this.limiter.run(async () => this.probe(agent, run)).catch((err: unknown) => {
      this.i.log.error({ err: toAapError(err), run_id: run.run_id, agent }, 'an ask of a blocked run\'s delegator failed')
    }).finally(() => { this.probing.delete(agent) })
    this.inflight.add(p)
    void p.finally(() => { this.inflight.delete(p) })
  }

  private async probe (agent: string, run: Run): Promise<void> {
    if (this.stopping.signal.aborted) return
    this.stats.probes++
    let answer: DelegatorAnswer
    try {
      answer = await this.i.ask(agent, run.run_id, { signal: this.stopping.signal, callTimeoutMs: LIVENESS_VERDICT_ASK_TIMEOUT_MS })
    } catch (err) {
      if (this.stopping.signal.aborted) return
      const e = toAapError(err)
      if (unreached(e)) {
        this.stats.probeFailures++
        this.i.log.debug({ agent, run_id: run.run_id, err: e }, 'the delegator (or a resumer) of a blocked run could not be reached')
        return
      }
      // an error of its own is an answer all the same: the agent is there, and as the delegator of a run it keeps
      // it. As a resumer it does not: the error says it did not take the ask up (a node that does not serve it,
      // or refuses it), not that anyone will resume the run; a real resumer that was busy is asked again
      this.heard.set(agent, Date.now())
      this.i.log.info({ agent, run_id: run.run_id, err: e }, 'the delegator (or a resumer) of a blocked run answered the ask with an error: it is there, though as a resumer that keeps no run')
      return
    }
    const at = Date.now()
    this.heard.set(agent, at)
    this.answered.set(agent, at)
    // only the delegator's word about the run counts; a resumer is asked whether it is there
    if (agent !== run.delegator) return
    if (answer.verdict !== null) {
      try {
        await this.i.adoptVerdict(run.run_id, answer.verdict, agent)
        this.stats.verdicts++
      } catch (err) {
        this.i.log.warn({ err: toAapError(err), run_id: run.run_id }, 'a verdict from the delegator of a blocked run could not be taken')
      }
      return
    }
    if (answer.held !== false) {
      this.unheldRuns.delete(run.run_id)
      return
    }
    this.stats.unheld++
    const n = (this.unheldRuns.get(run.run_id) ?? 0) + 1
    this.unheldRuns.set(run.run_id, n)
    if (n < BLOCKED_ORPHAN_UNHELD_ANSWERS) return
    this.unheldRuns.delete(run.run_id)
    await this.end(run, `its delegator answered ${n} times that it holds no live record of the run`, () => true)
  }

  /** Fail a blocked run with DELEGATOR_LOST, if it is still blocked and `still` holds on its lock. */
  private async end (run: Run, message: string, still: (run: Run) => boolean): Promise<void> {
    if (this.stopping.signal.aborted) return
    try {
      const ended = await this.i.failBlocked(run.run_id, DELEGATOR_LOST, message, still)
      if (ended === undefined) return
      this.stats.ended++
      this.i.log.warn({ run_id: run.run_id, delegator: run.delegator }, `a blocked run is given up: ${message}`)
    } catch (err) {
      this.i.log.warn({ err: toAapError(err), run_id: run.run_id }, 'a blocked run whose delegator is gone could not be failed: asked again next round')
    }
  }
}
