/**
 * Ways to build bad AgentCards, shared by the card tests. Every helper starts
 * from a real signed card, so each one differs from a valid card in exactly
 * the way its name says.
 */
import { generateKeyPair } from '@libp2p/crypto/keys'
import type { PrivateKey } from '@libp2p/interface'
import { CARD_SIGNING_DOMAIN, CARD_TTL_MS } from '../src/constants.ts'
import { endpointOf, issueCard, type AgentCard, type CardDraft } from '../src/card/card.ts'
import { AapError } from '../src/errors.ts'
import { agentIdOf } from '../src/identity/identity.ts'
import { sign } from '../src/identity/signing.ts'

export const draft: CardDraft = {
  name: 'translator',
  description: 'translates text',
  capabilities: [{ capability_id: 'cap:translate', version: '1.0.0' }],
  tags: ['nlp', 'translate']
}

export async function newKey (): Promise<PrivateKey> {
  return generateKeyPair('Ed25519')
}

/** Sign whatever fields are given with `key`, as issueCard would, without any checks. */
export async function signAs (key: PrivateKey, fields: Omit<AgentCard, 'signature'>): Promise<AgentCard> {
  const unsigned = { ...fields }
  return { ...unsigned, signature: await sign(key, CARD_SIGNING_DOMAIN, unsigned) }
}

/** A card for `key`'s agent id, signed by `other`. */
export async function forged (key: PrivateKey, other: PrivateKey, seq = 1): Promise<AgentCard> {
  const genuine = await issueCard(key, draft, seq)
  const { signature: _, ...unsigned } = genuine
  return signAs(other, unsigned)
}

/** A validly signed card whose validity window ended an hour ago. */
export async function expired (key: PrivateKey, seq = 1): Promise<AgentCard> {
  return issueCard(key, draft, seq, Date.now() - 2 * CARD_TTL_MS)
}

/** A validly signed card issued far in the future. */
export async function fromTheFuture (key: PrivateKey, seq = 1): Promise<AgentCard> {
  return issueCard(key, draft, seq, Date.now() + CARD_TTL_MS)
}

/** A card changed after signing. */
export async function mutated (key: PrivateKey, change: Partial<AgentCard> = { capabilities: [{ capability_id: 'cap:admin', version: '1.0.0' }] }): Promise<AgentCard> {
  return { ...await issueCard(key, draft, 1), ...change }
}

/** A card without its signature field. */
export async function unsigned (key: PrivateKey): Promise<Record<string, unknown>> {
  const { signature: _, ...rest } = await issueCard(key, draft, 1)
  return rest
}

/** A validly signed card over CARD_MAX_BYTES (the schema allows far more than the size cap). */
export async function oversized (key: PrivateKey): Promise<AgentCard> {
  const agentId = agentIdOf(key)
  const now = Date.now()
  return signAs(key, {
    agent_id: agentId,
    name: 'n'.repeat(128),
    description: 'd'.repeat(1024),
    capabilities: Array.from({ length: 32 }, (_, i) => ({ capability_id: `cap:${'x'.repeat(100)}-${i}`, version: '1.0.0' })),
    endpoint: endpointOf(agentId),
    protocol: 'aap-mesh/0.1.0',
    tags: [],
    seq: 1,
    issued_at: new Date(now).toISOString(),
    expires_at: new Date(now + CARD_TTL_MS).toISOString()
  })
}

/** The AapError code and details of a rejected promise (fails the test if it resolves or throws anything else). */
export async function codeOf (p: Promise<unknown>): Promise<{ code: string, details: Record<string, unknown> }> {
  try {
    await p
  } catch (err) {
    if (err instanceof AapError) return { code: err.code, details: err.details ?? {} }
    throw err
  }
  throw new Error('expected a rejection, but it resolved')
}
