/**
 * Hazards of the write guard's reopen of a LevelDB store (write-guard.ts,
 * reopen.ts), found by session 52's review of it:
 *
 * - a write LevelDB took right after one it refused (its writer queue puts it
 *   after the torn record) was acknowledged, then dropped by the reopen. The
 *   LevelDB here is a model of that queue, since the real one cannot be made
 *   to tear on cue: writes apply one at a time in the order they reach it, a
 *   refused write tears the log, what comes after a tear is acknowledged, and
 *   the next open keeps only what came before it;
 * - a reopen whose open failed left the store closed, and every read failed
 *   with LevelDB's raw "not open" until some write came along;
 * - a write its caller aborted (datastore-level races the signal; libp2p's
 *   peer store passes DHT and dial signals down) was taken for a failing
 *   disk, and the healthy store closed and opened again for it.
 */
import { mkdtemp, rm } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { Key, type Datastore } from 'interface-datastore'
import { afterEach, describe, expect, it } from 'vitest'
import { openDatastore } from '../src/identity/identity.ts'
import { groupCommitting } from '../src/storage/group-commit.ts'
import { readOptional } from '../src/storage/read.ts'
import { levelReopener } from '../src/storage/reopen.ts'
import { guardWrites } from '../src/storage/write-guard.ts'

class TornLevel {
  status = 'open'
  readonly location: string
  entries = new Map<string, { value: Uint8Array, afterTear: boolean }>()
  torn = false
  failNext = 0
  private chain: Promise<void> = Promise.resolve()
  constructor (location: string) { this.location = location }
  async open (): Promise<void> {
    // recovery reads the log up to the tear
    for (const [k, e] of this.entries) if (e.afterTear) this.entries.delete(k)
    this.torn = false
    this.status = 'open'
  }

  async close (): Promise<void> { this.status = 'closed' }
  /** One write, after every write handed over before it (LevelDB's writer queue). */
  async write (ops: Array<[string, Uint8Array]>): Promise<void> {
    const run = this.chain.then(async () => {
      await new Promise(resolve => setTimeout(resolve, 2))
      if (this.status !== 'open') throw Object.assign(new Error('Database is not open'), { code: 'LEVEL_DATABASE_NOT_OPEN' })
      if (this.failNext > 0) {
        this.failNext--
        this.torn = true
        throw Object.assign(new Error('IO error: No space left on device'), { code: 'ENOSPC' })
      }
      for (const [k, v] of ops) this.entries.set(k, { value: v, afterTear: this.torn })
    })
    this.chain = run.catch(() => {})
    return run
  }
}

function tornStore (db: TornLevel): Datastore {
  const ds = {
    db,
    opts: {},
    put: async (k: Key, v: Uint8Array) => { await db.write([[k.toString(), v]]); return k },
    get: async (k: Key) => {
      const e = db.entries.get(k.toString())
      if (e === undefined) throw Object.assign(new Error('not found'), { name: 'NotFoundError' })
      return e.value
    },
    has: async (k: Key) => db.entries.has(k.toString()),
    delete: async () => {},
    batch: () => {
      const ops: Array<[string, Uint8Array]> = []
      return { put: (k: Key, v: Uint8Array) => { ops.push([k.toString(), v]) }, delete: () => {}, commit: async () => { await db.write(ops) } }
    },
    query: async function * () {},
    queryKeys: async function * () {}
  }
  return ds as unknown as Datastore
}

describe('a write in flight when another is refused', () => {
  const dirs: string[] = []
  afterEach(async () => { for (const d of dirs.splice(0)) await rm(d, { recursive: true, force: true }) })

  it('acknowledges no write that LevelDB appended after a torn record (a peer-store put fails beside a run batch)', async () => {
    const dir = await mkdtemp(join(tmpdir(), 'aap-reopen-beside-'))
    dirs.push(dir)
    const db = new TornLevel(dir)
    const guarded = guardWrites(tornStore(db))
    const runData = groupCommitting(guarded)
    db.failNext = 1
    // libp2p's peer store writes its record (through the guard) while the node commits a run's batch
    const peer = guarded.put(new Key('/peers/a'), new Uint8Array([1]))
    const b = runData.batch()
    b.put(new Key('/aap/runs/r1'), new Uint8Array([2]))
    const run = b.commit()
    const [p, r] = await Promise.allSettled([peer, run])
    expect(p.status).toBe('rejected')
    // the next write (a probe, a retry) opens the store again first
    await guarded.probe()
    const acked = r.status === 'fulfilled' ? ['/aap/runs/r1'] : []
    const lost = acked.filter(k => !db.entries.has(k))
    expect({ acked, lost }).toEqual({ acked, lost: [] })
  })
})

describe('a reopen whose open failed', () => {
  const dirs: string[] = []
  const closers: Array<() => Promise<void>> = []
  afterEach(async () => {
    for (const close of closers.splice(0)) await close()
    for (const d of dirs.splice(0)) await rm(d, { recursive: true, force: true })
  })

  it('leaves reads answered (or failing typed), not LevelDB\'s raw not-open', async () => {
    const dir = await mkdtemp(join(tmpdir(), 'aap-reopen-openfail-'))
    dirs.push(dir)
    const ds = await openDatastore(dir)
    closers.push(async () => { await ds.close?.() })
    const reopener = levelReopener(ds)
    if (reopener === undefined) throw new Error('no reopener')
    const guarded = guardWrites(ds, reopener)
    const runData = groupCommitting(guarded)
    await runData.put(new Key('/aap/runs/r1'), new Uint8Array([1]))
    const db = (ds as unknown as { db: { open: (o: object) => Promise<void> } }).db
    const open = db.open.bind(db)
    let fail = 1
    db.open = async (o: object) => {
      if (fail-- > 0) throw Object.assign(new Error('IO error: /data/000123.ldb: Too many open files'), { code: 'EMFILE' })
      return open(o)
    }
    reopener.markDue()
    const probe = await guarded.probe().then(() => 'ok', (e: unknown) => (e as { code?: string }).code)
    expect(probe).toBe('STORAGE_FULL')
    // no write comes for a while: the reads of the node's runs
    const read = await readOptional(runData, new Key('/aap/runs/r1')).then(v => v?.[0], (e: unknown) => (e as { code?: string }).code)
    expect(read).toBe(1)
  })
})

describe('an aborted write', () => {
  const dirs: string[] = []
  const closers: Array<() => Promise<void>> = []
  afterEach(async () => {
    for (const close of closers.splice(0)) await close()
    for (const d of dirs.splice(0)) await rm(d, { recursive: true, force: true })
  })

  it('is not taken for a failing disk, and the store is not closed and opened again for it', async () => {
    const dir = await mkdtemp(join(tmpdir(), 'aap-reopen-abort-'))
    dirs.push(dir)
    const ds = await openDatastore(dir)
    closers.push(async () => { await ds.close?.() })
    const guarded = guardWrites(ds)
    const ctl = new AbortController()
    // aborted while LevelDB writes it (raceSignal rejects at once; the put itself goes on)
    const put = guarded.put(new Key('/peers/x'), new Uint8Array(10), { signal: ctl.signal })
    ctl.abort()
    const err = await Promise.resolve(put).then(() => undefined, (e: unknown) => e)
    const code = (err as { code?: string } | undefined)?.code
    const failing = guarded.health.failing?.reason
    await guarded.put(new Key('/aap/other'), new Uint8Array(1))
    expect({ code, failing, reopens: guarded.health.reopens }).toEqual({ code: undefined, failing: undefined, reopens: 0 })
  })
})
