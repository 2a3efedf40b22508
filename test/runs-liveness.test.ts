/**
 * Issue #12, liveness (protocols/liveness.md): a delegator learns within its
 * bound that the executor of a live run is gone, and ends the run with a
 * verdict it signs: failed, EXECUTOR_LOST, seen by subscribers and replays,
 * and taken by the executor when it comes back, which never runs the work
 * again. A blocked run whose executor stays reachable does not expire; a
 * verdict signed by anyone but the delegator is refused everywhere.
 */
import { once } from 'node:events'
import { mkdtemp, rm } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { generateKeyPair } from '@libp2p/crypto/keys'
import type { PrivateKey } from '@libp2p/interface'
import { CONTROL_MAX_FRAME_BYTES, CONTROL_PROTOCOL, LIVENESS_PROBE_TIMEOUT_MS } from '../src/constants.ts'
import { correlationTopic } from '../src/events/topic.ts'
import { peerIdOfAgent } from '../src/identity/identity.ts'
import { createMeshNode, type MeshNode } from '../src/node.ts'
import { eventHash, verifyEventSync } from '../src/runlog/event.ts'
import { signVerdict } from '../src/runlog/verdict.ts'
import { RpcClient } from '../src/wire/rpc.ts'
import { spawnReady, type ReadyChild, type ReadyInfo } from '../scripts/lib/proc.ts'
import { collect, type Collector } from './events-helpers.ts'
import { until } from './helpers.ts'

interface ExecutorInfo extends ReadyInfo { agent_id: string, addrs: string[] }

const FIXTURE = join(import.meta.dirname, 'fixtures', 'liveness-executor.ts')
const HOLD = { capability_id: 'cap:liveness-hold', version: '1.0.0' }
const WAIT = { capability_id: 'cap:liveness-wait', version: '1.0.0' }
const TASK = 'task-liveness-01'
const LOST_AFTER_MS = 1500
const PROBE_MS = 200
const enc = new TextEncoder()

describe('liveness: a delegator ends the runs of an executor that is gone', () => {
  let dataDir = ''
  let A: MeshNode, D: MeshNode, B: MeshNode, R: MeshNode
  let rKey: PrivateKey
  let aKey: PrivateKey
  let child: ReadyChild<ExecutorInfo> | undefined
  let starts: string[] = []
  let onA: Collector, onD: Collector
  let lostRun = ''

  const startExecutor = async (): Promise<ReadyChild<ExecutorInfo>> => {
    const c = await spawnReady<ExecutorInfo>(FIXTURE, ['--data-dir', dataDir, '--bootstrap', A.addresses[0]!])
    c.child.stdout?.setEncoding('utf8')
    c.child.stdout?.on('data', (chunk: string) => {
      for (const line of chunk.split('\n')) if (line.includes('handler_started')) starts.push(line)
    })
    return c
  }

  beforeAll(async () => {
    dataDir = await mkdtemp(join(tmpdir(), 'aap-liveness-'))
    const opts = { listen: ['/ip4/127.0.0.1/tcp/0'], localMesh: true }
    aKey = await generateKeyPair('Ed25519')
    A = await createMeshNode({ ...opts, privateKey: aKey, liveness: { lostAfterMs: LOST_AFTER_MS, probeIntervalMs: PROBE_MS } })
    D = await createMeshNode(opts)
    B = await createMeshNode(opts)
    rKey = await generateKeyPair('Ed25519')
    R = await createMeshNode({ ...opts, privateKey: rKey })
    for (const n of [A, D, B, R]) await n.start()
    for (const n of [D, B, R]) await n.join([A.addresses[0]!])
    B.runs.handle(WAIT, async (ctx) => {
      await ctx.block('waiting for a human', 'cp-human')
      return { approved: true }
    })
    await B.publishCard({ name: 'waiter', capabilities: [WAIT] })
    child = await startExecutor()
    onA = await collect(A, TASK, { participants: [child.info.agent_id] })
    onD = await collect(D, TASK, { owner: A.agentId, participants: [A.agentId, child.info.agent_id] })
  })
  afterAll(async () => {
    await child?.stop()
    for (const n of [A, D, B, R]) await n.stop()
    await rm(dataDir, { recursive: true, force: true })
  })

  it('an executor killed for good: the run fails with executor_lost within the bound, for the delegator, its subscribers and the replay', async () => {
    const E = child!.info.agent_id
    const run = await A.delegate({ to_agent: E, task_id: TASK, capability: HOLD, input: {} })
    lostRun = run.run_id
    await onA.until(es => es.some(e => e.run_id === lostRun && e.type === 'run.progress'), 'the executor at work')
    await until(() => A.runs.liveness.watching.runs >= 1, 'the run watched')

    const exited = once(child!.child, 'exit')
    child!.child.kill('SIGKILL')
    await exited
    const killedAt = Date.now()
    await until(async () => (await A.runs.store.getOutgoing(lostRun))?.state === 'failed', 'the delegator to declare the run lost', 30_000)
    const tookMs = Date.now() - killedAt
    // the bound: unreachable for lostAfterMs, noticed at the next probe (each probe bounded too)
    expect(tookMs).toBeLessThan(LOST_AFTER_MS + PROBE_MS + LIVENESS_PROBE_TIMEOUT_MS + 5000)
    const record = await A.runs.store.getOutgoing(lostRun)
    expect(record?.failure?.code).toBe('EXECUTOR_LOST')
    expect(A.runs.liveness.stats.declared).toBe(1)

    // subscribers (the delegator's own and a bystander's) see the verdict, signed by the delegator
    for (const o of [onA, onD]) {
      const es = await o.until(list => list.some(e => e.run_id === lostRun && e.type === 'run.failed'), 'the verdict delivered')
      const verdict = es.find(e => e.run_id === lostRun && e.type === 'run.failed')!
      expect(verdict.declared_by).toBe(A.agentId)
      expect(verdict.executor).toBe(E)
      expect(verdict.payload).toMatchObject({ reason: 'executor_lost', by: A.agentId, failure: { code: 'EXECUTOR_LOST' } })
      expect(() => verifyEventSync(verdict)).not.toThrow()
    }
    // the replay says who declared it and why
    const replay = await D.events.replay(TASK, { owner: A.agentId, participants: [A.agentId] })
    const r = replay.runs.find(x => x.run_id === lostRun)
    expect(r?.state).toBe('failed')
    expect(r?.complete).toBe(true)
    const last = r?.events.at(-1)
    expect(last?.declared_by).toBe(A.agentId)
    expect(last?.payload.failure).toMatchObject({ code: 'EXECUTOR_LOST' })
  })

  it('the executor restarted afterwards takes the verdict as its run\'s end and never runs the work again', async () => {
    const startsBefore = starts.length
    expect(startsBefore).toBe(1)
    child = await startExecutor()
    let atExecutor: Awaited<ReturnType<MeshNode['runs']['getRun']>> | undefined
    await until(async () => {
      try {
        atExecutor = await A.runs.getRun(lostRun)
        return atExecutor.state === 'failed'
      } catch {
        return false
      }
    }, 'the restarted executor to end the run', 30_000)
    expect(atExecutor?.failure?.code).toBe('EXECUTOR_LOST')
    const verdict = onA.events.find(e => e.run_id === lostRun && e.type === 'run.failed')!
    // one chain everywhere: the executor's log ends with the delegator's verdict itself
    expect(atExecutor?.last_seq).toBe(verdict.seq)
    const held = await A.events.fetchRun(lostRun, { from: child!.info.agent_id })
    expect(held).toEqual([])
    expect(starts.length).toBe(startsBefore)
    // and it cannot complete it: the run is terminal where it executes
    await expect(A.runs.resume(lostRun, {})).rejects.toMatchObject({ code: 'INVALID_TRANSITION' })
  })

  it('a blocked run whose executor stays reachable does not expire, however long the checkpoint waits', async () => {
    const run = await A.delegate({ to_agent: B.agentId, task_id: 'task-liveness-blocked', capability: WAIT, input: {} })
    await until(async () => (await A.runs.getRun(run.run_id)).state === 'blocked', 'the run blocked on its checkpoint')
    const probes = A.runs.liveness.stats.probes
    // more probe rounds than the bound holds, all of them answered
    const rounds = Math.ceil(LOST_AFTER_MS / PROBE_MS) * 2
    await until(() => A.runs.liveness.stats.probes >= probes + rounds, 'probe rounds past the bound', 30_000)
    expect((await B.runs.getRun(run.run_id)).state).toBe('blocked')
    expect((await A.runs.store.getOutgoing(run.run_id))?.state).not.toBe('failed')
    expect(A.runs.liveness.stats.declared).toBe(1)
    await A.runs.resume(run.run_id, { ok: true })
    await until(async () => (await A.runs.getRun(run.run_id)).state === 'completed', 'the resumed run to complete')
  })

  it('a verdict signed by anyone but the delegator is refused by the executor and by every subscriber', async () => {
    const run = await A.delegate({ to_agent: B.agentId, task_id: TASK, capability: WAIT, input: {} })
    await onA.until(es => es.some(e => e.run_id === run.run_id && e.type === 'run.blocked'), 'the run blocked')
    const head = onA.events.filter(e => e.run_id === run.run_id).at(-1)!
    const forged = await signVerdict(rKey, R.agentId, head, 'a stranger says so')
    expect(forged.prev).toBe(eventHash(head))
    // to the executor: only the run's delegator may tell it
    const client = new RpcClient(R.host, { protocol: CONTROL_PROTOCOL, maxFrameBytes: CONTROL_MAX_FRAME_BYTES })
    await expect(client.call(peerIdOfAgent(B.agentId), 'executor_lost', { run_id: run.run_id, verdict: forged }, {}))
      .rejects.toMatchObject({ code: 'UNAUTHORIZED' })
    client.close()
    // on the topic: refused as a forgery
    const topic = correlationTopic(TASK)
    for (const n of [A, D]) await R.host.dial(peerIdOfAgent(n.agentId))
    await until(() => [A, D].every(n => R.host.services.pubsub.getSubscribers(topic).some(p => p.toString() === n.agentId)), 'the stranger to see the subscribers')
    const before = [A, D].map(n => n.events.stats.gossip.forged_verdict)
    await R.host.services.pubsub.publish(topic, enc.encode(JSON.stringify(forged)))
    await until(() => [A, D].every((n, i) => n.events.stats.gossip.forged_verdict > (before[i] ?? 0)), 'the forged verdict judged')
    for (const o of [onA, onD]) expect(o.events.some(e => e.run_id === run.run_id && e.type === 'run.failed')).toBe(false)
    expect((await B.runs.getRun(run.run_id)).state).toBe('blocked')
    await A.runs.cancel(run.run_id, 'done with the test')
  })
  it('the delegator\'s own verdict naming another correlation is refused by the executor, whose log stays whole', async () => {
    const run = await A.delegate({ to_agent: B.agentId, task_id: 'task-liveness-other-correlation', capability: WAIT, input: {} })
    await until(async () => (await A.runs.getRun(run.run_id)).state === 'blocked', 'the run blocked on its checkpoint')
    const head = (await B.events.lastEvent(run.run_id))!
    const misfiled = await signVerdict(aKey, A.agentId, { ...head, correlation_id: 'task-someone-else' }, 'misfiled')
    const client = new RpcClient(A.host, { protocol: CONTROL_PROTOCOL, maxFrameBytes: CONTROL_MAX_FRAME_BYTES })
    try {
      await expect(client.call(peerIdOfAgent(B.agentId), 'executor_lost', { run_id: run.run_id, verdict: misfiled }, {}))
        .rejects.toMatchObject({ code: 'INVALID_REQUEST', details: { reason: 'bad_verdict' } })
    } finally {
      client.close()
    }
    expect((await B.runs.getRun(run.run_id)).state).toBe('blocked')
    expect((await B.events.lastEvent(run.run_id))?.seq).toBe(head.seq)
    await A.runs.cancel(run.run_id, 'done with the test')
  })
})
