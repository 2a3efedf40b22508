/**
 * A task driver's first step (scenario.ts): agents for a capability, at
 * least two besides itself. An agent may be down (churn) and a card may be a
 * hostile node's, so it looks again, wider, a bounded number of times; when
 * none found enough, the error says what each attempt found.
 */
import type { AgentCard, CapabilityRef } from '../card/card.ts'
import type { MeshNode } from '../node.ts'
import type { Member } from './processes.ts'

export interface FindAgentsInit {
  /** The honest agents of the simulation. */
  byAgent: ReadonlyMap<string, Member>
  hostile: ReadonlySet<string>
  onDiscover: (ms: number) => void
  onCard: (card: AgentCard) => Promise<void>
}

/** How many discovers a driver tries, asking for this many more cards each time. */
const ATTEMPTS = 3
const CARDS_PER_ATTEMPT = 4

export async function findAgents (driver: MeshNode, cap: CapabilityRef, init: FindAgentsInit): Promise<Member[]> {
  let candidates: Member[] = []
  const attempts: string[] = []
  for (let attempt = 0; attempt < ATTEMPTS && candidates.length < 2; attempt++) {
    const d0 = performance.now()
    const limit = CARDS_PER_ATTEMPT * (attempt + 1)
    const found = await driver.discover({ capability: cap }, { limit })
    const took = performance.now() - d0
    init.onDiscover(took)
    attempts.push(`${found.length}/${limit} cards, ${found.filter(c => init.hostile.has(c.agent_id)).length} hostile, ${Math.round(took)} ms`)
    for (const c of found) await init.onCard(c)
    candidates = found
      .map(c => init.byAgent.get(c.agent_id))
      .filter((m): m is Member => m !== undefined && m.agentId !== driver.agentId && m.up)
  }
  if (candidates.length < 2) throw new Error(`only ${candidates.length} agents found for ${cap.capability_id} (${attempts.join('; ')})`)
  return candidates
}
