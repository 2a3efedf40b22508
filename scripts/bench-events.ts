/**
 * Run events to every subscriber in one process (memory transport):
 *
 *  1. delivery: one run on an executor emits `--events` progress events, one
 *     every `--interval-ms`; every other node subscribes to its correlation.
 *     Latency is from the executor's commit to each subscriber's yield (same
 *     process, same clock). Lost = deliveries that never came.
 *  2. fresh correlations: `--fresh` times, every subscriber subscribes to a
 *     new correlation, then the run is delegated; time to first event is from
 *     the commit of run.started to each subscriber's yield. This is the case
 *     where gossip alone loses the first publish.
 *
 *   node scripts/bench-events.ts [--nodes 50] [--events 200] [--interval-ms 10]
 *     [--fresh 20] [--grace-ms 15000] [--json]
 *
 * Targets (docs: shared/design/targets.md): p50 <= 15 ms, p99 <= 100 ms, 0 lost.
 */
import { performance } from 'node:perf_hooks'
import { availableParallelism, cpus } from 'node:os'
import { createMeshNode, type MeshNode } from '../src/node.ts'
import type { AgentEvent, Run } from '../src/runlog/types.ts'
import { intArg, parseArgs } from './lib/proc.ts'
import { fmtMs, printTable, summarize } from './lib/stats.ts'

const BENCH = { capability_id: 'cap:bench-events', version: '1.0.0' }

const args = parseArgs(process.argv.slice(2))
const N = intArg(args, 'nodes', 50)
const EVENTS = intArg(args, 'events', 200)
const INTERVAL_MS = intArg(args, 'interval-ms', 10)
const FRESH = intArg(args, 'fresh', 20)
const GRACE_MS = intArg(args, 'grace-ms', 15_000)
const JSON_OUT = args.has('json')
if (N < 3) throw new Error('--nodes must be at least 3')

const log = (msg: string): void => { process.stderr.write(`[bench-events] ${msg}\n`) }
const key = (e: AgentEvent): string => `${e.run_id}#${e.seq}`
const sleep = async (ms: number): Promise<void> => new Promise(resolve => setTimeout(resolve, ms))

async function startNodes (): Promise<MeshNode[]> {
  const nodes: MeshNode[] = []
  for (let i = 0; i < N; i++) {
    const node = await createMeshNode({ listen: [`/memory/bench-events-${process.pid}-${i}`], localMesh: true })
    await node.start()
    if (i > 0) {
      const j = Math.floor(Math.random() * i)
      if (await node.join(nodes[j]!.addresses) === 0) throw new Error(`node ${i} could not join node ${j}`)
    }
    nodes.push(node)
  }
  return nodes
}

/** What a subscriber that missed events knows: its connections, verdicts and failed syncs. */
function diagnose (n: MeshNode, D: MeshNode, E: MeshNode, what: string): void {
  const conns = (x: MeshNode): number => n.host.getConnections().filter(c => c.remotePeer.toString() === x.agentId).length
  log(`${what} at ${n.agentId.slice(-8)}: conns to D ${conns(D)}, to E ${conns(E)}; ` +
    `gossip ${JSON.stringify(n.events.stats.gossip)}; synced ${n.events.stats.synced}; sync errors ${JSON.stringify(n.events.stats.syncErrors)}`)
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

/** Wait (bounded) until `done()` holds, checking every 50 ms (a benchmark's own pacing, not a test). */
async function waitFor (done: () => boolean, timeoutMs: number): Promise<boolean> {
  const deadline = Date.now() + timeoutMs
  while (!done()) {
    if (Date.now() > deadline) return false
    await sleep(50)
  }
  return true
}

async function main (): Promise<void> {
  const started = performance.now()
  log(`starting ${N} nodes (memory transport, one process)`)
  const nodes = await startNodes()
  const [D, E] = nodes as [MeshNode, MeshNode]
  const subscribers = nodes.slice(2)
  const committed = new Map<string, number>()
  E.runs.onEvent((e) => { committed.set(key(e), performance.now()) })

  // the executor: `EVENTS` progress events, paced, then complete; fresh runs complete at once
  E.runs.handle(BENCH, async (ctx) => {
    if (ctx.input.events === 0) return { ok: true }
    for (let i = 1; i <= EVENTS; i++) {
      await ctx.progress({ i })
      await sleep(INTERVAL_MS)
    }
    return { ok: true }
  })
  await E.publishCard({ name: 'bench-executor', capabilities: [BENCH] })
  await D.join(E.addresses)

  // ---- phase 1: steady delivery --------------------------------------------------------
  const task = `bench-${process.pid}-steady`
  const expectedCount = EVENTS + 2
  const arrived = subscribers.map(() => new Map<string, number>())
  log(`${subscribers.length} subscribers joining ${task}`)
  const subs = await Promise.all(subscribers.map(async (n, i) => n.events.subscribe(task, {
    participants: [D.agentId, E.agentId],
    onEvent: (e) => { arrived[i]!.set(key(e), performance.now()) }
  })))
  const t0 = performance.now()
  await delegate(D, E.agentId, task, EVENTS)
  const complete = (): boolean => arrived.every(m => m.size >= expectedCount)
  await waitFor(() => committed.size >= expectedCount, EVENTS * (INTERVAL_MS + 50) + 30_000)
  const runMs = performance.now() - t0
  const allIn = await waitFor(complete, GRACE_MS)
  for (const s of subs) s.close()

  const latencies: number[] = []
  let lost = 0
  for (const m of arrived) {
    for (const [k, t] of committed) {
      const at = m.get(k)
      if (at === undefined) lost++
      else latencies.push(at - t)
    }
  }
  const steady = summarize(latencies)
  arrived.forEach((m, i) => { if (m.size < committed.size) diagnose(subscribers[i]!, D, E, `steady: ${m.size} of ${committed.size} events`) })
  const deliveries = committed.size * subscribers.length
  const gossip = subscribers.reduce((s, n) => s + n.events.stats.gossip.accepted, 0)
  const synced = subscribers.reduce((s, n) => s + n.events.stats.synced, 0)

  // ---- phase 2: first event on fresh correlations ----------------------------------------
  const firsts: number[] = []
  let freshLost = 0
  for (let k = 0; k < FRESH; k++) {
    const fresh = `bench-${process.pid}-fresh-${k}`
    const got = subscribers.map(() => undefined as number | undefined)
    const fsubs = await Promise.all(subscribers.map(async (n, i) => n.events.subscribe(fresh, {
      participants: [D.agentId, E.agentId],
      onEvent: (e) => { if (e.seq === 1 && got[i] === undefined) got[i] = performance.now() }
    })))
    const run = await delegate(D, E.agentId, fresh, 0)
    const ok = await waitFor(() => got.every(t => t !== undefined), GRACE_MS)
    const c = committed.get(`${run.run_id}#1`)
    for (const t of got) {
      if (t === undefined || c === undefined) freshLost++
      else firsts.push(t - c)
    }
    for (const s of fsubs) s.close()
    if (!ok) {
      log(`fresh correlation ${k}: ${got.filter(t => t === undefined).length} subscribers without the first event`)
      got.forEach((t, i) => { if (t === undefined) diagnose(subscribers[i]!, D, E, `fresh ${k}`) })
    }
  }
  const first = summarize(firsts)

  const figures = {
    nodes: N,
    subscribers: subscribers.length,
    events_per_run: expectedCount,
    interval_ms: INTERVAL_MS,
    delivery: { ...steady, lost, deliveries, all_in_within_grace: allIn, via_gossip: gossip, via_sync: synced, run_ms: runMs },
    fresh: { correlations: FRESH, ...first, lost: freshLost },
    rss_mb_per_node: process.memoryUsage().rss / 1024 / 1024 / N,
    env: { node: process.version, cpus: availableParallelism(), cpu: cpus()[0]?.model ?? '' },
    duration_s: (performance.now() - started) / 1000
  }

  await Promise.all(nodes.map(async n => n.stop()))

  if (JSON_OUT) {
    process.stdout.write(JSON.stringify(figures) + '\n')
    return
  }
  process.stdout.write(`\nrun events, ${N} nodes in one process (memory transport), ${subscribers.length} subscribers, ${figures.env.cpus} cpus, node ${process.version}\n\n`)
  printTable([
    {
      phase: `delivery (${expectedCount} events, 1 per ${INTERVAL_MS} ms)`,
      n: steady.n,
      p50: fmtMs(steady.p50),
      p90: fmtMs(steady.p90),
      p99: fmtMs(steady.p99),
      max: fmtMs(steady.max),
      lost: `${lost} of ${deliveries}`
    },
    {
      phase: `first event, fresh correlation (x${FRESH})`,
      n: first.n,
      p50: fmtMs(first.p50),
      p90: fmtMs(first.p90),
      p99: fmtMs(first.p99),
      max: fmtMs(first.max),
      lost: `${freshLost} of ${FRESH * subscribers.length}`
    }
  ])
  process.stdout.write(`\ntaken from gossip: ${gossip}, from sync: ${synced} (all phases); ` +
    `RSS ${figures.rss_mb_per_node.toFixed(1)} MB per node; ${figures.duration_s.toFixed(1)} s\n`)
  process.stdout.write('targets: p50 <= 15 ms, p99 <= 100 ms, 0 lost\n')
}

await main()
process.exit(0)
