/**
 * `runs list --all` (src/cli/pages.ts) asks again for a page that read
 * nothing and handed back the cursor it was asked with: the node's listing
 * waits RUN_LIST_PENDING_WAIT_MS for a run being written at its place, and a
 * save that took longer gives that answer (found by session 60's review: the
 * command ended with "its listing would never end"). Past
 * CLI_LIST_SAME_CURSOR_RETRIES such answers in a row it still ends.
 */
import { describe, expect, it } from 'vitest'
import { CLI_LIST_SAME_CURSOR_RETRIES } from '../src/cli/constants.ts'
import { readPages } from '../src/cli/pages.ts'

interface Page { ids: string[], next_cursor: string | null }

describe('a page that read nothing and hands back the cursor it was asked with', () => {
  it('is asked for again, and the listing goes on once the run is written', async () => {
    let waits = 2
    const page = async (cursor: string | undefined): Promise<Page> => {
      if (cursor === undefined) return { ids: ['a'], next_cursor: 'c1' }
      if (cursor === 'c1' && waits-- > 0) return { ids: [], next_cursor: 'c1' }
      return { ids: ['b', 'c'], next_cursor: null }
    }
    const { pages } = await readPages<Page>(undefined, true, page, p => p.ids.length)
    expect(pages.flatMap(p => p.ids)).toEqual(['a', 'b', 'c'])
  })

  it('ends the listing past CLI_LIST_SAME_CURSOR_RETRIES such answers in a row', async () => {
    let asked = 0
    const page = async (cursor: string | undefined): Promise<Page> => {
      asked++
      return cursor === undefined ? { ids: ['a'], next_cursor: 'c1' } : { ids: [], next_cursor: 'c1' }
    }
    await expect(readPages<Page>(undefined, true, page, p => p.ids.length)).rejects.toMatchObject({ code: 'INVALID_ANSWER' })
    expect(asked).toBe(2 + CLI_LIST_SAME_CURSOR_RETRIES)
  })
})
