/**
 * The crypto of the Noise channel, as @chainsafe/libp2p-noise has it by
 * default, except that a decrypted message gets buffer of its own and the
 * handshake's X25519 keys are imported once (below).
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
import { createPublicKey, diffieHellman, generateKeyPairSync, hkdfSync, type KeyObject } from 'node:crypto'
import { defaultCrypto } from '@chainsafe/libp2p-noise/crypto'
import type { ICryptoInterface } from '@chainsafe/libp2p-noise'

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

export const meshNoiseCrypto: ICryptoInterface = {
  ...defaultCrypto,
  generateX25519KeyPair,
  generateX25519SharedKey,
  getHKDF,
  // no destination: the cipher allocates the plaintext (the default reuses the ciphertext's bytes)
  chaCha20Poly1305Decrypt: (ciphertext, nonce, ad, k) => defaultCrypto.chaCha20Poly1305Decrypt(ciphertext, nonce, ad, k)
}
