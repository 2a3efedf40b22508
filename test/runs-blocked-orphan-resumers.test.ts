/**
 * The executor gives up a blocked run whose delegator is gone (orphans.ts),
 * and the delegator writes the list of agents authorized to resume it. A
 * throwaway delegator must not keep its run for good through that list: a
 * run naming the executor itself as a resumer counts the executor for
 * nothing, and a run naming a node that is always online (a bystander that
 * answers every ask, or a real resumer) is kept by its answers only up to
 * the second bound, BLOCKED_ORPHAN_RESUMER_MAX_MS past its delegator's last
 * sign of life. And get_verdict's `held`, which tells whether a delegation
 * is still live, is answered to the run's executor only, never to a
 * stranger who knows the run id.
 */
import { generateKeyPair } from '@libp2p/crypto/keys'
import { MemoryDatastore } from 'datastore-core'
import { afterAll, describe, expect, it } from 'vitest'
import { CONTROL_MAX_FRAME_BYTES, CONTROL_PROTOCOL } from '../src/constants.ts'
import { peerIdOfAgent } from '../src/identity/identity.ts'
import { silentLogger } from '../src/logger.ts'
import type { MeshNode, MeshNodeOptions } from '../src/node.ts'
import { BLOCKED_ORPHAN_AFTER_MS, BLOCKED_ORPHAN_RESUMER_MAX_MS } from '../src/runs/constants.ts'
import { DELEGATOR_LOST } from '../src/runs/orphans.ts'
import { signVerdict } from '../src/runlog/verdict.ts'
import { RpcClient } from '../src/wire/rpc.ts'
import { startLoneNodes, stopAll, until } from './helpers.ts'

const WORK = { capability_id: 'cap:blocked-orphan-resumers', version: '1.0.0' }
const ORPHAN_AFTER_MS = 2_000
const CHECK_MS = 200

describe('blocked runs whose delegator named resumers and left', () => {
  const nodes: MeshNode[] = []
  afterAll(async () => { await stopAll(nodes.filter(n => n.host.status === 'started')) })

  async function node (extra: Partial<MeshNodeOptions> = {}): Promise<MeshNode> {
    const [n] = await startLoneNodes(1, { logger: silentLogger(), ...extra })
    nodes.push(n!)
    return n!
  }

  async function executor (): Promise<MeshNode> {
    const E = await node({ datastore: new MemoryDatastore(), privateKey: await generateKeyPair('Ed25519'), liveness: { blockedOrphanAfterMs: ORPHAN_AFTER_MS, blockedCheckIntervalMs: CHECK_MS } })
    // the work goes on until the run ends (a block does not end it)
    E.runs.handle(WORK, async (ctx) => {
      await new Promise(resolve => { ctx.signal.addEventListener('abort', resolve, { once: true }) })
      return { ok: true }
    })
    await E.publishCard({ name: 'executor', capabilities: [WORK] })
    return E
  }

  it('end with DELEGATOR_LOST: at the first bound when the executor is named, by the second when an online node is', async () => {
    const E = await executor()
    // the second bound keeps its ratio to the first when only the first is set
    expect(E.runs.orphans.resumerMaxMs).toBe(ORPHAN_AFTER_MS * BLOCKED_ORPHAN_RESUMER_MAX_MS / BLOCKED_ORPHAN_AFTER_MS)
    expect(E.runs.orphans.resumerMaxMs).toBeGreaterThan(ORPHAN_AFTER_MS)
    // a bystander that is always online (a bootstrap node, say) and knows nothing of the run, and a real resumer
    const B = await node()
    const R = await node()
    for (const n of [B, R]) await n.join(E.addresses)

    // a throwaway delegator: delegates, blocks its run and leaves for good
    const park = async (task: string, authorized: string[]): Promise<string> => {
      const S = await node()
      await S.join(E.addresses)
      const run = await S.delegate({ to_agent: E.agentId, task_id: task, capability: WORK, input: {}, authorized })
      await S.block(run.run_id, 'parked', 'cp-1')
      await S.stop()
      return run.run_id
    }
    // the runs named with online nodes are parked first: their delegators are gone longest
    const withResumer = await park('with-resumer', [R.agentId])
    const withBystander = await park('with-bystander', [B.agentId])
    const withExecutor = await park('with-executor', [E.agentId])

    // the executor never resumes a run it executes: the run ends at the first bound, as if it named nobody
    await until(async () => (await E.runs.getRun(withExecutor)).state === 'failed', 'the run naming the executor to end', 30_000)
    expect(await E.runs.getRun(withExecutor)).toMatchObject({ state: 'failed', failure: { code: DELEGATOR_LOST } })
    // the runs whose delegators left before, past the first bound too, are kept by their resumers' answers for now
    expect((await E.runs.getRun(withResumer)).state).toBe('blocked')
    expect((await E.runs.getRun(withBystander)).state).toBe('blocked')

    // but not for ever: by the second bound both end, though R and B are online and answer all along
    await until(async () => (await E.runs.getRun(withBystander)).state === 'failed' && (await E.runs.getRun(withResumer)).state === 'failed',
      'the runs naming online resumers to end', 60_000)
    for (const runId of [withResumer, withBystander]) {
      const run = await E.runs.getRun(runId)
      expect(run).toMatchObject({ state: 'failed', failure: { code: DELEGATOR_LOST } })
      expect(run.failure?.message).toContain(`at most ${E.runs.orphans.resumerMaxMs} ms past its delegator's last sign of life`)
    }
    expect(B.host.status).toBe('started')
    expect(R.host.status).toBe('started')
    expect(E.runs.orphans.stats.ended).toBe(3)
    expect(E.runs.slots.size).toBe(0)
  }, 120_000)

  it('answer get_verdict\'s held to the run\'s executor only', async () => {
    const E = await executor()
    const dKey = await generateKeyPair('Ed25519')
    const D = await node({ privateKey: dKey })
    const X = await node()
    await D.join(E.addresses)
    await X.join(D.addresses)
    const run = await D.delegate({ to_agent: E.agentId, task_id: 'held-to-executor', capability: WORK, input: {} })
    await D.block(run.run_id, 'a person decides', 'cp-held')

    const ask = async (from: MeshNode): Promise<Record<string, unknown>> => {
      const client = new RpcClient(from.host, { protocol: CONTROL_PROTOCOL, maxFrameBytes: CONTROL_MAX_FRAME_BYTES })
      return client.call(peerIdOfAgent(D.agentId), 'get_verdict', { run_id: run.run_id }, {})
    }
    // the executor, which asks to find its orphaned runs, learns that D still holds the run
    expect(await ask(E)).toEqual({ verdict: null, held: true })
    // a stranger who knows the run id gets the verdict alone: it cannot watch D's delegations end
    expect(await ask(X)).toEqual({ verdict: null })
    // once D holds a verdict on the run, the verdict alone is answered, to the executor too: it ends the run
    // whatever `held` says, and executors from before `held` refuse an answer that carries it
    const head = (await E.events.replay('held-to-executor')).events.filter(e => e.run_id === run.run_id).at(-1)!
    const verdict = await signVerdict(dKey, D.agentId, head, 'the executor is gone')
    const before = await D.getRun(run.run_id)
    await D.runs.store.putVerdict(verdict, { run_id: run.run_id, executor: E.agentId, since: Date.now(), before })
    // as a declaration leaves it: the record ends with the verdict (a verdict never stands on a live record)
    await D.runs.store.putOutgoing({ ...before, state: 'failed', failure: { code: 'EXECUTOR_LOST', message: 'the executor is gone' }, last_seq: verdict.seq })
    expect(await ask(E)).toEqual({ verdict })
  }, 60_000)
})
