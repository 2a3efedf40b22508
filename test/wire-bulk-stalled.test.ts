/**
 * A bulk stream whose caller asked for bytes and stopped reading them: once
 * the stream has been idle for its limit, the responder sends what it can
 * and closes within STREAM_CLOSE_TIMEOUT_MS, else aborts the stream. It used
 * to wait for the unread answer to drain before the close's own time limit
 * began, so such a stream (and its chunk) stayed as long as the connection.
 * Real libp2p nodes; the protocol is served with serveBulk.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import type { MeshNode } from '../src/node.ts'
import { serveTestBulk } from './fixtures/test-bulk.ts'
import { encodeFrame } from '../src/wire/rpc.ts'
import { startMesh, stopAll, until } from './helpers.ts'

const BULK = '/aap-test/bulk-stalled/0.1.0'
const CHUNK_BYTES = 2 * 1024 * 1024

describe('a bulk stream whose caller stopped reading', () => {
  let nodes: MeshNode[] = []
  let A: MeshNode, B: MeshNode
  let unserve: (() => Promise<void>) | undefined
  let asked = 0

  beforeAll(async () => {
    nodes = await startMesh(2)
    ;[A, B] = nodes as [MeshNode, MeshNode]
    unserve = await serveTestBulk(B.host, BULK, {
      chunk: async () => { asked++; return { body: { bytes: CHUNK_BYTES }, data: new Uint8Array(CHUNK_BYTES) } }
    }, { maxPipelined: 4, handlerTimeoutMs: 5_000, idleTimeoutMs: 200 })
  })
  afterAll(async () => {
    await unserve?.()
    await stopAll(nodes)
  })

  it('is ended by the responder once idle, though its answer never drained', async () => {
    const stream = await A.host.dialProtocol(B.host.peerId, BULK, { signal: AbortSignal.timeout(5_000) })
    let closed = false
    stream.addEventListener('close', () => { closed = true })
    stream.pause()
    stream.send(encodeFrame({ id: 1, type: 'chunk', body: {} }))
    await until(() => asked === 1, 'the responder to answer')
    // idle (200 ms) and then the close's limit: the responder ends the stream the caller never read
    await until(() => closed, 'the responder to end the stalled stream')
    expect(stream.status).not.toBe('open')
  })
})
