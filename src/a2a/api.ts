/**
 * What the local agent API does for bridged A2A agents (/v1/a2a/agents, and
 * keeping their capabilities when the agent re-registers its card). The SDK
 * client is loaded on first use only.
 */
import type { AgentCard, CapabilityRef, CardDraft } from '../card/card.ts'
import type { Logger } from '../logger.ts'
import type { MeshNode } from '../node.ts'
import type { A2aOutbound } from './outbound.ts'

export class A2aApi {
  private outbound?: A2aOutbound
  private readonly node: MeshNode
  private readonly log: Logger

  constructor (node: MeshNode, log: Logger, outbound?: A2aOutbound) {
    this.node = node
    this.log = log
    if (outbound !== undefined) this.outbound = outbound
  }

  describe (): ReturnType<A2aOutbound['describe']> {
    return this.outbound?.describe() ?? []
  }

  /** The capabilities the local agent serves: `capabilities` less those the bridged A2A agents serve. */
  forAgent (capabilities: readonly CapabilityRef[]): CapabilityRef[] {
    const a2a = new Set((this.outbound?.served() ?? []).map(c => `${c.capability_id}@${c.version}`))
    return capabilities.filter(c => !a2a.has(`${c.capability_id}@${c.version}`))
  }

  /** A card draft with the bridged A2A agents' capabilities kept on it. */
  async withA2a (draft: CardDraft): Promise<CardDraft> {
    if (this.outbound === undefined || this.outbound.list().length === 0) return draft
    const { mergeDrafts } = await import('./outbound.ts')
    return mergeDrafts(draft, this.outbound.list().map(a => a.draft)) ?? draft
  }

  /** Take the bridged capabilities' run handlers back (after the local agent's were set). */
  reclaim (): void {
    this.outbound?.reclaim()
  }

  /** Bridge the A2A server at `url` and publish the card with its skills; returns the agent and the card. */
  async add (url: string, publish: (draft: CardDraft) => Promise<AgentCard>): Promise<{ agent: ReturnType<A2aOutbound['describe']>[number] | undefined, card: AgentCard }> {
    const { A2aOutbound, mergeDrafts } = await import('./outbound.ts')
    this.outbound ??= new A2aOutbound(this.node, this.log)
    const agent = await this.outbound.add(url)
    const { draftOf } = await import('../card/card.ts')
    const merged = mergeDrafts(this.node.card === undefined ? undefined : draftOf(this.node.card), [agent.draft])
    const card = await publish(merged ?? agent.draft)
    return { agent: this.outbound.describe().find(a => a.url === agent.url), card }
  }
}
