/**
 * One process of subscribers for scripts/bench-events.ts: `--count` mesh nodes
 * on TCP loopback with this process's own event loop, each with its own
 * verified-signature cache (the node's default), each joined through one of
 * the driver's nodes (`--join`) and one earlier node of this process. Talks
 * to the driver over the IPC channel only:
 *
 *   -> { type: 'ready', members: [agent_id] }
 *   <- { id, op: 'clock' }                          -> { id, value: now }
 *   <- { id, op: 'subscribe', task, participants, expect }
 *        subscribes every node; `expect` seqs (1..expect) make a node complete
 *                                                   -> { id, value: true }
 *   -> { type: 'complete', task }   once every node has seqs 1..expect of it
 *   <- { id, op: 'collect', task }  closes the subscriptions
 *                                                   -> { id, value: [[ [run_id#seq, at], ... ] per node] }
 *   <- { id, op: 'stats' }                          -> { id, value: { checked, hits, refused, gossip, synced } }
 *
 * Times are `now()`: performance.timeOrigin + performance.now() (see
 * bench-events.ts for why that clock, and how the driver checks it).
 *
 *   node scripts/lib/events-worker.ts --count 25 --join /ip4/127.0.0.1/tcp/1234/p2p/... [--join ...]
 */
import { performance } from 'node:perf_hooks'
import { createMeshNode, type MeshNode } from '../../src/node.ts'
import type { EventSubscription } from '../../src/events/subscription.ts'
import { serveIpcWorker } from './ipc-child.ts'
import { intArg, parseArgs } from './proc.ts'

const argv = process.argv.slice(2)
const args = parseArgs(argv)
const COUNT = intArg(args, 'count', 1)
const JOIN: string[] = []
for (let i = 0; i < argv.length; i++) if (argv[i] === '--join' && argv[i + 1] !== undefined) JOIN.push(argv[i + 1]!)

const now = (): number => performance.timeOrigin + performance.now()
const send = (msg: unknown): void => { process.send?.(msg) }
const log = (msg: string): void => { process.stderr.write(`[events-worker ${process.pid}] ${msg}\n`) }

const nodes: MeshNode[] = []
for (let i = 0; i < COUNT; i++) {
  const node = await createMeshNode({ listen: ['/ip4/127.0.0.1/tcp/0'], localMesh: true })
  await node.start()
  const via = [JOIN[Math.floor(Math.random() * JOIN.length)]!]
  if (i > 0) via.push(...nodes[Math.floor(Math.random() * i)]!.addresses)
  if (await node.join(via) === 0) throw new Error(`node ${i} could not join through ${via.join(', ')}`)
  nodes.push(node)
}

interface Tracked { subs: EventSubscription[], arrived: Array<Map<string, number>>, expect: number, complete: boolean }
const tracked = new Map<string, Tracked>()

function checkComplete (task: string, t: Tracked): void {
  if (t.complete) return
  for (const m of t.arrived) {
    for (let s = 1; s <= t.expect; s++) if (!m.has(`#${s}`)) return
  }
  t.complete = true
  send({ type: 'complete', task })
}

interface Request { id: number, op: 'clock' | 'subscribe' | 'collect' | 'stats', task?: string, participants?: string[], expect?: number }

async function answer (msg: Request): Promise<unknown> {
  if (msg.op === 'clock') return now()
  if (msg.op === 'subscribe') {
    const task = msg.task ?? ''
    // per node: `run_id#seq` -> arrival, and `#seq` as a marker for the completeness check
    const t: Tracked = { subs: [], arrived: nodes.map(() => new Map<string, number>()), expect: msg.expect ?? 1, complete: false }
    tracked.set(task, t)
    t.subs = await Promise.all(nodes.map(async (n, i) => n.events.subscribe(task, {
      participants: msg.participants ?? [],
      onEvent: (e) => {
        const at = now()
        const m = t.arrived[i]!
        const k = `${e.run_id}#${e.seq}`
        if (m.has(k)) return
        m.set(k, at)
        m.set(`#${e.seq}`, at)
        checkComplete(task, t)
      }
    })))
    return true
  }
  if (msg.op === 'collect') {
    const t = tracked.get(msg.task ?? '')
    if (t === undefined) return []
    tracked.delete(msg.task ?? '')
    for (const s of t.subs) s.close()
    return t.arrived.map(m => [...m].filter(([k]) => !k.startsWith('#')))
  }
  if (msg.op === 'stats') {
    return {
      checked: nodes.reduce((s, n) => s + n.signatures.stats.checked, 0),
      hits: nodes.reduce((s, n) => s + n.signatures.stats.hits, 0),
      refused: nodes.reduce((s, n) => s + n.signatures.stats.refused, 0),
      gossip: nodes.reduce((s, n) => s + n.events.stats.gossip.accepted, 0),
      synced: nodes.reduce((s, n) => s + n.events.stats.synced, 0),
      connections: nodes.map(n => n.host.getConnections().length)
    }
  }
  throw new Error(`unknown op ${String(msg.op)}`)
}

serveIpcWorker(answer, nodes, { members: nodes.map(n => n.agentId) }, log)
