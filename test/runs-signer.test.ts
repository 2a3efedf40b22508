/**
 * The run service's event signer is a faster path to exactly what
 * signEvent produces: same bytes, same signature, verifiable by anyone.
 */
import { generateKeyPair } from '@libp2p/crypto/keys'
import { describe, expect, it } from 'vitest'
import { EVENT_PAYLOAD_MAX_BYTES } from '../src/constants.ts'
import { signEvent, verifyEvent } from '../src/runlog/event.ts'
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
    }
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
