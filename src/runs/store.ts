/**
 * Durable run store. A run record and the event that records its transition
 * are written in one datastore batch, so the state and the log never
 * disagree, and nothing is acknowledged before the batch is committed.
 */
import { Key, type Datastore } from 'interface-datastore'
import { IDEMPOTENCY_TTL_MS } from '../constants.ts'
import { EventLog } from '../events/log.ts'
import type { AgentEvent, Run } from './types.ts'

const enc = new TextEncoder()
const dec = new TextDecoder()

const runKey = (runId: string): Key => new Key(`/aap/runs/${encodeURIComponent(runId)}`)
const outgoingKey = (runId: string): Key => new Key(`/aap/outgoing/${encodeURIComponent(runId)}`)
const idemKey = (delegator: string, key: string): Key => new Key(`/aap/idem/${encodeURIComponent(delegator)}/${encodeURIComponent(key)}`)

interface IdemRecord { run_id: string, at: number }

export class RunStore {
  private readonly ds: Datastore
  readonly log: EventLog

  constructor (datastore: Datastore) {
    this.ds = datastore
    this.log = new EventLog(datastore)
  }

  /** Write a run's new state and its event atomically (plus an idempotency record for a new run). */
  async commit (run: Run, event: AgentEvent, idempotency?: { delegator: string, key: string }): Promise<void> {
    const batch = this.ds.batch()
    batch.put(runKey(run.run_id), enc.encode(JSON.stringify(run)))
    EventLog.put(batch, event)
    if (idempotency !== undefined) {
      const rec: IdemRecord = { run_id: run.run_id, at: Date.now() }
      batch.put(idemKey(idempotency.delegator, idempotency.key), enc.encode(JSON.stringify(rec)))
    }
    await batch.commit()
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
    await this.ds.put(outgoingKey(run.run_id), enc.encode(JSON.stringify(run)))
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
