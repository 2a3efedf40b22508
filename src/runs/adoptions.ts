/**
 * Successors a delegator has still to record. A record of a run this node
 * delegated that names a successor (the run was handed off) is written with
 * a mark of that successor in the same batch; the mark goes once the
 * successor's own record here is durable, or its executor answered that it
 * is not a run continuing this one. A delegator killed between the two
 * writes finds the mark when it starts again and asks after the successor
 * then (successors.ts), so no successor goes unrecorded here, unwatched by
 * liveness and, blocked, failed by its executor as an orphan
 * (protocols/liveness.md).
 */
import type { Batch, Datastore } from 'interface-datastore'
import type { Run } from '../runlog/types.ts'
import { hasKey } from '../storage/read.ts'
import { ADOPTING_PREFIX, adoptingKey } from './store-keys.ts'
import { SUCCESSORS_REFUSED_REMEMBERED } from './constants.ts'
import { makeRoom } from '../util/bounded.ts'

const enc = new TextEncoder()
const dec = new TextDecoder()

const refusal = (pred: string, successor: string): string => `${pred} ${successor}`

export class PendingAdoptions {
  private readonly ds: Datastore
  private readonly agentId: string | undefined
  /** `<predecessor> <successor>` refused here, not marked again by a retried write (at most SUCCESSORS_REFUSED_REMEMBERED). */
  private readonly refused = new Set<string>()

  constructor (datastore: Datastore, agentId: string | undefined) {
    this.ds = datastore
    this.agentId = agentId
  }

  /** Whether `run`, a record of a run this node delegated, names a successor this node is to record (not one handed back to it). */
  names (run: Run): boolean {
    const link = run.handoff_to
    return link !== null && this.agentId !== undefined && run.delegator === this.agentId && link.agent_id !== this.agentId
  }

  /**
   * Stage the mark of the successor `run` names (if it names one to record:
   * keyed by the successor, naming `run`) in the batch that writes `run`'s
   * record; `retry`: the write is one the disk refused, made again, which
   * does not mark a successor refused since (its listeners ran already).
   */
  stage (batch: Batch, run: Run, retry = false): void {
    if (!this.names(run) || run.handoff_to === null) return
    if (retry && this.refused.has(refusal(run.run_id, run.handoff_to.run_id))) return
    batch.put(adoptingKey(run.handoff_to.run_id), enc.encode(run.run_id))
  }

  /**
   * The successor `pred`'s record names is not one to record (its executor
   * said it does not continue `pred`): its mark goes, and the write of that
   * record made again later (one the disk refused first) does not stage it
   * again. Another record naming it, or a fresh write of this one, does.
   */
  async refuse (pred: string, successor: string): Promise<void> {
    makeRoom(this.refused, SUCCESSORS_REFUSED_REMEMBERED)
    this.refused.add(refusal(pred, successor))
    await this.settle(successor)
  }

  /** Whether run `runId` is a successor still to record here (its delegation is this node's, get_verdict says). */
  async marked (runId: string): Promise<boolean> {
    return hasKey(this.ds, adoptingKey(runId))
  }

  /** Successor `runId` is recorded here, or is not to be: its mark goes. */
  async settle (runId: string): Promise<void> {
    await this.ds.delete(adoptingKey(runId))
  }

  /** The successors still to record, each with the run it continues, at most `max` (the rest wait for the next start). */
  async pending (max: number): Promise<Array<{ successor: string, pred: string }>> {
    const marks: Array<{ successor: string, pred: string }> = []
    for await (const { key, value } of this.ds.query({ prefix: ADOPTING_PREFIX })) {
      if (marks.length >= max) break
      marks.push({ successor: decodeURIComponent(key.toString().slice(ADOPTING_PREFIX.length)), pred: dec.decode(value) })
    }
    return marks
  }
}
