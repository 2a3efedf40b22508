/**
 * The length-prefixed decoder that stops at the end of its buffer without
 * throwing (src/wire/lp-decoder.ts): for any frames cut at any places it
 * yields what the library's own decoder yields and throws where it throws,
 * with Noise's 2-byte prefix and with varints; a whole frame no longer costs
 * an exception; and a Noise channel between two real hosts carries messages
 * of every size across reads.
 */
import { randomBytes } from 'node:crypto'
import fc from 'fast-check'
import { describe, expect, it } from 'vitest'
import { LengthPrefixedDecoder, type LengthPrefixedDecoderInit } from '@libp2p/utils'
import type { Stream, StreamMessageEvent } from '@libp2p/interface'
import { lpDecoderStats, originalDecode } from '../src/wire/lp-decoder.ts'
import { dialAddrs, listenAddrs } from '../src/wire/host.ts'
import { startLoopbackHost } from './helpers.ts'

const uint16Prefix: LengthPrefixedDecoderInit = {
  // Noise's own: a big-endian uint16 read through a DataView, which throws a RangeError when short
  lengthDecoder: (data) => data instanceof Uint8Array ? new DataView(data.buffer, data.byteOffset, data.byteLength).getUint16(0) : data.getUint16(0),
  encodingLength: () => 2,
  maxDataLength: 65535
}

/** An unsigned LEB128 varint, as the library's default length prefix. */
function varintOf (n: number): Uint8Array {
  const out: number[] = []
  do {
    out.push((n & 0x7f) | (n > 0x7f ? 0x80 : 0))
    n = Math.floor(n / 128)
  } while (n > 0)
  return Uint8Array.from(out)
}

function prefixed (frames: Uint8Array[], kind: 'uint16' | 'varint'): Uint8Array {
  return Buffer.concat(frames.flatMap(f => {
    if (kind === 'varint') return [varintOf(f.byteLength), f]
    const p = Buffer.alloc(2)
    p.writeUInt16BE(f.byteLength)
    return [p, f]
  }))
}

/** Feed `bytes` cut at `cuts` to one decoder; what it yields, or the error it threw. */
function run (decode: (buf: Uint8Array) => ReturnType<LengthPrefixedDecoder['decode']>, bytes: Uint8Array, cuts: number[]): { frames: string[], error?: string } {
  const frames: string[] = []
  const points = [...new Set(cuts.map(c => c % (bytes.byteLength + 1)))].sort((a, b) => a - b)
  let at = 0
  try {
    for (const p of [...points, bytes.byteLength]) {
      for (const f of decode(bytes.subarray(at, p))) frames.push(Buffer.from(f.subarray()).toString('hex'))
      at = p
    }
  } catch (err) {
    return { frames, error: (err as Error).name }
  }
  return { frames }
}

function both (init: LengthPrefixedDecoderInit, bytes: Uint8Array, cuts: number[]): { patched: ReturnType<typeof run>, original: ReturnType<typeof run> } {
  const a = new LengthPrefixedDecoder(init)
  const b = new LengthPrefixedDecoder(init)
  return {
    patched: run(buf => a.decode(buf), bytes, cuts),
    original: run(buf => originalDecode.call(b as never, buf), bytes, cuts)
  }
}

const frameArb = fc.uint8Array({ minLength: 0, maxLength: 300 })

describe('length-prefixed decoder without the end-of-buffer exception', () => {
  it('yields the same frames as the library decoder for any cuts, uint16 and varint prefixes', () => {
    fc.assert(fc.property(fc.array(frameArb, { maxLength: 12 }), fc.array(fc.nat(), { maxLength: 10 }), fc.constantFrom('uint16', 'varint'), (frames, cuts, kind) => {
      const init = kind === 'uint16' ? uint16Prefix : {}
      const bytes = prefixed(frames, kind)
      const { patched, original } = both(init, bytes, cuts)
      expect(patched).toEqual(original)
      // every non-empty frame came out whole
      expect(patched.frames).toEqual(frames.filter(f => f.byteLength > 0).map(f => Buffer.from(f).toString('hex')))
    }), { numRuns: 300 })
  })

  it('throws where the library decoder throws: over-long frames and an over-full buffer', () => {
    fc.assert(fc.property(fc.integer({ min: 11, max: 5000 }), fc.array(fc.nat(), { maxLength: 4 }), (len, cuts) => {
      const init = { maxDataLength: 10, maxBufferSize: 64 }
      const bytes = Buffer.concat([varintOf(len), randomBytes(Math.min(len, 100))])
      const { patched, original } = both(init, bytes, cuts)
      expect(patched).toEqual(original)
      expect(patched.error).toBeDefined()
    }), { numRuns: 100 })
  })

  it('finishes a read of whole frames without calling the length decoder on an empty buffer', () => {
    let emptyCalls = 0
    const init: LengthPrefixedDecoderInit = {
      ...uint16Prefix,
      lengthDecoder: (data) => {
        if (data.byteLength === 0) emptyCalls++
        return uint16Prefix.lengthDecoder!(data)
      }
    }
    const d = new LengthPrefixedDecoder(init)
    const before = lpDecoderStats.stoppedEarly
    for (let i = 0; i < 50; i++) expect([...d.decode(prefixed([randomBytes(40), randomBytes(7)], 'uint16'))]).toHaveLength(2)
    expect(emptyCalls).toBe(0)
    expect(lpDecoderStats.stoppedEarly - before).toBe(50)
  })

  it('carries messages of every size over Noise between two real hosts', async () => {
    const ECHO = '/aap-test/lp-echo/1.0.0'
    const [a, b] = [await startLoopbackHost(), await startLoopbackHost()]
    try {
      await b.handle(ECHO, (stream: Stream) => {
        stream.addEventListener('message', (evt: StreamMessageEvent) => { stream.send(evt.data) })
        stream.addEventListener('remoteCloseWrite', () => { void stream.close() })
      })
      expect(await dialAddrs(a, listenAddrs(b))).toHaveLength(1)
      const stream = await a.dialProtocol(b.peerId, ECHO, { signal: AbortSignal.timeout(5000) })
      // past Noise's 65,519-byte plaintext limit, so a message spans frames and reads
      const sent = Buffer.concat([1, 100, 5000, 70_000, 200_000].map(n => randomBytes(n)))
      const got: Buffer[] = []
      let gotBytes = 0
      const done = new Promise<void>(resolve => {
        stream.addEventListener('message', (evt: StreamMessageEvent) => {
          const chunk = Buffer.from(evt.data instanceof Uint8Array ? evt.data : evt.data.subarray())
          got.push(chunk)
          gotBytes += chunk.byteLength
          if (gotBytes >= sent.byteLength) resolve()
        })
      })
      const before = lpDecoderStats.stoppedEarly
      if (!stream.send(sent)) await new Promise<void>(resolve => { stream.addEventListener('drain', () => { resolve() }, { once: true }) })
      await done
      expect(Buffer.concat(got).equals(sent)).toBe(true)
      expect(lpDecoderStats.stoppedEarly).toBeGreaterThan(before)
      await stream.close()
    } finally {
      await a.stop()
      await b.stop()
    }
  })
})
