/**
 * Signs the events of the runs this node executes, on the hot path of every
 * transition. The result is byte for byte what `signEvent` (src/runlog/event.ts)
 * produces, and verifies with `verifyEvent`: the same domain, the same
 * canonical encoding, the same Ed25519 key (signatures are deterministic).
 * What differs is cost: `signEvent` canonically encodes the payload a second
 * time to measure it; this measures it with JSON.stringify (same length).
 * Both sign with the node key's KeyObject, built once per key
 * (src/identity/signing.ts).
 */
import { sign, type KeyObject } from 'node:crypto'
import type { PrivateKey } from '@libp2p/interface'
import { EVENT_PAYLOAD_MAX_BYTES, EVENT_SIGNING_DOMAIN } from '../constants.ts'
import { InvalidRequestError } from '../errors.ts'
import { assertPayloadDepth, knowCanonical, signEvent } from './event.ts'
import { canonicalJson, signingKeyObject } from '../identity/signing.ts'
import type { AgentEvent, UnsignedEvent } from './types.ts'

export class EventSigner {
  private readonly key: PrivateKey
  private readonly keyObject: KeyObject | undefined

  constructor (key: PrivateKey) {
    this.key = key
    this.keyObject = signingKeyObject(key)
  }

  async sign (unsigned: UnsignedEvent): Promise<AgentEvent> {
    if (this.keyObject === undefined) return signEvent(this.key, unsigned)
    assertPayloadDepth(unsigned.payload)
    // JSON.stringify is as long as the canonical form (only key order differs)
    const payloadBytes = Buffer.byteLength(JSON.stringify(unsigned.payload))
    if (payloadBytes > EVENT_PAYLOAD_MAX_BYTES) {
      throw new InvalidRequestError(`event payload is ${payloadBytes} bytes, over ${EVENT_PAYLOAD_MAX_BYTES}`, { reason: 'oversized' })
    }
    // the canonical text of the unsigned event is that of its members before and after `signature`
    // joined; the signed event's adds the signature between them, so neither is encoded twice
    const before: Record<string, unknown> = {}
    const after: Record<string, unknown> = {}
    for (const [k, v] of Object.entries(unsigned)) (k < 'signature' ? before : after)[k] = v
    const head = canonicalJson(before).slice(1, -1)
    const tail = canonicalJson(after).slice(1, -1)
    const signedText = `{${joined(head, tail)}}`
    const signature = sign(null, Buffer.from(EVENT_SIGNING_DOMAIN + signedText), this.keyObject).toString('base64url')
    const event: AgentEvent = { ...unsigned, signature }
    knowCanonical(event, `{${joined(joined(head, `"signature":${JSON.stringify(signature)}`), tail)}}`)
    return event
  }
}

/** Two runs of canonical members, one after the other. */
function joined (a: string, b: string): string {
  return a === '' ? b : b === '' ? a : `${a},${b}`
}
