/**
 * Bad input on the wire. Each case: the responder answers a typed error frame,
 * no run state changes anywhere, and the node keeps serving ordinary calls.
 * Raw cases write bytes on a real libp2p stream (test/fixtures/raw-wire.ts).
 */
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest'
import {
  CONTROL_PROTOCOL, DELEGATE_MAX_FRAME_BYTES, DELEGATE_PROTOCOL, HANDOFF_PROTOCOL, MAX_LENGTH_PREFIX_BYTES,
  RUN_INPUT_MAX_BYTES
} from '../src/constants.ts'
import type { MeshNode } from '../src/node.ts'
import type { Run } from '../src/runlog/types.ts'
import { RawWire, lengthPrefix, rawFrame } from './fixtures/raw-wire.ts'
import { nextEvent, rejectsWith, startMesh, stopAll, until } from './helpers.ts'

const REVIEW = { capability_id: 'cap:code-review', version: '2.1.0' }

describe('bad input on the wire: a typed error frame, no state change, the node stays up', () => {
  let nodes: MeshNode[] = []
  let A: MeshNode, B: MeshNode, C: MeshNode
  const wires: RawWire[] = []

  const delegateBody = (over: Record<string, unknown> = {}): Record<string, unknown> =>
    ({ to_agent: B.agentId, task_id: 'task-bad-input', capability: REVIEW, input: {}, parent_run: null, ...over })
  /** A body our own client would send: with A's signed ticket (protocols/lineage.md). */
  const ticketedBody = async (): Promise<Record<string, unknown>> =>
    ({ ...delegateBody(), ticket: await A.runs.ticketFor({ to_agent: B.agentId, task_id: 'task-bad-input', capability: REVIEW, input: {} }) })

  /**
   * Every run any of the nodes executes, with its state and log position: the
   * authoritative run state. (A delegator's own view of its runs is a cache that
   * events refresh in the background, so it is left out.)
   */
  const state = async (): Promise<string> => {
    const out: string[] = []
    for (const n of [A, B, C]) {
      const { executing } = await n.runs.list()
      for (const r of executing) out.push(`${n.agentId.slice(-6)} ${r.run_id} ${r.state} ${r.last_seq}`)
    }
    return out.sort().join('\n')
  }

  const open = async (protocol: string, to: MeshNode = B, from: MeshNode = A): Promise<RawWire> => {
    const w = await RawWire.open(from.host, to.host.peerId, protocol)
    wires.push(w)
    return w
  }

  beforeAll(async () => {
    nodes = await startMesh(3, { bootstrapOf: i => i - 1 })
    ;[A, B, C] = nodes as [MeshNode, MeshNode, MeshNode]
    for (const n of [B, C]) {
      n.runs.handle(REVIEW, async (ctx) => {
        if (ctx.input.block === true) return { resolution: await ctx.block('needs a human', 'cp-bad-1') }
        if (ctx.input.hold === true) {
          await new Promise((_resolve, reject) => { ctx.signal.addEventListener('abort', () => { reject(ctx.signal.reason) }) })
        }
        return { ok: true }
      })
    }
    await B.publishCard({ name: 'b', capabilities: [REVIEW] })
    await C.publishCard({ name: 'c', capabilities: [REVIEW] })
  })

  afterEach(async () => {
    for (const w of wires.splice(0)) w.abort()
    // the node stays up: an ordinary delegation still works and completes
    const done = nextEvent(B, e => e.type === 'run.completed' && e.correlation_id === 'task-still-up')
    const run = await A.delegate({ to_agent: B.agentId, task_id: 'task-still-up', capability: REVIEW, input: {} })
    expect(run.state).toBe('running')
    await done
  })

  afterAll(async () => { await stopAll(nodes) })

  it('a frame that is not JSON (or not UTF-8) gets INVALID_REQUEST with id null, and the stream goes on serving', async () => {
    const before = await state()
    const w = await open(DELEGATE_PROTOCOL)
    for (const bytes of [rawFrame('{"id": 1, "type": '), rawFrame(Uint8Array.from([0xff, 0xfe, 0x7b, 0x7d])), rawFrame('')]) {
      w.write(bytes)
      const f = await w.next()
      expect(f).toMatchObject({ id: null, ok: false, error: { code: 'INVALID_REQUEST', details: { reason: 'not_json' } } })
    }
    expect(await state()).toBe(before)
    const completed = nextEvent(B, e => e.type === 'run.completed' && e.correlation_id === 'task-bad-input')
    const ok = await w.call({ id: 9, type: 'delegate', body: await ticketedBody() })
    expect(ok.id).toBe(9)
    expect(ok.ok).toBe(true)
    expect((ok.body?.run as Run).correlation_id).toBe('task-bad-input')
    expect((await completed).run_id).toBe((ok.body?.run as Run).run_id)
  })

  it('a frame that is not a request envelope gets INVALID_REQUEST, with its id whenever the id is readable', async () => {
    const before = await state()
    const w = await open(DELEGATE_PROTOCOL)
    const cases: Array<[unknown, number | null]> = [
      [[1, 2, 3], null],
      ['delegate', null],
      [{ type: 'delegate', body: delegateBody() }, null],
      [{ id: -1, type: 'delegate', body: delegateBody() }, null],
      [{ id: 1.5, type: 'delegate', body: delegateBody() }, null],
      [{ id: 2 ** 32, type: 'delegate', body: delegateBody() }, null],
      [{ id: 1 }, 1],
      [{ id: 2, type: 'delegate' }, 2],
      [{ id: 3, type: 'delegate', body: [] }, 3],
      [{ id: 4, type: 'delegate', body: 'input' }, 4],
      [{ id: 5, type: 7, body: {} }, 5],
      [{ id: 6, type: 'delegate', body: delegateBody(), extra: true }, 6],
      [{ id: 7, type: 'x'.repeat(33), body: {} }, 7]
    ]
    for (const [frame, id] of cases) {
      const f = await w.call(frame)
      expect(f, JSON.stringify(frame).slice(0, 80)).toMatchObject({ id, ok: false, error: { code: 'INVALID_REQUEST' } })
    }
    expect(await state()).toBe(before)
  })

  it('a body that breaks the schema or has wrong types gets INVALID_REQUEST naming the schema, on every protocol', async () => {
    const before = await state()
    const d = await open(DELEGATE_PROTOCOL)
    const bodies: Array<Record<string, unknown>> = [
      { to_agent: B.agentId, capability: REVIEW, input: {}, parent_run: null },
      delegateBody({ task_id: 42 }),
      delegateBody({ task_id: 'has spaces' }),
      delegateBody({ capability: 'cap:code-review@2.1.0' }),
      delegateBody({ capability: { capability_id: 'cap:code-review' } }),
      delegateBody({ input: [1, 2] }),
      delegateBody({ input: null }),
      delegateBody({ to_agent: 'not-an-agent' }),
      delegateBody({ parent_run: 5 }),
      delegateBody({ idempotency_key: 'has spaces' }),
      delegateBody({ authorized: ['nobody'] }),
      delegateBody({ delegator: A.agentId })
    ]
    let id = 100
    for (const body of bodies) {
      const f = await d.call({ id: ++id, type: 'delegate', body })
      expect(f, JSON.stringify(body).slice(0, 120)).toMatchObject({ id, ok: false, error: { code: 'INVALID_REQUEST', details: { schema: 'aap:runs#/definitions/DelegateRequest' } } })
    }
    const c = await open(CONTROL_PROTOCOL)
    const control: Array<[string, Record<string, unknown>]> = [
      ['get_run', {}],
      ['get_run', { run_id: 7 }],
      ['resume', { run_id: `${B.agentId}:abc` }],
      ['resume', { run_id: `${B.agentId}:abc`, resolution: 'yes' }],
      ['cancel', { run_id: `${B.agentId}:abc`, reason: 12 }],
      ['handoff', { run_id: `${B.agentId}:abc`, to_agent: C.agentId }]
    ]
    for (const [type, body] of control) {
      const f = await c.call({ id: ++id, type, body })
      expect(f, `${type} ${JSON.stringify(body)}`).toMatchObject({ id, ok: false, error: { code: 'INVALID_REQUEST' } })
    }
    expect(await state()).toBe(before)
  })

  it('an input over RUN_INPUT_MAX_BYTES inside a legal frame gets INVALID_REQUEST and creates no run', async () => {
    const before = await state()
    const w = await open(DELEGATE_PROTOCOL)
    const big = { blob: 'x'.repeat(RUN_INPUT_MAX_BYTES) }
    const f = await w.call({ id: 1, type: 'delegate', body: delegateBody({ input: big }) })
    expect(f).toMatchObject({ id: 1, ok: false, error: { code: 'INVALID_REQUEST', details: { reason: 'oversized' } } })
    expect(await state()).toBe(before)
    // the caller refuses it before it is sent, with the same code
    await rejectsWith(A.delegate({ to_agent: B.agentId, task_id: 'task-big', capability: REVIEW, input: big }), 'INVALID_REQUEST')
  })

  it('unknown request types get INVALID_REQUEST on every protocol, including names that exist on Object.prototype', async () => {
    const before = await state()
    const cases: Array<[string, string]> = [
      [DELEGATE_PROTOCOL, 'resume'], [DELEGATE_PROTOCOL, '__proto__'], [DELEGATE_PROTOCOL, 'constructor'],
      [CONTROL_PROTOCOL, 'delegate'], [CONTROL_PROTOCOL, 'toString'], [HANDOFF_PROTOCOL, 'get_run']
    ]
    let id = 0
    for (const [protocol, type] of cases) {
      const w = await open(protocol)
      const f = await w.call({ id: ++id, type, body: {} })
      expect(f, `${protocol} ${type}`).toMatchObject({ id, ok: false, error: { code: 'INVALID_REQUEST', details: { reason: 'unknown_type' } } })
    }
    expect(await state()).toBe(before)
  })

  it('a frame over DELEGATE_MAX_FRAME_BYTES is refused from its length prefix alone, and the responder closes the stream', async () => {
    const before = await state()
    const w = await open(DELEGATE_PROTOCOL)
    w.write(lengthPrefix(DELEGATE_MAX_FRAME_BYTES + 1))
    const f = await w.next()
    expect(f).toMatchObject({ id: null, ok: false, error: { code: 'INVALID_REQUEST', details: { reason: 'oversized', max_frame_bytes: DELEGATE_MAX_FRAME_BYTES } } })
    await w.ended
    // a whole oversized frame, body and all, is refused the same way
    const w2 = await open(DELEGATE_PROTOCOL)
    w2.write(rawFrame(JSON.stringify({ id: 1, type: 'delegate', body: delegateBody({ input: { pad: 'y'.repeat(DELEGATE_MAX_FRAME_BYTES) } }) })))
    expect(await w2.next()).toMatchObject({ id: null, ok: false, error: { code: 'INVALID_REQUEST', details: { reason: 'oversized' } } })
    await w2.ended
    expect(await state()).toBe(before)
  })

  it('a length prefix longer than MAX_LENGTH_PREFIX_BYTES is refused as a bad prefix', async () => {
    const w = await open(DELEGATE_PROTOCOL)
    w.write(new Uint8Array(MAX_LENGTH_PREFIX_BYTES + 1).fill(0x80))
    expect(await w.next()).toMatchObject({ id: null, ok: false, error: { code: 'INVALID_REQUEST', details: { reason: 'bad_prefix' } } })
    await w.ended
  })

  it('a truncated frame (the stream ends inside it) gets an error frame and the stream is closed', async () => {
    const before = await state()
    const w = await open(DELEGATE_PROTOCOL)
    const whole = rawFrame(JSON.stringify({ id: 1, type: 'delegate', body: await ticketedBody() }))
    // one good request first: it is answered even though the stream then ends mid-frame
    w.write(whole)
    w.write(whole.subarray(0, whole.byteLength - 10))
    await w.closeWrite()
    // two frames, in either order: the answer to request 1, and the stream-level error
    const got = [await w.next(), await w.next()]
    const first = got.find(f => f.id === 1)
    expect(first?.ok).toBe(true)
    expect(got.find(f => f.id === null)).toMatchObject({ ok: false, error: { code: 'INVALID_REQUEST', details: { reason: 'truncated' } } })
    await w.ended
    // the handler finishes at once: the run may be completed before this line runs, so its state is read
    const made = (first?.body?.run as Run).run_id
    await until(async () => (await B.runs.store.get(made))?.state === 'completed', 'the good request\'s run completed')
    // only the complete request made a run
    const runs = (await state()).split('\n').filter(l => l !== '' && !before.includes(l))
    expect(runs.filter(l => l.includes((first?.body?.run as Run).run_id)).length).toBeGreaterThan(0)
    expect(new Set(runs.map(l => l.split(' ')[1])).size).toBe(1)
  })

  it('a stream that ends, or stalls, right after a length prefix is a truncated frame too', async () => {
    // the prefix alone: the frame has started, though none of its body has come
    const ended = await open(CONTROL_PROTOCOL)
    ended.write(Uint8Array.from([100]))
    await ended.closeWrite()
    expect(await ended.next()).toMatchObject({ id: null, ok: false, error: { code: 'INVALID_REQUEST', details: { reason: 'truncated' } } })
    await ended.ended
    const stalled = await open(CONTROL_PROTOCOL)
    stalled.write(Uint8Array.from([100]))
    // FRAME_COMPLETION_TIMEOUT_MS later
    expect(await stalled.next()).toMatchObject({ id: null, ok: false, error: { code: 'INVALID_REQUEST', details: { reason: 'truncated' } } })
    await stalled.ended
  })

  it('a stream the caller closes cleanly is answered and then closed by the responder', async () => {
    const w = await open(CONTROL_PROTOCOL)
    w.request({ id: 1, type: 'get_run', body: { run_id: `${B.agentId}:none` } })
    await w.closeWrite()
    expect(await w.next()).toMatchObject({ id: 1, ok: false, error: { code: 'RUN_NOT_FOUND' } })
    await w.ended
    await w.closed
  })

  it('unknown run ids get RUN_NOT_FOUND for every control request, raw and through the API', async () => {
    const before = await state()
    const w = await open(CONTROL_PROTOCOL)
    const ids = [`${B.agentId}:doesnotexist`, `${A.agentId}:someone-elses`, 'no-colon-at-all']
    let id = 0
    for (const runId of ids) {
      const requests: Array<[string, Record<string, unknown>]> = [
        ['get_run', { run_id: runId }],
        ['block', { run_id: runId, reason: 'r', checkpoint_id: 'cp' }],
        ['resume', { run_id: runId, resolution: {} }],
        ['cancel', { run_id: runId }],
        ['handoff', { run_id: runId, to_agent: C.agentId, context: {} }]
      ]
      for (const [type, body] of requests) {
        const f = await w.call({ id: ++id, type, body })
        expect(f, `${type} ${runId}`).toMatchObject({ id, ok: false, error: { code: 'RUN_NOT_FOUND' } })
      }
    }
    await rejectsWith(A.getRun(`${B.agentId}:doesnotexist`), 'RUN_NOT_FOUND')
    await rejectsWith(A.resume(`${B.agentId}:doesnotexist`, {}), 'RUN_NOT_FOUND')
    await rejectsWith(A.getRun('not-a-run'), 'RUN_NOT_FOUND')
    expect(await state()).toBe(before)
  })

  it('a resume (or cancel, block, handoff) from a peer that is neither delegator nor authorized gets UNAUTHORIZED; the run stays blocked', async () => {
    const blocked = nextEvent(B, e => e.type === 'run.blocked' && e.correlation_id === 'task-wrong-peer')
    const run = await A.delegate({ to_agent: B.agentId, task_id: 'task-wrong-peer', capability: REVIEW, input: { block: true } })
    await blocked
    const before = await state()
    await rejectsWith(C.resume(run.run_id, { approved: true }), 'UNAUTHORIZED')
    await rejectsWith(C.cancel(run.run_id), 'UNAUTHORIZED')
    await rejectsWith(C.handoff(run.run_id, C.agentId, {}), 'UNAUTHORIZED')
    const w = await open(CONTROL_PROTOCOL, B, C)
    expect(await w.call({ id: 1, type: 'resume', body: { run_id: run.run_id, resolution: { forged: true } } }))
      .toMatchObject({ id: 1, ok: false, error: { code: 'UNAUTHORIZED' } })
    expect(await state()).toBe(before)
    expect((await A.getRun(run.run_id)).state).toBe('blocked')
    // the delegator still can
    const done = nextEvent(B, e => e.type === 'run.completed' && e.run_id === run.run_id)
    await A.resume(run.run_id, { approved: true })
    expect((await done).payload.output).toEqual({ resolution: { approved: true } })
  })

  it('a block without checkpoint_id (missing or empty) is refused and the run keeps running', async () => {
    const run = await A.delegate({ to_agent: B.agentId, task_id: 'task-no-cp', capability: REVIEW, input: { hold: true } })
    const before = await state()
    const w = await open(CONTROL_PROTOCOL)
    expect(await w.call({ id: 1, type: 'block', body: { run_id: run.run_id, reason: 'r' } }))
      .toMatchObject({ id: 1, ok: false, error: { code: 'INVALID_REQUEST', details: { schema: 'aap:runs#/definitions/BlockRequest' } } })
    expect(await w.call({ id: 2, type: 'block', body: { run_id: run.run_id, reason: 'r', checkpoint_id: '' } }))
      .toMatchObject({ id: 2, ok: false, error: { code: 'INVALID_REQUEST' } })
    await rejectsWith(A.block(run.run_id, 'r', ''), 'INVALID_REQUEST')
    await rejectsWith(B.block(run.run_id, 'r', ''), 'INVALID_REQUEST')
    expect(await state()).toBe(before)
    expect((await A.getRun(run.run_id)).state).toBe('running')
    const failed = nextEvent(B, e => e.type === 'run.failed' && e.run_id === run.run_id)
    await A.cancel(run.run_id)
    await failed
  })

  it('a handoff of a terminal run gets INVALID_TRANSITION and creates nothing on the receiver', async () => {
    const done = nextEvent(B, e => e.type === 'run.completed' && e.correlation_id === 'task-terminal')
    const run = await A.delegate({ to_agent: B.agentId, task_id: 'task-terminal', capability: REVIEW, input: {} })
    await done
    const before = await state()
    await rejectsWith(A.handoff(run.run_id, C.agentId, { why: 'too late' }), 'INVALID_TRANSITION')
    const w = await open(CONTROL_PROTOCOL)
    expect(await w.call({ id: 1, type: 'handoff', body: { run_id: run.run_id, to_agent: C.agentId, context: {} } }))
      .toMatchObject({ id: 1, ok: false, error: { code: 'INVALID_TRANSITION' } })
    expect(await state()).toBe(before)
  })

  it('a handoff sent to the receiver by anyone but the old run\'s executor gets UNAUTHORIZED and creates nothing', async () => {
    const run = await A.delegate({ to_agent: B.agentId, task_id: 'task-forged-handoff', capability: REVIEW, input: { hold: true } })
    const before = await state()
    const w = await open(HANDOFF_PROTOCOL, C, A)
    const forged = {
      to_agent: C.agentId,
      from_run: { run_id: run.run_id, agent_id: B.agentId },
      task_id: 'task-forged-handoff',
      capability: REVIEW,
      input: {},
      context: { forged: true },
      delegator: A.agentId,
      authorized: [],
      parent_run: null
    }
    expect(await w.call({ id: 1, type: 'handoff', body: forged })).toMatchObject({ id: 1, ok: false, error: { code: 'UNAUTHORIZED' } })
    // naming itself as the old executor does not help: the run id names B
    expect(await w.call({ id: 2, type: 'handoff', body: { ...forged, from_run: { run_id: run.run_id, agent_id: A.agentId } } }))
      .toMatchObject({ id: 2, ok: false, error: { code: 'UNAUTHORIZED' } })
    expect(await state()).toBe(before)
    await A.cancel(run.run_id)
  })

  it('a stalled peer (its handler never answers): the caller gets AGENT_NOT_FOUND naming the timeout, and no run exists', async () => {
    const asked: string[] = []
    B.runs.setPolicy(async ({ task_id: taskId, signal }) => {
      asked.push(taskId)
      // never answers while the request lives
      await new Promise(resolve => { signal.addEventListener('abort', resolve, { once: true }) })
      return 'gave up'
    })
    try {
      const before = await state()
      const byResponse = await rejectsWith(A.delegate({ to_agent: B.agentId, task_id: 'task-stalled-1', capability: REVIEW, input: {} }, { responseTimeoutMs: 300 }), 'AGENT_NOT_FOUND')
      expect(byResponse.details).toMatchObject({ reason: 'timeout', timeout: 'response', limit_ms: 300 })
      const byCall = await rejectsWith(A.delegate({ to_agent: B.agentId, task_id: 'task-stalled-2', capability: REVIEW, input: {} }, { callTimeoutMs: 300 }), 'AGENT_NOT_FOUND')
      expect(byCall.details).toMatchObject({ reason: 'timeout', timeout: 'call' })
      expect(asked).toEqual(['task-stalled-1', 'task-stalled-2'])
      expect(await state()).toBe(before)
    } finally {
      B.runs.setPolicy(undefined)
    }
  })
})
