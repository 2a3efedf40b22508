/**
 * The order in which a discover fetches providers' cards (src/card/fetch-order.ts):
 * connected providers first, and a provider that needs a dial only while the
 * fetches in flight are no more than the cards still wanted.
 */
import { describe, expect, it } from 'vitest'
import { nextProvider } from '../src/card/fetch-order.ts'

describe('which provider a discover asks for its card next', () => {
  const connected = new Set(['c1', 'c2'])
  const isConnected = (p: string): boolean => connected.has(p)

  it('takes a provider it holds a connection to before any that needs a dial, wherever it stands', () => {
    expect(nextProvider(['d1', 'd2', 'c1'], isConnected, 0, 4)).toBe(2)
    // however many are in flight and however few are wanted: a connected fetch costs no dial
    expect(nextProvider(['d1', 'c2'], isConnected, 7, 1)).toBe(1)
  })

  it('dials in arrival order while the fetches in flight are no more than the cards still wanted', () => {
    expect(nextProvider(['d1', 'd2'], isConnected, 0, 4)).toBe(0)
    expect(nextProvider(['d1', 'd2'], isConnected, 4, 4)).toBe(0)
    // one spare fetch, then it waits for one in flight to end
    expect(nextProvider(['d1', 'd2'], isConnected, 5, 4)).toBe(-1)
    expect(nextProvider(['d1'], isConnected, 1, 0)).toBe(-1)
  })

  it('has nothing to fetch when nothing is pending', () => {
    expect(nextProvider([], isConnected, 0, 4)).toBe(-1)
  })

  it('in a drain loop, fetches every connected provider and dials only what is wanted, plus one', () => {
    const pending = ['d1', 'c1', 'd2', 'd3', 'c2', 'd4']
    const fetched: string[] = []
    const wanted = 2
    for (let i = nextProvider(pending, isConnected, fetched.length, wanted); i >= 0; i = nextProvider(pending, isConnected, fetched.length, wanted)) {
      fetched.push(...pending.splice(i, 1))
    }
    expect(fetched).toEqual(['c1', 'c2', 'd1'])
    expect(pending).toEqual(['d2', 'd3', 'd4'])
  })
})
