/**
 * The wire's limits, each named in src/constants.ts and enforced: frame size
 * per protocol, pipelined requests per stream, the partial-frame and handler
 * budgets of a responder, and the caller's dial, response and whole-call
 * timeouts. Real libp2p nodes; the test protocols are served with the same
 * serve()/RpcClient the aap protocols use.
 */
import { connect, createServer, type Server, type Socket } from 'node:net'
import { generateKeyPair } from '@libp2p/crypto/keys'
import { peerIdFromPrivateKey } from '@libp2p/peer-id'
import { multiaddr } from '@multiformats/multiaddr'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import * as C from '../src/constants.ts'
import { createMeshNode, type MeshNode } from '../src/node.ts'
import { RUN_FAILURE_CODES } from '../src/runlog/types.ts'
import { schema } from '../src/schema/validate.ts'
import { RpcClient, serve, type RpcHost, type RpcMethod } from '../src/wire/rpc.ts'
import common from '../protocols/common.schema.json' with { type: 'json' }
import runs from '../protocols/runs.schema.json' with { type: 'json' }
import { RawWire, lengthPrefix, rawFrame } from './fixtures/raw-wire.ts'
import { rejectsWith, startMesh, stopAll, until } from './helpers.ts'

const SLOW = '/aap-test/slow/0.1.0'
const ECHO = '/aap-test/echo/0.1.0'

describe('the schemas and the constants state the same limits', () => {
  it('string limits of runs and errors match their constants', () => {
    const d = common.definitions
    expect(d.TaskId.maxLength).toBe(C.TASK_ID_MAX_CHARS)
    expect(d.RunId.maxLength).toBe(C.RUN_ID_MAX_CHARS)
    expect(d.CapabilityRef.properties.capability_id.maxLength).toBe(C.CAPABILITY_ID_MAX_CHARS)
    expect(d.CapabilityRef.properties.version.maxLength).toBe(C.CAPABILITY_VERSION_MAX_CHARS)
    expect(d.ErrorFrame.properties.message.maxLength).toBe(C.ERROR_MESSAGE_MAX_CHARS)
    const r = runs.definitions
    expect(r.Reason.maxLength).toBe(C.REASON_MAX_CHARS)
    expect(r.CheckpointId.maxLength).toBe(C.CHECKPOINT_ID_MAX_CHARS)
    expect(r.IdempotencyKey.maxLength).toBe(C.IDEMPOTENCY_KEY_MAX_CHARS)
    for (const def of [r.Run, r.DelegateRequest, r.HandoffRequest]) expect(def.properties.authorized.maxItems).toBe(C.RUN_AUTHORIZED_MAX_AGENTS)
    // a run's failure code is an error code, one of the run failure codes, or a code a newer node knows
    const failure = r.Run.properties.failure.anyOf[1] as { properties: { code: { anyOf: Array<{ enum?: string[] }> } } }
    expect(failure.properties.code.anyOf[1]?.enum).toEqual([...RUN_FAILURE_CODES])
    const isRunFailure = schema<unknown>('aap:runs#/definitions/Run/properties/failure')
    // a run a newer node failed with a code this one does not know stays readable (older nodes refused it: every get_run failed)
    expect(isRunFailure({ code: 'SOME_LATER_CODE', message: 'x' })).toBe(true)
    for (const code of ['lower_case', 'A'.repeat(65), '', 'HAS SPACE']) expect(isRunFailure({ code, message: 'x' })).toBe(false)
    // the validators enforce them
    const isTask = schema<string>('aap:common#/definitions/TaskId')
    expect(isTask('t'.repeat(C.TASK_ID_MAX_CHARS))).toBe(true)
    expect(isTask('t'.repeat(C.TASK_ID_MAX_CHARS + 1))).toBe(false)
    // a run input fits a delegate frame, with room for the envelope
    expect(C.RUN_INPUT_MAX_BYTES).toBeLessThan(C.DELEGATE_MAX_FRAME_BYTES)
  })
})

describe('wire limits between real nodes', () => {
  let nodes: MeshNode[] = []
  let A: MeshNode, B: MeshNode
  const gate = Promise.withResolvers<void>()
  let inFlight = 0
  let lateSettled: Array<[object, boolean]> = []
  const unserve: Array<() => Promise<void>> = []

  beforeAll(async () => {
    nodes = await startMesh(2)
    ;[A, B] = nodes as [MeshNode, MeshNode]
    const slowMethods: Record<string, RpcMethod> = {
      // never answers within any budget
      never: { handle: async () => new Promise(() => {}) },
      // answers only after the caller's budget and the responder's own have passed
      late: {
        handle: async (_body, ctx) => {
          await new Promise(resolve => { ctx.signal.addEventListener('abort', resolve, { once: true }) })
          return { late: true }
        },
        settled: (result, delivered) => { lateSettled.push([result, delivered]) }
      }
    }
    unserve.push(await serve(B.host, { protocol: SLOW, maxFrameBytes: 1024, methods: slowMethods, handlerTimeoutMs: 200, frameTimeoutMs: 200 }))
    unserve.push(await serve(B.host, {
      protocol: ECHO,
      maxFrameBytes: 1024,
      methods: {
        echo: { handle: async (body) => body as object },
        held: {
          handle: async (body) => {
            inFlight++
            try { await gate.promise } finally { inFlight-- }
            return body as object
          }
        }
      }
    }))
  })
  afterAll(async () => {
    gate.resolve()
    for (const u of unserve) await u()
    await stopAll(nodes)
  })

  it('each aap protocol refuses a frame over its own *_MAX_FRAME_BYTES, and accepts one of exactly that size', async () => {
    for (const [protocol, max] of [[C.CONTROL_PROTOCOL, C.CONTROL_MAX_FRAME_BYTES], [C.HANDOFF_PROTOCOL, C.HANDOFF_MAX_FRAME_BYTES], [C.DELEGATE_PROTOCOL, C.DELEGATE_MAX_FRAME_BYTES], [C.CARD_PROTOCOL, C.CARD_MAX_FRAME_BYTES]] as const) {
      const over = await RawWire.open(A.host, B.host.peerId, protocol)
      over.write(lengthPrefix(max + 1))
      expect(await over.next(), protocol).toMatchObject({ id: null, ok: false, error: { code: 'INVALID_REQUEST', details: { reason: 'oversized', max_frame_bytes: max } } })
      over.abort()
      // exactly max bytes: a frame, read and answered by id (its type is unknown)
      const head = '{"id":1,"type":"no_such_type","body":{"pad":"'
      const tail = '"}}'
      const exact = rawFrame(head + 'p'.repeat(max - head.length - tail.length) + tail)
      const at = await RawWire.open(A.host, B.host.peerId, protocol)
      at.write(exact)
      expect(await at.next(), protocol).toMatchObject({ id: 1, ok: false, error: { code: 'INVALID_REQUEST', details: { reason: 'unknown_type' } } })
      at.abort()
    }
  })

  it('pipelining: hundreds of concurrent calls share a few long-lived streams, each answer reaches its own call', async () => {
    const client = new RpcClient(A.host, { protocol: ECHO, maxFrameBytes: 1024 })
    try {
      const answers = await Promise.all(Array.from({ length: 500 }, async (_, i) => client.call(B.host.peerId, 'echo', { i })))
      expect(answers.map(a => a.i)).toEqual(Array.from({ length: 500 }, (_, i) => i))
      const streams = B.host.getConnections(A.host.peerId).flatMap(c => c.streams).filter(s => s.protocol === ECHO)
      expect(streams.length).toBeGreaterThan(0)
      expect(streams.length).toBeLessThanOrEqual(C.MAX_OUTBOUND_STREAMS_PER_PROTOCOL / 2)
    } finally {
      client.close()
    }
  })

  it(`a responder runs at most MAX_PIPELINED_REQUESTS_PER_STREAM (${C.MAX_PIPELINED_REQUESTS_PER_STREAM}) requests of one stream at once, and serves the rest after`, async () => {
    const w = await RawWire.open(A.host, B.host.peerId, ECHO)
    const total = C.MAX_PIPELINED_REQUESTS_PER_STREAM * 3
    // all in one write: one chunk of bytes holding three times the limit
    const frames = Array.from({ length: total }, (_, i) => rawFrame(JSON.stringify({ id: i + 1, type: 'held', body: { i } })))
    const all = new Uint8Array(frames.reduce((n, f) => n + f.byteLength, 0))
    let at = 0
    for (const f of frames) { all.set(f, at); at += f.byteLength }
    w.write(all)
    await until(() => inFlight === C.MAX_PIPELINED_REQUESTS_PER_STREAM, 'the first requests to reach the handler')
    // a round trip on another stream of the same connection: everything written before it has arrived
    const probe = new RpcClient(A.host, { protocol: ECHO, maxFrameBytes: 1024 })
    await probe.call(B.host.peerId, 'echo', { probe: true })
    probe.close()
    expect(inFlight).toBe(C.MAX_PIPELINED_REQUESTS_PER_STREAM)
    gate.resolve()
    const ids = new Set<number | null>()
    for (let i = 0; i < total; i++) ids.add((await w.next()).id)
    expect(ids.size).toBe(total)
    w.abort()
  })

  it('a responder whose handler overruns its budget answers TIMEOUT itself; a late result is reported as undelivered', async () => {
    const client = new RpcClient(A.host, { protocol: SLOW, maxFrameBytes: 1024 })
    try {
      lateSettled = []
      const err = await rejectsWith(client.call(B.host.peerId, 'late', {}, { responseTimeoutMs: 10_000 }), 'TIMEOUT')
      expect(err.details).toMatchObject({ limit_ms: 200 })
      await until(() => lateSettled.length === 1, 'the late result to be settled')
      expect(lateSettled).toEqual([[{ late: true }, false]])
      await rejectsWith(client.call(B.host.peerId, 'never', {}, { responseTimeoutMs: 10_000 }), 'TIMEOUT')
    } finally {
      client.close()
    }
  })

  it('a frame that starts and never finishes is cut off after the responder\'s frame budget, as truncated', async () => {
    const w = await RawWire.open(A.host, B.host.peerId, SLOW)
    w.write(lengthPrefix(100))
    w.write(new Uint8Array(10).fill(0x20))
    expect(await w.next()).toMatchObject({ id: null, ok: false, error: { code: 'INVALID_REQUEST', details: { reason: 'truncated' } } })
    await w.ended
  })

  it('the caller\'s response timeout and whole-call timeout each end a call to a silent responder, and say which fired', async () => {
    const client = new RpcClient(A.host, { protocol: SLOW, maxFrameBytes: 1024 })
    try {
      const a = await rejectsWith(client.call(B.host.peerId, 'never', {}, { responseTimeoutMs: 50, callTimeoutMs: 5_000 }), 'AGENT_NOT_FOUND')
      expect(a.details).toEqual({ reason: 'timeout', timeout: 'response', limit_ms: 50 })
      const b = await rejectsWith(client.call(B.host.peerId, 'never', {}, { responseTimeoutMs: 5_000, callTimeoutMs: 50 }), 'AGENT_NOT_FOUND')
      expect(b.details).toMatchObject({ reason: 'timeout', timeout: 'call' })
      // the caller's own signal is honoured too
      await rejectsWith(client.call(B.host.peerId, 'never', {}, { signal: AbortSignal.timeout(50) }), 'TIMEOUT')
    } finally {
      client.close()
    }
  })

  it('a call whose signal is already aborted fails TIMEOUT at once, also on a stream that is closing, with no unhandled rejection', async () => {
    const client = new RpcClient(A.host, { protocol: ECHO, maxFrameBytes: 1024 })
    const unhandled: unknown[] = []
    const onUnhandled = (err: unknown): void => { unhandled.push(err) }
    process.on('unhandledRejection', onUnhandled)
    try {
      await client.call(B.host.peerId, 'echo', { warm: true })
      // the session's stream is closing for writing, and the caller has given up already
      for (const s of A.host.getConnections(B.host.peerId).flatMap(c => c.streams).filter(s => s.protocol === ECHO)) void s.close().catch(() => {})
      const gaveUp = AbortSignal.abort()
      const results = await Promise.allSettled(Array.from({ length: 20 }, async () => client.call(B.host.peerId, 'echo', {}, { signal: gaveUp })))
      for (const r of results) {
        expect(r.status).toBe('rejected')
        if (r.status === 'rejected') expect(['TIMEOUT', 'AGENT_NOT_FOUND']).toContain((r.reason as { code: string }).code)
      }
      // a round trip later, nothing was left rejected and unawaited
      expect(await client.call(B.host.peerId, 'echo', { after: true })).toEqual({ after: true })
      await new Promise(resolve => setImmediate(resolve))
      expect(unhandled).toEqual([])
    } finally {
      process.off('unhandledRejection', onUnhandled)
      client.close()
    }
  })
})

describe('dial timeout', () => {
  let nodes: MeshNode[] = []
  let blackhole: Server
  const sockets: Socket[] = []

  beforeAll(async () => {
    nodes = await startMesh(1, { transport: 'tcp' })
    // accepts TCP connections and never says a word: the dial hangs in its handshake
    blackhole = createServer((socket) => { sockets.push(socket) })
    await new Promise<void>(resolve => { blackhole.listen(0, '127.0.0.1', resolve) })
  })
  afterAll(async () => {
    for (const s of sockets) s.destroy()
    await new Promise(resolve => { blackhole.close(resolve) })
    await stopAll(nodes)
  })

  it('a peer that accepts the connection and never completes the handshake: AGENT_NOT_FOUND naming the dial timeout', async () => {
    const A = nodes[0]!
    const address = blackhole.address()
    if (address === null || typeof address === 'string') throw new Error('no port')
    const ghost = peerIdFromPrivateKey(await generateKeyPair('Ed25519'))
    await A.host.peerStore.merge(ghost, { multiaddrs: [multiaddr(`/ip4/127.0.0.1/tcp/${address.port}`)] })
    const err = await rejectsWith(A.getRun(`${ghost.toString()}:r1`, { dialTimeoutMs: 300 }), 'AGENT_NOT_FOUND')
    // a dial that timed out is made once more within the call's budget (C.DIAL_ATTEMPTS_MAX in all)
    expect(err.details).toEqual({ reason: 'timeout', timeout: 'dial', limit_ms: 300, attempts: C.DIAL_ATTEMPTS_MAX })
    expect(err.message).toContain(`(${C.DIAL_ATTEMPTS_MAX} attempts)`)
    expect(sockets.length).toBe(C.DIAL_ATTEMPTS_MAX)
  })

  it('a dial that timed out once is made again, and the call is answered', async () => {
    const A = nodes[0]!
    const B = await createMeshNode({ listen: ['/ip4/127.0.0.1/tcp/0'] })
    await B.start()
    const port = Number(/\/tcp\/(\d+)/.exec(B.host.getMultiaddrs()[0]!.toString())?.[1])
    // A knows B only behind this proxy: its first connection hangs like the black hole, later ones reach B
    let accepted = 0
    const held: Socket[] = []
    const proxy = createServer((socket) => {
      accepted++
      held.push(socket)
      if (accepted === 1) return
      const upstream = connect(port, '127.0.0.1')
      held.push(upstream)
      socket.on('error', () => { upstream.destroy() })
      upstream.on('error', () => { socket.destroy() })
      socket.pipe(upstream).pipe(socket)
    })
    await new Promise<void>(resolve => { proxy.listen(0, '127.0.0.1', resolve) })
    try {
      const address = proxy.address()
      if (address === null || typeof address === 'string') throw new Error('no port')
      await A.host.peerStore.merge(B.host.peerId, { multiaddrs: [multiaddr(`/ip4/127.0.0.1/tcp/${address.port}`)] })
      // B itself answers: it holds no such run
      await rejectsWith(A.getRun(`${B.agentId}:r1`, { dialTimeoutMs: 500 }), 'RUN_NOT_FOUND')
      expect(accepted).toBe(2)
    } finally {
      for (const s of held) s.destroy()
      await new Promise(resolve => { proxy.close(resolve) })
      await B.stop()
    }
  })

  it('a peer whose address a lookup did not find: reported after a second lookup, answered when the second finds it', async () => {
    const A = nodes[0]!
    // nobody knows this peer, and A has no DHT peer to ask: each dial ends with no address
    const ghost = peerIdFromPrivateKey(await generateKeyPair('Ed25519'))
    const err = await rejectsWith(A.getRun(`${ghost.toString()}:r1`), 'AGENT_NOT_FOUND')
    expect(err.details).toMatchObject({ reason: 'unreachable', attempts: C.DIAL_ATTEMPTS_MAX })

    const B = await createMeshNode({ listen: ['/ip4/127.0.0.1/tcp/0'] })
    await B.start()
    // A's real dials; between the first (no address) and the second, A learns B's address, as a DHT
    // answer that came late would have brought it
    let dials = 0
    const host: RpcHost = {
      handle: A.host.handle.bind(A.host),
      unhandle: A.host.unhandle.bind(A.host),
      dialProtocol: async (...args: Parameters<RpcHost['dialProtocol']>) => {
        if (++dials === 2) await A.host.peerStore.merge(B.host.peerId, { multiaddrs: B.host.getMultiaddrs() })
        return A.host.dialProtocol(...args)
      }
    }
    const client = new RpcClient(host, { protocol: C.CONTROL_PROTOCOL, maxFrameBytes: C.CONTROL_MAX_FRAME_BYTES })
    try {
      // B answers: it holds no such run
      await rejectsWith(client.call(B.host.peerId, 'get_run', { run_id: `${B.agentId}:r1` }), 'RUN_NOT_FOUND')
      expect(dials).toBe(2)
      expect(client.stats.dialRetries).toBe(1)
    } finally {
      client.close()
      await B.stop()
    }
  })
})
