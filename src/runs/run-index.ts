/**
 * The run index: secondary keys in the datastore that list the runs of a
 * node (the ones it executes and the ones it delegated) by state,
 * correlation, agent and capability, in the order this node stored them, so
 * a listing reads one page of keys and never the whole store.
 *
 * Keys (under /aap/ridx, side `x` executing or `d` delegated, `<t>` the
 * run's order key `<ISO instant>~<count>~<run id>`), each valued with the run's
 * summary (state, correlation, agents, capability). The instant is this
 * node's clock when the run was first indexed, never behind the run indexed
 * before it: not the run's `created_at`, which is taken before the run is
 * stored (two runs created at once can land in either order) and, for a run
 * delegated from here, is the executor's word. A listing does not pass the
 * place of a run still being written (run-places.ts): a page waits for its
 * save (RUN_LIST_PENDING_WAIT_MS in all) and reads on, else stops before it
 * with a cursor that lists it later; a listing of both sides waits so at the
 * end of the executing side too, else leaves it (counted: passedPending).
 * (An index rebuilt from an older data dir orders its runs by `created_at`,
 * none later than the rebuild, each with count 0.)
 *
 *   /<side>/e/<run id>               the run's entry (its current state)
 *   /<side>/state/<state>/<t>        (current state)
 *   /<side>/all/<t>                  (these three: the state at creation)
 *   /<side>/corr/<correlation>/<t>
 *   /<side>/agent/<agent>/<t>        the other party: the delegator of a run
 *                                    executed here, the executor of one
 *                                    delegated from here
 *   /<side>/cap/<capability id>/<t>
 *
 * The keys are written in the same batch as the run record (RunStore calls
 * `write`). A state change writes the entry and the new state key and deletes
 * the old one, nothing else (the other keys' summaries keep the state at
 * creation, so a filter on the state reads the state listing, or the entry
 * when it lists a correlation); a progress report that leaves the state alone
 * writes nothing here. The writes of one run are serialised, so its previous
 * state is known exactly (a bounded cache, else its entry), and the counts by
 * side and state that the metrics read are kept in memory beside the keys.
 *
 * A data dir written before the index existed has no /aap/ridx/meta: the
 * index is then rebuilt from the run records once, on open.
 *
 * Cursors are opaque, MACed with a secret kept in the meta record (run-cursor.ts).
 * A damaged value is treated as missing and the index built again at the next open.
 */
import { randomBytes, createHash } from 'node:crypto'
import type { Batch, Datastore } from 'interface-datastore'
import type { CapabilityQuery } from '../card/card.ts'
import {
  RUN_INDEX_REBUILD_BATCH_RUNS, RUN_INDEX_STATE_CACHE_MAX_ENTRIES, RUN_LIST_DEFAULT_LIMIT, RUN_LIST_MAX_LIMIT,
  RUN_LIST_SCAN_MAX_ENTRIES
} from '../constants.ts'
import { InvalidRequestError } from '../errors.ts'
import type { Logger } from '../logger.ts'
import { RUN_STATES, type Run, type RunState } from '../runlog/types.ts'
import { countRange, rawKey, readRange } from '../storage/range.ts'
import { isCorruptRecord, parseRecord, readJson, shownKey } from '../storage/read.ts'
import { RUN_LIST_PENDING_WAIT_MS } from './constants.ts'
import { decodeCursor, encodeCursor } from './run-cursor.ts'
import { placeKey, RunPlaces } from './run-places.ts'
import { KeyedMutex } from '../util/concurrency.ts'

export type RunSide = 'executing' | 'delegated'
export const RUN_SIDES: readonly RunSide[] = ['executing', 'delegated']

export interface RunFilter {
  state?: RunState
  correlation_id?: string
  /** Runs this agent executes or delegated. */
  agent?: string
  /** A capability id, with a version or without (any version). */
  capability?: CapabilityQuery
  /** Only runs this node stored at or after this instant (ISO 8601): for a run it executes, at or after its created_at. */
  since?: string
  /** Only the runs this node executes, or only those it delegated. */
  side?: RunSide
}

export interface PageRequest {
  cursor?: string
  limit?: number
  /** By the time this node stored them: oldest first (default) or newest first. Stays the same from page to page. */
  order?: 'oldest' | 'newest'
}

/** One page of run ids, executing side first, and where the next page starts (null: no more). */
export interface RunIdPage {
  executing: string[]
  delegated: string[]
  next_cursor: string | null
}

export type RunCounts = Record<RunSide, Record<RunState, number>>

/** What the index keeps of a run. */
interface Summary {
  r: string
  s: RunState
  c: string
  a: string
  d: string
  k: string
  v: string
  t: string
}

interface Meta { version: number, secret: string }

const PREFIX = '/aap/ridx'
const META = rawKey(`${PREFIX}/meta`)
// 3: keys `<ISO>~<count>~<run id>` throughout, a rebuild's with count 0 and none in the future (2: a rebuild's had no
// count, and sorted after new keys of the same instant; 1: placed by created_at)
const VERSION = 3
const TAG: Record<RunSide, string> = { executing: 'x', delegated: 'd' }
const enc = new TextEncoder()
const seg = encodeURIComponent
const ISO = /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?(Z|[+-]\d\d:\d\d)$/
const CANONICAL = /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$/
const EPOCH = new Date(0).toISOString()

/** An instant as a fixed-width ISO string (sorts like time); EPOCH for anything else. */
export function instantKey (text: string): string {
  // the form this node writes (toISOString) is already its own key
  if (text.length === 24 && CANONICAL.test(text)) return text
  if (!ISO.test(text)) return EPOCH
  const ms = Date.parse(text)
  if (!Number.isFinite(ms) || ms < 0 || ms > 253402300799999) return EPOCH
  return new Date(ms).toISOString()
}

/** What the index keeps of `run`, at the order key `t`. */
function summaryOf (run: Run, t: string): Summary {
  return {
    r: run.run_id,
    s: run.state,
    c: run.correlation_id,
    a: run.agent_id,
    d: run.delegator,
    k: run.capability.capability_id,
    v: run.capability.version,
    t
  }
}

function sidePrefix (side: RunSide): string {
  return `${PREFIX}/${TAG[side]}`
}

function entryKey (side: RunSide, runId: string): string {
  return `${sidePrefix(side)}/e/${seg(runId)}`
}

function stateKey (side: RunSide, state: RunState, t: string): string {
  return `${sidePrefix(side)}/state/${state}/${t}`
}

/** The other party of a run on a side: the delegator of a run executed here, the executor of one delegated from here. */
function otherParty (side: RunSide, s: Summary): string {
  return side === 'executing' ? s.d : s.a
}

/** The listing keys written once, when the run is first indexed (the state key and the entry aside). */
function staticKeys (side: RunSide, s: Summary): string[] {
  const p = sidePrefix(side)
  return [`${p}/all/${s.t}`, `${p}/corr/${seg(s.c)}/${s.t}`, `${p}/agent/${seg(otherParty(side, s))}/${s.t}`, `${p}/cap/${seg(s.k)}/${s.t}`]
}

/**
 * The listing the filter reads: the narrowest one it names (every other filter
 * is checked on the summaries). `fresh`: the values there hold the current
 * state. An agent filter naming this node itself (a party to every run of the
 * side) lists them all.
 */
function listPrefix (side: RunSide, f: RunFilter, self: string | undefined): { prefix: string, fresh: boolean } {
  const p = sidePrefix(side)
  if (f.correlation_id !== undefined) return { prefix: `${p}/corr/${seg(f.correlation_id)}/`, fresh: false }
  if (f.state !== undefined) return { prefix: `${p}/state/${f.state}/`, fresh: true }
  if (f.agent !== undefined && f.agent !== self) return { prefix: `${p}/agent/${seg(f.agent)}/`, fresh: false }
  if (f.capability !== undefined) return { prefix: `${p}/cap/${seg(f.capability.capability_id)}/`, fresh: false }
  return { prefix: `${p}/all/`, fresh: false }
}

function matches (s: Summary, f: RunFilter, since: string | undefined): boolean {
  if (f.state !== undefined && s.s !== f.state) return false
  if (f.correlation_id !== undefined && s.c !== f.correlation_id) return false
  if (f.agent !== undefined && s.a !== f.agent && s.d !== f.agent) return false
  if (f.capability !== undefined) {
    if (s.k !== f.capability.capability_id) return false
    const v = f.capability.version
    if (v !== undefined && v !== null && v !== '*' && s.v !== v) return false
  }
  return since === undefined || s.t >= since
}

function filterDigest (f: RunFilter, order: string): string {
  const norm = [f.state ?? null, f.correlation_id ?? null, f.agent ?? null, f.capability?.capability_id ?? null, f.capability?.version ?? null, f.since === undefined ? null : instantKey(f.since), f.side ?? null, order]
  return createHash('sha256').update(JSON.stringify(norm)).digest('base64url').slice(0, 22)
}

export interface RunIndexInit {
  datastore: Datastore
  log: Logger
  /** This node's agent id (a party to every run it lists); unknown, an agent filter reads the agent listing only. */
  agentId?: string
  /** The stored runs of a side, read once to build the index of an older data dir. */
  records: (side: RunSide) => AsyncIterable<Run>
}

export class RunIndex {
  private readonly ds: Datastore
  private readonly log: Logger
  private readonly records: RunIndexInit['records']
  private readonly self: string | undefined
  private readonly locks = new KeyedMutex()
  /** Last indexed state per `<tag>/<run id>`, newest last (bounded). */
  private readonly states = new Map<string, Summary>()
  private readonly count: RunCounts = { executing: zero(), delegated: zero() }
  /** New runs' order keys, and those not committed yet. */
  private readonly places = new RunPlaces()
  /**
   * fenced: pages that stopped early before a run still being written, whose save outlasted RUN_LIST_PENDING_WAIT_MS
   * (the next page, from the cursor, lists it); passedPending: unfiltered pages that left the executing side with a run
   * of it still being written after that long (a later listing finds it); corrupt: index values that did not parse
   * (each logged; the index is then built again at the next open).
   */
  readonly stats = { fenced: 0, passedPending: 0, corrupt: 0 }
  private rebuildMarked = false
  private secret: Buffer = Buffer.alloc(0)
  private opening?: Promise<void>

  constructor (init: RunIndexInit) {
    this.ds = init.datastore
    this.log = init.log
    this.records = init.records
    this.self = init.agentId
  }

  /** Load the index (building it when the data dir has none) and its counts. Idempotent. */
  async open (): Promise<void> {
    this.opening ??= this.load()
    return this.opening
  }

  /** Runs by side and state, kept beside the keys: no datastore read. */
  counts (): RunCounts {
    return { executing: { ...this.count.executing }, delegated: { ...this.count.delegated } }
  }

  /**
   * Write a run's record through `commit`, which adds the index keys with
   * `stage` to the batch that holds the record. Serialised per run; the
   * counts and the state cache move once the batch is committed. `fresh`: the
   * run is new (its run.started), so there is no previous entry to read.
   */
  async write (side: RunSide, run: Run, commit: (stage: (batch: Batch) => void) => Promise<void>, fresh = false): Promise<void> {
    await this.open()
    const id = `${TAG[side]}/${run.run_id}`
    await this.locks.run(id, async () => {
      const prev = fresh ? undefined : this.states.get(id) ?? await this.entry(side, run.run_id)
      // a run keeps its place; a new one goes after every run indexed before it, whatever its created_at says
      const next = summaryOf(run, prev?.t ?? this.places.place(side, run.run_id))
      const changed = prev === undefined || prev.s !== next.s
      try {
        await commit(changed ? (batch) => { this.stage(batch, side, prev, next) } : () => {})
      } finally {
        if (prev === undefined) this.places.settled(side, next.t)
      }
      this.remember(id, next)
      if (changed) {
        if (prev !== undefined) this.count[side][prev.s]--
        this.count[side][next.s]++
      }
    })
  }

  /** Pages waiting now for runs still being written (RUN_LIST_PENDING_WAIT_MS). */
  get waiting (): number { return this.places.waiting }

  /** One page of run ids matching the filter, from the cursor on. */
  async page (filter: RunFilter, req: PageRequest = {}): Promise<RunIdPage> {
    await this.open()
    const limit = req.limit ?? RUN_LIST_DEFAULT_LIMIT
    if (!Number.isInteger(limit) || limit < 1 || limit > RUN_LIST_MAX_LIMIT) {
      throw new InvalidRequestError(`limit must be an integer from 1 to ${RUN_LIST_MAX_LIMIT}`, { reason: 'bad_limit', limit: RUN_LIST_MAX_LIMIT })
    }
    const order = req.order ?? 'oldest'
    const reverse = order === 'newest'
    const digest = filterDigest(filter, order)
    const at = req.cursor === undefined ? undefined : decodeCursor(this.secret, req.cursor, digest)
    const since = filter.since === undefined ? undefined : instantKey(filter.since)
    const out: RunIdPage = { executing: [], delegated: [], next_cursor: null }
    let taken = 0
    let scanned = 0
    const sides = filter.side === undefined ? RUN_SIDES : [filter.side]
    // how long this page may wait, in all, for runs still being written at places it must not pass
    let patience: AbortSignal | undefined
    const settle = async (side: RunSide, places: string[]): Promise<boolean> => this.places.settle(side, places, patience ??= AbortSignal.timeout(RUN_LIST_PENDING_WAIT_MS))
    for (const [i, side] of sides.entries()) {
      if (at !== undefined && side === 'executing' && at.side === 'delegated') continue
      const { prefix, fresh } = listPrefix(side, filter, this.self)
      // where this side's listing started: a newest-first page without a cursor starts at its first key
      let start = at?.side === side ? at.t : undefined
      // runs still being written as the page began this side: a run placed later is newer than the listing
      const began = new Set(this.places.pendingAfter(side, undefined, since))
      let last = start
      for (;;) {
        const from = last === undefined ? undefined : `${prefix}${last}`
        const range = {
          prefix,
          reverse,
          ...(from === undefined ? {} : reverse ? { lt: from } : { gt: from }),
          ...(since === undefined ? {} : { gte: `${prefix}${since}` })
        }
        // before readRange opens its iterator, whose snapshot may lack a run pending now even once it is saved
        const fence = this.places.fence(side)
        let blocking: string[] = []
        for await (const { key, value } of readRange(this.ds, range)) {
          const t = key.slice(prefix.length)
          if (start !== undefined || !reverse) blocking = fence.before(t, start, reverse)
          if (blocking.length > 0) break
          fence.read(t)
          start ??= t
          last = t
          scanned++
          let s = await this.summaryAt(side, key, t, value ?? new Uint8Array(0))
          if (s === undefined) continue
          if (!fresh && filter.state !== undefined) s = this.states.get(`${TAG[side]}/${s.r}`) ?? await this.entry(side, s.r) ?? s
          if (matches(s, filter, since)) {
            out[side].push(s.r)
            taken++
          }
          if (taken >= limit || scanned >= RUN_LIST_SCAN_MAX_ENTRIES) {
            out.next_cursor = encodeCursor(this.secret, TAG[side], t, digest)
            return out
          }
        }
        if (blocking.length > 0) {
          // saved meanwhile: the read goes on after the last key it read, in a new snapshot that holds them
          if (await settle(side, blocking)) continue
          return this.stopAt(out, side, last, digest)
        }
        // the end of the side. Oldest first, a run of it still being written has its place further on, and when another
        // side follows, the next page's cursor (on that side) never comes back to it: wait for its save and read on
        const ahead = reverse || i === sides.length - 1 ? [] : this.places.pendingAfter(side, last, since).filter(p => began.has(p))
        if (ahead.length === 0) break
        if (await settle(side, ahead)) continue
        this.stats.passedPending++
        this.log.warn({ side, runs: ahead.length }, 'a run listing left a side past runs still being written after RUN_LIST_PENDING_WAIT_MS')
        break
      }
    }
    return out
  }

  /** A page stopped before a run still being written on `side`: the next one starts after `last` (the start: none). */
  private stopAt (out: RunIdPage, side: RunSide, last: string | undefined, digest: string): RunIdPage {
    this.stats.fenced++
    out.next_cursor = encodeCursor(this.secret, TAG[side], last ?? '', digest)
    return out
  }

  // ---- keys -------------------------------------------------------------------------------

  private stage (batch: Batch, side: RunSide, prev: Summary | undefined, next: Summary): void {
    const value = enc.encode(JSON.stringify(next))
    batch.put(rawKey(entryKey(side, next.r)), value)
    batch.put(rawKey(stateKey(side, next.s, next.t)), value)
    if (prev === undefined) {
      for (const k of staticKeys(side, next)) batch.put(rawKey(k), value)
    } else if (prev.s !== next.s) {
      batch.delete(rawKey(stateKey(side, prev.s, prev.t)))
    }
  }

  private async entry (side: RunSide, runId: string): Promise<Summary | undefined> {
    const key = entryKey(side, runId)
    try {
      return await readJson<Summary>(this.ds, rawKey(key))
    } catch (err) {
      if (!isCorruptRecord(err)) throw err
      // treated as missing: the run's record, which the index is built from, is the truth
      await this.damaged(key, err)
      return undefined
    }
  }

  /**
   * The summary under listing key `key` (order key `t`). A damaged one is
   * replaced by the run's entry (its id is in `t`: `<ISO>~<count>~<run id>`);
   * undefined, the run left out of the page, when that cannot be read either.
   */
  private async summaryAt (side: RunSide, key: string, t: string, value: Uint8Array): Promise<Summary | undefined> {
    try {
      return parseRecord<Summary>(value, key)
    } catch (err) {
      await this.damaged(key, err)
      const id = t.split('~').slice(2).join('~')
      let runId: string | undefined
      try { runId = id === '' ? undefined : decodeURIComponent(id) } catch (e) { this.log.warn({ err: e, key: shownKey(key) }, 'a damaged run index key names no run id: left out') }
      return runId === undefined ? undefined : this.states.get(`${TAG[side]}/${runId}`) ?? await this.entry(side, runId)
    }
  }

  /** A damaged index value: logged and counted, and the index is built again from the runs at the next open (its meta goes). */
  private async damaged (key: string, err: unknown): Promise<void> {
    this.stats.corrupt++
    this.log.warn({ err, key: shownKey(key) }, 'a run index value does not parse: it is treated as missing, and the index is built again at the next open')
    if (this.rebuildMarked) return
    this.rebuildMarked = true
    // a mark the disk refused is made at the next damaged value met: the listing goes on meanwhile
    await Promise.resolve(this.ds.delete(META)).catch((e: unknown) => { this.rebuildMarked = false; this.log.warn({ err: e }, 'the run index could not be marked for a rebuild') })
  }

  private remember (id: string, s: Summary): void {
    this.states.delete(id)
    if (this.states.size >= RUN_INDEX_STATE_CACHE_MAX_ENTRIES) {
      const oldest = this.states.keys().next()
      if (oldest.done !== true) this.states.delete(oldest.value)
    }
    this.states.set(id, s)
  }

  // ---- open and rebuild ---------------------------------------------------------------------

  private async load (): Promise<void> {
    let meta: Meta | undefined
    try {
      meta = await readJson<Meta>(this.ds, META)
    } catch (err) {
      // a torn or damaged meta record: the index is derived from the runs, so it is built again, not a failed start
      this.log.warn({ err }, 'the run index meta record does not parse: the index is built again')
    }
    if (meta?.version !== VERSION || typeof meta.secret !== 'string' || !/^[0-9a-f]{64}$/.test(meta.secret)) {
      meta = await this.rebuild()
    }
    this.secret = Buffer.from(meta.secret, 'hex')
    for (const side of RUN_SIDES) {
      for (const state of RUN_STATES) this.count[side][state] = await countRange(this.ds, `${sidePrefix(side)}/state/${state}/`)
      // new runs go after the last one indexed, whatever this clock says now (it may have stepped back since)
      for await (const { key } of readRange(this.ds, { prefix: `${sidePrefix(side)}/all/`, reverse: true, values: false })) {
        this.places.resume(side, key.slice(`${sidePrefix(side)}/all/`.length))
        break
      }
    }
  }

  /** Index every stored run (a data dir from before the index, or one whose rebuild was cut short). */
  private async rebuild (): Promise<Meta> {
    const started = Date.now()
    const rebuiltAt = new Date(started).toISOString()
    // whatever a cut-short rebuild left goes first
    let stale = this.ds.batch()
    let n = 0
    for await (const { key } of readRange(this.ds, { prefix: `${PREFIX}/`, values: false })) {
      stale.delete(rawKey(key))
      if (++n % RUN_INDEX_REBUILD_BATCH_RUNS === 0) {
        await stale.commit()
        stale = this.ds.batch()
      }
    }
    await stale.commit()
    let runs = 0
    for (const side of RUN_SIDES) {
      let batch = this.ds.batch()
      let inBatch = 0
      for await (const run of this.records(side)) {
        // runs stored before the index had its own clock keep their created_at order, never a place in the future
        // (a delegated record's created_at is its executor's word)
        const at = instantKey(run.created_at)
        this.stage(batch, side, undefined, summaryOf(run, placeKey(at < rebuiltAt ? at : rebuiltAt, 0, run.run_id)))
        runs++
        if (++inBatch >= RUN_INDEX_REBUILD_BATCH_RUNS) {
          await batch.commit()
          batch = this.ds.batch()
          inBatch = 0
        }
      }
      await batch.commit()
    }
    const meta: Meta = { version: VERSION, secret: randomBytes(32).toString('hex') }
    // the meta record last: an index without it is rebuilt at the next open
    await this.ds.put(META, enc.encode(JSON.stringify(meta)))
    this.log.info({ runs, ms: Date.now() - started }, 'run index built from the stored runs')
    return meta
  }
}

function zero (): Record<RunState, number> {
  return { running: 0, blocked: 0, completed: 0, failed: 0 }
}
