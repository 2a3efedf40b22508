/**
 * Verified-signature caches: a node given its own cache finds nothing another
 * node verified; the same cache meets an event again without checking it;
 * a forged signature is never remembered; the cache stays bounded; callers
 * that pass no cache share the process's.
 */
import { generateKeyPair } from '@libp2p/crypto/keys'
import { describe, expect, it } from 'vitest'
import { agentIdOf } from '../src/identity/identity.ts'
import { SignatureCache, processSignatures, signEvent, verifyEvent, verifyEventSync } from '../src/runlog/event.ts'
import type { AgentEvent } from '../src/runlog/types.ts'

async function events (n: number): Promise<AgentEvent[]> {
  const key = await generateKeyPair('Ed25519')
  const agent = agentIdOf(key)
  return Promise.all(Array.from({ length: n }, async (_, i) => signEvent(key, {
    run_id: `${agent}:00cc11dd`,
    correlation_id: 'task-cache',
    type: 'run.progress',
    payload: { step: i },
    at: '2026-06-20T10:00:00.000Z',
    seq: i + 2,
    prev: 'c'.repeat(64),
    executor: agent
  })))
}

describe('SignatureCache', () => {
  it('is per node when injected: a second node checks what the first already verified', async () => {
    const [e] = await events(1)
    const a = new SignatureCache()
    const b = new SignatureCache()
    expect(verifyEventSync(e, a)).toEqual(e)
    expect(verifyEventSync(e, a)).toEqual(e)
    expect(a.stats).toEqual({ checked: 1, hits: 1, refused: 0 })
    expect(await verifyEvent(e, b)).toEqual(e)
    expect(b.stats).toEqual({ checked: 1, hits: 0, refused: 0 })
  })

  it('never remembers a forged signature: a mutated event is refused every time', async () => {
    const [e] = await events(1)
    const c = new SignatureCache()
    verifyEventSync(e, c)
    const forged = { ...e, payload: { step: 99 } }
    for (let i = 0; i < 2; i++) expect(() => verifyEventSync(forged, c)).toThrow(expect.objectContaining({ code: 'INVALID_SIGNATURE' }))
    expect(c.stats).toEqual({ checked: 3, hits: 0, refused: 2 })
    expect(c.size).toBe(1)
  })

  it('stays bounded: past its size the oldest verdict goes and is checked again', async () => {
    const es = await events(3)
    const c = new SignatureCache({ maxVerified: 2 })
    for (const e of es) verifyEventSync(e, c)
    expect(c.size).toBe(2)
    verifyEventSync(es[2], c)
    verifyEventSync(es[0], c)
    expect(c.stats).toEqual({ checked: 4, hits: 1, refused: 0 })
  })

  it('without a cache, callers share the process\'s', async () => {
    const [e] = await events(1)
    const before = { ...processSignatures.stats }
    verifyEventSync(e)
    await verifyEvent(e)
    expect(processSignatures.stats.checked - before.checked).toBe(1)
    expect(processSignatures.stats.hits - before.hits).toBe(1)
  })
})
