/**
 * Durable run store: the runs this node executes and its record of the runs
 * it delegated. A run record and the event that records its transition are
 * written in one batch, so the state and the log never disagree, and nothing
 * is acknowledged before the batch is committed. Writes are group-committed
 * (src/storage/group-commit.ts) with everything else the node writes.
 */
import type { Datastore, Key } from 'interface-datastore'
import { IDEMPOTENCY_TTL_MS, OUTGOING_RUN_CACHE_MAX_ENTRIES, RUN_LIST_MAX_LIMIT } from '../constants.ts'
import { EventLog } from '../runlog/event-log.ts'
import { isTerminal, type AgentEvent, type Run } from '../runlog/types.ts'
import { silentLogger, type Logger } from '../logger.ts'
import { groupCommitting } from '../storage/group-commit.ts'
import { hasKey, isCorruptRecord, parseRecord, readJson, shownKey } from '../storage/read.ts'
import { KeyedMutex } from '../util/concurrency.ts'
import { RunIndex, type PageRequest, type RunFilter } from './run-index.ts'
import { sameLineage } from './state-machine.ts'
import { foldChecked } from './fold-checked.ts'
import { IDEMPOTENCY_SWEEP_BATCH } from './constants.ts'
import { isVerdict } from '../runlog/verdict-shape.ts'
import { RefusedRecords } from './refused-records.ts'
import { refusedByStore } from '../storage/write-guard.ts'
import { IDEM_PREFIX, idemKey, NOTICE_PREFIX, noticeKey, outgoingKey, runKey, verdictKey } from './store-keys.ts'
import { PendingAdoptions } from './adoptions.ts'

const enc = new TextEncoder()
const dec = new TextDecoder()

interface IdemRecord { run_id: string, at: number }

/**
 * A verdict whose executor has not yet been heard from (protocols/liveness.md):
 * kept across restarts until the executor's own log is known, with the
 * delegator's record as it stood before the verdict, which the executor's
 * events are folded onto if they supersede the verdict.
 */
export interface VerdictNotice {
  run_id: string
  executor: string
  /** When the verdict was signed (ms since the epoch). */
  since: number
  before: Run
}

export class RunStore {
  private readonly ds: Datastore
  readonly log: EventLog
  /**
   * The last outgoing records written, newest last: a delegated run's state
   * change (noteOutgoing) compares with its predecessor without reading it
   * back. Bounded; a miss reads the datastore.
   */
  private readonly outgoing = new Map<string, Run>()
  /** Serialises the changes of each outgoing record. */
  private readonly outgoingLock = new KeyedMutex()
  /** Outgoing records handed to the writer and not yet committed (read back from here meanwhile). */
  private readonly unsaved = new Map<string, { run: Run, write: Promise<void> }>()
  /** Told of every outgoing record written (the liveness monitor watches the live ones). */
  private readonly outgoingListeners = new Set<(run: Run) => void>()
  /** Secondary keys that list the runs (run-index.ts), written in the batches of the records. */
  readonly index: RunIndex

  private readonly logger: Logger
  /** Delegator's records the disk refused, written again (refused-records.ts). */
  readonly refused: RefusedRecords
  /** Idempotency keys in use (withIdempotencyKey). */
  private readonly idemLocks = new KeyedMutex()
  /** Successors the records of runs delegated here name, still to record here (a mark written with the record). */
  readonly adoptions: PendingAdoptions
  /** Damaged records (torn writes, disk faults) a scan or a restart skipped, each logged with its key; notices among them are deleted; executors' events not folded (fold-checked.ts). */
  readonly stats = { corruptRecords: 0, refusedEvents: 0 }

  constructor (datastore: Datastore, logger?: Logger, agentId?: string) {
    this.ds = groupCommitting(datastore)
    this.logger = logger ?? silentLogger()
    this.refused = new RefusedRecords(async (r, current) => {
      await this.outgoingLock.run(r.run.run_id, async () => {
        // a newer record of the run was written meanwhile: that one is what counts
        if (current()) await this.saveOutgoing(r.run, r.fresh, r.version, true)
      })
    }, this.logger)
    this.log = new EventLog(this.ds)
    this.adoptions = new PendingAdoptions(this.ds, agentId)
    this.index = new RunIndex({
      datastore: this.ds,
      log: this.logger,
      ...(agentId === undefined ? {} : { agentId }),
      records: (side) => side === 'executing' ? this.all() : this.storedOutgoing()
    })
  }

  /** Open the run index (built from the records when the data dir has none). */
  async open (): Promise<void> {
    await this.index.open()
  }

  /** Every run of one side in a live state (running or blocked), from the index page by page: restart work without a scan. */
  async * live (side: 'executing' | 'delegated'): AsyncGenerator<Run> {
    for (const state of ['running', 'blocked'] as const) {
      let cursor: string | undefined
      do {
        const page = await this.page({ side, state }, { limit: RUN_LIST_MAX_LIMIT, ...(cursor === undefined ? {} : { cursor }) })
        yield * (side === 'executing' ? page.executing : page.delegated)
        cursor = page.next_cursor ?? undefined
      } while (cursor !== undefined)
    }
  }

  /** One page of runs matching the filter: executing runs first, then the delegator's records. */
  async page (filter: RunFilter, req: PageRequest = {}): Promise<{ executing: Run[], delegated: Run[], next_cursor: string | null }> {
    const ids = await this.index.page(filter, req)
    const executing: Run[] = []
    for (const id of ids.executing) {
      const run = await this.skippingCorrupt(this.get(id))
      if (run !== undefined) executing.push(run)
    }
    const delegated: Run[] = []
    for (const id of ids.delegated) {
      const run = await this.skippingCorrupt(this.getOutgoing(id))
      if (run !== undefined) delegated.push(run)
    }
    return { executing, delegated, next_cursor: ids.next_cursor }
  }

  /** A record read for a listing (or a restart's live runs): a damaged one is left out, logged and counted, not a failed listing. */
  private async skippingCorrupt<T> (read: Promise<T | undefined>): Promise<T | undefined> {
    return read.catch((err: unknown) => {
      if (!isCorruptRecord(err)) throw err
      this.corrupt(err.key, err)
      return undefined
    })
  }

  private corrupt (key: string, err: unknown): void {
    this.stats.corruptRecords++
    this.logger.warn({ err, key: shownKey(key) }, 'a stored record does not parse: it is left out')
  }

  /** Write a run's new state and its event atomically (plus an idempotency record for a new run, and `extra` records). */
  async commit (run: Run, event: AgentEvent, idempotency?: { delegator: string, key: string }, extra: Array<{ key: Key, value: Uint8Array }> = []): Promise<void> {
    await this.index.write('executing', run, async (stageIndex) => {
      const batch = this.ds.batch()
      // records that change with the run (a conversation's turns) are in the same batch
      for (const e of extra) batch.put(e.key, e.value)
      batch.put(runKey(run.run_id), enc.encode(JSON.stringify(run)))
      EventLog.put(batch, event)
      if (idempotency !== undefined) {
        const rec: IdemRecord = { run_id: run.run_id, at: Date.now() }
        batch.put(idemKey(idempotency.delegator, idempotency.key), enc.encode(JSON.stringify(rec)))
      }
      stageIndex(batch)
      await batch.commit()
    }, event.seq === 1)
  }

  /** A run's record alone, with no event: the ending of a run whose last event is damaged (recovery.ts endDamaged). */
  async putRecord (run: Run): Promise<void> {
    await this.index.write('executing', run, async (stageIndex) => {
      const batch = this.ds.batch()
      batch.put(runKey(run.run_id), enc.encode(JSON.stringify(run)))
      stageIndex(batch)
      await batch.commit()
    })
  }

  /** Whether this node holds a run with this id (a key lookup, nothing parsed). */
  async has (runId: string): Promise<boolean> {
    return hasKey(this.ds, runKey(runId))
  }

  async get (runId: string): Promise<Run | undefined> {
    return readJson<Run>(this.ds, runKey(runId))
  }

  /** Every run this node executes (for restart recovery and listing). */
  async * all (): AsyncGenerator<Run> {
    yield * this.records('/aap/runs')
  }

  /**
   * The records stored under `prefix`. One that does not parse (a disk
   * fault) is left out with a warning: a scan (the index's rebuild, a
   * listing of every record) goes on with the others rather than failing.
   */
  private async * records (prefix: string): AsyncGenerator<Run> {
    for await (const { key, value } of this.ds.query({ prefix })) {
      let run: Run
      try {
        run = parseRecord<Run>(value, key)
      } catch (err) {
        this.corrupt(key.toString(), err)
        continue
      }
      yield run
    }
  }

  async idempotent (delegator: string, key: string): Promise<string | undefined> {
    const rec = await readJson<IdemRecord>(this.ds, idemKey(delegator, key))
    return rec !== undefined && Date.now() - rec.at < IDEMPOTENCY_TTL_MS ? rec.run_id : undefined
  }

  /**
   * Run `fn` holding idempotency key `key` of `delegator`: the executor looks
   * the key up and creates its run under it, and the sweep below deletes a
   * record only under it, so a record written anew while a sweep runs is
   * never deleted by that sweep.
   */
  async withIdempotencyKey<T> (delegator: string, key: string, fn: () => Promise<T>): Promise<T> {
    return this.idemLocks.run(idemKey(delegator, key).toString(), fn)
  }

  /** Resolves once no idempotency key is held (the executor's stop waits for delegations under way). */
  async idempotencyIdle (): Promise<void> {
    await this.idemLocks.idle()
  }

  /**
   * Delete the idempotency records that expired by `now` (older than
   * IDEMPOTENCY_TTL_MS, so `idempotent` no longer returns them): without
   * this every key a delegator ever sent stays on disk. Reads every record
   * once; each one it found expired is read again and deleted under its
   * key's lock (the store's reads come from a snapshot, and a delegation may
   * have written the key anew since). Returns how many it deleted. A record
   * that cannot be read is deleted too (nothing can use it) and logged.
   * `batchSize`: expired records collected before they are deleted.
   */
  async sweepIdempotency (now = Date.now(), batchSize = IDEMPOTENCY_SWEEP_BATCH, signal?: AbortSignal): Promise<number> {
    let deleted = 0
    let expired: Key[] = []
    const expiredAt = (value: Uint8Array | undefined, key: Key): boolean => {
      if (value === undefined) return false
      try {
        return !(now - (JSON.parse(dec.decode(value)) as IdemRecord).at < IDEMPOTENCY_TTL_MS)
      } catch (err) {
        this.logger.warn({ err, key: key.toString().slice(0, 300) }, 'an idempotency record could not be read; deleting it')
        return true
      }
    }
    const drop = async (): Promise<void> => {
      for (const key of expired) {
        await this.idemLocks.run(key.toString(), async () => {
          // read again under the lock: a delegation may have written the key anew since the snapshot
          let value: Uint8Array | undefined
          try {
            value = await this.ds.get(key)
          } catch (err) {
            if ((err as { name?: string }).name !== 'NotFoundError') throw err
          }
          if (!expiredAt(value, key)) return
          await this.ds.delete(key)
          deleted++
        })
      }
      expired = []
    }
    for await (const { key, value } of this.ds.query({ prefix: IDEM_PREFIX })) {
      if (signal?.aborted === true) break
      if (expiredAt(value, key)) expired.push(key)
      if (expired.length >= batchSize) await drop()
    }
    await drop()
    return deleted
  }

  /**
   * The delegator's own record of a run it started elsewhere (its last known
   * state). Readable here (getOutgoing, allOutgoing) at once; the returned
   * promise resolves once it is durable. This is the delegator's index, not
   * the run: the run and its run.started event are durable at the executor
   * before the handle exists, and the run id names the executor, so a record
   * lost to a crash of the delegator leaves the run reachable (getRun,
   * replay). `flushOutgoing` waits for every write handed over so far.
   * `fresh`: the run was just created (no earlier record to look up).
   */
  async putOutgoing (run: Run, fresh = false): Promise<void> {
    this.remember(run)
    for (const l of this.outgoingListeners) l(run)
    await this.saveOutgoing(run, fresh, ++this.outgoingVersion)
  }

  /** Records handed over so far: which of two writes of a run is the newer one. */
  private outgoingVersion = 0

  private async saveOutgoing (run: Run, fresh: boolean, version: number, retry = false): Promise<void> {
    try {
      await this.writeOutgoing(run, fresh, retry)
      this.refused.written(run.run_id, version)
    } catch (err) {
      // the disk refused it: written again later (refused-records.ts), so memory does not stay ahead of the disk
      if (refusedByStore(err)) this.refused.refused(run, fresh, version)
      throw err
    }
  }

  /** `retry`: a refused record written again (refused-records.ts): a verdict may have been put meanwhile, even on a `fresh` run. */
  private async writeOutgoing (run: Run, fresh: boolean, retry = false): Promise<void> {
    const write = this.index.write('delegated', run, async (stageIndex) => {
      const batch = this.ds.batch()
      batch.put(outgoingKey(run.run_id), enc.encode(JSON.stringify(run)))
      if ((!fresh || retry) && !isTerminal(run.state)) {
        // a verdict never stands on a live record: the write that makes it live again (the executor's own word)
        // takes the verdict and its notice with it, so no restart or reader finds them beside it
        batch.delete(verdictKey(run.run_id))
        batch.delete(noticeKey(run.run_id))
      }
      this.adoptions.stage(batch, run, retry)
      stageIndex(batch)
      await batch.commit()
    }, fresh)
    const entry = { run, write }
    this.unsaved.set(run.run_id, entry)
    try {
      await write
    } finally {
      if (this.unsaved.get(run.run_id) === entry) this.unsaved.delete(run.run_id)
    }
  }

  /** Resolves once every outgoing record handed over so far is committed (or failed). */
  async flushOutgoing (): Promise<void> {
    await Promise.allSettled([...this.unsaved.values()].map(async u => u.write))
  }

  async getOutgoing (runId: string): Promise<Run | undefined> {
    const cached = this.unsaved.get(runId)?.run ?? this.outgoing.get(runId)
    if (cached !== undefined) return cached
    return readJson<Run>(this.ds, outgoingKey(runId))
  }

  /**
   * The delegator's record moves with a newer view of the run: a handle or
   * get_run answer from the executor (`run`), never backwards. `create`
   * false only moves a record this node holds: an answer to a question any
   * peer's run id can prompt (get_run, cancel...) never makes a run this
   * node's own delegated one, whatever delegator it names. A run's lineage
   * is fixed when it is created, so a view continuing another run than the
   * record says is not the run the record holds (a record kept from a forged
   * handoff's link) and does not rewrite it; liveness ends such a record
   * (LivenessMonitor.disown). Checked under the record's lock: a record made
   * between a check and the write cannot be overwritten.
   */
  async noteOutgoing (run: Run, create = true): Promise<void> {
    await this.outgoingLock.run(run.run_id, async () => {
      const prev = await this.getOutgoing(run.run_id)
      if (prev === undefined ? create : prev.last_seq <= run.last_seq && sameLineage(prev, run)) await this.putOutgoing(run)
    })
  }

  /**
   * ... or with the executor's verified events, folded by the state machine.
   * Written when the state or checkpoint changes, not per progress report.
   * Returns the record as it now stands (undefined: not a run delegated here).
   */
  async foldOutgoing (events: AgentEvent[]): Promise<Run | undefined> {
    const first = events[0]
    if (first === undefined) return undefined
    // one run's updates in the order they were handed over: a fold never starts from a stale record
    return this.outgoingLock.run(first.run_id, async () => {
      const prev = await this.getOutgoing(first.run_id)
      if (prev === undefined) return undefined
      // the executor's own event where this node's verdict stands: the verdict gives way
      if (prev.state === 'failed' && first.seq <= prev.last_seq && !isVerdict(first)) return this.supersedeLocked(events)
      const next = foldChecked(prev, events, e => { this.refusedEvent(e) })
      if (next.state !== prev.state || next.checkpoint_id !== prev.checkpoint_id) await this.putOutgoing(next)
      else if (next !== prev) {
        this.remember(next)
        // not written, but moved: the executor was heard from (liveness counts that)
        for (const l of this.outgoingListeners) l(next)
      }
      return next
    })
  }

  private remember (run: Run): void {
    this.outgoing.delete(run.run_id)
    if (this.outgoing.size >= OUTGOING_RUN_CACHE_MAX_ENTRIES) {
      const oldest = this.outgoing.keys().next()
      if (oldest.done !== true) this.outgoing.delete(oldest.value)
    }
    this.outgoing.set(run.run_id, run)
  }

  /**
   * Call `listener` with every move of an outgoing record from now on (written, or a progress report folded in
   * memory); returns the function that stops it.
   */
  onOutgoing (listener: (run: Run) => void): () => void {
    this.outgoingListeners.add(listener)
    return () => { this.outgoingListeners.delete(listener) }
  }

  /**
   * Change an outgoing record with `fn` on its lock (nothing else changes it
   * meanwhile); `fn` returns the new record, or undefined to leave it.
   */
  async updateOutgoing (runId: string, fn: (prev: Run | undefined) => Promise<Run | undefined>): Promise<Run | undefined> {
    return this.outgoingLock.run(runId, async () => {
      const next = await fn(await this.getOutgoing(runId))
      if (next !== undefined) await this.putOutgoing(next)
      return next
    })
  }

  /**
   * The liveness verdict this node, as delegator, signed on a run
   * (protocols/liveness.md), and its notice: open until the executor's own
   * log is known here.
   */
  async putVerdict (verdict: AgentEvent, notice: VerdictNotice): Promise<void> {
    const batch = this.ds.batch()
    batch.put(verdictKey(verdict.run_id), enc.encode(JSON.stringify(verdict)))
    batch.put(noticeKey(verdict.run_id), enc.encode(JSON.stringify(notice)))
    await batch.commit()
  }

  /** A notice without a verdict: the run was declared lost with no event held to chain one to. */
  async putNotice (notice: VerdictNotice): Promise<void> {
    await this.ds.put(noticeKey(notice.run_id), enc.encode(JSON.stringify(notice)))
  }

  /** The open notices (restart), at most `max`, each with its verdict (null: none, or damaged); a damaged notice is deleted. */
  async * notices (max: number): AsyncGenerator<{ notice: VerdictNotice, verdict: AgentEvent | null }> {
    let n = 0
    for await (const { key, value } of this.ds.query({ prefix: NOTICE_PREFIX })) {
      if (n >= max) return
      let notice: VerdictNotice
      try { notice = parseRecord<VerdictNotice>(value, key) } catch (err) {
        this.corrupt(key.toString(), err)
        await this.ds.delete(key)
        continue
      }
      n++
      yield { notice, verdict: (await this.skippingCorrupt(this.getVerdict(notice.run_id))) ?? null }
    }
  }

  async closeNotice (runId: string): Promise<void> {
    await this.ds.delete(noticeKey(runId))
  }

  /**
   * The executor's own events from the verdict's seq on (chained to the
   * event the verdict followed) supersede the verdict in the delegator's
   * record: they are folded onto the record as it stood before the verdict.
   * Returns the record as it now stands; unchanged when it was not ended by
   * this node's verdict at that seq.
   */
  async supersedeVerdict (events: AgentEvent[]): Promise<Run | undefined> {
    const first = events[0]
    if (first === undefined) return undefined
    return this.outgoingLock.run(first.run_id, async () => this.supersedeLocked(events))
  }

  private refusedEvent (e: AgentEvent): void {
    this.stats.refusedEvents++
    this.logger.warn({ run_id: e.run_id, seq: e.seq, type: e.type }, 'an executor event that breaks the run record was not folded')
  }

  private async supersedeLocked (events: AgentEvent[]): Promise<Run | undefined> {
    const first = events[0]
    if (first === undefined) return undefined
    const prev = await this.getOutgoing(first.run_id)
    const verdict = await this.getVerdict(first.run_id)
    if (prev === undefined || verdict === undefined || isVerdict(first) || prev.state !== 'failed' ||
      prev.last_seq !== verdict.seq || first.seq !== verdict.seq || first.prev !== verdict.prev) return prev
    const notice = await readJson<VerdictNotice>(this.ds, noticeKey(first.run_id))
    // without the notice (closed), the verdict was on a live run: it starts from there again
    let next: Run = notice?.before ?? { ...prev, state: 'running', failure: null, last_seq: verdict.seq - 1 }
    next = foldChecked(next, events, e => { this.refusedEvent(e) })
    next = { ...next, last_seq: Math.max(next.last_seq, events.at(-1)?.seq ?? 0), updated_at: new Date().toISOString() }
    await this.putOutgoing(next)
    // the verdict no longer stands: get_verdict must not hand it to the executor, whose live run it would end
    const gone = this.ds.batch()
    gone.delete(verdictKey(first.run_id))
    gone.delete(noticeKey(first.run_id))
    await gone.commit()
    return next
  }

  async getVerdict (runId: string): Promise<AgentEvent | undefined> {
    return readJson<AgentEvent>(this.ds, verdictKey(runId))
  }

  /** The delegator's records as committed (the index is built from these). */
  private async * storedOutgoing (): AsyncGenerator<Run> {
    yield * this.records('/aap/outgoing')
  }

  async * allOutgoing (): AsyncGenerator<Run> {
    const unsaved = new Map([...this.unsaved].map(([id, u]) => [id, u.run]))
    for await (const stored of this.records('/aap/outgoing')) {
      const newer = unsaved.get(stored.run_id)
      unsaved.delete(stored.run_id)
      yield newer ?? stored
    }
    // records still on their way to the datastore
    yield * unsaved.values()
  }
}
