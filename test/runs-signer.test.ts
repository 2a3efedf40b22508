/**
 * The run service's event signer is a faster path to exactly what
 * signEvent produces: same bytes, same signature, verifiable by anyone.
 */
import { createHash } from 'node:crypto'
import { generateKeyPair } from '@libp2p/crypto/keys'
import { describe, expect, it } from 'vitest'
import { EVENT_PAYLOAD_MAX_BYTES } from '../src/constants.ts'
import { canonicalEvent, eventHash, signEvent, verifyEvent } from '../src/runlog/event.ts'
import { canonicalJson } from '../src/identity/signing.ts'
import { agentIdOf } from '../src/identity/identity.ts'
import { EventSigner } from '../src/runlog/signer.ts'
import type { UnsignedEvent } from '../src/runlog/types.ts'

describe('EventSigner', () => {
  it('signs exactly as signEvent does, and the event verifies', async () => {
    const key = await generateKeyPair('Ed25519')
    const agent = agentIdOf(key)
    const signer = new EventSigner(key)
    const payloads: Array<Record<string, unknown>> = [
      {},
      { output: { verdict: 'ok', n: 3, nested: { z: 1, a: [1, 'two', null, true] } } },
      { failure: { code: 'HANDLER_FAILED', message: 'ünïcødé — and "quotes"' } }
    ]
    for (const [i, payload] of payloads.entries()) {
      const unsigned: UnsignedEvent = {
        run_id: `${agent}:00aa11bb`,
        correlation_id: 'task-signer',
        type: 'run.progress',
        payload,
        at: '2026-06-20T10:00:00.000Z',
        seq: i + 2,
        prev: 'a'.repeat(64),
        executor: agent
      }
      const fast = await signer.sign(unsigned)
      expect(fast).toEqual(await signEvent(key, unsigned))
      expect(await verifyEvent(fast)).toEqual(fast)
      // the text the signer built beside the signature is the event's canonical JSON
      expect(canonicalEvent(fast)).toBe(canonicalJson(fast))
      expect(eventHash(fast)).toBe(createHash('sha256').update(canonicalJson(fast)).digest('hex'))
    }
  })

  it('builds the canonical text right whatever members the event has, and around the signature', async () => {
    const key = await generateKeyPair('Ed25519')
    const agent = agentIdOf(key)
    const signer = new EventSigner(key)
    // a verdict's declared_by sorts before `signature`; members the schema does not name may sort after it
    const unsigned = {
      run_id: `${agent}:00aa11bb`, correlation_id: 'task-signer', type: 'run.failed', payload: { 10: 'a', 9: 'b' },
      at: '2026-06-20T10:00:00.000Z', seq: 3, prev: 'c'.repeat(64), executor: agent, declared_by: agent, zz: undefined, tz: 1
    } as unknown as UnsignedEvent
    const fast = await signer.sign(unsigned)
    expect(fast).toEqual(await signEvent(key, unsigned))
    expect(canonicalEvent(fast)).toBe(canonicalJson(fast))
  })

  it('refuses a payload over EVENT_PAYLOAD_MAX_BYTES, as signEvent does', async () => {
    const key = await generateKeyPair('Ed25519')
    const agent = agentIdOf(key)
    const unsigned: UnsignedEvent = {
      run_id: `${agent}:00aa11bb`, correlation_id: 'task-signer', type: 'run.completed', payload: { blob: 'x'.repeat(EVENT_PAYLOAD_MAX_BYTES) },
      at: '2026-06-20T10:00:00.000Z', seq: 2, prev: 'b'.repeat(64), executor: agent
    }
    await expect(new EventSigner(key).sign(unsigned)).rejects.toMatchObject({ code: 'INVALID_REQUEST' })
    await expect(signEvent(key, unsigned)).rejects.toMatchObject({ code: 'INVALID_REQUEST' })
  })
})
