/**
 * A mesh of real nodes in one process on the memory transport, for
 * simulations: every node joins through a couple of random earlier nodes, so
 * there is no central server, and latency per node is base ± jitter.
 */
import { CompactMemoryDatastore } from '../storage/compact-memory.ts'
import { generateKeyPair } from '@libp2p/crypto/keys'
import type { PrivateKey } from '@libp2p/interface'
import { createMeshNode, type MeshNode } from '../node.ts'
import type { DhtTuning } from '../wire/host.ts'

export interface SimMeshOptions {
  nodes: number
  latencyMs?: number
  jitterMs?: number
  /** Each node joins through this many random earlier nodes. */
  joinFanout?: number
  random?: () => number
  onProgress?: (started: number) => void
  /** memory (default): one process, simulated latency; tcp: loopback sockets. */
  transport?: 'memory' | 'tcp'
  /** Extra multiaddrs every node joins through (e.g. nodes in other processes). */
  bootstrap?: string[]
  /** Kademlia parameters of every node (default SIM_DHT). */
  dht?: DhtTuning
  /** Connections each node keeps open (libp2p's default otherwise). */
  maxConnections?: number
  /** The budget's grace period of every node (default CONNECTION_GRACE_MS). */
  connectionGraceMs?: number
}

export interface SimNode {
  index: number
  node: MeshNode
  key: PrivateKey
  datastore: CompactMemoryDatastore
  listen: string
  latencyMs: number
  dht: DhtTuning
  maxConnections?: number
  connectionGraceMs?: number
  up: boolean
}

/**
 * Kademlia in a simulation: every node shares one CPU, where a DHT request
 * costs several ms (peer-store and stream work on both sides), and a lookup
 * makes about k of them per path. A smaller k and one lookup path keep the
 * announcements of 100 to 200 nodes within minutes; a node on its own machine
 * keeps the defaults (DHT_K in constants.ts).
 */
export const SIM_DHT: DhtTuning = { k: 10, alpha: 3, disjointPaths: 1 }

let meshCounter = 0
/** Nodes started at once. */
const SIM_START_BATCH = 8
/** Extra dials a joining node may try when one fails. */
const SIM_JOIN_RETRIES = 4

async function boot (n: Omit<SimNode, 'node' | 'up'>): Promise<MeshNode> {
  const node = await createMeshNode({
    privateKey: n.key,
    datastore: n.datastore,
    listen: [n.listen],
    localMesh: true,
    memoryLatencyMs: n.latencyMs,
    dht: n.dht,
    ...(n.maxConnections === undefined ? {} : { maxConnections: n.maxConnections }),
    ...(n.connectionGraceMs === undefined ? {} : { connectionGraceMs: n.connectionGraceMs })
  })
  await node.start()
  return node
}

export async function startSimMesh (opts: SimMeshOptions): Promise<SimNode[]> {
  const random = opts.random ?? Math.random
  const fanout = opts.joinFanout ?? 2
  const id = `${process.pid}-${meshCounter++}`
  const out: SimNode[] = []
  const tcp = opts.transport === 'tcp'
  const bootOne = async (i: number, earlier: SimNode[]): Promise<SimNode> => {
    const jitter = (opts.jitterMs ?? 0) * (random() * 2 - 1)
    const base = {
      index: i,
      key: await generateKeyPair('Ed25519'),
      datastore: new CompactMemoryDatastore(),
      listen: tcp ? '/ip4/127.0.0.1/tcp/0' : `/memory/aap-sim-${id}-${i}`,
      latencyMs: Math.max(0, Math.round((opts.latencyMs ?? 0) + jitter)),
      dht: opts.dht ?? SIM_DHT,
      ...(opts.maxConnections === undefined ? {} : { maxConnections: opts.maxConnections }),
      ...(opts.connectionGraceMs === undefined ? {} : { connectionGraceMs: opts.connectionGraceMs })
    }
    const sim: SimNode = { ...base, node: await boot(base), up: true }
    await joinSome(sim, earlier, Math.min(fanout, earlier.length), random)
    if (opts.bootstrap !== undefined && opts.bootstrap.length > 0) await sim.node.join(opts.bootstrap)
    return sim
  }
  // nodes start in small batches, each joining through nodes of earlier batches
  // (the first node starts alone: every later one needs someone to join)
  for (let i = 0; i < opts.nodes;) {
    const earlier = [...out]
    const size = i === 0 ? 1 : Math.min(SIM_START_BATCH, opts.nodes - i)
    const first = i
    i += size
    const batch = await Promise.all(Array.from({ length: size }, async (_, k) => bootOne(first + k, earlier)))
    out.push(...batch)
    opts.onProgress?.(out.length)
  }
  return out
}

/** Stop a node, keeping its key and datastore (as a process that dies keeps its disk). */
export async function stopSimNode (n: SimNode): Promise<void> {
  n.up = false
  await n.node.stop()
}

/** Start a stopped node again from its key and datastore, and rejoin through live nodes. */
export async function restartSimNode (n: SimNode, mesh: SimNode[], random: () => number = Math.random): Promise<void> {
  n.node = await boot(n)
  n.up = true
  const ups = mesh.filter(o => o.up && o !== n)
  await joinSome(n, ups, Math.min(2, ups.length), random)
}

/** Join through `want` random nodes of `among`; a dial that fails (a busy CPU) is tried on another, a bounded number of times. */
async function joinSome (n: SimNode, among: SimNode[], want: number, random: () => number): Promise<void> {
  let joined = 0
  for (let tries = 0; joined < want && tries < want + SIM_JOIN_RETRIES; tries++) {
    const other = among[Math.floor(random() * among.length)]
    if (other !== undefined && other.up) joined += await n.node.join(other.node.addresses)
  }
}

/** Resolve when every live node has `min` peers in its DHT routing table (bounded). */
export async function waitForDhtPeers (mesh: SimNode[], min: number, timeoutMs = 60_000): Promise<void> {
  const deadline = Date.now() + timeoutMs
  // the routing table's size is a field; the peer store would decode every peer it holds per look
  const tableSize = (n: SimNode): number => Number(Reflect.get(Reflect.get(n.node.host.services.dht, 'routingTable') ?? {}, 'size') ?? 0)
  let waiting = mesh.filter(n => n.up)
  while (true) {
    waiting = waiting.filter(n => tableSize(n) < min)
    if (waiting.length === 0) return
    if (Date.now() > deadline) throw new Error(`${waiting.length} nodes (first: ${waiting[0]?.index}) did not have ${min} DHT peers in time`)
    await new Promise(resolve => setTimeout(resolve, 50))
  }
}

export async function stopSimMesh (mesh: SimNode[]): Promise<void> {
  await Promise.allSettled(mesh.filter(n => n.up).map(async n => stopSimNode(n)))
}
