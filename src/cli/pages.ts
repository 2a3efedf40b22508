/**
 * A listing read a page at a time (`runs list`, `artifact ls`): one page, or
 * with --all every page its cursors lead to. A node whose cursors come back
 * to one already followed would be listed forever: that ends the command
 * (an empty page with the cursor it was asked with is asked again, at most
 * CLI_LIST_SAME_CURSOR_RETRIES times in a row: a run still being written); a
 * listing past CLI_LIST_ALL_MAX_PAGES pages or CLI_LIST_ALL_MAX_ITEMS items is
 * cut there, with the cursor to go on from.
 */
import { CLI_LIST_ALL_MAX_ITEMS, CLI_LIST_ALL_MAX_PAGES, CLI_LIST_SAME_CURSOR_RETRIES } from './constants.ts'
import { EXIT_REFUSED, EXIT_UNREACHABLE, UnfinishedError } from './remote.ts'

export interface Paged { next_cursor: string | null }

/**
 * The pages from `cursor` on (just the first one unless `all`), and why the
 * listing stopped before its end when a bound cut it.
 */
export async function readPages<P extends Paged> (cursor: string | undefined, all: boolean, page: (cursor: string | undefined) => Promise<P>, items: (p: P) => number): Promise<{ pages: P[], unfinished?: UnfinishedError }> {
  const followed = new Set<string>(cursor === undefined ? [] : [cursor])
  const pages: P[] = []
  let count = 0
  let same = 0
  for (let next = cursor; ;) {
    const got = await page(next)
    // nothing read and the same cursor back: a run being written there is waited for again, a few times
    if (all && next !== undefined && got.next_cursor === next && items(got) === 0 && same < CLI_LIST_SAME_CURSOR_RETRIES) {
      same++
      continue
    }
    same = 0
    pages.push(got)
    count += items(got)
    if (!all || got.next_cursor === null) return { pages }
    next = got.next_cursor
    if (followed.has(next)) throw new UnfinishedError('INVALID_ANSWER', `the node handed out the cursor ${next} again after ${pages.length} page(s): its listing would never end`, EXIT_UNREACHABLE)
    followed.add(next)
    if (pages.length >= CLI_LIST_ALL_MAX_PAGES || count >= CLI_LIST_ALL_MAX_ITEMS) {
      return { pages, unfinished: new UnfinishedError('LISTING_CUT', `stopped after ${pages.length} page(s) and ${count} item(s) (CLI_LIST_ALL_MAX_PAGES ${CLI_LIST_ALL_MAX_PAGES}, CLI_LIST_ALL_MAX_ITEMS ${CLI_LIST_ALL_MAX_ITEMS}); go on with --cursor ${next}`, EXIT_REFUSED) }
    }
  }
}
