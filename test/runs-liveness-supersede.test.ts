/**
 * Issue #18 (the fork the kill -9 campaign found), protocols/liveness.md: a
 * verdict stands in for an executor that says nothing. When the executor
 * was only cut off and signed its own end of the run meanwhile, its events
 * replace the verdict everywhere: the delegator's record and copy, its
 * subscribers, a bystander's copy, and replays, so no two logs of the run
 * differ at any seq. Notices of a verdict outlive a restart of the delegator.
 */
import { mkdtemp, rm } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { generateKeyPair } from '@libp2p/crypto/keys'
import type { PrivateKey } from '@libp2p/interface'
import { createMeshNode, type MeshNode } from '../src/node.ts'
import { eventHash } from '../src/runlog/event.ts'
import type { AgentEvent } from '../src/runlog/types.ts'
import { collect, type Collector } from './events-helpers.ts'
import { until } from './helpers.ts'
import { cutControl, gatedWorker } from './fixtures/control-cut.ts'

const GATE = { capability_id: 'cap:supersede-gate', version: '1.0.0' }
const LOST_AFTER_MS = 1500
const PROBE_MS = 200


describe('liveness: the executor\'s own end of a run replaces a verdict signed while it was cut off', () => {
  let dataDir = ''
  let aKey: PrivateKey
  let A: MeshNode, B: MeshNode, D: MeshNode
  const gates = new Map<string, PromiseWithResolvers<void>>()
  const opts = { listen: ['/ip4/127.0.0.1/tcp/0'], localMesh: true }
  const liveness = { lostAfterMs: LOST_AFTER_MS, probeIntervalMs: PROBE_MS }

  const startA = async (): Promise<MeshNode> => {
    const n = await createMeshNode({ ...opts, dataDir: join(dataDir, 'a'), privateKey: aKey, liveness })
    await n.start()
    return n
  }


  // lastEvent first: it waits for the copies placed so far to be written
  const eventAt = async (n: MeshNode, runId: string, seq: number): Promise<AgentEvent | undefined> => {
    await n.events.lastEvent(runId)
    return n.events.log.get(runId, seq)
  }
  const logOf = async (n: MeshNode, runId: string): Promise<string[]> => {
    await n.events.lastEvent(runId)
    const out: string[] = []
    for await (const page of n.events.log.readAll(runId)) for (const e of page) out.push(`${e.seq}:${e.type}:${eventHash(e)}`)
    return out
  }

  beforeAll(async () => {
    dataDir = await mkdtemp(join(tmpdir(), 'aap-supersede-'))
    aKey = await generateKeyPair('Ed25519')
    A = await startA()
    B = await createMeshNode(opts)
    D = await createMeshNode(opts)
    for (const n of [B, D]) await n.start()
    for (const n of [B, D]) await n.join([A.addresses[0]!])
    await D.join([B.addresses[0]!])
    await gatedWorker(B, GATE, gates)
  })
  afterAll(async () => {
    for (const n of [A, B, D]) await n.stop()
    await rm(dataDir, { recursive: true, force: true })
  })

  it('the executor completed the run while cut off: its run.completed replaces the verdict for the delegator, its subscribers and a bystander', async () => {
    const task = 'task-supersede-01'
    const onA: Collector = await collect(A, task, { participants: [B.agentId] })
    const onD: Collector = await collect(D, task, { owner: A.agentId, participants: [A.agentId, B.agentId] })
    const run = await A.delegate({ to_agent: B.agentId, task_id: task, capability: GATE, input: {} })
    await until(() => gates.has(task), 'the handler at work')
    await onD.until(es => es.some(e => e.run_id === run.run_id && e.seq === 1), 'the bystander holding run.started')

    const restore = await cutControl(B)
    await until(async () => (await A.runs.store.getOutgoing(run.run_id))?.failure?.code === 'EXECUTOR_LOST', 'the delegator to declare the run lost', 30_000)
    const verdict = await eventAt(A, run.run_id, 2)
    expect(verdict?.declared_by).toBe(A.agentId)
    await onD.until(es => es.some(e => e.run_id === run.run_id && e.declared_by !== undefined), 'the bystander holding the verdict')
    // iterator subscribers still catching up on the log: one has read the verdict (a page of one event at a
    // time, so it is not live yet), one has read nothing
    const sees = (e: AgentEvent | undefined): string => e === undefined ? 'end' : `${e.seq}:${e.declared_by === undefined ? e.type : 'verdict'}`
    const readVerdict = await D.events.subscribe(task, { owner: A.agentId, maxBuffered: 1 })
    expect([sees((await readVerdict.next()).value), sees((await readVerdict.next()).value)]).toEqual(['1:run.started', '2:verdict'])
    expect(readVerdict.catchingUp).toBe(true)
    const readNothing = await D.events.subscribe(task, { owner: A.agentId })

    // the executor, which never heard of the verdict, completes the run; then it answers control again
    gates.get(task)!.resolve()
    await until(async () => (await B.runs.store.get(run.run_id))?.state === 'completed', 'the executor to complete the run')
    await restore()

    const mine = await eventAt(B, run.run_id, 2)
    expect(mine?.type).toBe('run.completed')
    expect(mine?.prev).toBe(verdict?.prev)
    await until(async () => (await A.runs.store.getOutgoing(run.run_id))?.state === 'completed', 'the delegator\'s record to follow the executor', 30_000)
    await until(async () => (await eventAt(A, run.run_id, 2))?.type === 'run.completed', 'the delegator\'s copy to take the executor\'s event')
    await until(async () => (await eventAt(D, run.run_id, 2))?.type === 'run.completed', 'the bystander\'s copy to take the executor\'s event')
    await until(() => A.runs.liveness.openNotices === 0, 'the verdict\'s notice settled')

    // one log everywhere, the executor's
    const truth = await logOf(B, run.run_id)
    expect(await logOf(A, run.run_id)).toEqual(truth)
    expect(await logOf(D, run.run_id)).toEqual(truth)
    expect((await A.runs.store.getOutgoing(run.run_id))?.output).toEqual({ done: true })
    expect(A.events.stats.superseded).toBeGreaterThanOrEqual(1)
    expect(D.events.stats.superseded).toBeGreaterThanOrEqual(1)
    // the verdict was never taken as a forgery or a conflict from the executor
    expect(D.events.stats.gossip.conflict).toBe(0)

    // subscribers saw the verdict, then the executor's event at the same seq, which stands
    for (const o of [onA, onD]) {
      const at2 = (await o.until(es => es.filter(e => e.run_id === run.run_id && e.seq === 2).length === 2, 'the replacement delivered'))
        .filter(e => e.run_id === run.run_id && e.seq === 2)
      expect(at2.map(e => e.declared_by === undefined ? e.type : 'verdict')).toEqual(['verdict', 'run.completed'])
    }
    // and so did the iterators: the replacement after the verdict it read, or the executor's log alone
    expect(sees((await readVerdict.next()).value)).toBe('2:run.completed')
    expect([sees((await readNothing.next()).value), sees((await readNothing.next()).value)]).toEqual(['1:run.started', '2:run.completed'])
    readVerdict.close()
    readNothing.close()
    const replay = await D.events.replay(task, { owner: A.agentId, participants: [A.agentId, B.agentId] })
    const r = replay.runs.find(x => x.run_id === run.run_id)
    expect(r?.state).toBe('completed')
    expect(r?.events.at(-1)?.declared_by).toBeUndefined()
  })

  it('a run declared lost with no event held (not followed): the record follows the executor\'s run once it answers', async () => {
    const task = 'task-supersede-03'
    const run = await A.delegate({ to_agent: B.agentId, task_id: task, capability: GATE, input: {} }, { follow: false })
    await until(() => gates.has(task), 'the handler at work')
    const restore = await cutControl(B)
    await until(async () => (await A.runs.store.getOutgoing(run.run_id))?.failure?.code === 'EXECUTOR_LOST', 'the delegator to declare the run lost', 30_000)
    expect(A.runs.liveness.stats.unchained).toBeGreaterThanOrEqual(1)
    await until(() => A.runs.liveness.openNotices === 1, 'the declaration\'s notice open')

    gates.get(task)!.resolve()
    await until(async () => (await B.runs.store.get(run.run_id))?.state === 'completed', 'the executor to complete the run')
    await restore()
    await until(async () => (await A.runs.store.getOutgoing(run.run_id))?.state === 'completed', 'the delegator\'s record to follow the executor', 30_000)
    await until(() => A.runs.liveness.openNotices === 0, 'the notice settled')
    expect((await A.runs.store.getOutgoing(run.run_id))?.output).toEqual({ done: true })
  })

  it('the notice outlives a restart of the delegator: the executor\'s end replaces the verdict once it is heard from', async () => {
    const task = 'task-supersede-02'
    const run = await A.delegate({ to_agent: B.agentId, task_id: task, capability: GATE, input: {} })
    await until(() => gates.has(task), 'the handler at work')
    await until(async () => (await eventAt(A, run.run_id, 1)) !== undefined, 'the delegator holding run.started')

    const restore = await cutControl(B)
    await until(async () => (await A.runs.store.getOutgoing(run.run_id))?.failure?.code === 'EXECUTOR_LOST', 'the delegator to declare the run lost', 30_000)
    await until(() => A.runs.liveness.openNotices === 1, 'the verdict\'s notice open')
    await A.stop()

    // cut off from a delegator that is down, the executor fails the run on its own
    gates.get(task)!.reject(new Error('the work could not finish'))
    await until(async () => (await B.runs.store.get(run.run_id))?.state === 'failed', 'the executor to end the run')
    await restore()

    A = await startA()
    expect(A.runs.liveness.openNotices).toBe(1)
    await A.join([B.addresses[0]!])
    await until(() => A.runs.liveness.openNotices === 0, 'the verdict\'s notice settled after the restart', 30_000)
    const record = await A.runs.store.getOutgoing(run.run_id)
    const theirs = await B.runs.store.get(run.run_id)
    expect(record?.state).toBe('failed')
    expect(record?.failure).toEqual(theirs?.failure)
    expect(record?.failure?.code).not.toBe('EXECUTOR_LOST')
    expect(await logOf(A, run.run_id)).toEqual(await logOf(B, run.run_id))
    expect(A.runs.liveness.stats.superseded).toBe(1)
  })
})
