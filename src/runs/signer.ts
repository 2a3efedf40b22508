/**
 * Signs the events of the runs this node executes, on the hot path of every
 * transition. The result is byte for byte what `signEvent` (src/events/log.ts)
 * produces, and verifies with `verifyEvent`: the same domain, the same
 * canonical encoding, the same Ed25519 key (signatures are deterministic).
 * What differs is cost: `signEvent` goes through @libp2p/crypto, which
 * rebuilds a KeyObject from the raw key on every call (about 150 µs here);
 * this keeps the KeyObject of the node's key, and measures the payload size
 * without a second canonical encoding.
 */
import { createPrivateKey, sign, type KeyObject } from 'node:crypto'
import type { PrivateKey } from '@libp2p/interface'
import { EVENT_PAYLOAD_MAX_BYTES, EVENT_SIGNING_DOMAIN } from '../constants.ts'
import { InvalidRequestError } from '../errors.ts'
import { signEvent } from '../events/log.ts'
import { signingBytes } from '../identity/signing.ts'
import type { AgentEvent, UnsignedEvent } from './types.ts'

export class EventSigner {
  private readonly key: PrivateKey
  private readonly keyObject: KeyObject | undefined

  constructor (key: PrivateKey) {
    this.key = key
    this.keyObject = key.type === 'Ed25519' ? ed25519KeyObject(key.raw) : undefined
  }

  async sign (unsigned: UnsignedEvent): Promise<AgentEvent> {
    if (this.keyObject === undefined) return signEvent(this.key, unsigned)
    // JSON.stringify is as long as the canonical form (only key order differs)
    const payloadBytes = Buffer.byteLength(JSON.stringify(unsigned.payload))
    if (payloadBytes > EVENT_PAYLOAD_MAX_BYTES) {
      throw new InvalidRequestError(`event payload is ${payloadBytes} bytes, over ${EVENT_PAYLOAD_MAX_BYTES}`, { reason: 'oversized' })
    }
    const signature = sign(null, signingBytes(EVENT_SIGNING_DOMAIN, unsigned), this.keyObject).toString('base64url')
    return { ...unsigned, signature }
  }
}

/** @libp2p/crypto keeps an Ed25519 private key as 32 bytes of seed then 32 bytes of public key. */
function ed25519KeyObject (raw: Uint8Array): KeyObject | undefined {
  if (raw.byteLength !== 64) return undefined
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
