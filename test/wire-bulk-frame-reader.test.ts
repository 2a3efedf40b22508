/**
 * The bulk caller's frame reader (src/wire/bulk.ts): a message that comes in
 * pieces (yamux hands on a Uint8ArrayList whose pieces are Noise messages) is
 * read piece by piece, not joined first, and gives the same frames as the
 * same bytes in one piece, wherever the pieces cut the length prefixes and
 * the frames.
 */
import { Uint8ArrayList } from 'uint8arraylist'
import { describe, expect, it } from 'vitest'
import { lengthPrefix } from '../src/wire/framing.ts'
import { FrameReader } from '../src/wire/bulk-frames.ts'

/** Frames of these sizes, each byte of frame i equal to (i * 7 + offset) mod 256. */
function frames (sizes: number[]): Uint8Array[] {
  return sizes.map((n, i) => Uint8Array.from({ length: n }, (_, k) => (i * 7 + k) % 256))
}

function wire (fs: Uint8Array[]): Uint8Array {
  return Buffer.concat(fs.flatMap(f => [lengthPrefix(f.byteLength), f]))
}

function readAll (reader: FrameReader, messages: Array<Uint8Array | Uint8ArrayList>): Uint8Array[] {
  const out: Uint8Array[] = []
  for (const m of messages) reader.push(m, (f) => { out.push(f) })
  return out
}

describe('bulk frame reader', () => {
  const sent = frames([5, 0, 300, 70_000, 1, 200_000, 129])
  const bytes = wire(sent)

  it('reads a message in pieces as it reads the same bytes whole, whatever the cuts', () => {
    const whole = readAll(new FrameReader(1 << 20), [bytes])
    expect(whole.map(f => Buffer.from(f))).toEqual(sent.map(f => Buffer.from(f)))
    for (const piece of [1, 2, 3, 127, 128, 1000, 65_536]) {
      // the bytes as two messages, each a list of pieces of `piece` bytes
      const half = Math.floor(bytes.byteLength / 2)
      const messages = [bytes.subarray(0, half), bytes.subarray(half)].map(m => {
        const list = new Uint8ArrayList()
        for (let at = 0; at < m.byteLength; at += piece) list.append(m.subarray(at, Math.min(at + piece, m.byteLength)))
        return list
      })
      const got = readAll(new FrameReader(1 << 20), messages)
      expect(got.map(f => Buffer.from(f)), `pieces of ${piece}`).toEqual(sent.map(f => Buffer.from(f)))
    }
  })

  it('gives each frame a buffer of its own, not a view of a piece it was sent', () => {
    const list = new Uint8ArrayList(bytes.subarray(0, 10), bytes.subarray(10))
    const got = readAll(new FrameReader(1 << 20), [list])
    for (const f of got) {
      expect(f.byteOffset).toBe(0)
      expect(f.buffer.byteLength).toBe(f.byteLength)
    }
  })

  it('refuses a frame longer than its limit, even when the prefix is cut between pieces', () => {
    const big = lengthPrefix(5000)
    const list = new Uint8ArrayList(big.subarray(0, 1), big.subarray(1))
    expect(() => readAll(new FrameReader(4096), [list])).toThrow(/exceeds 4096 bytes/)
  })
})
