/**
 * The lineage judge admits a run by its ticket, and the replay describes the run (delegator, parent_run,
 * handoff_from, capability, the `delegate`/`handoff` transition, its place in the tree) from its run.started
 * payload, which only the run's executor signed. Before, nothing compared the two: an executor the owner
 * delegated to appeared in the owner's replay as another agent's handoff successor, for a capability it was never
 * asked for. A payload that claims another place than its ticket now leaves the run without a valid ticket.
 */
import { generateKeyPair } from '@libp2p/crypto/keys'
import { describe, expect, it } from 'vitest'
import { agentIdOf } from '../src/identity/identity.ts'
import { buildReplay } from '../src/events/replay.ts'
import { admitAll } from '../src/runlog/lineage.ts'
import { signEvent } from '../src/runlog/event.ts'
import { issueDelegationTicket, ticketOf } from '../src/runlog/ticket.ts'
import type { AgentEvent } from '../src/runlog/types.ts'

const TASK = 'task-review-payload'
const CAP = { capability_id: 'cap:review', version: '1.0.0' }

function unsigned (e: AgentEvent): Omit<AgentEvent, 'signature'> {
  const { signature: _s, ...rest } = e
  return rest
}

describe('a run.started payload that claims another place than its ticket', () => {
  it('a root run that claims in its payload to be an honest agent\'s handoff successor has no valid ticket, and no place in the replay', async () => {
    const ownerKey = await generateKeyPair('Ed25519')
    const honestKey = await generateKeyPair('Ed25519')
    const liarKey = await generateKeyPair('Ed25519')
    const owner = agentIdOf(ownerKey)
    const honest = agentIdOf(honestKey)
    const liar = agentIdOf(liarKey)
    // the owner delegates two root runs: one to an honest agent, one to the liar
    const t1 = await issueDelegationTicket(ownerKey, { executor: honest, correlation_id: TASK, capability: CAP, parent_run: null, authorized: [] })
    const t2 = await issueDelegationTicket(ownerKey, { executor: liar, correlation_id: TASK, capability: CAP, parent_run: null, authorized: [] })
    const s1 = await signEvent(honestKey, {
      run_id: t1.run_id, correlation_id: TASK, type: 'run.started', at: '2026-01-01T00:00:00.000Z', seq: 1, prev: null, executor: honest,
      payload: { delegator: owner, capability: CAP, parent_run: null, input: {}, ticket: t1 }
    })
    // the liar's run.started carries its genuine root ticket, and a payload that says the honest agent handed it the run
    const s2 = await signEvent(liarKey, {
      run_id: t2.run_id, correlation_id: TASK, type: 'run.started', at: '2026-01-01T00:00:01.000Z', seq: 1, prev: null, executor: liar,
      payload: { delegator: owner, capability: { capability_id: 'cap:other', version: '9.9.9' }, parent_run: null, input: {}, ticket: t2, handoff_from: { run_id: t1.run_id, agent_id: honest }, handoff_by: honest }
    })
    // the same genuine ticket with a payload that says what it proves
    const s3 = await signEvent(liarKey, { ...unsigned(s2), payload: { delegator: owner, capability: CAP, parent_run: null, input: {}, ticket: t2 } })
    expect(ticketOf(s3)?.run_id).toBe(t2.run_id)
    expect(ticketOf(s2)).toBeUndefined()

    const logs = new Map<string, AgentEvent[]>([[t1.run_id, [s1]], [t2.run_id, [s2]]])
    const admission = admitAll(logs, owner)
    expect(admission.admitted.has(t1.run_id)).toBe(true)
    expect(admission.admitted.has(t2.run_id)).toBe(false)
    const replay = buildReplay(TASK, new Map([...logs].filter(([id]) => admission.admitted.has(id))), { owner, rejected: admission.rejected })
    expect(replay.runs.map(r => r.run_id)).toEqual([t1.run_id])
    expect(replay.transitions.some(x => x.kind === 'handoff')).toBe(false)
  })

  it('every field the replay reads from the payload must be the ticket\'s', async () => {
    const ownerKey = await generateKeyPair('Ed25519')
    const liarKey = await generateKeyPair('Ed25519')
    const owner = agentIdOf(ownerKey)
    const liar = agentIdOf(liarKey)
    const t = await issueDelegationTicket(ownerKey, { executor: liar, correlation_id: TASK, capability: CAP, parent_run: null, authorized: [] })
    const honest = { delegator: owner, capability: CAP, parent_run: null, input: {}, ticket: t }
    const start = async (payload: Record<string, unknown>): Promise<AgentEvent> => await signEvent(liarKey, {
      run_id: t.run_id, correlation_id: TASK, type: 'run.started', at: '2026-01-01T00:00:00.000Z', seq: 1, prev: null, executor: liar, payload
    })
    expect(ticketOf(await start(honest))).toBeDefined()
    const lies: Array<Record<string, unknown>> = [
      { ...honest, delegator: liar },
      { ...honest, capability: { capability_id: CAP.capability_id, version: '2.0.0' } },
      { ...honest, capability: 'cap:review@1.0.0' },
      { ...honest, parent_run: t.run_id },
      { ...honest, handoff_by: owner },
      { ...honest, handoff_from: { run_id: t.run_id, agent_id: owner } }
    ]
    for (const payload of lies) expect(ticketOf(await start(payload)), JSON.stringify(payload)).toBeUndefined()
  })
})
