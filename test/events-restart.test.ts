/**
 * An executor killed with SIGKILL in the middle of a run, then restarted from
 * its data directory, serves its log intact: every event anyone saw before
 * the kill is there, in the same order, with the same bytes, and the chain
 * continues with the run.failed that restart recovery commits.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { once } from 'node:events'
import { mkdtemp, rm } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { createMeshNode, type MeshNode } from '../src/node.ts'
import { spawnReady, type ReadyChild, type ReadyInfo } from '../scripts/lib/proc.ts'
import { checkChain } from '../src/runlog/event.ts'
import { collect, expectSeqOrdered, hashes } from './events-helpers.ts'

interface ExecutorInfo extends ReadyInfo { agent_id: string, addrs: string[] }

const FIXTURE = join(import.meta.dirname, 'fixtures', 'events-executor.ts')
const TASK = 'task-restart-01'
/** The capability the fixture serves (kept in step with test/fixtures/events-executor.ts). */
const STREAM = { capability_id: 'cap:event-stream', version: '1.0.0' }

describe('an executor killed mid-run and restarted', () => {
  let dataDir = ''
  let A: MeshNode, F: MeshNode
  let child: ReadyChild<ExecutorInfo> | undefined

  const startExecutor = async (): Promise<ReadyChild<ExecutorInfo>> =>
    spawnReady<ExecutorInfo>(FIXTURE, ['--data-dir', dataDir, '--bootstrap', A.addresses[0]!])

  beforeAll(async () => {
    dataDir = await mkdtemp(join(tmpdir(), 'aap-events-restart-'))
    A = await createMeshNode({ listen: ['/ip4/127.0.0.1/tcp/0'], localMesh: true })
    F = await createMeshNode({ listen: ['/ip4/127.0.0.1/tcp/0'], localMesh: true })
    await A.start()
    await F.start()
    child = await startExecutor()
  })
  afterAll(async () => {
    await child?.stop()
    await A.stop()
    await F.stop()
    await rm(dataDir, { recursive: true, force: true })
  })

  it('loses and reorders no event anyone saw before the kill', async () => {
    const E = child!.info.agent_id
    const watch = await collect(A, TASK, { participants: [E] })
    const run = await A.delegate({ to_agent: E, task_id: TASK, capability: STREAM, input: {} })
    await watch.until(es => es.length >= 50, '50 events from the running executor')

    const exited = once(child!.child, 'exit')
    child!.child.kill('SIGKILL')
    const [, signal] = await exited as [number | null, string | null]
    expect(signal).toBe('SIGKILL')
    // everything A got was committed by E before it was published: these are acknowledged
    const seen = [...watch.events]
    expect(seen.length).toBeGreaterThanOrEqual(50)
    expectSeqOrdered(seen)

    child = await startExecutor()
    expect(child.info.agent_id).toBe(E)
    expect(await F.join(child.info.addrs)).toBe(1)
    expect(await A.join(child.info.addrs)).toBe(1)

    // a node that saw nothing fetches the whole log from the restarted executor: it verifies and chains
    const log = await F.events.fetchRun(run.run_id)
    checkChain(log, undefined)
    expect(log.length).toBeGreaterThan(seen.length)
    expect(hashes(log.slice(0, seen.length))).toEqual(hashes(seen))
    const last = log.at(-1)!
    expect(last.type).toBe('run.failed')
    expect(last.payload).toMatchObject({ failure: { code: 'EXECUTOR_RESTARTED' } })
    expect(log.slice(0, -1).every(e => e.type !== 'run.failed')).toBe(true)

    // and the subscriber that watched the run before the kill ends with the same log
    const all = await watch.until(es => es.some(e => e.type === 'run.failed'), 'the failure after restart')
    expectSeqOrdered(all)
    expect(hashes(all)).toEqual(hashes(log))
  })
})
