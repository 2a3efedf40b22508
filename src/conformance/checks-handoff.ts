/** Checks of handoff, the event stream, replay, and the checks over everything the kit saw. */
import { HANDOFF_PROTOCOL } from '../constants.ts'
import type { AgentEvent, Run } from '../runlog/types.ts'
import { issueHandoffTicket, ticketOf } from '../runlog/ticket.ts'
import { CONFORMANCE_CAPABILITY } from './constants.ts'
import { HANDOFF_STALL_PATIENCE_MS } from './constants.ts'
import { clean, expect, type Scope, type WireEvent } from './kit.ts'
import { fail, heldRun, release, type Check } from './checks-common.ts'
import { endpointsIn } from './endpoints.ts'

/** The delegator hands a held run of the target off to the kit's receiver. */
async function handedOff (s: Scope, name: string): Promise<{ old: Run, next: Run, task: string }> {
  const task = s.kit.task(name)
  const old = await heldRun(s, name)
  const next = s.runOf(await s.control(s.n.delegator, 'handoff', { run_id: old.run_id, to_agent: s.n.receiver.agentId, context: { why: 'conformance handoff' } }), 'handoff')
  s.kit.expected.set(next.run_id, task)
  return { old, next, task }
}

function contiguous (events: WireEvent[]): boolean {
  return events.every((e, i) => e.seq === i + 1)
}

/** The event a handed-off run ends with (protocols/events.md): run.completed whose handoff_to names the successor. */
function handsOffTo (e: WireEvent | undefined, runId: string): boolean {
  const to = e?.payload?.handoff_to as { run_id?: unknown } | undefined
  return e?.type === 'run.completed' && to?.run_id === runId
}

function seqs (events: WireEvent[]): string {
  return events.map(e => `${String(e.seq)}:${String(e.type)}`).join(' ')
}

/**
 * The target's per-task replay (its `correlation` sync, read by the
 * bystander) of a run it took over from a kit node's run: it must serve the
 * run's whole log, as its per-run stream serves it. What it shows is kept for
 * replay-taken (AAP-EVENT-REPLAY, a SHOULD), so the check that made the run
 * is judged only on its own clauses.
 */
export async function replayTaken (s: Scope, task: string, runId: string): Promise<void> {
  let problem: string | null = null
  let log: WireEvent[] = []
  try {
    const own = await s.readEvents(runId)
    log = (await s.readCorrelation(task)).filter(e => e.run_id === runId)
    const whole = log.length === own.length && contiguous(log) && log[0]?.type === 'run.started' && log.at(-1)?.type === own.at(-1)?.type
    if (!whole) problem = `the target's replay of task ${task} shows its run ${runId} as [${seqs(log)}], its own log as [${seqs(own)}]`
  } catch (err) {
    problem = `the target's replay of task ${task}, for its run ${runId}: ${(err as Error).message}`
  }
  s.kit.taken.push({ check: s.checkId, run: runId, task, problem, events: log })
}

const EVENT_TYPES = new Set(['run.started', 'run.progress', 'run.blocked', 'run.completed', 'run.failed'])

export const HANDOFF_CHECKS: Check[] = [
  {
    id: 'handoff',
    title: 'handoff (asked by the delegator, and by the agent itself) creates a new run on the receiver with the same correlation_id',
    run: async (s) => {
      const { old, next, task } = await handedOff(s, 'handoff')
      expect(next.run_id !== old.run_id, 'the handoff answered with the old run')
      expect(next.agent_id === s.n.receiver.agentId, `the new run is on ${next.agent_id}, not the receiver`)
      expect(next.correlation_id === task, `the new run's correlation ${next.correlation_id} != ${task}`)
      expect(next.handoff_from?.run_id === old.run_id, `the new run continues ${String(next.handoff_from?.run_id)}`)
      const before = await s.getRun(old.run_id)
      expect(before.handoff_to?.run_id === next.run_id, `the old run points at ${String(before.handoff_to?.run_id)}`)
      const started = await s.waitType(next.run_id, 'run.started')
      expect(started.correlation_id === task, `the new run's run.started carries ${String(started.correlation_id)}`)
      await s.waitType(next.run_id, 'run.completed')
      // the agent hands its own run off
      const agentTask = s.kit.task('handoff-agent')
      const own = s.runOf(await s.delegate('handoff-agent', { op: 'handoff', to: s.n.receiver.agentId, context: { why: 'agent-initiated' } }), 'delegate')
      await s.waitType(own.run_id, 'run.completed')
      const after = await s.getRun(own.run_id)
      const to = after.handoff_to?.run_id ?? fail('the agent\'s handoff left no handoff_to on the old run')
      s.kit.expected.set(to, agentTask)
      const cont = await s.getRun(to)
      expect(cont.agent_id === s.n.receiver.agentId && cont.correlation_id === agentTask, `the continuing run: ${cont.agent_id}, ${cont.correlation_id}`)
    }
  },
  {
    id: 'handoff-receive',
    title: 'the target as a handoff receiver: a run the kit\'s receiver executes is handed to the target, which creates a new run with the same correlation_id continuing it',
    run: async (s) => {
      const task = s.kit.task('handoff-receive')
      // the run starts on the kit's receiver (its conformance agent holds it), then moves to the target
      const old = await s.n.delegator.delegate({ to_agent: s.n.receiver.agentId, task_id: task, capability: CONFORMANCE_CAPABILITY, input: { op: 'hold' } }, { follow: false })
      s.evidence.runs.push(old.run_id)
      let next: Run
      try {
        next = await s.n.delegator.runs.handoff(old.run_id, s.kit.target, { why: 'the target receives' })
      } catch (err) {
        const e = err as { code?: unknown, message?: unknown }
        await s.n.delegator.runs.cancel(old.run_id, 'conformance check done').catch((cancelErr: unknown) => { s.note(`cleanup: cancel of ${old.run_id}: ${(cancelErr as Error).message}`) })
        return fail(`the target refused a handoff from the run's executor: ${String(e.code)} ${String(e.message)}`)
      }
      s.kit.expected.set(next.run_id, task)
      // the target's answer, relayed by the kit's receiver: judged with every other Run answer
      s.answered(next, 'handoff to the target (its answer relayed by the kit\'s receiver)')
      await s.track(next.run_id, s.n.delegator)
      expect(next.agent_id === s.kit.target, `the new run is on ${next.agent_id}, not the target`)
      expect(next.correlation_id === task, `the new run's correlation ${next.correlation_id} != ${task}`)
      expect(next.handoff_from?.run_id === old.run_id && next.handoff_from?.agent_id === s.n.receiver.agentId, `the new run continues ${JSON.stringify(next.handoff_from)}`)
      const started = await s.waitType(next.run_id, 'run.started')
      expect(started.correlation_id === task, `the new run's run.started carries ${String(started.correlation_id)}`)
      await s.waitType(next.run_id, 'run.completed')
      await replayTaken(s, task, next.run_id)
    }
  },
  {
    id: 'handoff-history',
    title: 'after a handoff the old run stays readable (get_run, events) and refuses every change',
    run: async (s) => {
      const { old, next } = await handedOff(s, 'history')
      const read = await s.getRun(old.run_id)
      // a handed-off run ends completed, its last event the run.completed that names its successor (protocols/handoff.md, step 4)
      expect(read.state === 'completed', `the old run is ${read.state}, not completed`)
      expect(read.handoff_to?.run_id === next.run_id, 'the old run does not point at the new one')
      const events = await s.readEvents(old.run_id)
      s.cite(old.run_id, events)
      expect(events.length >= 2 && contiguous(events) && events.at(-1)?.seq === read.last_seq, `the old run's log (last_seq ${read.last_seq}): ${events.map(e => `${String(e.seq)}:${String(e.type)}`).join(' ')}`)
      expect(handsOffTo(events.at(-1), next.run_id), `the old run's last event is ${String(events.at(-1)?.type)} ${JSON.stringify(events.at(-1)?.payload ?? null)}, not the run.completed that hands off to ${next.run_id}`)
      const d = s.n.delegator
      for (const [type, body] of [
        ['resume', { run_id: old.run_id, resolution: {} }],
        ['block', { run_id: old.run_id, reason: 'r', checkpoint_id: 'cp-history' }],
        ['cancel', { run_id: old.run_id }],
        ['handoff', { run_id: old.run_id, to_agent: s.n.receiver.agentId, context: {} }]
      ] as const) s.expectError(await s.control(d, type, body), 'INVALID_TRANSITION', `${type} of a handed-off run`)
      const again = await s.getRun(old.run_id)
      expect(again.last_seq === read.last_seq && again.state === read.state, 'the old run changed')
    }
  },
  {
    id: 'handoff-stalled-receiver',
    title: 'a handoff to an agent that never answers (a stalled peer) gets AGENT_NOT_FOUND and leaves the old run as it was',
    run: async (s) => {
      const run = await heldRun(s, 'stalled')
      const f = await s.control(s.n.delegator, 'handoff', { run_id: run.run_id, to_agent: s.n.bystander.agentId, context: {} }, { timeoutMs: HANDOFF_STALL_PATIENCE_MS })
      s.expectError(f, 'AGENT_NOT_FOUND', 'handoff to a stalled receiver')
      const after = await s.getRun(run.run_id)
      expect(after.state === 'running' && after.handoff_to === null, `the old run after the failed handoff: ${after.state}, handoff_to ${JSON.stringify(after.handoff_to)}`)
      await release(s, run.run_id)
    }
  },
  {
    id: 'event-stream',
    title: 'runs emit run.started, run.progress, run.blocked, run.completed and run.failed, in seq order from 1',
    run: async (s) => {
      const a = s.runOf(await s.delegate('stream-progress', { op: 'complete', progress: 2 }), 'delegate')
      await s.waitType(a.run_id, 'run.completed')
      const ea = s.kit.events.get(a.run_id) ?? []
      s.cite(a.run_id, ea)
      expect(ea.map(e => e.type).join(',') === 'run.started,run.progress,run.progress,run.completed' && contiguous(ea), `progress run: ${ea.map(e => `${String(e.seq)}:${String(e.type)}`).join(' ')}`)
      const b = s.runOf(await s.delegate('stream-block', { op: 'block', checkpoint: 'cp-stream' }), 'delegate')
      await s.waitType(b.run_id, 'run.blocked')
      s.runOf(await s.control(s.n.delegator, 'resume', { run_id: b.run_id, resolution: { ok: 1 } }), 'resume')
      await s.waitType(b.run_id, 'run.completed')
      const eb = s.kit.events.get(b.run_id) ?? []
      s.cite(b.run_id, eb)
      expect(eb[0]?.type === 'run.started' && eb.at(-1)?.type === 'run.completed' && eb.some(e => e.type === 'run.blocked') && contiguous(eb), `blocked run: ${eb.map(e => `${String(e.seq)}:${String(e.type)}`).join(' ')}`)
      expect(eb.every(e => EVENT_TYPES.has(String(e.type))), 'an event type outside the profile\'s five')
      const c = s.runOf(await s.delegate('stream-fail', { op: 'fail' }), 'delegate')
      await s.waitType(c.run_id, 'run.failed')
      const ec = s.kit.events.get(c.run_id) ?? []
      s.cite(c.run_id, ec)
      expect(ec.map(e => e.type).join(',') === 'run.started,run.failed' && contiguous(ec), `failed run: ${ec.map(e => `${String(e.seq)}:${String(e.type)}`).join(' ')}`)
    }
  },
  {
    id: 'replay',
    title: 'a bystander replays a handed-off task from the agents that took part: every run\'s log from seq 1, linked old -> new',
    run: async (s) => {
      const { old, next, task } = await handedOff(s, 'replay')
      await s.waitType(next.run_id, 'run.completed')
      const onTarget = await s.readCorrelation(task)
      const onReceiver = await s.readCorrelation(task, s.n.receiver.host.peerId)
      const oldLog = onTarget.filter(e => e.run_id === old.run_id)
      const newLog = onReceiver.filter(e => e.run_id === next.run_id)
      s.cite(old.run_id, oldLog)
      s.cite(next.run_id, newLog)
      expect(oldLog.length > 0 && contiguous(oldLog) && oldLog[0]?.type === 'run.started', `the old run replays as ${oldLog.map(e => `${String(e.seq)}:${String(e.type)}`).join(' ')}`)
      expect(newLog.length > 0 && contiguous(newLog) && newLog.at(-1)?.type === 'run.completed', `the new run replays as ${newLog.map(e => `${String(e.seq)}:${String(e.type)}`).join(' ')}`)
      const last = oldLog.at(-1)
      expect(handsOffTo(last, next.run_id), `the old run's last event is ${String(last?.type)} ${JSON.stringify(last?.payload ?? null)}, not the run.completed that hands off to ${next.run_id}`)
    }
  }
]

/**
 * A continuing run that names a predecessor the caller does not execute must
 * not exist (protocols/handoff.md, rule 3). Each frame carries a predecessor
 * (the genuine run.started of a run the kit's receiver executes, which any
 * peer may read) and a successor ticket issued by the frame's sender, so rule
 * 4's missing ticket cannot refuse it first. A receiver that skips rule 3
 * refuses the bystander's frames with another code (the ticket's issuer is
 * not the executor: INVALID_REQUEST) and takes the receiver's own frame,
 * which breaks rule 3 alone (its from_run.agent_id).
 */
export const FORGED_HANDOFF_CHECK: Check = {
  id: 'forged-handoff',
  title: 'a handoff frame with the genuine predecessor and a ticket issued by its sender, from a peer that is not the executor of the run it claims to continue (or whose from_run.agent_id names another agent), gets UNAUTHORIZED and creates no run',
  run: async (s) => {
    const x = s.n.bystander
    const r = s.n.receiver
    const bystanderKey = s.n.bystanderKey ?? fail('the kit holds no key of its bystander to sign a forged ticket with')
    const receiverKey = s.n.receiverKey ?? fail('the kit holds no key of its receiver to sign a ticket with')
    const task = s.kit.task('forged-handoff')
    // a genuine run of the receiver; the bystander reads its run.started, which every peer may read
    const old = await s.n.delegator.delegate({ to_agent: r.agentId, task_id: task, capability: CONFORMANCE_CAPABILITY, input: { op: 'hold' }, authorized: [s.n.coordinator.agentId] }, { follow: false })
    s.evidence.runs.push(old.run_id)
    try {
      const predecessor = (await s.readEvents(old.run_id)).find(e => e.type === 'run.started')
      const own = predecessor === undefined ? undefined : ticketOf(predecessor as unknown as AgentEvent)
      if (predecessor === undefined || own === undefined) return fail(`the kit's receiver serves no ticketed run.started of ${old.run_id}`)
      const body = async (key: typeof bystanderKey, agentId: string): Promise<Record<string, unknown>> => ({
        to_agent: s.kit.target,
        from_run: { run_id: old.run_id, agent_id: agentId },
        task_id: task,
        capability: old.capability,
        input: predecessor.payload?.input ?? {},
        context: { forged: true },
        delegator: old.delegator,
        authorized: old.authorized,
        parent_run: old.parent_run,
        predecessor,
        ticket: await issueHandoffTicket(key, own, s.kit.target)
      })
      for (const [what, from, frame] of [
        ['a handoff from a peer claiming to continue another agent\'s run', x, await body(bystanderKey, r.agentId)],
        ['a handoff whose from_run.agent_id names its sender, not the executor its run id names', x, await body(bystanderKey, x.agentId)],
        ['a handoff from the run\'s executor whose from_run.agent_id names another agent', r, await body(receiverKey, x.agentId)]
      ] as const) s.expectError(await s.call(from, HANDOFF_PROTOCOL, 'handoff', frame), 'UNAUTHORIZED', what)
      await s.expectNoRun(task, 'the forged handoffs', [old.run_id])
    } finally {
      await s.n.delegator.runs.cancel(old.run_id, 'conformance check done').catch((err: unknown) => { s.note(`cleanup: cancel of ${old.run_id}: ${(err as Error).message}`) })
    }
  }
}

/** The target's per-task replay of the runs it took over (recorded by replayTaken); runs after handoff-receive and subdelegation-accepted. */
export const REPLAY_TAKEN_CHECK: Check = {
  id: 'replay-taken',
  title: 'a bystander replays, from the target\'s per-task event stream, the whole log of each run the target took over from another agent\'s run (by handoff in handoff-receive, by sub-delegation in subdelegation-accepted)',
  run: async (s) => {
    for (const source of ['handoff-receive', 'subdelegation-accepted']) {
      if (!s.kit.taken.some(t => t.check === source)) s.note(`${source} made no run of the target to replay (its own clauses say why)`)
    }
    if (s.kit.taken.length === 0) s.nothingSeen('the target took over no run the kit could replay')
    for (const t of s.kit.taken) s.cite(t.run, t.events)
    const bad = s.kit.taken.filter(t => t.problem !== null)
    expect(bad.length === 0, bad.map(t => `${t.check}: ${String(t.problem)}`).join('; '))
  }
}

/** A run the target executes (its id names its executor): the kit's own receiver's runs are no evidence of the target. */
function ofTarget (s: Scope, runId: string): boolean {
  return runId.split(':')[0] === s.kit.target
}

/** Checks over every run handle and event the kit saw; they run last. */
export const FINAL_CHECKS: Check[] = [
  {
    id: 'runs-correlation',
    title: 'every run handle the target gave carries the correlation of the task it belongs to',
    run: async (s) => {
      // every answer, not only the last of each run (a block, resume or cancel answer is a handle too);
      // the kit learns a continuing run's task when it is handed the run: look it up now
      const bad = s.kit.answers.filter(h => h.run.correlation_id !== (s.kit.expected.get(h.run.run_id) ?? h.expected))
      s.note(`${s.kit.answers.length} Run answers of ${s.kit.handles.size} runs`)
      if (s.kit.answers.length === 0) s.nothingSeen('the target gave no run handle')
      for (const h of bad.slice(0, 8)) s.evidence.notes.push(clean(`${h.what ?? 'an answer'}: run ${h.run.run_id} with correlation_id ${JSON.stringify(h.run.correlation_id)}`))
      expect(bad.length === 0, `runs with another correlation in ${bad.length} answer(s): ${[...new Set(bad.map(h => h.run.run_id))].join(', ')} (${clean(bad.slice(0, 4).map(h => h.what ?? 'an answer').join('; '))})`)
    }
  },
  {
    id: 'events-correlation',
    title: 'every event the kit read carries correlation_id, the one of its run\'s task',
    run: async (s) => {
      let n = 0
      // events a run's own stream served: those of its task's alone do not show the clause
      let overRun = 0
      const runs = new Set<string>()
      const bad: string[] = []
      // every event served, not only each run's last read: an earlier read a later one replaced is the target's word too
      for (const { runId, event: e, what, over } of s.kit.eventsRead()) {
        if (!ofTarget(s, runId)) continue
        runs.add(runId)
        const want = s.kit.expected.get(runId) ?? s.kit.known.get(runId) ?? s.kit.handles.get(runId)?.expected
        n++
        if (over === 'run') overRun++
        if (typeof e.correlation_id !== 'string' || e.correlation_id.length === 0 || (want !== undefined && e.correlation_id !== want)) {
          bad.push(clean(`${runId.slice(-8)}#${String(e.seq)} ${String(e.type)} (${what}): ${JSON.stringify(e.correlation_id ?? null)}`))
        }
      }
      s.note(`${n} events of ${runs.size} runs of the target (${overRun} served by a run's own stream)`)
      for (const b of bad.slice(0, 8)) s.evidence.events.push(b)
      expect(bad.length === 0, `${bad.length} event(s) without the run's correlation_id`)
      if (overRun === 0) s.nothingSeen('no events of the target\'s runs were read from a run\'s own stream')
    }
  },
  {
    id: 'no-endpoint-upward',
    title: 'no run handle or event the target gave names a transport endpoint (multiaddr, URL, IP address, the target\'s listen host) or an endpoint, addr or url member',
    run: async (s) => {
      const bad: string[] = []
      // every Run answer, not only the last of each run: a block answer may show what a get_run later does not
      const handles = s.kit.answers.filter(h => ofTarget(s, h.run.run_id))
      // and every event served, not only each run's last read
      const events = s.kit.eventsRead().filter(({ runId }) => ofTarget(s, runId))
      const logs = new Set(events.map(({ runId }) => runId))
      for (const h of handles) {
        for (const why of endpointsIn(h.run, s.kit.targetAddrs)) bad.push(`run ${h.run.run_id}${h.what === undefined ? '' : ` (${h.what})`} ${why}`)
      }
      for (const { runId, event: e, what } of events) {
        for (const why of endpointsIn(e, s.kit.targetAddrs)) bad.push(clean(`${runId.slice(-8)}#${String(e.seq)} (${what}) ${why}`))
      }
      s.note(`${handles.length} Run answers and ${events.length} events of ${logs.size} runs of the target scanned, against ${s.kit.targetAddrs.length} target address(es)`)
      if (handles.length === 0 && events.length === 0) s.nothingSeen('no run handle or event of the target to scan')
      for (const b of bad.slice(0, 8)) s.evidence.events.push(b)
      expect(bad.length === 0, `endpoint data in ${bad.length} place(s): ${bad.slice(0, 4).join('; ')}`)
    }
  }
]
