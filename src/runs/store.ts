/**
 * Durable run store. A run record and the event that records its transition
 * are written in one datastore batch, so the state and the log never
 * disagree, and nothing is acknowledged before the batch is committed.
 *
 * Writes are group-committed: a write that arrives while a batch is being
 * committed joins the next batch, which starts as soon as the current one
 * ends. An idle store writes at once (no added latency); a busy one turns
 * many small datastore writes into a few larger ones. Each write resolves
 * only once the batch that holds it is committed.
 */
import { Key, type Batch, type Datastore } from 'interface-datastore'
import { IDEMPOTENCY_TTL_MS } from '../constants.ts'
import { EventLog } from '../events/log.ts'
import type { AgentEvent, Run } from './types.ts'

const enc = new TextEncoder()
const dec = new TextDecoder()

const runKey = (runId: string): Key => new Key(`/aap/runs/${encodeURIComponent(runId)}`)
const outgoingKey = (runId: string): Key => new Key(`/aap/outgoing/${encodeURIComponent(runId)}`)
const idemKey = (delegator: string, key: string): Key => new Key(`/aap/idem/${encodeURIComponent(delegator)}/${encodeURIComponent(key)}`)

interface IdemRecord { run_id: string, at: number }

/** The operations of one logical write, applied together to whichever batch carries them. */
class Ops implements Batch {
  readonly puts: Array<[Key, Uint8Array]> = []
  put (key: Key, value: Uint8Array): void { this.puts.push([key, value]) }
  delete (): void { throw new Error('run store writes never delete') }
  commit (): void { throw new Error('Ops are committed by the group writer') }
}

interface Waiting { ops: Ops, resolve: () => void, reject: (err: unknown) => void }

class GroupWriter {
  private readonly ds: Datastore
  private queue: Waiting[] = []
  private busy = false

  constructor (ds: Datastore) {
    this.ds = ds
  }

  async write (ops: Ops): Promise<void> {
    const { promise, resolve, reject } = Promise.withResolvers<void>()
    this.queue.push({ ops, resolve, reject })
    if (!this.busy) this.flush()
    return promise
  }

  private flush (): void {
    const group = this.queue
    this.queue = []
    this.busy = true
    const batch = this.ds.batch()
    for (const w of group) for (const [k, v] of w.ops.puts) batch.put(k, v)
    Promise.resolve(batch.commit()).then(
      () => { for (const w of group) w.resolve() },
      (err: unknown) => { for (const w of group) w.reject(err) }
    ).finally(() => {
      this.busy = false
      if (this.queue.length > 0) this.flush()
    })
  }
}

export class RunStore {
  private readonly ds: Datastore
  private readonly writer: GroupWriter
  readonly log: EventLog

  constructor (datastore: Datastore) {
    this.ds = datastore
    this.writer = new GroupWriter(datastore)
    this.log = new EventLog(datastore)
  }

  /** Write a run's new state and its event atomically (plus an idempotency record for a new run). */
  async commit (run: Run, event: AgentEvent, idempotency?: { delegator: string, key: string }): Promise<void> {
    const ops = new Ops()
    ops.put(runKey(run.run_id), enc.encode(JSON.stringify(run)))
    EventLog.put(ops, event)
    if (idempotency !== undefined) {
      const rec: IdemRecord = { run_id: run.run_id, at: Date.now() }
      ops.put(idemKey(idempotency.delegator, idempotency.key), enc.encode(JSON.stringify(rec)))
    }
    await this.writer.write(ops)
  }

  async get (runId: string): Promise<Run | undefined> {
    try {
      return JSON.parse(dec.decode(await this.ds.get(runKey(runId)))) as Run
    } catch {
      return undefined
    }
  }

  /** Every run this node executes (for restart recovery and listing). */
  async * all (): AsyncGenerator<Run> {
    for await (const { value } of this.ds.query({ prefix: '/aap/runs' })) {
      yield JSON.parse(dec.decode(value)) as Run
    }
  }

  async idempotent (delegator: string, key: string): Promise<string | undefined> {
    try {
      const rec = JSON.parse(dec.decode(await this.ds.get(idemKey(delegator, key)))) as IdemRecord
      return Date.now() - rec.at < IDEMPOTENCY_TTL_MS ? rec.run_id : undefined
    } catch {
      return undefined
    }
  }

  /** The delegator's own record of a run it started elsewhere. */
  async putOutgoing (run: Run): Promise<void> {
    const ops = new Ops()
    ops.put(outgoingKey(run.run_id), enc.encode(JSON.stringify(run)))
    await this.writer.write(ops)
  }

  async getOutgoing (runId: string): Promise<Run | undefined> {
    try {
      return JSON.parse(dec.decode(await this.ds.get(outgoingKey(runId)))) as Run
    } catch {
      return undefined
    }
  }

  async * allOutgoing (): AsyncGenerator<Run> {
    for await (const { value } of this.ds.query({ prefix: '/aap/outgoing' })) {
      yield JSON.parse(dec.decode(value)) as Run
    }
  }
}
