import { describe, expect, it } from 'vitest'
import { idleKinds } from '../scripts/campaign/hostile-dht.ts'

describe('hostile-dht: an attack that never fired fails the part', () => {
  const present = ['drop', 'forge', 'eclipse', 'flood', 'drop'] as const

  it('names a flooder that answered no DHT request, even when droppers and eclipsers acted', () => {
    expect(idleKinds({ dropped: 52, eclipsed: 25, floodAnswered: 0 }, present)).toEqual(['flood'])
  })

  it('passes when every kind present acted, and asks nothing of a kind the mesh lacks', () => {
    expect(idleKinds({ dropped: 52, eclipsed: 25, floodAnswered: 26 }, present)).toEqual([])
    expect(idleKinds({ dropped: 3, eclipsed: 0, floodAnswered: 0 }, ['drop', 'forge'])).toEqual([])
  })
})
