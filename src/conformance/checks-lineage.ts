/**
 * Checks of run lineage (protocols/lineage.md): a delegation carries the
 * delegator's signed ticket for the run it creates; only a run's executor
 * delegates under it; a handoff successor keeps the authority the delegator
 * signed for, whichever side of the handoff the target is. These are aap-mesh wire rules: a target that implements the
 * profile without the mesh's lineage fails them.
 */
import { DELEGATE_PROTOCOL, HANDOFF_PROTOCOL } from '../constants.ts'
import { issueHandoffTicket, originOf, ticketOf, verifyTicket } from '../runlog/ticket.ts'
import { CONFORMANCE_CAPABILITY, KIT_POLL_INTERVAL_MS, KIT_WAIT_TIMEOUT_MS } from './constants.ts'
import { fail, heldRun, payloadOf, release, type Check } from './checks-common.ts'
import { expect, type Scope } from './kit.ts'
import { replayTaken } from './checks-handoff.ts'

/** A delegate body the kit would send, without its ticket. */
function bareDelegate (s: Scope, task: string, over: Record<string, unknown> = {}): Record<string, unknown> {
  return { to_agent: s.kit.target, task_id: task, capability: CONFORMANCE_CAPABILITY, input: { op: 'complete' }, parent_run: null, ...over }
}

/** The ticket in a run's run.started, verified. */
async function ticketOfRun (s: Scope, runId: string): Promise<ReturnType<typeof verifyTicket>> {
  const started = (await s.readEvents(runId)).find(e => e.type === 'run.started')
  expect(started !== undefined, `no run.started for ${runId}`)
  s.cite(runId, started === undefined ? [] : [started])
  try {
    return verifyTicket(payloadOf(started ?? {}).ticket)
  } catch (err) {
    throw new Error(`the run.started of ${runId} carries no valid ticket: ${(err as Error).message}`)
  }
}

export const LINEAGE_CHECKS: Check[] = [
  {
    id: 'delegation-ticket',
    title: 'a delegate without the delegator\'s ticket, or with one its sender did not issue, is UNAUTHORIZED and creates nothing; an accepted run carries the delegator\'s ticket naming it',
    run: async (s) => {
      const task = s.kit.task('no-ticket')
      s.expectError(await s.call(s.n.delegator, DELEGATE_PROTOCOL, 'delegate', bareDelegate(s, task)), 'UNAUTHORIZED', 'a delegate without a ticket')
      // a valid ticket, but the coordinator's: the delegator may not present it as its own
      const borrowed = await s.n.coordinator.runs.ticketFor({ to_agent: s.kit.target, task_id: task, capability: CONFORMANCE_CAPABILITY, input: {} })
      s.expectError(await s.call(s.n.delegator, DELEGATE_PROTOCOL, 'delegate', { ...bareDelegate(s, task), ticket: borrowed }), 'UNAUTHORIZED', 'a delegate with another agent\'s ticket')
      await s.expectNoRun(task, 'the delegations without the delegator\'s ticket')
      const run = s.runOf(await s.delegate('ticketed', { op: 'complete' }), 'delegate')
      const t = await ticketOfRun(s, run.run_id)
      expect(t.run_id === run.run_id && t.executor === s.kit.target, 'the ticket does not name the run and its executor')
      expect(t.issuer === s.n.delegator.agentId && t.delegator === s.n.delegator.agentId, 'the ticket is not the delegator\'s')
      expect(run.delegator === s.n.delegator.agentId, `the run's delegator is ${run.delegator}`)
    }
  },
  {
    id: 'subdelegation-authority',
    title: 'a delegation under a parent run from anyone but that run\'s executor is UNAUTHORIZED and creates nothing',
    run: async (s) => {
      const parent = await heldRun(s, 'foreign-parent')
      const task = s.kit.task('foreign-parent')
      const f = await s.delegate('foreign-parent', { op: 'complete' }, { parentRun: parent.run_id })
      s.expectError(f, 'UNAUTHORIZED', 'a sub-delegation claimed by the run\'s delegator')
      await s.expectNoRun(task, 'the sub-delegation by a peer that does not execute the parent', [parent.run_id])
      await release(s, parent.run_id)
    }
  },
  {
    id: 'subdelegation-accepted',
    title: 'a delegation under a parent run from that run\'s executor is taken: the kit\'s receiver, executing a run, delegates under it to the target, and the child\'s ticket names the parent run and its executor',
    run: async (s) => {
      const task = s.kit.task('subdelegated')
      // the parent runs on the kit's receiver, whose conformance agent delegates under it to the target
      const parent = await s.n.delegator.delegate({ to_agent: s.n.receiver.agentId, task_id: task, capability: CONFORMANCE_CAPABILITY, input: { op: 'subdelegate', to: s.kit.target } }, { follow: false })
      s.evidence.runs.push(parent.run_id)
      const deadline = Date.now() + KIT_WAIT_TIMEOUT_MS
      let ended = await s.n.receiver.runs.getRun(parent.run_id)
      while (ended.state === 'running') {
        expect(Date.now() <= deadline, `the receiver's parent run did not end within ${KIT_WAIT_TIMEOUT_MS} ms`)
        await new Promise(resolve => setTimeout(resolve, KIT_POLL_INTERVAL_MS))
        s.live()
        ended = await s.n.receiver.runs.getRun(parent.run_id)
      }
      expect(ended.state === 'completed', `the target refused a sub-delegation from the parent run's own executor: ${ended.failure?.message ?? ended.state}`)
      const child = (ended.output as { child?: unknown } | null)?.child
      expect(typeof child === 'string', 'the receiver\'s run names no child run')
      await s.track(child, s.n.receiver)
      const t = await ticketOfRun(s, child)
      expect(t.parent_run === parent.run_id, `the child's ticket names parent ${String(t.parent_run)}, not ${parent.run_id}`)
      expect(t.issuer === s.n.receiver.agentId, 'the child\'s ticket is not issued by the parent run\'s executor')
      await s.waitType(child, 'run.completed')
      await replayTaken(s, task, child)
    }
  },
  {
    id: 'handoff-authority',
    title: 'a handoff successor keeps the delegator and authorized agents; its ticket is issued by the old run\'s executor and inherits from the delegator\'s own ticket',
    run: async (s) => {
      const old = await heldRun(s, 'authority')
      const next = s.runOf(await s.control(s.n.delegator, 'handoff', { run_id: old.run_id, to_agent: s.n.receiver.agentId, context: { why: 'authority' } }), 'handoff')
      expect(next.delegator === old.delegator, `the successor's delegator is ${next.delegator}, not ${old.delegator}`)
      expect(JSON.stringify(next.authorized) === JSON.stringify(old.authorized), 'the successor\'s authorized agents differ')
      const oldTicket = await ticketOfRun(s, old.run_id)
      const started = await s.n.receiver.runs.store.log.get(next.run_id, 1)
      const t = verifyTicket(started?.payload.ticket)
      expect(t.issuer === s.kit.target && t.handoff_from?.run_id === old.run_id, 'the successor\'s ticket is not issued by the old run\'s executor for it')
      expect(originOf(t).signature === originOf(oldTicket).signature, 'the successor\'s ticket does not inherit from the delegator\'s')
      await release(s, next.run_id)
    }
  },
  {
    id: 'handoff-inheritance',
    title: 'the target as a handoff receiver keeps the authority the delegator signed for: handoff frames from the run\'s own executor (the kit\'s receiver, with a valid ticket and predecessor) that name one more authorized agent, or another delegator, get UNAUTHORIZED and create no run',
    run: async (s) => {
      const key = s.n.receiverKey ?? fail('the kit holds no key of its receiver to sign a handoff with')
      const task = s.kit.task('inheritance')
      // the run starts on the kit's receiver (its conformance agent holds it); the receiver then asks the target to continue it
      const old = await s.n.delegator.delegate({ to_agent: s.n.receiver.agentId, task_id: task, capability: CONFORMANCE_CAPABILITY, input: { op: 'hold' }, authorized: [s.n.coordinator.agentId] }, { follow: false })
      s.evidence.runs.push(old.run_id)
      try {
        const predecessor = await s.n.receiver.runs.store.log.get(old.run_id, 1)
        const own = predecessor === undefined ? undefined : ticketOf(predecessor)
        if (predecessor === undefined || own === undefined) return fail(`the kit's receiver keeps no ticketed run.started of ${old.run_id}`)
        const ticket = await issueHandoffTicket(key, own, s.kit.target)
        const body = (change: Record<string, unknown>): Record<string, unknown> => ({
          to_agent: s.kit.target,
          from_run: { run_id: old.run_id, agent_id: s.n.receiver.agentId },
          task_id: task,
          capability: old.capability,
          input: predecessor.payload.input ?? {},
          context: { why: 'conformance: a handoff that changes who controls the run' },
          delegator: old.delegator,
          authorized: old.authorized,
          parent_run: old.parent_run,
          predecessor,
          ticket,
          ...change
        })
        for (const [what, change] of [
          ['one more authorized agent', { authorized: [...old.authorized, s.n.bystander.agentId] }],
          ['another delegator', { delegator: s.n.coordinator.agentId }]
        ] as const) s.expectError(await s.call(s.n.receiver, HANDOFF_PROTOCOL, 'handoff', body(change)), 'UNAUTHORIZED', `a handoff from the run's executor naming ${what}`)
        await s.expectNoRun(task, 'the handoffs naming authority the delegator did not sign for', [old.run_id])
      } finally {
        await s.n.delegator.runs.cancel(old.run_id, 'conformance check done').catch((err: unknown) => { s.note(`cleanup: cancel of ${old.run_id}: ${(err as Error).message}`) })
      }
    }
  }
]
