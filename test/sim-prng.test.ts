/** The seeded picks of a simulation (src/sim/prng.ts). */
import { describe, expect, it } from 'vitest'
import { seeded } from '../src/sim/prng.ts'
import { sample } from '../src/util/sample.ts'

describe('a seeded sample', () => {
  it('picks k distinct items, the same ones for the same seed, all of them when there are fewer', () => {
    const xs = Array.from({ length: 50 }, (_, i) => i)
    const a = sample(seeded(3), xs, 5)
    expect(a).toHaveLength(5)
    expect(new Set(a).size).toBe(5)
    for (const x of a) expect(xs).toContain(x)
    expect(sample(seeded(3), xs, 5)).toEqual(a)
    expect(sample(seeded(4), xs, 5)).not.toEqual(a)
    expect(sample(seeded(3), [1, 2], 5).sort()).toEqual([1, 2])
    expect(xs).toEqual(Array.from({ length: 50 }, (_, i) => i))
  })
})
