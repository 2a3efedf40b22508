/**
 * Durability across SIGKILL. An executor node runs in a child process with a
 * LevelDB data dir, on TCP loopback; a delegator node in this process gives it
 * runs that end up running, blocked, completed and failed, plus a batch of
 * runs killed right after their acknowledgement. After SIGKILL and a restart
 * from the same data dir, every acknowledged run is there in its last state,
 * except that those that were executing are failed with EXECUTOR_RESTARTED;
 * the delegator reads all of them over the wire, and the blocked run can
 * still be resumed (its handler starts again with ctx.restored).
 */
import { mkdtemp, rm } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { fileURLToPath } from 'node:url'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { createMeshNode, type MeshNode } from '../src/node.ts'
import type { Run } from '../src/runlog/types.ts'
import { ChildNode } from './fixtures/child.ts'

const REVIEW = { capability_id: 'cap:code-review', version: '2.1.0' }
const SCRIPT = fileURLToPath(new URL('./fixtures/executor-node.ts', import.meta.url))
const BATCH = 16

interface Ready { agentId: string, addrs: string[], logs: Record<string, string[]> }

describe('acknowledged runs survive SIGKILL of their executor', () => {
  let dataDir: string
  let delegator: MeshNode
  let child: ChildNode
  let executor: Ready
  let restarted: Ready
  const runs: Record<'running' | 'blocked' | 'completed' | 'failed', Run | undefined> = { running: undefined, blocked: undefined, completed: undefined, failed: undefined }
  let batch: Run[] = []

  const startChild = async (): Promise<Ready> => {
    child = new ChildNode(SCRIPT, ['--data-dir', dataDir])
    const ready = await child.line(l => l.ready === true) as unknown as Ready
    expect(await delegator.join(ready.addrs)).toBe(1)
    return ready
  }
  const eventLine = async (type: string, runId: string): Promise<unknown> =>
    child.line(l => { const e = l.event as { type?: string, run_id?: string } | undefined; return e?.type === type && e.run_id === runId })

  beforeAll(async () => {
    dataDir = await mkdtemp(join(tmpdir(), 'aap-sigkill-'))
    delegator = await createMeshNode({ listen: ['/ip4/127.0.0.1/tcp/0'], localMesh: true })
    await delegator.start()
    executor = await startChild()

    const delegate = async (taskId: string, input: Record<string, unknown>): Promise<Run> =>
      delegator.delegate({ to_agent: executor.agentId, task_id: taskId, capability: REVIEW, input })
    // one run in each state, each confirmed by the executor's own event
    runs.running = await delegate('task-kill-running', { mode: 'hold' })
    await child.line(l => (l.handler as { run_id?: string } | undefined)?.run_id === runs.running?.run_id)
    runs.blocked = await delegate('task-kill-blocked', { mode: 'block', checkpoint: 'cp-kill', note: 'kept across the restart' })
    await eventLine('run.blocked', runs.blocked.run_id)
    runs.completed = await delegate('task-kill-completed', { mode: 'complete' })
    await eventLine('run.completed', runs.completed.run_id)
    runs.failed = await delegate('task-kill-failed', { mode: 'fail' })
    await eventLine('run.failed', runs.failed.run_id)
    // a batch acknowledged just before the kill, without waiting for anything else
    batch = await Promise.all(Array.from({ length: BATCH }, async (_, i) => delegate(`task-kill-batch-${i}`, { mode: 'hold' })))
    await child.kill('SIGKILL')
    expect(child.proc.signalCode).toBe('SIGKILL')

    restarted = await startChild()
    expect(restarted.agentId).toBe(executor.agentId)
  })

  afterAll(async () => {
    await child?.kill('SIGTERM')
    await delegator?.stop()
    if (dataDir !== undefined) await rm(dataDir, { recursive: true, force: true })
  })

  it('every acknowledged run is there after the restart, and the delegator reads each over the wire', async () => {
    for (const r of [...Object.values(runs), ...batch]) {
      if (r === undefined) throw new Error('setup did not create every run')
      const now = await delegator.getRun(r.run_id)
      expect(now.run_id).toBe(r.run_id)
      expect(now.correlation_id).toBe(r.correlation_id)
      expect(now.delegator).toBe(delegator.agentId)
      expect(now.created_at).toBe(r.created_at)
    }
  })

  it('completed, failed and blocked runs keep their last state', async () => {
    const completed = await delegator.getRun(runs.completed!.run_id)
    expect(completed.state).toBe('completed')
    expect(completed.output).toEqual({ done: true })
    expect(completed.last_seq).toBe(2)
    const failed = await delegator.getRun(runs.failed!.run_id)
    expect(failed.state).toBe('failed')
    expect(failed.failure).toEqual({ code: 'HANDLER_FAILED', message: 'the handler failed on purpose' })
    const blocked = await delegator.getRun(runs.blocked!.run_id)
    expect(blocked.state).toBe('blocked')
    expect(blocked.checkpoint_id).toBe('cp-kill')
  })

  it('runs that were executing when the node died are failed with EXECUTOR_RESTARTED, each with its run.failed event', async () => {
    for (const r of [runs.running!, ...batch]) {
      const now = await delegator.getRun(r.run_id)
      expect(now.state, r.correlation_id).toBe('failed')
      expect(now.failure?.code).toBe('EXECUTOR_RESTARTED')
      expect(now.last_seq).toBe(2)
    }
    // the restarted node's log, once restart recovery settled (the delegator had no verdict)
    for (const r of [runs.running!, ...batch]) expect(restarted.logs[r.run_id]).toEqual(['1:run.started', '2:run.failed'])
    expect(restarted.logs[runs.completed!.run_id]).toEqual(['1:run.started', '2:run.completed'])
    expect(restarted.logs[runs.blocked!.run_id]).toEqual(['1:run.started', '2:run.blocked'])
    expect(Object.keys(restarted.logs).length).toBe(4 + BATCH)
  })

  it('a blocked run can still be resumed: its handler starts again with ctx.restored and its original input', async () => {
    const id = runs.blocked!.run_id
    const handler = child.line(l => (l.handler as { run_id?: string } | undefined)?.run_id === id)
    const done = eventLine('run.completed', id)
    const resolution = { approved: true, by: 'human-after-restart' }
    const resumed = await delegator.resume(id, resolution)
    expect(resumed.state).toBe('running')
    const h = (await handler).handler as { restored: unknown, input: unknown }
    expect(h.restored).toEqual({ checkpoint_id: 'cp-kill', resolution })
    expect(h.input).toEqual({ mode: 'block', checkpoint: 'cp-kill', note: 'kept across the restart' })
    await done
    const final = await delegator.getRun(id)
    expect(final.state).toBe('completed')
    expect(final.output).toEqual({ restored: { checkpoint_id: 'cp-kill', resolution }, input: h.input })
  })
})
