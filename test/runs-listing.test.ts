/**
 * Run listing from the run index (src/runs/run-index.ts): 10,000 runs
 * listed page by page come back each exactly once with every filter applied,
 * through the in-process API and over HTTP; cursors are opaque and checked;
 * the `aap_runs` metric is read from the index counts without one datastore
 * read of a run; an index missing from a data dir is rebuilt from the store.
 *
 * The executor node keeps a real LevelDB datastore wrapped in a read spy (a
 * plain counting proxy around the datastore, not a libp2p mock). Three runs
 * come from real delegations; the other 10,000 records are written through
 * the store's own write path (RunStore.commit with signed events, and
 * RunStore.putOutgoing), many of them twice so that state changes move them
 * in the index.
 */
import { mkdtemp, rm } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { generateKeyPair } from '@libp2p/crypto/keys'
import type { PrivateKey } from '@libp2p/interface'
import type { Datastore } from 'interface-datastore'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { newToken } from '../src/api/files.ts'
import { NodeMetrics } from '../src/api/metrics.ts'
import { startApiServer, type ApiServer } from '../src/api/server.ts'
import type { CapabilityRef } from '../src/card/card.ts'
import { RUN_LIST_CURSOR_MAX_CHARS, RUN_LIST_MAX_LIMIT } from '../src/constants.ts'
import { agentIdOf, openDatastore } from '../src/identity/identity.ts'
import type { MeshNode } from '../src/node.ts'
import { EventSigner } from '../src/runlog/signer.ts'
import { RUN_STATES, type Run, type RunState } from '../src/runlog/types.ts'
import type { RunFilter } from '../src/runs/run-index.ts'
import { RunStore } from '../src/runs/store.ts'
import { apiDocument } from '../src/api/openapi.ts'
import { raw } from './api-helpers.ts'
import { cli } from './cli-helpers.ts'
import { nextEvent, rejectsWith, startMesh, stopAll, until } from './helpers.ts'
import { runRecord } from './fixtures/run-record.ts'

const EXECUTING = 8_000
const DELEGATED = 2_000
const CORRELATIONS = 50
const BASE_MS = Date.parse('2026-01-01T00:00:00.000Z')
const caps: CapabilityRef[] = [
  { capability_id: 'cap:list-a', version: '1.0.0' },
  { capability_id: 'cap:list-a', version: '2.0.0' },
  { capability_id: 'cap:list-b', version: '1.0.0' }
]

/** Reads of run data (records, outgoing records, index) counted at the datastore, LevelDB iterators included. */
interface ReadSpy { reads: number }

const RUN_KEYS = /^\/aap\/(runs|outgoing|ridx)/

function keyText (k: unknown): string {
  return typeof k === 'string' ? k : String(k)
}

/** The datastore with every read of run keys counted (the run store reaches LevelDB's iterator through `db`). */
function spied (ds: Datastore, spy: ReadSpy): Datastore {
  const count = (key: string): void => { if (RUN_KEYS.test(key)) spy.reads++ }
  return new Proxy(ds, {
    get (target, prop) {
      const v: unknown = Reflect.get(target, prop, target)
      if (prop === 'db' && v !== null && typeof v === 'object') {
        return new Proxy(v, {
          get (db, p) {
            const f: unknown = Reflect.get(db, p, db)
            if (typeof f !== 'function') return f
            if (p === 'iterator' || p === 'keys' || p === 'values') {
              return (opts: Record<string, unknown> = {}) => {
                count(keyText(opts.gt ?? opts.gte ?? opts.lt ?? '/aap/runs'))
                return (f as (o: unknown) => unknown).call(db, opts)
              }
            }
            if (p === 'get' || p === 'getMany') {
              return (k: unknown, ...rest: unknown[]) => {
                count(keyText(Array.isArray(k) ? k[0] : k))
                return (f as (...a: unknown[]) => unknown).call(db, k, ...rest)
              }
            }
            return (f as (...a: unknown[]) => unknown).bind(db)
          }
        })
      }
      if (typeof v !== 'function') return v
      if (prop === 'get' || prop === 'has') return async (k: unknown, ...rest: unknown[]) => { count(keyText(k)); return (v as (...a: unknown[]) => unknown).call(target, k, ...rest) }
      if (prop === 'query' || prop === 'queryKeys') return (q: { prefix?: string }, ...rest: unknown[]) => { count(q.prefix ?? '/aap/runs'); return (v as (...a: unknown[]) => unknown).call(target, q, ...rest) }
      return (v as (...a: unknown[]) => unknown).bind(target)
    }
  })
}

function iso (ms: number): string {
  return new Date(ms).toISOString()
}

describe('listing runs from the run index', () => {
  let nodes: MeshNode[] = []
  let A: MeshNode, B: MeshNode
  let keyB: PrivateKey
  let dir: string
  let level: Datastore & { close?: () => Promise<void> }
  const spy: ReadSpy = { reads: 0 }
  /** Every run B lists, as the test wrote (or delegated) it. */
  const expected = new Map<string, { side: 'executing' | 'delegated', run: Run, late?: boolean }>()
  let others: string[] = []
  let api: ApiServer
  let token: string

  beforeAll(async () => {
    dir = await mkdtemp(join(tmpdir(), 'aap-listing-'))
    keyB = await generateKeyPair('Ed25519')
    level = await openDatastore(dir)
    const ds = spied(level, spy)
    // the delegated records below are written straight to the store and name runs their executors do not
    // hold: liveness (a probe answered RUN_NOT_FOUND fails the record) is not under test here, so it stays idle
    nodes = await startMesh(2, { nodeOptions: i => i === 1 ? { privateKey: keyB, datastore: ds, liveness: { probeIntervalMs: 3_600_000 } } : {} })
    ;[A, B] = nodes as [MeshNode, MeshNode]
    B.runs.handle(caps[0] as CapabilityRef, async (ctx) => ({ echo: ctx.input.n ?? null }))
    await B.publishCard({ name: 'lister', capabilities: [caps[0] as CapabilityRef] })
    others = [A.agentId, agentIdOf(await generateKeyPair('Ed25519')), agentIdOf(await generateKeyPair('Ed25519'))]
    token = newToken()
    api = await startApiServer(B, { token, port: 0, checkResponses: true })
  }, 60_000)

  afterAll(async () => {
    await api?.close()
    await stopAll(nodes)
    await level?.close?.()
    if (dir !== undefined) await rm(dir, { recursive: true, force: true })
  })

  it('lists the runs of real delegations on both sides, with a cursor', async () => {
    const real: Run[] = []
    for (let n = 0; n < 3; n++) {
      const done = nextEvent(B, e => e.type === 'run.completed' && e.correlation_id === `real-${n}`)
      real.push(await A.delegate({ to_agent: B.agentId, task_id: `real-${n}`, capability: caps[0] as CapabilityRef, input: { n } }))
      await done
    }
    for (const r of real) expected.set(r.run_id, { side: 'executing', run: await B.runs.store.get(r.run_id) as Run })
    // the executor lists them, completed, two to a page
    const first = await B.runs.list({ capability: { capability_id: 'cap:list-a', version: '1.0.0' } }, { limit: 2 })
    expect(first.executing.map(r => r.run_id)).toEqual(real.slice(0, 2).map(r => r.run_id))
    expect(first.next_cursor).not.toBeNull()
    const second = await B.runs.list({ capability: { capability_id: 'cap:list-a', version: '1.0.0' } }, { limit: 2, cursor: first.next_cursor as string })
    expect(second.executing.map(r => r.run_id)).toEqual([real[2]?.run_id])
    expect(second.executing.every(r => r.state === 'completed')).toBe(true)
    // the delegator lists its records by the executor it delegated to
    const delegated = await A.runs.list({ agent: B.agentId })
    expect(delegated.delegated.map(r => r.run_id).sort()).toEqual(real.map(r => r.run_id).sort())
    expect(delegated.next_cursor).toBeNull()
    expect(A.runs.counts().delegated.running + A.runs.counts().delegated.completed).toBe(3)
  })

  it('10,000 runs come back page by page, each exactly once, with every filter applied', async () => {
    const signer = new EventSigner(keyB)
    const store = B.runs.store
    const writes: Array<Promise<void>> = []
    const flush = async (): Promise<void> => { await Promise.all(writes.splice(0)) }
    for (let i = 0; i < EXECUTING; i++) {
      const cap = caps[i % caps.length] as CapabilityRef
      // executing runs end up blocked, completed or failed (a restart would fail running ones)
      const final: RunState = i % 16 === 0 ? 'blocked' : i % 3 === 0 ? 'failed' : 'completed'
      // created_at of the test's own, two runs to a millisecond: the index orders runs by when this node stored them
      const at = iso(BASE_MS + Math.floor(i / 2))
      const run = runRecord({
        run_id: `${B.agentId}:bulk-${i}`,
        agent_id: B.agentId,
        delegator: others[i % others.length] as string,
        correlation_id: `corr-${i % CORRELATIONS}`,
        capability: cap,
        created_at: at
      })
      writes.push((async () => {
        const started = await signer.sign({ run_id: run.run_id, correlation_id: run.correlation_id, type: 'run.started', payload: { input: {} }, at, seq: 1, prev: null, executor: B.agentId })
        await store.commit(run, started)
        const type = final === 'blocked' ? 'run.blocked' : final === 'failed' ? 'run.failed' : 'run.completed'
        const done: Run = { ...run, state: final, last_seq: 2, checkpoint_id: final === 'blocked' ? 'cp' : null, block_reason: final === 'blocked' ? 'wait' : null }
        const ended = await signer.sign({ run_id: run.run_id, correlation_id: run.correlation_id, type, payload: {}, at, seq: 2, prev: null, executor: B.agentId })
        await store.commit(done, ended)
        expected.set(run.run_id, { side: 'executing', run: done })
      })())
      if (writes.length >= 500) await flush()
    }
    // `since` names when this node stored a run, by its clock: the delegated records below are stored after it
    await flush()
    const before = Date.now()
    await until(() => Date.now() > before, 'the clock to pass the last executing run stored')
    const midpoint = iso(Date.now())
    for (let i = 0; i < DELEGATED; i++) {
      const executor = others[i % others.length] as string
      const at = iso(BASE_MS + Math.floor(i / 2) + 1_000)
      const state = RUN_STATES[i % RUN_STATES.length] as RunState
      const run = runRecord({
        run_id: `${executor}:out-${i}`,
        agent_id: executor,
        delegator: B.agentId,
        correlation_id: `corr-${i % CORRELATIONS}`,
        capability: caps[i % caps.length] as CapabilityRef,
        created_at: at
      })
      writes.push((async () => {
        await store.putOutgoing(run)
        const now = { ...run, state, last_seq: 2 }
        if (state !== 'running') await store.putOutgoing(now)
        expected.set(run.run_id, { side: 'delegated', run: now, late: true })
      })())
      if (writes.length >= 500) await flush()
    }
    await flush()
    expect(expected.size).toBe(EXECUTING + DELEGATED + 3)

    const filters: RunFilter[] = [
      {},
      { state: 'blocked' },
      { state: 'running' },
      { correlation_id: 'corr-7' },
      { correlation_id: 'corr-3', state: 'failed' },
      { agent: others[0] as string, state: 'running' },
      { agent: others[1] as string },
      { agent: B.agentId },
      { capability: { capability_id: 'cap:list-a', version: null } },
      { capability: { capability_id: 'cap:list-a', version: '2.0.0' } },
      { since: midpoint },
      { state: 'completed', capability: { capability_id: 'cap:list-b', version: null }, since: midpoint, agent: others[2] as string }
    ]
    const late = (r: Run): boolean => expected.get(r.run_id)?.late === true
    const want = (f: RunFilter, r: Run): boolean =>
      (f.state === undefined || r.state === f.state) &&
      (f.correlation_id === undefined || r.correlation_id === f.correlation_id) &&
      (f.agent === undefined || r.agent_id === f.agent || r.delegator === f.agent) &&
      (f.capability === undefined || (r.capability.capability_id === f.capability.capability_id && (f.capability.version === null || r.capability.version === f.capability.version))) &&
      (f.since === undefined || late(r))
    for (const [f, order] of filters.flatMap(f => [[f, 'oldest'], [f, 'newest']] as const)) {
      const seen = new Map<string, string>()
      let cursor: string | undefined
      let pages = 0
      do {
        const page = await B.runs.list(f, { limit: 500, order, ...(cursor === undefined ? {} : { cursor }) })
        expect(page.executing.length + page.delegated.length).toBeLessThanOrEqual(500)
        for (const [side, runs] of [['executing', page.executing], ['delegated', page.delegated]] as const) {
          for (const r of runs) {
            expect(seen.has(r.run_id), `${r.run_id} listed twice for ${JSON.stringify(f)}`).toBe(false)
            seen.set(r.run_id, side)
            expect(want(f, r), `${r.run_id} does not match ${JSON.stringify(f)}`).toBe(true)
          }
        }
        cursor = page.next_cursor ?? undefined
        pages++
      } while (cursor !== undefined)
      const wanted = [...expected].filter(([, e]) => want(f, e.run))
      expect(seen.size, JSON.stringify(f)).toBe(wanted.length)
      for (const [id, e] of wanted) expect(seen.get(id), `${id} for ${JSON.stringify(f)}`).toBe(e.side)
      expect(pages).toBeGreaterThanOrEqual(Math.ceil(wanted.length / 500))
    }

    // newest first, one side only: the same runs, in reverse order of the oldest-first listing (the order they were stored)
    const listed = async (order: 'oldest' | 'newest'): Promise<string[]> => {
      const ids: string[] = []
      let back: string | undefined
      do {
        const page = await B.runs.list({ side: 'delegated', capability: { capability_id: 'cap:list-a', version: null } }, { limit: 250, order, ...(back === undefined ? {} : { cursor: back }) })
        expect(page.executing).toEqual([])
        ids.push(...page.delegated.map(r => r.run_id))
        back = page.next_cursor ?? undefined
      } while (back !== undefined)
      return ids
    }
    const oldestFirst = await listed('oldest')
    expect(oldestFirst.length).toBe([...expected.values()].filter(e => e.side === 'delegated' && e.run.capability.capability_id === 'cap:list-a').length)
    expect(await listed('newest')).toEqual(oldestFirst.reverse())
    // a cursor is bound to its order too
    const firstNewest = await B.runs.list({}, { limit: 5, order: 'newest' })
    await rejectsWith(B.runs.list({}, { limit: 5, cursor: firstNewest.next_cursor as string }), 'INVALID_REQUEST')
    // every page carries the node's counts of all its runs
    expect(firstNewest.counts.executing.blocked).toBe([...expected.values()].filter(e => e.side === 'executing' && e.run.state === 'blocked').length)

    // over HTTP: the same listing, a thousand to a page, each answer checked against the document
    const seen = new Set<string>()
    let cursor: string | null = null
    do {
      const q = new URLSearchParams({ limit: String(RUN_LIST_MAX_LIMIT), capability: 'cap:list-a' })
      if (cursor !== null) q.set('cursor', cursor)
      const res = await raw(`${api.url}/v1/runs?${q}`, { token })
      expect(res.status).toBe(200)
      for (const r of [...res.body.executing, ...res.body.delegated] as Run[]) {
        expect(seen.has(r.run_id)).toBe(false)
        seen.add(r.run_id)
      }
      cursor = res.body.next_cursor
    } while (cursor !== null)
    expect(seen.size).toBe([...expected.values()].filter(e => e.run.capability.capability_id === 'cap:list-a').length)

    // the CLI: filters, one page with its cursor, then --all to the end
    const args = ['runs', 'list', '--api-url', api.url, '--token', token, '--capability', 'cap:list-b', '--state', 'completed', '--since', midpoint, '--json']
    const wantedIds = [...expected].filter(([, e]) => want({ capability: { capability_id: 'cap:list-b', version: null }, state: 'completed', since: midpoint }, e.run)).map(([id]) => id).sort()
    const [page, all] = await Promise.all([cli([...args, '--limit', '7']), cli([...args, '--limit', '300', '--all'])])
    expect(page.code, page.stderr).toBe(0)
    expect(page.json.executing.length + page.json.delegated.length).toBe(7)
    expect(typeof page.json.next_cursor).toBe('string')
    expect(all.code, all.stderr).toBe(0)
    expect(all.json.next_cursor).toBeNull()
    expect([...all.json.executing, ...all.json.delegated].map((r: Run) => r.run_id).sort()).toEqual(wantedIds)
    const rest = await cli([...args, '--limit', '300', '--all', '--cursor', page.json.next_cursor])
    expect([...page.json.executing, ...page.json.delegated, ...rest.json.executing, ...rest.json.delegated].map((r: Run) => r.run_id).sort()).toEqual(wantedIds)
  }, 300_000)

  it('a cursor that was altered, is used with other filters, or is not one at all is a 400, and so is a page over the bound', async () => {
    const first = await B.runs.list({ state: 'completed' }, { limit: 3 })
    const cursor = first.next_cursor as string
    expect(typeof cursor).toBe('string')
    await rejectsWith(B.runs.list({ state: 'failed' }, { cursor }), 'INVALID_REQUEST')
    await rejectsWith(B.runs.list({ state: 'completed' }, { limit: RUN_LIST_MAX_LIMIT + 1 }), 'INVALID_REQUEST')
    const [payload, mac] = cursor.split('.') as [string, string]
    const decoded = JSON.parse(Buffer.from(payload, 'base64url').toString()) as unknown[]
    decoded[1] = '0000'
    const forged = `${Buffer.from(JSON.stringify(decoded)).toString('base64url')}.${mac}`
    const get = async (q: string): Promise<Awaited<ReturnType<typeof raw>>> => raw(`${api.url}/v1/runs?${q}`, { token })
    for (const [what, q] of [
      ['forged position', `state=completed&cursor=${forged}`],
      ['other filters', `state=failed&cursor=${cursor}`],
      ['garbage', 'cursor=abc'],
      ['bad mac', `state=completed&cursor=${payload}.AAAAAAAAAAAAAAAAAAAAAA`]
    ] as const) {
      const res = await get(q)
      expect(res.status, what).toBe(400)
      expect(res.body.error, what).toMatchObject({ code: 'INVALID_REQUEST', details: { reason: 'bad_cursor' } })
    }
    for (const q of [`limit=${RUN_LIST_MAX_LIMIT + 1}`, 'limit=0', `cursor=${'a'.repeat(RUN_LIST_CURSOR_MAX_CHARS + 1)}`, 'since=yesterday', 'agent=nobody']) {
      const res = await get(q)
      expect(res.status, q).toBe(400)
      expect(res.body.error.code, q).toBe('INVALID_REQUEST')
    }
    // the untouched cursor still works
    const next = await get(`state=completed&limit=3&cursor=${cursor}`)
    expect(next.status).toBe(200)
    expect(next.body.executing).toHaveLength(3)
  })

  it('the aap_runs metric is read from the index counts: a scrape reads no run data', async () => {
    const metrics = new NodeMetrics()
    metrics.attach(B)
    const count = (side: string, state: RunState): number => [...expected.values()].filter(e => e.side === side && e.run.state === state).length
    const before = spy.reads
    const text = await metrics.text()
    const text2 = await metrics.text()
    expect(spy.reads - before).toBe(0)
    for (const side of ['executing', 'delegated']) {
      for (const state of RUN_STATES) {
        const line = new RegExp(`^aap_runs\\{state="${state}",side="${side}"\\} (\\d+)$`, 'm')
        expect(Number(line.exec(text)?.[1]), `${side} ${state}`).toBe(count(side, state))
        expect(text2).toMatch(line)
      }
    }
    // the spy does see reads: a listing makes some
    await B.runs.list({ state: 'blocked' }, { limit: 10 })
    expect(spy.reads).toBeGreaterThan(before)
    metrics.detach()
  })

  it('the document bounds are the node constants', () => {
    const doc = apiDocument as { paths: Record<string, { get?: { parameters?: unknown[] } }> }
    const params = (doc.paths['/v1/runs']?.get?.parameters ?? []) as Array<{ name: string, schema: { maximum?: number, maxLength?: number } }>
    expect(params.find(p => p.name === 'limit')?.schema.maximum).toBe(RUN_LIST_MAX_LIMIT)
    expect(params.find(p => p.name === 'cursor')?.schema.maxLength).toBe(RUN_LIST_CURSOR_MAX_CHARS)
  })

  it('a data dir without the index (written before it existed) gets it rebuilt from the store on open', async () => {
    await api.close()
    await B.stop()
    nodes = [A]
    // take the index away, as an older version left the data dir
    const batch = level.batch()
    let removed = 0
    for await (const key of level.queryKeys({ prefix: '/aap/ridx' })) { batch.delete(key); removed++ }
    await batch.commit()
    expect(removed).toBeGreaterThan(EXECUTING + DELEGATED)
    const store = new RunStore(level)
    await store.open()
    const counts = store.index.counts()
    for (const side of ['executing', 'delegated'] as const) {
      for (const state of RUN_STATES) expect(counts[side][state]).toBe([...expected.values()].filter(e => e.side === side && e.run.state === state).length)
    }
    const ids = new Set<string>()
    let cursor: string | null = null
    do {
      const page: Awaited<ReturnType<RunStore['page']>> = await store.page({}, { limit: RUN_LIST_MAX_LIMIT, ...(cursor === null ? {} : { cursor }) })
      for (const r of [...page.executing, ...page.delegated]) ids.add(r.run_id)
      cursor = page.next_cursor
    } while (cursor !== null)
    expect(ids.size).toBe(expected.size)
  }, 120_000)
})
