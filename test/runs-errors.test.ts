/**
 * The five AAP error codes, each produced by a real remote node and received
 * over the wire (plus the caller-side checks that give the same code before
 * anything is sent). See protocols/errors.md for when each is used.
 */
import { generateKeyPair } from '@libp2p/crypto/keys'
import { peerIdFromPrivateKey } from '@libp2p/peer-id'
import type { Stream } from '@libp2p/interface'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { CONTROL_PROTOCOL, DELEGATE_PROTOCOL } from '../src/constants.ts'
import type { MeshNode } from '../src/node.ts'
import type { Run } from '../src/runlog/types.ts'
import { RawWire } from './fixtures/raw-wire.ts'
import { holdingHandler, nextEvent, rejectsWith, startMesh, stopAll } from './helpers.ts'

const REVIEW = { capability_id: 'cap:code-review', version: '2.1.0' }
const GHOST = { capability_id: 'cap:ghost', version: '1.0.0' }
const TRANSLATE = { capability_id: 'cap:translate', version: '1.0.0' }

describe('the five AAP error codes, over the wire from real nodes', () => {
  let nodes: MeshNode[] = []
  let A: MeshNode, B: MeshNode, C: MeshNode, D: MeshNode, E: MeshNode
  const held: Stream[] = []

  /** Holds until the run ends; blocks first when asked. */
  const hold = holdingHandler('cp-err')

  beforeAll(async () => {
    nodes = await startMesh(5, {
      bootstrapOf: i => i - 1,
      nodeOptions: i => i === 2 ? { maxConcurrentInboundRuns: 2 } : {}
    })
    ;[A, B, C, D, E] = nodes as [MeshNode, MeshNode, MeshNode, MeshNode, MeshNode]
    for (const n of [B, C, D]) n.runs.handle(REVIEW, hold)
    // B's card claims GHOST, but B has no handler for it
    await B.publishCard({ name: 'b', capabilities: [REVIEW, GHOST] })
    await C.publishCard({ name: 'c-limited', capabilities: [REVIEW] })
    await D.publishCard({ name: 'd-soon-gone', capabilities: [REVIEW] })
    await E.publishCard({ name: 'e-translator', capabilities: [TRANSLATE] })
    // E answers card requests but its control protocol takes requests and never answers
    await E.host.unhandle(CONTROL_PROTOCOL)
    await E.host.handle(CONTROL_PROTOCOL, (stream) => { held.push(stream) })
  })
  afterAll(async () => {
    for (const s of held) s.abort(new Error('test over'))
    await stopAll(nodes)
  })

  const count = async (n: MeshNode): Promise<number> => (await n.runs.list()).executing.length

  describe('AGENT_NOT_FOUND', () => {
    it('an agent id nobody runs', async () => {
      const nobody = peerIdFromPrivateKey(await generateKeyPair('Ed25519')).toString()
      const err = await rejectsWith(A.delegate({ to_agent: nobody, task_id: 'task-nobody', capability: REVIEW, input: {} }, { signal: AbortSignal.timeout(3_000) }), 'AGENT_NOT_FOUND')
      expect(err.details?.agent_id).toBe(nobody)
      await rejectsWith(A.getRun(`${nobody}:r1`, { dialTimeoutMs: 1_000 }), 'AGENT_NOT_FOUND')
    })

    it('a string that cannot be an agent id (the profile: target agent does not exist)', async () => {
      const held = await A.delegate({ to_agent: B.agentId, task_id: 'task-malformed-agent', capability: REVIEW, input: { hold: true } })
      for (const id of ['not-an-agent', 'has spaces in it but is long enough to pass', '']) {
        const err = await rejectsWith(A.delegate({ to_agent: id, task_id: 'task-malformed-agent-2', capability: REVIEW, input: {} }), 'AGENT_NOT_FOUND')
        expect(err.details).toMatchObject({ reason: 'malformed' })
        await rejectsWith(A.handoff(held.run_id, id, {}), 'AGENT_NOT_FOUND')
      }
      await A.cancel(held.run_id)
    })

    it('a request addressed to another agent than the node that receives it', async () => {
      const before = await count(B)
      const w = await RawWire.open(A.host, B.host.peerId, DELEGATE_PROTOCOL)
      const f = await w.call({ id: 1, type: 'delegate', body: { to_agent: C.agentId, task_id: 'task-misaddressed', capability: REVIEW, input: {}, parent_run: null } })
      expect(f).toMatchObject({ id: 1, ok: false, error: { code: 'AGENT_NOT_FOUND' } })
      expect(f.error?.message).toContain(B.agentId)
      w.abort()
      expect(await count(B)).toBe(before)
    })

    it('a node that has stopped: delegations and control calls to it', async () => {
      const run = await A.delegate({ to_agent: D.agentId, task_id: 'task-gone', capability: REVIEW, input: { hold: true } })
      await D.stop()
      // A still holds D's verified card in its cache, so this reaches the dial, which fails
      const err = await rejectsWith(A.delegate({ to_agent: D.agentId, task_id: 'task-gone-2', capability: REVIEW, input: {} }), 'AGENT_NOT_FOUND')
      expect(err.details?.reason).toBe('unreachable')
      await rejectsWith(A.getRun(run.run_id), 'AGENT_NOT_FOUND')
      await rejectsWith(A.cancel(run.run_id), 'AGENT_NOT_FOUND')
    })

    it('a stalled peer: it takes the request and never answers, and the caller hears within its bound', async () => {
      const err = await rejectsWith(A.getRun(`${E.agentId}:r1`, { responseTimeoutMs: 300 }), 'AGENT_NOT_FOUND')
      expect(err.details).toMatchObject({ reason: 'timeout', timeout: 'response', limit_ms: 300 })
      expect(held.length).toBeGreaterThan(0)
      // the whole-call bound applies when it is the nearer one
      const err2 = await rejectsWith(A.resume(`${E.agentId}:r1`, {}, { callTimeoutMs: 250, responseTimeoutMs: 5_000 }), 'AGENT_NOT_FOUND')
      expect(err2.details).toMatchObject({ reason: 'timeout', timeout: 'call' })
    })
  })

  describe('CAPABILITY_NOT_SUPPORTED', () => {
    it('caller side: the verified card does not declare the capability (or that version), so nothing is sent', async () => {
      const before = await count(B)
      await rejectsWith(A.delegate({ to_agent: B.agentId, task_id: 'task-cap-1', capability: TRANSLATE, input: {} }), 'CAPABILITY_NOT_SUPPORTED')
      await rejectsWith(A.delegate({ to_agent: B.agentId, task_id: 'task-cap-2', capability: { ...REVIEW, version: '2.2.0' }, input: {} }), 'CAPABILITY_NOT_SUPPORTED')
      expect(await count(B)).toBe(before)
    })

    it('executor side: the card claims it but no handler serves it; once one does, the same call works', async () => {
      const before = await count(B)
      const err = await rejectsWith(A.delegate({ to_agent: B.agentId, task_id: 'task-ghost', capability: GHOST, input: {} }), 'CAPABILITY_NOT_SUPPORTED')
      expect(err.message).toContain(B.agentId)
      expect(await count(B)).toBe(before)
      B.runs.handle(GHOST, async () => ({ boo: true }))
      try {
        const done = nextEvent(B, e => e.type === 'run.completed' && e.correlation_id === 'task-ghost')
        await A.delegate({ to_agent: B.agentId, task_id: 'task-ghost', capability: GHOST, input: {} })
        expect((await done).payload.output).toEqual({ boo: true })
      } finally {
        B.runs.unhandle(GHOST)
      }
    })

    it('executor side: a direct wire call for a capability the card does not declare', async () => {
      const before = await count(B)
      const w = await RawWire.open(A.host, B.host.peerId, DELEGATE_PROTOCOL)
      const f = await w.call({ id: 1, type: 'delegate', body: { to_agent: B.agentId, task_id: 'task-cap-wire', capability: TRANSLATE, input: {}, parent_run: null } })
      expect(f).toMatchObject({ id: 1, ok: false, error: { code: 'CAPABILITY_NOT_SUPPORTED', details: { capability: TRANSLATE } } })
      w.abort()
      expect(await count(B)).toBe(before)
    })

    it('a handoff to an agent whose card lacks the run\'s capability', async () => {
      const run = await A.delegate({ to_agent: B.agentId, task_id: 'task-cap-handoff', capability: REVIEW, input: { hold: true } })
      await rejectsWith(A.handoff(run.run_id, E.agentId, {}), 'CAPABILITY_NOT_SUPPORTED')
      expect((await A.getRun(run.run_id)).state).toBe('running')
      await A.cancel(run.run_id)
    })
  })

  describe('DELEGATION_REFUSED', () => {
    it('by policy: the executor refuses work from this (authenticated) delegator, and accepts it from another', async () => {
      const seen: string[] = []
      B.runs.setPolicy(({ from }) => {
        seen.push(from)
        return from === A.agentId ? 'A is over its quota' : undefined
      })
      try {
        const before = await count(B)
        const err = await rejectsWith(A.delegate({ to_agent: B.agentId, task_id: 'task-policy', capability: REVIEW, input: {} }), 'DELEGATION_REFUSED')
        expect(err.message).toBe('A is over its quota')
        expect(err.details).toMatchObject({ reason: 'policy' })
        expect(await count(B)).toBe(before)
        const done = nextEvent(B, e => e.type === 'run.completed' && e.correlation_id === 'task-policy')
        const ok = await C.delegate({ to_agent: B.agentId, task_id: 'task-policy', capability: REVIEW, input: {} })
        expect(ok.delegator).toBe(C.agentId)
        await done
        expect(seen).toEqual([A.agentId, C.agentId])
      } finally {
        B.runs.setPolicy(undefined)
      }
    })

    it('by capacity: over the node\'s concurrent-run limit (running and blocked runs count) until one ends', async () => {
      // C's limit is 2 and no share was set: each delegator's share is a quarter of it, rounded up (1)
      expect(C.runs.slots.share).toBe(1)
      const r1 = await A.delegate({ to_agent: C.agentId, task_id: 'task-cap-a', capability: REVIEW, input: { hold: true } })
      const own = await rejectsWith(A.delegate({ to_agent: C.agentId, task_id: 'task-cap-a2', capability: REVIEW, input: {} }), 'DELEGATION_REFUSED')
      expect(own.details).toMatchObject({ reason: 'capacity', limit: 1, scope: 'delegator' })
      const blocked = nextEvent(C, e => e.type === 'run.blocked' && e.correlation_id === 'task-cap-b')
      const r2 = await B.delegate({ to_agent: C.agentId, task_id: 'task-cap-b', capability: REVIEW, input: { block: true } })
      await blocked
      // E holds nothing on C, and is refused by the node's limit
      const err = await rejectsWith(E.delegate({ to_agent: C.agentId, task_id: 'task-cap-c', capability: REVIEW, input: {} }), 'DELEGATION_REFUSED')
      expect(err.details).toMatchObject({ reason: 'capacity', limit: 2, scope: 'node' })
      await A.cancel(r1.run_id)
      const r3 = await E.delegate({ to_agent: C.agentId, task_id: 'task-cap-c', capability: REVIEW, input: { hold: true } })
      expect(r3.state).toBe('running')
      await B.cancel(r2.run_id)
      await E.cancel(r3.run_id)
    })

    it('by capacity under a burst: with a slow policy, a burst of nine at a limit of two admits exactly two, one per delegator', async () => {
      expect((await C.runs.list({ state: 'running' })).executing.length + (await C.runs.list({ state: 'blocked' })).executing.length).toBe(0)
      C.runs.setPolicy(async () => { await new Promise(resolve => setImmediate(resolve)); return undefined })
      try {
        // three each from A, B and E: within the node's limit, and within each one's share (1)
        const from = [A, B, E]
        const results = await Promise.allSettled(Array.from({ length: 9 }, async (_, i) =>
          from[i % 3]!.delegate({ to_agent: C.agentId, task_id: `task-burst-${i}`, capability: REVIEW, input: { hold: true } })))
        const ok = results.map((r, i) => ({ r, by: from[i % 3]! })).filter((x): x is { r: PromiseFulfilledResult<Run>, by: MeshNode } => x.r.status === 'fulfilled')
        const refused = results.filter(r => r.status === 'rejected' && (r.reason as { code?: string }).code === 'DELEGATION_REFUSED')
        expect(ok.length).toBe(2)
        expect(refused.length).toBe(7)
        expect(new Set(ok.map(x => x.by)).size).toBe(2)
        for (const x of ok) await x.by.cancel(x.r.value.run_id)
      } finally {
        C.runs.setPolicy(undefined)
      }
    })

    it('an agent does not delegate to itself, nor hand a run off to its own executor', async () => {
      await rejectsWith(B.delegate({ to_agent: B.agentId, task_id: 'task-self', capability: REVIEW, input: {} }), 'DELEGATION_REFUSED')
      const run = await A.delegate({ to_agent: B.agentId, task_id: 'task-self-handoff', capability: REVIEW, input: { hold: true } })
      await rejectsWith(A.handoff(run.run_id, B.agentId, {}), 'DELEGATION_REFUSED')
      await A.cancel(run.run_id)
    })
  })

  describe('RUN_NOT_FOUND', () => {
    it('an unknown run id on a real executor, for every control call', async () => {
      const id = `${B.agentId}:0000000000000000deadbeef`
      for (const attempt of [A.getRun(id), A.resume(id, {}), A.block(id, 'r', 'cp'), A.cancel(id), A.handoff(id, C.agentId, {})]) {
        const err = await rejectsWith(attempt, 'RUN_NOT_FOUND')
        expect(err.message).toContain(B.agentId)
      }
      // and ids that cannot name any executor
      await rejectsWith(A.getRun('no-executor-in-this-id'), 'RUN_NOT_FOUND')
      await rejectsWith(A.getRun('notapeerid:abc'), 'RUN_NOT_FOUND')
    })

    it('a string that cannot be a run id, for every control call (the profile: run id is invalid)', async () => {
      for (const id of ['bad id with spaces', 'bad id!', '', 'x'.repeat(129)]) {
        for (const attempt of [A.getRun(id), A.resume(id, {}), A.block(id, 'r', 'cp'), A.cancel(id), A.handoff(id, C.agentId, {})]) {
          const err = await rejectsWith(attempt, 'RUN_NOT_FOUND')
          expect(err.details).toMatchObject({ reason: 'malformed' })
        }
      }
    })
  })

  describe('INVALID_TRANSITION', () => {
    it('the executor refuses a transition its state machine does not allow', async () => {
      const run = await A.delegate({ to_agent: B.agentId, task_id: 'task-it', capability: REVIEW, input: { hold: true } })
      const err = await rejectsWith(A.resume(run.run_id, { too: 'early' }), 'INVALID_TRANSITION')
      expect(err.details).toMatchObject({ run_id: run.run_id, state: 'running', command: 'resume' })
      await A.cancel(run.run_id)
      const err2 = await rejectsWith(A.cancel(run.run_id), 'INVALID_TRANSITION')
      expect(err2.details).toMatchObject({ state: 'failed', command: 'cancel' })
    })
  })
})
