/**
 * Limiter (src/util/concurrency.ts): never more than its limit at once, also
 * when a caller arrives between a task's end and the turn of the waiter it woke.
 */
import { describe, expect, it } from 'vitest'
import { Limiter } from '../src/util/concurrency.ts'

describe('Limiter', () => {
  it('a caller that arrives as a task ends, at any microtask depth, waits behind the waiter it woke', async () => {
    const turn = async (): Promise<void> => { await new Promise(resolve => setImmediate(resolve)) }
    for (let depth = 0; depth < 8; depth++) {
      const limiter = new Limiter(1)
      let running = 0
      let most = 0
      const task = (gate: Promise<void>) => async (): Promise<void> => {
        running++
        most = Math.max(most, running)
        await gate
        running--
      }
      const first = Promise.withResolvers<void>()
      const a = limiter.run(task(first.promise))
      const b = limiter.run(task(turn()))
      await turn()
      first.resolve()
      // c asks `depth` microtasks after a's end was set going
      let p: Promise<unknown> = Promise.resolve()
      for (let i = 0; i < depth; i++) p = p.then(() => {})
      const c = p.then(async () => limiter.run(task(turn())))
      await Promise.all([a, b, c])
      expect(most, `depth ${depth}`).toBe(1)
    }
  })

  // before, a waiter whose caller gave up stayed queued until a slot freed, and then ran (MCP calls out of time)
  it('a waiter whose signal aborts leaves the queue at once and never runs; the next waiter takes the slot', async () => {
    const limiter = new Limiter(1)
    const held = Promise.withResolvers<void>()
    const first = limiter.run(async () => held.promise)
    const ctl = new AbortController()
    let ran = false
    const gaveUp = limiter.run(async () => { ran = true }, ctl.signal)
    const next = limiter.run(async () => 'next')
    ctl.abort(new Error('out of time'))
    await expect(gaveUp).rejects.toThrow('out of time')
    held.resolve()
    await first
    expect(await next).toBe('next')
    expect(ran).toBe(false)
    // and an abort after the slot was handed over does not take it back
    const late = new AbortController()
    expect(await limiter.run(async () => { late.abort(); return 'kept' }, late.signal)).toBe('kept')
    expect(await limiter.run(async () => 'free')).toBe('free')
  })

  it('a task that throws gives its slot on', async () => {
    const limiter = new Limiter(1)
    await expect(limiter.run(async () => { throw new Error('no') })).rejects.toThrow('no')
    expect(await limiter.run(async () => 7)).toBe(7)
  })
})
