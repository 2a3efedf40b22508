/**
 * The names the view shows next to agent ids (src/ui/assets/names.js, the
 * page's own module, run here as it is). Found by session 49's review: the
 * page's map of names only grew, one entry for every agent the tab ever saw
 * a name of, for as long as it stayed open. It is now rebuilt from what the
 * view shows: this node's card, the last peers and discovery answers, and
 * the names already known of the agents of the runs on show.
 */
import { describe, expect, it } from 'vitest'

interface Named { agent_id: string, name: string | null }
type Rebuild = (old: Map<string, string>, from: { self: Named | null, peers: Named[], found: Named[], keep: string[] }) => Map<string, string>

const { rebuildNames } = await import(new URL('../src/ui/assets/names.js', import.meta.url).href) as { rebuildNames: Rebuild }

describe('the view\'s names of agents', () => {
  it('holds only what the view shows now, however many names it saw before', () => {
    let names = new Map<string, string>()
    // a tab open for long: peers come and go, discoveries find other agents each time
    for (let round = 0; round < 1000; round++) {
      names = rebuildNames(names, {
        self: { agent_id: 'me', name: 'this node' },
        peers: [{ agent_id: `peer-${round}`, name: `peer ${round}` }, { agent_id: 'quiet', name: null }],
        found: [{ agent_id: `found-${round}`, name: `found ${round}` }],
        keep: ['executor-1', 'delegator-1']
      })
      if (round === 0) names.set('executor-1', 'the executor')
    }
    expect(names.size).toBeLessThanOrEqual(4)
    expect(names.get('me')).toBe('this node')
    expect(names.get('peer-999')).toBe('peer 999')
    expect(names.get('found-999')).toBe('found 999')
    expect(names.has('peer-998')).toBe(false)
    expect(names.has('quiet')).toBe(false)
    // an agent of a run on show keeps the name it had, though no answer names it now
    expect(names.get('executor-1')).toBe('the executor')
  })

  it('takes the newest name of an agent over the one it had', () => {
    const names = rebuildNames(new Map([['a', 'old name']]), { self: null, peers: [{ agent_id: 'a', name: 'new name' }], found: [], keep: ['a'] })
    expect(names.get('a')).toBe('new name')
  })
})
