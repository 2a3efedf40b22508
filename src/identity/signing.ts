/**
 * Canonical encoding and Ed25519 signatures for records that travel between
 * nodes (cards, events, delegation tickets). Each kind of record has its own
 * domain-separation prefix, so a signature over one kind never verifies as
 * another.
 */
import { createPrivateKey, createPublicKey, sign as signBytes, verify as verifyBytes, type KeyObject } from 'node:crypto'
import type { PrivateKey } from '@libp2p/interface'
import { fromString, toString } from 'uint8arrays'
import { EVENT_VERIFY_KEY_CACHE_ENTRIES } from '../constants.ts'
import { InvalidRequestError } from '../errors.ts'
import { makeRoom } from '../util/bounded.ts'
import { publicKeyOfAgent } from './identity.ts'

/**
 * JSON with object keys sorted at every level: the bytes every signer and
 * verifier agree on. Keys sort by UTF-16 code units (Array.prototype.sort),
 * strings and numbers are written as JSON.stringify writes them, undefined
 * members are left out, non-finite numbers throw INVALID_REQUEST
 * (`non_finite_number`).
 *
 * The serialization is V8's own (JSON.stringify with a replacer that hands it
 * each object with its keys in order), about twice as fast as building the
 * string here; every event is encoded this way when it is signed, hashed and
 * published. An object whose keys include array indices cannot be handed
 * over reordered (JavaScript lists integer keys first, in numeric order):
 * a value that holds one is written member by member instead.
 */
export function canonicalJson (value: unknown): string {
  try {
    return JSON.stringify(value, sortKeys)
  } catch (err) {
    if (err !== INDEX_KEYS) throw err
    return written(value) as string
  }
}

/** Thrown by sortKeys, caught by canonicalJson alone. */
const INDEX_KEYS = Symbol('index keys out of text order')

function sortKeys (_key: string, value: unknown): unknown {
  if (typeof value !== 'object' || value === null) {
    if (typeof value === 'number' && !Number.isFinite(value)) throw nonFinite()
    return value
  }
  if (Array.isArray(value)) return value
  const obj = value as Record<string, unknown>
  const keys = Object.keys(obj)
  let sorted = true
  for (let i = 1; i < keys.length; i++) {
    if ((keys[i - 1] as string) > (keys[i] as string)) {
      sorted = false
      break
    }
  }
  if (sorted) return obj
  if (keys.some(isIndexKey)) throw INDEX_KEYS
  keys.sort()
  // no prototype: a member named __proto__ (JSON.parse makes it an own one) stays a member
  const out = Object.create(null) as Record<string, unknown>
  for (const k of keys) out[k] = obj[k]
  return out
}

/** A key JavaScript orders as an array index (numeric, before every other key). */
function isIndexKey (k: string): boolean {
  return /^(?:0|[1-9]\d{0,9})$/.test(k) && Number(k) < 2 ** 32 - 1
}

/**
 * The canonical form built member by member: slower, for values the replacer
 * cannot reorder. It writes what JSON.stringify writes (found by session 46's
 * review: it wrote an array's undefined as nothing, `[1,,2]`, which is no
 * JSON, and a Date as `{}`): a toJSON stands for its value, a boxed primitive
 * for its primitive, an undefined, function or symbol member is left out and
 * is `null` in an array, as a hole is. Undefined when JSON.stringify writes nothing.
 */
function written (value: unknown): string | undefined {
  let v = value
  if (v !== null && typeof v === 'object' && typeof (v as { toJSON?: unknown }).toJSON === 'function') v = (v as { toJSON: () => unknown }).toJSON()
  if (v instanceof Number || v instanceof String || v instanceof Boolean) v = v.valueOf()
  if (v === undefined || typeof v === 'function' || typeof v === 'symbol') return undefined
  if (v === null || typeof v !== 'object') {
    if (typeof v === 'number' && !Number.isFinite(v)) throw nonFinite()
    return JSON.stringify(v)
  }
  // Array.from visits every index: map skips a hole (`new Array(3)`), and join writes it as nothing, `[1,,2]`
  if (Array.isArray(v)) return `[${Array.from(v as unknown[], x => written(x) ?? 'null').join(',')}]`
  const obj = v as Record<string, unknown>
  const members: string[] = []
  for (const k of Object.keys(obj).sort()) {
    const w = written(obj[k])
    if (w !== undefined) members.push(`${JSON.stringify(k)}:${w}`)
  }
  return `{${members.join(',')}}`
}

/** A number JSON cannot write (JSON.parse makes 1e400 Infinity): typed, so a peer's value is refused as its request's fault. */
function nonFinite (): InvalidRequestError {
  return new InvalidRequestError('a number is not finite (JSON has no Infinity or NaN)', { reason: 'non_finite_number' })
}

const enc = new TextEncoder()

export function signingBytes (domain: string, unsigned: unknown): Uint8Array {
  return enc.encode(domain + canonicalJson(unsigned))
}

/**
 * Node KeyObjects of the Ed25519 keys this process signs with, built once per
 * key: @libp2p/crypto's `key.sign` rebuilds one from the raw bytes on every
 * call, which costs more than the signature itself. `null`: not an Ed25519
 * key of the expected shape, signed through @libp2p/crypto.
 */
const keyObjects = new WeakMap<PrivateKey, KeyObject | null>()

/** The node:crypto key of an Ed25519 PrivateKey (built once per key), or undefined for other key types. */
export function signingKeyObject (key: PrivateKey): KeyObject | undefined {
  let ko = keyObjects.get(key)
  if (ko === undefined) {
    ko = key.type === 'Ed25519' ? ed25519KeyObject(key.raw) : null
    keyObjects.set(key, ko)
  }
  return ko ?? undefined
}

/** @libp2p/crypto keeps an Ed25519 private key as 32 bytes of seed then 32 bytes of public key. */
function ed25519KeyObject (raw: Uint8Array): KeyObject | null {
  if (raw.byteLength !== 64) return null
  return createPrivateKey({
    format: 'jwk',
    key: {
      kty: 'OKP',
      crv: 'Ed25519',
      d: Buffer.from(raw.subarray(0, 32)).toString('base64url'),
      x: Buffer.from(raw.subarray(32)).toString('base64url')
    }
  })
}

/** Sign `bytes` with `key`: Ed25519 signatures are deterministic, so this is byte for byte what `key.sign` returns. */
export async function signRaw (key: PrivateKey, bytes: Uint8Array): Promise<Uint8Array> {
  const ko = signingKeyObject(key)
  if (ko === undefined) return key.sign(bytes)
  return signBytes(null, bytes, ko)
}

/**
 * `key` as libp2p is given it: the same key, whose `sign` uses the KeyObject
 * built once (signingKeyObject) instead of @libp2p/crypto's, which builds one
 * from the raw bytes per call (91 µs a signature here against 34 µs). libp2p
 * signs with the host key in every Noise handshake and every identify answer
 * (the signed peer record), so each connection opened or accepted paid that
 * two or three times. Everything else (type, raw, publicKey, equals) is the
 * key's own, through the prototype. Keys of other types are returned as they are.
 */
export function withCachedSigning (key: PrivateKey): PrivateKey {
  const ko = signingKeyObject(key)
  if (ko === undefined) return key
  const fast: Pick<PrivateKey, 'sign'> = {
    sign (data, options) {
      options?.signal?.throwIfAborted()
      return signBytes(null, data instanceof Uint8Array ? data : data.subarray(), ko)
    }
  }
  return Object.setPrototypeOf(fast, key) as PrivateKey
}

export async function sign (key: PrivateKey, domain: string, unsigned: unknown): Promise<string> {
  const sig = await signRaw(key, signingBytes(domain, unsigned))
  return toString(sig, 'base64url')
}

/**
 * Node KeyObjects of the Ed25519 agents whose signatures this process checks
 * (cards), EVENT_VERIFY_KEY_CACHE_ENTRIES at most, the oldest dropped first:
 * @libp2p/crypto's `verify` builds one from the raw key on every call, about
 * a third of a card's verification (profiled at rest, session 35).
 * `null`: not an Ed25519 agent, verified through @libp2p/crypto.
 */
const verifyKeys = new Map<string, KeyObject | null>()

/** The node:crypto public key of an Ed25519 agent (null for another key type). Throws for an id that is no agent id. */
export function agentPublicKeyObject (agentId: string): KeyObject | null {
  const pub = publicKeyOfAgent(agentId)
  return pub.type === 'Ed25519' ? createPublicKey({ format: 'jwk', key: { kty: 'OKP', crv: 'Ed25519', x: Buffer.from(pub.raw).toString('base64url') } }) : null
}

function verifyingKeyObject (agentId: string): KeyObject | null {
  let ko = verifyKeys.get(agentId)
  if (ko !== undefined) return ko
  ko = agentPublicKeyObject(agentId)
  makeRoom(verifyKeys, EVENT_VERIFY_KEY_CACHE_ENTRIES)
  verifyKeys.set(agentId, ko)
  return ko
}

/** True only when `signature` is `agentId`'s key signing `unsigned` under `domain`. Never throws. */
export async function verify (agentId: string, domain: string, unsigned: unknown, signature: string): Promise<boolean> {
  try {
    const sig = fromString(signature, 'base64url')
    // only the one text of these bytes (see SignatureCache.lookup in src/runlog/event.ts)
    if (toString(sig, 'base64url') !== signature) return false
    const ko = verifyingKeyObject(agentId)
    if (ko === null) return await publicKeyOfAgent(agentId).verify(signingBytes(domain, unsigned), sig)
    return sig.byteLength === 64 && verifyBytes(null, signingBytes(domain, unsigned), ko, sig)
  } catch {
    return false
  }
}
