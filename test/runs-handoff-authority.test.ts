/**
 * Issue #12, handoff authority: a handoff successor inherits delegator,
 * authorized agents and parent run from the run's own ticket, never from the
 * sender's claim; chains are bounded by MAX_HANDOFF_DEPTH; a successor whose
 * handoff is never confirmed is failed, not left running. Also: a real
 * sub-delegation and a real handoff chain are admitted to the owner's task on
 * a bystander.
 */
import type { PrivateKey } from '@libp2p/interface'
import { generateKeyPair } from '@libp2p/crypto/keys'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { HANDOFF_PROTOCOL, MAX_HANDOFF_DEPTH } from '../src/constants.ts'
import type { MeshNode } from '../src/node.ts'
import { issueHandoffTicket, ticketOf } from '../src/runlog/ticket.ts'
import type { Run } from '../src/runlog/types.ts'
import { nextEvent, rejectsWith, startMesh, stopAll, until } from './helpers.ts'
import { RawWire } from './fixtures/raw-wire.ts'

const WORK = { capability_id: 'cap:handoff-work', version: '1.0.0' }
// the last case blocks and resumes the unconfirmed successor after phase one has started the receiver's confirm
// timer (two round trips, 10 to 40 ms of a quiet machine): the timer leaves a busy one a hundred times that
const CONFIRM_TIMEOUT_MS = 5_000

describe('handoff authority and lineage of real chains', () => {
  let nodes: MeshNode[] = []
  let A: MeshNode, B: MeshNode, C: MeshNode, D: MeshNode
  const started = new Map<string, number>()
  const held = new Map<string, PromiseWithResolvers<void>>()
  let bKey: PrivateKey

  beforeAll(async () => {
    bKey = await generateKeyPair('Ed25519')
    nodes = await startMesh(4, { nodeOptions: i => ({ handoffConfirmTimeoutMs: CONFIRM_TIMEOUT_MS, ...(i === 1 ? { privateKey: bKey } : {}) }) })
    ;[A, B, C, D] = nodes as [MeshNode, MeshNode, MeshNode, MeshNode]
    for (const n of [B, C]) {
      n.runs.handle(WORK, async (ctx) => {
        started.set(ctx.run.run_id, (started.get(ctx.run.run_id) ?? 0) + 1)
        if (ctx.input.sub === true) {
          // a sub-delegation from inside the run: the parent's executor issues its ticket
          const child = await n.delegate({ to_agent: n === B ? C.agentId : B.agentId, task_id: ctx.run.correlation_id, capability: WORK, input: {}, parent_run: ctx.run.run_id })
          return { child: child.run_id }
        }
        if (ctx.input.hold === true) {
          const gate = Promise.withResolvers<void>()
          held.set(ctx.run.run_id, gate)
          await Promise.race([gate.promise, new Promise(resolve => { ctx.signal.addEventListener('abort', resolve, { once: true }) })])
        }
        return { ok: true }
      })
      await n.publishCard({ name: `worker-${n === B ? 'b' : 'c'}`, capabilities: [WORK] })
    }
  })
  afterAll(async () => { await stopAll(nodes) })

  it('a sub-delegation and a handoff chain are the owner\'s task on a bystander', async () => {
    const task = 'task-authority-chain'
    const parent = await A.delegate({ to_agent: B.agentId, task_id: task, capability: WORK, input: { sub: true } })
    const held1 = await A.delegate({ to_agent: B.agentId, task_id: task, capability: WORK, input: { hold: true } })
    await until(() => held.has(held1.run_id), 'the held run to start')
    const next = await A.handoff(held1.run_id, C.agentId, { note: 'over to C' })
    expect(next.delegator).toBe(A.agentId)
    // the successor runs the same input, so it holds too: let it finish
    await until(() => held.has(next.run_id), 'the successor to start')
    held.get(next.run_id)?.resolve()
    await until(async () => (await C.runs.getRun(next.run_id)).state === 'completed', 'the successor to complete')
    await until(async () => (await B.runs.getRun(parent.run_id)).state === 'completed', 'the parent to complete')
    const replay = await D.events.replay(task, { owner: A.agentId, participants: [A.agentId, B.agentId, C.agentId] })
    const ids = replay.runs.map(r => r.run_id)
    expect(ids).toContain(parent.run_id)
    expect(ids).toContain(held1.run_id)
    expect(ids).toContain(next.run_id)
    // the child of the sub-delegation is there too, under its parent
    const child = replay.runs.find(r => r.parent_run === parent.run_id)
    expect(child).toBeDefined()
    expect(replay.rejected_runs).toEqual([])
    expect(started.get(next.run_id)).toBe(1)
  })

  it('a confirm of a successor that already started is checked all the same: a stranger is refused, the sender\'s retry answered', async () => {
    const task = 'task-authority-confirm-again'
    const run = await A.delegate({ to_agent: B.agentId, task_id: task, capability: WORK, input: { hold: true } })
    await until(() => held.has(run.run_id), 'the run to start')
    const next = await A.handoff(run.run_id, C.agentId, { note: 'over to C' })
    await until(() => held.has(next.run_id), 'the successor to start')
    const handoffEvent = await B.runs.store.log.head(run.run_id)
    const confirm = (id: number, runId: string): Record<string, unknown> => ({ id, type: 'confirm', body: { run_id: runId, handoff_event: handoffEvent } })
    const stranger = await RawWire.open(D.host, C.host.peerId, HANDOFF_PROTOCOL)
    const sender = await RawWire.open(B.host, C.host.peerId, HANDOFF_PROTOCOL)
    try {
      expect(await stranger.call(confirm(1, next.run_id))).toMatchObject({ ok: false, error: { code: 'UNAUTHORIZED', details: { reason: 'not_executor' } } })
      expect(await sender.call(confirm(1, next.run_id))).toMatchObject({ ok: true, body: { run: { run_id: next.run_id, state: 'running' } } })
      // a run of C's that continues no handoff: nobody confirms it
      const own = await A.delegate({ to_agent: C.agentId, task_id: task, capability: WORK, input: {} })
      expect(await sender.call(confirm(2, own.run_id))).toMatchObject({ ok: false, error: { code: 'UNAUTHORIZED', details: { reason: 'not_executor' } } })
    } finally {
      stranger.abort()
      sender.abort()
      held.get(next.run_id)?.resolve()
    }
    expect(started.get(next.run_id)).toBe(1)
  })

  it('a handoff that names a false delegator or extra authorized agents is refused by the receiver', async () => {
    const task = 'task-authority-false'
    const run = await A.delegate({ to_agent: B.agentId, task_id: task, capability: WORK, input: { hold: true } })
    await until(() => held.has(run.run_id), 'the run to start')
    const predecessor = (await B.runs.store.log.get(run.run_id, 1))!
    const own = ticketOf(predecessor)!
    const wire = await RawWire.open(B.host, C.host.peerId, HANDOFF_PROTOCOL)
    try {
      const honest = {
        to_agent: C.agentId,
        from_run: { run_id: run.run_id, agent_id: B.agentId },
        task_id: task,
        capability: WORK,
        input: { hold: true },
        context: {},
        delegator: A.agentId,
        authorized: [],
        parent_run: null,
        predecessor
      }
      // B signs a ticket for itself as delegator: the ticket does not continue the run's own
      const falseTicket = { ...await issueHandoffTicket(bKey, { ...own, delegator: B.agentId }, C.agentId) }
      const asDelegator = await wire.call({ id: 1, type: 'handoff', body: { ...honest, delegator: B.agentId, ticket: falseTicket } })
      expect(asDelegator).toMatchObject({ ok: false, error: { code: 'UNAUTHORIZED', details: { reason: 'false_inheritance' } } })
      const ticket = await issueHandoffTicket(bKey, own, C.agentId)
      const extra = await wire.call({ id: 2, type: 'handoff', body: { ...honest, authorized: [D.agentId], ticket } })
      expect(extra).toMatchObject({ ok: false, error: { code: 'UNAUTHORIZED', details: { reason: 'false_inheritance' } } })
      // nothing was created at the receiver
      expect((await C.runs.list({ correlation_id: task })).executing).toEqual([])
    } finally {
      wire.abort()
      held.get(run.run_id)?.resolve()
    }
  })

  it(`a chain of handoffs stops at MAX_HANDOFF_DEPTH (${MAX_HANDOFF_DEPTH}) with a typed error`, async () => {
    const task = 'task-authority-depth'
    let run: Run = await A.delegate({ to_agent: B.agentId, task_id: task, capability: WORK, input: { hold: true } })
    await until(() => held.has(run.run_id), 'the first run to start')
    for (let depth = 1; depth <= MAX_HANDOFF_DEPTH; depth++) {
      const to = run.agent_id === B.agentId ? C : B
      run = await A.handoff(run.run_id, to.agentId, { depth })
      await until(() => held.has(run.run_id), `hop ${depth} to start`)
    }
    const to = run.agent_id === B.agentId ? C : B
    const err = await rejectsWith(A.handoff(run.run_id, to.agentId, { depth: MAX_HANDOFF_DEPTH + 1 }), 'DELEGATION_REFUSED')
    expect(err.details).toMatchObject({ reason: 'handoff_depth', max: MAX_HANDOFF_DEPTH })
    held.get(run.run_id)?.resolve()
  })

  it('a handoff that times out after the receiver created the run leaves no orphan: the receiver fails it', async () => {
    const task = 'task-authority-orphan'
    const run = await A.delegate({ to_agent: B.agentId, task_id: task, capability: WORK, input: { hold: true } })
    await until(() => held.has(run.run_id), 'the run to start')
    // C creates the successor only after B's call gave up
    const answered = Promise.withResolvers<void>()
    const gaveUp = Promise.withResolvers<void>()
    C.runs.setPolicy(async ({ task_id: t }) => {
      if (t === task) await gaveUp.promise
      answered.resolve()
      return undefined
    })
    try {
      const failed = nextEvent(C, e => e.correlation_id === task && e.type === 'run.failed')
      await rejectsWith(B.runs.handoff(run.run_id, C.agentId, {}, { responseTimeoutMs: 150, callTimeoutMs: 150 }), 'AGENT_NOT_FOUND')
      gaveUp.resolve()
      await answered.promise
      const e = await failed
      expect(e.payload).toMatchObject({ failure: { code: 'HANDOFF_UNCONFIRMED' } })
      // the handler of the unconfirmed run never started, and the predecessor is untouched
      expect(started.has(e.run_id)).toBe(false)
      expect((await B.runs.getRun(run.run_id)).state).toBe('running')
    } finally {
      C.runs.setPolicy(undefined)
      held.get(run.run_id)?.resolve()
    }
  })
  it('a successor its sender never confirmed cannot be blocked or resumed into running its handler beside the predecessor', async () => {
    const task = 'task-authority-unconfirmed-resume'
    const run = await A.delegate({ to_agent: B.agentId, task_id: task, capability: WORK, input: { hold: true } })
    await until(() => held.has(run.run_id), 'the run to start')
    const predecessor = (await B.runs.store.log.get(run.run_id, 1))!
    const ticket = await issueHandoffTicket(bKey, ticketOf(predecessor)!, C.agentId)
    // phase one only: B's side creates the successor at C and never confirms it
    const wire = await RawWire.open(B.host, C.host.peerId, HANDOFF_PROTOCOL)
    try {
      const failed = nextEvent(C, e => e.correlation_id === task && e.type === 'run.failed')
      const answer = await wire.call({
        id: 1,
        type: 'handoff',
        body: { to_agent: C.agentId, from_run: { run_id: run.run_id, agent_id: B.agentId }, task_id: task, capability: WORK, input: { hold: true }, context: {}, delegator: A.agentId, authorized: [], parent_run: null, predecessor, ticket }
      }) as unknown as { ok: boolean, body: { run: Run } }
      expect(answer.ok).toBe(true)
      const successor = answer.body.run.run_id
      // a block and then a resume by the delegator used to start the successor's handler here, beside B's
      const blocked = await rejectsWith(A.runs.block(successor, 'wait', 'cp-1'), 'INVALID_TRANSITION')
      expect(blocked.details).toMatchObject({ reason: 'handoff_unconfirmed', command: 'block' })
      // still running, so a resume is refused by the state machine first
      await rejectsWith(A.runs.resume(successor, { go: true }), 'INVALID_TRANSITION')
      const e = await failed
      expect(e.run_id).toBe(successor)
      expect(e.payload).toMatchObject({ failure: { code: 'HANDOFF_UNCONFIRMED' } })
      expect(started.has(successor)).toBe(false)
      expect((await B.runs.getRun(run.run_id)).state).toBe('running')
    } finally {
      wire.abort()
      held.get(run.run_id)?.resolve()
    }
  })
})
