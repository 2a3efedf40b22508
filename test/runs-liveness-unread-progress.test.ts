/**
 * "A move of its record (an event) starts the count again" (protocols/liveness.md,
 * LIVENESS_UNREAD_BOUND_FACTOR): an executor whose get_run answers the
 * delegator cannot read, but whose signed progress reports keep arriving, is
 * heard from, and its run is not declared lost. Progress reports are folded
 * into the delegator's record in memory only (not written), and before the
 * fix they did not count, so a run followed live was declared lost after
 * 4 × lostAfterMs. Found by session 45's review.
 */
import { afterAll, describe, expect, it } from 'vitest'
import type { MeshNode } from '../src/node.ts'
import type { Actor, RunCommand } from '../src/runs/types.ts'
import type { Run } from '../src/runlog/types.ts'
import { startMesh, stopAll, until } from './helpers.ts'

const SLOW = { capability_id: 'cap:slow-progress', version: '1.0.0' }
const LOST_AFTER_MS = 600
const PROBE_MS = 100

describe('progress reports restart the count of probes answered unread', () => {
  let nodes: MeshNode[] = []
  afterAll(async () => { await stopAll(nodes) })

  it('a run whose probes are answered unread but whose progress keeps coming is not declared lost', async () => {
    nodes = await startMesh(2, { nodeOptions: (i) => i === 0 ? { liveness: { lostAfterMs: LOST_AFTER_MS, probeIntervalMs: PROBE_MS } } : {} })
    const [A, B] = nodes as [MeshNode, MeshNode]
    B.runs.handle(SLOW, async (ctx) => {
      await new Promise((resolve) => ctx.signal.addEventListener('abort', resolve))
      return {}
    })
    await B.publishCard({ name: 'b', capabilities: [SLOW] })
    const run = await A.delegate({ to_agent: B.agentId, task_id: 'task-unread-progress', capability: SLOW, input: {} })
    const executor = (B.runs as unknown as {
      executor: { apply: (id: string, c: RunCommand, a: Actor) => Promise<Run>, active: Map<string, { run: Run }> }
    }).executor
    // B's record of the run carries a member the Run schema refuses (another implementation's field): every get_run
    // answer is refused by A's checks, while B's signed events stay valid
    const held = executor.active.get(run.run_id)!
    held.run = { ...held.run, extra_field: true } as unknown as Run
    const answered = A.runs.liveness.stats.probesAnsweredUnread
    await until(() => A.runs.liveness.stats.probesAnsweredUnread > answered, 'a probe answered unread')

    // well past LIVENESS_UNREAD_BOUND_FACTOR × lostAfterMs (2,400 ms) of probes answered unread, each few probes
    // followed by a progress report that A folds
    const bound = LOST_AFTER_MS * 4
    const start = Date.now()
    let reports = 0
    while (Date.now() - start < bound * 1.5) {
      const before = A.runs.liveness.stats.probesAnsweredUnread
      await until(() => A.runs.liveness.stats.probesAnsweredUnread >= before + 3, 'three more probes answered unread')
      const next = await executor.apply(run.run_id, { type: 'progress', payload: { n: reports } }, { role: 'executor' })
      reports++
      await until(async () => ((await A.runs.store.getOutgoing(run.run_id))?.last_seq ?? 0) >= next.last_seq, 'A to fold the progress report')
    }
    expect(reports).toBeGreaterThan(3)
    expect(A.runs.liveness.stats.unreadDeclared).toBe(0)
    expect(A.runs.liveness.stats.declared).toBe(0)
    expect((await A.runs.store.getOutgoing(run.run_id))?.state).toBe('running')

    // with the reports stopped, the bound holds as before: the run is declared lost
    await until(() => A.runs.liveness.stats.unreadDeclared === 1, 'the run declared lost once nothing moves it', 15_000)
  })
})
