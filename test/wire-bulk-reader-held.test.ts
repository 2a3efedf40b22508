/**
 * The bulk caller's frame reader (src/wire/bulk-frames.ts) holds what came
 * of a frame, not what its prefix announced: it used to reserve the whole
 * announced length (up to the session's frame limit, a MiB) as soon as the
 * prefix came, so a responder that announced a MiB and dripped it in made
 * each session hold a MiB. A frame that came whole in one message still gets
 * one buffer of its own length.
 */
import { Uint8ArrayList } from 'uint8arraylist'
import { describe, expect, it } from 'vitest'
import { lengthPrefix } from '../src/wire/framing.ts'
import { FrameReader } from '../src/wire/bulk-frames.ts'

const MIB = 1024 * 1024

describe('bulk frame reader memory', () => {
  it('holds about what came of a frame dripped in, not its announced length', () => {
    const reader = new FrameReader(MIB)
    const got: Uint8Array[] = []
    const out = (f: Uint8Array): void => { got.push(f) }
    reader.push(lengthPrefix(MIB), out)
    expect(reader.heldBytes).toBe(0)
    let came = 0
    for (const piece of [1, 10, 100, 1000, 10_000]) {
      reader.push(new Uint8Array(piece).fill(7), out)
      came += piece
      expect(reader.heldBytes, `after ${came} bytes`).toBeGreaterThanOrEqual(came)
      expect(reader.heldBytes, `after ${came} bytes`).toBeLessThan(2 * came)
    }
    // the rest, in pieces of 64 KiB: the frame comes whole, the whole of its own buffer, and nothing is held after
    while (came < MIB) {
      const n = Math.min(65_536, MIB - came)
      reader.push(new Uint8Array(n).fill(7), out)
      came += n
      if (came < MIB) expect(reader.heldBytes).toBeLessThan(2 * came)
    }
    expect(got).toHaveLength(1)
    const frame = got[0] as Uint8Array
    expect(frame.byteLength).toBe(MIB)
    expect(frame.buffer.byteLength).toBe(MIB)
    expect(frame.every(b => b === 7)).toBe(true)
    expect(reader.heldBytes).toBe(0)
  })

  it('reserves at once room for all that a message in pieces brings, and no more', () => {
    const reader = new FrameReader(MIB)
    const body = Uint8Array.from({ length: 200_000 }, (_, k) => k % 251)
    const got: Uint8Array[] = []
    const out = (f: Uint8Array): void => { got.push(f) }
    const inPieces = (from: number, to: number): Uint8ArrayList => {
      const list = new Uint8ArrayList()
      for (let at = from; at < to; at += 65_536) list.append(body.subarray(at, Math.min(at + 65_536, to)))
      return list
    }
    reader.push(Buffer.concat([lengthPrefix(body.byteLength), body.subarray(0, 10)]), out)
    expect(reader.heldBytes).toBe(10)
    // a message of three pieces: room for all of it is made once, before its first piece is copied
    reader.push(inPieces(10, 150_010), out)
    expect(reader.heldBytes).toBe(150_010)
    reader.push(inPieces(150_010, body.byteLength), out)
    expect(got).toHaveLength(1)
    expect(Buffer.from(got[0] as Uint8Array).equals(Buffer.from(body))).toBe(true)
    expect(reader.heldBytes).toBe(0)
  })

  it('gives a frame of no bytes as soon as its prefix comes, though the message ends there', () => {
    const reader = new FrameReader(MIB)
    const got: Uint8Array[] = []
    reader.push(lengthPrefix(0), (f) => { got.push(f) })
    expect(got.map(f => f.byteLength)).toEqual([0])
    expect(reader.heldBytes).toBe(0)
  })
})
