/**
 * Groups of simulated agents in processes of their own (group-worker.ts):
 * spawning them, asking one for an event of a member's log or for its
 * figures, taking a heap snapshot of one, stopping them. Every request is
 * bounded; a group that dies answers every pending request with null.
 */
import { fork, type ChildProcess } from 'node:child_process'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import type { AgentCard } from '../card/card.ts'
import type { AgentEvent } from '../runlog/types.ts'
import type { Hostiles } from './hostile.ts'
import { SIM_STOP_TIMEOUT_MS } from './constants.ts'
import { stopChild, withTimeout } from './processes.ts'
import type { ProcessFigures } from './resources.ts'

const GROUP_SCRIPT = new URL('./group-worker.ts', import.meta.url).pathname
/** How long a group may take to start, join and announce all its nodes. */
export const GROUP_START_TIMEOUT_MS = 35 * 60_000
/**
 * Extra Node/V8 flags of every group process, from the environment (space
 * separated), e.g. `AAP_SIM_GROUP_FLAGS="--cpu-prof --cpu-prof-dir=reports/prof"`
 * to profile where a group's time goes, or V8 heap flags to try.
 */
const groupFlags = (): string[] => (process.env.AAP_SIM_GROUP_FLAGS ?? '').split(' ').filter(f => f !== '')
/**
 * Old space a group process may grow to, per node it runs (at least the
 * floor). Below V8's default limit (a quarter of the machine's memory, at
 * most 4 GiB) V8 lets the heap grow less past what is live after each full
 * GC: at 200 nodes (43 per group) with a flat 1024 MiB the groups held 350 to
 * 380 MiB of heap for about 143 MiB live, against 364 to 481 MiB with the
 * default, and RSS per node went from 16.8 to 15.0 MiB with no more CPU
 * (379 s against 428 s, one run each, docs/simulations.md). 20 MiB per node
 * is six times what an honest node of that run kept live after a full GC
 * (3.3 MiB) and three and a half times a hostile one (5.6 MiB).
 *
 * Young space, tried and not kept: V8 grows each of its two semi-spaces to
 * 32 MiB in a process this busy. At 8 MiB (`--max-semi-space-size=8`) RSS per
 * node at 200 nodes went from 15.1 to 12.1 MiB (11.5 in the scaling run), for
 * about 12 % more CPU in the group processes (more scavenges); at 500 nodes,
 * where the two cores are saturated, 2 of 40 handoffs then timed out dialing
 * their receiver (one run; docs/simulations.md). At 16 MiB, 9.0 to 9.8 MiB
 * per node at 500 nodes, and two of four runs lost handoffs the same way
 * (session 27). Earlier still,
 * `--max-semi-space-size=2 --optimize-for-size` brought the groups to 7.4 MiB
 * per node but more than doubled their CPU and let 0 of 40 tasks pass.
 * AAP_SIM_GROUP_FLAGS tries others.
 */
export const GROUP_OLD_SPACE_MIB_PER_NODE = 20
export const GROUP_OLD_SPACE_MIN_MIB = 512
/** The driver's old space (its nodes, and every task's trace and figures): more than ten times what it kept live after a full GC at 500 nodes (76 MiB). */
export const DRIVER_OLD_SPACE_MIB = 1024
/** The V8 flags of a group process of `count` nodes. */
export function groupV8Flags (count: number): string[] {
  return [`--max-old-space-size=${Math.max(GROUP_OLD_SPACE_MIN_MIB, GROUP_OLD_SPACE_MIB_PER_NODE * count)}`]
}
/** The V8 flags of the driver process, as `npm run sim:scale` starts it. */
export const DRIVER_V8_FLAGS = [`--max-old-space-size=${DRIVER_OLD_SPACE_MIB}`]
/** What the scaling report says the processes ran with. */
export const SIM_PROCESS_FLAGS_RULE = [
  `group processes: --max-old-space-size=max(${GROUP_OLD_SPACE_MIN_MIB}, ${GROUP_OLD_SPACE_MIB_PER_NODE} × their nodes)`,
  `driver: ${DRIVER_V8_FLAGS.join(' ')}`,
  'NODE_COMPILE_CACHE'
]
/**
 * The environment of a simulation process: Node's module compile cache on
 * (the TypeScript it strips and V8's code for it, kept on disk), unless the
 * caller chose a directory or NODE_DISABLE_COMPILE_CACHE. A process that loads
 * from the cache never loads the type stripper: 18 MiB less RSS at start
 * (123 against 141 MiB for src/node.ts), and a faster start.
 */
export function simProcessEnv (): NodeJS.ProcessEnv {
  return { ...process.env, NODE_COMPILE_CACHE: process.env.NODE_COMPILE_CACHE ?? join(tmpdir(), 'node-compile-cache') }
}
/** How long a group may take to answer a request (a heap snapshot of a big heap takes a while). */
const GROUP_REQUEST_TIMEOUT_MS = 5 * 60_000

export interface GroupMember { index: number, agent_id: string, card: AgentCard }

export interface Group {
  /** A hostile group (group-worker.ts --hostile): its members are the simulation's hostile nodes. */
  hostile: boolean
  first: number
  count: number
  child: ChildProcess
  members: GroupMember[]
  incidents: Record<string, number>
  pending: Map<number, (reply: { value?: unknown, error?: string } | null) => void>
  nextId: number
}

export interface GroupOptions {
  first: number
  count: number
  seed: number
  /**
   * Multiaddrs outside the group, each node joins through one of them. Asked
   * once the group's nodes listen, with the addresses the group offers to
   * others (`listening`), so groups can join through one another.
   */
  join: (listening: string[]) => Promise<string[]>
  maxConnections?: number
  /** Its nodes are hostile ones, of which this many follow each task (hostile.ts). */
  hostileFollowersPerTask?: number
  /** Where the group's start goes (a line at a time). */
  onProgress?: (line: string) => void
}

export async function spawnGroup (o: GroupOptions): Promise<Group> {
  const args = ['--first', String(o.first), '--count', String(o.count), '--seed', String(o.seed)]
  if (o.maxConnections !== undefined) args.push('--max-connections', String(o.maxConnections))
  if (o.hostileFollowersPerTask !== undefined) args.push('--hostile', '--followers-per-task', String(o.hostileFollowersPerTask))
  const child = fork(GROUP_SCRIPT, args, { execArgv: ['--expose-gc', ...groupV8Flags(o.count), ...groupFlags()], env: simProcessEnv(), stdio: ['ignore', 'ignore', 'inherit', 'ipc'] })
  const g: Group = { hostile: o.hostileFollowersPerTask !== undefined, first: o.first, count: o.count, child, members: [], incidents: {}, pending: new Map(), nextId: 1 }
  const ready = Promise.withResolvers<void>()
  child.on('message', (msg: { type: string, line?: string, id?: number, value?: unknown, error?: string, members?: GroupMember[], incidents?: Record<string, number>, addrs?: string[] }) => {
    if (msg.type === 'listening') {
      o.join(msg.addrs ?? []).then(
        join => { if (child.connected) child.send({ op: 'join', join }) },
        (err: unknown) => { ready.reject(err); child.kill('SIGKILL') }
      )
      return
    }
    if (msg.type === 'progress') {
      o.onProgress?.(`group ${o.first}+${o.count}: ${msg.line ?? ''}`)
      return
    }
    if (msg.type === 'ready') {
      g.members = msg.members ?? []
      g.incidents = msg.incidents ?? {}
      ready.resolve()
      return
    }
    const p = g.pending.get(msg.id ?? -1)
    g.pending.delete(msg.id ?? -1)
    p?.(msg)
  })
  child.on('exit', (code, signal) => {
    ready.reject(new Error(`group ${o.first}+${o.count} exited (${code ?? signal}) before it was ready`))
    for (const p of g.pending.values()) p(null)
    g.pending.clear()
  })
  try {
    await withTimeout(ready.promise, GROUP_START_TIMEOUT_MS, `group ${o.first}+${o.count} start`)
  } catch (err) {
    child.kill('SIGKILL')
    throw err
  }
  return g
}

async function request (g: Group, msg: Record<string, unknown>, timeoutMs = GROUP_REQUEST_TIMEOUT_MS): Promise<unknown> {
  if (g.child.exitCode !== null || g.child.signalCode !== null) return null
  const id = g.nextId++
  const reply = new Promise<{ value?: unknown, error?: string } | null>(resolve => { g.pending.set(id, resolve) })
  g.child.send({ ...msg, id })
  const r = await withTimeout(reply, timeoutMs, `group ${g.first} ${String(msg.op)}`)
  if (r?.error !== undefined) throw new Error(`group ${g.first} ${String(msg.op)}: ${r.error}`)
  return r?.value ?? null
}

/** An event of a member's log, as its own store holds it. */
export async function groupLog (g: Group, agentId: string, runId: string, seq: number): Promise<AgentEvent | undefined> {
  return ((await request(g, { op: 'log', agent_id: agentId, run_id: runId, seq })) as AgentEvent | null) ?? undefined
}

/** Wait (at most `withinMs`) until every node of the group is under its connection bound; true when all are. */
export async function groupSettle (g: Group, withinMs: number): Promise<boolean> {
  return (await request(g, { op: 'settle', within_ms: withinMs })) === true
}

/** Wait until no node of the group is announcing or about to retry an announcement (settleAnnouncements), at most `withinMs`. */
export async function groupQuiet (g: Group, withinMs: number): Promise<boolean> {
  return (await request(g, { op: 'quiet', within_ms: withinMs }, withinMs + GROUP_REQUEST_TIMEOUT_MS)) === true
}

/** The group's process figures (stops its connection sampling: ask once, at the end). */
export async function groupStats (g: Group): Promise<ProcessFigures | undefined> {
  return ((await request(g, { op: 'stats' })) as ProcessFigures | null) ?? undefined
}

/** Write a heap snapshot of the group's process to `path`. */
export async function groupHeapSnapshot (g: Group, path: string): Promise<string> {
  return String(await request(g, { op: 'heap', path }))
}

/**
 * Stop a group: SIGTERM (its nodes stop, then it exits), and SIGKILL when it
 * has not exited within `timeoutMs` (stopChild), counted in its incidents
 * (`stop_killed`).
 */
export async function stopGroup (g: Group, timeoutMs = SIM_STOP_TIMEOUT_MS): Promise<void> {
  if (await stopChild(g.child, 'SIGTERM', timeoutMs)) g.incidents = { ...g.incidents, stop_killed: (g.incidents.stop_killed ?? 0) + 1 }
}

/**
 * The hostile side of the simulation in a hostile group: sets it up (each
 * node forges the card of its victim in `victims`, in order) and answers
 * hostile.ts's calls over IPC. A follow that fails is counted by `noted`.
 */
export async function remoteHostiles (g: Group, victims: AgentCard[], noted: (kind: string) => (err: unknown) => 0): Promise<Hostiles> {
  // every hostile node announces its card (a DHT walk per capability) and puts a forgery: as long as a start
  await request(g, { op: 'hostile', victims }, GROUP_START_TIMEOUT_MS)
  return {
    ids: new Set(g.members.map(m => m.agent_id)),
    follow: (taskId, participants) => {
      request(g, { op: 'follow', task_id: taskId, participants }).catch(noted('hostile_follow'))
      return () => { request(g, { op: 'unfollow', task_id: taskId }).catch(noted('hostile_unfollow')) }
    },
    attempted: async () => {
      const f = (await request(g, { op: 'forged' })) as { attempted: number, incidents: Record<string, number> } | null
      // a dead hostile group forged nothing that was counted: marked lost, and its 0 attempts fail the report (invariantProblems)
      if (f === null) { markGroupLost(g); return 0 }
      // what the hostile group counted on the way joins the group's incidents in the report
      g.incidents = { ...g.incidents, ...f.incidents }
      return f.attempted
    }
  }
}

/**
 * Where the nodes of group `i` may join from outside it: the driver's honest
 * nodes and the offered nodes of every other group, never its own.
 */
export function outsideJoins (driver: string[], listening: string[][], i: number): string[] {
  return [...driver, ...listening.filter((_, k) => k !== i).flat()]
}

/**
 * The agents past this process's `local` nodes, in group processes of at most
 * `perProcess` nodes (equal shares), started together; each of their nodes
 * joins through a few nodes of its own group and one outside it: one of
 * `join` (this process's nodes) or of the other groups' first nodes. Joining
 * through this process's nodes only made them the hub of the mesh: at 500
 * nodes this process used twice the CPU of a group and its discovers and
 * delegations ran late.
 *
 * With `hostile`, the last `hostile.count` nodes are a hostile group of their
 * own (last in the list): it joins like a group, but no group joins through
 * it (hostile nodes are no hub). The process that drives the tasks then hosts
 * none of them: at 500 nodes the 50 hostile nodes there made its event loop
 * the slowest of all, and its discovers timed out.
 *
 * A group that fails to start fails them all: the groups still waiting to
 * join are let go (their join fails, spawnGroup kills them), the ones
 * started are stopped, and the first error goes on. None is left running.
 */
export async function startGroups (o: { nodes: number, perProcess?: number, seed: number, maxConnections?: number }, local: number, join: string[], log: (line: string) => void,
  hostile?: { count: number, followersPerTask: number }): Promise<Group[]> {
  const hostileCount = hostile?.count ?? 0
  const rest = o.nodes - local - hostileCount
  if (rest <= 0 && hostileCount === 0) return []
  const count = rest <= 0 ? 0 : Math.ceil(rest / Math.max(1, o.perProcess ?? rest))
  const shares = Array.from({ length: count }, (_, i) => Math.floor(rest / count) + (i < rest % count ? 1 : 0))
  let ready = local
  log(`starting ${count} group processes for ${rest} nodes${hostileCount > 0 ? ` and a hostile group of ${hostileCount}` : ''}`)
  // every group waits until all listen, then joins through this process's nodes and the other groups'
  const listening = shares.map(() => Promise.withResolvers<string[]>())
  const everyone = Promise.all(listening.map(async l => l.promise))
  // a group that fails to start fails the start: the groups waiting to join are let go (their join fails, spawnGroup kills them)
  everyone.catch((err: unknown) => { log(`group start abandoned: ${String(err)}`) })
  const failed = (err: unknown): never => {
    for (const l of listening) l.reject(err)
    throw err
  }
  const spawned = (g: Group): Group => {
    ready += g.count
    log(`starting nodes ${ready}/${o.nodes} (group processes)`)
    return g
  }
  const common = { seed: o.seed, onProgress: log, ...(o.maxConnections === undefined ? {} : { maxConnections: o.maxConnections }) }
  const starts = await Promise.allSettled([
    ...shares.map(async (share, i) => spawned(await spawnGroup({
      ...common,
      first: local + shares.slice(0, i).reduce((a, b) => a + b, 0),
      count: share,
      join: async (mine) => {
        listening[i]?.resolve(mine)
        return outsideJoins(join, await everyone, i)
      }
    }).catch(failed))),
    ...(hostile === undefined || hostileCount === 0
      ? []
      : [(async () => spawned(await spawnGroup({
          ...common,
          first: o.nodes - hostileCount,
          count: hostileCount,
          hostileFollowersPerTask: hostile.followersPerTask,
          join: async () => outsideJoins(join, await everyone, -1)
        }).catch(failed)))()])
  ])
  // one group that did not start fails them all: the started ones are stopped, none is left running
  const rejected = starts.find(s => s.status === 'rejected')
  const groups = starts.flatMap(s => s.status === 'fulfilled' ? [s.value] : [])
  if (rejected === undefined) return groups
  await Promise.all(groups.map(async g => stopGroup(g)))
  throw rejected.reason
}

/**
 * Mark a group as lost: its process died (a request got no answer), so what
 * it would have measured or counted is missing. The report counts lost
 * groups in its incidents (`group_lost`, `group_hostile_lost`; scenario.ts), and a report whose
 * processes measured fewer nodes than the run had fails (scaling.ts
 * measuredProblems); a lost hostile group leaves no forgery attempted, which
 * fails too (invariantProblems).
 */
export function markGroupLost (g: Group): void {
  g.incidents = { ...g.incidents, [g.hostile ? 'hostile_lost' : 'lost']: 1 }
}

/**
 * Every group's figures; with `heapSnapshot`, the first group's heap written
 * there. A group that gives no figures (its process died) is marked lost
 * (markGroupLost), and the report measures fewer nodes than the run has.
 */
export async function groupFigures (groups: Group[], heapSnapshot?: string): Promise<ProcessFigures[]> {
  const out: ProcessFigures[] = []
  for (const g of groups) {
    const f = await groupStats(g)
    if (f !== undefined) out.push(f)
    else markGroupLost(g)
  }
  const first = groups[0]
  if (heapSnapshot !== undefined && first !== undefined) await groupHeapSnapshot(first, heapSnapshot)
  return out
}
