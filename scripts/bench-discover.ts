/**
 * Discovery latency on a mesh of real nodes.
 *
 *   node scripts/bench-discover.ts [--nodes 20] [--lookups 100] [--agents N]
 *     [--processes 0] [--tcp] [--json]
 *
 * Layout: by default the simulation's one-process mesh (src/sim/mesh.ts,
 * memory transport unless --tcp). With `--processes P` the nodes are spread
 * over P worker processes (scripts/lib/discover-worker.ts), each its own
 * event loop, on TCP loopback, each node joining through one node of an
 * earlier process and one earlier node of its own. On this 2-core machine
 * the spread is slower, not faster: a lookup's DHT hops and card fetch each
 * wait for another process to be scheduled and cross the kernel (100 nodes,
 * 1000 lookups, first verified card p50: 34.4 ms over 4 processes against
 * 25.6 ms in one process, under --cpu-prof). Both use the simulation's
 * Kademlia parameters (SIM_DHT: k 10, alpha 3, one path).
 *
 * About 40% of the nodes publish a card, from a small catalogue of
 * capabilities and tags. Each lookup picks a random node and a random query
 * (exact capability version, capability at any version, or tag) and
 * measures, in the process of that node:
 *
 *  - first: `discoverStream` until its first verified card (what a router that
 *    takes the first capable agent waits for);
 *  - full:  `discover`, the whole verified result list.
 *
 * Both run cold (`fresh: true`: every card is fetched from its agent and
 * verified) and warm (cards from the verified cache). A lookup counts as a
 * success when `first` yields a matching card, or `full` returns exactly the
 * agents that match. Benchmark only: nothing here is asserted.
 * Target (shared/design/targets.md): first verified card, 100 nodes,
 * p50 <= 15 ms, 1000 of 1000 lookups find an agent.
 */
import { performance } from 'node:perf_hooks'
import type { AgentCard } from '../src/card/card.ts'
import type { DiscoveryQuery } from '../src/card/discovery.ts'
import type { MeshNode } from '../src/node.ts'
import { startSimMesh, waitForDhtPeers } from '../src/sim/mesh.ts'
import { expectedFor, lookupAll, profiles, queries, type Sample } from './lib/discover-common.ts'
import { ask, spawnIpcChild, stopIpcChild, type IpcChild } from './lib/ipc-child.ts'
import { intArg, parseArgs } from './lib/proc.ts'
import { fmtMs, printTable, summarize } from './lib/stats.ts'

const args = parseArgs(process.argv.slice(2), {
  known: ['nodes', 'lookups', 'agents', 'processes', 'tcp', 'json'],
  text: 'usage: node scripts/bench-discover.ts [--nodes 20] [--lookups 100] [--agents N] [--processes 0] [--tcp] [--json]'
})
const NODES = intArg(args, 'nodes', 20)
const LOOKUPS = intArg(args, 'lookups', 100)
const AGENTS = Math.min(NODES, intArg(args, 'agents', Math.max(1, Math.ceil(NODES * 0.4))))
const PROCESSES = Math.min(intArg(args, 'processes', 0), NODES)
const TCP = args.has('tcp') || PROCESSES > 0
const JSON_OUT = args.has('json')
/** Bound on waiting for the mesh to form and for every card to be findable. */
const READY_TIMEOUT_MS = 60_000
const POLL_MS = 20
const ANNOUNCE_CONCURRENCY = 4
const WORKER = new URL('./lib/discover-worker.ts', import.meta.url).pathname
const WORKER_START_TIMEOUT_MS = 5 * 60_000
const WORKER_REQUEST_TIMEOUT_MS = 2 * 60_000
/** Nodes of earlier processes a new process's nodes join through. */
const JOIN_FANOUT = 8

function log (text: string): void {
  if (!JSON_OUT) process.stderr.write(text + '\n')
}

async function waitFor (cond: () => Promise<boolean>, what: string): Promise<void> {
  const deadline = Date.now() + READY_TIMEOUT_MS
  while (!(await cond())) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`)
    await new Promise(resolve => setTimeout(resolve, POLL_MS))
  }
}

function pick<T> (items: readonly T[]): T {
  const item = items[Math.floor(Math.random() * items.length)]
  if (item === undefined) throw new Error('pick from an empty list')
  return item
}

/** A mesh the bench can look up in: node `i` (global index) runs the four lookups of query `q`. */
interface Mesh {
  lookup: (i: number, q: number) => Promise<Record<string, Sample>>
  /** The fresh full result size against the expected one, at the node farthest from the agents. */
  probe: (q: number) => Promise<{ got: number, expected: number }>
  reached: number[]
  stop: () => Promise<void>
}

async function oneProcessMesh (): Promise<Mesh> {
  // the simulation's mesh: nodes start in small batches, each joining through
  // two earlier ones, with the simulation's Kademlia parameters (SIM_DHT)
  const sim = await startSimMesh({ nodes: NODES, transport: TCP ? 'tcp' : 'memory' })
  // every node has a routing-table peer; that every card is findable is checked by lookups below
  await waitForDhtPeers(sim, 1, READY_TIMEOUT_MS)
  const nodes: MeshNode[] = sim.map(n => n.node)
  const agents = nodes.slice(0, AGENTS).map((node, i) => ({ node, profile: profiles[i % profiles.length]! }))
  const cards = await Promise.all(agents.map(async ({ node, profile }) => node.discovery.publish({ ...profile, name: `${profile.name}-${node.agentId.slice(-4)}` }, { announce: false })))
  // a few announcements at a time, as the simulation does: all at once, their DHT requests time out behind each other
  const reached: number[] = []
  const queue = [...agents]
  await Promise.all(Array.from({ length: ANNOUNCE_CONCURRENCY }, async () => {
    for (let a = queue.shift(); a !== undefined; a = queue.shift()) reached.push(await a.node.discovery.announce())
  }))
  const probe = nodes[nodes.length - 1]!
  return {
    lookup: async (i, q) => lookupAll(nodes[i]!, queries[q]!, expectedFor(cards, queries[q]!, nodes[i]!.agentId)),
    probe: async (q) => ({ got: (await probe.discover(queries[q]!, { fresh: true })).length, expected: expectedFor(cards, queries[q]!, probe.agentId).length }),
    reached,
    stop: async () => { await Promise.all(nodes.map(async n => n.stop())) }
  }
}

interface Member { agent_id: string, addresses: string[], card: AgentCard | null }

async function processMesh (): Promise<Mesh> {
  const shares = Array.from({ length: PROCESSES }, (_, i) => Math.floor(NODES / PROCESSES) + (i < NODES % PROCESSES ? 1 : 0))
  const children: IpcChild[] = []
  const members: Member[] = []
  // one process after the other, each joining through nodes of the earlier ones: one mesh
  for (const share of shares) {
    const join = members.length === 0 ? [] : Array.from({ length: JOIN_FANOUT }, () => pick(members).addresses[0]!)
    const c = await spawnIpcChild(WORKER, ['--first', String(members.length), '--count', String(share), '--agents', String(AGENTS), ...join.flatMap(a => ['--join', a])], WORKER_START_TIMEOUT_MS)
    children.push(c)
    members.push(...(c.ready.members as Member[]))
    log(`  ${members.length}/${NODES} nodes up`)
  }
  const owner = (i: number): { child: IpcChild, local: number } => {
    let local = i
    for (let p = 0; p < shares.length; p++) {
      if (local < shares[p]!) return { child: children[p]!, local }
      local -= shares[p]!
    }
    throw new Error(`no node ${i}`)
  }
  const reached = (await Promise.all(children.map(async c => ask(c, { op: 'announce' }, WORKER_REQUEST_TIMEOUT_MS) as Promise<number[]>))).flat()
  const cards = members.flatMap(m => m.card === null ? [] : [m.card])
  await Promise.all(children.map(async c => ask(c, { op: 'cards', cards }, WORKER_REQUEST_TIMEOUT_MS)))
  return {
    lookup: async (i, q) => {
      const o = owner(i)
      return ask(o.child, { op: 'lookup', node: o.local, query: q }, WORKER_REQUEST_TIMEOUT_MS) as Promise<Record<string, Sample>>
    },
    probe: async (q) => {
      const o = owner(NODES - 1)
      return ask(o.child, { op: 'count', node: o.local, query: q }, WORKER_REQUEST_TIMEOUT_MS) as Promise<{ got: number, expected: number }>
    },
    reached,
    stop: async () => { await Promise.all(children.map(stopIpcChild)) }
  }
}

async function main (): Promise<void> {
  const setupStart = performance.now()
  const where = PROCESSES > 0 ? `${PROCESSES} processes, TCP loopback` : `one process, ${TCP ? 'TCP loopback' : 'memory transport'}`
  log(`starting ${NODES} nodes (${where}), ${AGENTS} of them agents ...`)
  const mesh = PROCESSES > 0 ? await processMesh() : await oneProcessMesh()
  log(`  cards published and announced after ${fmtMs(performance.now() - setupStart)}`)
  // ready when the node farthest from the agents (the last one) sees every card
  // (bounded: a full list that stays short is what the full/* rows then count as failures)
  for (let q = 0; q < queries.length; q++) {
    await waitFor(async () => { const r = await mesh.probe(q); return r.got === r.expected }, `cards for ${JSON.stringify(queries[q] as DiscoveryQuery)}`)
      .catch((err: Error) => { log(`  ${err.message}: going on`) })
  }
  const setupMs = performance.now() - setupStart
  log(`mesh ready in ${fmtMs(setupMs)}; provider keys announced per agent: ${mesh.reached.join(' ')}`)

  const results = new Map<string, Sample[]>()
  for (let i = 0; i < LOOKUPS; i++) {
    const samples = await mesh.lookup(Math.floor(Math.random() * NODES), Math.floor(Math.random() * queries.length))
    for (const [name, s] of Object.entries(samples)) results.set(name, [...(results.get(name) ?? []), s])
    if ((i + 1) % 100 === 0) log(`  ${i + 1}/${LOOKUPS} lookups of each kind after ${fmtMs(performance.now() - setupStart)}`)
  }

  const rows = [...results].map(([name, samples]) => {
    const ok = samples.filter(s => s.ok)
    const stats = summarize(ok.map(s => s.ms))
    return {
      lookup: name,
      ok: ok.length,
      failed: samples.length - ok.length,
      p50: fmtMs(stats.p50),
      p90: fmtMs(stats.p90),
      p99: fmtMs(stats.p99),
      max: fmtMs(stats.max)
    }
  })
  const transport = TCP ? 'tcp' : 'memory'
  if (JSON_OUT) {
    process.stdout.write(JSON.stringify({ nodes: NODES, agents: AGENTS, lookups: LOOKUPS, processes: PROCESSES, transport, setup_ms: setupMs, rows }) + '\n')
  } else {
    process.stdout.write(`discover on ${NODES} nodes (${where}), ${AGENTS} agents, ${LOOKUPS} lookups of each kind\n`)
    printTable(rows)
    process.stdout.write('target: first verified card p50 <= 15 ms at 100 nodes, every lookup finds an agent\n')
  }
  await mesh.stop()
}

// A mesh on the memory transport holds no socket, and what ends a stalled lookup or announcement is an
// AbortSignal.timeout, whose timer does not keep a process alive: hold the loop open while the benchmark runs.
const alive = setInterval(() => {}, 60_000)
try {
  await main()
} finally {
  clearInterval(alive)
}
process.exit(0)
