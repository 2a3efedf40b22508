import { describe, expect, it } from 'vitest'
import { KeyAnswers } from '../src/card/ask-pace.ts'

const short = (): number => 1

describe('KeyAnswers: the wait of an ask by key for the others asked beside it', () => {
  it('goes on at once when no other ask is out, and once the others have answered', async () => {
    const answers = new KeyAnswers()
    const a = answers.asked('a', short)
    await a.othersAnswered()
    expect(answers.waiting).toBe(0)

    const b = answers.asked('b', short)
    a.answered()
    let went = false
    const waited = a.othersAnswered().then(() => { went = true })
    expect(answers.waiting).toBe(1)
    await Promise.resolve()
    expect(went).toBe(false)
    b.answered()
    await waited
    expect(went).toBe(true)
    expect(answers.waiting).toBe(0)
  })

  it('a wait whose stop aborts leaves at once, while the other ask is still out', async () => {
    const answers = new KeyAnswers()
    const a = answers.asked('a', short)
    const b = answers.asked('b', short)
    const stop = new AbortController()
    const waited = a.othersAnswered(stop.signal)
    expect(answers.waiting).toBe(1)
    stop.abort()
    await waited
    // before, the waiter stayed until `b` answered or ended
    expect(answers.waiting).toBe(0)
    // the other ask answering later finds nobody to wake, and a stop already aborted does not wait at all
    b.answered()
    const c = answers.asked('c', short)
    await answers.asked('d', short).othersAnswered(AbortSignal.abort())
    expect(answers.waiting).toBe(0)
    c.answered()
  })

  it('a wait that ends on the others answering drops its stop listener', async () => {
    const answers = new KeyAnswers()
    const a = answers.asked('a', short)
    const b = answers.asked('b', short)
    const stop = new AbortController()
    let listeners = 0
    const add = stop.signal.addEventListener.bind(stop.signal)
    const remove = stop.signal.removeEventListener.bind(stop.signal)
    stop.signal.addEventListener = (...args: Parameters<typeof add>) => { listeners++; add(...args) }
    stop.signal.removeEventListener = (...args: Parameters<typeof remove>) => { listeners--; remove(...args) }
    const waited = a.othersAnswered(stop.signal)
    expect(listeners).toBe(1)
    b.answered()
    await waited
    expect(listeners).toBe(0)
    expect(answers.waiting).toBe(0)
  })
})
