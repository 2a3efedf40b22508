/**
 * Discovery by tags (the profile's `discover | Find agents by capability or
 * tags`, DiscoveryQuery.tags): a discover by a tag finds the agent whose card
 * carries it and returns none whose card lacks it. Judged twice: by the
 * mesh's own agent.discover from the delegator (the target holds provider
 * records and announces its own tags), and by the target's own answer to a
 * get_held_cards by the tag's provider key (protocols/card.md), which names
 * only cards announced under that key.
 */
import type { AgentCard } from '../card/card.ts'
import { tagKey } from '../card/card.ts'
import { CARD_PROTOCOL } from '../constants.ts'
import { KIT_DISCOVER_TIMEOUT_MS, KIT_POLL_INTERVAL_MS, KIT_WAIT_TIMEOUT_MS } from './constants.ts'
import { clean, errorText, expect, type Kit, type Scope } from './kit.ts'
import type { Check } from './checks-common.ts'

/** The tag every kit node that publishes a card carries. */
export const KIT_TAG = 'aap-conformance-kit'

/** A tag only the kit's receiver carries in this kit run: no other agent of the mesh can have it. */
export function receiverTag (kit: Kit): string {
  return `aap-conformance-${kit.nonce}`
}

function name (s: Scope, agentId: string): string {
  if (agentId === s.kit.target) return `the target ${agentId}`
  if (agentId === s.n.receiver.agentId) return `the kit's receiver ${agentId}`
  if (agentId === s.n.bystander.agentId) return `the kit's bystander ${agentId}`
  return clean(agentId, 80)
}

/**
 * Discover by `tag` from the delegator until every carrier is among the
 * results (KIT_DISCOVER_TIMEOUT_MS); a result whose card, as the kit knows
 * it, lacks the tag is wrong at once.
 */
async function discoverByTag (s: Scope, tag: string, carriers: string[], cards: Map<string, AgentCard>): Promise<void> {
  const deadline = Date.now() + KIT_DISCOVER_TIMEOUT_MS
  let missing = carriers
  let lastError = ''
  for (;;) {
    try {
      const found = await s.n.delegator.discover({ capability: null, tags: [tag] }, { fresh: true, signal: AbortSignal.timeout(KIT_DISCOVER_TIMEOUT_MS) })
      for (const c of found) {
        const known = cards.get(c.agent_id)
        expect(c.tags.includes(tag) && (known === undefined || known.tags.includes(tag)), `discover by tag ${tag} returned ${name(s, c.agent_id)}, whose card lacks the tag`)
      }
      missing = carriers.filter(id => !found.some(c => c.agent_id === id))
      lastError = `found ${found.length} card(s)`
    } catch (err) {
      if ((err as Error).name === 'CheckFailure') throw err
      lastError = (err as Error).message
    }
    if (missing.length === 0) return
    expect(Date.now() <= deadline, `discover by tag ${tag} did not find ${missing.map(id => name(s, id)).join(', ')} (its card carries the tag) within ${KIT_DISCOVER_TIMEOUT_MS} ms: ${clean(lastError)}`)
    await new Promise(resolve => setTimeout(resolve, KIT_POLL_INTERVAL_MS * 20))
    s.live()
  }
}

/** The target's own answer to get_held_cards by the provider key of `tag`: every card it names carries the tag. */
async function heldByTag (s: Scope, tag: string): Promise<number> {
  const key = (await tagKey(tag)).toString()
  const f = await s.call(s.n.bystander, CARD_PROTOCOL, 'get_held_cards', { key })
  expect(f.ok, `get_held_cards by the key of tag ${tag}: ${errorText(f)}`)
  const cards = f.body?.cards
  expect(Array.isArray(cards), `get_held_cards by the key of tag ${tag}: the answer has no cards list`)
  for (const c of cards as unknown[]) {
    const card = (typeof c === 'object' && c !== null ? c : {}) as { agent_id?: unknown, tags?: unknown }
    const id = typeof card.agent_id === 'string' ? card.agent_id : '?'
    expect(Array.isArray(card.tags) && card.tags.includes(tag), `the target answers get_held_cards by the key of tag ${tag} with the card of ${name(s, id)}, which lacks the tag`)
  }
  return (cards as unknown[]).length
}

export const DISCOVER_TAGS_CHECK: Check = {
  id: 'discover-tags',
  title: 'discover by a tag finds the agent whose card carries it (a tag of the target\'s card, if it has one, and a tag only the kit\'s receiver carries) and returns no agent whose card lacks it; the target\'s get_held_cards by a tag\'s key names no card without that tag',
  run: async (s) => {
    const target = await s.n.bystander.getCard(s.kit.target, { fresh: true, signal: AbortSignal.timeout(KIT_WAIT_TIMEOUT_MS) })
    const cards = new Map<string, AgentCard>([[target.agent_id, target]])
    for (const n of [s.n.receiver, s.n.bystander]) if (n.card !== undefined) cards.set(n.agentId, n.card)
    const carriersOf = (tag: string): string[] => [...cards.values()].filter(c => c.tags.includes(tag)).map(c => c.agent_id)
    const own = receiverTag(s.kit)
    expect(carriersOf(own).join() === s.n.receiver.agentId, `the tag ${own} is not carried by the kit's receiver alone: ${carriersOf(own).join(', ')}`)
    const probes = [own]
    // a tag of the target's own card: discover by it must find the target, not the kit's nodes that lack it
    const targetTag = target.tags.find(t => t !== KIT_TAG && t !== own)
    if (targetTag !== undefined) probes.push(targetTag)
    else s.note('the target\'s card carries no tag of its own: discover by tag is judged with the kit receiver\'s tag')
    for (const tag of probes) {
      await discoverByTag(s, tag, carriersOf(tag), cards)
      const held = await heldByTag(s, tag)
      s.note(`discover by tag ${tag} found ${carriersOf(tag).map(id => name(s, id)).join(', ')}; the target's get_held_cards by its key named ${held} card(s), each carrying it`)
    }
    // a tag no agent carries: the target names no card for its key
    const none = `${own}-none`
    const held = await heldByTag(s, none)
    expect(held === 0, `the target answers get_held_cards by the key of tag ${none}, which no agent carries, with ${held} card(s)`)
  }
}
