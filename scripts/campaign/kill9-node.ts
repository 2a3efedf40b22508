/**
 * A node of the kill -9 part in its own process, forked with an IPC channel
 * (scripts/campaign/kill9.ts), on a fixed TCP port of 127.0.0.1 with its key
 * and LevelDB datastore in its data dir, so a SIGKILL and a restart from the
 * same dir bring back the same agent at the same address. Roles:
 *  - `executor`: serves cap:campaign-kill9 (one progress event, a short random
 *    wait, then its output);
 *  - `sidecar`: the same work from an agent process that is its own node and
 *    joins the mesh through a hub node (as examples/ts-agent.ts does);
 *  - `delegator`: delegates to the executors and sidecars without pause from a
 *    few workers, and sends the parent `{type:'ack'}` for every run handle it got;
 *  - `hub`: a plain node the sidecars join through (never killed).
 * Every role answers `dump` with what its datastore holds: an executor its
 * runs and their event logs, a delegator its outgoing records and its copies
 * of their events. A child whose parent is gone (IPC disconnect) stops.
 *
 *   node kill9-node.ts <role> <dataDir> <port> <configJson>
 */
import { createMeshNode } from '../../src/node.ts'
import { eventHash } from '../../src/runlog/event.ts'
import type { AgentEvent } from '../../src/runlog/types.ts'
import { toAapError } from '../../src/errors.ts'

export const KILL9_CAP = { capability_id: 'cap:campaign-kill9', version: '1.0.0' }

export interface Kill9Config {
  /** Agents to delegate to, with their addresses (delegators), or the hub's address (sidecars). */
  peers: Array<{ agentId: string, addr: string }>
  lostAfterMs: number
  probeIntervalMs: number
  /** Delegator workers calling at once. */
  workers: number
  /** Longest random work of a handler. */
  workMaxMs: number
}

/** One run as a node holds it: its state and its events (seq:type:hash of each). */
export interface DumpedRun { run_id: string, state: string, failure?: string, executor?: string, correlation_id: string, events: string[] }

/** Longest a delegation may take before the delegator gives up on it (counted as failed, never acknowledged). */
const DELEGATE_TIMEOUT_MS = 10_000
/** Runs per correlation before a worker moves on to the next one (below EVENTS_MAX_RUNS_PER_CORRELATION). */
const RUNS_PER_TASK = 40
const JOIN_TIMEOUT_MS = 2_000

function send (msg: object): void {
  process.send?.(msg)
}

/** `seq:type:hash|at|declared_by|failure message`: the parent compares up to the hash, and shows the rest in examples. */
function eventLine (e: AgentEvent): string {
  const failure = (e.payload as { failure?: { message?: unknown } }).failure
  const extra = [e.at, (e as { declared_by?: string }).declared_by ?? '', typeof failure?.message === 'string' ? failure.message.slice(0, 160) : ''].join('|')
  return `${e.seq}:${e.type}:${eventHash(e)}|${extra}`
}

async function main (): Promise<void> {
  const [role, dataDir, port, configJson] = process.argv.slice(2)
  if (role === undefined || dataDir === undefined || port === undefined || configJson === undefined) {
    throw new Error('usage: kill9-node.ts <executor|sidecar|delegator|hub> <dataDir> <port> <configJson>')
  }
  const config = JSON.parse(configJson) as Kill9Config
  const imported = performance.now()
  const node = await createMeshNode({
    dataDir,
    listen: [`/ip4/127.0.0.1/tcp/${port}`],
    localMesh: true,
    liveness: { lostAfterMs: config.lostAfterMs, probeIntervalMs: config.probeIntervalMs },
    // a delegator asks the executor for its card before it delegates: served as soon as it is stored
    ...(role === 'executor' || role === 'sidecar' ? { card: { name: `kill9-${role}`, capabilities: [KILL9_CAP] } } : {})
  })
  const created = performance.now()
  await node.start()
  const phases = { imports_ms: Math.round(imported), create_ms: Math.round(created - imported), start_ms: Math.round(performance.now() - created) }
  let running = true
  const failures: Record<string, number> = {}

  if (role === 'executor' || role === 'sidecar') {
    node.runs.handle(KILL9_CAP, async (ctx) => {
      await ctx.progress({ step: 1 })
      const wait = Math.floor(Math.random() * config.workMaxMs)
      await new Promise<void>((resolve, reject) => {
        const timer = setTimeout(resolve, wait)
        ctx.signal.addEventListener('abort', () => { clearTimeout(timer); reject(ctx.signal.reason) }, { once: true })
      })
      return { done: true, input: ctx.input }
    })
  }
  if (role === 'sidecar') await node.keepJoined(config.peers.map(p => p.addr))
  send({ type: 'ready', agentId: node.agentId, pid: process.pid, phases })
  if (role === 'delegator') {
    // the executors' addresses, for the peer store (one may be down right now: it is dialed again when a call needs it)
    await Promise.all(config.peers.map(async p => {
      try {
        if (await node.join([p.addr], AbortSignal.timeout(JOIN_TIMEOUT_MS)) === 0) failures.join = (failures.join ?? 0) + 1
      } catch (err) {
        failures.join = (failures.join ?? 0) + 1
        process.stderr.write(`kill9 delegator: joining ${p.agentId} failed: ${(err as Error).message}\n`)
      }
    }))
  }

  if (role === 'delegator') {
    const targets = config.peers
    const worker = async (w: number): Promise<void> => {
      let i = 0
      while (running) {
        const target = targets[Math.floor(Math.random() * targets.length)]!
        const task = `k9-${process.pid}-${w}-${Math.floor(i / RUNS_PER_TASK)}`
        try {
          const run = await node.delegate({ to_agent: target.agentId, task_id: task, capability: KILL9_CAP, input: { w, i } }, { signal: AbortSignal.timeout(DELEGATE_TIMEOUT_MS) })
          send({ type: 'ack', run_id: run.run_id, executor: target.agentId, correlation_id: task })
        } catch (err) {
          // an executor being killed or restarting refuses or drops the call: counted, never acknowledged
          const e = toAapError(err)
          failures[e.code] = (failures[e.code] ?? 0) + 1
          // the first few of each code, for the operator (the counts go into the report)
          if (failures[e.code] === 1) process.stderr.write(`kill9 delegator: first ${e.code}: ${e.message}\n`)
          await new Promise(resolve => setTimeout(resolve, 50))
        }
        i++
      }
    }
    for (let w = 0; w < config.workers; w++) void worker(w)
  }

  const dump = async (): Promise<{ runs: DumpedRun[], copies: DumpedRun[] }> => {
    const runs: DumpedRun[] = []
    for await (const run of node.runs.store.all()) {
      runs.push({ run_id: run.run_id, state: run.state, ...(run.failure == null ? {} : { failure: run.failure.code }), correlation_id: run.correlation_id, events: (await node.runs.store.log.read(run.run_id)).map(eventLine) })
    }
    const copies: DumpedRun[] = []
    if (role === 'delegator') {
      const correlations = new Set<string>()
      let cursor: string | undefined
      do {
        const page = await node.runs.list({}, cursor === undefined ? { limit: 100 } : { limit: 100, cursor })
        for (const r of page.delegated) {
          correlations.add(r.correlation_id)
          copies.push({ run_id: r.run_id, state: r.state, ...(r.failure == null ? {} : { failure: r.failure.code }), executor: r.agent_id, correlation_id: r.correlation_id, events: [] })
        }
        cursor = page.next_cursor ?? undefined
      } while (cursor !== undefined)
      const byRun = new Map(copies.map(c => [c.run_id, c]))
      for (const c of correlations) {
        for (const [runId, events] of await node.events.readCorrelation(c)) {
          const copy = byRun.get(runId)
          if (copy !== undefined) copy.events = events.map(eventLine)
        }
      }
    }
    return { runs, copies }
  }

  const stop = async (): Promise<void> => {
    running = false
    await node.stop()
    process.exit(0)
  }
  process.on('disconnect', () => { void stop() })
  process.on('message', (msg: { id: number, cmd: string }) => {
    if (msg.cmd === 'dump') {
      dump().then(d => { send({ id: msg.id, ...d, failures, openNotices: node.runs.liveness.openNotices }) }, (err: unknown) => { send({ id: msg.id, error: (err as Error).stack ?? String(err) }) })
    } else if (msg.cmd === 'quiet') {
      running = false
      send({ id: msg.id, failures })
    } else if (msg.cmd === 'stop') {
      send({ id: msg.id, stopping: true })
      void stop()
    }
  })
}

main().catch((err: unknown) => {
  console.error(err)
  process.exit(1)
})
