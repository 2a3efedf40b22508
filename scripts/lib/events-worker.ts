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
 *                                                   -> { id, value: { arrived: [[ [run_id#seq, at], ... ] per node],
 *                                                        mesh: [gossip mesh peers on the topic per node], topicPeers: [...] } }
 *   <- { id, op: 'profile-start' }                  starts a CPU profile of this process
 *   <- { id, op: 'profile-stop', path }             writes it to `path` (.cpuprofile)
 *   <- { id, op: 'stats' }                          -> { id, value: { checked, hits, refused, gossip, synced, verdicts, connections } }
 *
 * Times are `now()`: performance.timeOrigin + performance.now() (see
 * bench-events.ts for why that clock, and how the driver checks it).
 *
 *   node scripts/lib/events-worker.ts --count 25 --join /ip4/127.0.0.1/tcp/1234/p2p/... [--join ...]
 */
import { performance } from 'node:perf_hooks'
import { Session } from 'node:inspector/promises'
import { writeFile } from 'node:fs/promises'
import { createMeshNode, type MeshNode } from '../../src/node.ts'
import type { EventSubscription } from '../../src/events/subscription.ts'
import { correlationTopic } from '../../src/events/topic.ts'
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

interface Tracked { subs: EventSubscription[], arrived: Array<Map<string, number>>, done: boolean[], expect: number, complete: boolean }
const tracked = new Map<string, Tracked>()

/** One node of `t` got a new seq: the task is complete once every node holds seqs 1..expect (counted, not scanned per arrival). */
function checkComplete (task: string, t: Tracked, node: number): void {
  if (t.complete) return
  const m = t.arrived[node]!
  if (t.done[node] !== true) {
    let have = 0
    for (let s = 1; s <= t.expect; s++) if (m.has(`#${s}`)) have++
    if (have < t.expect) return
    t.done[node] = true
  }
  if (t.done.every(d => d)) {
    t.complete = true
    send({ type: 'complete', task })
  }
}

interface Request { id: number, op: 'clock' | 'subscribe' | 'collect' | 'stats' | 'profile-start' | 'profile-stop', task?: string, participants?: string[], expect?: number, path?: string }

let profiler: Session | undefined

async function answer (msg: Request): Promise<unknown> {
  if (msg.op === 'clock') return now()
  if (msg.op === 'profile-start') {
    profiler = new Session()
    profiler.connect()
    await profiler.post('Profiler.enable')
    await profiler.post('Profiler.start')
    return true
  }
  if (msg.op === 'profile-stop') {
    if (profiler === undefined || msg.path === undefined) return false
    const { profile } = await profiler.post('Profiler.stop')
    profiler.disconnect()
    profiler = undefined
    await writeFile(msg.path, JSON.stringify(profile))
    return true
  }
  if (msg.op === 'subscribe') {
    const task = msg.task ?? ''
    // per node: `run_id#seq` -> arrival, and `#seq` as a marker for the completeness check
    const t: Tracked = { subs: [], arrived: nodes.map(() => new Map<string, number>()), done: nodes.map(() => false), expect: msg.expect ?? 1, complete: false }
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
        if (e.seq >= t.expect) checkComplete(task, t, i)
      }
    })))
    return true
  }
  if (msg.op === 'collect') {
    const t = tracked.get(msg.task ?? '')
    if (t === undefined) return { arrived: [], mesh: [], topicPeers: [] }
    tracked.delete(msg.task ?? '')
    // the gossip mesh of the correlation as each node sees it before leaving: peers it forwards to, peers on the topic
    const topic = correlationTopic(msg.task ?? '')
    const pubsub = (n: MeshNode): { getMeshPeers: (t: string) => string[], getSubscribers: (t: string) => unknown[] } =>
      n.host.services.pubsub as unknown as { getMeshPeers: (t: string) => string[], getSubscribers: (t: string) => unknown[] }
    const mesh = nodes.map(n => pubsub(n).getMeshPeers(topic).length)
    const topicPeers = nodes.map(n => pubsub(n).getSubscribers(topic).length)
    for (const s of t.subs) s.close()
    return { arrived: t.arrived.map(m => [...m].filter(([k]) => !k.startsWith('#'))), mesh, topicPeers }
  }
  if (msg.op === 'stats') {
    return {
      checked: nodes.reduce((s, n) => s + n.signatures.stats.checked, 0),
      hits: nodes.reduce((s, n) => s + n.signatures.stats.hits, 0),
      refused: nodes.reduce((s, n) => s + n.signatures.stats.refused, 0),
      // early events were taken from gossip too, placed once their predecessor came
      gossip: nodes.reduce((s, n) => s + n.events.stats.gossip.accepted + n.events.stats.gossip.early, 0),
      synced: nodes.reduce((s, n) => s + n.events.stats.synced, 0),
      syncRequests: nodes.reduce((s, n) => s + n.events.stats.syncRequests.correlation + n.events.stats.syncRequests.run, 0),
      // every gossip verdict (accepted, duplicate, gap, ...) summed over this process's nodes
      verdicts: nodes.reduce<Record<string, number>>((sum, n) => {
        for (const [k, v] of Object.entries(n.events.stats.gossip)) sum[k] = (sum[k] ?? 0) + v
        return sum
      }, {}),
      connections: nodes.map(n => n.host.getConnections().length),
      // this process's CPU time so far (µs, user + system)
      cpuMicros: process.cpuUsage().user + process.cpuUsage().system
    }
  }
  throw new Error(`unknown op ${String(msg.op)}`)
}

serveIpcWorker(answer, nodes, { members: nodes.map(n => n.agentId) }, log)
