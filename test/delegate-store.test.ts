/**
 * The run store's write path on the delegate hot path: group-committed
 * batches (each commit resolves only once its data is in the datastore) and
 * the delegator's outgoing records, readable at once and written behind.
 */
import { describe, expect, it } from 'vitest'
import { Key, type Batch } from 'interface-datastore'
import { MemoryDatastore } from 'datastore-core'
import { RunStore } from '../src/runs/store.ts'
import { groupCommitting } from '../src/storage/group-commit.ts'
import { EventLog } from '../src/runlog/event-log.ts'
import type { AgentEvent, Run } from '../src/runlog/types.ts'

/** A memory datastore that counts the batches it commits and can be told to fail them. */
class CountingDatastore extends MemoryDatastore {
  commits = 0
  fail = false
  override batch (): Batch {
    const inner = super.batch()
    return {
      put: (k, v) => { inner.put(k, v) },
      delete: (k) => { inner.delete(k) },
      commit: async () => {
        this.commits++
        await Promise.resolve()
        if (this.fail) throw new Error('disk full')
        await inner.commit()
      }
    }
  }
}

const AGENT = '12D3KooWExecutorAgentIdForStoreTestsxxxxxxxxxxxxxxxxx'

function run (n: number, state: Run['state'] = 'running', lastSeq = 1): Run {
  const now = new Date(0).toISOString()
  return {
    run_id: `${AGENT}:${n.toString(16).padStart(24, '0')}`,
    agent_id: AGENT,
    correlation_id: `task-${n}`,
    capability: { capability_id: 'cap:x', version: '1.0.0' },
    delegator: 'someone',
    authorized: [],
    parent_run: null,
    handoff_from: null,
    handoff_to: null,
    state,
    created_at: now,
    updated_at: now,
    checkpoint_id: null,
    block_reason: null,
    output: null,
    failure: null,
    last_seq: lastSeq
  }
}

function started (r: Run): AgentEvent {
  return { run_id: r.run_id, correlation_id: r.correlation_id, type: 'run.started', payload: {}, at: r.created_at, seq: 1, prev: null, executor: AGENT, signature: 'x' }
}

describe('group commit', () => {
  it('writes the first commit at once, groups what arrives meanwhile, and resolves each commit once its data is stored', async () => {
    const ds = new CountingDatastore()
    const store = new RunStore(ds)
    // opened as Runs.start opens it (its run index is read or built first)
    await store.open()
    const commitsBefore = ds.commits
    const log = new EventLog(groupCommitting(ds))
    const runs = Array.from({ length: 20 }, (_, i) => run(i))
    const writes = [
      ...runs.map(async r => {
        await store.commit(r, started(r))
        // resolved: the run and its event are in the datastore itself
        expect(await ds.has(new Key(`/aap/runs/${encodeURIComponent(r.run_id)}`))).toBe(true)
        expect(await ds.has(EventLog.eventKey(r.run_id, 1))).toBe(true)
      }),
      log.append([{ ...started(run(99)) }])
    ]
    await Promise.all(writes)
    // the first went alone (an idle store adds no latency); the 20 behind it shared one batch
    expect(ds.commits - commitsBefore).toBe(2)
    expect((await store.get(runs[7]!.run_id))?.run_id).toBe(runs[7]!.run_id)
  })

  it('starts the next group as soon as the current one is written, keeping the order of writes to one key', async () => {
    const ds = new CountingDatastore()
    const wrapped = groupCommitting(ds)
    expect(groupCommitting(ds)).toBe(wrapped)
    expect(groupCommitting(wrapped)).toBe(wrapped)
    const key = new Key('/aap/test/k')
    const put = async (v: string): Promise<void> => {
      const b = wrapped.batch()
      b.put(key, new TextEncoder().encode(v))
      await b.commit()
    }
    const first = put('1')
    // the first group is being written: these two wait and leave together, in order
    const rest = [put('2'), put('3')]
    await Promise.all([first, ...rest])
    expect(ds.commits).toBe(2)
    expect(new TextDecoder().decode(await ds.get(key))).toBe('3')
    const del = wrapped.batch()
    del.delete(key)
    await del.commit()
    expect(await ds.has(key)).toBe(false)
  })

  it('rejects every commit of a group whose batch fails, and writes the next group normally', async () => {
    const ds = new CountingDatastore()
    const store = new RunStore(ds)
    ds.fail = true
    const results = await Promise.allSettled([run(1), run(2)].map(async r => store.commit(r, started(r))))
    expect(results.map(r => r.status)).toEqual(['rejected', 'rejected'])
    expect(await store.get(run(1).run_id)).toBeUndefined()
    ds.fail = false
    await store.commit(run(3), started(run(3)))
    expect((await store.get(run(3).run_id))?.state).toBe('running')
  })
})

describe('outgoing records', () => {
  it('are readable at once and durable once putOutgoing resolves or flushOutgoing does', async () => {
    const ds = new CountingDatastore()
    const store = new RunStore(ds)
    const r = run(5)
    const written = store.putOutgoing(r)
    // not in the datastore yet, but the store answers with it
    expect(await ds.has(new Key(`/aap/outgoing/${encodeURIComponent(r.run_id)}`))).toBe(false)
    expect((await store.getOutgoing(r.run_id))?.state).toBe('running')
    const all: Run[] = []
    for await (const x of store.allOutgoing()) all.push(x)
    expect(all.map(x => x.run_id)).toEqual([r.run_id])
    await store.flushOutgoing()
    await written
    expect(await ds.has(new Key(`/aap/outgoing/${encodeURIComponent(r.run_id)}`))).toBe(true)

    // a newer state, still on its way, wins over the stored one when listed
    void store.putOutgoing({ ...r, state: 'completed', last_seq: 2 })
    const listed: Run[] = []
    for await (const x of store.allOutgoing()) listed.push(x)
    expect(listed.map(x => x.state)).toEqual(['completed'])
    await store.flushOutgoing()
    // a fresh store (a restart) reads the last state from the datastore
    expect((await new RunStore(ds).getOutgoing(r.run_id))?.state).toBe('completed')
  })

  it('move only with a newer view of the same run: one continuing another run does not rewrite the record', async () => {
    const store = new RunStore(new CountingDatastore())
    // the record kept from a handoff's link: the successor of run 1
    const held: Run = { ...run(6), handoff_from: { run_id: run(1).run_id, agent_id: AGENT } }
    await store.noteOutgoing(held)
    // an answer about the same run id that continues nothing (or another run) is another run's view
    await store.noteOutgoing({ ...held, handoff_from: null, state: 'completed', last_seq: 9 }, false)
    await store.noteOutgoing({ ...held, handoff_from: { run_id: run(2).run_id, agent_id: AGENT }, state: 'completed', last_seq: 9 })
    expect(await store.getOutgoing(held.run_id)).toEqual(held)
    // the same run's newer view moves it; an older one does not
    await store.noteOutgoing({ ...held, state: 'blocked', last_seq: 4 }, false)
    await store.noteOutgoing({ ...held, state: 'running', last_seq: 3 }, false)
    expect((await store.getOutgoing(held.run_id))?.state).toBe('blocked')
  })
})
