/**
 * Seeded generators of hostile input for the campaign: JSON of every kind,
 * one-place mutations of genuine requests (test/fixtures/fuzz.ts `mutate`),
 * and byte-level damage to encoded frames (flipped bits, inserted, deleted or
 * truncated bytes, length prefixes that lie).
 */
import { canonicalJson } from '../../src/identity/signing.ts'
import { encodeFrame } from '../../src/wire/framing.ts'
import { mutate, type Mutation } from '../../test/fixtures/fuzz.ts'
import { lengthPrefix, rawFrame } from '../../test/fixtures/raw-wire.ts'

type Rand = () => number

const int = (r: Rand, n: number): number => Math.floor(r() * n)
const KEYS = ['signature', 'seq', 'agent_id', 'run_id', 'issuer', 'origin', 'ticket', 'id', 'type', 'body', '__proto__', 'constructor', '']
const STRINGS = ['', ' ', '\u0000', '\ud800', '💥', 'null', '-1', '1e309', '../../etc', '%00', '<script>', 'a'.repeat(300)]

function randomString (r: Rand): string {
  if (r() < 0.3) return STRINGS[int(r, STRINGS.length)] ?? ''
  const n = int(r, r() < 0.05 ? 5_000 : 24)
  let s = ''
  for (let i = 0; i < n; i++) s += String.fromCharCode(r() < 0.9 ? 32 + int(r, 95) : int(r, 0xffff))
  return s
}

/** Any JSON value, up to depth 3. */
export function randomJson (r: Rand, depth = 0): unknown {
  switch (int(r, depth >= 3 ? 5 : 7)) {
    case 0: return null
    case 1: return r() < 0.5
    case 2: return [0, -1, 1, 2 ** 31, 2 ** 32, 2 ** 53, -(2 ** 53), Number.MAX_VALUE][int(r, 8)]
    case 3: return (r() - 0.5) * 10 ** int(r, 20)
    case 4: return randomString(r)
    case 5: return Array.from({ length: int(r, 6) }, () => randomJson(r, depth + 1))
    default: {
      const o: Record<string, unknown> = {}
      for (let i = int(r, 6); i > 0; i--) {
        Object.defineProperty(o, r() < 0.5 ? KEYS[int(r, KEYS.length)] ?? 'k' : randomString(r), { value: randomJson(r, depth + 1), enumerable: true, writable: true, configurable: true })
      }
      return o
    }
  }
}

export function randomMutation (r: Rand): Mutation {
  return {
    pick: int(r, 1_000),
    kind: (['replace', 'remove', 'add'] as const)[int(r, 3)] ?? 'replace',
    value: randomJson(r),
    key: r() < 0.5 ? KEYS[int(r, KEYS.length)] ?? 'k' : randomString(r)
  }
}

/** `value` mutated in one place so that it really differs (a forgery, not a copy of the genuine value). */
export function mutateChanged (r: Rand, value: unknown): unknown {
  const before = canonicalJson(value)
  for (let tries = 0; tries < 50; tries++) {
    const changed = mutate(value, randomMutation(r))
    if (canonicalJson(changed) !== before) return changed
  }
  return { ...(value as object), __forged__: true }
}

export function randomBytes (r: Rand, max: number): Uint8Array {
  const out = new Uint8Array(int(r, max + 1))
  for (let i = 0; i < out.length; i++) out[i] = int(r, 256)
  return out
}

export interface Seed { type: string, body: Record<string, unknown> }

/** One well-framed frame: a seed request mutated in 1 to 3 places, its envelope mutated, a seed as is, any JSON, or any bytes. */
export function framedFrame (r: Rand, seeds: Seed[]): Uint8Array {
  const seed = seeds[int(r, seeds.length)] ?? { type: 'x', body: {} }
  const id = int(r, 1_000_000)
  const k = r()
  if (k < 0.4) {
    let body: unknown = seed.body
    for (let i = 1 + int(r, 3); i > 0; i--) body = mutate(body, randomMutation(r))
    return encodeFrame({ id, type: seed.type, body })
  }
  if (k < 0.6) return encodeFrame(mutate({ id, type: seed.type, body: seed.body }, randomMutation(r)))
  if (k < 0.7) return encodeFrame({ id, type: seed.type, body: seed.body })
  if (k < 0.85) return encodeFrame(randomJson(r))
  return rawFrame(randomBytes(r, 96))
}

/** `bytes` damaged in 1 to 4 places. */
export function damage (r: Rand, bytes: Uint8Array): Uint8Array {
  let b = bytes
  for (let i = 1 + int(r, 4); i > 0; i--) {
    const at = int(r, b.length + 1)
    switch (int(r, 5)) {
      case 0: { // flip bits of one byte
        if (b.length > 0) { b = b.slice(); b[at % b.length] = (b[at % b.length] ?? 0) ^ (1 + int(r, 255)) }
        break
      }
      case 1: b = concat([b.subarray(0, at), randomBytes(r, 16), b.subarray(at)]); break
      case 2: b = concat([b.subarray(0, at), b.subarray(Math.min(b.length, at + 1 + int(r, 32)))]); break
      case 3: b = b.subarray(0, at); break
      default: // a length prefix that lies: too long, past the limit, or never ending
        b = concat([b.subarray(0, at), r() < 0.5 ? lengthPrefix(int(r, 2 ** 31)) : Uint8Array.from([0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01]), b.subarray(at)])
    }
  }
  return b
}

export function concat (parts: Uint8Array[]): Uint8Array {
  const out = new Uint8Array(parts.reduce((n, p) => n + p.byteLength, 0))
  let at = 0
  for (const p of parts) { out.set(p, at); at += p.byteLength }
  return out
}
