/**
 * JSON.parse turns 1e400 into Infinity, which canonical JSON cannot write. Found by session 46's
 * review: canonicalJson threw a plain TypeError, so checks of hostile input threw it instead of
 * INVALID_REQUEST (verifyEventSync, documented to throw INVALID_REQUEST for shape), and any stranger's
 * delegate request whose input held 1e400 was answered INTERNAL and logged as a fault of this node.
 */
import { generateKeyPair } from '@libp2p/crypto/keys'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { DELEGATE_PROTOCOL } from '../src/constants.ts'
import { agentIdOf } from '../src/identity/identity.ts'
import type { MeshNode } from '../src/node.ts'
import { SignatureCache, signEvent, verifyEventSync } from '../src/runlog/event.ts'
import { RawWire, rawFrame } from './fixtures/raw-wire.ts'
import { startMesh, stopAll } from './helpers.ts'

const CAP = { capability_id: 'cap:non-finite', version: '1.0.0' }

describe('a non-finite number (1e400) in hostile JSON is INVALID_REQUEST, not an untyped error', () => {
  it('verifyEventSync: an event whose payload holds 1e400', async () => {
    const key = await generateKeyPair('Ed25519')
    const agent = agentIdOf(key)
    const e = await signEvent(key, { run_id: `${agent}:00aa`, correlation_id: 't', type: 'run.progress', payload: { step: 1 }, at: '2026-06-20T10:00:00.000Z', seq: 2, prev: 'c'.repeat(64), executor: agent })
    const hostile = JSON.parse(JSON.stringify(e).replace('"step":1', '"step":1e400')) as unknown
    let thrown: unknown
    try { verifyEventSync(hostile, new SignatureCache()) } catch (err) { thrown = err }
    expect(thrown).toMatchObject({ code: 'INVALID_REQUEST', details: { reason: 'non_finite_number' } })
  })

  describe('real nodes', () => {
    let nodes: MeshNode[] = []
    let A: MeshNode, B: MeshNode
    let w: RawWire | undefined
    beforeAll(async () => {
      nodes = await startMesh(2)
      ;[A, B] = nodes as [MeshNode, MeshNode]
      B.runs.handle(CAP, async () => ({ ok: true }))
      await B.publishCard({ name: 'b', capabilities: [CAP] })
    })
    afterAll(async () => { w?.abort(); await stopAll(nodes) })

    it('a delegate request whose input holds 1e400 is answered INVALID_REQUEST', async () => {
      const ticket = await A.runs.ticketFor({ to_agent: B.agentId, task_id: 'task-non-finite', capability: CAP, input: {} })
      const body = { to_agent: B.agentId, task_id: 'task-non-finite', capability: CAP, input: { x: '__INF__' }, parent_run: null, ticket }
      const text = JSON.stringify({ id: 1, type: 'delegate', body }).replace('"__INF__"', '1e400')
      w = await RawWire.open(A.host, B.host.peerId, DELEGATE_PROTOCOL)
      w.write(rawFrame(text))
      const f = await w.next()
      expect(f).toMatchObject({ id: 1, ok: false, error: { code: 'INVALID_REQUEST', details: { reason: 'non_finite_number' } } })
    })
  })
})
