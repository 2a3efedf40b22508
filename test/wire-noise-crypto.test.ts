/**
 * Issue #17, memory per node: a message Noise decrypts gets a buffer of its
 * own, so a slice kept from it never pins the 64 KiB socket read that
 * carried it; and it decrypts exactly what the default ciphers decrypt.
 */
import { randomBytes } from 'node:crypto'
import { defaultCrypto } from '@chainsafe/libp2p-noise/crypto'
import { describe, expect, it } from 'vitest'
import { ownedPlaintextCrypto } from '../src/wire/noise-crypto.ts'

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
      const owned = ownedPlaintextCrypto.chaCha20Poly1305Decrypt(inSocketRead(sealed), nonce, ad, k).subarray()
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
    expect(() => ownedPlaintextCrypto.chaCha20Poly1305Decrypt(bad, nonce, ad, k)).toThrow()
  })
})
