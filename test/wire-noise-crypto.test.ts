/**
 * Issue #17, memory per node: a message Noise decrypts gets a buffer of its
 * own, so a slice kept from it never pins the 64 KiB socket read that
 * carried it; and it decrypts exactly what the default ciphers decrypt.
 * CPU per connection: the handshake's X25519 steps use keys imported once,
 * and agree with the default crypto on every shared secret; a session's
 * cipher key is imported once, and what it seals the default opens, and back.
 */
import { randomBytes } from 'node:crypto'
import { defaultCrypto } from '@chainsafe/libp2p-noise/crypto'
import { describe, expect, it } from 'vitest'
import { Uint8ArrayList } from 'uint8arraylist'
import { lpStream } from '@libp2p/utils'
import { cipherKeyStats, meshNoiseCrypto, x25519Stats } from '../src/wire/noise-crypto.ts'
import { NOISE_NATIVE_CIPHER_MIN_BYTES, NOISE_PIECEWISE_MIN_BYTES } from '../src/wire/network-constants.ts'
import { dialAddrs, listenAddrs } from '../src/wire/host.ts'
import { startLoopbackHost } from './helpers.ts'

const SOCKET_READ_BYTES = 64 * 1024

/** A ciphertext the way a TCP read delivers it: a view into a larger buffer. */
function inSocketRead (ciphertext: Uint8Array): Uint8Array {
  const read = new Uint8Array(SOCKET_READ_BYTES)
  read.set(ciphertext, 100)
  return read.subarray(100, 100 + ciphertext.byteLength)
}

describe('Noise ciphers with owned plaintext', () => {
  const k = randomBytes(32)
  const nonce = randomBytes(12)
  const ad = new Uint8Array(0)

  for (const size of [40, 1100, 1300, 20_000]) {
    it(`a ${size}-byte message decrypts to the same bytes, in a buffer of its own size`, () => {
      const plaintext = randomBytes(size)
      const sealed = defaultCrypto.chaCha20Poly1305Encrypt(plaintext, nonce, ad, k).subarray()
      const owned = meshNoiseCrypto.chaCha20Poly1305Decrypt(inSocketRead(sealed), nonce, ad, k).subarray()
      expect(Buffer.from(owned).equals(plaintext)).toBe(true)
      expect(owned.buffer.byteLength).toBeLessThan(SOCKET_READ_BYTES)
    })
  }

  it('the default ciphers decrypt a small message inside the socket read (what this avoids)', () => {
    const plaintext = randomBytes(40)
    const sealed = defaultCrypto.chaCha20Poly1305Encrypt(plaintext, nonce, ad, k).subarray()
    const view = inSocketRead(sealed)
    const inPlace = defaultCrypto.chaCha20Poly1305Decrypt(view, nonce, ad, k, view.subarray(0, view.byteLength - 16)).subarray()
    expect(Buffer.from(inPlace).equals(plaintext)).toBe(true)
    expect(inPlace.buffer.byteLength).toBe(SOCKET_READ_BYTES)
  })

  it('a tampered message is refused, as by the default', () => {
    const sealed = defaultCrypto.chaCha20Poly1305Encrypt(randomBytes(64), nonce, ad, k).subarray()
    const bad = Uint8Array.from(sealed)
    bad[3] = (bad[3] ?? 0) ^ 1
    expect(() => meshNoiseCrypto.chaCha20Poly1305Decrypt(bad, nonce, ad, k)).toThrow()
  })
})

describe('Noise ciphers with session keys imported once', () => {
  const ad = randomBytes(32)
  const sizes = [1, NOISE_NATIVE_CIPHER_MIN_BYTES - 1, NOISE_NATIVE_CIPHER_MIN_BYTES, 1500, 60_000]

  for (const size of sizes) {
    it(`a ${size}-byte message sealed here opens with the default, and one the default sealed opens here`, () => {
      const k = randomBytes(32)
      const nonce = randomBytes(12)
      const plaintext = randomBytes(size)
      const ours = meshNoiseCrypto.chaCha20Poly1305Encrypt(plaintext, nonce, ad, k).subarray()
      const theirs = defaultCrypto.chaCha20Poly1305Encrypt(plaintext, nonce, ad, k).subarray()
      expect(Buffer.from(ours).equals(Buffer.from(theirs))).toBe(true)
      expect(Buffer.from(defaultCrypto.chaCha20Poly1305Decrypt(ours, nonce, ad, k).subarray()).equals(plaintext)).toBe(true)
      expect(Buffer.from(meshNoiseCrypto.chaCha20Poly1305Decrypt(inSocketRead(theirs), nonce, ad, k).subarray()).equals(plaintext)).toBe(true)
    })
  }

  // joined first below NOISE_PIECEWISE_MIN_BYTES, piece by piece from there
  for (const size of [3000, NOISE_PIECEWISE_MIN_BYTES - 1, NOISE_PIECEWISE_MIN_BYTES, 50_000]) {
    it(`seals and opens a ${size}-byte message held in pieces (a Uint8ArrayList) as one held whole`, () => {
      const k = randomBytes(32)
      const nonce = randomBytes(12)
      const plaintext = randomBytes(size)
      const pieces = new Uint8ArrayList(plaintext.subarray(0, 700), plaintext.subarray(700, 701), plaintext.subarray(701))
      const whole = defaultCrypto.chaCha20Poly1305Encrypt(plaintext, nonce, ad, k).subarray()
      expect(Buffer.from(meshNoiseCrypto.chaCha20Poly1305Encrypt(pieces, nonce, ad, k).subarray()).equals(Buffer.from(whole))).toBe(true)
      // as socket reads cut it: each decrypted piece in a buffer of its own, not inside the read
      const read = inSocketRead(whole)
      const sealedPieces = new Uint8ArrayList(read.subarray(0, 1000), read.subarray(1000))
      const opened = meshNoiseCrypto.chaCha20Poly1305Decrypt(sealedPieces, nonce, ad, k)
      expect(Buffer.from(opened.subarray()).equals(plaintext)).toBe(true)
      for (const piece of opened instanceof Uint8Array ? [opened] : opened) expect(piece.buffer.byteLength).toBeLessThan(SOCKET_READ_BYTES)
    })
  }

  it('imports a key once for all its messages, and again when its bytes changed in place', () => {
    const k = randomBytes(32)
    const plaintext = randomBytes(2000)
    const before = { ...cipherKeyStats }
    for (let i = 0; i < 5; i++) meshNoiseCrypto.chaCha20Poly1305Encrypt(plaintext, randomBytes(12), ad, k)
    expect(cipherKeyStats.imported - before.imported).toBe(1)
    expect(cipherKeyStats.reused - before.reused).toBe(4)
    const nonce = randomBytes(12)
    k[0] = (k[0] ?? 0) ^ 0xff
    const sealed = meshNoiseCrypto.chaCha20Poly1305Encrypt(plaintext, nonce, ad, k).subarray()
    expect(cipherKeyStats.imported - before.imported).toBe(2)
    expect(Buffer.from(defaultCrypto.chaCha20Poly1305Decrypt(sealed, nonce, ad, Uint8Array.from(k)).subarray()).equals(plaintext)).toBe(true)
  })

  it('refuses a large message with a changed byte or a wrong key, as the default does', () => {
    const k = randomBytes(32)
    const nonce = randomBytes(12)
    const sealed = meshNoiseCrypto.chaCha20Poly1305Encrypt(randomBytes(5000), nonce, ad, k).subarray()
    const bad = Uint8Array.from(sealed)
    bad[2500] = (bad[2500] ?? 0) ^ 1
    expect(() => meshNoiseCrypto.chaCha20Poly1305Decrypt(bad, nonce, ad, k)).toThrow()
    expect(() => meshNoiseCrypto.chaCha20Poly1305Decrypt(sealed, nonce, ad, randomBytes(32))).toThrow()
    expect(() => meshNoiseCrypto.chaCha20Poly1305Decrypt(sealed, nonce, randomBytes(32), k)).toThrow()
  })

  it('two hosts carry large frames both ways, each side importing its two session keys once', async () => {
    const hosts = await Promise.all([0, 1].map(async () => startLoopbackHost()))
    const [a, b] = hosts as [typeof hosts[0], typeof hosts[0]]
    const protocol = '/aap-test/echo-large/1.0.0'
    try {
      await b.handle(protocol, async (stream) => {
        const lp = lpStream(stream)
        for (let i = 0; i < 3; i++) await lp.write(await lp.read({ signal: AbortSignal.timeout(5000) }), { signal: AbortSignal.timeout(5000) })
        await stream.close()
      })
      expect(await dialAddrs(a, listenAddrs(b))).toHaveLength(1)
      const before = { ...cipherKeyStats }
      const stream = await a.dialProtocol(b.peerId, protocol, { signal: AbortSignal.timeout(5000) })
      const lp = lpStream(stream)
      for (let i = 0; i < 3; i++) {
        const frame = randomBytes(8000 + i)
        await lp.write(frame, { signal: AbortSignal.timeout(5000) })
        expect(Buffer.from((await lp.read({ signal: AbortSignal.timeout(5000) })).subarray()).equals(frame)).toBe(true)
      }
      await stream.close()
      // one key a direction a side: a's sending key is b's receiving key, and the other way round
      expect(cipherKeyStats.imported - before.imported).toBe(4)
      expect(cipherKeyStats.reused - before.reused).toBeGreaterThan(0)
    } finally {
      await Promise.all(hosts.map(async h => { await h.stop() }))
    }
  })
})

describe('Noise X25519 with keys imported once', () => {
  /** A remote key as Noise holds one read from a message: a list of chunks, not a Uint8Array (what this module reads of it). */
  const asList = (b: Uint8Array): Parameters<typeof meshNoiseCrypto.generateX25519SharedKey>[1] =>
    ({ byteLength: b.byteLength, subarray: () => b }) as unknown as Parameters<typeof meshNoiseCrypto.generateX25519SharedKey>[1]

  it('agrees with the default crypto on the shared secret, whoever made the keys', () => {
    for (let i = 0; i < 20; i++) {
      const mine = meshNoiseCrypto.generateX25519KeyPair()
      const theirs = defaultCrypto.generateX25519KeyPair()
      const ours = meshNoiseCrypto.generateX25519SharedKey(mine.privateKey, theirs.publicKey)
      expect(Buffer.from(ours).equals(Buffer.from(defaultCrypto.generateX25519SharedKey(mine.privateKey, theirs.publicKey)))).toBe(true)
      expect(Buffer.from(ours).equals(Buffer.from(defaultCrypto.generateX25519SharedKey(theirs.privateKey, mine.publicKey)))).toBe(true)
      // the remote key as a list of chunks, used twice (the second time from the import kept)
      const remote = asList(Uint8Array.from(theirs.publicKey))
      const before = x25519Stats.remoteKeyReused
      expect(Buffer.from(meshNoiseCrypto.generateX25519SharedKey(mine.privateKey, remote)).equals(Buffer.from(ours))).toBe(true)
      expect(Buffer.from(meshNoiseCrypto.generateX25519SharedKey(mine.privateKey, remote)).equals(Buffer.from(ours))).toBe(true)
      expect(x25519Stats.remoteKeyReused - before).toBe(1)
    }
  })

  it('derives what the default HKDF derives', () => {
    for (const ikmBytes of [0, 32, 100]) {
      const ck = randomBytes(32)
      const ikm = randomBytes(ikmBytes)
      const ours = meshNoiseCrypto.getHKDF(ck, ikm).map(k => Buffer.from(k).toString('hex'))
      expect(ours).toEqual(defaultCrypto.getHKDF(ck, ikm).map(k => Buffer.from(k).toString('hex')))
      expect(ours.every(k => k.length === 64)).toBe(true)
    }
  })

  it('takes a private key it did not make the default way', () => {
    const theirs = defaultCrypto.generateX25519KeyPair()
    const other = defaultCrypto.generateX25519KeyPair()
    const before = x25519Stats.fallback
    const s = meshNoiseCrypto.generateX25519SharedKey(Uint8Array.from(other.privateKey), theirs.publicKey)
    expect(Buffer.from(s).equals(Buffer.from(defaultCrypto.generateX25519SharedKey(theirs.privateKey, other.publicKey)))).toBe(true)
    expect(x25519Stats.fallback - before).toBe(1)
  })

  it('refuses a remote key that is not a curve point encoding, as the default does', () => {
    const mine = meshNoiseCrypto.generateX25519KeyPair()
    expect(() => meshNoiseCrypto.generateX25519SharedKey(mine.privateKey, new Uint8Array(31))).toThrow()
    expect(() => defaultCrypto.generateX25519SharedKey(mine.privateKey, new Uint8Array(31))).toThrow()
  })

  it('two hosts handshake with it: every step of both sides uses a key made or imported once', async () => {
    const hosts = await Promise.all([0, 1].map(async () => startLoopbackHost()))
    const [a, b] = hosts as [typeof hosts[0], typeof hosts[0]]
    try {
      const before = { ...x25519Stats }
      expect(await dialAddrs(a, listenAddrs(b))).toHaveLength(1)
      expect(await a.services.ping.ping(b.peerId, { signal: AbortSignal.timeout(5000) })).toBeGreaterThanOrEqual(0)
      // XX: three steps a side, the remote ephemeral key in two of them
      expect(x25519Stats.ownKeyReused - before.ownKeyReused).toBe(6)
      expect(x25519Stats.remoteKeyReused - before.remoteKeyReused).toBe(2)
      expect(x25519Stats.fallback - before.fallback).toBe(0)
    } finally {
      await Promise.all(hosts.map(async h => { await h.stop() }))
    }
  })
})
