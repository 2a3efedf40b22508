/**
 * Resume grants (src/runlog/resume-grant.ts): the agent that resumes a run
 * signs what it answers, and the executor's resume event carries that
 * signature, so a hostile executor cannot log, in its delegator's name, a
 * resolution the delegator never gave. Real nodes; the hostile executor is
 * B committing resumes itself, as patched code on B would.
 */
import { generateKeyPair } from '@libp2p/crypto/keys'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { CONTROL_MAX_FRAME_BYTES, CONTROL_PROTOCOL, EVENT_PAYLOAD_MAX_BYTES } from '../src/constants.ts'
import type { MeshNode } from '../src/node.ts'
import { peerIdOfAgent } from '../src/identity/identity.ts'
import { grantStanding, signResumeGrant } from '../src/runlog/resume-grant.ts'
import type { AgentEvent } from '../src/runlog/types.ts'
import type { RunExecutor } from '../src/runs/executor.ts'
import { RpcClient } from '../src/wire/rpc.ts'
import { rejectsWith, startMesh, stopAll, until } from './helpers.ts'

const ASKS = { capability_id: 'cap:resume-grant', version: '1.0.0' }
/** Asks twice: a small payment, then a large one. */
const TWICE = { capability_id: 'cap:resume-grant-twice', version: '1.0.0' }
/** Asks once and ends with the size of what it was told. */
const ONCE = { capability_id: 'cap:resume-grant-once', version: '1.0.0' }

describe('resume grants', () => {
  let nodes: MeshNode[] = []
  let A: MeshNode, B: MeshNode
  let executor: RunExecutor
  const releases: Array<() => void> = []

  beforeAll(async () => {
    nodes = await startMesh(2)
    ;[A, B] = nodes as [MeshNode, MeshNode]
    B.runs.handle(ASKS, async (ctx) => {
      await new Promise<void>(resolve => { releases.push(resolve); ctx.signal.addEventListener('abort', () => { resolve() }, { once: true }) })
      return {}
    })
    B.runs.handle(TWICE, async (ctx) => ({ small: await ctx.block('pay 10?', 'pay-10'), large: await ctx.block('pay 1000000?', 'pay-1000000') }))
    B.runs.handle(ONCE, async (ctx) => ({ keys: Object.keys(await ctx.block('review', 'cp-once')).length }))
    await B.publishCard({ name: 'b', capabilities: [ASKS, TWICE, ONCE] })
    executor = (B.runs as unknown as { executor: RunExecutor }).executor
  })
  afterAll(async () => {
    for (const release of releases) release()
    await stopAll(nodes)
  })

  async function blocked (task: string): Promise<string> {
    const run = await A.delegate({ to_agent: B.agentId, task_id: task, capability: ASKS, input: {} })
    await A.block(run.run_id, 'a person decides', `cp-${task}`)
    return run.run_id
  }

  /** The resume event of `runId` once A holds it, as A's replay of `task` shows it. */
  async function resumeOnA (task: string, runId: string): Promise<AgentEvent> {
    await until(async () => (await A.events.replay(task)).events.some(e => e.run_id === runId && e.payload.transition === 'resume'), 'A to hold the resume event')
    return (await A.events.replay(task)).events.find(e => e.run_id === runId && e.payload.transition === 'resume')!
  }

  it('an honest resume is signed by its resumer: the event carries the grant and the audit shows it attested', async () => {
    const runId = await blocked('grant-honest')
    await A.resume(runId, { approved: true, by_human: 'ada' }, { checkpointId: 'cp-grant-honest' })
    const event = await resumeOnA('grant-honest', runId)
    expect(event.payload.grant).toMatchObject({ checkpoint_id: 'cp-grant-honest' })
    expect(grantStanding(event)).toBe('attested')
    const replay = await A.events.replay('grant-honest')
    expect(replay.checkpoints[0]).toMatchObject({ resolved_by: A.agentId, attested: true, resolution: { approved: true, by_human: 'ada' } })
    expect(replay.transitions.find(t => t.kind === 'resume')).toMatchObject({ attested: true })
    expect(replay.transitions.find(t => t.kind === 'resume')).not.toHaveProperty('violation')
  })

  it('a resume the executor logs in its delegator\'s name with a made-up grant moves nothing, and the audit marks it forged', async () => {
    const runId = await blocked('grant-forged')
    // a grant signed by another key, over a resolution the delegator never gave
    const other = await generateKeyPair('Ed25519')
    const signature = await signResumeGrant(other, { run_id: runId, checkpoint_id: null, resolution: { approved: true } })
    await executor.apply(runId, { type: 'resume', resolution: { approved: true }, grant: { checkpoint_id: null, signature } }, { role: 'delegator', agent_id: A.agentId })
    const event = await resumeOnA('grant-forged', runId)
    expect(grantStanding(event)).toBe('forged')
    expect((await A.runs.list({}, {})).delegated.find(r => r.run_id === runId)?.state).toBe('blocked')
    const replay = await A.events.replay('grant-forged')
    expect(replay.transitions.find(t => t.kind === 'resume')).toMatchObject({ violation: 'forged_grant', attested: false })
    expect(replay.checkpoints[0]).toMatchObject({ resolved_by: null, resolution: null, attested: null })
  })

  it('a resume the executor logs in its delegator\'s name without a grant shows in the audit as its word alone', async () => {
    const runId = await blocked('grant-missing')
    await executor.apply(runId, { type: 'resume', resolution: { approved: true } }, { role: 'delegator', agent_id: A.agentId })
    await resumeOnA('grant-missing', runId)
    const replay = await A.events.replay('grant-missing')
    expect(replay.checkpoints[0]).toMatchObject({ resolved_by: A.agentId, attested: false })
  })

  it('a grant copied into a later resume of the run answers nothing: the audit marks it reused and the checkpoint unresolved', async () => {
    const run = await A.delegate({ to_agent: B.agentId, task_id: 'grant-reused', capability: TWICE, input: {} })
    await until(async () => (await B.runs.getRun(run.run_id)).checkpoint_id === 'pay-10', 'the first checkpoint')
    // the delegator answers the small payment without naming it (as the API and CLI do without checkpoint_id)
    await A.resume(run.run_id, { decision: 'approve' })
    await until(async () => (await B.runs.getRun(run.run_id)).checkpoint_id === 'pay-1000000', 'the second checkpoint')
    const first = await resumeOnA('grant-reused', run.run_id)
    // the executor answers the large one itself, with a copy of the delegator's grant
    await executor.apply(run.run_id, { type: 'resume', resolution: { decision: 'approve' }, grant: first.payload.grant as { checkpoint_id: null, signature: string } }, { role: 'delegator', agent_id: A.agentId })
    await until(async () => (await A.events.replay('grant-reused')).transitions.filter(t => t.kind === 'resume').length === 2, 'A to hold both resumes')
    const replay = await A.events.replay('grant-reused')
    expect(replay.transitions.filter(t => t.kind === 'resume').map(t => [t.attested, t.violation])).toEqual([[true, undefined], [false, 'reused_grant']])
    expect(replay.checkpoints.map(c => [c.checkpoint_id, c.resolved_by, c.attested])).toEqual([['pay-10', A.agentId, true], ['pay-1000000', null, null]])
  })

  it('a resolution that leaves the resume event no room for a grant resumes the run without one', async () => {
    const run = await A.delegate({ to_agent: B.agentId, task_id: 'grant-no-room', capability: ONCE, input: {} })
    await until(async () => (await B.runs.getRun(run.run_id)).state === 'blocked', 'the block')
    // the resume event's payload without a grant just within the bound: with one it would not be
    const base = Buffer.byteLength(JSON.stringify({ transition: 'resume', checkpoint_id: 'cp-once', resolution: { s: '' }, by: A.agentId }))
    const resolution = { s: 'x'.repeat(EVENT_PAYLOAD_MAX_BYTES - base - 20) }
    expect((await A.resume(run.run_id, resolution)).state).toBe('running')
    const event = await resumeOnA('grant-no-room', run.run_id)
    expect(grantStanding(event)).toBe('unattested')
  })

  it('a resume request whose grant is not its sender\'s signature is refused (INVALID_SIGNATURE) and the run stays blocked', async () => {
    const runId = await blocked('grant-bad-request')
    const other = await generateKeyPair('Ed25519')
    const resolution = { approved: true }
    const client = new RpcClient(A.host, { protocol: CONTROL_PROTOCOL, maxFrameBytes: CONTROL_MAX_FRAME_BYTES })
    const wrongKey = await signResumeGrant(other, { run_id: runId, checkpoint_id: null, resolution })
    await rejectsWith(client.call(peerIdOfAgent(B.agentId), 'resume', { run_id: runId, resolution, grant: wrongKey }, {}), 'INVALID_SIGNATURE')
    // A's own signature, over another resolution than the one sent
    const key = (A as unknown as { key: Parameters<typeof signResumeGrant>[0] }).key
    const otherAnswer = await signResumeGrant(key, { run_id: runId, checkpoint_id: null, resolution: { approved: false } })
    await rejectsWith(client.call(peerIdOfAgent(B.agentId), 'resume', { run_id: runId, resolution, grant: otherAnswer }, {}), 'INVALID_SIGNATURE')
    expect((await B.runs.getRun(runId)).state).toBe('blocked')
  })
})
