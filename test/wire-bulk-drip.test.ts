/**
 * "The responder closes a stream that carries no whole request for
 * STREAM_IDLE_TIMEOUT_MS, a request frame that never completes included"
 * (protocols/artifact.md). Any byte re-armed the bulk responder's idle timer,
 * so a peer that dripped one byte of an unfinished frame now and then kept
 * the stream, and the answers it never read (a chunk each), for good. Found
 * by session 45's artifact review.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import type { MeshNode } from '../src/node.ts'
import { serveTestBulk } from './fixtures/test-bulk.ts'
import { encodeFrame } from '../src/wire/rpc.ts'
import { startMesh, stopAll, until } from './helpers.ts'

const BULK = '/aap-test/bulk-drip/0.1.0'
const CHUNK_BYTES = 2 * 1024 * 1024
const IDLE_MS = 300
const DRIP_MS = 100

describe('a bulk stream fed one byte of an unfinished frame at a time', () => {
  let nodes: MeshNode[] = []
  let A: MeshNode, B: MeshNode
  let unserve: (() => Promise<void>) | undefined
  let asked = 0

  beforeAll(async () => {
    nodes = await startMesh(2)
    ;[A, B] = nodes as [MeshNode, MeshNode]
    unserve = await serveTestBulk(B.host, BULK, {
      chunk: async () => { asked++; return { body: { bytes: CHUNK_BYTES }, data: new Uint8Array(CHUNK_BYTES) } }
    }, { maxPipelined: 4, handlerTimeoutMs: 5_000, idleTimeoutMs: IDLE_MS })
  })
  afterAll(async () => {
    await unserve?.()
    await stopAll(nodes)
  })

  it('is closed once no whole request came for the idle limit', async () => {
    const stream = await A.host.dialProtocol(B.host.peerId, BULK, { signal: AbortSignal.timeout(5_000) })
    // never reads the 2 MiB answer
    stream.pause()
    stream.send(encodeFrame({ id: 1, type: 'chunk', body: {} }))
    await until(() => asked === 1, 'the responder to answer')
    // a frame of 900 bytes announced, then one byte of it every DRIP_MS, far more often than the idle limit
    stream.send(new Uint8Array([0x84, 0x07]))
    let dripped = 0
    const drip = setInterval(() => {
      if (stream.writeStatus !== 'writable') return
      stream.send(new Uint8Array([0x20]))
      dripped++
    }, DRIP_MS)
    try {
      // idle, then the close's own limit (STREAM_CLOSE_TIMEOUT_MS): the stream ends while the drip goes on
      await until(() => stream.status !== 'open', 'the responder to close the stream', 15_000)
    } finally {
      clearInterval(drip)
    }
    expect(dripped).toBeGreaterThan(IDLE_MS / DRIP_MS)
  }, 30_000)
})
