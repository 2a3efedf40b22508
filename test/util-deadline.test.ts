/**
 * src/util/deadline.ts: a caller's signal or a time limit, whichever ends
 * first, whose timer goes with the call (AbortSignal.timeout's stays until it
 * fires, with the signal it keeps).
 */
import { setFlagsFromString } from 'node:v8'
import { runInNewContext } from 'node:vm'
import { describe, expect, it } from 'vitest'
import { withDeadline, withinDeadline } from '../src/util/deadline.ts'

describe('a deadline with its own timer', () => {
  it('ends with a TimeoutError once its time is up, and with the caller\'s reason when the caller aborts first', async () => {
    const d = withDeadline(new AbortController().signal, 5)
    await new Promise<void>(resolve => { d.signal.addEventListener('abort', () => { resolve() }, { once: true }) })
    expect((d.signal.reason as DOMException).name).toBe('TimeoutError')
    const caller = new AbortController()
    const e = withDeadline(caller.signal, 60_000)
    caller.abort(new Error('the caller gave up'))
    expect(e.signal.aborted).toBe(true)
    expect((e.signal.reason as Error).message).toBe('the caller gave up')
    e.clear()
  })

  it('holds nothing once a call is over, however long its limit (AbortSignal.timeout holds its signal for the whole limit)', async () => {
    setFlagsFromString('--expose-gc')
    const gc = runInNewContext('gc') as () => void
    const caller = new AbortController()
    const held = async (make: () => Promise<unknown>): Promise<number> => {
      gc()
      const before = process.memoryUsage().heapUsed
      for (let i = 0; i < 20_000; i++) await make()
      // the caller's signal drops a composite that followed it by a finalizer, which runs after a collection
      gc()
      await new Promise<void>(resolve => { setImmediate(resolve) })
      gc()
      return process.memoryUsage().heapUsed - before
    }
    const withTimeout = await held(async () => AbortSignal.any([caller.signal, AbortSignal.timeout(3_600_000)]).aborted)
    const withOwnTimer = await held(async () => withinDeadline(caller.signal, 3_600_000, async (s) => s.aborted))
    // about 0.75 KB per call held for the hour, against nothing
    expect(withTimeout, `AbortSignal.timeout: ${withTimeout} bytes held`).toBeGreaterThan(20_000 * 300)
    expect(withOwnTimer, `withinDeadline: ${withOwnTimer} bytes held`).toBeLessThan(20_000 * 50)
  })
})
