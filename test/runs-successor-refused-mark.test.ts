/**
 * A refused successor's mark outlived its delete. A delegator's record that
 * names a successor is written with a mark of it (adoptions.ts); the store
 * hands the record to its listeners before that write is queued, and a
 * successor its named agent does not execute is refused at once (no
 * network): the refused path deleted the mark without waiting for the
 * record's write, so the delete could reach the disk first and the write put
 * the mark back. The delegator then answered get_verdict held: true for a
 * run it never recorded, until its next start (found by session 59's
 * review). Now the record is durable before a refused successor's mark goes,
 * as for one adopted or held. And where the disk refused that write first,
 * its write made again later (RefusedRecords) staged the mark once more: a
 * refused successor is not marked again.
 */
import { generateKeyPair } from '@libp2p/crypto/keys'
import { MemoryDatastore } from 'datastore-core'
import { afterAll, afterEach, beforeAll, describe, expect, it, vi } from 'vitest'
import { agentIdOf } from '../src/identity/identity.ts'
import { silentLogger } from '../src/logger.ts'
import type { MeshNode } from '../src/node.ts'
import { PendingAdoptions } from '../src/runs/adoptions.ts'
import { verdictOn } from '../src/runs/recovery.ts'
import type { Run } from '../src/runlog/types.ts'
import { FaultyDatastore } from './fixtures/faulty-datastore.ts'
import { startLoneNodes, stopAll, until } from './helpers.ts'

const CAP = { capability_id: 'cap:successor-refused-mark', version: '1.0.0' }

describe('a successor refused at once', () => {
  let nodes: MeshNode[] = []
  let D: MeshNode
  const faulty = new FaultyDatastore(new MemoryDatastore())

  beforeAll(async () => {
    nodes = await startLoneNodes(1, { logger: silentLogger(), datastore: faulty.store })
    D = nodes[0]!
    // only the run records fail, while `failing` is set
    faulty.only = k => k.startsWith('/aap/outgoing/')
  })
  afterEach(() => { vi.restoreAllMocks() })
  afterAll(async () => {
    await stopAll(nodes)
  })

  /** A completed record of a run D delegated, handed off to a successor its named agent does not execute (refused with no call). */
  async function handedOff (tag: string): Promise<{ pred: Run, named: Run, successor: string, settled: Promise<void> }> {
    const X = agentIdOf(await generateKeyPair('Ed25519'))
    const V = agentIdOf(await generateKeyPair('Ed25519'))
    const successor = `${V}:victim-${tag}`
    const at = new Date().toISOString()
    const pred: Run = {
      run_id: `${X}:handed-off-${tag}`, agent_id: X, correlation_id: 'task-successor-refused-mark', state: 'completed', created_at: at, updated_at: at,
      capability: CAP, delegator: D.agentId, authorized: [], parent_run: null, handoff_from: null, handoff_to: null,
      checkpoint_id: null, block_reason: null, output: null, failure: null, last_seq: 1
    }
    const store = D.runs.store
    const settled = Promise.withResolvers<void>()
    const settle = store.adoptions.settle.bind(store.adoptions)
    vi.spyOn(store.adoptions, 'settle').mockImplementation(async (runId) => {
      try {
        await settle(runId)
      } finally {
        if (runId === successor) settled.resolve()
      }
    })
    await store.putOutgoing(pred, true)
    return { pred, named: { ...pred, last_seq: 2, handoff_to: { run_id: successor, agent_id: X } }, successor, settled: settled.promise }
  }

  async function markedAndHeld (successor: string): Promise<{ marked: boolean, held: boolean }> {
    const store = D.runs.store
    return { marked: await store.adoptions.marked(successor), held: (await verdictOn(store, D.agentId, successor)).held }
  }

  it('leaves no mark: the delegator does not say it holds a run it never recorded', async () => {
    const store = D.runs.store
    const refused = D.runs.successorStats.refused
    const { named, successor, settled } = await handedOff('a')
    await store.noteOutgoing(named, false)
    await settled
    await store.flushOutgoing()
    expect(D.runs.successorStats.refused).toBe(refused + 1)
    expect(await store.getOutgoing(successor)).toBeUndefined()
    // before: { marked: true, held: true } (the record's write, behind the delete, put the mark back)
    expect(await markedAndHeld(successor)).toEqual({ marked: false, held: false })
  })

  it('leaves no mark when the disk refused the naming record first and it is written again later', async () => {
    const store = D.runs.store
    const rewritten = store.refused.stats.rewritten
    const { named, successor, settled } = await handedOff('b')
    faulty.failing = true
    await expect(store.noteOutgoing(named, false)).rejects.toMatchObject({ code: 'STORAGE_FULL' })
    await settled
    faulty.failing = false
    await until(() => store.refused.stats.rewritten > rewritten, 'the refused record to be written again')
    await store.flushOutgoing()
    expect((await store.getOutgoing(named.run_id))?.handoff_to?.run_id).toBe(successor)
    // before: { marked: true, held: true } (the write made again staged the mark, and nothing settled it)
    expect(await markedAndHeld(successor)).toEqual({ marked: false, held: false })
  })
})

describe('a successor refused for one record', () => {
  it('is marked again when another record names it, or a fresh write of the same one', async () => {
    const ds = new MemoryDatastore()
    const D = agentIdOf(await generateKeyPair('Ed25519'))
    const adoptions = new PendingAdoptions(ds, D)
    const at = new Date().toISOString()
    const S = `${agentIdOf(await generateKeyPair('Ed25519'))}:successor`
    const record = (runId: string): Run => ({
      run_id: runId, agent_id: 'x', correlation_id: 'task-successor-refused-mark', state: 'completed', created_at: at, updated_at: at,
      capability: CAP, delegator: D, authorized: [], parent_run: null, handoff_from: null, handoff_to: { run_id: S, agent_id: 'y' },
      checkpoint_id: null, block_reason: null, output: null, failure: null, last_seq: 2
    })
    const write = async (run: Run, retry: boolean): Promise<void> => {
      const batch = ds.batch()
      adoptions.stage(batch, run, retry)
      await batch.commit()
    }
    await write(record('p1'), false)
    await adoptions.refuse('p1', S)
    expect(await adoptions.marked(S)).toBe(false)
    // the refused record's write made again: no mark
    await write(record('p1'), true)
    expect(await adoptions.marked(S)).toBe(false)
    // another of this node's records naming it (its own delegation of it): marked, as any successor to record
    await write(record('p2'), false)
    expect(await adoptions.marked(S)).toBe(true)
    await adoptions.settle(S)
    // a fresh write of the first record (a change of it): marked again, and asked after again
    await write(record('p1'), false)
    expect(await adoptions.marked(S)).toBe(true)
  })
})
