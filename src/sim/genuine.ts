/**
 * Whether a card a simulation's driver was handed is its agent's own: the
 * card the agent published, or one it published again later (cards are
 * re-signed every CARD_REPUBLISH_INTERVAL_MS with a higher seq, so a run
 * longer than that meets new signatures that are no forgery). Anything else
 * (a card the agent's key did not sign, or one that says what the agent never
 * published) is a forgery that got through.
 */
import { isDeepStrictEqual } from 'node:util'
import { draftOf, verifyCard, type AgentCard } from '../card/card.ts'

export async function isGenuineCard (card: AgentCard, published: AgentCard | undefined): Promise<boolean> {
  if (published === undefined) return false
  // the same signature is not enough: a forgery keeps the victim's signature over changed fields
  if (isDeepStrictEqual(card, published)) return true
  if (card.agent_id !== published.agent_id || card.seq < published.seq) return false
  try {
    await verifyCard(card)
  } catch {
    return false
  }
  return isDeepStrictEqual(draftOf(card), draftOf(published))
}
