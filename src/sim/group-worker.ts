/**
 * A group of simulated agents in one process of its own (`npm run sim --
 * --per-process N`, `npm run sim:scale`): `count` nodes on TCP loopback with
 * their own event loop, each joined through a few nodes of its group and one
 * node of the driver process, each serving its card and the simulated agent
 * behaviour. Talks to the driver over the IPC channel only (group.ts):
 *
 *   -> { type: 'listening', addrs }  (its nodes are up: addresses others may join through)
 *   <- { op: 'join', join }           (addresses outside the group its nodes join through)
 *   -> { type: 'progress', line }  (while it starts)
 *   -> { type: 'ready', members: [{ index, agent_id, card }], incidents }
 *   <- { id, op: 'log', agent_id, run_id, seq }   -> { type: 'reply', id, value: event | null }
 *   <- { id, op: 'stats' }                        -> { type: 'reply', id, value: ProcessFigures }
 *   <- { id, op: 'heap', path }                   -> { type: 'reply', id, value: path }
 *
 * With --hostile its nodes are the simulation's hostile nodes (hostile.ts)
 * instead of agents: each publishes HOSTILE_DRAFT as its card, and
 *
 *   <- { id, op: 'hostile', victims: [card] }             -> { type: 'reply', id, value: true }  (set up)
 *   <- { id, op: 'follow', task_id, participants }       -> { type: 'reply', id, value: true }
 *   <- { id, op: 'unfollow', task_id }                    -> { type: 'reply', id, value: true }
 *   <- { id, op: 'forged' }   -> { type: 'reply', id, value: { attempted, incidents } }
 *
 *   node src/sim/group-worker.ts --first 40 --count 40 --seed 1 [--hostile]
 *
 * With AAP_SIM_TASK_PROFILE_DIR set, the process writes a CPU profile of its
 * task phase (from `ready` to the driver's `settle`) to that directory:
 * where a group's time goes while tasks run, without its start-up.
 */
import { writeFile } from 'node:fs/promises'
import { Session } from 'node:inspector/promises'
import { join } from 'node:path'
import { parseArgs } from 'node:util'
import { writeHeapSnapshot } from 'node:v8'
import type { AgentCard } from '../card/card.ts'
import { installAgent, simCard } from './agents.ts'
import { HOSTILE_DRAFT, HOSTILE_GROUP_SETUP_CONCURRENCY, setUpHostile, type Hostiles } from './hostile.ts'
import { startSimMesh, stopSimMesh } from './mesh.ts'
import { ConnectionSampler, ProcessMeter, settleAnnouncements, settleConnections } from './resources.ts'
import { seeded } from './prng.ts'
import { sumStats } from './discovery-figures.ts'
import { useNodeBufferPool } from '../wire/buffer-pool.ts'
import { peerRecordStats } from '../wire/peer-records.ts'

// a driver that goes away while this group starts leaves no orphan: until the group can stop its nodes
// (`stop`, below) it exits at once; a channel that closed before this line ran counts as gone too
let onDriverGone = (): void => {
  process.stderr.write(`group ${process.argv.slice(2).join(' ')}: the driver went away while the group started: exiting\n`)
  process.exit(1)
}
process.on('disconnect', () => { onDriverGone() })
if (process.send !== undefined && !process.connected) onDriverGone()

// a process of mesh nodes: small buffers on small slabs (src/wire/buffer-pool.ts)
useNodeBufferPool()

/** Announcements of one group at once, and how long one may take. */
const GROUP_ANNOUNCE_CONCURRENCY = 4
const GROUP_ANNOUNCE_TIMEOUT_MS = 30_000
/** Nodes of a group that the other groups' nodes join through. */
const GROUP_OFFERED_JOIN_NODES = 4

const { values } = parseArgs({
  options: {
    first: { type: 'string' },
    count: { type: 'string' },
    seed: { type: 'string' },
    'max-connections': { type: 'string' },
    hostile: { type: 'boolean' },
    'followers-per-task': { type: 'string' }
  }
})
const hostileGroup = values.hostile === true
const first = Number(values.first ?? '0')
const count = Number(values.count ?? '1')
const random = seeded(Number(values.seed ?? '1') * 7919 + first)
const meter = new ProcessMeter()
// nothing to tell once the driver has gone (it stops this process then)
const send = (msg: unknown): void => { if (process.connected) process.send?.(msg) }

const mesh = await startSimMesh({
  nodes: count,
  transport: 'tcp',
  random,
  onProgress: (n) => { send({ type: 'progress', line: `${n}/${count} nodes started` }) },
  ...(values['max-connections'] === undefined ? {} : { maxConnections: Number(values['max-connections']) })
})
const sampler = new ConnectionSampler(() => mesh)
const incidents: Record<string, number> = {}
const noted = (kind: string) => (err: unknown): 0 => {
  incidents[kind] = (incidents[kind] ?? 0) + 1
  // a hostile group's refused forgeries are what it expects: counted, not written
  if (!hostileGroup) process.stderr.write(`group ${first}: ${kind}: ${String(err)}\n`)
  return 0
}
// each node also joins through one node outside its group, so the groups make one mesh: the
// driver says which, once every group listens (these are the addresses this group offers)
const outside = await new Promise<string[]>(resolve => {
  const onJoin = (msg: { op?: string, join?: string[] }): void => {
    if (msg.op !== 'join') return
    process.off('message', onJoin)
    resolve(msg.join ?? [])
  }
  process.on('message', onJoin)
  send({ type: 'listening', addrs: mesh.slice(0, GROUP_OFFERED_JOIN_NODES).flatMap(n => n.node.addresses.slice(0, 1)) })
})
const members = []
for (const n of mesh) {
  const via = outside[Math.floor(random() * outside.length)]
  if (via !== undefined && await n.node.join([via]) === 0) noted('join_outside')(new Error(`could not join through ${via}`))
  const draft = hostileGroup ? HOSTILE_DRAFT : simCard(first + n.index)
  if (!hostileGroup) installAgent(n.node, draft)
  const card = await n.node.discovery.publish(draft, { announce: false })
  members.push({ index: first + n.index, agent_id: n.node.agentId, card })
  send({ type: 'progress', line: `${members.length}/${count} joined and published` })
}
// a hostile group announces when it is set up (it needs its victims' cards first)
const queue = hostileGroup ? [] : [...mesh]
await Promise.all(Array.from({ length: GROUP_ANNOUNCE_CONCURRENCY }, async () => {
  for (let n = queue.shift(); n !== undefined; n = queue.shift()) {
    await n.node.discovery.announce(AbortSignal.timeout(GROUP_ANNOUNCE_TIMEOUT_MS)).catch(noted('announce'))
    send({ type: 'progress', line: `${count - queue.length}/${count} announcing` })
  }
}))
const byAgent = new Map(mesh.map(n => [n.node.agentId, n]))

interface Request {
  id: number
  op: 'log' | 'stats' | 'heap' | 'settle' | 'quiet' | 'hostile' | 'follow' | 'unfollow' | 'forged'
  agent_id?: string
  run_id?: string
  seq?: number
  path?: string
  within_ms?: number
  victims?: AgentCard[]
  task_id?: string
  participants?: string[]
}

let hostiles: Hostiles | undefined
const following = new Map<string, () => void>()

async function answerHostile (msg: Request): Promise<unknown> {
  if (msg.op === 'hostile') {
    const victims = [...(msg.victims ?? [])]
    hostiles ??= await setUpHostile({
      hostile: mesh,
      victim: () => victims.shift(),
      publish: false,
      concurrency: HOSTILE_GROUP_SETUP_CONCURRENCY,
      announceTimeoutMs: GROUP_ANNOUNCE_TIMEOUT_MS,
      random,
      followersPerTask: Number(values['followers-per-task'] ?? '1'),
      noted,
      log: (line) => { send({ type: 'progress', line }) }
    })
    return true
  }
  if (hostiles === undefined) throw new Error(`${msg.op} before the hostile group was set up`)
  const taskId = msg.task_id ?? ''
  if (msg.op === 'follow') {
    if (!following.has(taskId)) following.set(taskId, hostiles.follow(taskId, msg.participants ?? []))
    return true
  }
  if (msg.op === 'unfollow') {
    following.get(taskId)?.()
    following.delete(taskId)
    return true
  }
  return { attempted: await hostiles.attempted(), incidents }
}

async function answer (msg: Request): Promise<unknown> {
  if (msg.op === 'hostile' || msg.op === 'follow' || msg.op === 'unfollow' || msg.op === 'forged') {
    if (!hostileGroup) throw new Error(`${msg.op}: not a hostile group`)
    return answerHostile(msg)
  }
  if (msg.op === 'log') {
    const n = byAgent.get(msg.agent_id ?? '')
    return n === undefined ? null : (await n.node.runs.store.log.get(msg.run_id ?? '', msg.seq ?? 0)) ?? null
  }
  if (msg.op === 'settle') {
    await taskProfile?.stop()
    const settled = await settleConnections(() => mesh, Date.now() + Math.max(0, Number(msg.within_ms ?? 0)))
    sampler.markEnd()
    return settled
  }
  if (msg.op === 'quiet') return settleAnnouncements(() => mesh, Date.now() + Math.max(0, Number(msg.within_ms ?? 0)))
  if (msg.op === 'stats') {
    return {
      ...meter.figures(hostileGroup ? 'hostile' : 'group', sampler.finish()),
      discovery: sumStats(mesh.map(n => n.node.discovery.stats)),
      peer_records: sumStats(mesh.map(n => peerRecordStats(n.node.host)))
    }
  }
  if (msg.op === 'heap') return writeHeapSnapshot(msg.path)
  throw new Error(`unknown op ${String(msg.op)}`)
}

process.on('message', (msg: Request) => {
  answer(msg).then(
    value => { send({ type: 'reply', id: msg.id, value }) },
    (err: unknown) => { send({ type: 'reply', id: msg.id, error: String(err) }) }
  )
})
let stopping = false
const stop = (): void => {
  if (stopping) return
  stopping = true
  void stopSimMesh(mesh).finally(() => process.exit(0))
}
process.on('SIGTERM', stop)
onDriverGone = stop
/** A CPU profile of the task phase (AAP_SIM_TASK_PROFILE_DIR), or undefined. */
const taskProfile = await (async (dir: string | undefined) => {
  if (dir === undefined || dir === '') return undefined
  const session = new Session()
  session.connect()
  await session.post('Profiler.enable')
  await session.post('Profiler.start')
  let stopped = false
  return {
    stop: async (): Promise<void> => {
      if (stopped) return
      stopped = true
      const { profile } = await session.post('Profiler.stop')
      await writeFile(join(dir, `tasks-${hostileGroup ? 'hostile' : 'group'}-${first}.cpuprofile`), JSON.stringify(profile))
      session.disconnect()
    }
  }
})(process.env.AAP_SIM_TASK_PROFILE_DIR)
send({ type: 'ready', members, incidents })
