/**
 * A liveness verdict never stands on a live record (protocols/liveness.md):
 * once the executor's own word (its answer to get_run, here) has put the
 * delegator's record back to live, `get_verdict` answers no verdict. Before,
 * the verdict stayed stored and was handed out; the executor's orphan watch
 * took it and ended its live run (recovery.ts adoptVerdict). Found by session
 * 55's review of its own change, on a real LevelDB run store.
 */
import { mkdtemp, rm } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { generateKeyPair } from '@libp2p/crypto/keys'
import { MemoryDatastore } from 'datastore-core'
import type { Datastore } from 'interface-datastore'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { agentIdOf, openDatastore } from '../src/identity/identity.ts'
import { signEvent } from '../src/runlog/event.ts'
import { issueDelegationTicket } from '../src/runlog/ticket.ts'
import type { Run } from '../src/runlog/types.ts'
import { signVerdict } from '../src/runlog/verdict.ts'
import { verdictOn } from '../src/runs/recovery.ts'
import { RunStore } from '../src/runs/store.ts'
import { guardWrites } from '../src/storage/write-guard.ts'
import { FaultyDatastore } from './fixtures/faulty-datastore.ts'
import { runRecord } from './fixtures/run-record.ts'

const CAP = { capability_id: 'cap:verdict-live-record', version: '1.0.0' }

describe('get_verdict on a record the executor put back to live', () => {
  let dir: string
  let ds: Datastore & { close?: () => Promise<void> }

  beforeAll(async () => {
    dir = await mkdtemp(join(tmpdir(), 'aap-verdict-live-'))
    ds = await openDatastore(dir)
  })
  afterAll(async () => {
    await ds.close?.()
    await rm(dir, { recursive: true, force: true })
  })

  it('answers no verdict once the record is live again, and the verdict while it is failed', async () => {
    const store = new RunStore(ds)
    await store.open()
    const dKey = await generateKeyPair('Ed25519')
    const xKey = await generateKeyPair('Ed25519')
    const D = agentIdOf(dKey)
    const X = agentIdOf(xKey)
    const ticket = await issueDelegationTicket(dKey, { executor: X, correlation_id: 'task-verdict-live', capability: CAP, parent_run: null, authorized: [] })
    const at = new Date().toISOString()
    const started = await signEvent(xKey, {
      run_id: ticket.run_id, correlation_id: 'task-verdict-live', type: 'run.started', at, seq: 1, prev: null, executor: X,
      payload: { delegator: D, capability: CAP, parent_run: null, input: {}, ticket: ticket as unknown as Record<string, unknown> }
    })
    const live: Run = {
      run_id: ticket.run_id, agent_id: X, correlation_id: 'task-verdict-live', state: 'running', created_at: at, updated_at: at,
      capability: CAP, delegator: D, authorized: [], parent_run: null, handoff_from: null, handoff_to: null,
      checkpoint_id: null, block_reason: null, output: null, failure: null, last_seq: 1
    }
    await store.putOutgoing(live, true)
    // the delegator declared the executor lost: the verdict is the run's seq 2
    const verdict = await signVerdict(dKey, D, started, 'the executor could not be reached')
    await store.putVerdict(verdict, { run_id: live.run_id, executor: X, since: Date.now(), before: live })
    await store.putOutgoing({ ...live, state: 'failed', failure: { code: 'EXECUTOR_LOST', message: 'lost' }, last_seq: 2 })
    expect(await verdictOn(store, D, live.run_id)).toEqual({ verdict, held: false })
    // the executor answers get_run: it went on, blocked, at seq 2 of its own
    await store.noteOutgoing({ ...live, state: 'blocked', checkpoint_id: 'cp', block_reason: 'a person decides', last_seq: 2 }, false)
    expect((await store.getOutgoing(live.run_id))?.state).toBe('blocked')
    // before: { verdict, held: true }, and the executor ended its blocked run with the verdict
    expect(await verdictOn(store, D, live.run_id)).toEqual({ verdict: null, held: true })
    // on disk too, in the write that made the record live: a restart finds no verdict and no notice to offer the
    // executor (before: both stayed stored beside the live record, held back only by readers that looked twice)
    await store.flushOutgoing()
    expect(await store.getVerdict(live.run_id)).toBeUndefined()
    const reopened = new RunStore(ds)
    await reopened.open()
    const open: string[] = []
    for await (const { notice } of reopened.notices(16)) open.push(notice.run_id)
    expect(open).not.toContain(live.run_id)
    expect((await reopened.getOutgoing(live.run_id))?.state).toBe('blocked')
  })

  // session 56's review: a refused record keeps its first `fresh` (nothing of the run reached the disk), and the
  // write of a fresh record skipped the deletes, so a live record refused and written again later left the verdict
  // put meanwhile beside it
  it('deletes them when a refused live record of a new run is written again after a verdict', async () => {
    const faulty = new FaultyDatastore(new MemoryDatastore())
    // guarded as the node guards its store: a refused write is a StorageFullError, which the store writes again
    const store = new RunStore(guardWrites(faulty.store))
    await store.open()
    const dKey = await generateKeyPair('Ed25519')
    const xKey = await generateKeyPair('Ed25519')
    const D = agentIdOf(dKey)
    const X = agentIdOf(xKey)
    const ticket = await issueDelegationTicket(dKey, { executor: X, correlation_id: 'task-verdict-refused', capability: CAP, parent_run: null, authorized: [] })
    const at = new Date().toISOString()
    const started = await signEvent(xKey, {
      run_id: ticket.run_id, correlation_id: 'task-verdict-refused', type: 'run.started', at, seq: 1, prev: null, executor: X,
      payload: { delegator: D, capability: CAP, parent_run: null, input: {}, ticket: ticket as unknown as Record<string, unknown> }
    })
    const live = runRecord({ run_id: ticket.run_id, agent_id: X, delegator: D, correlation_id: 'task-verdict-refused', capability: CAP, created_at: at })
    // the disk refuses the run's records (not the verdict's keys) from its first write on
    faulty.only = key => key.startsWith('/aap/outgoing')
    faulty.failing = true
    await expect(store.putOutgoing(live, true)).rejects.toThrow()
    const verdict = await signVerdict(dKey, D, started, 'the executor could not be reached')
    await store.putVerdict(verdict, { run_id: live.run_id, executor: X, since: Date.now(), before: live })
    await expect(store.putOutgoing({ ...live, state: 'failed', failure: { code: 'EXECUTOR_LOST', message: 'lost' }, last_seq: 2 })).rejects.toThrow()
    // the executor's own word puts it back to live; refused too
    await expect(store.putOutgoing({ ...live, state: 'blocked', checkpoint_id: 'cp', block_reason: 'a person decides', last_seq: 2 })).rejects.toThrow()
    faulty.failing = false
    await store.refused.stop()
    expect(store.refused.stats.rewritten).toBe(1)
    expect((await store.getOutgoing(live.run_id))?.state).toBe('blocked')
    expect(await store.getVerdict(live.run_id)).toBeUndefined()
    const open: string[] = []
    for await (const { notice } of store.notices(16)) open.push(notice.run_id)
    expect(open).toEqual([])
  })
})
