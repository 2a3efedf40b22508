/**
 * What a responder does with a hostile or busy caller (src/wire/responder.ts):
 * - a chunk of a hundred thousand empty frames (each a request that is none,
 *   answered with an error at once) is handled a bounded pass at a time, so
 *   the answers wait for the caller to read them instead of all being queued
 *   in one synchronous loop (before: 200,000 of them, 25 MB, an event loop
 *   held for 24 s in the reviewer's run);
 * - a frame whose end is still unread while the responder holds its reads
 *   (every pipelined request slot busy) is not called truncated: its timer
 *   runs only while the responder reads.
 */
import type { Stream } from '@libp2p/interface'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { MAX_PIPELINED_REQUESTS_PER_STREAM } from '../src/constants.ts'
import type { MeshNode } from '../src/node.ts'
import { encodeFrame, serve } from '../src/wire/rpc.ts'
import { RawWire } from './fixtures/raw-wire.ts'
import { startMesh, stopAll, until } from './helpers.ts'

const FLOOD = '/aap-test/flood/0.1.0'
const SLOW = '/aap-test/slow/0.1.0'
// empty frames in one chunk, below the backlog's bound (RESPONDER_BACKLOG_MAX_BYTES at 128 bytes a frame: a chunk of more
// is refused whole, wire-responder-backlog.test.ts) and with far more answers than a stream's window
const EMPTY_FRAMES = 6_000
const FRAME_TIMEOUT_MS = 300
const HANDLER_TIMEOUT_MS = 1_000

describe('a responder under a flood and under a full pipeline', () => {
  let nodes: MeshNode[] = []
  let A: MeshNode, B: MeshNode
  const unserve: Array<() => Promise<void>> = []
  let holds = 0
  let bufferAtHold = 0

  /** B's side of the stream A opened on `protocol`. */
  const inbound = (protocol: string): Stream | undefined =>
    B.host.getConnections(A.host.peerId).flatMap(c => c.streams).find(s => s.protocol === protocol && s.direction === 'inbound')

  beforeAll(async () => {
    nodes = await startMesh(2)
    ;[A, B] = nodes as [MeshNode, MeshNode]
    unserve.push(await serve(B.host, {
      protocol: FLOOD,
      maxFrameBytes: 1024,
      methods: { echo: { handle: async (body) => body as Record<string, unknown> } },
      onReadsHeld: () => {
        holds++
        bufferAtHold = Math.max(bufferAtHold, inbound(FLOOD)?.writeBufferLength ?? 0)
      }
    }))
    unserve.push(await serve(B.host, {
      protocol: SLOW,
      maxFrameBytes: 1024,
      frameTimeoutMs: FRAME_TIMEOUT_MS,
      handlerTimeoutMs: HANDLER_TIMEOUT_MS,
      // never answers: each request ends with the responder's TIMEOUT
      methods: { wait: { handle: async (_body, ctx) => new Promise<object>(resolve => { ctx.signal.addEventListener('abort', () => { resolve({}) }, { once: true }) }) } }
    }))
  })
  afterAll(async () => {
    for (const u of unserve) await u()
    await stopAll(nodes)
  })

  it('answers a chunk of empty frames a bounded pass at a time, holding its reads while the caller does not read', async () => {
    const wire = await RawWire.open(A.host, B.host.peerId, FLOOD)
    try {
      wire.stream.pause()
      wire.write(new Uint8Array(EMPTY_FRAMES))
      await until(() => holds > 0, 'the responder to hold its reads')
      // not all of them (each is about 110 bytes)
      expect(bufferAtHold).toBeLessThan(EMPTY_FRAMES * 110)
      wire.stream.resume()
      for (let i = 0; i < EMPTY_FRAMES; i++) {
        const f = await wire.next()
        if (i === 0 || i === EMPTY_FRAMES - 1) expect(f).toMatchObject({ id: null, ok: false, error: { code: 'INVALID_REQUEST' } })
      }
      // the stream still serves requests after the flood
      expect(await wire.call({ id: 1, type: 'echo', body: { after: 'flood' } })).toEqual({ id: 1, ok: true, body: { after: 'flood' } })
    } finally {
      wire.abort()
    }
  })

  it('does not call a frame truncated while its end waits unread behind a full pipeline', async () => {
    const wire = await RawWire.open(A.host, B.host.peerId, SLOW)
    try {
      const requests = Array.from({ length: MAX_PIPELINED_REQUESTS_PER_STREAM + 1 }, (_, i) => encodeFrame({ id: i + 1, type: 'wait', body: {} }))
      const last = requests.at(-1)!
      // every slot taken, and the start of one more request; its end comes at once, but the responder holds its reads
      const head = new Uint8Array(requests.slice(0, -1).reduce((n, r) => n + r.byteLength, 0) + 5)
      let at = 0
      for (const r of requests.slice(0, -1)) { head.set(r, at); at += r.byteLength }
      head.set(last.subarray(0, 5), at)
      wire.write(head)
      wire.write(last.subarray(5))
      // the slots free only at HANDLER_TIMEOUT_MS, well past FRAME_TIMEOUT_MS: then the last request is read and answered
      const answers = []
      for (let i = 0; i < requests.length; i++) answers.push(await wire.next())
      expect(answers.map(a => a.id).sort((x, y) => Number(x) - Number(y))).toEqual(requests.map((_, i) => i + 1))
      expect(answers.every(a => a.ok === false && a.error?.code === 'TIMEOUT')).toBe(true)
    } finally {
      wire.abort()
    }
  })
})
