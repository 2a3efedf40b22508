/**
 * The node-wide bound on unread answers (src/wire/held-answers.ts) costs an answer nothing per stream while the
 * node is far under it: it used to walk every stream that held answers at each answer, so a peer keeping
 * thousands of streams a little behind made every answer of the node cost thousands of reads. The streams are
 * counted only when the last count plus the answers since could pass the bound, and shedding still picks the
 * caller furthest behind.
 */
import { describe, expect, it } from 'vitest'
import { silentLogger } from '../src/logger.ts'
import { HeldAnswers, type AnswerHolder } from '../src/wire/held-answers.ts'

interface Holder extends AnswerHolder { held: number, behind: number, shedWhy?: string }

function holders (n: number, reads: { n: number }): Holder[] {
  return Array.from({ length: n }, (_, i) => {
    const h: Holder = {
      held: 0,
      behind: 0,
      get heldBytes () { reads.n++; return this.held },
      get behindMs () { return this.behind },
      shed (why: string) { h.shedWhy = why; h.held = 0 },
      caller: `peer-${i}`,
      protocol: '/test'
    }
    return h
  })
}

describe('the node-wide bound on unread answers, counted', () => {
  it('reads no stream per answer far under the bound, and counts them all once it could be passed', () => {
    const reads = { n: 0 }
    const list = holders(2000, reads)
    const bound = new HeldAnswers(1_000_000, silentLogger())
    // 2,000 streams each a little behind: 200 bytes each, 400 KB in all
    for (const h of list) { h.held = 200; bound.note(h, 200) }
    expect(reads.n).toBe(0)
    expect(bound.bytes).toBe(400_000)
    reads.n = 0
    // answers that go on draining as they come: still no count per answer
    for (let i = 0; i < 2000; i++) bound.note(list[i % 10] as Holder, 100)
    expect(reads.n).toBe(0)
    // one caller asks for big answers and stops reading: past the bound the streams are counted, and it is shed
    const silent = list[7] as Holder
    silent.behind = 30_000
    silent.held += 700_000
    bound.note(silent, 700_000)
    expect(reads.n).toBeGreaterThanOrEqual(2000)
    expect(silent.shedWhy).toMatch(/unread answers/)
    expect(list.filter(h => h.shedWhy !== undefined)).toHaveLength(1)
    expect(bound.stats.shed).toBe(1)
    expect(bound.bytes).toBe(2000 * 200 - 200)
  })
})
