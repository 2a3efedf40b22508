/**
 * The Loops end-to-end scenario, driven the way an L2 (HACP) coordinator
 * would drive the mesh, over many concurrent tasks:
 *
 *   task.create/assign  -> discover + agent.delegate(task_id)
 *   (agent works)       -> run.progress
 *   checkpoint.raise    -> agent.block(checkpoint_id)   (raised by the coordinator: the delegator blocks the run)
 *   checkpoint.resolve  -> agent.resume(resolution)
 *   ownership.transfer  -> agent.handoff(new agent)
 *   (new agent works)   -> run.completed
 *   audit.replay        -> events.replay on a node that took no part, checked against the four contracts
 *
 * Observers on other nodes follow each task's events to measure delivery.
 * Optional churn stops and restarts uninvolved nodes; optional hostile nodes
 * publish forged cards and events. Everything the report claims is counted here.
 */
import { mkdtemp } from 'node:fs/promises'
import { cpus, tmpdir } from 'node:os'
import { join } from 'node:path'
import { CONNECTION_GRACE_MS, CONNECTIONS_MAX } from '../constants.ts'
import type { AgentCard, CapabilityRef } from '../card/card.ts'
import { AapError } from '../errors.ts'
import { executorOfRun } from '../runlog/event.ts'
import type { EventSubscription } from '../events/subscription.ts'
import type { AgentEvent, Run } from '../runlog/types.ts'
import { SIM_CAPABILITIES, checkpointOf, installAgent, simCard } from './agents.ts'
import { checkTrace } from './contracts.ts'
import { isGenuineCard } from './genuine.ts'
import { restartSimNode, startSimMesh, stopSimNode, type SimNode } from './mesh.ts'
import { groupFigures, groupSettle, remoteHostiles, startGroups } from './group.ts'
import { quietAfterAnnouncements } from './quiet-discover.ts'
import { setUpHostile } from './hostile.ts'
import { ConnectionSampler, ProcessMeter, SIM_SETTLE_MARGIN_MS, connectionsOf, resourcesOf, settleConnections } from './resources.ts'
import { memberLog, spawnWorker, spawnWorkers, stopWorker, withTimeout, type Member } from './processes.ts'
import { seeded } from './prng.ts'
import { diffStats, sumStats } from './discovery-figures.ts'
import { SIM_QUIET_DISCOVERS, quietDiscoverPasses, quietFigures } from './quiet-discover.ts'
import { findAgents } from './find-agents.ts'
import { eventKey, genuineHashOf, type Arrival } from './observed.ts'
import { tallyTask } from './task-tally.ts'
import { sourceCommit } from './commit.ts'
import { Counter, renderSummary, type SimReport } from './report.ts'
import type { ScenarioOptions } from './scenario-options.ts'
import { Started } from './started.ts'

export { DEFAULT_SCENARIO, type ScenarioOptions } from './scenario-options.ts'

export { seeded }

const SIM_ANNOUNCE_CONCURRENCY = 4
const SIM_ANNOUNCE_TIMEOUT_MS = 30_000
/**
 * Hostile nodes that follow each task's topic and forge its events (seeded
 * picks). All of them did before: at 500 nodes that was 50 per task, ten
 * times the honest followers, and their forgeries and the gossip they drew
 * loaded the driver's process (where the hostile nodes ran then) with work that
 * grew with the size of the mesh rather than with the tasks.
 */
const SIM_HOSTILE_FOLLOWERS_PER_TASK = 5

interface TaskRecord {
  task_id: string
  runs: Run[]
  ok: boolean
  completed: boolean
  problems: string[]
  /** Observer subscriptions: the keys they received (any event) and every event they accepted. */
  observed: Array<{ node: SimNode, seen: Set<string>, arrivals: Arrival[] }>
}

export async function runScenario (opts: ScenarioOptions): Promise<SimReport> {
  // what the run starts is stopped when it ends, and when it fails on the way: no node or process left running
  const running = new Started()
  try {
    return await runStarted(opts, running)
  } finally {
    await running.stop()
  }
}

async function runStarted (opts: ScenarioOptions, running: Started): Promise<SimReport> {
  const random = seeded(opts.seed)
  const pick = <T>(xs: T[]): T => {
    const x = xs[Math.floor(random() * xs.length)]
    if (x === undefined) throw new Error('pick from an empty list')
    return x
  }
  const log = opts.onProgress ?? (() => {})
  const started = Date.now()
  const meter = new ProcessMeter()

  // ---- the mesh --------------------------------------------------------------------
  const hostileCount = Math.min(Math.floor(opts.nodes * opts.hostileShare), Math.floor(opts.nodes / 3))
  // with --processes, agents run in worker processes; drivers, observers, auditors and hostile nodes here
  // with perProcess, groups of agents run in group processes, the hostile nodes in a hostile group; drivers, observers, auditors and a few agents here
  const grouped = opts.perProcess !== undefined && opts.perProcess > 0
  if (grouped && (opts.processes || opts.churn)) throw new Error('perProcess goes with neither --processes nor --churn')
  const localCount = opts.processes ? Math.max(6, hostileCount + 5) : grouped ? Math.min(opts.nodes - hostileCount, opts.observers + 5) : opts.nodes
  const workerCount = opts.processes ? opts.nodes - localCount : 0
  if (opts.processes && workerCount < 3) throw new Error(`--processes needs at least ${localCount + 3} nodes`)
  const mesh = await startSimMesh({
    nodes: localCount,
    latencyMs: opts.latencyMs,
    jitterMs: opts.jitterMs,
    random,
    transport: opts.processes || grouped ? 'tcp' : 'memory',
    ...(opts.maxConnections === undefined ? {} : { maxConnections: opts.maxConnections }),
    onProgress: (n) => { log(`starting nodes ${n}/${opts.nodes}`) }
  })
  running.mesh = mesh
  const hostile = new Set(grouped ? [] : mesh.slice(mesh.length - hostileCount))
  const honest = mesh.filter(n => !hostile.has(n))
  const cards = new Map<string, AgentCard>()
  const members: Member[] = running.members
  const workDir = opts.processes ? await mkdtemp(join(tmpdir(), 'aap-sim-')) : undefined
  if (workDir !== undefined) running.workDir = workDir
  if (workDir === undefined) {
    for (const n of honest) {
      const draft = simCard(n.index)
      installAgent(n.node, draft)
      // served at once over the card protocol; the DHT announcements follow below, a few at a time
      const card = await n.node.discovery.publish(draft, { announce: false })
      cards.set(n.node.agentId, card)
      members.push({ agentId: n.node.agentId, card, local: n, up: true })
    }
  } else {
    const bootstrap = mesh.slice(0, 2).flatMap(n => n.node.addresses.slice(0, 1))
    for (const b of await spawnWorkers(localCount, workerCount, workDir, bootstrap, n => { log(`starting nodes ${localCount + n}/${opts.nodes}`) })) {
      cards.set(b.agentId, b.card)
      members.push({ agentId: b.agentId, card: b.card, worker: b.worker, up: true })
    }
  }
  // groups join through the honest nodes here and each other's (not through the hostile group: it is no hub)
  const groups = grouped
    ? await startGroups(opts, localCount, honest.flatMap(n => n.node.addresses.slice(0, 1)), log, { count: hostileCount, followersPerTask: SIM_HOSTILE_FOLLOWERS_PER_TASK })
    : []
  running.groups = groups
  for (const g of groups.filter(g => !g.hostile)) {
    for (const m of g.members) {
      cards.set(m.agent_id, m.card)
      members.push({ agentId: m.agent_id, card: m.card, group: g, up: true })
    }
  }
  const sampler = new ConnectionSampler(() => mesh)
  const meshUp = Date.now()
  const byAgent = new Map(members.map(m => [m.agentId, m]))
  // what went wrong on the way without breaking an invariant (a timed-out announcement, a refused
  // forgery): counted by kind in the report's `incidents`, never dropped
  const incidents: Record<string, number> = {}
  const noted = (kind: string) => (_err: unknown): 0 => { incidents[kind] = (incidents[kind] ?? 0) + 1; return 0 }
  // announcements are the costly part of a mesh's start (each walks the DHT and
  // dials the peers it meets): a few at a time, so lookups that follow are not starved
  let announced = 0
  const queue = [...mesh]
  await Promise.all(Array.from({ length: SIM_ANNOUNCE_CONCURRENCY }, async () => {
    for (let n = queue.shift(); n !== undefined; n = queue.shift()) {
      await n.node.discovery.announce(AbortSignal.timeout(SIM_ANNOUNCE_TIMEOUT_MS)).catch(noted('announce'))
      log(`announcing cards ${++announced}/${mesh.length}`)
    }
  }))

  // ---- hostile behaviour: forged cards and events (hostile.ts) -------------------------
  // each hostile node forges the card of an agent picked here, in order (the seed decides)
  const hostileGroup = groups.find(g => g.hostile)
  const hostiles = hostileGroup !== undefined
    ? await remoteHostiles(hostileGroup, hostileGroup.members.map(() => pick(members).card), noted)
    : await setUpHostile({
      hostile: [...hostile],
      victim: () => pick(members).card,
      publish: true,
      announceTimeoutMs: SIM_ANNOUNCE_TIMEOUT_MS,
      random,
      followersPerTask: SIM_HOSTILE_FOLLOWERS_PER_TASK,
      noted,
      log
    })
  // the "announced" phase holds the hostile nodes' own announcements and forgeries too
  const announcedAt = Date.now()
  const discoveryBefore = sumStats(honest.map(n => n.node.discovery.stats))

  // ---- churn ---------------------------------------------------------------------------
  const busy = new Map<string, number>()
  const hold = (agentId: string): void => { busy.set(agentId, (busy.get(agentId) ?? 0) + 1) }
  const release = (agentId: string): void => { busy.set(agentId, (busy.get(agentId) ?? 1) - 1) }
  const churn = { stops: 0, restarts: 0 }
  let churning = opts.churn
  const churnLoop = (async () => {
    while (churning) {
      await new Promise(resolve => setTimeout(resolve, 250))
      const idle = members.filter(m => m.up && (busy.get(m.agentId) ?? 0) === 0)
      if (idle.length < members.length / 2) continue
      const victim = pick(idle)
      hold(victim.agentId)
      victim.up = false
      try {
        if (victim.local !== undefined) {
          await stopSimNode(victim.local)
          churn.stops++
          await new Promise(resolve => setTimeout(resolve, 100 + random() * 400))
          await restartSimNode(victim.local, mesh, random)
          installAgent(victim.local.node, simCard(victim.local.index))
          await victim.local.node.discovery.announce().catch(noted('announce'))
        } else if (victim.worker !== undefined) {
          // a process that dies hard, then comes back from its data directory
          await stopWorker(victim.worker, 'SIGKILL')
          churn.stops++
          await new Promise(resolve => setTimeout(resolve, 100 + random() * 400))
          const again = await spawnWorker(victim.worker.index, victim.worker.dataDir, mesh.slice(0, 2).flatMap(n => n.node.addresses.slice(0, 1)))
          victim.worker = again.worker
        }
        churn.restarts++
        victim.up = true
      } finally {
        release(victim.agentId)
      }
    }
  })()
  // the loop ends before the rest stops, also when the run fails on the way (started.ts)
  running.halt = async () => { churning = false; await churnLoop }

  // ---- tasks -----------------------------------------------------------------------------
  const discoverMs = new Counter()
  const cardOrigins = new Map<string, number>()
  const delegateMs = new Counter()
  const deliveryMs = new Counter()
  const firstEventMs = new Counter()
  const taskMs = new Counter()
  const replayMs = new Counter()
  const acknowledged = new Map<string, SimNode>()
  const records: TaskRecord[] = []
  let forgedAccepted = 0
  let done = 0

  const checkCard = async (card: AgentCard): Promise<void> => {
    if (!hostiles.ids.has(card.agent_id) && !await isGenuineCard(card, cards.get(card.agent_id))) forgedAccepted++
  }

  async function runTask (i: number): Promise<void> {
    const taskId = `task-${opts.seed}-${i}`
    const rec: TaskRecord = { task_id: taskId, runs: [], ok: false, completed: false, problems: [], observed: [] }
    records.push(rec)
    const driver = pick(honest.filter(n => n.up))
    hold(driver.node.agentId)
    const subs: EventSubscription[] = []
    let unfollow = (): void => {}
    const t0 = Date.now()
    const involved: string[] = [driver.node.agentId]
    let step = 'discover' // a failure's step goes with it into the report
    // what the driver was handed and went on with, kept past a failure: tallied for every task (task-tally.ts)
    const seen: AgentEvent[] = []
    const confirmed: AgentEvent[] = []
    let replayed: AgentEvent[] | undefined
    const genuineHash = genuineHashOf(async e => { const exec = byAgent.get(e.executor); return exec === undefined ? undefined : memberLog(exec, e.run_id, e.seq) })
    try {
      const cap: CapabilityRef = pick(SIM_CAPABILITIES)
      // task.assign: find agents for the capability
      const candidates = await findAgents(driver.node, cap, { byAgent, hostile: hostiles.ids, onDiscover: ms => { discoverMs.add(ms) }, onCard: checkCard, origins: cardOrigins })
      const first = pick(candidates)
      const second = pick(candidates.filter(c => c !== first))
      involved.push(first.agentId, second.agentId)
      hold(first.agentId)
      hold(second.agentId)
      // a bounded number of hostile nodes follow each task, so a task's load is the same at every size
      unfollow = hostiles.follow(taskId, [driver.node.agentId, first.agentId])

      // the driver follows its task: events wake each step (no polling)
      const waiters: Array<{ match: (e: AgentEvent) => boolean, resolve: (e: AgentEvent) => void }> = []
      step = 'subscribe'
      const driverSub = await driver.node.events.subscribe(taskId, {
        participants: [first.agentId, second.agentId],
        onEvent: (e) => {
          seen.push(e)
          for (const w of [...waiters]) if (w.match(e)) { waiters.splice(waiters.indexOf(w), 1); w.resolve(e) }
        }
      })
      subs.push(driverSub)
      const waitFor = async (what: string, match: (e: AgentEvent) => boolean): Promise<AgentEvent> => {
        const hit = seen.find(match) ?? await withTimeout(new Promise<AgentEvent>(resolve => { waiters.push({ match, resolve }) }), opts.taskTimeoutMs, `${taskId}: ${what}`)
        confirmed.push(hit)
        return hit
      }

      // observers subscribe before the first event, from nodes that take no part
      const others = honest.filter(n => n.up && !involved.includes(n.node.agentId))
      for (let k = 0; k < Math.min(opts.observers, others.length); k++) {
        const node = pick(others.filter(o => !rec.observed.some(x => x.node === o)))
        hold(node.node.agentId)
        involved.push(node.node.agentId)
        const seenKeys = new Set<string>()
        const arrivals: Arrival[] = []
        rec.observed.push({ node, seen: seenKeys, arrivals })
        // every event kept, not only its key: one forged under a genuine run id and seq must be caught (observed.ts)
        const sub = await node.node.events.subscribe(taskId, {
          participants: [driver.node.agentId, first.agentId, second.agentId],
          onEvent: (e) => {
            seenKeys.add(eventKey(e))
            arrivals.push({ event: e, latencyMs: Date.now() - Date.parse(e.at) })
          }
        })
        subs.push(sub)
      }

      // task.assign -> delegate
      step = 'delegate'
      const q0 = performance.now()
      const run = await driver.node.delegate({ to_agent: first.agentId, task_id: taskId, capability: cap, input: { task: i } })
      delegateMs.add(performance.now() - q0)
      rec.runs.push(run)
      acknowledged.set(run.run_id, driver)

      // checkpoint.raise (by the coordinator, while the agent works) -> block; checkpoint.resolve -> resume; the agent says it was told
      await waitFor('started progress', e => e.run_id === run.run_id && e.type === 'run.progress' && e.payload.phase === 'started')
      step = 'block, resume'
      await driver.node.block(run.run_id, 'needs approval', checkpointOf(taskId))
      const resolution = { approved: true, reviewer: `human-${i}` }
      // the resolution answers this checkpoint, and no later one the run may have raised meanwhile
      await driver.node.resume(run.run_id, resolution, { checkpointId: checkpointOf(taskId) })
      await waitFor('resumed progress, told of the checkpoint', e => e.run_id === run.run_id && e.type === 'run.progress' && e.payload.phase === 'resumed' && e.payload.raised_by === driver.node.agentId)

      // ownership.transfer -> handoff
      step = 'handoff'
      const next = await driver.node.handoff(run.run_id, second.agentId, { reason: 'ownership transfer', from_task: taskId })
      rec.runs.push(next)
      acknowledged.set(next.run_id, driver)
      await waitFor('completion', e => e.run_id === next.run_id && e.type === 'run.completed')
      rec.completed = true
      taskMs.add(Date.now() - t0)

      // audit.replay on a node that took no part
      const auditor = pick(honest.filter(n => n.up && !involved.includes(n.node.agentId)))
      const r0 = performance.now()
      step = 'replay'
      const replay = await auditor.node.events.replay(taskId, { participants: [driver.node.agentId, first.agentId] })
      replayMs.add(performance.now() - r0)
      const verdict = checkTrace(taskId, replay.events, { resolutions: { [checkpointOf(taskId)]: resolution }, transfers: 1, raisedBy: driver.node.agentId, complete: true })
      for (const c of ['capability_ref', 'task_correlation', 'checkpoint_block', 'ownership_handoff'] as const) {
        rec.problems.push(...verdict[c].problems.map(p => `${c}: ${p}`))
      }
      replayed = replay.events
      // the trace holds every run acknowledged for the task, each ended (checkTrace `complete`)
      const missing = rec.runs.filter(r => !replay.events.some(e => e.run_id === r.run_id)).map(r => r.run_id)
      if (missing.length > 0) rec.problems.push(`replay lacks run(s) ${missing.join(', ')}`)
      rec.ok = verdict.ok && missing.length === 0
    } catch (err) {
      rec.problems.push(`${step}: ${err instanceof AapError ? `${err.code}: ${err.message}` : (err as Error).message}`)
    }
    try {
      // whatever step the task reached: forgeries the driver or an observer accepted, and what the observers
      // got of the events they are owed (the replay's, or for a failed task only what its completed steps promised)
      const tally = await tallyTask({ seen, confirmed, runs: rec.runs.map(r => r.run_id), replayed, observers: rec.observed }, genuineHash)
      forgedAccepted += tally.forged
      eventsExpected += tally.expected
      eventsDelivered += tally.delivered
      for (const ms of tally.latencies) deliveryMs.add(ms)
      for (const ms of tally.firstEventLatencies) firstEventMs.add(ms)
    } catch (err) {
      rec.ok = false
      rec.problems.push(`tally: ${(err as Error).message}`)
    } finally {
      for (const s of subs) s.close()
      unfollow()
      for (const a of involved) release(a)
      done++
      log(`tasks ${done}/${opts.tasks} (${records.filter(r => r.ok).length} ok)${opts.churn ? `, churn ${churn.stops} stops` : ''}`)
    }
  }

  let eventsExpected = 0
  let eventsDelivered = 0
  let next = 0
  await Promise.all(Array.from({ length: Math.min(opts.concurrency, opts.tasks) }, async () => {
    while (next < opts.tasks) await runTask(next++)
  }))
  await running.halt?.()

  // ---- invariants: every acknowledged run is still there -------------------------------
  for (const n of mesh) if (!n.up) await restartSimNode(n, mesh, random)
  for (const m of members) m.up = true
  // asked of each executor's own store (a run and its run.started event are one
  // batch), so a slow network cannot pass for a lost run or hide one
  let runsLost = 0
  for (const runId of acknowledged.keys()) {
    const exec = byAgent.get(executorOfRun(runId))
    const stored = exec?.local !== undefined
      ? await exec.local.node.runs.store.get(runId)
      : exec === undefined ? undefined : await memberLog(exec, runId, 1)
    if (stored === undefined) runsLost++
  }
  const tasksEnded = Date.now()
  // the connections at the end are counted once the budget could prune what the last tasks opened:
  // a connection is not closed before its grace is over, so a count taken at once shows the grace
  const settleWithin = CONNECTION_GRACE_MS + SIM_SETTLE_MARGIN_MS
  const settleHere = async (): Promise<boolean> => {
    const ok = await settleConnections(() => mesh, Date.now() + settleWithin)
    sampler.markEnd()
    return ok
  }
  const settled = await Promise.all([settleHere(), ...groups.map(async g => groupSettle(g, settleWithin))])
  log(`task discovers' cards by source: ${[...cardOrigins].sort().map(([k, n]) => `${k} ${n}`).join(', ')}`)
  if (settled.includes(false)) log(`connections: some node still over its bound ${Math.round(settleWithin / 1000)} s after the last task`)
  const settledAt = Date.now()
  const wall = Date.now() - started
  const forgedAttempted = await hostiles.attempted()
  const here = meter.figures('driver', sampler.finish())
  const processes = [here, ...await groupFigures(groups, opts.heapSnapshot)]
  // after the figures of the end (the discovers at rest open connections of their own)
  const discovery = diffStats(sumStats(honest.map(n => n.node.discovery.stats)), discoveryBefore)
  const announcementsOver = await quietAfterAnnouncements(mesh, groups, log)
  const quietCount = opts.quietDiscovers ?? SIM_QUIET_DISCOVERS
  log(`discovers at rest (${quietCount} of each kind)`); const { cold: quiet, fresh: quietFresh } = await quietDiscoverPasses(honest.map(n => n.node), SIM_CAPABILITIES, { pick, onCard: checkCard, count: quietCount })
  await running.stop()
  for (const g of groups) for (const [k, v] of Object.entries(g.incidents)) incidents[`group_${k}`] = (incidents[`group_${k}`] ?? 0) + v

  const report: SimReport = {
    title: `aap-mesh simulation (${opts.nodes} nodes)`,
    command: opts.command,
    started_at: new Date(started).toISOString(),
    commit: sourceCommit(),
    duration_ms: wall,
    machine: { cpus: cpus().length, cpu_model: cpus()[0]?.model ?? 'unknown', node: process.version, platform: `${process.platform}-${process.arch}` },
    config: { ...opts, onProgress: undefined, hostile_nodes: hostileCount },
    invariants: {
      tasks: opts.tasks,
      tasks_completed: records.filter(r => r.completed).length,
      traces_satisfying_contracts: records.filter(r => r.ok).length,
      runs_acknowledged: acknowledged.size,
      runs_lost: runsLost,
      forged_attempted: forgedAttempted,
      forged_accepted: forgedAccepted,
      events_expected: eventsExpected,
      events_delivered: eventsDelivered,
      events_lost: eventsExpected - eventsDelivered
    },
    latency: [
      discoverMs.series('discover (verified cards)'),
      delegateMs.series('delegate round trip'),
      firstEventMs.series('first event to observers'),
      deliveryMs.series('event delivery to observers'),
      replayMs.series('audit replay'),
      taskMs.series('whole task'),
      quiet.series, quietFresh.series,
      quiet.firstCard, quietFresh.firstCard, quiet.roundTrip
    ],
    resources: resourcesOf(opts.nodes, processes, wall),
    processes,
    connections: connectionsOf(processes, opts.maxConnections ?? CONNECTIONS_MAX),
    phases_ms: { start: meshUp - started, announce: announcedAt - meshUp, tasks: tasksEnded - announcedAt, settle: settledAt - tasksEnded, announcements_over: announcementsOver },
    churn,
    incidents,
    discovery,
    quiet_discovery: quietFigures(quiet), quiet_fresh_discovery: quietFigures(quietFresh),
    failures: records.filter(r => !r.ok).map(r => ({ task_id: r.task_id, problems: r.problems }))
  }
  return report
}

export { renderSummary }
