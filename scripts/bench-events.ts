/**
 * Run events to every subscriber, subscribers spread over processes:
 *
 *  1. delivery: one run on an executor emits `--events` progress events, one
 *     every `--interval-ms`; every other node subscribes to its correlation.
 *     Lost = deliveries that never came (within `--grace-ms` after the last
 *     commit).
 *  2. fresh correlations: `--fresh` times, every subscriber subscribes to a
 *     new correlation, then the run is delegated; time to first event is from
 *     the commit of run.started to each subscriber's yield. This is the case
 *     where gossip alone loses the first publish.
 *
 * Layout: this process holds the delegator D and the executor E; the other
 * `--nodes` - 2 nodes are subscribers in `--processes` child processes
 * (scripts/lib/events-worker.ts), all on TCP loopback. Every node has its own
 * verified-signature cache (no cache is shared, not even within a process):
 * the sum of the subscribers' `signatures.stats.checked` is printed to show
 * that each of them checked what it was sent. 100 nodes in one event loop
 * would spend ~100 Ed25519 verifies (~0.1 ms each) of one core per event;
 * subscriber processes let the machine's cores share that work, as the nodes
 * of a real mesh do on their own machines. The default is one per core: on
 * this 2-core machine (alternating runs, 2026-11-25) 2 processes gave p50
 * 21.4 / 21.1 ms, 4 gave 24.3 / 24.5 and 8 gave 26.2 / 27.9, as more event
 * loops than cores only take turns on them in the middle of each event.
 *
 * Before anything is measured the bench waits for the mesh to settle and
 * warms its code paths up:
 *
 *  - settle: the children report ready once their nodes have joined, but the
 *    DHT's first refreshes go on for seconds after (about half of both cores
 *    at 100 nodes). The bench samples the CPU of all processes over
 *    `SETTLE_WINDOW_MS` windows until one is at most `--quiet-cores` (default
 *    0.15 per 100 nodes, at least 0.05; 100 nodes left alone for 40 s use
 *    0.10), for at most `--settle-max-ms`; without it the upkeep
 *    figure and the first tenth of the run measured the start-up's tail.
 *  - warm-up: one short run (`WARMUP_EVENTS` progress events) to every
 *    subscriber on its own correlation. The first gossip event a process
 *    handles compiles the event schemas and JIT-compiles the whole gossip
 *    and placement path, which made the first two events of the measured run
 *    its slowest (p50 ~270 ms against ~25 ms for the rest). The warm-up's own
 *    figures are printed on their own row, not hidden.
 *
 * One clock: E's commit and every arrival are taken as
 * `performance.timeOrigin + performance.now()`. timeOrigin is the wall-clock
 * time (µs resolution) at which the process started and performance.now() is
 * monotonic from there, so the sum is comparable across processes of one
 * machine without shipping events back and forth, and is immune to wall-clock
 * steps after start. Its one error is how far the processes' wall-clock
 * readings at start differ from each other (NTP slewing between two starts);
 * the bench measures that: it asks each child for its clock over IPC 20 times
 * and prints the offset against the midpoint of the fastest round trip
 * (NTP-style), with that round trip's half as the bound. Latencies are taken
 * without correction; an offset beyond its bound would show there.
 *
 *   node scripts/bench-events.ts [--nodes 100] [--processes <cores>] [--events 60]
 *     [--interval-ms 500] [--fresh 20] [--grace-ms 15000] [--idle-ms 5000]
 *     [--quiet-cores 0.15] [--settle-max-ms 60000] [--profile-dir <dir>] [--json]
 *
 * `--profile-dir` writes a CPU profile of each subscriber process over the
 * delivery phase only (from its subscribe to its collect) to
 * `<dir>/events-worker-<i>.cpuprofile`, and one over the fresh correlations
 * to `<dir>/events-worker-<i>-fresh.cpuprofile`.
 *
 * The default pace, one event per 500 ms, leaves the machine room: at 100
 * nodes on 2 cores, one event per 100 ms already saturates both cores (each
 * node forwards every event to its gossip mesh and checks it), and then the
 * figures measure the queue, not delivery. `--interval-ms 10` measures that
 * saturation; the `delivery.cores_busy` figure says which case a run was.
 *
 * Targets (docs: shared/design/targets.md): p50 <= 15 ms, p99 <= 100 ms, 0 lost.
 */
import { performance } from 'node:perf_hooks'
import { availableParallelism, cpus } from 'node:os'
import { mkdir } from 'node:fs/promises'
import { join } from 'node:path'
import { createMeshNode, type MeshNode } from '../src/node.ts'
import type { Run } from '../src/runlog/types.ts'
import { ask as askIpc, spawnIpcChild, stopIpcChild, type IpcChild } from './lib/ipc-child.ts'
import { intArg, parseArgs, usageError } from './lib/proc.ts'
import { fmtMs, printTable, summarize } from './lib/stats.ts'

const BENCH = { capability_id: 'cap:bench-events', version: '1.0.0' }
const WORKER = new URL('./lib/events-worker.ts', import.meta.url).pathname
/** Bounds on a child starting its nodes and answering one request. */
const CHILD_START_TIMEOUT_MS = 5 * 60_000
const CHILD_REQUEST_TIMEOUT_MS = 60_000
const CLOCK_PINGS = 20
/** The window over which the settle wait samples the CPU of every process. */
const SETTLE_WINDOW_MS = 1_000
/** Progress events of the warm-up run. */
const WARMUP_EVENTS = 3

const args = parseArgs(process.argv.slice(2), {
  known: ['nodes', 'processes', 'events', 'interval-ms', 'fresh', 'grace-ms', 'idle-ms', 'quiet-cores', 'settle-max-ms', 'profile-dir', 'json'],
  text: 'usage: node scripts/bench-events.ts [--nodes 100] [--processes <cores>] [--events 60] [--interval-ms 500] [--fresh 20]\n' +
    '         [--grace-ms 15000] [--idle-ms 5000] [--quiet-cores 0.15] [--settle-max-ms 60000] [--profile-dir <dir>] [--json]'
})
const N = intArg(args, 'nodes', 100)
const PROCESSES = Math.max(1, Math.min(intArg(args, 'processes', availableParallelism()), N - 2))
const EVENTS = intArg(args, 'events', 60)
const INTERVAL_MS = intArg(args, 'interval-ms', 500)
const FRESH = intArg(args, 'fresh', 20)
const GRACE_MS = intArg(args, 'grace-ms', 15_000)
/** A quiet window after start-up in which the mesh's own upkeep (DHT, gossip heartbeats, connections) is measured. */
const IDLE_MS = intArg(args, 'idle-ms', 5_000)
const JSON_OUT = args.has('json')
const PROFILE_DIR = args.get('profile-dir')
/** A settled mesh uses at most this many cores (all processes); default 0.15 per 100 nodes, at least 0.05. */
const QUIET_CORES = args.has('quiet-cores') ? Number(args.get('quiet-cores')) : Math.max(0.05, 0.15 * N / 100)
const SETTLE_MAX_MS = intArg(args, 'settle-max-ms', 60_000)
if (!Number.isFinite(QUIET_CORES) || QUIET_CORES <= 0) usageError('--quiet-cores must be a positive number')
if (N < 3) usageError('--nodes must be at least 3')

const log = (msg: string): void => { process.stderr.write(`[bench-events] ${msg}\n`) }
const sleep = async (ms: number): Promise<void> => new Promise(resolve => setTimeout(resolve, ms))
/** The one clock of this bench (see the header). */
const now = (): number => performance.timeOrigin + performance.now()

interface Child { ipc: IpcChild, members: string[], complete: Set<string> }

async function spawnChild (count: number, join: string[]): Promise<Child> {
  const complete = new Set<string>()
  const ipc = await spawnIpcChild(WORKER, ['--count', String(count), ...join.flatMap(a => ['--join', a])], CHILD_START_TIMEOUT_MS, (msg) => {
    if (msg.type === 'complete') complete.add(String(msg.task))
  })
  return { ipc, members: ipc.ready.members as string[], complete }
}

async function ask (c: Child, msg: Record<string, unknown>): Promise<unknown> {
  return askIpc(c.ipc, msg, CHILD_REQUEST_TIMEOUT_MS)
}

/** NTP-style: the child's clock minus the midpoint of the fastest of CLOCK_PINGS round trips. */
async function clockOffset (c: Child): Promise<{ offset: number, bound: number }> {
  let best = { offset: Number.NaN, bound: Number.POSITIVE_INFINITY }
  for (let i = 0; i < CLOCK_PINGS; i++) {
    const t0 = now()
    const tc = await ask(c, { op: 'clock' }) as number
    const t1 = now()
    if ((t1 - t0) / 2 < best.bound) best = { offset: tc - (t0 + t1) / 2, bound: (t1 - t0) / 2 }
  }
  return best
}

/** Delegate with retries: on a loaded machine the card fetch before a delegation can time out. */
async function delegate (D: MeshNode, to: string, task: string, events: number): Promise<Run> {
  for (let attempt = 1; ; attempt++) {
    try {
      return await D.delegate({ to_agent: to, task_id: task, capability: BENCH, input: { events }, idempotency_key: task })
    } catch (err) {
      if (attempt >= 5 || (err as { code?: string }).code !== 'AGENT_NOT_FOUND') throw err
      log(`delegate of ${task} failed (${(err as Error).message.slice(0, 80)}); retrying`)
    }
  }
}

/** Wait (bounded) until `done()` holds; woken by the children's `complete` messages and every 50 ms. */
async function waitFor (done: () => boolean, timeoutMs: number): Promise<boolean> {
  const deadline = Date.now() + timeoutMs
  while (!done()) {
    if (Date.now() > deadline) return false
    await sleep(50)
  }
  return true
}

type Arrivals = Array<Array<[string, number]>>
interface Collected { arrived: Arrivals, mesh: number[], topicPeers: number[] }
interface ChildStats { checked: number, hits: number, refused: number, gossip: number, synced: number, syncRequests: number, verdicts: Record<string, number>, connections: number[], cpuMicros: number }

async function main (): Promise<void> {
  const started = performance.now()
  const subscribers = N - 2
  const shares = Array.from({ length: PROCESSES }, (_, i) => Math.floor(subscribers / PROCESSES) + (i < subscribers % PROCESSES ? 1 : 0))
  log(`starting ${N} nodes: D and E here, ${subscribers} subscribers in ${PROCESSES} processes (${shares.join(', ')}), TCP loopback`)
  const D = await createMeshNode({ listen: ['/ip4/127.0.0.1/tcp/0'], localMesh: true })
  const E = await createMeshNode({ listen: ['/ip4/127.0.0.1/tcp/0'], localMesh: true })
  await D.start()
  await E.start()
  if (await D.join(E.addresses) === 0) throw new Error('D could not join E')
  const committed = new Map<string, number>()
  E.runs.onEvent((e) => { committed.set(`${e.run_id}#${e.seq}`, now()) })

  // the executor: `EVENTS` progress events, paced, then complete; fresh runs complete at once
  E.runs.handle(BENCH, async (ctx) => {
    if (ctx.input.events === 0) return { ok: true }
    for (let i = 1; i <= Number(ctx.input.events); i++) {
      await ctx.progress({ i })
      await sleep(INTERVAL_MS)
    }
    return { ok: true }
  })
  await E.publishCard({ name: 'bench-executor', capabilities: [BENCH] })

  const children = await Promise.all(shares.map(async share => spawnChild(share, [...D.addresses, ...E.addresses])))
  log(`subscriber processes up after ${fmtMs(performance.now() - started)}`)
  const clocks = []
  for (const c of children) clocks.push(await clockOffset(c))
  log(`clock offsets (child - here, ms): ${clocks.map(c => `${c.offset.toFixed(3)} ±${c.bound.toFixed(3)}`).join(', ')}`)
  const allComplete = (task: string) => (): boolean => children.every(c => c.complete.has(task))
  const subscribeAll = async (task: string, expect: number): Promise<void> => {
    await Promise.all(children.map(async c => ask(c, { op: 'subscribe', task, participants: [D.agentId, E.agentId], expect })))
  }
  const collectAll = async (task: string): Promise<Collected> => {
    const parts = await Promise.all(children.map(async c => ask(c, { op: 'collect', task }) as Promise<Collected>))
    return { arrived: parts.flatMap(p => p.arrived), mesh: parts.flatMap(p => p.mesh), topicPeers: parts.flatMap(p => p.topicPeers) }
  }
  const statsAll = async (): Promise<ChildStats[]> => Promise.all(children.map(async c => ask(c, { op: 'stats' }) as Promise<ChildStats>))
  const taken = (st: ChildStats[]): { gossip: number, sync: number, requests: number } =>
    ({ gossip: st.reduce((a, s) => a + s.gossip, 0), sync: st.reduce((a, s) => a + s.synced, 0), requests: st.reduce((a, s) => a + s.syncRequests, 0) })

  const cpuNow = async (): Promise<number> => (await statsAll()).reduce((a, s) => a + s.cpuMicros, 0) + process.cpuUsage().user + process.cpuUsage().system

  // ---- settle: the start-up's DHT refreshes are over ---------------------------------------
  const settleT0 = performance.now()
  let settled = false
  let lastCores = Number.NaN
  while (performance.now() - settleT0 < SETTLE_MAX_MS) {
    const c0 = await cpuNow()
    const w0 = performance.now()
    await sleep(SETTLE_WINDOW_MS)
    lastCores = (await cpuNow() - c0) / 1000 / (performance.now() - w0)
    if (lastCores <= QUIET_CORES) {
      settled = true
      break
    }
  }
  const settleMs = performance.now() - settleT0
  log(settled
    ? `mesh settled after ${fmtMs(settleMs)} (${lastCores.toFixed(2)} cores over the last ${SETTLE_WINDOW_MS} ms)`
    : `mesh NOT settled after ${fmtMs(settleMs)}: still ${lastCores.toFixed(2)} cores (quiet is ${QUIET_CORES.toFixed(2)}); measuring anyway`)

  // ---- phase 0: the mesh's upkeep with no events -----------------------------------------
  const idle0 = await cpuNow()
  const idleT0 = performance.now()
  await sleep(IDLE_MS)
  const idleCores = (await cpuNow() - idle0) / 1000 / (performance.now() - idleT0)
  log(`upkeep with no events: ${idleCores.toFixed(2)} cores for ${N} nodes over ${IDLE_MS} ms`)

  // ---- warm-up: one short run through the same paths, measured on its own ----------------
  /** Commit-to-arrival latencies of `keys` at every subscriber, and how many arrivals never came (logged per subscriber). */
  const latenciesOf = (arrived: Arrivals, keys: string[], phase: string): { latencies: number[], missing: number } => {
    const latencies: number[] = []
    let missing = 0
    arrived.forEach((list, i) => {
      const m = new Map(list)
      let mine = 0
      for (const k of keys) {
        const at = m.get(k)
        if (at === undefined) mine++
        else latencies.push(at - committed.get(k)!)
      }
      if (mine > 0) log(`${phase}: subscriber ${i} missed ${mine} of ${keys.length} events`)
      missing += mine
    })
    return { latencies, missing }
  }
  const warmTask = `bench-${process.pid}-warmup`
  await subscribeAll(warmTask, WARMUP_EVENTS + 2)
  const warmRun = await delegate(D, E.agentId, warmTask, WARMUP_EVENTS)
  const warmKeys = (): string[] => [...committed.keys()].filter(k => k.startsWith(`${warmRun.run_id}#`))
  await waitFor(() => warmKeys().length >= WARMUP_EVENTS + 2, WARMUP_EVENTS * (INTERVAL_MS + 50) + 30_000)
  const warmAllIn = await waitFor(allComplete(warmTask), GRACE_MS)
  const warm = latenciesOf((await collectAll(warmTask)).arrived, warmKeys(), 'warm-up')
  const warmup = summarize(warm.latencies)
  log(`warm-up run (${WARMUP_EVENTS + 2} events, cold code paths): p50 ${fmtMs(warmup.p50)}, p99 ${fmtMs(warmup.p99)}, ${warm.missing} missing${warmAllIn ? '' : ' (not all in within the grace)'}`)

  // ---- phase 1: steady delivery --------------------------------------------------------
  const task = `bench-${process.pid}-steady`
  const expectedCount = EVENTS + 2
  log(`${subscribers} subscribers joining ${task}`)
  await subscribeAll(task, expectedCount)
  if (PROFILE_DIR !== undefined) await Promise.all(children.map(async c => ask(c, { op: 'profile-start' })))
  const before = taken(await statsAll())
  const cpu0 = await cpuNow()
  const t0 = performance.now()
  const run = await delegate(D, E.agentId, task, EVENTS)
  const runKeys = (): string[] => [...committed.keys()].filter(k => k.startsWith(`${run.run_id}#`))
  await waitFor(() => runKeys().length >= expectedCount, EVENTS * (INTERVAL_MS + 50) + 30_000)
  const runMs = performance.now() - t0
  const runCores = (await cpuNow() - cpu0) / 1000 / runMs
  log(`while the run emitted: ${runCores.toFixed(2)} cores (upkeep ${idleCores.toFixed(2)})`)
  const allIn = await waitFor(allComplete(task), GRACE_MS)
  if (PROFILE_DIR !== undefined) {
    await mkdir(PROFILE_DIR, { recursive: true })
    await Promise.all(children.map(async (c, i) => ask(c, { op: 'profile-stop', path: join(PROFILE_DIR, `events-worker-${i}.cpuprofile`) })))
    log(`delivery-phase CPU profiles of the subscriber processes written to ${PROFILE_DIR}`)
  }
  const steadyMesh = await collectAll(task)
  const arrived = steadyMesh.arrived
  const after = taken(await statsAll())
  const steadyVia = { gossip: after.gossip - before.gossip, sync: after.sync - before.sync, sync_requests: after.requests - before.requests }

  const keys = runKeys()
  const { latencies, missing: lost } = latenciesOf(arrived, keys, 'steady')
  const steady = summarize(latencies)
  {
    // latency by position in the run: a rising p50 is a queue building up, a flat one the path itself
    const bySeq = new Map<number, number[]>()
    arrived.forEach((list) => {
      const m = new Map(list)
      for (const k of keys) {
        const at = m.get(k)
        if (at === undefined) continue
        const seq = Number(k.slice(k.lastIndexOf('#') + 1))
        const bucket = Math.floor((seq - 1) / Math.max(1, Math.ceil(keys.length / 10)))
        bySeq.set(bucket, [...(bySeq.get(bucket) ?? []), at - committed.get(k)!])
      }
    })
    log(`delivery p50 by tenth of the run: ${[...bySeq.entries()].sort((a, b) => a[0] - b[0]).map(([, v]) => fmtMs(summarize(v).p50)).join(', ')}`)
  }
  const deliveries = keys.length * subscribers

  // ---- phase 2: first event on fresh correlations ----------------------------------------
  const firsts: number[] = []
  let freshLost = 0
  if (PROFILE_DIR !== undefined) await Promise.all(children.map(async c => ask(c, { op: 'profile-start' })))
  for (let k = 0; k < FRESH; k++) {
    const fresh = `bench-${process.pid}-fresh-${k}`
    await subscribeAll(fresh, 1)
    const r = await delegate(D, E.agentId, fresh, 0)
    const ok = await waitFor(allComplete(fresh), GRACE_MS)
    const c = committed.get(`${r.run_id}#1`)
    const got = (await collectAll(fresh)).arrived
    let missing = 0
    for (const list of got) {
      const at = new Map(list).get(`${r.run_id}#1`)
      if (at === undefined || c === undefined) missing++
      else firsts.push(at - c)
    }
    freshLost += missing
    if (!ok) log(`fresh correlation ${k}: ${missing} subscribers without the first event`)
  }
  const first = summarize(firsts)
  if (PROFILE_DIR !== undefined) {
    await Promise.all(children.map(async (c, i) => ask(c, { op: 'profile-stop', path: join(PROFILE_DIR, `events-worker-${i}-fresh.cpuprofile`) })))
    log(`fresh-correlation CPU profiles of the subscriber processes written to ${PROFILE_DIR}`)
  }

  const stats = await statsAll()
  const sum = (f: (s: typeof stats[number]) => number): number => stats.reduce((a, s) => a + f(s), 0)
  const connections = stats.flatMap(s => s.connections)
  const events = committed.size
  const figures = {
    nodes: N,
    processes: PROCESSES,
    subscribers,
    events_per_run: expectedCount,
    interval_ms: INTERVAL_MS,
    delivery: { ...steady, lost, deliveries, all_in_within_grace: allIn, run_ms: runMs, cores_busy: runCores },
    upkeep_cores: idleCores,
    settle: { settled, ms: settleMs, cores: lastCores, quiet_cores: QUIET_CORES },
    warmup: { events: WARMUP_EVENTS + 2, ...warmup, lost: warm.missing },
    fresh: { correlations: FRESH, ...first, lost: freshLost },
    signatures: {
      checked: sum(s => s.checked),
      hits: sum(s => s.hits),
      refused: sum(s => s.refused),
      events_committed: events,
      per_subscriber_per_event: sum(s => s.checked) / subscribers / Math.max(1, events)
    },
    steady_via: steadyVia,
    steady_mesh: { peers: summarize(steadyMesh.mesh), topic_peers: summarize(steadyMesh.topicPeers), without_mesh: steadyMesh.mesh.filter(m => m === 0).length },
    gossip_verdicts: stats.reduce<Record<string, number>>((all, s) => {
      for (const [k, v] of Object.entries(s.verdicts)) if (v > 0) all[k] = (all[k] ?? 0) + v
      return all
    }, {}),
    via_gossip: sum(s => s.gossip),
    via_sync: sum(s => s.synced),
    connections: { max: Math.max(...connections), mean: connections.reduce((a, b) => a + b, 0) / Math.max(1, connections.length) },
    clock_offset_ms: clocks,
    env: { node: process.version, cpus: availableParallelism(), cpu: cpus()[0]?.model ?? '' },
    duration_s: (performance.now() - started) / 1000
  }

  await Promise.all(children.map(async c => stopIpcChild(c.ipc)))
  await Promise.all([D.stop(), E.stop()])

  if (JSON_OUT) {
    process.stdout.write(JSON.stringify(figures) + '\n')
    return
  }
  process.stdout.write(`\nrun events, ${N} nodes (D, E + ${subscribers} subscribers in ${PROCESSES} processes, TCP loopback), ` +
    `${figures.env.cpus} cpus, node ${process.version}\n\n`)
  const verdict = (p50: number, p99: number, l: number): string => p50 <= 15 && p99 <= 100 && l === 0 ? 'meets' : 'MISSES'
  printTable([
    {
      phase: `warm-up run (${figures.warmup.events} events, cold code paths)`,
      n: warmup.n,
      p50: fmtMs(warmup.p50),
      p90: fmtMs(warmup.p90),
      p99: fmtMs(warmup.p99),
      max: fmtMs(warmup.max),
      lost: `${warm.missing} of ${(WARMUP_EVENTS + 2) * subscribers}`,
      target: '-'
    },
    {
      phase: `delivery (${expectedCount} events, 1 per ${INTERVAL_MS} ms)`,
      n: steady.n,
      p50: fmtMs(steady.p50),
      p90: fmtMs(steady.p90),
      p99: fmtMs(steady.p99),
      max: fmtMs(steady.max),
      lost: `${lost} of ${deliveries}`,
      target: verdict(steady.p50, steady.p99, lost)
    },
    {
      phase: `first event, fresh correlation (x${FRESH})`,
      n: first.n,
      p50: fmtMs(first.p50),
      p90: fmtMs(first.p90),
      p99: fmtMs(first.p99),
      max: fmtMs(first.max),
      lost: `${freshLost} of ${FRESH * subscribers}`,
      target: verdict(first.p50, first.p99, freshLost)
    }
  ])
  const sg = figures.signatures
  process.stdout.write(`\nsignatures checked by the subscribers, each with its own cache: ${sg.checked} ` +
    `(${sg.per_subscriber_per_event.toFixed(2)} per subscriber per committed event; ${sg.hits} cache hits, ${sg.refused} refused)\n` +
    `taken from gossip: ${figures.via_gossip}, from sync: ${figures.via_sync} (all phases); connections per subscriber: ` +
    `max ${figures.connections.max}, mean ${figures.connections.mean.toFixed(1)}; ${figures.duration_s.toFixed(1)} s\n` +
    `delivery phase: ${steadyVia.gossip} taken from gossip, ${steadyVia.sync} from sync (${steadyVia.sync_requests} sync requests); gossip mesh peers per subscriber at its end: ` +
    `p50 ${figures.steady_mesh.peers.p50}, min ${figures.steady_mesh.peers.min} (${figures.steady_mesh.without_mesh} with none), topic peers p50 ${figures.steady_mesh.topic_peers.p50}\n` +
    `gossip messages judged by the subscribers (all phases): ${Object.entries(figures.gossip_verdicts).map(([k, v]) => `${k} ${v}`).join(', ')}\n`)
  process.stdout.write('targets: p50 <= 15 ms, p99 <= 100 ms, 0 lost\n')
}

await main()
process.exit(0)
