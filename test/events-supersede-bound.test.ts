/**
 * While an iterator subscription reads its history, every executor event that replaces a liveness verdict is
 * kept until the consumer's next pull. A consumer that stopped reading during its history kept every one of
 * them. Past maxBuffered the subscription fails as an overflowing live queue does.
 */
import { describe, expect, it } from 'vitest'
import { EventSubscription } from '../src/events/subscription.ts'
import type { AgentEvent } from '../src/runlog/types.ts'

describe('an iterator subscription behind its history', () => {
  it('holds at most maxBuffered superseding events', () => {
    const sub = new EventSubscription('task-evsub-sup', { maxBuffered: 8 }, () => {})
    // a history source whose pull never comes (the consumer stopped reading)
    sub.readFrom({ pull: async () => new Promise<void>(() => {}) })
    expect(sub.catchingUp).toBe(true)
    for (let seq = 2; seq < 10_002; seq++) {
      sub.supersede({ run_id: 'X:1', correlation_id: 'task-evsub-sup', seq, type: 'run.progress', payload: { pad: 'x'.repeat(1000) } } as unknown as AgentEvent)
    }
    const held = (sub as unknown as { superseding?: AgentEvent[] }).superseding?.length ?? 0
    expect(held).toBeLessThanOrEqual(sub.maxBuffered)
    expect(sub.closed).toBe(true)
  })
})
