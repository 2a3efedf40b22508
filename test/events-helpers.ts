/**
 * Helpers for the events tests: collect what a subscription yields and wait,
 * on delivery rather than on a clock, until it holds what a test expects.
 */
import { expect } from 'vitest'
import type { MeshNode } from '../src/node.ts'
import type { AgentEvent } from '../src/runlog/types.ts'
import { eventHash } from '../src/runlog/event.ts'
import type { EventSubscription } from '../src/events/subscription.ts'
import type { SubscribeOptions } from '../src/events/subscription.ts'

export interface Collector {
  sub: EventSubscription
  events: AgentEvent[]
  /** Resolves once `pred(events)` holds; rejects after `timeoutMs`. */
  until: (pred: (events: AgentEvent[]) => boolean, what: string, timeoutMs?: number) => Promise<AgentEvent[]>
}

/** Subscribe in push mode and keep everything the subscription hands out. */
export async function collect (node: MeshNode, correlationId: string, opts: Omit<SubscribeOptions, 'onEvent'> = {}): Promise<Collector> {
  const events: AgentEvent[] = []
  const waiters = new Set<() => void>()
  const sub = await node.events.subscribe(correlationId, {
    ...opts,
    onEvent: (e) => {
      events.push(e)
      for (const w of [...waiters]) w()
    }
  })
  const until = async (pred: (events: AgentEvent[]) => boolean, what: string, timeoutMs = 20_000): Promise<AgentEvent[]> => {
    if (pred(events)) return events
    return new Promise((resolve, reject) => {
      const check = (): void => {
        if (!pred(events)) return
        clearTimeout(timer)
        waiters.delete(check)
        resolve(events)
      }
      const timer = setTimeout(() => {
        waiters.delete(check)
        reject(new Error(`timed out waiting for ${what}; have ${events.map(e => `${e.run_id.slice(-6)}#${e.seq}:${e.type}`).join(', ')}`))
      }, timeoutMs)
      waiters.add(check)
    })
  }
  return { sub, events, until }
}

/** Group events by run, keeping their order of arrival. */
export function byRun (events: AgentEvent[]): Map<string, AgentEvent[]> {
  const out = new Map<string, AgentEvent[]>()
  for (const e of events) {
    const list = out.get(e.run_id) ?? []
    list.push(e)
    out.set(e.run_id, list)
  }
  return out
}

/** Each run's events arrived as seq 1, 2, 3, ... with no repeat and no gap. */
export function expectSeqOrdered (events: AgentEvent[]): void {
  for (const [runId, list] of byRun(events)) {
    expect(list.map(e => e.seq), `seqs of ${runId}`).toEqual(list.map((_e, i) => i + 1))
  }
}

export function hashes (events: AgentEvent[]): string[] {
  return events.map(eventHash)
}
