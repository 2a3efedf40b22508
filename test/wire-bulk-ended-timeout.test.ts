/**
 * Two ways a bulk request waited for its whole response timeout for nothing
 * (src/wire/bulk.ts):
 * - the responder ended its side of the stream: nothing more can be answered
 *   there, so the session fails what waits at once, and any new request, as
 *   AGENT_NOT_FOUND with reason closed (it ran into its timeout before, reason
 *   timeout);
 * - a method overran the responder's handler limit: the responder answers
 *   TIMEOUT (details.limit_ms) as the RPC responder does, and the requests
 *   queued behind it are answered (before, the limit was only a signal the
 *   method could ignore, and the stream waited on it for ever).
 * And a method whose typed error carries details JSON cannot carry (a
 * handler's bug) is answered INTERNAL: before, encoding its error frame threw
 * out of the answer, an unhandled rejection that ends the node.
 * Real libp2p nodes; the ending responder is a raw stream handler.
 */
import type { Stream, StreamMessageEvent } from '@libp2p/interface'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { InvalidRequestError } from '../src/errors.ts'
import { silentLogger } from '../src/logger.ts'
import type { MeshNode } from '../src/node.ts'
import { BulkSession, type BulkReply } from '../src/wire/bulk.ts'
import { FrameDecoder } from '../src/wire/rpc.ts'
import { serveTestBulk } from './fixtures/test-bulk.ts'
import { startMesh, stopAll } from './helpers.ts'

const ENDS = '/aap-test/bulk-ends/0.1.0'
const STUCK = '/aap-test/bulk-stuck/0.1.0'
const MAX_FRAME_BYTES = 4096
const HANDLER_LIMIT_MS = 300
// far past the handler's limit: a request that fails for its own timeout says reason "timeout", not what is checked
const RESPONSE_TIMEOUT_MS = 4_000

describe('a bulk session whose responder ended its side, and a bulk method past its limit', () => {
  let nodes: MeshNode[] = []
  let A: MeshNode, B: MeshNode
  let unserve: (() => Promise<void>) | undefined

  beforeAll(async () => {
    nodes = await startMesh(2)
    ;[A, B] = nodes as [MeshNode, MeshNode]
    // reads the first request, answers nothing, and ends its side of the stream
    await B.host.handle(ENDS, (stream: Stream) => {
      const frames = new FrameDecoder(MAX_FRAME_BYTES)
      stream.addEventListener('message', (evt: StreamMessageEvent) => {
        const chunk = evt.data instanceof Uint8Array ? evt.data : evt.data.subarray()
        if (frames.push(chunk).length > 0 && stream.writeStatus === 'writable') void stream.close()
      })
    })
    unserve = await serveTestBulk(B.host, STUCK, {
      // never settles, and does not heed its signal
      never: async () => new Promise<BulkReply>(() => {}),
      echo: async (body) => ({ body }),
      unencodable: async () => { throw new InvalidRequestError('bad', { n: 1n }) }
    }, { maxPipelined: 4, handlerTimeoutMs: HANDLER_LIMIT_MS })
  })
  afterAll(async () => {
    await unserve?.()
    await B.host.unhandle(ENDS)
    await stopAll(nodes)
  })

  it('fails the waiting request and any new one with reason closed once the responder ends its side', async () => {
    const session = await BulkSession.open(A.host, B.host.peerId, ENDS, { maxFrameBytes: MAX_FRAME_BYTES, log: silentLogger() })
    try {
      await expect(session.request('chunk', {}, RESPONSE_TIMEOUT_MS)).rejects.toMatchObject({ code: 'AGENT_NOT_FOUND', details: { reason: 'closed' } })
      await expect(session.request('chunk', {}, RESPONSE_TIMEOUT_MS)).rejects.toMatchObject({ code: 'AGENT_NOT_FOUND', details: { reason: 'closed' } })
    } finally {
      session.abort(new Error('test over'))
    }
  })

  it('answers a method that overruns its limit with TIMEOUT, and the request behind it', async () => {
    const session = await BulkSession.open(A.host, B.host.peerId, STUCK, { maxFrameBytes: MAX_FRAME_BYTES, log: silentLogger() })
    try {
      const stuck = session.request('never', {}, RESPONSE_TIMEOUT_MS)
      const behind = session.request('echo', { x: 1 }, RESPONSE_TIMEOUT_MS)
      await expect(stuck).rejects.toMatchObject({ code: 'TIMEOUT', details: { limit_ms: HANDLER_LIMIT_MS } })
      expect(await behind).toEqual({ body: { x: 1 } })
    } finally {
      session.abort(new Error('test over'))
    }
  })

  it('answers a method whose error JSON cannot carry with INTERNAL, and the request behind it', async () => {
    const session = await BulkSession.open(A.host, B.host.peerId, STUCK, { maxFrameBytes: MAX_FRAME_BYTES, log: silentLogger() })
    try {
      const bad = session.request('unencodable', {}, RESPONSE_TIMEOUT_MS)
      const behind = session.request('echo', { x: 2 }, RESPONSE_TIMEOUT_MS)
      await expect(bad).rejects.toMatchObject({ code: 'INTERNAL', message: 'internal error' })
      expect(await behind).toEqual({ body: { x: 2 } })
    } finally {
      session.abort(new Error('test over'))
    }
  })
})
