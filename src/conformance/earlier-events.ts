/**
 * Events the target served that the kit's last read of their run does not
 * hold: an earlier read of the run that a later one replaced (a target can
 * serve another signed, chained log of the same run each time it is read),
 * or a read of the run's task (the `correlation` sync). The checks over
 * everything (events-correlation, no-endpoint-upward, capability-by-ref)
 * judge them with the last reads: what the target said once is its word,
 * whatever it says later. Kept once each (by the hash of its JSON), bounded
 * with the last reads by KIT_MAX_EVENT_BYTES_KEPT.
 */
import { createHash } from 'node:crypto'
import type { WireEvent } from './kit.ts'

/** One event an earlier read (or a read of its task) showed. */
export interface EarlierEvent {
  runId: string
  event: WireEvent
  /** The read that showed it. */
  what: string
  /** Which sync method served it: `run` (a run's own stream) or `correlation` (its task's). */
  over: 'run' | 'correlation'
}

/** Events to keep, not kept yet: their bytes count against the bound first. */
export interface EarlierPending {
  items: Array<EarlierEvent & { key: string }>
  bytes: number
}

function keyOf (json: string): string {
  return createHash('sha256').update(json).digest('base64')
}

function keysOf (events: readonly WireEvent[]): Set<string> {
  return new Set(events.map(e => keyOf(JSON.stringify(e) ?? 'null')))
}

export class EarlierEvents {
  private readonly kept: Array<EarlierEvent & { key: string }> = []
  private readonly keys = new Set<string>()
  /** Bytes (of their JSON) of the events kept. */
  bytes = 0

  /** The events of `read` (of `runId`) that `held` (the run's last read) does not hold and that are not kept already. */
  pending (runId: string, read: readonly WireEvent[], held: readonly WireEvent[], what: string, over: EarlierEvent['over']): EarlierPending {
    const heldKeys = keysOf(held)
    const out: EarlierPending = { items: [], bytes: 0 }
    const added = new Set<string>()
    for (const event of read) {
      const json = JSON.stringify(event) ?? 'null'
      const key = keyOf(json)
      if (heldKeys.has(key) || this.keys.has(key) || added.has(key)) continue
      added.add(key)
      out.items.push({ runId, event, what, over, key })
      out.bytes += Buffer.byteLength(json)
    }
    return out
  }

  keep (p: EarlierPending): void {
    for (const item of p.items) {
      this.kept.push(item)
      this.keys.add(item.key)
    }
    this.bytes += p.bytes
  }

  /** The events kept that the last read of their run (in `events`) does not hold now. */
  unheld (events: ReadonlyMap<string, readonly WireEvent[]>): EarlierEvent[] {
    const held = new Map<string, Set<string>>()
    return this.kept.filter(item => {
      let keys = held.get(item.runId)
      if (keys === undefined) {
        keys = keysOf(events.get(item.runId) ?? [])
        held.set(item.runId, keys)
      }
      return !keys.has(item.key)
    }).map(({ runId, event, what, over }) => ({ runId, event, what, over }))
  }
}
