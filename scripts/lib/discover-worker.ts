/**
 * One process of scripts/bench-discover.ts's mesh: `--count` nodes on TCP
 * loopback with this process's own event loop, global indexes from
 * `--first`, each joined through one node of an earlier process (`--join`,
 * when given) and one earlier node of this one, with the simulation's
 * Kademlia parameters (SIM_DHT). Nodes whose global index is below `--agents`
 * publish a card (not yet announced). Talks to the driver over IPC only:
 *
 *   -> { type: 'ready', members: [{ agent_id, addresses, card | null }] }
 *   <- { id, op: 'announce' }              -> { id, value: [provider keys reached per agent] }
 *   <- { id, op: 'cards', cards }          -> { id, value: true }   (every card of the mesh)
 *   <- { id, op: 'count', node, query }    -> { id, value: { got, expected } }  (fresh full discover)
 *   <- { id, op: 'lookup', node, query }   -> { id, value: { 'first/cold': Sample, ... } }
 *
 * Every lookup is timed in this process, on its own clock.
 */
import type { AgentCard } from '../../src/card/card.ts'
import { createMeshNode, type MeshNode } from '../../src/node.ts'
import { SIM_DHT } from '../../src/sim/mesh.ts'
import { expectedFor, lookupAll, profiles, queries } from './discover-common.ts'
import { serveIpcWorker } from './ipc-child.ts'
import { intArg, parseArgs } from './proc.ts'

/** Announcements of one process at once, and how long one may take. */
const ANNOUNCE_CONCURRENCY = 4
const ANNOUNCE_TIMEOUT_MS = 30_000

const argv = process.argv.slice(2)
const args = parseArgs(argv)
const FIRST = intArg(args, 'first', 0)
const COUNT = intArg(args, 'count', 1)
const AGENTS = intArg(args, 'agents', 0)
const JOIN: string[] = []
for (let i = 0; i < argv.length; i++) if (argv[i] === '--join' && argv[i + 1] !== undefined) JOIN.push(argv[i + 1]!)

const log = (msg: string): void => { process.stderr.write(`[discover-worker ${FIRST}] ${msg}\n`) }

const nodes: MeshNode[] = []
const cards: Array<AgentCard | null> = []
for (let i = 0; i < COUNT; i++) {
  const node = await createMeshNode({ listen: ['/ip4/127.0.0.1/tcp/0'], localMesh: true, dht: SIM_DHT })
  await node.start()
  const via: string[] = []
  if (JOIN.length > 0) via.push(JOIN[Math.floor(Math.random() * JOIN.length)]!)
  if (i > 0) via.push(...nodes[Math.floor(Math.random() * i)]!.addresses)
  if (via.length > 0 && await node.join(via) === 0) throw new Error(`node ${FIRST + i} could not join through ${via.join(', ')}`)
  nodes.push(node)
  const g = FIRST + i
  const profile = profiles[g % profiles.length]!
  cards.push(g < AGENTS ? await node.discovery.publish({ ...profile, name: `${profile.name}-${node.agentId.slice(-4)}` }, { announce: false }) : null)
}
let all: AgentCard[] = []

interface Request { id: number, op: 'announce' | 'cards' | 'count' | 'lookup', cards?: AgentCard[], node?: number, query?: number }

async function answer (msg: Request): Promise<unknown> {
  if (msg.op === 'announce') {
    const queue = nodes.filter((_, i) => cards[i] !== null)
    const reached: number[] = []
    await Promise.all(Array.from({ length: ANNOUNCE_CONCURRENCY }, async () => {
      for (let n = queue.shift(); n !== undefined; n = queue.shift()) reached.push(await n.discovery.announce(AbortSignal.timeout(ANNOUNCE_TIMEOUT_MS)))
    }))
    return reached
  }
  if (msg.op === 'cards') {
    all = msg.cards ?? []
    return true
  }
  const node = nodes[msg.node ?? -1]
  const q = queries[msg.query ?? -1]
  if (node === undefined || q === undefined) throw new Error(`no node ${String(msg.node)} or query ${String(msg.query)}`)
  const expected = expectedFor(all, q, node.agentId)
  if (msg.op === 'count') return { got: (await node.discover(q, { fresh: true })).length, expected: expected.length }
  if (msg.op === 'lookup') return lookupAll(node, q, expected)
  throw new Error(`unknown op ${String(msg.op)}`)
}

serveIpcWorker(answer, nodes, { members: nodes.map((n, i) => ({ agent_id: n.agentId, addresses: n.addresses, card: cards[i] })) }, log)
