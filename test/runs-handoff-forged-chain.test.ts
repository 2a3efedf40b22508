/**
 * A stranger X, whom delegator A never delegated anything to, fabricates a
 * "predecessor" of its own: a run.started it signs, whose handoff ticket it
 * issues itself with A's real delegation ticket (copied from any run.started
 * of A's task) as origin, and hands that fake run off to an honest receiver C.
 * Until session 44 C's checks all passed (nothing checked that the
 * predecessor's own chain was real): C created and, after X's confirm,
 * started a run whose delegator was A, in A's task. Now every ticket proves
 * each hop back to its origin (the first continues the origin's own run,
 * each later one the run before, signed by that run's executor; `chain`
 * carries the tickets between), so the forged predecessor is refused.
 */
import type { PrivateKey } from '@libp2p/interface'
import { generateKeyPair } from '@libp2p/crypto/keys'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { TICKET_SIGNING_DOMAIN } from '../src/constants.ts'
import { signRaw, signingBytes } from '../src/identity/signing.ts'
import { toString } from 'uint8arrays'
import type { MeshNode } from '../src/node.ts'
import { signEvent } from '../src/runlog/event.ts'
import { issueHandoffTicket, originOf, ticketOf, verifyTicket, type RunTicket } from '../src/runlog/ticket.ts'
import { startMesh, stopAll, until } from './helpers.ts'
import { sendHandoffRequest } from './fixtures/raw-handoff.ts'

const WORK = { capability_id: 'cap:forged-chain', version: '1.0.0' }

describe('a handoff whose predecessor\'s chain is forged', () => {
  let nodes: MeshNode[] = []
  let A: MeshNode, B: MeshNode, C: MeshNode, X: MeshNode
  let xKey: PrivateKey
  const startedBy = new Map<string, { delegator: string, correlation: string }>()
  const held = new Map<string, PromiseWithResolvers<void>>()

  beforeAll(async () => {
    xKey = await generateKeyPair('Ed25519')
    nodes = await startMesh(4, { nodeOptions: i => (i === 3 ? { privateKey: xKey } : {}) })
    ;[A, B, C, X] = nodes as [MeshNode, MeshNode, MeshNode, MeshNode]
    for (const n of [B, C]) {
      n.runs.handle(WORK, async (ctx) => {
        startedBy.set(ctx.run.run_id, { delegator: ctx.run.delegator, correlation: ctx.run.correlation_id })
        const gate = Promise.withResolvers<void>()
        held.set(ctx.run.run_id, gate)
        await Promise.race([gate.promise, new Promise(resolve => { ctx.signal.addEventListener('abort', resolve, { once: true }) })])
        return { ok: true }
      })
      await n.publishCard({ name: `worker-${n === B ? 'b' : 'c'}`, capabilities: [WORK] })
    }
  })
  afterAll(async () => {
    for (const g of held.values()) g.resolve()
    await stopAll(nodes)
  })

  /** X hands off to C a run of its own whose ticket is `ticket` (which X issued); returns C's answer. */
  async function handOff (task: string, aTicket: RunTicket, ticket: RunTicket): Promise<{ ok: boolean, error?: { code: string, details?: Record<string, unknown> } }> {
    const fakeStarted = await signEvent(xKey, {
      run_id: ticket.run_id,
      correlation_id: task,
      type: 'run.started',
      payload: { delegator: A.agentId, capability: WORK, parent_run: null, input: { forged: true }, ticket },
      at: new Date().toISOString(),
      seq: 1,
      prev: null,
      executor: X.agentId
    })
    const successorTicket = await issueHandoffTicket(xKey, ticket, C.agentId)
    return await sendHandoffRequest(X, C, {
      to_agent: C.agentId,
      from_run: { run_id: ticket.run_id, agent_id: X.agentId },
      task_id: task,
      capability: WORK,
      input: { forged: true },
      context: { from: 'stranger' },
      delegator: A.agentId,
      authorized: aTicket.authorized,
      parent_run: null,
      ticket: successorTicket,
      predecessor: fakeStarted
    }) as unknown as { ok: boolean, error?: { code: string, details?: Record<string, unknown> } }
  }

  it('is refused when the predecessor claims a first handoff of a run the origin did not delegate', async () => {
    const task = 'task-forged-first-hop'
    // A's real delegation to B: its run.started (gossiped to anyone following the task) carries A's signed ticket
    const real = await A.delegate({ to_agent: B.agentId, task_id: task, capability: WORK, input: {} })
    await until(() => held.has(real.run_id), 'the real run to start')
    const aTicket = ticketOf((await B.runs.store.log.get(real.run_id, 1))!)!
    // a depth-1 ticket X issues for a run of its own, continuing a run X:fake0 that never existed
    const fake0: RunTicket = { ...aTicket, run_id: `${X.agentId}:fake0`, executor: X.agentId, origin: originOf(aTicket) }
    const fakeTicket = await issueHandoffTicket(xKey, fake0, X.agentId)
    expect(() => verifyTicket(fakeTicket)).toThrow(/continues the run its chain ends with/)
    const answer = await handOff(task, aTicket, fakeTicket)
    expect(answer.ok).toBe(false)
    expect(answer.error?.code).toBe('INVALID_REQUEST')
    expect(answer.error?.details?.reason).toBe('bad_predecessor')
    expect((await C.runs.list()).executing.filter(r => r.correlation_id === task)).toEqual([])
    // nothing ran on C
    expect([...startedBy.keys()].some(id => id.startsWith(`${C.agentId}:`))).toBe(false)
  })

  it('is refused when the predecessor claims a later hop the executor before it never signed', async () => {
    const task = 'task-forged-later-hop'
    const real = await A.delegate({ to_agent: B.agentId, task_id: task, capability: WORK, input: {} })
    await until(() => held.has(real.run_id), 'the real run to start')
    const aTicket = ticketOf((await B.runs.store.log.get(real.run_id, 1))!)!
    // X claims B handed the real run to X:hop1, and X:hop1 to X:hop2: the first hop needs B's signature, which X signs itself
    const hop1: RunTicket = { ...aTicket, run_id: `${X.agentId}:hop1`, executor: X.agentId, handoff_from: { run_id: real.run_id, agent_id: B.agentId }, depth: 1, issuer: X.agentId, origin: originOf(aTicket) }
    const hop2 = await issueHandoffTicket(xKey, hop1, X.agentId)
    expect(hop2.chain?.length).toBe(1)
    expect(() => verifyTicket(hop2)).toThrow(/a ticket of the chain is not signed by its issuer/)
    // or the chain left out: a depth-2 ticket without the hop before it, signed by X
    const { chain: _left, signature: _sig, ...unsigned } = hop2
    const bare = { ...unsigned, signature: toString(await signRaw(xKey, signingBytes(TICKET_SIGNING_DOMAIN, unsigned)), 'base64url') }
    expect(() => verifyTicket(bare)).toThrow(/tickets of the chain before it/)
    for (const t of [hop2, bare]) {
      const answer = await handOff(task, aTicket, t as RunTicket)
      expect(answer.ok).toBe(false)
      expect(answer.error?.details?.reason).toBe('bad_predecessor')
    }
    expect((await C.runs.list()).executing.filter(r => r.correlation_id === task)).toEqual([])
  })
})
