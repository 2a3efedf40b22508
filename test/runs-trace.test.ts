/**
 * Trace context across nodes (src/runs/trace.ts): one task's delegation
 * A -> B, B's sub-delegation to C from its handler, B's handoff of its run to
 * C and A's control call on the run all share one trace id, on three real
 * nodes. No context manager is registered, so nothing reaches a node but what
 * the frames carry: the trace goes across on the wire or not at all.
 *
 * First, without any OpenTelemetry SDK (the API's no-op), a W3C trace context
 * given to a delegation goes on unchanged to the run and its sub-delegation.
 * Then an SDK (sdk-trace-base with an in-memory exporter) records the spans of
 * all three nodes.
 */
import { trace } from '@opentelemetry/api'
import { BasicTracerProvider, InMemorySpanExporter, SimpleSpanProcessor, type ReadableSpan } from '@opentelemetry/sdk-trace-base'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import type { CapabilityRef } from '../src/card/card.ts'
import type { MeshNode } from '../src/node.ts'
import { TRACESTATE_MAX_CHARS } from '../src/constants.ts'
import { TRACESTATE_MAX_MEMBERS } from '../src/runs/constants.ts'
import { isGetRun, isWireDelegate } from '../src/runs/messages.ts'
import type { TraceContext } from '../src/runs/trace.ts'
import type { Run } from '../src/runlog/types.ts'
import { newToken } from '../src/api/files.ts'
import { startApiServer } from '../src/api/server.ts'
import { raw } from './api-helpers.ts'
import { rejectsWith, startMesh, stopAll, until } from './helpers.ts'

const CAP_B: CapabilityRef = { capability_id: 'cap:trace-b', version: '1.0.0' }
const CAP_C: CapabilityRef = { capability_id: 'cap:trace-c', version: '1.0.0' }
const CAP_HOLD: CapabilityRef = { capability_id: 'cap:trace-hold', version: '1.0.0' }

const traceIdOf = (tc: unknown): string | undefined => {
  const p = (tc as TraceContext | undefined)?.traceparent
  return typeof p === 'string' ? p.split('-')[1] : undefined
}

describe('trace context across delegations, sub-delegations, handoffs and control calls', () => {
  let nodes: MeshNode[] = []
  let A: MeshNode, B: MeshNode, C: MeshNode
  /** The sub-delegation B's handler made, per correlation. */
  const subs = new Map<string, Run>()

  beforeAll(async () => {
    nodes = await startMesh(3, { bootstrapOf: i => i - 1 })
    ;[A, B, C] = nodes as [MeshNode, MeshNode, MeshNode]
    B.runs.handle(CAP_B, async (ctx) => {
      // a sub-delegation on behalf of this run: it names the run as its parent, nothing else
      const sub = await B.delegate({ to_agent: C.agentId, task_id: ctx.run.correlation_id, capability: CAP_C, input: {}, parent_run: ctx.run.run_id })
      subs.set(ctx.run.correlation_id, sub)
      if (ctx.input.handoff === true) await ctx.handoff(C.agentId, { sub: sub.run_id })
      return { sub: sub.run_id }
    })
    C.runs.handle(CAP_C, async () => ({ ok: true }))
    C.runs.handle(CAP_B, async (ctx) => ({ continued: ctx.handedOff?.from.run_id ?? null }))
    C.runs.handle(CAP_HOLD, async (ctx) => ctx.block('held for a control call', 'cp-trace-hold'))
    await B.publishCard({ name: 'b', capabilities: [CAP_B] })
    await C.publishCard({ name: 'c', capabilities: [CAP_B, CAP_C, CAP_HOLD] })
  }, 60_000)

  afterAll(async () => { await stopAll(nodes) })

  const started = async (node: MeshNode, runId: string): Promise<Record<string, unknown>> => {
    let payload: Record<string, unknown> | undefined
    await until(async () => { payload = (await node.runs.store.log.get(runId, 1))?.payload; return payload !== undefined }, `run.started of ${runId}`)
    return payload as Record<string, unknown>
  }

  it('without an SDK, a given trace context goes on unchanged to the run and its sub-delegation', async () => {
    const traceparent = '00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01'
    const run = await A.delegate({ to_agent: B.agentId, task_id: 'trace-noop', capability: CAP_B, input: {}, trace: { traceparent, tracestate: 'vendor=x' } })
    expect((await started(B, run.run_id)).trace).toEqual({ traceparent, tracestate: 'vendor=x' })
    await until(() => subs.has('trace-noop'), 'the sub-delegation')
    const sub = subs.get('trace-noop') as Run
    expect((await started(C, sub.run_id)).trace).toEqual({ traceparent, tracestate: 'vendor=x' })
    // through the local API, as W3C headers
    const token = newToken()
    const api = await startApiServer(A, { token, port: 0, checkResponses: true })
    try {
      const other = '00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01'
      const post = async (headers: Record<string, string>): Promise<Awaited<ReturnType<typeof raw>>> =>
        raw(`${api.url}/v1/delegate`, { method: 'POST', token, headers, body: JSON.stringify({ to_agent: B.agentId, task_id: 'trace-api', capability: CAP_B, input: {} }) })
      const traceOfPost = async (headers: Record<string, string>): Promise<unknown> => {
        const res = await post(headers)
        expect(res.status).toBe(202)
        return (await started(B, res.body.run.run_id)).trace
      }
      expect(await traceOfPost({ traceparent: other })).toEqual({ traceparent: other })
      // W3C's processing model: a traceparent that does not parse is set aside with its tracestate, the call goes on without them
      for (const bad of ['not-a-traceparent', `${other}-more`, `ff${other.slice(2)}`, `00-${'0'.repeat(32)}-b7ad6b7169203331-01`, `${other}, ${other}`]) {
        expect(await traceOfPost({ traceparent: bad, tracestate: 'vendor=x' })).toBeUndefined()
      }
      // a later version is read by its first four fields and goes on as version 00
      expect(await traceOfPost({ traceparent: `01${other.slice(2)}-future-field` })).toEqual({ traceparent: other })
      expect(await traceOfPost({ traceparent: `01${other.slice(2)}x` })).toBeUndefined()
      // a tracestate over TRACESTATE_MAX_CHARS keeps its leading list-members that fit
      const members = Array.from({ length: 30 }, (_, i) => `v${i}=${'x'.repeat(20)}`)
      const kept = (await traceOfPost({ traceparent: other, tracestate: members.join(',') }) as TraceContext).tracestate ?? ''
      expect(kept.length).toBeLessThanOrEqual(TRACESTATE_MAX_CHARS)
      expect(kept).toBe(members.slice(0, kept.split(',').length).join(','))
      expect(kept.length + 1 + (members[kept.split(',').length] as string).length).toBeGreaterThan(TRACESTATE_MAX_CHARS)
    } finally {
      await api.close()
    }
    // and a delegation without one carries none (no SDK: no new trace either)
    const plain = await A.delegate({ to_agent: B.agentId, task_id: 'trace-none', capability: CAP_B, input: {} })
    expect((await started(B, plain.run_id)).trace).toBeUndefined()
  })

  it('a tracestate of more list-members than W3C allows goes on as its first TRACESTATE_MAX_MEMBERS, in their order', async () => {
    const traceparent = '00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01'
    const members = Array.from({ length: TRACESTATE_MAX_MEMBERS + 8 }, (_, i) => `k${i}=v${i}`)
    const run = await A.delegate({ to_agent: B.agentId, task_id: 'trace-members', capability: CAP_B, input: {}, trace: { traceparent, tracestate: members.join(',') } })
    // before: the OpenTelemetry parser kept 32 of them, reversed, and that was signed into run.started
    expect((await started(B, run.run_id)).trace).toEqual({ traceparent, tracestate: members.slice(0, TRACESTATE_MAX_MEMBERS).join(',') })
  })

  it('a malformed trace context is a typed INVALID_REQUEST, not a crash; old frames without one stay valid', async () => {
    for (const traceparent of ['00-nothex-00f067aa0ba902b7-01', `00-${'0'.repeat(32)}-00f067aa0ba902b7-01`]) {
      await rejectsWith(A.delegate({ to_agent: B.agentId, task_id: 'trace-bad', capability: CAP_B, input: {}, trace: { traceparent } }), 'INVALID_REQUEST')
    }
    const frame = { to_agent: B.agentId, task_id: 't', capability: CAP_B, input: {}, parent_run: null }
    expect(isWireDelegate(frame)).toBe(true)
    expect(isWireDelegate({ ...frame, trace: { traceparent: '00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01' } })).toBe(true)
    expect(isWireDelegate({ ...frame, trace: { traceparent: '00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7' } })).toBe(false)
    expect(isWireDelegate({ ...frame, trace: { traceparent: '00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01', tracestate: 'x'.repeat(TRACESTATE_MAX_CHARS + 1) } })).toBe(false)
    expect(isGetRun({ run_id: 'x:1', trace: { traceparent: 'nope' } })).toBe(false)
  })

  it('with an SDK, A -> B -> C plus a handoff and a control call form one trace over three nodes', async () => {
    const exporter = new InMemorySpanExporter()
    const provider = new BasicTracerProvider({ spanProcessors: [new SimpleSpanProcessor(exporter)] })
    expect(trace.setGlobalTracerProvider(provider)).toBe(true)
    try {
      const task = 'trace-sdk'
      const run = await A.delegate({ to_agent: B.agentId, task_id: task, capability: CAP_B, input: { handoff: true } }, { follow: true })
      // the handed-off successor completes on C
      let successor: Run | undefined
      await until(async () => {
        successor = (await C.runs.list({ correlation_id: task, capability: CAP_B })).executing.find(r => r.state === 'completed')
        return successor !== undefined
      }, 'the successor to complete on C')
      const sub = subs.get(task) as Run
      expect(sub.parent_run).toBe(run.run_id)

      const root = exporter.getFinishedSpans().find(s => s.name === 'aap.delegate' && s.attributes['aap.agent_id'] === A.agentId)
      expect(root).toBeDefined()
      const traceId = root?.spanContext().traceId as string
      expect(traceId).toMatch(/^[0-9a-f]{32}$/)

      // on the wire: each run's run.started (signed by its executor) holds the same trace
      expect(traceIdOf((await started(B, run.run_id)).trace)).toBe(traceId)
      expect(traceIdOf((await started(C, sub.run_id)).trace)).toBe(traceId)
      expect(traceIdOf((await started(C, (successor as Run).run_id)).trace)).toBe(traceId)

      // a control call of the delegator on the run continues its trace (A follows the run, so it holds its run.started)
      await until(async () => (await A.runs.store.log.get(run.run_id, 1)) !== undefined, "A's copy of the run's start")
      expect((await A.getRun(run.run_id)).state).toBe('completed')

      const spans = (): ReadableSpan[] => exporter.getFinishedSpans().filter(s => s.spanContext().traceId === traceId)
      const expected: Array<[string, string]> = [
        ['aap.delegate', A.agentId],
        ['aap.delegate.accept', B.agentId],
        ['aap.delegate', B.agentId],
        ['aap.delegate.accept', C.agentId],
        ['aap.handoff', B.agentId],
        ['aap.handoff.accept', C.agentId],
        ['aap.control.get_run', A.agentId],
        ['aap.control.get_run.handle', B.agentId]
      ]
      await until(() => expected.every(([name, agent]) => spans().some(s => s.name === name && s.attributes['aap.agent_id'] === agent)),
        'every span of the task in its trace')
      expect(new Set(spans().map(s => s.attributes['aap.agent_id']))).toEqual(new Set([A.agentId, B.agentId, C.agentId]))
      // each node's accepting span is a child of the caller's span on the other node
      const one = (name: string, agent: string): ReadableSpan => spans().find(s => s.name === name && s.attributes['aap.agent_id'] === agent) as ReadableSpan
      expect(one('aap.delegate.accept', B.agentId).parentSpanContext?.spanId).toBe(one('aap.delegate', A.agentId).spanContext().spanId)
      expect(one('aap.delegate.accept', C.agentId).parentSpanContext?.spanId).toBe(one('aap.delegate', B.agentId).spanContext().spanId)
      expect(one('aap.handoff.accept', C.agentId).parentSpanContext?.spanId).toBe(one('aap.handoff', B.agentId).spanContext().spanId)
      // B's sub-delegation and handoff hang under the span that accepted B's run
      expect(one('aap.delegate', B.agentId).parentSpanContext?.spanId).toBe(one('aap.delegate.accept', B.agentId).spanContext().spanId)
    } finally {
      trace.disable()
      await provider.shutdown()
    }
  })

  it('with an SDK, a delegator\'s control call on a run it does not follow continues the run\'s trace', async () => {
    const exporter = new InMemorySpanExporter()
    const provider = new BasicTracerProvider({ spanProcessors: [new SimpleSpanProcessor(exporter)] })
    expect(trace.setGlobalTracerProvider(provider)).toBe(true)
    try {
      const run = await A.delegate({ to_agent: C.agentId, task_id: 'trace-unfollowed', capability: CAP_HOLD, input: {} }, { follow: false })
      await until(async () => (await C.runs.getRun(run.run_id)).state === 'blocked', 'the run to block')
      // A holds no copy of the run's start: it did not follow the run
      expect(await A.runs.store.log.get(run.run_id, 1)).toBeUndefined()
      await A.cancel(run.run_id, 'done with it')
      const root = exporter.getFinishedSpans().find(s => s.name === 'aap.delegate' && s.attributes['aap.agent_id'] === A.agentId && s.attributes['aap.correlation_id'] === 'trace-unfollowed')
      const cancel = exporter.getFinishedSpans().find(s => s.name === 'aap.control.cancel' && s.attributes['aap.run_id'] === run.run_id)
      // before: the cancel started a trace of its own
      expect(cancel?.spanContext().traceId).toBe(root?.spanContext().traceId)
    } finally {
      trace.disable()
      await provider.shutdown()
    }
  })
})
