/**
 * Durable storage of run event logs: the truth about a run; gossip only
 * carries copies. Events of runs this node executes are written by the run
 * store in the same batch as the transition; verified copies of other nodes'
 * events are kept for serving sync and replay.
 */
import { Key, type Batch, type Datastore } from 'interface-datastore'
import { SYNC_MAX_EVENTS_PER_RESPONSE } from '../constants.ts'
import { parseRecord, readOptional } from '../storage/read.ts'
import { canonicalEvent } from './event.ts'
import type { AgentEvent } from './types.ts'

const seqKey = (seq: number): string => seq.toString().padStart(10, '0')
const enc = new TextEncoder()

export class EventLog {
  private readonly ds: Datastore

  constructor (datastore: Datastore) {
    this.ds = datastore
  }

  static eventKey (runId: string, seq: number): Key {
    return new Key(`/aap/log/${encodeURIComponent(runId)}/${seqKey(seq)}`)
  }

  static correlationKey (correlationId: string, runId: string): Key {
    return new Key(`/aap/corr/${encodeURIComponent(correlationId)}/${encodeURIComponent(runId)}`)
  }

  /** Key prefix of one run's events; the trailing slash keeps run "x:1" from matching "x:10". */
  static runPrefix (runId: string): string {
    return `/aap/log/${encodeURIComponent(runId)}/`
  }

  /** The writes that store an event (and, for seq 1, the correlation index); its canonical text, which the signer already built. */
  static writes (event: AgentEvent): Array<[Key, Uint8Array]> {
    const out: Array<[Key, Uint8Array]> = [[EventLog.eventKey(event.run_id, event.seq), enc.encode(canonicalEvent(event))]]
    if (event.seq === 1) out.push([EventLog.correlationKey(event.correlation_id, event.run_id), new Uint8Array(0)])
    return out
  }

  /** Add an event (and the correlation index) to a batch. */
  static put (batch: Batch, event: AgentEvent): void {
    for (const [k, v] of EventLog.writes(event)) batch.put(k, v)
  }

  /** Store verified events (of any run) in one batch. */
  async append (events: AgentEvent[]): Promise<void> {
    if (events.length === 0) return
    const batch = this.ds.batch()
    for (const e of events) EventLog.put(batch, e)
    await batch.commit()
  }

  /**
   * The event, or undefined when the log has no such seq. A datastore failure
   * is thrown, not hidden; an event that does not parse (a torn write, a disk
   * fault) is a CorruptRecordError (INTERNAL, reason corrupt_record), never
   * served as it is.
   */
  async get (runId: string, seq: number): Promise<AgentEvent | undefined> {
    const key = EventLog.eventKey(runId, seq)
    const bytes = await readOptional(this.ds, key)
    return bytes === undefined ? undefined : parseRecord<AgentEvent>(bytes, key)
  }

  /**
   * Events of a run with seq > afterSeq, ascending, at most `limit`. A run's
   * log is contiguous from seq 1 (the run store writes each next seq, the
   * events service stores only events that extend what it holds), so this
   * reads key by key instead of querying: a query on the memory datastore
   * scans every key the node holds.
   */
  async read (runId: string, afterSeq = 0, limit = SYNC_MAX_EVENTS_PER_RESPONSE): Promise<AgentEvent[]> {
    const out: AgentEvent[] = []
    for (let seq = afterSeq + 1; out.length < limit; seq++) {
      const e = await this.get(runId, seq)
      if (e === undefined) break
      out.push(e)
    }
    return out
  }

  /** Every event of a run from seq 1, page by page. */
  async * readAll (runId: string, pageSize = SYNC_MAX_EVENTS_PER_RESPONSE): AsyncGenerator<AgentEvent[]> {
    for (let after = 0; ;) {
      const page = await this.read(runId, after, pageSize)
      if (page.length > 0) yield page
      const last = page.at(-1)
      if (last === undefined || page.length < pageSize) return
      after = last.seq
    }
  }

  /**
   * Make a run's log contiguous again after a failed write of its copies
   * (src/events/copies.ts): a later batch may have been written while an
   * earlier one failed, leaving a hole that `head` would bisect past. Every
   * event after the first missing seq, up to `upTo`, is deleted (the events
   * service fetches them again). Returns the seq of the hole (undefined: none).
   */
  async cutAtGap (runId: string, upTo: number): Promise<number | undefined> {
    let hole = 1
    while (hole <= upTo && await this.ds.has(EventLog.eventKey(runId, hole))) hole++
    if (hole > upTo) return undefined
    const batch = this.ds.batch()
    for (let seq = hole + 1; seq <= upTo; seq++) batch.delete(EventLog.eventKey(runId, seq))
    await batch.commit()
    return hole
  }

  /**
   * The last event of a run, or undefined: gallop to a seq the log lacks,
   * then bisect (the log is contiguous). A last event that does not parse is
   * a CorruptRecordError: nothing may chain to it, and an event signed anew
   * at its seq would fork the log its copies hold (recovery.ts endDamaged).
   */
  async head (runId: string): Promise<AgentEvent | undefined> {
    const has = async (seq: number): Promise<boolean> => this.ds.has(EventLog.eventKey(runId, seq))
    if (!await has(1)) return undefined
    let lo = 1
    let hi = 2
    while (await has(hi)) {
      lo = hi
      hi *= 2
    }
    while (hi - lo > 1) {
      const mid = Math.floor((lo + hi) / 2)
      if (await has(mid)) lo = mid
      else hi = mid
    }
    return this.get(runId, lo)
  }

  /** Run ids this node holds events for under a correlation. */
  async runsOf (correlationId: string): Promise<string[]> {
    const out: string[] = []
    // the trailing slash keeps correlation "task-1" from matching the keys of "task-10"
    const prefix = `/aap/corr/${encodeURIComponent(correlationId)}/`
    for await (const key of this.ds.queryKeys({ prefix })) {
      out.push(decodeURIComponent(key.baseNamespace()))
    }
    return out
  }
}
