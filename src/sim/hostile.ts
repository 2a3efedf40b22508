/**
 * The hostile nodes of a simulation (scenario.ts): each publishes a card of
 * its own that claims every capability, puts a forged higher-seq card of a
 * victim to the DHT, serves that forged card over the card protocol, and
 * republishes every genuine event it sees on a followed topic, mutated and
 * misattributed. Hostile nodes are set up a few at a time: each announcement
 * walks the DHT, and one after another they held up the tasks for minutes at
 * 200 nodes.
 */
import type { Message } from '@libp2p/gossipsub'
import { CARD_MAX_FRAME_BYTES, CARD_PROTOCOL } from '../constants.ts'
import { cardRecordKey, encodeCardRecord, type AgentCard } from '../card/card.ts'
import type { AgentEvent } from '../runlog/types.ts'
import { method, serve } from '../wire/rpc.ts'
import { schema } from '../schema/validate.ts'
import { SIM_CAPABILITIES } from './agents.ts'
import type { SimNode } from './mesh.ts'

/** Hostile nodes set up at once. */
const HOSTILE_SETUP_CONCURRENCY = 4
/** A forged DHT put gives up after this (the replicas refuse it). */
const FORGED_PUT_TIMEOUT_MS = 5000

export interface HostileInit {
  hostile: SimNode[]
  /** The genuine card of each honest agent. */
  cards: Map<string, AgentCard>
  /** Picks the victim of each hostile node (the scenario's seeded choice). */
  victim: () => SimNode
  announceTimeoutMs: number
  /** Counts what went wrong on the way, by kind. */
  noted: (kind: string) => (err: unknown) => 0
  /** The topics whose events the hostile nodes forge. */
  topics: Set<string>
  /** Told of every forgery attempted. */
  attempted: () => void
  log: (line: string) => void
}

export async function setUpHostile (o: HostileInit): Promise<void> {
  // victims are chosen first, in order, so a seed picks the same ones however the setups interleave
  const queue = o.hostile.map(h => ({ h, victim: o.victim() }))
  let ready = 0
  await Promise.all(Array.from({ length: HOSTILE_SETUP_CONCURRENCY }, async () => {
    for (let next = queue.shift(); next !== undefined; next = queue.shift()) {
      await setUpOne(o, next.h, next.victim)
      o.log(`hostile nodes ready ${++ready}/${o.hostile.length}`)
    }
  }))
}

async function setUpOne (o: HostileInit, h: SimNode, victim: SimNode): Promise<void> {
  // a valid card of its own that claims every capability, served tampered (another agent's id)
  await h.node.discovery.publish({ name: 'totally-honest', capabilities: SIM_CAPABILITIES, tags: ['fast'] }, { announce: false })
  await h.node.discovery.announce(AbortSignal.timeout(o.announceTimeoutMs)).catch(o.noted('announce'))
  const victimCard = o.cards.get(victim.node.agentId)
  if (victimCard !== undefined) {
    const forged = { ...victimCard, name: 'hijacked', capabilities: SIM_CAPABILITIES, seq: victimCard.seq + 100 }
    // DHT: a higher-seq card for the victim under the victim's key, with the victim's (now wrong) signature
    o.attempted()
    try {
      for await (const _ of h.node.host.services.dht.put(cardRecordKey(victim.node.agentId), encodeCardRecord(forged), { signal: AbortSignal.timeout(FORGED_PUT_TIMEOUT_MS) })) { /* drain */ }
    } catch {
      // refused, as it should be: the replicas' validator checks the signature
      o.noted('forged_card_put_refused')(undefined)
    }
    // card protocol: answer every request with the forged card
    await h.node.host.unhandle(CARD_PROTOCOL)
    await serve(h.node.host, {
      protocol: CARD_PROTOCOL,
      maxFrameBytes: CARD_MAX_FRAME_BYTES,
      methods: { get_card: method(schema<Record<string, never>>('aap:card#/definitions/GetCardRequest'), async () => { o.attempted(); return { card: forged } }) }
    })
  }
  // events: mutate every genuine event seen on a followed topic and publish it again
  const pubsub = h.node.host.services.pubsub
  pubsub.addEventListener('message', (evt: CustomEvent<Message>) => {
    const msg = evt.detail
    if (!o.topics.has(msg.topic)) return
    try {
      const real = JSON.parse(new TextDecoder().decode(msg.data)) as AgentEvent
      const mutated = { ...real, payload: { ...real.payload, forged: true } }
      const misattributed = { ...real, executor: h.node.agentId }
      for (const f of [mutated, misattributed]) {
        o.attempted()
        void pubsub.publish(msg.topic, new TextEncoder().encode(JSON.stringify(f))).catch(o.noted('forged_event_publish'))
      }
    } catch {
      o.noted('hostile_saw_a_non_event')(undefined)
    }
  })
}
