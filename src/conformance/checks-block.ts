/** Checks of block and resume: checkpoints, resolutions, self-resume, invalid transitions, authority. */
import type { Run } from '../runlog/types.ts'
import { expect, type Scope, type WireEvent } from './kit.ts'
import { blockedRun, deepEqual, heldRun, payloadOf, release, type Check } from './checks-common.ts'

/** A refused command changed nothing: the run read back has the state, checkpoint and last seq it had before. */
async function unchanged (s: Scope, before: Run, what: string): Promise<void> {
  const after = await s.getRun(before.run_id)
  expect(after.state === before.state && after.last_seq === before.last_seq && after.checkpoint_id === before.checkpoint_id,
    `${what} changed the run: ${before.state} at seq ${before.last_seq} before, ${after.state} at seq ${after.last_seq} after`)
}

async function mustBeRefused (s: Scope, runId: string, code: string, what: string): Promise<void> {
  const d = s.n.delegator
  const before = await s.getRun(runId)
  s.expectError(await s.control(d, 'resume', { run_id: runId, resolution: { decision: 'late' } }), code, `${what}: resume`)
  s.expectError(await s.control(d, 'block', { run_id: runId, reason: 'late', checkpoint_id: 'cp-late' }), code, `${what}: block`)
  s.expectError(await s.control(d, 'cancel', { run_id: runId }), code, `${what}: cancel`)
  s.expectError(await s.control(d, 'handoff', { run_id: runId, to_agent: s.n.receiver.agentId, context: {} }), code, `${what}: handoff`)
  await unchanged(s, before, `the refused commands on the ${what}`)
}

/** The codes a block without its checkpoint_id, or a resume without its resolution, may be refused with: the request is malformed, or no transition. */
const MALFORMED_COMMAND = ['INVALID_REQUEST', 'INVALID_TRANSITION'] as const

export const BLOCK_CHECKS: Check[] = [
  {
    id: 'block-checkpoint',
    title: 'an agent\'s block carries its checkpoint_id into run.blocked and the run; a block without a checkpoint_id is refused',
    run: async (s) => {
      const cp = `cp-${s.kit.nonce}-agent`
      const { run, blocked } = await blockedRun(s, 'checkpoint', cp)
      expect(payloadOf(blocked).checkpoint_id === cp, `run.blocked checkpoint_id ${String(payloadOf(blocked).checkpoint_id)} != ${cp}`)
      const read = await s.getRun(run.run_id)
      expect(read.state === 'blocked' && read.checkpoint_id === cp, `get_run: ${read.state}, checkpoint_id ${String(read.checkpoint_id)}`)
      const held = await heldRun(s, 'checkpoint-missing')
      s.expectError(await s.control(s.n.delegator, 'block', { run_id: held.run_id, reason: 'no checkpoint' }), MALFORMED_COMMAND, 'block without checkpoint_id')
      s.expectError(await s.control(s.n.delegator, 'block', { run_id: held.run_id, reason: 'empty checkpoint', checkpoint_id: '' }), MALFORMED_COMMAND, 'block with an empty checkpoint_id')
      const after = await s.getRun(held.run_id)
      expect(after.state === 'running', `a refused block left the run ${after.state}`)
      s.runOf(await s.control(s.n.delegator, 'resume', { run_id: run.run_id, resolution: { decision: 'approve' } }), 'resume')
      await s.waitType(run.run_id, 'run.completed')
      await release(s, held.run_id)
    }
  },
  {
    id: 'checkpoint-raise',
    title: 'the L2 coordinator raises a checkpoint (block) on a running run and resolves it (resume); both name the task, the run and the checkpoint',
    run: async (s) => {
      const task = s.kit.task('raise')
      const run = s.runOf(await s.delegate('raise', { op: 'hold' }), 'delegate')
      const cp = `cp-${s.kit.nonce}-l2`
      const l2 = s.n.coordinator
      const b = s.runOf(await s.control(l2, 'block', { run_id: run.run_id, reason: 'HACP checkpoint.raise', checkpoint_id: cp }), 'coordinator block')
      expect(b.state === 'blocked' && b.checkpoint_id === cp, `after the block: ${b.state}, checkpoint ${String(b.checkpoint_id)}`)
      const blocked = await s.waitType(run.run_id, 'run.blocked')
      expect(blocked.run_id === run.run_id, 'run.blocked names another run')
      expect(blocked.correlation_id === task, `run.blocked correlation_id ${String(blocked.correlation_id)} != the task ${task}`)
      expect(payloadOf(blocked).checkpoint_id === cp, `run.blocked checkpoint_id ${String(payloadOf(blocked).checkpoint_id)} != ${cp}`)
      const resolution = { decision: 'approve', reviewer: 'human-conformance', checkpoint: cp }
      const r = s.runOf(await s.control(l2, 'resume', { run_id: run.run_id, resolution }), 'coordinator resume')
      expect(r.state === 'running', `after the resume: ${r.state}`)
      await s.waitEvent(run.run_id, e => Number(e.seq) > Number(blocked.seq) && deepEqual(payloadOf(e).resolution, resolution), 'the resume with its resolution')
      await release(s, run.run_id)
    }
  },
  {
    id: 'resume-resolution',
    title: 'a resume without a resolution is refused; the resolution of a resume reaches the agent unchanged',
    run: async (s) => {
      const { run } = await blockedRun(s, 'resolution', `cp-${s.kit.nonce}-res`)
      s.expectError(await s.control(s.n.delegator, 'resume', { run_id: run.run_id }), MALFORMED_COMMAND, 'resume without resolution')
      expect((await s.getRun(run.run_id)).state === 'blocked', 'a resume without resolution changed the run')
      const resolution = { decision: 'approve', reviewer: 'human-7', notes: ['ok', 'ship it'], nested: { score: 0.93, flags: { urgent: false } } }
      s.runOf(await s.control(s.n.coordinator, 'resume', { run_id: run.run_id, resolution }), 'resume with resolution')
      const done = await s.waitType(run.run_id, 'run.completed')
      const output = payloadOf(done).output as Record<string, unknown> | undefined
      expect(deepEqual(output?.resolution, resolution), `the agent received ${JSON.stringify(output?.resolution ?? null)}, not the resolution sent`)
    }
  },
  {
    id: 'resume-audit',
    title: 'one event of the run\'s log records the resume together with the checkpoint it resolves and the resolution',
    run: async (s) => {
      const cp = `cp-${s.kit.nonce}-audit`
      const { run } = await blockedRun(s, 'audit', cp)
      const resolution = { decision: 'reject', reason: 'audit trail' }
      s.runOf(await s.control(s.n.delegator, 'resume', { run_id: run.run_id, resolution }), 'resume')
      await s.waitType(run.run_id, 'run.completed')
      const events = s.kit.events.get(run.run_id) ?? []
      const both = events.filter(e => payloadOf(e).checkpoint_id === cp && deepEqual(payloadOf(e).resolution, resolution))
      s.cite(run.run_id, both)
      expect(both.length === 1, `${both.length} events hold both the checkpoint and the resolution`)
    }
  },
  {
    id: 'self-resume',
    title: 'a blocked run that tries to resume itself is refused (INVALID_TRANSITION) and stays blocked',
    run: async (s) => {
      const { run, blocked } = await blockedRun(s, 'self', `cp-${s.kit.nonce}-self`, 'self-resume')
      const report = s.runOf(await s.delegate('self-report', { op: 'report', of: run.run_id }), 'delegate the report')
      const done = await s.waitType(report.run_id, 'run.completed')
      const attempt = (payloadOf(done).output as Record<string, unknown> | undefined)?.self_resume as Record<string, unknown> | undefined
      s.note(`the agent's attempt: ${JSON.stringify(attempt ?? null)}`)
      expect(attempt?.accepted === false, 'the node let the blocked run resume itself')
      expect(attempt.code === 'INVALID_TRANSITION', `the self-resume was refused with ${String(attempt.code)}, not INVALID_TRANSITION`)
      const read = await s.getRun(run.run_id)
      expect(read.state === 'blocked', `after the attempt the run is ${read.state}`)
      const later = (await s.readEvents(run.run_id)).filter(e => Number(e.seq) > Number(blocked.seq))
      expect(later.length === 0, `events after run.blocked: ${later.map(e => String(e.type)).join(', ')}`)
      s.runOf(await s.control(s.n.delegator, 'resume', { run_id: run.run_id, resolution: { decision: 'approve' } }), 'the delegator\'s resume')
      await s.waitType(run.run_id, 'run.completed')
    }
  },
  {
    id: 'invalid-transitions',
    title: 'resume of a running run (with an empty and with a real resolution), block of a blocked run, and every command on a failed or completed run (handoff of a terminal run too) get INVALID_TRANSITION and change nothing',
    run: async (s) => {
      const d = s.n.delegator
      const run = await heldRun(s, 'invalid')
      const running = await s.getRun(run.run_id)
      s.expectError(await s.control(d, 'resume', { run_id: run.run_id, resolution: {} }), 'INVALID_TRANSITION', 'resume of a running run')
      // a resolution as a checkpoint's resolve carries it makes the resume no more valid on a run that is not blocked
      s.expectError(await s.control(d, 'resume', { run_id: run.run_id, resolution: { decision: 'approve' } }), 'INVALID_TRANSITION', 'resume of a running run with a resolution')
      await unchanged(s, running, 'the refused resumes of a running run')
      s.runOf(await s.control(d, 'block', { run_id: run.run_id, reason: 'hold on', checkpoint_id: 'cp-invalid' }), 'block')
      const blocked = await s.getRun(run.run_id)
      s.expectError(await s.control(d, 'block', { run_id: run.run_id, reason: 'again', checkpoint_id: 'cp-invalid-2' }), 'INVALID_TRANSITION', 'block of a blocked run')
      await unchanged(s, blocked, 'the refused block of a blocked run')
      s.runOf(await s.control(d, 'resume', { run_id: run.run_id, resolution: { go: true } }), 'resume')
      s.runOf(await s.control(d, 'cancel', { run_id: run.run_id }), 'cancel')
      await mustBeRefused(s, run.run_id, 'INVALID_TRANSITION', 'failed run')
      const completed = s.runOf(await s.delegate('invalid-completed', { op: 'complete' }), 'delegate')
      await s.waitType(completed.run_id, 'run.completed')
      await mustBeRefused(s, completed.run_id, 'INVALID_TRANSITION', 'completed run')
    }
  },
  {
    id: 'unauthorized-control',
    title: 'control rights are the run\'s own: on runs delegated with no authorized agent, resume, block, cancel and handoff from the kit\'s coordinator (authorized on the kit\'s other runs) and from its receiver get UNAUTHORIZED and change nothing',
    run: async (s) => {
      const { run: blocked } = await blockedRun(s, 'unauthorized-blocked', `cp-${s.kit.nonce}-unauthorized`, 'block', [])
      const held = s.runOf(await s.delegate('unauthorized-held', { op: 'hold' }, { authorized: [] }), 'delegate unauthorized-held (hold)')
      expect(blocked.authorized.length === 0 && held.authorized.length === 0, `runs delegated with no authorized agent name ${JSON.stringify([blocked.authorized, held.authorized])}`)
      const before = [await s.getRun(blocked.run_id), await s.getRun(held.run_id)] as const
      for (const [who, node] of [['the coordinator, authorized on other runs', s.n.coordinator], ['the receiver', s.n.receiver]] as const) {
        s.expectError(await s.control(node, 'resume', { run_id: blocked.run_id, resolution: { decision: 'approve' } }), 'UNAUTHORIZED', `resume from ${who}`)
        s.expectError(await s.control(node, 'block', { run_id: held.run_id, reason: 'r', checkpoint_id: 'cp-unauthorized' }), 'UNAUTHORIZED', `block from ${who}`)
        s.expectError(await s.control(node, 'cancel', { run_id: held.run_id }), 'UNAUTHORIZED', `cancel from ${who}`)
        s.expectError(await s.control(node, 'cancel', { run_id: blocked.run_id }), 'UNAUTHORIZED', `cancel of the blocked run from ${who}`)
        s.expectError(await s.control(node, 'handoff', { run_id: held.run_id, to_agent: s.n.receiver.agentId, context: {} }), 'UNAUTHORIZED', `handoff from ${who}`)
      }
      for (const run of before) await unchanged(s, run, 'the refused commands of agents the run does not authorize')
      await release(s, blocked.run_id)
      await release(s, held.run_id)
    }
  },
  {
    id: 'stranger-control',
    title: 'resume, block, cancel and handoff from peers that are neither delegator nor authorized get UNAUTHORIZED and change nothing; get_run is open',
    run: async (s) => {
      const x = s.n.bystander
      const { run: blocked } = await blockedRun(s, 'stranger-blocked', `cp-${s.kit.nonce}-stranger`)
      const held = await heldRun(s, 'stranger-held')
      s.expectError(await s.control(x, 'resume', { run_id: blocked.run_id, resolution: { decision: 'approve' } }), 'UNAUTHORIZED', 'resume from a stranger')
      s.expectError(await s.control(s.n.receiver, 'resume', { run_id: blocked.run_id, resolution: { decision: 'approve' } }), 'UNAUTHORIZED', 'resume from another agent of the mesh')
      s.expectError(await s.control(x, 'block', { run_id: held.run_id, reason: 'r', checkpoint_id: 'cp-x' }), 'UNAUTHORIZED', 'block from a stranger')
      s.expectError(await s.control(x, 'cancel', { run_id: held.run_id }), 'UNAUTHORIZED', 'cancel from a stranger')
      s.expectError(await s.control(x, 'handoff', { run_id: held.run_id, to_agent: s.n.receiver.agentId, context: {} }), 'UNAUTHORIZED', 'handoff from a stranger')
      const b = await s.getRun(blocked.run_id, x)
      const h = await s.getRun(held.run_id, x)
      expect(b.state === 'blocked' && h.state === 'running', `after the strangers: ${b.state}, ${h.state}`)
      const events: WireEvent[] = await s.readEvents(blocked.run_id)
      expect(events.at(-1)?.type === 'run.blocked', `the blocked run's last event is ${String(events.at(-1)?.type)}`)
      await release(s, blocked.run_id)
      await release(s, held.run_id)
    }
  }
]
