/**
 * The bulk caller's frame reader (src/wire/bulk-frames.ts) against messages cut at random: tiny messages, large
 * ones, and messages that come as lists of tiny pieces (as yamux hands on Noise messages), cutting prefixes and
 * frames anywhere. Whatever the cuts, it gives the frames that were sent, and holds less than twice the bytes of
 * the frame being read that came so far (it grows its buffer as they come, not by the announced length). The
 * cuts come from a fixed set of seeds, so a failure repeats. From session 49's artifact review.
 */
import { Uint8ArrayList } from 'uint8arraylist'
import { describe, expect, it } from 'vitest'
import { lengthPrefix } from '../src/wire/framing.ts'
import { FrameReader } from '../src/wire/bulk-frames.ts'

const MIB = 1024 * 1024
const MAX_FRAME = MIB + 1024
const SEEDS = Array.from({ length: 24 }, (_, i) => i + 1)
/** Bytes of a frame that must have come before its buffer is held to twice them (a buffer starts at what came). */
const MEASURED_AFTER = 4096

/** A linear congruential generator: numbers in [0, 1), the same for the same seed. */
function rng (seed: number): () => number {
  let s = seed >>> 0
  return () => {
    s = (s * 1664525 + 1013904223) >>> 0
    return s / 2 ** 32
  }
}

/** Feed `wire` to a reader in messages cut by `r`; the frames read, and the worst ratio of held to came. */
function readCut (wire: Uint8Array, sizes: number[], r: () => number): { got: Uint8Array[], worst: number } {
  const reader = new FrameReader(MAX_FRAME)
  const got: Uint8Array[] = []
  // where each frame's body starts and ends on the wire
  const bodies: Array<[number, number]> = []
  let pos = 0
  for (const n of sizes) {
    const start = pos + lengthPrefix(n).byteLength
    bodies.push([start, start + n])
    pos = start + n
  }
  let at = 0
  let fi = 0
  let worst = 0
  while (at < wire.byteLength) {
    const n = Math.min(wire.byteLength - at, r() < 0.7 ? 1 + Math.floor(r() * 64) : Math.floor(r() * 200_000))
    const msg = wire.subarray(at, at + n)
    if (r() < 0.3) {
      const list = new Uint8ArrayList()
      for (let k = 0; k < msg.byteLength; k += 7) list.append(msg.subarray(k, Math.min(k + 7, msg.byteLength)))
      reader.push(list, f => { got.push(f) })
    } else {
      reader.push(msg, f => { got.push(f) })
    }
    at += n
    while (fi < bodies.length && at >= (bodies[fi]?.[1] ?? 0)) fi++
    const came = fi < bodies.length ? Math.max(0, at - (bodies[fi]?.[0] ?? 0)) : 0
    if (came > MEASURED_AFTER) worst = Math.max(worst, reader.heldBytes / came)
  }
  return { got, worst }
}

describe('bulk frame reader under random cuts', () => {
  it.each(SEEDS)('gives the frames sent and holds less than twice what came (seed %i)', (seed) => {
    const r = rng(seed)
    const sizes = Array.from({ length: 6 }, () => Math.floor(r() * MAX_FRAME))
    const frames = sizes.map((n, i) => new Uint8Array(n).fill(i + 1))
    const wire = Buffer.concat(frames.flatMap(f => [lengthPrefix(f.byteLength), f]))
    const { got, worst } = readCut(wire, sizes, r)
    expect(got.map(f => f.byteLength)).toEqual(sizes)
    got.forEach((f, i) => { expect(f.every(b => b === i + 1)).toBe(true) })
    expect(worst).toBeLessThanOrEqual(2)
  })
})
