/**
 * The card cache remembers the highest seq seen of an agent beyond the cards
 * it keeps (CARD_SEQ_INDEX_MAX_ENTRIES): a flood of other cards that pushes
 * an agent's newer card out of the cache (CARD_CACHE_MAX_ENTRIES) no longer
 * opens the way to an older, replayed card of that agent.
 */
import { describe, expect, it } from 'vitest'
import { issueCard } from '../src/card/card.ts'
import { CardCache } from '../src/card/card-store.ts'
import { CARD_SEQ_INDEX_MAX_ENTRIES } from '../src/card/constants.ts'
import { CARD_CACHE_MAX_ENTRIES, CARD_TTL_MS } from '../src/constants.ts'
import { draft, newKey } from './card-fixtures.ts'

describe('card cache under a flood of other cards', () => {
  it('refuses an older unexpired card of an agent whose newer card it no longer keeps', async () => {
    expect(CARD_SEQ_INDEX_MAX_ENTRIES).toBeGreaterThan(CARD_CACHE_MAX_ENTRIES)
    const key = await newKey()
    const older = await issueCard(key, draft, 1)
    const newer = await issueCard(key, draft, 2)
    const cache = new CardCache()
    cache.remember(newer)
    const filler = await issueCard(await newKey(), draft, 1)
    for (let i = 0; i < CARD_CACHE_MAX_ENTRIES; i++) cache.remember({ ...filler, agent_id: `filler-${i}` })
    expect(cache.fresh(newer.agent_id)).toBeUndefined()
    let err: unknown
    try { cache.remember(older) } catch (e) { err = e }
    expect(err).toMatchObject({ code: 'AGENT_NOT_FOUND', details: { reason: 'stale_seq', seen_seq: 2, offered_seq: 1 } })
    expect(cache.newest(older)).toBeUndefined()
    expect(cache.fresh(older.agent_id)).toBeUndefined()
    // the newer card itself, or a newer still, is taken again
    expect(cache.remember(newer)).toBe(newer)
  })

  it('takes an older card once the newer one seen has expired', async () => {
    const key = await newKey()
    const lapsed = await issueCard(key, draft, 5, Date.now() - CARD_TTL_MS - 1_000)
    const cache = new CardCache()
    // a card seen when it was valid, expired by now (issued in the past: its window ended a second ago)
    cache.remember(lapsed)
    const older = await issueCard(key, draft, 4)
    expect(cache.remember(older)).toBe(older)
  })
})
