/**
 * AAP 0.1.0-draft conformance: one test per MUST (and the SHOULDs beside
 * them) in the profile's Delegation, Block and Resume, Handoff, Event Stream
 * and Conformance sections, each named after its text. Everything runs
 * between real nodes; the five error codes over the wire are in
 * test/runs-errors.test.ts.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { DELEGATE_PROTOCOL } from '../src/constants.ts'
import { AAP_ERROR_CODES, EXTENSION_ERROR_CODES } from '../src/errors.ts'
import { checkChain, verifyEvent } from '../src/runlog/event.ts'
import type { MeshNode } from '../src/node.ts'
import type { RunContext } from '../src/runs/runtime.ts'
import { AGENT_EVENT_TYPES, RUN_STATES, type AgentEvent, type Run } from '../src/runlog/types.ts'
import common from '../protocols/common.schema.json' with { type: 'json' }
import { RawWire } from './fixtures/raw-wire.ts'
import { nextEvent, rejectsWith, startMesh, stopAll } from './helpers.ts'

const REVIEW = { capability_id: 'cap:code-review', version: '2.1.0' }

describe('AAP 0.1.0-draft conformance', () => {
  let nodes: MeshNode[] = []
  let A: MeshNode, B: MeshNode, C: MeshNode
  /** Every event B and C committed, in order. */
  const events: AgentEvent[] = []
  const gates = new Map<string, PromiseWithResolvers<void>>()
  const gate = (name: string): PromiseWithResolvers<void> => {
    let g = gates.get(name)
    if (g === undefined) { g = Promise.withResolvers<void>(); gates.set(name, g) }
    return g
  }
  const seen = new Map<string, RunContext>()

  /** B's handler does whatever its input says, so each test picks a behaviour. */
  const behave = (self: () => MeshNode) => async (ctx: RunContext): Promise<Record<string, unknown> | undefined> => {
    seen.set(ctx.run.run_id, ctx)
    // a run that continues another after a handoff just finishes the work (once its `hold` gate opens, when the
    // handoff's context names one: a test that hands the run on again needs it still running)
    if (ctx.handedOff !== null) {
      const hold = ctx.handedOff.context.hold
      if (typeof hold === 'string') await gate(hold).promise
      return { continued: true }
    }
    const mode = ctx.input.mode
    if (mode === 'gate') { await gate(String(ctx.input.gate)).promise; return { released: true } }
    if (mode === 'block') return { resolution: await ctx.block(String(ctx.input.reason ?? 'needs a human'), String(ctx.input.checkpoint)) }
    if (mode === 'block-twice') {
      const first = await ctx.block('first look', 'cp-twice-1')
      const second = await ctx.block('second look', 'cp-twice-2')
      return { first, second }
    }
    if (mode === 'throw') throw new Error('handler exploded on purpose')
    if (mode === 'handoff') { await ctx.handoff(String(ctx.input.to), { why: 'specialist', from_input: ctx.input }); return undefined }
    if (mode === 'subdelegate') {
      const child = await self().delegate({
        to_agent: String(ctx.input.to), task_id: ctx.run.correlation_id, capability: REVIEW, input: { mode: 'plain' }, parent_run: ctx.run.run_id
      })
      return { child: child.run_id }
    }
    return { done: true }
  }

  beforeAll(async () => {
    nodes = await startMesh(3, { bootstrapOf: i => i - 1 })
    ;[A, B, C] = nodes as [MeshNode, MeshNode, MeshNode]
    B.runs.handle(REVIEW, behave(() => B))
    C.runs.handle(REVIEW, behave(() => C))
    for (const n of [B, C]) n.runs.onEvent((e) => { events.push(e) })
    await B.publishCard({ name: 'reviewer', capabilities: [REVIEW], tags: ['reviewer'] })
    await C.publishCard({ name: 'security', capabilities: [REVIEW], tags: ['security'] })
    await Promise.all([B.discovery.announce(), C.discovery.announce()])
  })
  afterAll(async () => {
    for (const g of gates.values()) g.resolve()
    await stopAll(nodes)
  })

  const delegate = async (taskId: string, input: Record<string, unknown>, to: MeshNode = B): Promise<Run> =>
    A.delegate({ to_agent: to.agentId, task_id: taskId, capability: REVIEW, input })
  const eventsOf = (runId: string): AgentEvent[] => events.filter(e => e.run_id === runId)

  describe('Delegation', () => {
    it('delegate MUST return a Run handle without waiting for completion', async () => {
      const run = await delegate('task-handle', { mode: 'gate', gate: 'handle' })
      // the handler is still held at its gate: the handle came back before the work
      expect(run.state).toBe('running')
      expect(run.run_id.startsWith(`${B.agentId}:`)).toBe(true)
      expect((await A.getRun(run.run_id)).state).toBe('running')
      const done = nextEvent(B, e => e.type === 'run.completed' && e.run_id === run.run_id)
      gate('handle').resolve()
      expect((await done).payload.output).toEqual({ released: true })
      expect((await A.getRun(run.run_id)).state).toBe('completed')
    })

    it('DelegateRequest.task_id MUST become Run.correlation_id', async () => {
      const done = nextEvent(B, e => e.type === 'run.completed' && e.correlation_id === 'task_01J0K7-corr')
      const run = await delegate('task_01J0K7-corr', { mode: 'plain' })
      expect(run.correlation_id).toBe('task_01J0K7-corr')
      await done
      expect((await B.runs.store.get(run.run_id))?.correlation_id).toBe('task_01J0K7-corr')
      expect((await A.getRun(run.run_id)).correlation_id).toBe('task_01J0K7-corr')
      const log = await B.runs.store.log.read(run.run_id)
      expect(log.map(e => e.type)).toEqual(['run.started', 'run.completed'])
      expect(log.every(e => e.correlation_id === 'task_01J0K7-corr')).toBe(true)
    })

    describe('If delegation fails after the run is created, the implementation MUST emit run.failed', () => {
      it('when the handler fails: run.failed with HANDLER_FAILED, and the node stays up', async () => {
        const failed = nextEvent(B, e => e.type === 'run.failed' && e.correlation_id === 'task-throws')
        const run = await delegate('task-throws', { mode: 'throw' })
        const e = await failed
        expect(e.run_id).toBe(run.run_id)
        expect(e.payload.failure).toEqual({ code: 'HANDLER_FAILED', message: 'handler exploded on purpose' })
        const after = await A.getRun(run.run_id)
        expect(after.state).toBe('failed')
        expect(after.failure?.code).toBe('HANDLER_FAILED')
        const ok = nextEvent(B, x => x.type === 'run.completed' && x.correlation_id === 'task-after-throw')
        await delegate('task-after-throw', { mode: 'plain' })
        await ok
      })

      it('when the handle cannot be delivered (the caller is gone): run.failed with HANDLE_UNDELIVERED', async () => {
        const asked = Promise.withResolvers<void>()
        B.runs.setPolicy(async ({ task_id: taskId, signal }) => {
          if (taskId !== 'task-undelivered') return undefined
          asked.resolve()
          // accept, but only after the caller's stream is gone
          if (!signal.aborted) await new Promise(resolve => { signal.addEventListener('abort', resolve, { once: true }) })
          return undefined
        })
        try {
          const failed = nextEvent(B, e => e.type === 'run.failed' && e.correlation_id === 'task-undelivered')
          const w = await RawWire.open(A.host, B.host.peerId, DELEGATE_PROTOCOL)
          const ticket = await A.runs.ticketFor({ to_agent: B.agentId, task_id: 'task-undelivered', capability: REVIEW, input: { mode: 'plain' } })
          w.request({ id: 1, type: 'delegate', body: { to_agent: B.agentId, task_id: 'task-undelivered', capability: REVIEW, input: { mode: 'plain' }, parent_run: null, ticket } })
          await asked.promise
          w.abort()
          const e = await failed
          expect(e.payload.failure).toMatchObject({ code: 'HANDLE_UNDELIVERED' })
          const log = await B.runs.store.log.read(e.run_id)
          expect(log.map(x => x.type)).toEqual(['run.started', 'run.failed'])
          // the handler never ran for a run nobody holds a handle to
          expect(seen.has(e.run_id)).toBe(false)
        } finally {
          B.runs.setPolicy(undefined)
        }
      })

      it('when the delegator gave up before the handle arrived: it cancels the run, which ends in run.failed', async () => {
        const release = Promise.withResolvers<undefined>()
        B.runs.setPolicy(async ({ task_id: taskId }) => taskId === 'task-late' ? release.promise : undefined)
        try {
          const failed = nextEvent(B, e => e.type === 'run.failed' && e.correlation_id === 'task-late')
          const err = await rejectsWith(A.delegate({ to_agent: B.agentId, task_id: 'task-late', capability: REVIEW, input: { mode: 'gate', gate: 'late' } }, { responseTimeoutMs: 200 }), 'AGENT_NOT_FOUND')
          expect(err.details).toMatchObject({ reason: 'timeout' })
          release.resolve(undefined)
          const e = await failed
          expect(e.payload).toMatchObject({ reason: 'canceled', by: A.agentId })
          expect((await B.runs.store.get(e.run_id))?.state).toBe('failed')
        } finally {
          B.runs.setPolicy(undefined)
        }
      })
    })

    it('If the target agent does not support the requested capability, the implementation MUST return CAPABILITY_NOT_SUPPORTED', async () => {
      const before = (await B.runs.list()).executing.length
      // checked by the caller against the verified card ...
      await rejectsWith(A.delegate({ to_agent: B.agentId, task_id: 'task-nocap', capability: { capability_id: 'cap:translate', version: '1.0.0' }, input: {} }), 'CAPABILITY_NOT_SUPPORTED')
      await rejectsWith(A.delegate({ to_agent: B.agentId, task_id: 'task-nocap', capability: { ...REVIEW, version: '3.0.0' }, input: {} }), 'CAPABILITY_NOT_SUPPORTED')
      // ... and by the executor, whatever the caller skipped
      const w = await RawWire.open(A.host, B.host.peerId, DELEGATE_PROTOCOL)
      const f = await w.call({ id: 1, type: 'delegate', body: { to_agent: B.agentId, task_id: 'task-nocap', capability: { capability_id: 'cap:translate', version: '1.0.0' }, input: {}, parent_run: null } })
      expect(f).toMatchObject({ id: 1, ok: false, error: { code: 'CAPABILITY_NOT_SUPPORTED' } })
      w.abort()
      expect((await B.runs.list()).executing.length).toBe(before)
    })
  })

  describe('Block and Resume', () => {
    it('block MUST include checkpoint_id', async () => {
      const blocked = nextEvent(B, e => e.type === 'run.blocked' && e.correlation_id === 'task-cp')
      const run = await delegate('task-cp', { mode: 'block', checkpoint: 'cp-review-1' })
      const e = await blocked
      expect(e.payload.checkpoint_id).toBe('cp-review-1')
      expect((await A.getRun(run.run_id)).checkpoint_id).toBe('cp-review-1')
      // a block without one is refused, by the caller's API, by the executor's API and on the wire
      const running = await delegate('task-cp-missing', { mode: 'gate', gate: 'cp-missing' })
      await rejectsWith(A.block(running.run_id, 'no checkpoint', ''), 'INVALID_REQUEST')
      await rejectsWith(B.block(running.run_id, 'no checkpoint', ''), 'INVALID_REQUEST')
      expect((await A.getRun(running.run_id)).state).toBe('running')
      // with one, the delegator's block over the wire holds
      const b = await A.block(running.run_id, 'checkpoint raised by HACP', 'cp-from-delegator')
      expect(b.state).toBe('blocked')
      expect(b.checkpoint_id).toBe('cp-from-delegator')
      await A.cancel(running.run_id)
      gate('cp-missing').resolve()
      await A.resume(run.run_id, { approved: true })
    })

    it('A blocked run MUST NOT resume itself', async () => {
      const blocked = nextEvent(B, e => e.type === 'run.blocked' && e.correlation_id === 'task-self-resume')
      const run = await delegate('task-self-resume', { mode: 'block', checkpoint: 'cp-self' })
      await blocked
      const err = await rejectsWith(B.resume(run.run_id, { approved: true }), 'INVALID_TRANSITION')
      expect(err.message).toMatch(/must not resume itself/)
      expect((await A.getRun(run.run_id)).state).toBe('blocked')
      expect(eventsOf(run.run_id).map(e => e.type)).toEqual(['run.started', 'run.blocked'])
      const done = nextEvent(B, e => e.type === 'run.completed' && e.run_id === run.run_id)
      await A.resume(run.run_id, { approved: false })
      await done
    })

    it('resume MUST carry the HACP checkpoint resolution payload', async () => {
      const blocked = nextEvent(B, e => e.type === 'run.blocked' && e.correlation_id === 'task-resolution')
      const run = await delegate('task-resolution', { mode: 'block', checkpoint: 'cp-res' })
      await blocked
      // a resume without a resolution is not a resume
      const w = await RawWire.open(A.host, B.host.peerId, '/aap/control/0.1.0')
      expect(await w.call({ id: 1, type: 'resume', body: { run_id: run.run_id } })).toMatchObject({ ok: false, error: { code: 'INVALID_REQUEST' } })
      w.abort()
      const resolution = { decision: 'approve', reviewer: 'human-7', notes: ['ok', 'ship it'], nested: { score: 0.93, flags: { urgent: false } } }
      const done = nextEvent(B, e => e.type === 'run.completed' && e.run_id === run.run_id)
      await A.resume(run.run_id, resolution)
      // the handler received it unchanged, and the log records it with the checkpoint it resolves
      expect((await done).payload.output).toEqual({ resolution })
      const resume = eventsOf(run.run_id).find(e => e.payload.transition === 'resume')
      expect(resume?.payload).toMatchObject({ checkpoint_id: 'cp-res', resolution, by: A.agentId })
    })

    it('Invalid state transitions MUST return INVALID_TRANSITION', async () => {
      const running = await delegate('task-invalid', { mode: 'gate', gate: 'invalid' })
      await rejectsWith(A.resume(running.run_id, {}), 'INVALID_TRANSITION') // not blocked
      await A.block(running.run_id, 'hold on', 'cp-invalid')
      await rejectsWith(A.block(running.run_id, 'again', 'cp-invalid-2'), 'INVALID_TRANSITION') // already blocked
      const done = nextEvent(B, e => e.type === 'run.completed' && e.run_id === running.run_id)
      await A.resume(running.run_id, { go: true })
      gate('invalid').resolve()
      await done
      for (const attempt of [
        A.resume(running.run_id, {}), A.block(running.run_id, 'late', 'cp-late'), A.cancel(running.run_id), A.handoff(running.run_id, C.agentId, {})
      ]) await rejectsWith(attempt, 'INVALID_TRANSITION')
      const failed = nextEvent(B, e => e.type === 'run.failed' && e.correlation_id === 'task-invalid-failed')
      const f = await delegate('task-invalid-failed', { mode: 'throw' })
      await failed
      await rejectsWith(A.resume(f.run_id, {}), 'INVALID_TRANSITION')
      await rejectsWith(A.cancel(f.run_id), 'INVALID_TRANSITION')
      expect((await A.getRun(running.run_id)).state).toBe('completed')
      expect((await A.getRun(f.run_id)).state).toBe('failed')
    })
  })

  describe('Handoff', () => {
    let oldRun: Run
    let newRun: Run

    beforeAll(async () => {
      const done = nextEvent(C, e => e.type === 'run.completed' && e.correlation_id === 'task-handoff')
      oldRun = await delegate('task-handoff', { mode: 'handoff', to: C.agentId })
      const e = await done
      newRun = await A.getRun(e.run_id)
    })

    it('Handoff creates a new run for the receiving agent', async () => {
      expect(newRun.run_id).not.toBe(oldRun.run_id)
      expect(newRun.agent_id).toBe(C.agentId)
      expect(newRun.handoff_from).toEqual({ run_id: oldRun.run_id, agent_id: B.agentId })
      expect(newRun.delegator).toBe(A.agentId)
      expect((await C.runs.store.get(newRun.run_id))?.state).toBe('completed')
      // the receiver's handler got the context
      expect(seen.get(newRun.run_id)?.handedOff).toEqual({ from: { run_id: oldRun.run_id, agent_id: B.agentId }, context: { why: 'specialist', from_input: { mode: 'handoff', to: C.agentId } } })
    })

    it('The new run MUST preserve the original correlation_id', async () => {
      expect(newRun.correlation_id).toBe('task-handoff')
      expect(eventsOf(newRun.run_id).every(e => e.correlation_id === 'task-handoff')).toBe(true)
      // also when the delegator asks for the handoff, and across a second hop
      const blocked = nextEvent(B, e => e.type === 'run.blocked' && e.correlation_id === 'task-handoff-2')
      const r = await delegate('task-handoff-2', { mode: 'block', checkpoint: 'cp-h2' })
      await blocked
      // C holds the run it took until the second hop is asked for: its handler may not finish it first
      const first = await A.handoff(r.run_id, C.agentId, { reason: 'ownership.transfer', hold: 'handoff-2' })
      expect(first.correlation_id).toBe('task-handoff-2')
      expect(first.handoff_from?.run_id).toBe(r.run_id)
      const second = await A.handoff(first.run_id, B.agentId, { reason: 'back again' })
      gate('handoff-2').resolve()
      expect(second.correlation_id).toBe('task-handoff-2')
      expect(second.handoff_from).toEqual({ run_id: first.run_id, agent_id: C.agentId })
    })

    it('The old run SHOULD remain available as read-only history', async () => {
      const old = await A.getRun(oldRun.run_id)
      expect(old.state).toBe('completed')
      expect(old.handoff_to).toEqual({ run_id: newRun.run_id, agent_id: C.agentId })
      expect(old.correlation_id).toBe('task-handoff')
      for (const attempt of [A.resume(old.run_id, {}), A.block(old.run_id, 'x', 'cp'), A.cancel(old.run_id), A.handoff(old.run_id, C.agentId, {})]) {
        await rejectsWith(attempt, 'INVALID_TRANSITION')
      }
      expect(await A.getRun(oldRun.run_id)).toEqual(old)
    })
  })

  describe('Event Stream', () => {
    it('Every event MUST include correlation_id', async () => {
      expect(events.length).toBeGreaterThan(20)
      for (const e of events) {
        expect(typeof e.correlation_id, `${e.type} of ${e.run_id}`).toBe('string')
        expect(e.correlation_id.length).toBeGreaterThan(0)
        // and it is the run's own
        const run = await (e.run_id.startsWith(B.agentId) ? B : C).runs.getRun(e.run_id)
        expect(e.correlation_id).toBe(run.correlation_id)
      }
    })

    it('run.blocked MUST identify the HACP checkpoint when the block came from a checkpoint', async () => {
      const blockedEvents = events.filter(e => e.type === 'run.blocked')
      expect(blockedEvents.length).toBeGreaterThan(3)
      for (const e of blockedEvents) expect(typeof e.payload.checkpoint_id).toBe('string')
      expect(blockedEvents.map(e => e.payload.checkpoint_id)).toContain('cp-review-1')
    })
  })

  describe('Conformance', () => {
    it('Support agent.discover, agent.delegate, agent.block, agent.resume, and agent.handoff', async () => {
      const [card] = await A.discover({ capability: REVIEW, tags: ['reviewer'] })
      expect(card?.agent_id).toBe(B.agentId)
      const blocked = nextEvent(B, e => e.type === 'run.blocked' && e.correlation_id === 'task-all-five')
      const run = await A.delegate({ to_agent: card!.agent_id, task_id: 'task-all-five', capability: REVIEW, input: { mode: 'block-twice' } })
      await blocked
      const again = nextEvent(B, e => e.type === 'run.blocked' && e.payload.checkpoint_id === 'cp-twice-2')
      expect((await A.resume(run.run_id, { first: 'ok' })).state).toBe('running')
      await again
      // waited on from before the handoff: C's handler finishes the new run at once, as soon as the handoff lands
      const done = nextEvent(C, e => e.type === 'run.completed' && e.correlation_id === 'task-all-five' && e.run_id.startsWith(`${C.agentId}:`))
      const next = await A.handoff(run.run_id, C.agentId, { reason: 'transfer while blocked' })
      expect(next.agent_id).toBe(C.agentId)
      expect((await A.getRun(run.run_id)).state).toBe('completed')
      expect((await done).run_id).toBe(next.run_id)
    })

    it('Maintain the run states running, blocked, completed, and failed', async () => {
      expect([...RUN_STATES]).toEqual(['running', 'blocked', 'completed', 'failed'])
      expect(common.definitions.RunState.enum).toEqual([...RUN_STATES])
      const running = await delegate('task-states-r', { mode: 'gate', gate: 'states' })
      const blockedEv = nextEvent(B, e => e.type === 'run.blocked' && e.correlation_id === 'task-states-b')
      const blocked = await delegate('task-states-b', { mode: 'block', checkpoint: 'cp-states' })
      await blockedEv
      const completedEv = nextEvent(B, e => e.type === 'run.completed' && e.correlation_id === 'task-states-c')
      const completed = await delegate('task-states-c', { mode: 'plain' })
      await completedEv
      const failedEv = nextEvent(B, e => e.type === 'run.failed' && e.correlation_id === 'task-states-f')
      const failed = await delegate('task-states-f', { mode: 'throw' })
      await failedEv
      const states = await Promise.all([running, blocked, completed, failed].map(async r => (await A.getRun(r.run_id)).state))
      expect(states).toEqual(['running', 'blocked', 'completed', 'failed'])
      gate('states').resolve()
      await A.cancel(blocked.run_id)
    })

    it('Include correlation_id on every run and run event', async () => {
      const { executing } = await B.runs.list()
      const { executing: onC } = await C.runs.list()
      const { delegated } = await A.runs.list()
      for (const r of [...executing, ...onC, ...delegated]) {
        expect(r.correlation_id.length, r.run_id).toBeGreaterThan(0)
        for (const e of await (r.agent_id === B.agentId ? B : C).runs.store.log.read(r.run_id)) {
          expect(e.correlation_id).toBe(r.correlation_id)
        }
      }
    })

    it('Preserve HACP TaskID as Run.correlation_id', async () => {
      // across a delegation, a subdelegation that names its parent run, and the child's events
      const childDone = nextEvent(C, e => e.type === 'run.completed' && e.correlation_id === 'task_hacp_42')
      const parentDone = nextEvent(B, e => e.type === 'run.completed' && e.correlation_id === 'task_hacp_42')
      const parent = await delegate('task_hacp_42', { mode: 'subdelegate', to: C.agentId })
      const p = await parentDone
      const c = await childDone
      const child = await A.getRun(String((p.payload.output as Record<string, unknown>).child))
      expect(child.run_id).toBe(c.run_id)
      expect(child.parent_run).toBe(parent.run_id)
      expect(child.delegator).toBe(B.agentId)
      expect([parent.correlation_id, child.correlation_id, c.correlation_id]).toEqual(['task_hacp_42', 'task_hacp_42', 'task_hacp_42'])
      // the lineage is in the child's first event too
      const started = (await C.runs.store.log.read(child.run_id))[0]
      expect(started?.payload).toMatchObject({ parent_run: parent.run_id, delegator: B.agentId })
    })

    it('Emit the required event stream', async () => {
      expect([...AGENT_EVENT_TYPES]).toEqual(['run.started', 'run.progress', 'run.blocked', 'run.completed', 'run.failed'])
      const blocked = nextEvent(B, e => e.type === 'run.blocked' && e.correlation_id === 'task-stream')
      const run = await delegate('task-stream', { mode: 'block', checkpoint: 'cp-stream' })
      await blocked
      const done = nextEvent(B, e => e.type === 'run.completed' && e.run_id === run.run_id)
      await A.resume(run.run_id, { ok: 1 })
      await done
      const log = await B.runs.store.log.read(run.run_id)
      expect(log.map(e => e.type)).toEqual(['run.started', 'run.blocked', 'run.progress', 'run.completed'])
      // the same events were emitted live, in the same order
      expect(eventsOf(run.run_id)).toEqual(log)
      // each is signed by the executor and chained to the one before
      for (const e of log) await verifyEvent(e)
      checkChain(log, undefined)
      const failedLog = await B.runs.store.log.read(events.find(e => e.type === 'run.failed' && e.correlation_id === 'task-throws')!.run_id)
      expect(failedLog.map(e => e.type)).toEqual(['run.started', 'run.failed'])
    })

    it('Use the defined error semantics', () => {
      // the five profile codes, exactly, and the extension codes the schema knows; every code
      // is produced over the wire in test/runs-errors.test.ts and test/wire-bad-input.test.ts
      expect([...AAP_ERROR_CODES]).toEqual(['AGENT_NOT_FOUND', 'CAPABILITY_NOT_SUPPORTED', 'DELEGATION_REFUSED', 'RUN_NOT_FOUND', 'INVALID_TRANSITION'])
      expect(common.definitions.ErrorCode.enum).toEqual([...AAP_ERROR_CODES, ...EXTENSION_ERROR_CODES])
    })
  })
})
