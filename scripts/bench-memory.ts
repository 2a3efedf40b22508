/**
 * What memory a node holds, and what each of its connections adds: the
 * figures behind "memory per node" (issue #17, docs/scaling.md).
 *
 * In one process (with the Buffer pool slab of a node process,
 * src/wire/buffer-pool.ts), after a full GC at each step:
 *
 *  1. nothing started: the loaded code and the runtime;
 *  2. `--nodes` nodes started on TCP loopback, none connected: what a node
 *     holds by itself (its libp2p host, DHT, gossip, services);
 *  3. every pair of them connected, each connection with the streams a
 *     node keeps open on it (gossipsub's, one each way): what a connection
 *     adds, both ends, since both are in this process.
 *
 * Between steps 2 and 3 it also compares two V8 heap snapshots and prints
 * what kinds of objects a connection adds, per connection, so the figure can
 * be read (listeners, timers, closures, buffers). RSS is printed but is the
 * least telling: V8 keeps heap it has grown to, so RSS moves in steps
 * (only the process's and a lone node's are printed).
 *
 *   node scripts/bench-memory.ts [--nodes 24] [--top 14] [--json]
 *
 * A node at its connection bound (CONNECTIONS_MAX) holds about
 * base + bound x (per connection / 2). Benchmark only: nothing is asserted.
 */
import { mkdtemp, rm } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { setFlagsFromString, writeHeapSnapshot } from 'node:v8'
import { runInNewContext } from 'node:vm'
import { CONNECTIONS_MAX } from '../src/constants.ts'
import { createMeshNode, type MeshNode } from '../src/node.ts'
import { summarizeHeapSnapshot } from '../src/sim/heap-summary.ts'
import { useNodeBufferPool } from '../src/wire/buffer-pool.ts'
import { intArg, parseArgs } from './lib/proc.ts'
import { printTable } from './lib/stats.ts'

const args = parseArgs(process.argv.slice(2), {
  known: ['nodes', 'top', 'json'],
  text: 'usage: node scripts/bench-memory.ts [--nodes 24] [--top 14] [--json]'
})
const NODES = intArg(args, 'nodes', 24)
const TOP = intArg(args, 'top', 14)
const JSON_OUT = args.has('json')
/** How long the connections may take to open their gossip streams. */
const STREAMS_WITHIN_MS = 60_000
const KIB = 1024
const log = (msg: string): void => { process.stderr.write(`[bench-memory] ${msg}\n`) }

useNodeBufferPool()
setFlagsFromString('--expose-gc')
const gc = runInNewContext('gc') as () => void

interface Mem { heap: number, external: number, rss: number }

/** Live memory after a full GC (twice: the second collects what the first's finalizers let go). */
function live (): Mem {
  gc()
  gc()
  const m = process.memoryUsage()
  return { heap: m.heapUsed, external: m.external, rss: m.rss }
}

/** Resolve once `done()` holds, looked at every 50 ms (gossipsub opens its streams with no event of its own); reject after `withinMs`. */
async function whenAll (done: () => boolean, withinMs: number, what: string): Promise<void> {
  const deadline = Date.now() + withinMs
  while (!done()) {
    if (Date.now() > deadline) throw new Error(`${what}: not within ${withinMs} ms`)
    await new Promise(resolve => setTimeout(resolve, 50))
  }
}

function streamsOpen (nodes: MeshNode[]): number {
  let n = 0
  for (const node of nodes) for (const c of node.host.getConnections()) n += c.streams.length
  return n
}

const dir = await mkdtemp(join(tmpdir(), 'aap-bench-memory-'))
const nodes: MeshNode[] = []
try {
  const m0 = live()
  for (let i = 0; i < NODES; i++) {
    const node = await createMeshNode({ listen: ['/ip4/127.0.0.1/tcp/0'], localMesh: true })
    await node.start()
    nodes.push(node)
  }
  const m1 = live()
  writeHeapSnapshot(join(dir, 'before.heapsnapshot'))
  log(`${NODES} nodes started; connecting every pair`)
  let connections = 0
  for (let i = 0; i < NODES; i++) {
    for (let j = i + 1; j < NODES; j++) {
      const to = nodes[j]!.host.getMultiaddrs()[0]
      if (to === undefined) throw new Error(`node ${j} has no address`)
      await nodes[i]!.host.dial(to, { signal: AbortSignal.timeout(10_000) })
      connections++
    }
  }
  // each connection carries gossipsub's two streams (one opened by each end), seen from both ends
  await whenAll(() => streamsOpen(nodes) >= connections * 4, STREAMS_WITHIN_MS, 'gossip streams')
  const m2 = live()
  writeHeapSnapshot(join(dir, 'after.heapsnapshot'))
  const streams = streamsOpen(nodes) / 2

  const before = new Map((await summarizeHeapSnapshot(join(dir, 'before.heapsnapshot'), 1e6)).map(k => [k.what, k]))
  const after = await summarizeHeapSnapshot(join(dir, 'after.heapsnapshot'), 1e6)
  const kinds = after
    .map(k => ({ what: k.what, bytes: k.bytes - (before.get(k.what)?.bytes ?? 0), count: k.count - (before.get(k.what)?.count ?? 0) }))
    // code is compiled once, on the first connection's path, not per connection
    .filter(k => k.what !== '(code)')
    .sort((a, b) => b.bytes - a.bytes)

  const perNode = { heap: (m1.heap - m0.heap) / NODES, external: (m1.external - m0.external) / NODES, rss: (m1.rss - m0.rss) / NODES }
  const perConn = { heap: (m2.heap - m1.heap) / connections, external: (m2.external - m1.external) / connections, rss: (m2.rss - m1.rss) / connections }
  const atBound = (k: keyof Mem): number => perNode[k] + CONNECTIONS_MAX * perConn[k] / 2
  const result = {
    nodes: NODES,
    connections,
    streams_per_connection: streams / connections,
    kib: {
      process_before_nodes: { heap: m0.heap / KIB, external: m0.external / KIB, rss: m0.rss / KIB },
      per_node_alone: { heap: perNode.heap / KIB, external: perNode.external / KIB, rss: perNode.rss / KIB },
      per_connection_both_ends: { heap: perConn.heap / KIB, external: perConn.external / KIB, rss: perConn.rss / KIB },
      node_at_bound: { bound: CONNECTIONS_MAX, heap: atBound('heap') / KIB, external: atBound('external') / KIB }
    },
    per_connection_objects: kinds.slice(0, TOP).map(k => ({ what: k.what, bytes: k.bytes / connections, count: k.count / connections }))
  }
  if (JSON_OUT) {
    process.stdout.write(`${JSON.stringify(result, null, 2)}\n`)
  } else {
    const k = (b: number): string => `${(b / KIB).toFixed(1)} KiB`
    console.log(`memory of mesh nodes in one process: ${NODES} nodes, ${connections} connections (${(streams / connections).toFixed(1)} streams each), live after a full GC`)
    printTable([
      { what: 'the process before any node (code, runtime)', heap: k(m0.heap), external: k(m0.external), rss: k(m0.rss) },
      { what: 'a node by itself', heap: k(perNode.heap), external: k(perNode.external), rss: k(perNode.rss) },
      // V8 grows its heap in steps and keeps it: RSS per connection is not a figure to read
      { what: 'a connection, both ends', heap: k(perConn.heap), external: k(perConn.external), rss: '-' },
      { what: `a node with ${CONNECTIONS_MAX} connections (the bound)`, heap: k(atBound('heap')), external: k(atBound('external')), rss: '-' }
    ])
    console.log('\nwhat a connection adds (both ends), by kind of object, from two heap snapshots (code compiled meanwhile left out):')
    printTable(result.per_connection_objects.map(o => ({ what: o.what, bytes: o.bytes.toFixed(0), count: o.count.toFixed(1) })))
  }
} finally {
  await Promise.all(nodes.map(async n => n.stop()))
  await rm(dir, { recursive: true, force: true })
}
