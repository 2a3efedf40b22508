/**
 * JSON nested thousands of levels deep: JSON.parse takes it, the node's own
 * encoders (JSON.stringify, the canonical form of a signed record) ran out of
 * stack on it, and a stranger's 12 KiB frame came back INTERNAL with an error
 * logged. A frame past FRAME_JSON_MAX_DEPTH is INVALID_REQUEST (too_deep) now,
 * and a local caller's too-deep input too.
 */
import type { Stream, StreamMessageEvent } from '@libp2p/interface'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { CONTROL_PROTOCOL, DELEGATE_PROTOCOL, EVENT_SIGNING_DOMAIN } from '../src/constants.ts'
import { sign } from '../src/identity/signing.ts'
import { EVENT_PAYLOAD_MAX_DEPTH } from '../src/runlog/constants.ts'
import { signEvent, verifyEventSync } from '../src/runlog/event.ts'
import { EventSigner } from '../src/runlog/signer.ts'
import { agentIdOf } from '../src/identity/identity.ts'
import { generateKeyPair } from '@libp2p/crypto/keys'
import type { MeshNode } from '../src/node.ts'
import { nestedDeeperThan } from '../src/util/json-depth.ts'
import { FRAME_JSON_MAX_DEPTH } from '../src/wire/network-constants.ts'
import { PAYLOAD_MAX_DEPTH } from '../src/runs/constants.ts'
import { RawWire, rawFrame } from './fixtures/raw-wire.ts'
import { rejectsWith, startLoopbackHost, startMesh, stopAll, until } from './helpers.ts'
import { FrameDecoder, RpcClient, encodeFrame } from '../src/wire/rpc.ts'
import type { MeshHost } from '../src/wire/host.ts'
import { dialAddrs } from '../src/wire/host.ts'

const ECHO = { capability_id: 'cap:echo-depth', version: '1.0.0' }

/** `{"a":[[[...]]]}` with `levels` arrays inside the object. */
function deepText (levels: number): string {
  return `{"a":${'['.repeat(levels)}${']'.repeat(levels)}}`
}

function deepValue (levels: number): Record<string, unknown> {
  let v: unknown = []
  for (let i = 1; i < levels; i++) v = [v]
  return { a: v }
}

describe('how deep a value nests', () => {
  it('counts objects and arrays, the outermost as level 1, and stops at the bound', () => {
    const v = JSON.parse('{"a":[1,{"b":[]}],"s":"[[[[{{{{"}') as unknown
    expect(nestedDeeperThan(v, 4)).toBe(false)
    expect(nestedDeeperThan(v, 3)).toBe(true)
    expect(nestedDeeperThan('[[[[', 0)).toBe(false)
    expect(nestedDeeperThan(null, 0)).toBe(false)
    expect(nestedDeeperThan({}, 0)).toBe(true)
    expect(nestedDeeperThan({}, 1)).toBe(false)
    // far past any stack: the walk stops at the bound
    expect(nestedDeeperThan(deepValue(50_000), FRAME_JSON_MAX_DEPTH)).toBe(true)
    expect(nestedDeeperThan(JSON.parse('{"__proto__":{"a":[[]]}}'), 3)).toBe(true)
  })
})

describe('deeply nested JSON on the wire and from a local caller', () => {
  let nodes: MeshNode[] = []
  let A: MeshNode, B: MeshNode

  beforeAll(async () => {
    nodes = await startMesh(2)
    ;[A, B] = nodes as [MeshNode, MeshNode]
    B.runs.handle(ECHO, async (ctx) => {
      if (ctx.input.block === true) return { resolution: await ctx.block('needs a deep answer', 'cp-deep') }
      return ctx.input.wrap === true ? { echoed: ctx.input } : ctx.input
    })
    await B.publishCard({ name: 'b', capabilities: [ECHO] })
  })
  afterAll(async () => { await stopAll(nodes) })

  it('a frame nested 6000 levels deep is answered INVALID_REQUEST too_deep under its id, and the stream goes on', async () => {
    const body = `{"to_agent":"${B.agentId}","task_id":"task-deep","capability":{"capability_id":"cap:echo-depth","version":"1.0.0"},"parent_run":null,"input":${deepText(6000)}}`
    const w = await RawWire.open(A.host, B.host.peerId, DELEGATE_PROTOCOL)
    try {
      w.write(rawFrame(`{"id":1,"type":"delegate","body":${body}}`))
      const f = await w.next()
      expect(f.ok).toBe(false)
      expect(f.error?.code).toBe('INVALID_REQUEST')
      expect(f.error?.details?.reason).toBe('too_deep')
      expect(f.id).toBe(1)
      // the same stream still answers: a well-formed frame after it gets its own answer
      w.write(rawFrame('{"id":2,"type":"no-such-type","body":{}}'))
      const g = await w.next()
      expect(g.id).toBe(2)
      expect(g.error?.code).toBe('INVALID_REQUEST')
    } finally {
      w.abort()
    }
  })

  it('an input at the payload bound is delegated, run and its output read back', async () => {
    const input = deepValue(PAYLOAD_MAX_DEPTH - 1)
    const run = await A.delegate({ to_agent: B.agentId, task_id: 'task-deep-ok', capability: ECHO, input })
    await until(async () => (await A.getRun(run.run_id)).state === 'completed', 'the run completes')
    expect((await A.getRun(run.run_id)).output).toEqual(input)
  })

  it('an output past the payload bound fails its run, which its delegator still reads (follow off)', async () => {
    const input = { ...deepValue(PAYLOAD_MAX_DEPTH - 1), wrap: true }
    const run = await A.delegate({ to_agent: B.agentId, task_id: 'task-deep-out', capability: ECHO, input }, { follow: false })
    await until(async () => (await B.runs.getRun(run.run_id)).state === 'failed', 'the run fails')
    const read = await A.getRun(run.run_id)
    expect(read.failure?.code).toBe('HANDLER_FAILED')
    expect(read.failure?.message).toMatch(/nested deeper/)
  })

  it('an input past the payload bound, though within the frame\'s, is INVALID_REQUEST too_deep at the executor too', async () => {
    const body = `{"to_agent":"${B.agentId}","task_id":"task-deep-mid","capability":{"capability_id":"cap:echo-depth","version":"1.0.0"},"parent_run":null,"input":${deepText(PAYLOAD_MAX_DEPTH + 1)}}`
    const w = await RawWire.open(A.host, B.host.peerId, DELEGATE_PROTOCOL)
    try {
      w.write(rawFrame(`{"id":1,"type":"delegate","body":${body}}`))
      const f = await w.next()
      expect(f.error?.code).toBe('INVALID_REQUEST')
      expect(f.error?.details?.reason).toBe('too_deep')
    } finally {
      w.abort()
    }
  })

  it('a resolution past the payload bound is refused by the caller and by the executor; the run stays blocked', async () => {
    const run = await A.delegate({ to_agent: B.agentId, task_id: 'task-deep-resume', capability: ECHO, input: { block: true } })
    await until(async () => (await B.runs.getRun(run.run_id)).state === 'blocked', 'the run blocks')
    const local = await rejectsWith(A.resume(run.run_id, deepValue(PAYLOAD_MAX_DEPTH + 1)), 'INVALID_REQUEST')
    expect(local.details?.reason).toBe('too_deep')
    // a caller that writes its own frames: the executor checks too
    const w = await RawWire.open(A.host, B.host.peerId, CONTROL_PROTOCOL)
    try {
      const f = await w.call({ id: 1, type: 'resume', body: { run_id: run.run_id, resolution: deepValue(PAYLOAD_MAX_DEPTH + 1) } })
      expect(f.error?.code).toBe('INVALID_REQUEST')
      expect(f.error?.details?.reason).toBe('too_deep')
    } finally {
      w.abort()
    }
    expect((await B.runs.getRun(run.run_id)).state).toBe('blocked')
    await A.resume(run.run_id, { ok: true })
    await until(async () => (await B.runs.getRun(run.run_id)).state === 'completed', 'the run completes')
  })

  it('an event whose payload is nested past EVENT_PAYLOAD_MAX_DEPTH is neither signed nor taken', async () => {
    const key = await generateKeyPair('Ed25519')
    const executor = agentIdOf(key)
    const unsigned = { run_id: `${executor}:${'a'.repeat(24)}`, correlation_id: 'task-deep-event', type: 'run.progress' as const, payload: deepValue(EVENT_PAYLOAD_MAX_DEPTH + 1), at: new Date().toISOString(), seq: 1, prev: null, executor }
    const signError = await rejectsWith(signEvent(key, unsigned), 'INVALID_REQUEST')
    expect(signError.details?.reason).toBe('too_deep')
    await expect(new EventSigner(key).sign(unsigned)).rejects.toMatchObject({ code: 'INVALID_REQUEST', details: { reason: 'too_deep' } })
    // signed by hand, as a hostile executor would: every node refuses it
    const forged = { ...unsigned, signature: await sign(key, EVENT_SIGNING_DOMAIN, unsigned) }
    expect(() => verifyEventSync(forged)).toThrow(/nested deeper/)
  })

  it('a local caller\'s input thousands of levels deep is INVALID_REQUEST too_deep, not INTERNAL', async () => {
    const err = await rejectsWith(A.delegate({ to_agent: B.agentId, task_id: 'task-deep-local', capability: ECHO, input: deepValue(20_000) }), 'INVALID_REQUEST')
    expect(err.details?.reason).toBe('too_deep')
  })
})

describe('an answer nested past the bound', () => {
  const PROTOCOL = '/aap-test/deep-answer/0.1.0'
  let a: MeshHost, b: MeshHost

  beforeAll(async () => {
    a = await startLoopbackHost()
    b = await startLoopbackHost()
    // answers "deep" with a body past FRAME_JSON_MAX_DEPTH, anything else with a flat one
    await b.handle(PROTOCOL, (stream: Stream) => {
      const frames = new FrameDecoder(1 << 20)
      stream.addEventListener('message', (evt: StreamMessageEvent) => {
        for (const f of frames.push(evt.data instanceof Uint8Array ? evt.data : evt.data.subarray())) {
          const req = JSON.parse(new TextDecoder().decode(f)) as { id: number, type: string }
          stream.send(encodeFrame({ id: req.id, ok: true, body: req.type === 'deep' ? deepValue(FRAME_JSON_MAX_DEPTH + 5) : { flat: true } }))
        }
      })
    })
    expect((await dialAddrs(a, b.getMultiaddrs().map(m => m.toString()))).length).toBe(1)
  })
  afterAll(async () => {
    await a.stop()
    await b.stop()
  })

  it('fails that one call with INVALID_REQUEST answer_too_deep (not the too_deep of a refused request); the session answers the next call', async () => {
    const client = new RpcClient(a, { protocol: PROTOCOL, maxFrameBytes: 1 << 20, maxStreamsPerPeer: 1 })
    const opts = { responseTimeoutMs: 10_000, callTimeoutMs: 10_000 }
    try {
      const [deep, flat] = await Promise.allSettled([client.call(b.peerId, 'deep', {}, opts), client.call(b.peerId, 'flat', {}, opts)])
      expect(deep.status).toBe('rejected')
      const err = (deep as PromiseRejectedResult).reason as { code: string, details?: Record<string, unknown> }
      expect(err.code).toBe('INVALID_REQUEST')
      expect(err.details?.reason).toBe('answer_too_deep')
      expect(flat).toEqual({ status: 'fulfilled', value: { flat: true } })
      expect(await client.call(b.peerId, 'flat', {}, opts)).toEqual({ flat: true })
    } finally {
      client.close()
    }
  })
})
