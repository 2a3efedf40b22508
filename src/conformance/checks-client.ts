/**
 * The target driven by aap-mesh's own client: the public MeshNode API
 * (delegate, getRun, block, resume, handoff, cancel) instead of raw frames,
 * so a second implementation also shows that it interoperates with this one's
 * callers (their client-side checks, envelopes and pipelined streams). One
 * delegation is followed (`follow: true`): the target's events must reach the
 * delegator's own verified copy, by gossip or by its sync, up to run.completed.
 */
import { AapError } from '../errors.ts'
import type { MeshNode } from '../node.ts'
import type { Run, RunState } from '../runlog/types.ts'
import { CONFORMANCE_CAPABILITY, KIT_CALL_TIMEOUT_MS, KIT_FOLLOWED_EVENTS_MAX, KIT_POLL_INTERVAL_MS, KIT_WAIT_TIMEOUT_MS } from './constants.ts'
import { clean, expect, isCapacityRefusal, type Scope } from './kit.ts'
import { deepEqual, fail, type Check } from './checks-common.ts'

const call = { callTimeoutMs: KIT_CALL_TIMEOUT_MS, responseTimeoutMs: KIT_CALL_TIMEOUT_MS }

async function viaApi<T> (s: Scope, what: string, p: Promise<T>): Promise<T> {
  try {
    return await p
  } catch (err) {
    if (err instanceof AapError) {
      const said = `${err.code}: ${clean(err.message)}`
      s.evidence.frames.push(`${what}: ${said}`)
      if (isCapacityRefusal(err.code, err.details)) s.refusedForCapacity(`${what} through the MeshNode API`, said)
      fail(`${what} through the MeshNode API: ${said}`)
    }
    throw err
  }
}

/**
 * A Run the target answered through the API: kept with every Run answer the
 * kit got (runs-correlation, no-endpoint-upward judge each), as raw answers are.
 */
async function runViaApi (s: Scope, what: string, p: Promise<Run>, task?: string): Promise<Run> {
  const run = await viaApi(s, what, p)
  // the correlation a new run must carry is the task the kit sent, whatever the answer says
  if (task !== undefined) s.kit.expected.set(run.run_id, task)
  return s.answered(run, `${what} through the MeshNode API`)
}

/** Ask the executor (through the API) until the run is in `state`. */
async function untilState (s: Scope, node: MeshNode, runId: string, state: RunState): Promise<Run> {
  const deadline = Date.now() + KIT_WAIT_TIMEOUT_MS
  for (;;) {
    const run = await runViaApi(s, 'getRun', node.getRun(runId, call))
    if (run.state === state) return run
    if (Date.now() > deadline) fail(`run ${runId} is ${run.state}, not ${state}, after ${KIT_WAIT_TIMEOUT_MS} ms`)
    await new Promise(resolve => setTimeout(resolve, KIT_POLL_INTERVAL_MS))
    s.live()
  }
}

/** Wait (bounded) until the delegator's own copy of a followed run ends with run.completed. */
async function followedToEnd (s: Scope, node: MeshNode, runId: string): Promise<void> {
  const deadline = Date.now() + KIT_WAIT_TIMEOUT_MS
  for (;;) {
    const events = await node.events.log.read(runId, 0, KIT_FOLLOWED_EVENTS_MAX)
    const last = events.at(-1)
    if (last?.type === 'run.completed') {
      s.cite(runId, events)
      return
    }
    if (Date.now() > deadline) fail(`the followed run ${runId} did not reach run.completed in the delegator's copy within ${KIT_WAIT_TIMEOUT_MS} ms (it holds ${events.map(e => `${e.seq}:${e.type}`).join(' ') || 'nothing'})`)
    await new Promise(resolve => setTimeout(resolve, KIT_POLL_INTERVAL_MS))
    s.live()
  }
}

export const CLIENT_CHECK: Check = {
  id: 'client-interop',
  title: 'aap-mesh\'s own client (MeshNode delegate, getRun, block, resume, handoff, cancel) drives runs on the target to their end; a followed delegation\'s events reach the delegator\'s own copy',
  run: async (s) => {
    const { delegator: d, coordinator: l2, receiver } = s.n
    const task = s.kit.task('client')
    const run = await runViaApi(s, 'delegate', d.delegate({ to_agent: s.kit.target, task_id: task, capability: CONFORMANCE_CAPABILITY, input: { op: 'hold' }, authorized: [l2.agentId] }, { ...call, follow: false }), task)
    await s.track(run.run_id, d)
    expect(run.state === 'running' && run.correlation_id === task, `the API's handle: ${run.state}, ${run.correlation_id}`)
    const checkpoint = `cp-${s.kit.nonce}-api`
    const blocked = await runViaApi(s, 'block', l2.block(run.run_id, 'checkpoint raised through the API', checkpoint, call))
    expect(blocked.state === 'blocked', `after block: ${blocked.state}`)
    const resolution = { decision: 'approve', via: 'MeshNode.resume' }
    const resumed = await runViaApi(s, 'resume', l2.resume(run.run_id, resolution, { ...call, checkpointId: checkpoint }))
    expect(resumed.state === 'running', `after resume: ${resumed.state}`)
    const next = await runViaApi(s, 'handoff', d.handoff(run.run_id, receiver.agentId, { why: 'handoff through the API' }, { ...call, follow: false }), task)
    expect(next.agent_id === receiver.agentId && next.correlation_id === task, `the API's handoff: ${next.agent_id}, ${next.correlation_id}`)
    const old = await untilState(s, d, run.run_id, 'completed')
    expect(old.handoff_to?.run_id === next.run_id, 'the old run does not point at the new one')
    await untilState(s, d, next.run_id, 'completed')
    // a second run, blocked by its agent, resumed and finished; a third canceled
    const b = await runViaApi(s, 'delegate', d.delegate({ to_agent: s.kit.target, task_id: `${task}-b`, capability: CONFORMANCE_CAPABILITY, input: { op: 'block', checkpoint: 'cp-api' } }, { ...call, follow: false }), `${task}-b`)
    await s.track(b.run_id, d)
    await untilState(s, d, b.run_id, 'blocked')
    await runViaApi(s, 'resume', d.resume(b.run_id, resolution, { ...call, checkpointId: 'cp-api' }))
    const done = await untilState(s, d, b.run_id, 'completed')
    expect(deepEqual(done.output?.resolution, resolution), `the agent got ${JSON.stringify(done.output ?? null)}`)
    const c = await runViaApi(s, 'delegate', d.delegate({ to_agent: s.kit.target, task_id: `${task}-c`, capability: CONFORMANCE_CAPABILITY, input: { op: 'hold' } }, { ...call, follow: false }), `${task}-c`)
    await s.track(c.run_id, d)
    const canceled = await runViaApi(s, 'cancel', d.cancel(c.run_id, 'canceled through the API', call))
    s.kit.canceled.add(c.run_id)
    expect(canceled.state === 'failed' && canceled.failure?.code === 'CANCELED', `after cancel: ${canceled.state}, ${String(canceled.failure?.code)}`)
    // a followed delegation: the delegator keeps its own verified copy of the run's events
    const f = await runViaApi(s, 'delegate', d.delegate({ to_agent: s.kit.target, task_id: `${task}-f`, capability: CONFORMANCE_CAPABILITY, input: { op: 'complete', progress: 1 } }, { ...call, follow: true }), `${task}-f`)
    await s.track(f.run_id, d)
    await followedToEnd(s, d, f.run_id)
  }
}
