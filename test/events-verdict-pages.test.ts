/**
 * Settling a liveness verdict against the executor's own log (src/events/verdicts.ts) read the executor's whole
 * answer into memory, outside the node's sync slots: an executor back from being declared lost could answer
 * with hundreds of pages, all held at once, and a lie in the last page threw away every page before it, so the
 * next liveness round asked again. Now each page is taken as it comes, in a slot of the executor's share, and
 * reading stops as soon as the first page decides the verdict stays.
 */
import { generateKeyPair } from '@libp2p/crypto/keys'
import type { PrivateKey } from '@libp2p/interface'
import { describe, expect, it } from 'vitest'
import { InvalidRequestError } from '../src/errors.ts'
import { silentLogger } from '../src/logger.ts'
import { agentIdOf } from '../src/identity/identity.ts'
import { eventHash, newRunId, signEvent } from '../src/runlog/event.ts'
import type { EventLog } from '../src/runlog/event-log.ts'
import type { AgentEvent } from '../src/runlog/types.ts'
import type { Placement } from '../src/events/placement.ts'
import type { LocalRuns } from '../src/events/ports.ts'
import type { SyncCallOptions, SyncClient } from '../src/events/sync.ts'
import type { CorrTrack } from '../src/events/track.ts'
import { reconcileVerdict, type VerdictSides } from '../src/events/verdicts.ts'

async function chain (key: PrivateKey, runId: string, from: AgentEvent, n: number): Promise<AgentEvent[]> {
  const out: AgentEvent[] = []
  let prev = from
  for (let i = 0; i < n; i++) {
    prev = await signEvent(key, { run_id: runId, correlation_id: 'task-verdict-pages', type: 'run.progress', payload: { i }, at: new Date().toISOString(), seq: prev.seq + 1, prev: eventHash(prev), executor: agentIdOf(key) })
    out.push(prev)
  }
  return out
}

/** The sides of a reconcile, with a sync that answers `pages` in turn and then fails with `after`. */
function sides (started: AgentEvent, pages: AgentEvent[][], after: Error | undefined): { x: VerdictSides, ingested: AgentEvent[][], pagesRead: () => number, slots: string[] } {
  const ingested: AgentEvent[][] = []
  const slots: string[] = []
  let read = 0
  const sync = {
    run: async (_peer: unknown, _runId: string, _head: AgentEvent | undefined, opts: SyncCallOptions = {}): Promise<AgentEvent[]> => {
      const all: AgentEvent[] = []
      for (const p of pages) {
        read++
        if (opts.sink === undefined) all.push(...p)
        else await opts.sink(p)
      }
      if (after !== undefined) throw after
      return all
    }
  }
  const x: VerdictSides = {
    log: { get: async (_runId: string, seq: number) => seq === started.seq ? started : undefined } as unknown as EventLog,
    sync: sync as unknown as SyncClient,
    placement: { ingest: async (_t: CorrTrack, events: AgentEvent[]) => { ingested.push(events); return events }, republish: () => {} } as unknown as Placement,
    runs: { delegatedEvents: async () => {} } as unknown as LocalRuns,
    logger: silentLogger(),
    slot: async (agentId, fn) => { slots.push(agentId); return fn() }
  }
  return { x, ingested, pagesRead: () => read, slots }
}

/** A run's run.started signed by its executor, and the verdict its delegator signed after it. */
async function declaredRun (): Promise<{ key: PrivateKey, runId: string, started: AgentEvent, verdict: AgentEvent }> {
  const key = await generateKeyPair('Ed25519')
  const delegatorKey = await generateKeyPair('Ed25519')
  const runId = newRunId(agentIdOf(key))
  const started = await signEvent(key, { run_id: runId, correlation_id: 'task-verdict-pages', type: 'run.started', payload: {}, at: new Date().toISOString(), seq: 1, prev: null, executor: agentIdOf(key) })
  const verdict = await signEvent(delegatorKey, { run_id: runId, correlation_id: 'task-verdict-pages', type: 'run.failed', payload: { failure: { code: 'EXECUTOR_LOST', message: 'lost' } }, at: new Date().toISOString(), seq: 2, prev: eventHash(started), executor: agentIdOf(key), declared_by: agentIdOf(delegatorKey) })
  return { key, runId, started, verdict }
}

describe('a verdict settled against the executor\'s log, page by page', () => {
  it('keeps the whole pages before a page that fails, and reads in the executor\'s slot', async () => {
    const { key, runId, started, verdict } = await declaredRun()
    const theirs = await chain(key, runId, started, 5)
    const s = sides(started, [theirs.slice(0, 3), theirs.slice(3)], new InvalidRequestError('a lie in the next page', { reason: 'bad_chain' }))
    expect(await reconcileVerdict(s.x, {} as CorrTrack, verdict)).toBe('superseded')
    expect(s.ingested.map(p => p.map(e => e.seq))).toEqual([[2, 3, 4], [5, 6]])
    expect(s.slots).toEqual([agentIdOf(key)])
  })

  it('stops reading once the first page shows the executor took the verdict', async () => {
    const { key, runId, started, verdict } = await declaredRun()
    const s = sides(started, [[verdict], await chain(key, runId, verdict, 2)], undefined)
    expect(await reconcileVerdict(s.x, {} as CorrTrack, verdict)).toBe('kept')
    expect(s.ingested).toEqual([])
    expect(s.pagesRead()).toBe(1)
  })
})
