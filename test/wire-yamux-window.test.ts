/**
 * Yamux window updates at half the window (src/wire/yamux-window.ts), between
 * two real hosts over TCP: a bulk transfer many windows long still flows and
 * arrives whole, its window grown to at most YAMUX_MAX_STREAM_WINDOW_BYTES,
 * and a stream of small messages no longer draws one window update frame per
 * message, nor grows its window.
 */
import { createHash, randomBytes } from 'node:crypto'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import type { Stream, StreamMessageEvent } from '@libp2p/interface'
import { dialAddrs, listenAddrs, type MeshHost } from '../src/wire/host.ts'
import { YAMUX_MAX_STREAM_WINDOW_BYTES } from '../src/wire/network-constants.ts'
import { allowWindowGrowth, yamuxWindowStats } from '../src/wire/yamux-window.ts'
import { startLoopbackHost } from './helpers.ts'

const SINK = '/aap-test/yamux-sink/1.0.0'
/** The same sink, its streams left as libp2p makes them (no window growth). */
const PLAIN_SINK = '/aap-test/yamux-plain-sink/1.0.0'
const ECHO = '/aap-test/yamux-echo/1.0.0'
/** 32 x the 256 KiB initial window of a yamux stream. */
const BULK_BYTES = 8 * 1024 * 1024
const SMALL_MESSAGES = 200

const host = startLoopbackHost

function bytesOf (evt: StreamMessageEvent): Uint8Array {
  return evt.data instanceof Uint8Array ? evt.data : evt.data.subarray()
}

/** Resolve once `stream` drains (or at once when it need not). */
async function sendAll (stream: Stream, data: Uint8Array): Promise<void> {
  if (!stream.send(data)) await new Promise<void>(resolve => { stream.addEventListener('drain', () => { resolve() }, { once: true }) })
}

describe('yamux window updates at half the window', () => {
  let a: MeshHost
  let b: MeshHost
  /** Told what the sink received once the sender ends the stream. */
  let onReceived: (v: { bytes: number, sha: string }) => void = () => {}

  beforeAll(async () => {
    [a, b] = await Promise.all([host(), host()])
    const sink = (grow: boolean) => (stream: Stream): void => {
      if (grow) allowWindowGrowth(stream)
      const sha = createHash('sha256')
      let bytes = 0
      stream.addEventListener('message', (evt) => { const d = bytesOf(evt); bytes += d.byteLength; sha.update(d) })
      stream.addEventListener('remoteCloseWrite', () => { onReceived({ bytes, sha: sha.digest('hex') }) })
    }
    await b.handle(SINK, sink(true))
    await b.handle(PLAIN_SINK, sink(false))
    await b.handle(ECHO, (stream: Stream) => {
      stream.addEventListener('message', (evt) => { stream.send(bytesOf(evt)) })
    })
    expect((await dialAddrs(a, listenAddrs(b))).length).toBe(1)
  })

  afterAll(async () => {
    await Promise.all([a?.stop(), b?.stop()])
  })

  /** Send BULK_BYTES on a new stream of `protocol`; resolves with what the sink saw and what was sent. */
  async function bulk (protocol: string): Promise<{ got: { bytes: number, sha: string }, sent: string }> {
    const arrived = new Promise<{ bytes: number, sha: string }>(resolve => { onReceived = resolve })
    const stream = await a.dialProtocol(b.peerId, protocol, { signal: AbortSignal.timeout(10_000) })
    const sha = createHash('sha256')
    const chunk = 64 * 1024
    for (let off = 0; off < BULK_BYTES; off += chunk) {
      const data = randomBytes(chunk)
      sha.update(data)
      await sendAll(stream, data)
    }
    await stream.close({ signal: AbortSignal.timeout(10_000) })
    return { got: await arrived, sent: sha.digest('hex') }
  }

  it(`moves ${BULK_BYTES / 1024 / 1024} MiB, 32 windows, in one stream and every byte arrives; a stream marked for it grows its window`, async () => {
    const before = { ...yamuxWindowStats }
    const { got, sent } = await bulk(SINK)
    expect(got.bytes).toBe(BULK_BYTES)
    expect(got.sha).toBe(sent)
    // read as fast as it came: the receiver grew the stream's window past the initial 256 KiB, never past its ceiling
    expect(yamuxWindowStats.grown - before.grown).toBeGreaterThan(0)
    expect(yamuxWindowStats.largest).toBeGreaterThan(256 * 1024)
    expect(yamuxWindowStats.largest).toBeLessThanOrEqual(YAMUX_MAX_STREAM_WINDOW_BYTES)
  })

  it('a stream nobody marked keeps its window, however fast the sender sends', async () => {
    const before = { ...yamuxWindowStats }
    const { got, sent } = await bulk(PLAIN_SINK)
    expect(got.bytes).toBe(BULK_BYTES)
    expect(got.sha).toBe(sent)
    // updates went out (the window was used many times over), and none grew it
    expect(yamuxWindowStats.sent - before.sent).toBeGreaterThan(BULK_BYTES / (256 * 1024))
    expect(yamuxWindowStats.grown).toBe(before.grown)
  })

  it(`answers ${SMALL_MESSAGES} small messages with far fewer window updates than messages`, async () => {
    const stream = await a.dialProtocol(b.peerId, ECHO, { signal: AbortSignal.timeout(10_000) })
    const before = { ...yamuxWindowStats }
    for (let i = 0; i < SMALL_MESSAGES; i++) {
      const echoed = new Promise<Uint8Array>(resolve => { stream.addEventListener('message', (evt) => { resolve(bytesOf(evt)) }, { once: true }) })
      const msg = new TextEncoder().encode(`message ${i}`)
      await sendAll(stream, msg)
      expect(new TextDecoder().decode(await echoed)).toBe(`message ${i}`)
    }
    await stream.close({ signal: AbortSignal.timeout(10_000) })
    // both ends received SMALL_MESSAGES data frames (a's echo, b's request): each would have drawn an update
    const deferred = yamuxWindowStats.deferred - before.deferred
    const sent = yamuxWindowStats.sent - before.sent
    expect(deferred).toBeGreaterThanOrEqual(2 * SMALL_MESSAGES - 4)
    // the few sent are new streams' ACKs (this one and any a background protocol opened meanwhile)
    expect(sent).toBeLessThan(SMALL_MESSAGES / 10)
    // and no window grew: small messages never use half a window
    expect(yamuxWindowStats.grown).toBe(before.grown)
  })
})
