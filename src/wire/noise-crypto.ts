/**
 * The crypto of the Noise channel, as @chainsafe/libp2p-noise has it by
 * default, except that a decrypted message gets buffer of its own, and the
 * handshake's X25519 keys and the session's cipher keys are imported once
 * (below).
 *
 * By default Noise decrypts a small message in place, inside the buffer the
 * socket read it into: a TCP read is a 64 KiB buffer, so every byte range
 * cut from the plaintext (a peer id in a DHT answer, a multiaddr from
 * identify, a gossip message id) kept by the peer store, the routing table
 * or a connection keeps the whole 64 KiB read alive. A heap snapshot of a
 * simulation process at 200 nodes held 142 MiB of such reads for 43 nodes
 * (session 6), several MiB per node. Decrypting into a buffer the size
 * of the message costs one small allocation per message and lets each read
 * go as soon as it is decrypted.
 */
import { createCipheriv, createDecipheriv, createPublicKey, createSecretKey, diffieHellman, generateKeyPairSync, hkdfSync, type KeyObject } from 'node:crypto'
import { defaultCrypto } from '@chainsafe/libp2p-noise/crypto'
import type { ICryptoInterface } from '@chainsafe/libp2p-noise'
import { Uint8ArrayList } from 'uint8arraylist'
import { NOISE_NATIVE_CIPHER_MIN_BYTES, NOISE_PIECEWISE_MIN_BYTES } from './network-constants.ts'

/*
 * The X25519 steps of a handshake, with each key imported once.
 *
 * The default crypto hands Noise raw key bytes and, for each of the three
 * Diffie-Hellman steps of an XX handshake, imports both keys again as
 * KeyObjects (DER, then node:crypto's slots): 195 µs a step here, of which the
 * exchange itself is 42. Profiles of connection set-up put those imports at
 * a tenth of all the CPU a new connection costs. Here a key pair is made as
 * KeyObjects, the bytes Noise keeps are taken from their JWK export, and the
 * private KeyObject is kept beside the very bytes object Noise passes back
 * (a WeakMap, so it goes with the handshake); a remote public key is
 * imported once per object Noise holds for it (the remote ephemeral key is
 * used in two steps). Keys this module did not make go the default way.
 */
type KeyBytes = Parameters<ICryptoInterface['generateX25519SharedKey']>[0]

/** Private keys made here, by the bytes object Noise keeps for them. */
const madeHere = new WeakMap<object, KeyObject>()
/** Remote public keys, by the bytes object Noise keeps for them. */
const imported = new WeakMap<object, KeyObject>()

export interface X25519Stats {
  /** Steps that used a private key made here (no import). */
  ownKeyReused: number
  /** Steps that used a remote key already imported for an earlier step. */
  remoteKeyReused: number
  /** Steps that went the default way (a private key this module did not make). */
  fallback: number
}

/** Process-wide counts, for tests. */
export const x25519Stats: X25519Stats = { ownKeyReused: 0, remoteKeyReused: 0, fallback: 0 }

function bytesOf (k: KeyBytes): Uint8Array {
  return k instanceof Uint8Array ? k : k.subarray()
}

function generateX25519KeyPair (): { publicKey: Uint8Array, privateKey: Uint8Array } {
  const pair = generateKeyPairSync('x25519')
  const priv = pair.privateKey.export({ format: 'jwk' })
  const pub = pair.publicKey.export({ format: 'jwk' })
  if (typeof priv.d !== 'string' || typeof pub.x !== 'string') return defaultCrypto.generateX25519KeyPair()
  const privateKey = Buffer.from(priv.d, 'base64url')
  madeHere.set(privateKey, pair.privateKey)
  return { publicKey: Buffer.from(pub.x, 'base64url'), privateKey }
}

function generateX25519SharedKey (privateKey: KeyBytes, publicKey: KeyBytes): Uint8Array {
  const own = madeHere.get(privateKey)
  if (own === undefined) {
    x25519Stats.fallback++
    return defaultCrypto.generateX25519SharedKey(privateKey, publicKey)
  }
  x25519Stats.ownKeyReused++
  let remote = imported.get(publicKey)
  if (remote === undefined) {
    remote = createPublicKey({ format: 'jwk', key: { kty: 'OKP', crv: 'X25519', x: Buffer.from(bytesOf(publicKey)).toString('base64url') } })
    imported.set(publicKey, remote)
  } else {
    x25519Stats.remoteKeyReused++
  }
  return diffieHellman({ privateKey: own, publicKey: remote })
}

const NO_INFO = new Uint8Array(0)

/**
 * Noise's HKDF (extract with the chaining key as salt, expand with no info to
 * three 32-byte outputs) by node:crypto, not the pure-JS SHA-256 the default
 * uses: four of them a handshake side.
 */
function getHKDF (ck: Uint8Array, ikm: Uint8Array): [Uint8Array, Uint8Array, Uint8Array] {
  const okm = new Uint8Array(hkdfSync('sha256', ikm, ck, NO_INFO, 96))
  return [okm.subarray(0, 32), okm.subarray(32, 64), okm.subarray(64, 96)]
}

/*
 * ChaCha20-Poly1305 with each session key imported once.
 *
 * The default crypto seals a message of 1200 bytes or more with node:crypto,
 * handing it the raw key, so every message imports the key again: 15 µs a
 * 1500-byte message here, of which the cipher itself is 6 (a 10 µs import).
 * A gossip event is such a message, sealed once per mesh peer it goes to and
 * opened once per copy that comes in. Here the KeyObject is made once per key
 * Noise holds (a WeakMap on the bytes object its cipher state keeps, so it
 * goes with the connection) and, with the import gone, node:crypto is faster
 * than the default's WebAssembly cipher from NOISE_NATIVE_CIPHER_MIN_BYTES up;
 * smaller messages keep the WebAssembly one. The key bytes are compared on
 * every use, so a key changed in place is imported again, never misused.
 */
type Payload = Parameters<ICryptoInterface['chaCha20Poly1305Encrypt']>[0]
const CHACHA = 'chacha20-poly1305'
const TAG_BYTES = 16

export interface CipherKeyStats {
  /** Session keys imported as KeyObjects (one per cipher state that sealed or opened a large message). */
  imported: number
  /** Large messages sealed or opened with a key imported before. */
  reused: number
}

/** Process-wide counts, for tests. */
export const cipherKeyStats: CipherKeyStats = { imported: 0, reused: 0 }

/** The bytes are a copy with a buffer of its own (a pooled copy would pin a pool slab for the connection's life). */
const sessionKeys = new WeakMap<object, { bytes: Uint8Array, key: KeyObject }>()

function sessionKey (k: Uint8Array): KeyObject {
  const view = Buffer.from(k.buffer, k.byteOffset, k.byteLength)
  const held = sessionKeys.get(k)
  if (held !== undefined && view.equals(held.bytes)) {
    cipherKeyStats.reused++
    return held.key
  }
  cipherKeyStats.imported++
  const key = createSecretKey(view)
  sessionKeys.set(k, { bytes: new Uint8Array(view), key })
  return key
}

/**
 * A message held in pieces (a yamux header and its data, or a socket read's
 * cut) goes through the cipher as one copy up to NOISE_PIECEWISE_MIN_BYTES and
 * piece by piece from there: a cipher update costs about a microsecond more
 * than a copy of a small message, and less than the copy of a large one. The
 * result is a list of what the cipher gave, never joined again.
 */
function pieces (bytes: Payload): Uint8Array[] {
  return bytes instanceof Uint8Array || bytes.byteLength < NOISE_PIECEWISE_MIN_BYTES ? [bytes.subarray()] : [...bytes]
}

function seal (plaintext: Payload, nonce: Uint8Array, ad: Uint8Array, k: Uint8Array): Payload {
  if (plaintext.byteLength < NOISE_NATIVE_CIPHER_MIN_BYTES) return defaultCrypto.chaCha20Poly1305Encrypt(plaintext, nonce, ad, k)
  const cipher = createCipheriv(CHACHA, sessionKey(k), nonce, { authTagLength: TAG_BYTES })
  cipher.setAAD(ad, { plaintextLength: plaintext.byteLength })
  const out = new Uint8ArrayList()
  for (const piece of pieces(plaintext)) out.append(cipher.update(piece))
  const final = cipher.final() // empty for a stream cipher; kept should that ever change
  if (final.byteLength > 0) out.append(final)
  out.append(cipher.getAuthTag())
  return out
}

/**
 * The plaintext always gets buffers of its own: Noise's destination argument
 * is not taken (the default may decrypt in place, inside the socket read).
 */
function open (ciphertext: Payload, nonce: Uint8Array, ad: Uint8Array, k: Uint8Array): Payload {
  if (ciphertext.byteLength < NOISE_NATIVE_CIPHER_MIN_BYTES) return defaultCrypto.chaCha20Poly1305Decrypt(ciphertext, nonce, ad, k)
  const textBytes = ciphertext.byteLength - TAG_BYTES
  const decipher = createDecipheriv(CHACHA, sessionKey(k), nonce, { authTagLength: TAG_BYTES })
  decipher.setAAD(ad, { plaintextLength: textBytes })
  decipher.setAuthTag(ciphertext.subarray(textBytes))
  const text = ciphertext instanceof Uint8Array ? ciphertext.subarray(0, textBytes) : ciphertext.sublist(0, textBytes)
  const parts: Uint8Array[] = []
  for (const piece of pieces(text)) parts.push(decipher.update(piece))
  const final = decipher.final() // empty for a stream cipher, as in seal
  if (final.byteLength > 0) parts.push(final)
  return parts.length === 1 ? parts[0]! : new Uint8ArrayList(...parts)
}

export const meshNoiseCrypto: ICryptoInterface = {
  ...defaultCrypto,
  generateX25519KeyPair,
  generateX25519SharedKey,
  getHKDF,
  chaCha20Poly1305Encrypt: seal,
  chaCha20Poly1305Decrypt: open
}
