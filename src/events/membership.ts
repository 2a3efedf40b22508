/**
 * Gossip topic membership of the events service, and the only code that
 * touches gossipsub beyond its public interface (its peer score and its
 * per-peer subscription messages). One topic per followed correlation, at
 * most MAX_CORRELATION_TOPICS joined, lingering ones included.
 */
import type { PeerId } from '@libp2p/interface'
import { TopicValidatorResult, type Message, type SubscriptionChangeData } from '@libp2p/gossipsub'
import { PeerScore, createTopicScoreParams } from '@libp2p/gossipsub/score'
import {
  EVENTS_SCORE_INVALID_DECAY, EVENTS_SCORE_INVALID_WEIGHT, EVENTS_TOPIC_LINGER_MS, MAX_CORRELATION_TOPICS
} from '../constants.ts'
import type { Logger } from '../logger.ts'
import type { MeshHost } from '../wire/host.ts'

/**
 * gossipsub counts rejected messages against the sender (P4) only on topics
 * with score parameters. Topics come and go with correlations, so their
 * parameters are added to the running router's score when a topic is joined
 * and removed when it is left. The router's `score` is not part of the
 * GossipSub interface; the instanceof check keeps this honest, and without it
 * the validator still works, only without the score penalty.
 */
function peerScoreOf (host: MeshHost): PeerScore | undefined {
  const pubsub: object = host.services.pubsub
  const score: unknown = 'score' in pubsub ? pubsub.score : undefined
  return score instanceof PeerScore ? score : undefined
}

/** The gossipsub score of `peer` as seen by `host`, or undefined when it cannot be read. */
export function gossipScore (host: MeshHost, peer: string): number | undefined {
  return peerScoreOf(host)?.score(peer)
}

export type TopicValidator = (peer: PeerId, msg: Message) => TopicValidatorResult | Promise<TopicValidatorResult>

export class TopicMembership {
  private readonly host: MeshHost
  private readonly log: Logger
  /** Topics joined and followed. */
  private readonly joined = new Set<string>()
  /** Topics still joined after they stopped being followed (see leave), and the timer that leaves them. */
  private readonly lingering = new Set<string>()
  private lingerTimer?: ReturnType<typeof setTimeout>
  /** Called for each message on a lingering topic (it is ignored). */
  private readonly onLingeringMessage: () => void
  private onPeerJoined?: (topic: string, peer: string) => void
  /**
   * The peers on each joined topic as this node last heard. gossipsub takes a
   * SUBSCRIBE for a topic the peer is already on as a no-op but still reports
   * it (subscription-change): only a peer not already here joins, so a peer
   * that repeats its SUBSCRIBE does not restart anyone's rounds. A peer leaves
   * on its UNSUBSCRIBE, its disconnect, or a heartbeat that finds gossipsub
   * dropped it (a broken stream), so its next SUBSCRIBE joins again.
   */
  private readonly subscribers = new Map<string, Set<string>>()
  private readonly onSubscriptionChange = (evt: CustomEvent<SubscriptionChangeData>): void => {
    const peer = evt.detail.peerId.toString()
    for (const s of evt.detail.subscriptions) {
      if (!this.joined.has(s.topic)) continue
      const on = this.subscribersOf(s.topic)
      if (!s.subscribe) {
        on.delete(peer)
        continue
      }
      if (on.has(peer)) continue
      on.add(peer)
      this.onPeerJoined?.(s.topic, peer)
    }
  }

  private readonly onPeerDisconnect = (evt: CustomEvent<PeerId>): void => {
    const peer = evt.detail.toString()
    for (const on of this.subscribers.values()) on.delete(peer)
  }

  private readonly onHeartbeat = (): void => {
    const pubsub = this.host.services.pubsub
    for (const [topic, on] of this.subscribers) {
      if (on.size === 0) continue
      const still = new Set(pubsub.getSubscribers(topic).map(p => p.toString()))
      for (const peer of on) if (!still.has(peer)) on.delete(peer)
    }
  }

  private subscribersOf (topic: string): Set<string> {
    let on = this.subscribers.get(topic)
    if (on === undefined) {
      on = new Set()
      this.subscribers.set(topic, on)
    }
    return on
  }

  constructor (host: MeshHost, log: Logger, onLingeringMessage: () => void) {
    this.host = host
    this.log = log
    this.onLingeringMessage = onLingeringMessage
  }

  /** Start telling `onPeerJoined` about peers that subscribe to a followed topic. */
  start (onPeerJoined: (topic: string, peer: string) => void): void {
    this.onPeerJoined = onPeerJoined
    this.host.services.pubsub.addEventListener('subscription-change', this.onSubscriptionChange)
    this.host.services.pubsub.addEventListener('gossipsub:heartbeat', this.onHeartbeat)
    this.host.addEventListener('peer:disconnect', this.onPeerDisconnect)
  }

  /** Leave every topic now. */
  stop (): void {
    this.host.services.pubsub.removeEventListener('subscription-change', this.onSubscriptionChange)
    this.host.services.pubsub.removeEventListener('gossipsub:heartbeat', this.onHeartbeat)
    this.host.removeEventListener('peer:disconnect', this.onPeerDisconnect)
    this.subscribers.clear()
    const all = [...this.joined]
    this.joined.clear()
    this.unsubscribe(all)
    this.leaveLingering()
  }

  /** Whether another topic can be joined. */
  get full (): boolean {
    return this.joined.size >= MAX_CORRELATION_TOPICS
  }

  /** Join a topic: validator and score parameters first, then the SUBSCRIBE (none if it lingered). */
  join (topic: string, validator: TopicValidator): void {
    const pubsub = this.host.services.pubsub
    // still joined from a track that ended a moment ago: take the topic over, no SUBSCRIBE
    const lingered = this.lingering.delete(topic)
    // lingering topics count towards the node's joined topics: make room first
    if (!lingered && this.joined.size + this.lingering.size >= MAX_CORRELATION_TOPICS) this.leaveLingering()
    pubsub.topicValidators.set(topic, validator)
    const score = peerScoreOf(this.host)
    if (score !== undefined && score.params.topics[topic] === undefined) {
      score.params.topics[topic] = createTopicScoreParams({
        topicWeight: 1,
        timeInMeshWeight: 0,
        timeInMeshQuantum: 1,
        firstMessageDeliveriesWeight: 0,
        meshMessageDeliveriesWeight: 0,
        meshFailurePenaltyWeight: 0,
        invalidMessageDeliveriesWeight: EVENTS_SCORE_INVALID_WEIGHT,
        invalidMessageDeliveriesDecay: EVENTS_SCORE_INVALID_DECAY
      })
    }
    if (!lingered) pubsub.subscribe(topic)
    this.joined.add(topic)
    // the peers already on it joined before this node followed it (their SUBSCRIBE again is no join)
    this.subscribers.set(topic, new Set(pubsub.getSubscribers(topic).map(p => p.toString())))
  }

  /**
   * Stop following a topic. The node stays joined for up to
   * EVENTS_TOPIC_LINGER_MS, ignoring what comes in: a track of the same
   * correlation started meanwhile (the next step of a task) takes it over
   * without a SUBSCRIBE, and the topics left in one window go in one
   * UNSUBSCRIBE message per peer instead of one message per topic.
   * `now` leaves at once (the service is stopping).
   */
  leave (topic: string, now: boolean): void {
    if (!this.joined.delete(topic)) return
    this.subscribers.delete(topic)
    if (now) {
      this.unsubscribe([topic])
      return
    }
    this.host.services.pubsub.topicValidators.set(topic, () => {
      this.onLingeringMessage()
      return TopicValidatorResult.Ignore
    })
    this.lingering.add(topic)
    if (this.lingerTimer === undefined) {
      this.lingerTimer = setTimeout(() => { this.leaveLingering() }, EVENTS_TOPIC_LINGER_MS)
      this.lingerTimer.unref?.()
    }
  }

  /** Leave every lingering topic now. */
  private leaveLingering (): void {
    clearTimeout(this.lingerTimer)
    this.lingerTimer = undefined
    const topics = [...this.lingering]
    this.lingering.clear()
    this.unsubscribe(topics)
  }

  /**
   * Leave topics: one UNSUBSCRIBE message per connected peer for all of them.
   * gossipsub's own unsubscribe() sends one message per topic and peer; its
   * per-peer send of a subscription list is not part of the GossipSub
   * interface, so the shape is checked and unsubscribe() is the fallback.
   */
  private unsubscribe (topics: string[]): void {
    if (topics.length === 0) return
    const pubsub = this.host.services.pubsub
    const router = pubsub as unknown as {
      subscriptions?: unknown
      peers?: unknown
      sendSubscriptions?: unknown
      leave?: unknown
    }
    const { subscriptions, peers, sendSubscriptions, leave } = router
    try {
      if (topics.length > 1 && subscriptions instanceof Set && peers instanceof Map &&
        typeof sendSubscriptions === 'function' && typeof leave === 'function') {
        const gone = topics.filter(topic => subscriptions.delete(topic))
        if (gone.length > 0) for (const peer of peers.keys()) sendSubscriptions.call(router, peer, gone, false)
        for (const topic of topics) leave.call(router, topic)
      } else {
        for (const topic of topics) pubsub.unsubscribe(topic)
      }
    } catch (err) {
      // the router is stopping: it leaves every topic itself
      this.log.debug({ err, topics: topics.length }, 'gossipsub refused to leave topics')
    }
    const score = peerScoreOf(this.host)
    for (const topic of topics) {
      pubsub.topicValidators.delete(topic)
      if (score !== undefined) {
        // the topic's penalties go with it, and so does its per-peer bookkeeping
        Reflect.deleteProperty(score.params.topics, topic)
        for (const stats of score.peerStats.values()) Reflect.deleteProperty(stats.topics, topic)
      }
    }
  }
}
