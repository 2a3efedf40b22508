/**
 * What scripts/bench-discover.ts and its worker processes
 * (scripts/lib/discover-worker.ts) share: the card profiles, the queries, and
 * the two timed lookups. Benchmark only: nothing here is asserted.
 */
import { performance } from 'node:perf_hooks'
import { cardMatches, type AgentCard, type CardDraft } from '../../src/card/card.ts'
import type { DiscoveryQuery } from '../../src/card/discovery.ts'
import type { MeshNode } from '../../src/node.ts'

export const profiles: CardDraft[] = [
  { name: 'reviewer', capabilities: [{ capability_id: 'cap:code-review', version: '2.1.0' }], tags: ['review', 'typescript'] },
  { name: 'translator', capabilities: [{ capability_id: 'cap:translate', version: '1.0.0' }], tags: ['nlp'] },
  { name: 'summarizer', capabilities: [{ capability_id: 'cap:summarize', version: '1.0.0' }], tags: ['nlp'] },
  { name: 'summarizer-next', capabilities: [{ capability_id: 'cap:summarize', version: '2.0.0' }, { capability_id: 'cap:translate', version: '1.0.0' }], tags: ['nlp', 'beta'] },
  { name: 'vision', capabilities: [{ capability_id: 'cap:vision', version: '0.3.0' }], tags: ['vision'] }
]

export const queries: DiscoveryQuery[] = [
  { capability: { capability_id: 'cap:code-review', version: '2.1.0' } },
  { capability: { capability_id: 'cap:translate', version: '1.0.0' } },
  { capability: { capability_id: 'cap:summarize', version: null } },
  { capability: { capability_id: 'cap:vision', version: '0.3.0' } },
  { tags: ['nlp'] },
  { tags: ['review'] }
]

/** The agent ids among `cards` that `self` should find for `q`, sorted. */
export function expectedFor (cards: AgentCard[], q: DiscoveryQuery, self: string): string[] {
  return cards.filter(c => c.agent_id !== self && cardMatches(c, q)).map(c => c.agent_id).sort()
}

export interface Sample { ms: number, ok: boolean }

/** `discoverStream` until its first verified card. */
export async function first (node: MeshNode, q: DiscoveryQuery, fresh: boolean, expected: string[]): Promise<Sample> {
  const t0 = performance.now()
  let card: AgentCard | undefined
  for await (const c of node.discovery.discoverStream(q, { fresh })) {
    card = c
    break
  }
  // a node asking for what only it offers rightly finds nothing
  const ok = card === undefined ? expected.length === 0 : expected.includes(card.agent_id) && cardMatches(card, q)
  return { ms: performance.now() - t0, ok }
}

/** `discover`, the whole verified result list. */
export async function full (node: MeshNode, q: DiscoveryQuery, fresh: boolean, expected: string[]): Promise<Sample> {
  const t0 = performance.now()
  const cards = await node.discover(q, { fresh })
  const ms = performance.now() - t0
  const got = cards.map(c => c.agent_id).sort()
  return { ms, ok: got.length === expected.length && got.every((id, i) => id === expected[i]) }
}

/** The four timed lookups of one (node, query), in the order the bench takes them. */
export async function lookupAll (node: MeshNode, q: DiscoveryQuery, expected: string[]): Promise<Record<string, Sample>> {
  // cold first, so the warm run right after finds the cards it just verified
  return {
    'first/cold': await first(node, q, true, expected),
    'first/warm': await first(node, q, false, expected),
    'full/cold': await full(node, q, true, expected),
    'full/warm': await full(node, q, false, expected)
  }
}
