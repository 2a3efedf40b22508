/**
 * Discovery latency on a mesh of real nodes in one process.
 *
 *   node scripts/bench-discover.ts [--nodes 20] [--lookups 100] [--agents N] [--tcp] [--json]
 *
 * The mesh is the simulation's (src/sim/mesh.ts): nodes join through random
 * earlier ones (no central server), with the simulation's Kademlia parameters
 * (SIM_DHT: all nodes share one CPU). About 40%
 * of them publish a card, from a small catalogue of capabilities and tags.
 * Each lookup picks a random node and a random query (exact capability
 * version, capability at any version, or tag) and measures:
 *
 *  - first: `discoverStream` until its first verified card (what a router that
 *    takes the first capable agent waits for);
 *  - full:  `discover`, the whole verified result list.
 *
 * Both run cold (`fresh: true`: every card is fetched from its agent and
 * verified) and warm (cards from the verified cache). A lookup counts as a
 * success when `first` yields a matching card, or `full` returns exactly the
 * agents that match. Benchmark only: nothing here is asserted.
 */
import { performance } from 'node:perf_hooks'
import { cardMatches, type AgentCard, type CardDraft } from '../src/card/card.ts'
import type { DiscoveryQuery } from '../src/card/discovery.ts'
import type { MeshNode } from '../src/node.ts'
import { startSimMesh, waitForDhtPeers } from '../src/sim/mesh.ts'
import { intArg, parseArgs } from './lib/proc.ts'
import { fmtMs, printTable, summarize } from './lib/stats.ts'

const args = parseArgs(process.argv.slice(2))
const NODES = intArg(args, 'nodes', 20)
const LOOKUPS = intArg(args, 'lookups', 100)
const AGENTS = Math.min(NODES, intArg(args, 'agents', Math.max(1, Math.ceil(NODES * 0.4))))
const TCP = args.has('tcp')
const JSON_OUT = args.has('json')
/** Bound on waiting for the mesh to form and for every card to be findable. */
const READY_TIMEOUT_MS = 60_000
const POLL_MS = 20
const ANNOUNCE_CONCURRENCY = 4

const profiles: CardDraft[] = [
  { name: 'reviewer', capabilities: [{ capability_id: 'cap:code-review', version: '2.1.0' }], tags: ['review', 'typescript'] },
  { name: 'translator', capabilities: [{ capability_id: 'cap:translate', version: '1.0.0' }], tags: ['nlp'] },
  { name: 'summarizer', capabilities: [{ capability_id: 'cap:summarize', version: '1.0.0' }], tags: ['nlp'] },
  { name: 'summarizer-next', capabilities: [{ capability_id: 'cap:summarize', version: '2.0.0' }, { capability_id: 'cap:translate', version: '1.0.0' }], tags: ['nlp', 'beta'] },
  { name: 'vision', capabilities: [{ capability_id: 'cap:vision', version: '0.3.0' }], tags: ['vision'] }
]

const queries: DiscoveryQuery[] = [
  { capability: { capability_id: 'cap:code-review', version: '2.1.0' } },
  { capability: { capability_id: 'cap:translate', version: '1.0.0' } },
  { capability: { capability_id: 'cap:summarize', version: null } },
  { capability: { capability_id: 'cap:vision', version: '0.3.0' } },
  { tags: ['nlp'] },
  { tags: ['review'] }
]

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

async function startMesh (): Promise<MeshNode[]> {
  // the simulation's mesh: nodes start in small batches, each joining through
  // two earlier ones, with the simulation's Kademlia parameters (SIM_DHT)
  const mesh = await startSimMesh({ nodes: NODES, transport: TCP ? 'tcp' : 'memory' })
  // every node has a routing-table peer; that every card is findable is checked by lookups below
  await waitForDhtPeers(mesh, 1, READY_TIMEOUT_MS)
  return mesh.map(n => n.node)
}

interface Sample { ms: number, ok: boolean }

async function first (node: MeshNode, q: DiscoveryQuery, fresh: boolean, expected: string[]): Promise<Sample> {
  const t0 = performance.now()
  let card: AgentCard | undefined
  for await (const c of node.discovery.discoverStream(q, { fresh })) {
    card = c
    break
  }
  // a node asking for what only it offers rightly finds nothing
  const ok = card === undefined ? expected.length === 0 : expected.includes(card.agent_id) && cardMatches(card, q)
  return { ms: performance.now() - t0, ok }
}

async function full (node: MeshNode, q: DiscoveryQuery, fresh: boolean, expected: string[]): Promise<Sample> {
  const t0 = performance.now()
  const cards = await node.discover(q, { fresh })
  const ms = performance.now() - t0
  const got = cards.map(c => c.agent_id).sort()
  return { ms, ok: got.length === expected.length && got.every((id, i) => id === expected[i]) }
}

async function main (): Promise<void> {
  const setupStart = performance.now()
  log(`starting ${NODES} nodes (${TCP ? 'TCP loopback' : 'memory transport'}), ${AGENTS} of them agents ...`)
  const nodes = await startMesh()
  log(`  nodes up and routing after ${fmtMs(performance.now() - setupStart)}`)
  const agents = nodes.slice(0, AGENTS).map((node, i) => ({ node, profile: profiles[i % profiles.length]! }))
  const cards = await Promise.all(agents.map(async ({ node, profile }) => node.discovery.publish({ ...profile, name: `${profile.name}-${node.agentId.slice(-4)}` }, { announce: false })))
  // a few announcements at a time, as the simulation does: all at once, their DHT requests time out behind each other
  const reached: number[] = []
  const queue = [...agents]
  await Promise.all(Array.from({ length: ANNOUNCE_CONCURRENCY }, async () => {
    for (let a = queue.shift(); a !== undefined; a = queue.shift()) reached.push(await a.node.discovery.announce())
  }))
  const expectedFor = (q: DiscoveryQuery, self: MeshNode): string[] =>
    cards.filter(c => c.agent_id !== self.agentId && cardMatches(c, q)).map(c => c.agent_id).sort()
  log(`  cards published and announced after ${fmtMs(performance.now() - setupStart)}`)
  // ready when the node farthest from the agents (the last one) sees every card
  const probe = nodes[nodes.length - 1]!
  // (bounded: a full list that stays short is what the full/* rows then count as failures)
  for (const q of queries) {
    await waitFor(async () => (await probe.discover(q, { fresh: true })).length === expectedFor(q, probe).length, `cards for ${JSON.stringify(q)}`)
      .catch((err: Error) => { log(`  ${err.message}: going on`) })
  }
  const setupMs = performance.now() - setupStart
  log(`mesh ready in ${fmtMs(setupMs)}; provider keys announced per agent: ${reached.join(' ')}`)

  const results = new Map<string, Sample[]>()
  const record = (name: string, s: Sample): void => {
    const list = results.get(name) ?? []
    list.push(s)
    results.set(name, list)
  }
  for (let i = 0; i < LOOKUPS; i++) {
    const node = pick(nodes)
    const q = pick(queries)
    const expected = expectedFor(q, node)
    // cold first, so the warm run right after finds the cards it just verified
    record('first/cold', await first(node, q, true, expected))
    record('first/warm', await first(node, q, false, expected))
    record('full/cold', await full(node, q, true, expected))
    record('full/warm', await full(node, q, false, expected))
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
  if (JSON_OUT) {
    process.stdout.write(JSON.stringify({ nodes: NODES, agents: AGENTS, lookups: LOOKUPS, transport: TCP ? 'tcp' : 'memory', setup_ms: setupMs, rows }) + '\n')
  } else {
    process.stdout.write(`discover on ${NODES} nodes (${TCP ? 'TCP loopback' : 'memory transport'}, one process), ${AGENTS} agents, ${LOOKUPS} lookups of each kind\n`)
    printTable(rows)
  }
  await Promise.all(nodes.map(async n => n.stop()))
}

await main()
