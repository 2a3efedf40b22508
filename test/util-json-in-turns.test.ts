/**
 * Large API answers (a replay, the view's timeline) are made into JSON a slice per turn of the event loop
 * (src/util/json-in-turns.ts): the text is exactly JSON.stringify's, and other work runs while it is made.
 */
import fc from 'fast-check'
import { describe, expect, it } from 'vitest'
import { jsonInTurns } from '../src/util/json-in-turns.ts'

describe('JSON made in turns', () => {
  it('is the text JSON.stringify makes, for any value at any walk depth', async () => {
    const extra = fc.oneof(fc.constant(undefined), fc.constant(() => 1), fc.date({ noInvalidDate: true }), fc.constant(Symbol('s')))
    const value = fc.letrec(tie => ({
      leaf: fc.oneof(fc.jsonValue({ maxDepth: 2 }), extra),
      node: fc.oneof({ depthSize: 'small' }, tie('leaf'), fc.array(tie('node'), { maxLength: 5 }), fc.dictionary(fc.string(), tie('node'), { maxKeys: 5 }))
    })).node
    await fc.assert(fc.asyncProperty(value, fc.integer({ min: 1, max: 64 }), fc.integer({ min: 0, max: 5 }), async (v, perTurn, depth) => {
      const expected = JSON.stringify(v) as string | undefined
      if (expected === undefined) return // a bare function, symbol or undefined: no JSON text at all
      expect(await jsonInTurns(v, perTurn, depth)).toBe(expected)
    }), { numRuns: 300 })
  })

  it('lets the event loop run while it makes a large text', async () => {
    const events = Array.from({ length: 2000 }, (_, seq) => ({ seq, type: 'run.progress', payload: { text: 'x'.repeat(500) } }))
    let turns = 0
    let done = false
    const tick = (): void => {
      if (done) return
      turns++
      setImmediate(tick)
    }
    setImmediate(tick)
    const text = await jsonInTurns({ replay: { events } }, 64 * 1024)
    done = true
    expect(JSON.parse(text)).toEqual({ replay: { events } })
    // about 1 MB of text at 64 KiB a turn: other callbacks ran in between, not only once at the end
    expect(turns).toBeGreaterThanOrEqual(10)
  })
})
