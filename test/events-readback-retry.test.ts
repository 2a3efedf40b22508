/**
 * Events of this node's own runs noted past the lock's bound are read back
 * from its log (local-events.ts). A read-back that fails (a disk read error,
 * or a stretch the log does not return) keeps them noted and is made again
 * later; meanwhile the run's next events are noted too, even with the lock
 * idle, so its subscribers get every event in order. Before, the noted
 * stretch was dropped (only logged), the run's next event was taken in
 * directly, and the executor's own subscriber was handed #12 after #1 and
 * failed with INTERNAL (reason order).
 *
 * The lock is held the way a stalled write holds it (a task on it that does
 * not end, EVENTS_LOCK_WAITING_MAX behind it), and the log's read of the run
 * fails the way an EIO read fails (or returns nothing, a hole) until the
 * test lets it read again.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import type { MeshNode } from '../src/node.ts'
import type { AgentEvent, Run } from '../src/runlog/types.ts'
import type { CorrTrack } from '../src/events/track.ts'
import { namedGates, startMesh, stopAll, until } from './helpers.ts'
import { collect } from './events-helpers.ts'
import { holdLock } from './fixtures/held-lock.ts'

const WORK = { capability_id: 'cap:readback-retry', version: '1.0.0' }
const STEPS = 10

type Read = (runId: string, afterSeq?: number, limit?: number) => Promise<AgentEvent[]>

function internals (node: MeshNode): { correlations: { get: (id: string) => CorrTrack | undefined, log: { read: Read } } } {
  return node.events as never
}

function seqs (events: AgentEvent[], runId: string): number[] {
  return events.filter(e => e.run_id === runId).map(e => e.seq)
}

describe('a read-back of this node\'s own events that fails', () => {
  let nodes: MeshNode[] = []
  let A: MeshNode, B: MeshNode
  const gates = namedGates()

  beforeAll(async () => {
    nodes = await startMesh(2)
    ;[A, B] = nodes as [MeshNode, MeshNode]
    // STEPS progress events once `go` opens, one more and the end once `more` does
    B.runs.handle(WORK, async (ctx) => {
      const task = ctx.run.correlation_id
      await gates.get(`${task}:go`).promise
      for (let i = 0; i < STEPS; i++) await ctx.progress({ step: i })
      await gates.get(`${task}:more`).promise
      await ctx.progress({ step: 'after' })
      return { done: true }
    })
    await B.publishCard({ name: 'worker-b', capabilities: [WORK] })
  }, 60_000)
  afterAll(async () => {
    gates.openAll()
    await stopAll(nodes)
  })

  for (const fault of ['error', 'hole'] as const) {
    it(`keeps them noted and reads them again (${fault === 'error' ? 'a read error' : 'a hole in the log'}): the executor's subscriber gets every event in order`, async () => {
      const TASK = `task-readback-retry-${fault}`
      // the executor follows the task itself: its own events reach its subscriber through the lock
      const onB = await collect(B, TASK, { owner: A.agentId, participants: [A.agentId] })
      const run: Run = await A.delegate({ to_agent: B.agentId, task_id: TASK, capability: WORK, input: {} })
      await onB.until(es => seqs(es, run.run_id).includes(1), 'run.started at the executor\'s subscriber')
      const t = internals(B).correlations.get(TASK) as CorrTrack
      const errorsBefore = B.events.stats.readBackErrors ?? 0

      // a stalled write holds the lock: the run's next events are noted, to be read back from the log
      const release = await holdLock(t)
      gates.get(`${TASK}:go`).resolve()
      await until(async () => (await B.events.lastEvent(run.run_id))?.seq === STEPS + 1, 'the progress events in the log')

      // the disk fails the run's reads
      const log = internals(B).correlations.log
      const read = log.read
      let failed = 0
      log.read = async (runId, afterSeq, limit) => {
        if (runId !== run.run_id) return read.call(log, runId, afterSeq, limit)
        failed++
        if (fault === 'hole') return []
        throw Object.assign(new Error('IO error: Input/output error'), { code: 'EIO' })
      }
      try {
        await release()
        // the read-back ran and failed; nothing waits on the lock now
        await until(() => failed > 0 && t.lock.busy === 0, 'the read-back to fail')
        // the run goes on while the lock is idle: its next events must not overtake the ones noted
        gates.get(`${TASK}:more`).resolve()
        await until(async () => (await B.events.lastEvent(run.run_id))?.type === 'run.completed', 'the run to end on the executor')
      } finally {
        // the disk reads again
        log.read = read
      }

      const total = STEPS + 3
      await until(() => onB.sub.closed || seqs(onB.events, run.run_id).length >= total, 'the whole run at the executor\'s subscriber, or its end', 30_000)
      expect({ closed: onB.sub.closed, seqs: seqs(onB.events, run.run_id) }).toEqual({ closed: false, seqs: Array.from({ length: total }, (_, i) => i + 1) })
      expect(B.events.stats.readBackErrors - errorsBefore).toBeGreaterThan(0)
      onB.sub.close()
    }, 90_000)
  }
})
