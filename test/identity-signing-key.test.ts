/**
 * The host key libp2p is given (withCachedSigning, src/identity/signing.ts):
 * byte for byte the signatures of @libp2p/crypto's own `sign`, the same key
 * in every other respect, and two hosts built with it still authenticate
 * each other (Noise) and exchange signed peer records (identify).
 */
import { describe, expect, it } from 'vitest'
import { generateKeyPair } from '@libp2p/crypto/keys'
import { peerIdFromPrivateKey } from '@libp2p/peer-id'
import { randomBytes } from 'node:crypto'
import { signRaw, withCachedSigning } from '../src/identity/signing.ts'
import { dialAddrs, listenAddrs } from '../src/wire/host.ts'
import { startLoopbackHost } from './helpers.ts'

describe('the host key with a cached signing key', () => {
  it('signs exactly as @libp2p/crypto does and is otherwise the same key', async () => {
    const key = await generateKeyPair('Ed25519')
    const fast = withCachedSigning(key)
    for (const size of [0, 1, 64, 1000]) {
      const msg = randomBytes(size)
      expect(Buffer.from(await fast.sign(msg)).equals(Buffer.from(await key.sign(msg)))).toBe(true)
      expect(Buffer.from(await signRaw(key, msg)).equals(Buffer.from(await fast.sign(msg)))).toBe(true)
    }
    expect(fast.type).toBe('Ed25519')
    expect(fast.raw).toBe(key.raw)
    expect(fast.publicKey.equals(key.publicKey)).toBe(true)
    expect(fast.equals(key)).toBe(true)
    expect(key.equals(fast)).toBe(true)
    expect(peerIdFromPrivateKey(fast).equals(peerIdFromPrivateKey(key))).toBe(true)
    // a signature over the fast key verifies with the public key
    const msg = randomBytes(32)
    expect(await key.publicKey.verify(msg, await fast.sign(msg))).toBe(true)
  })

  it('honours an aborted signal as @libp2p/crypto does', async () => {
    const fast = withCachedSigning(await generateKeyPair('Ed25519'))
    const ctl = new AbortController()
    ctl.abort()
    expect(() => fast.sign(randomBytes(8), { signal: ctl.signal })).toThrow()
  })

  it('leaves a key of another type as it is', async () => {
    const key = await generateKeyPair('secp256k1')
    expect(withCachedSigning(key)).toBe(key)
  })

  it('lets two hosts authenticate each other and learn each other\'s signed peer record', async () => {
    const keys = [await generateKeyPair('Ed25519'), await generateKeyPair('Ed25519')]
    const hosts = await Promise.all(keys.map(async privateKey => startLoopbackHost(privateKey)))
    const [a, b] = hosts as [typeof hosts[0], typeof hosts[0]]
    try {
      expect(a.peerId.equals(peerIdFromPrivateKey(keys[0]!))).toBe(true)
      const identified = new Promise<void>(resolve => {
        a.addEventListener('peer:identify', (evt) => { if (evt.detail.peerId.equals(b.peerId)) resolve() })
      })
      expect(await dialAddrs(a, listenAddrs(b))).toHaveLength(1)
      await identified
      const conn = a.getConnections(b.peerId)[0]
      expect(conn?.remotePeer.equals(b.peerId)).toBe(true)
      // identify stored b's peer record, sealed by b's (fast) key and checked by a
      const peer = await a.peerStore.get(b.peerId)
      expect(peer.peerRecordEnvelope).toBeDefined()
      expect(await a.services.ping.ping(b.peerId, { signal: AbortSignal.timeout(5000) })).toBeGreaterThanOrEqual(0)
    } finally {
      await Promise.all(hosts.map(async h => { await h.stop() }))
    }
  })
})
