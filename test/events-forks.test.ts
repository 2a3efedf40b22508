/**
 * What counts as a fork of a run's log (src/events/forks.ts): two events at one seq that its executor signed
 * with different content. The same event re-signed (another signature of the same content), a liveness verdict
 * (signed by the delegator, replaced by the executor's own event at its seq) and events of other seqs are not.
 */
import { describe, expect, it } from 'vitest'
import { generateKeyPair } from '@libp2p/crypto/keys'
import { Forks, forks } from '../src/events/forks.ts'
import { agentIdOf } from '../src/identity/identity.ts'
import { silentLogger } from '../src/logger.ts'
import { newRunId, signEvent } from '../src/runlog/event.ts'
import type { AgentEvent } from '../src/runlog/types.ts'

describe('forks of a run\'s log', () => {
  it('are two events its executor signed at one seq with different content, and are kept once per run', async () => {
    const key = await generateKeyPair('Ed25519')
    const executor = agentIdOf(key)
    const runId = newRunId(executor)
    const base = { run_id: runId, correlation_id: 'task-forks', executor, seq: 2, prev: 'h1', at: '2026-12-04T00:00:00.000Z', type: 'run.completed' as const }
    const a = await signEvent(key, { ...base, payload: { output: { to: 'c1' } } } as Omit<AgentEvent, 'signature'>)
    const b = await signEvent(key, { ...base, payload: { output: { to: 'c2' } } } as Omit<AgentEvent, 'signature'>)
    expect(forks(a, b)).toBe(true)
    // the same content under another signature text is one event
    expect(forks(a, { ...a, signature: b.signature })).toBe(false)
    expect(forks(a, a)).toBe(false)
    // another seq, or a verdict at the seq, is no fork
    expect(forks(a, { ...b, seq: 3 })).toBe(false)
    expect(forks({ ...a, declared_by: 'someone' }, b)).toBe(false)

    const republished: AgentEvent[] = []
    const told: string[] = []
    const registry = new Forks({ log: silentLogger(), republish: (_t, e) => { republished.push(e) }, onFork: f => { told.push(f.run_id) } })
    const t = {} as Parameters<Forks['seen']>[0]
    expect(registry.seen(t, a, b)).toBe(true)
    // a relayed copy of either is no new fork
    expect(registry.seen(t, a, b)).toBe(false)
    expect(registry.seen(t, b, a)).toBe(false)
    expect(registry.found).toBe(1)
    expect(told).toEqual([runId])
    expect(republished).toEqual([a])
    expect(registry.of('task-forks')).toEqual([{ correlation_id: 'task-forks', run_id: runId, seq: 2, executor, events: [a, b] }])
    expect(registry.of('another-task')).toEqual([])
  })
})
