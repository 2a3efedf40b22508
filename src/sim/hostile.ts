/**
 * The hostile nodes of a simulation (scenario.ts): each publishes a card of
 * its own that claims every capability, puts a forged higher-seq card of a
 * victim to the DHT, serves that forged card over the card protocol (and, to
 * whoever asks for held cards, a card like it for every agent asked for), and
 * republishes every genuine event it sees on a followed topic, mutated and
 * misattributed. Hostile nodes are set up a few at a time: each announcement
 * walks the DHT, and one after another they held up the tasks for minutes at
 * 200 nodes. They run in the scenario's process, or with group processes in a
 * hostile group of their own (group-worker.ts --hostile), which answers the
 * same calls over IPC (group.ts `remoteHostiles`).
 */
import type { Message } from '@libp2p/gossipsub'
import { CARD_MAX_FRAME_BYTES, CARD_PROTOCOL } from '../constants.ts'
import { cardRecordKey, encodeCardRecord, endpointOf, type AgentCard } from '../card/card.ts'
import { isGetHeldCardsRequest } from '../card/held-cards.ts'
import type { AgentEvent } from '../runlog/types.ts'
import type { EventSubscription } from '../events/subscription.ts'
import { correlationTopic } from '../events/topic.ts'
import { method, serve } from '../wire/rpc.ts'
import { schema } from '../schema/validate.ts'
import { SIM_CAPABILITIES } from './agents.ts'
import type { SimNode } from './mesh.ts'
import { sample } from '../util/sample.ts'

/** Hostile nodes set up at once in a process that also drives tasks. */
const HOSTILE_SETUP_CONCURRENCY = 4
/**
 * ...and in a hostile group, whose process does nothing else and whose setup
 * the whole mesh waits for (at 4 at a time 50 nodes took over 5 minutes).
 */
export const HOSTILE_GROUP_SETUP_CONCURRENCY = 8
/** A forged DHT put gives up after this (the replicas refuse it). */
const FORGED_PUT_TIMEOUT_MS = 5000

/** The card each hostile node publishes as its own: valid, and it claims every capability. */
export const HOSTILE_DRAFT = { name: 'totally-honest', capabilities: SIM_CAPABILITIES, tags: ['fast'] }

export interface HostileInit {
  hostile: SimNode[]
  /** The genuine card of the next hostile node's victim (the scenario's seeded choice), if any. */
  victim: () => AgentCard | undefined
  /** Whether each node still has to publish HOSTILE_DRAFT (a hostile group publishes it before it is ready). */
  publish: boolean
  announceTimeoutMs: number
  /** Picks which hostile nodes follow a task. */
  random: () => number
  /** Hostile nodes that follow each task (a bounded number, so a task's load is the same at every size). */
  followersPerTask: number
  /** Counts what went wrong on the way, by kind. */
  noted: (kind: string) => (err: unknown) => 0
  log: (line: string) => void
  /** Nodes set up at once (default HOSTILE_SETUP_CONCURRENCY). */
  concurrency?: number
}

/**
 * The hostile side of a simulation, in this process (setUpHostile) or in a
 * hostile group process of its own (group.ts): the same calls either way.
 */
export interface Hostiles {
  /** The hostile agents' ids: their own cards are no forgeries. */
  readonly ids: ReadonlySet<string>
  /** A few hostile nodes follow the task's correlation and forge its events; call the result when it ends. */
  follow: (taskId: string, participants: string[]) => () => void
  /** Forgeries attempted so far (cards served and put, events published). */
  attempted: () => Promise<number>
}

export async function setUpHostile (o: HostileInit): Promise<Hostiles> {
  const topics = new Set<string>()
  let attempted = 0
  const state: HostileState = { topics, attempted: () => { attempted++ } }
  // victims are chosen first, in order, so a seed picks the same ones however the setups interleave
  const queue = o.hostile.map(h => ({ h, victim: o.victim() }))
  let ready = 0
  await Promise.all(Array.from({ length: o.concurrency ?? HOSTILE_SETUP_CONCURRENCY }, async () => {
    for (let next = queue.shift(); next !== undefined; next = queue.shift()) {
      await setUpOne(o, state, next.h, next.victim)
      o.log(`hostile nodes ready ${++ready}/${o.hostile.length}`)
    }
  }))
  return {
    ids: new Set(o.hostile.map(h => h.node.agentId)),
    follow: (taskId, participants) => {
      topics.add(correlationTopic(taskId))
      const subs: EventSubscription[] = []
      let ended = false
      for (const h of sample(o.random, o.hostile, o.followersPerTask)) {
        h.node.events.subscribe(taskId, { participants, onEvent: () => {} })
          .then(s => { if (ended) s.close(); else subs.push(s) }, o.noted('hostile_subscribe'))
      }
      return () => {
        ended = true
        for (const s of subs) s.close()
      }
    },
    attempted: async () => attempted
  }
}

interface HostileState {
  /** The topics whose events the hostile nodes forge. */
  topics: Set<string>
  /** Told of every forgery attempted. */
  attempted: () => void
}

async function setUpOne (o: HostileInit, st: HostileState, h: SimNode, victimCard: AgentCard | undefined): Promise<void> {
  // a valid card of its own that claims every capability
  if (o.publish) await h.node.discovery.publish(HOSTILE_DRAFT, { announce: false })
  await h.node.discovery.announce(AbortSignal.timeout(o.announceTimeoutMs)).catch(o.noted('announce'))
  if (victimCard !== undefined) {
    const forged = { ...victimCard, name: 'hijacked', capabilities: SIM_CAPABILITIES, seq: victimCard.seq + 100 }
    // DHT: a higher-seq card for the victim under the victim's key, with the victim's (now wrong) signature
    st.attempted()
    try {
      for await (const _ of h.node.host.services.dht.put(cardRecordKey(victimCard.agent_id), encodeCardRecord(forged), { signal: AbortSignal.timeout(FORGED_PUT_TIMEOUT_MS) })) { /* drain */ }
    } catch {
      // refused, as it should be: the replicas' validator checks the signature
      o.noted('forged_card_put_refused')(undefined)
    }
    // card protocol: answer every request with the forged card
    await h.node.host.unhandle(CARD_PROTOCOL)
    await serve(h.node.host, {
      protocol: CARD_PROTOCOL,
      maxFrameBytes: CARD_MAX_FRAME_BYTES,
      methods: {
        get_card: method(schema<Record<string, never>>('aap:card#/definitions/GetCardRequest'), async () => { st.attempted(); return { card: forged } }),
        // a "held" card of every agent asked for (asked by key: of the victim itself): the victim's signature over another agent's fields
        get_held_cards: method(isGetHeldCardsRequest, async req => {
          const cards: AgentCard[] = []
          let room = CARD_MAX_FRAME_BYTES - 256
          for (const id of req.agents ?? [forged.agent_id]) {
            const card = { ...forged, agent_id: id, endpoint: endpointOf(id) }
            room -= Buffer.byteLength(JSON.stringify(card)) + 1
            if (room < 0) break // as many as one answer frame carries: each one sent is an attempt
            st.attempted()
            cards.push(card)
          }
          return { cards }
        })
      }
    })
  }
  // events: mutate every genuine event seen on a followed topic and publish it again
  const pubsub = h.node.host.services.pubsub
  pubsub.addEventListener('message', (evt: CustomEvent<Message>) => {
    const msg = evt.detail
    if (!st.topics.has(msg.topic)) return
    try {
      const real = JSON.parse(new TextDecoder().decode(msg.data)) as AgentEvent
      const mutated = { ...real, payload: { ...real.payload, forged: true } }
      const misattributed = { ...real, executor: h.node.agentId }
      for (const f of [mutated, misattributed]) {
        st.attempted()
        void pubsub.publish(msg.topic, new TextEncoder().encode(JSON.stringify(f))).catch(o.noted('forged_event_publish'))
      }
    } catch {
      o.noted('hostile_saw_a_non_event')(undefined)
    }
  })
}
