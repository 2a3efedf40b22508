/**
 * Campaign part "kill9": executors, sidecar agents and delegators, each a
 * node in its own process (kill9-node.ts) on a fixed port of 127.0.0.1 with
 * its data dir, run under continuous load (the delegators delegate to every
 * executor and sidecar without pause). At random instants one of them is
 * killed with SIGKILL and started again from its data dir at once, `kills`
 * times in all. Then the load stops, the liveness bounds pass, and every node
 * dumps what its datastore holds.
 * Figures: acknowledged runs lost (a run handle a delegator got that its
 * executor does not hold), duplicated terminal events or forks (a log with
 * two terminal events or a gap, or a delegator's copy that differs from the
 * executor's log at some seq), runs stuck without an end after the liveness
 * bounds (at the executor or in the delegator's record), all must be 0.
 */
import { fork, type ChildProcess } from 'node:child_process'
import { mkdtemp, rm } from 'node:fs/promises'
import { createServer } from 'node:net'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { fileURLToPath } from 'node:url'
import { LIVENESS_PROBE_TIMEOUT_MS } from '../../src/constants.ts'
import { latencyFigures, prng, settleAll } from './common.ts'
import type { DumpedRun, Kill9Config } from './kill9-node.ts'
import type { PartResult } from './report.ts'

export interface Kill9Options {
  kills: number
  executors: number
  sidecars: number
  delegators: number
  /** Delegator workers each. */
  workers: number
  /** The kills stop at their count or after this long. */
  deadlineMs: number
  seed: number
}

type Role = 'hub' | 'executor' | 'sidecar' | 'delegator'

/** Short liveness bounds, so the campaign sees them pass (the defaults are 30 s and 5 s). */
const LOST_AFTER_MS = 4_000
const PROBE_INTERVAL_MS = 1_000
const WORK_MAX_MS = 400
/** Longest random pause between two kills. */
const KILL_GAP_MAX_MS = 200
/** Processes starting again at once, at most. */
const MAX_CONCURRENT_RESTARTS = 6
const READY_TIMEOUT_MS = 60_000
const REQUEST_TIMEOUT_MS = 60_000
const START_ATTEMPTS = 3
/** After the load stops: every run must have ended within the liveness bounds plus this. */
const SETTLE_MARGIN_MS = 15_000
const DUMP_INTERVAL_MS = 1_000
/**
 * The storm starts once a first run is acknowledged, or after this: on a
 * loaded machine the delegators' first joins and calls could all fall in the
 * first kills, and a quick storm then ended before any run was taken.
 */
const FIRST_ACK_TIMEOUT_MS = 30_000

const NODE_SCRIPT = fileURLToPath(new URL('./kill9-node.ts', import.meta.url))
const TERMINAL_TYPES = new Set(['run.completed', 'run.failed'])

interface Proc {
  role: Role
  name: string
  dataDir: string
  port: number
  config: Kill9Config
  agentId?: string
  child?: ChildProcess
  /** Set while killed and not yet ready again. */
  restarting?: Promise<void>
  expectExit: boolean
  kills: number
  ownExits: number
  pending: Map<number, (msg: Record<string, unknown>) => void>
  next: number
}

interface Ack { run_id: string, executor: string, correlation_id: string, delegator: string }

async function freePort (): Promise<number> {
  return new Promise((resolve, reject) => {
    const s = createServer()
    s.once('error', reject)
    s.listen(0, '127.0.0.1', () => {
      const a = s.address()
      s.close(() => { resolve(typeof a === 'object' && a !== null ? a.port : 0) })
    })
  })
}

function addr (p: Proc): string {
  return `/ip4/127.0.0.1/tcp/${p.port}/p2p/${p.agentId ?? ''}`
}

export async function runKill9 (o: Kill9Options): Promise<PartResult> {
  const result: PartResult = { name: 'kill9', title: 'kill -9 of executors, delegators and sidecars under load', built: true, ran: true }
  const root = await mkdtemp(join(tmpdir(), 'aap-campaign-kill9-'))
  const env = { ...process.env, NODE_COMPILE_CACHE: join(tmpdir(), 'aap-campaign-compile-cache') }
  const procs: Proc[] = []
  const acks = new Map<string, Ack>()
  const firstAck = Promise.withResolvers<void>()
  const startMs: number[] = []
  /** Where a start's time goes, inside the child: imports (process start to main), createMeshNode, node.start(). */
  const startPhases: Record<string, number[]> = {}
  let startFailures = 0
  const r = prng(o.seed)
  /** Restarts under way (the storm's): all settle before the cleanup stops the nodes and removes their data dirs. */
  const restarts = new Set<Promise<void>>()

  const start = async (p: Proc): Promise<void> => {
    for (let attempt = 1; ; attempt++) {
      const t0 = performance.now()
      const child = fork(NODE_SCRIPT, [p.role, p.dataDir, String(p.port), JSON.stringify(p.config)], { env, stdio: ['ignore', 'ignore', 'inherit', 'ipc'] })
      p.expectExit = false
      try {
        const info = await new Promise<Record<string, unknown>>((resolve, reject) => {
          const timer = setTimeout(() => { reject(new Error(`${p.name} not ready within ${READY_TIMEOUT_MS} ms`)) }, READY_TIMEOUT_MS)
          child.once('exit', (code, signal) => { clearTimeout(timer); reject(new Error(`${p.name} exited (${code ?? signal}) before it was ready`)) })
          child.on('message', (msg: Record<string, unknown>) => {
            if (msg.type === 'ready') { clearTimeout(timer); resolve(msg) } else if (msg.type === 'ack') {
              acks.set(String(msg.run_id), { run_id: String(msg.run_id), executor: String(msg.executor), correlation_id: String(msg.correlation_id), delegator: p.agentId ?? '' })
              firstAck.resolve()
            } else if (typeof msg.id === 'number') p.pending.get(msg.id)?.(msg)
          })
        })
        const ph = info.phases as Record<string, number> | undefined
        if (ph !== undefined) for (const [k, v] of Object.entries(ph)) (startPhases[k] ??= []).push(v)
        if (p.agentId !== undefined && info.agentId !== p.agentId) throw new Error(`${p.name} came back as another agent (${String(info.agentId)}): its key was not kept`)
        p.agentId = String(info.agentId)
        p.child = child
        child.once('exit', () => { if (!p.expectExit) p.ownExits++ })
        startMs.push(performance.now() - t0)
        return
      } catch (err) {
        startFailures++
        child.kill('SIGKILL')
        if (attempt >= START_ATTEMPTS) throw err
      }
    }
  }

  const request = async (p: Proc, cmd: string): Promise<Record<string, unknown>> => {
    const child = p.child
    if (child === undefined) throw new Error(`${p.name} is not running`)
    const id = ++p.next
    return new Promise((resolve, reject) => {
      const timer = setTimeout(() => { p.pending.delete(id); reject(new Error(`${p.name} did not answer ${cmd} within ${REQUEST_TIMEOUT_MS} ms`)) }, REQUEST_TIMEOUT_MS)
      p.pending.set(id, (msg) => { clearTimeout(timer); p.pending.delete(id); resolve(msg) })
      child.send({ id, cmd })
    })
  }

  const kill = async (p: Proc): Promise<void> => {
    const child = p.child
    if (child === undefined) return
    p.expectExit = true
    const gone = new Promise<void>(resolve => { if (child.exitCode !== null || child.signalCode !== null) resolve(); else child.once('exit', () => { resolve() }) })
    child.kill('SIGKILL')
    await gone
    p.kills++
    p.child = undefined
  }

  try {
    const config = (peers: Kill9Config['peers']): Kill9Config => ({ peers, lostAfterMs: LOST_AFTER_MS, probeIntervalMs: PROBE_INTERVAL_MS, workers: o.workers, workMaxMs: WORK_MAX_MS })
    const make = async (role: Role, i: number, peers: Kill9Config['peers']): Promise<Proc> => {
      const p: Proc = { role, name: `${role}-${i}`, dataDir: join(root, `${role}-${i}`), port: await freePort(), config: config(peers), expectExit: false, kills: 0, ownExits: 0, pending: new Map(), next: 0 }
      procs.push(p)
      await start(p)
      return p
    }
    const hub = await make('hub', 0, [])
    const workers = await Promise.all([
      ...Array.from({ length: o.executors }, async (_, i) => make('executor', i, [])),
      ...Array.from({ length: o.sidecars }, async (_, i) => make('sidecar', i, [{ agentId: hub.agentId ?? '', addr: addr(hub) }]))
    ])
    const targets = workers.map(p => ({ agentId: p.agentId ?? '', addr: addr(p) }))
    await Promise.all(Array.from({ length: o.delegators }, async (_, i) => make('delegator', i, targets)))

    // the storm: kill one at a random instant, start it again at once from its data dir (once the load
    // reaches an executor; if none is reached in time, the check below says so)
    let waited: ReturnType<typeof setTimeout> | undefined
    await Promise.race([firstAck.promise, new Promise(resolve => { waited = setTimeout(resolve, FIRST_ACK_TIMEOUT_MS) })])
    clearTimeout(waited)
    const killable = procs.filter(p => p.role !== 'hub')
    const started = performance.now()
    let killed = 0
    while (killed < o.kills && performance.now() - started < o.deadlineMs) {
      await new Promise(resolve => setTimeout(resolve, Math.floor(r() * KILL_GAP_MAX_MS)))
      const candidates = killable.filter(p => p.child !== undefined && p.restarting === undefined)
      if (candidates.length === 0 || restarts.size >= MAX_CONCURRENT_RESTARTS) {
        if (restarts.size > 0) await Promise.race(restarts)
        continue
      }
      const victim = candidates[Math.floor(r() * candidates.length)]!
      await kill(victim)
      killed++
      if (killed % 100 === 0) console.log(`  kill9: ${killed} kills, ${acks.size} runs acknowledged (${Math.round((performance.now() - started) / 1000)} s)`)
      const again: Promise<void> = start(victim).finally(() => { victim.restarting = undefined; restarts.delete(again) })
      victim.restarting = again
      restarts.add(again)
    }
    await settleAll([...restarts])
    const stormSeconds = (performance.now() - started) / 1000
    // nodes that died on their own during the storm start again too
    for (const p of procs) if (p.child === undefined || p.child.exitCode !== null) await start(p)

    // the load stops; every acknowledged run must end within the liveness bounds
    const delegators = procs.filter(p => p.role === 'delegator')
    const failures: Record<string, number> = {}
    for (const d of delegators) {
      const q = await request(d, 'quiet')
      for (const [k, v] of Object.entries(q.failures as Record<string, number>)) failures[k] = (failures[k] ?? 0) + v
    }
    const settleBound = LOST_AFTER_MS + PROBE_INTERVAL_MS + LIVENESS_PROBE_TIMEOUT_MS + WORK_MAX_MS + SETTLE_MARGIN_MS
    const settleStart = performance.now()
    let view = await snapshot(procs, request)
    while (performance.now() - settleStart < settleBound && !allEnded(view, acks)) {
      await new Promise(resolve => setTimeout(resolve, DUMP_INTERVAL_MS))
      view = await snapshot(procs, request)
    }
    const settleSeconds = (performance.now() - settleStart) / 1000
    const a = analyse(view, acks)
    if (acks.size === 0) throw new Error(`no run was acknowledged: the load never reached the executors (${JSON.stringify(failures)})`)

    const byRole = (role: Role): number => procs.filter(p => p.role === role).reduce((s, p) => s + p.kills, 0)
    const ownExits = procs.reduce((s, p) => s + p.ownExits, 0)
    const st = latencyFigures(startMs, startFailures)
    result.musts = [
      { figure: 'acknowledged runs lost', value: a.lost, max: 0 },
      { figure: 'duplicated terminal events or forks', value: a.duplicated + a.forks, max: 0 },
      { figure: 'delegator records that end otherwise than the executor\'s run', value: a.disagree, max: 0 },
      { figure: 'runs stuck without an end after the liveness bounds', value: a.stuckAtExecutor + a.stuckAtDelegator, max: 0 },
      { figure: 'nodes that exited without being killed', value: ownExits, max: 0 },
      { figure: `kills short of the ${o.kills} asked (the deadline came first)`, value: o.kills - killed, max: 0 }
    ]
    result.figures = [
      ['kills (SIGKILL), all / executors / sidecars / delegators', `${killed} / ${byRole('executor')} / ${byRole('sidecar')} / ${byRole('delegator')}`],
      ['nodes', `${o.executors} executors, ${o.sidecars} sidecar agents (joined through a hub node), ${o.delegators} delegators with ${o.workers} workers each`],
      ['seconds of killing / of settling after the load stopped', `${Math.round(stormSeconds)} / ${Math.round(settleSeconds)} (bound ${Math.round(settleBound / 1000)})`],
      ['node starts (ms from fork to serving)', `n ${st.n}, p50 ${st.p50}, p99 ${st.p99}, max ${st.max}; failed starts retried ${startFailures}`],
      ['node starts, p50 of each phase in the child (ms)', Object.entries(startPhases).map(([k, v]) => `${k} ${latencyFigures(v, 0).p50}`).join(', ')],
      ['run handles acknowledged to delegators', acks.size],
      ['delegations refused or failed (never acknowledged)', Object.entries(failures).map(([k, v]) => `${k} ${v}`).join(', ') || 'none'],
      ['acknowledged runs held by their executor', `${acks.size - a.lost} of ${acks.size}`],
      ['how the acknowledged runs ended at their executor', Object.entries(a.ends).sort().map(([k, v]) => `${k} ${v}`).join(', ')],
      ['runs held by the executors (acknowledged or not)', a.executorRuns],
      ['acknowledged runs in no delegator record (the delegator was killed before writing it)', a.noRecord],
      ['delegator records compared with the executor\'s run / event copies compared', `${a.recordsCompared} / ${a.copiesCompared}`],
      ['runs whose delegator record ends otherwise than the executor\'s run', a.disagree],
      ['logs with two terminal events / with a gap in seq', `${a.duplicated} / ${a.gaps}`],
      ['delegator copies differing from the executor\'s log (forks)', a.forks],
      ['runs not ended at the executor / in the delegator\'s record', `${a.stuckAtExecutor} / ${a.stuckAtDelegator}`],
      ['verdicts whose executor was not heard from again when the settling ended (open notices)', view.openNotices]
    ]
    if (a.examples.length > 0) result.figures.push(['examples', a.examples.slice(0, 6).join('; ')])
    for (const e of a.examples.slice(0, 20)) console.log(`  kill9 example: ${e}`)
    result.notes = [
      `Seed ${o.seed}; every node is a process of its own (scripts/campaign/kill9-node.ts) with its key and LevelDB datastore in its data dir, restarted on the same TCP port of 127.0.0.1 after each SIGKILL; at most ${MAX_CONCURRENT_RESTARTS} are down at once, the next kill comes after a random pause of up to ${KILL_GAP_MAX_MS} ms. Liveness bounds: lostAfterMs ${LOST_AFTER_MS}, probeIntervalMs ${PROBE_INTERVAL_MS}. A handler reports progress once and works up to ${WORK_MAX_MS} ms. "Acknowledged" is a run handle a delegator's delegate() returned and told the parent of (a handle whose message the kill cut off is not counted). After the kills stop, the delegators stop calling, and every node dumps its datastore once a second until every acknowledged run has ended or the bound has passed.`
    ]
  } catch (err) {
    result.error = (err as Error).stack ?? (err as Error).message
  } finally {
    // a restart still starting its child (the storm failed on another) ends first, or its child would outlive the cleanup
    await Promise.allSettled([...restarts])
    for (const p of procs) {
      p.expectExit = true
      if (p.child !== undefined) {
        try { await request(p, 'stop') } catch (err) { console.error(`kill9: ${p.name} did not stop: ${(err as Error).message}`) }
        if (p.child.exitCode === null && p.child.signalCode === null) p.child.kill('SIGKILL')
      }
    }
    await rm(root, { recursive: true, force: true })
  }
  return result
}

interface View { byExecutor: Map<string, Map<string, DumpedRun>>, copies: Map<string, DumpedRun>, openNotices: number }

async function snapshot (procs: Proc[], request: (p: Proc, cmd: string) => Promise<Record<string, unknown>>): Promise<View> {
  const byExecutor = new Map<string, Map<string, DumpedRun>>()
  const copies = new Map<string, DumpedRun>()
  let openNotices = 0
  for (const p of procs) {
    if (p.role === 'hub') continue
    const d = await request(p, 'dump')
    if (typeof d.error === 'string') throw new Error(`${p.name} could not dump: ${d.error}`)
    openNotices += typeof d.openNotices === 'number' ? d.openNotices : 0
    if (p.role === 'delegator') for (const c of d.copies as DumpedRun[]) copies.set(c.run_id, c)
    else byExecutor.set(p.agentId ?? '', new Map((d.runs as DumpedRun[]).map(x => [x.run_id, x])))
  }
  return { byExecutor, copies, openNotices }
}

const ended = (state: string | undefined): boolean => state === 'completed' || state === 'failed'

function allEnded (v: View, acks: Map<string, Ack>): boolean {
  // verdicts not yet settled against their executor's log (protocols/liveness.md)
  if (v.openNotices > 0) return false
  for (const runs of v.byExecutor.values()) for (const run of runs.values()) if (!ended(run.state)) return false
  for (const c of v.copies.values()) if (!ended(c.state)) return false
  for (const a of acks.values()) if (!ended(v.byExecutor.get(a.executor)?.get(a.run_id)?.state)) return false
  return true
}

function analyse (v: View, acks: Map<string, Ack>): {
  lost: number, duplicated: number, gaps: number, forks: number, disagree: number, stuckAtExecutor: number, stuckAtDelegator: number,
  noRecord: number, recordsCompared: number, copiesCompared: number, executorRuns: number, ends: Record<string, number>, examples: string[]
} {
  const out = { lost: 0, duplicated: 0, gaps: 0, forks: 0, disagree: 0, stuckAtExecutor: 0, stuckAtDelegator: 0, noRecord: 0, recordsCompared: 0, copiesCompared: 0, executorRuns: 0, ends: {} as Record<string, number>, examples: [] as string[] }
  for (const runs of v.byExecutor.values()) {
    for (const run of runs.values()) {
      out.executorRuns++
      const terminals = run.events.filter(e => TERMINAL_TYPES.has(e.split(':')[1] ?? '')).length
      if (terminals > 1) { out.duplicated++; out.examples.push(`${run.run_id}: ${terminals} terminal events`) }
      if (run.events.some((e, i) => Number(e.split(':')[0]) !== i + 1)) { out.gaps++; out.examples.push(`${run.run_id}: seq gap`) }
      if (!ended(run.state)) out.stuckAtExecutor++
    }
  }
  for (const a of acks.values()) {
    const run = v.byExecutor.get(a.executor)?.get(a.run_id)
    if (run === undefined) { out.lost++; out.examples.push(`${a.run_id}: acknowledged, not at its executor`); continue }
    const end = run.state === 'failed' ? `failed ${run.failure ?? ''}`.trim() : run.state
    out.ends[end] = (out.ends[end] ?? 0) + 1
    const copy = v.copies.get(a.run_id)
    if (copy === undefined) { out.noRecord++; continue }
    out.recordsCompared++
    if (!ended(copy.state)) out.stuckAtDelegator++
    else if (copy.state !== run.state || (copy.failure ?? '') !== (run.failure ?? '')) {
      out.disagree++
      out.examples.push(`${a.run_id}: delegator ${copy.state} ${copy.failure ?? ''}, executor ${run.state} ${run.failure ?? ''}`)
    }
    if (copy.events.length > 0) {
      out.copiesCompared++
      const head = (e: string | undefined): string | undefined => e?.split('|')[0]
      const differs = copy.events.some((e, i) => run.events[i] !== undefined && head(run.events[i]) !== head(e)) ||
        copy.events.filter(e => TERMINAL_TYPES.has(e.split(':')[1] ?? '')).length > 1 ||
        (copy.events.length > run.events.length)
      const show = (events: string[]): string => events.map(e => { const [h, ...rest] = e.split('|'); return `${(h ?? '').split(':').slice(0, 2).join(':')} ${rest.join(' ')}`.trim() }).join(', ')
      if (differs) { out.forks++; out.examples.push(`${a.run_id}: delegator copy [${show(copy.events)}] executor [${show(run.events)}]`) }
    }
  }
  return out
}
