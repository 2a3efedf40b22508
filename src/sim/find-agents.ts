/**
 * A task driver's first step (scenario.ts): agents for a capability, at
 * least two besides itself. An agent may be down (churn) and a card may be a
 * hostile node's, so it looks again, wider, a bounded number of times; when
 * none found enough, the error says what each attempt found.
 */
import type { AgentCard, CapabilityRef } from '../card/card.ts'
import type { CardOrigin } from '../card/discovery.ts'
import type { MeshNode } from '../node.ts'
import type { Member } from './processes.ts'

export interface FindAgentsInit {
  /** The honest agents of the simulation. */
  byAgent: ReadonlyMap<string, Member>
  hostile: ReadonlySet<string>
  onDiscover: (ms: number) => void
  onCard: (card: AgentCard) => Promise<void>
  /** Counts every card the task discovers returned, by `hostile|honest source` (the scenario logs it at the end). */
  origins?: Map<string, number>
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
    const origins = new Map<string, CardOrigin>()
    const named = { hostile: 0, honest: 0 }
    const found = await driver.discover({ capability: cap }, {
      limit,
      explain: (o) => { origins.set(o.agent_id, o) },
      onNamed: (providers) => { for (const p of providers) named[init.hostile.has(p) ? 'hostile' : 'honest']++ }
    })
    for (const [k, n] of Object.entries(named)) init.origins?.set(`named ${k}`, (init.origins.get(`named ${k}`) ?? 0) + n)
    const took = performance.now() - d0
    init.onDiscover(took)
    attempts.push(`${found.length}/${limit} cards, ${found.filter(c => init.hostile.has(c.agent_id)).length} hostile, ${Math.round(took)} ms, named ${named.hostile} hostile + ${named.honest} honest` +
      ` [${found.map(c => describe(origins.get(c.agent_id), init.hostile.has(c.agent_id), init.hostile)).join(' ')}]`)
    for (const c of found) {
      const k = `${init.hostile.has(c.agent_id) ? 'hostile' : 'honest'} ${origins.get(c.agent_id)?.source ?? 'unknown'}`
      init.origins?.set(k, (init.origins.get(k) ?? 0) + 1)
      await init.onCard(c)
    }
    candidates = found
      .map(c => init.byAgent.get(c.agent_id))
      .filter((m): m is Member => m !== undefined && m.agentId !== driver.agentId && m.up)
  }
  if (candidates.length < 2) throw new Error(`only ${candidates.length} agents found for ${cap.capability_id} (${attempts.join('; ')})`)
  return candidates
}

/** One card's origin in a failure message: H/h hostile/honest, its source, who named it (a hostile holder: !), and when. */
function describe (o: CardOrigin | undefined, hostile: boolean, hostiles: ReadonlySet<string>): string {
  if (o === undefined) return `${hostile ? 'H' : 'h'}:?`
  const namer = o.named_by === undefined ? '' : hostiles.has(o.named_by) ? '!' : ''
  return `${hostile ? 'H' : 'h'}:${o.source}${o.preferred ? '+own' : ''}${namer}@${o.ms}`
}
