/**
 * Cards held for others, so a discover does not dial every provider it is told of.
 *
 * A node that keeps provider records of a key (kad-dht's ADD_PROVIDER: the
 * provider stores its record here over its own connection) asks that
 * provider for its card over the same connection and keeps the verified card.
 * A discover whose DHT answer named providers then asks the peer that answered
 * (`get_held_cards`, over the connection the answer came on) for the cards it
 * holds of the providers it has no card of, and verifies each as if the agent
 * had served it (protocols/card.md). What the holder does not have, or does
 * not send within CARD_HELD_ASK_TIMEOUT_MS, is fetched from the agents, and so
 * is a card of an agent only that holder named (fetch-order.ts fromHolder).
 *
 * Bounds: at most CARD_HELD_MAX cards (the least recently stored dropped);
 * pulls run CARD_HELD_PULL_CONCURRENCY at a time with at most
 * CARD_HELD_PULL_QUEUE waiting (more are dropped and counted), at most once
 * per agent per CARD_HELD_PULL_MIN_INTERVAL_MS. A provider record is pulled
 * after even when a card of its agent is held (the agent may have published
 * a new one: a key it gained or dropped, its hourly rewalk), and that pull
 * never dials. One that comes within the interval of the agent's last pull
 * is put off to the interval's end, not dropped (one such pull per agent, at
 * most CARD_HELD_MAX): an agent that published twice within it (`card set`
 * soon after its start) was otherwise held at its older card until due. One
 * that ran out of time or lost its connection (the provider was busy, most
 * often announcing) is tried again later, at most
 * CARD_HELD_PULL_RETRIES times, and so is one whose card a discover asks for.
 * A card is handed out only until it expires, and never replaced by an older
 * one. One that an agent has likely re-signed since (it
 * was issued a republish interval ago) is still handed out while valid, and
 * pulled again when asked for: the only pulls that may dial, and only for
 * agents whose card this node held, so an asker cannot make it dial anyone.
 */
import { randomBytes } from 'node:crypto'
import { setImmediate as nextTurn } from 'node:timers/promises'
import type { PeerId } from '@libp2p/interface'
import type { CID } from 'multiformats/cid'
import {
  CARD_HELD_ASK_MAX, CARD_HELD_ASK_TIMEOUT_MS, CARD_HELD_MAX, CARD_HELD_PULL_CONCURRENCY,
  CARD_HELD_PULL_MIN_INTERVAL_MS, CARD_HELD_PULL_QUEUE, CARD_HELD_PULL_RETRIES, CARD_HELD_PULL_RETRY_MS, CARD_MAX_FRAME_BYTES, CARD_REPUBLISH_INTERVAL_MS
} from '../constants.ts'
import { InvalidRequestError, toAapError, type AapError } from '../errors.ts'
import { CARD_HELD_SEED_BYTES, CARD_KEY_ANSWERS_WAIT_MS } from './constants.ts'
import { peerIdOfAgent } from '../identity/identity.ts'
import type { SignatureCache } from '../identity/signature-cache.ts'
import { withinDeadline } from '../util/deadline.ts'
import type { Logger } from '../logger.ts'
import { schema } from '../schema/validate.ts'
import type { RpcClient } from '../wire/rpc.ts'
import { compareCards, verifyCard, type AgentCard } from './card.ts'
import type { DiscoveryStats } from './discovery-stats.ts'
import type { AskPace } from './ask-pace.ts'

/** One of the two: the agents whose cards are wanted, or the provider key whose providers' cards are (with the asker's pick seed). */
export interface GetHeldCardsRequest { agents?: string[], key?: string, seed?: string }

/** A pick seed for get_held_cards by key: CARD_HELD_SEED_BYTES random bytes in base64url (protocols/card.md). */
export function heldSeed (): string { return randomBytes(CARD_HELD_SEED_BYTES).toString('base64url') }
export const isGetHeldCardsRequest = schema<GetHeldCardsRequest>('aap:card#/definitions/GetHeldCardsRequest')
const isGetHeldCardsResponse = schema<{ cards: unknown[] }>('aap:card#/definitions/GetHeldCardsResponse')

/** Room an answer leaves for its envelope (`{"id":…,"ok":true,"body":{"cards":[…]}}`) in one frame. */
const ANSWER_ENVELOPE_BYTES = 256

interface Held { card: AgentCard, bytes: number }

export interface HeldCardsInit {
  /** The agent's own card over /aap/card/0.1.0, verified. */
  pull: (peer: PeerId, signal: AbortSignal) => Promise<AgentCard>
  connected: (peer: PeerId) => boolean
  stats: DiscoveryStats
  log: Logger
  now?: () => number
  /** Runs `fn` in `ms` (setTimeout, unref'd); a test passes its own. Returns what cancels it. */
  schedule?: (fn: () => void, ms: number) => () => void
  /** How soon the same agent's card may be pulled again; CARD_HELD_PULL_MIN_INTERVAL_MS unless a test passes a shorter one. */
  pullMinIntervalMs?: number
}

function later (fn: () => void, ms: number): () => void {
  const timer = setTimeout(fn, ms)
  timer.unref()
  return () => { clearTimeout(timer) }
}

export class HeldCards {
  private readonly held = new Map<string, Held>()
  /** When each agent's card was last pulled (or tried), by agent id; as bounded as `held`. */
  private readonly pulledAt = new Map<string, number>()
  private readonly queue = new Map<string, { peer: PeerId, dial: boolean }>()
  /** Pulls waiting to be tried again, by agent id: how many times tried, and what cancels the wait (at most CARD_HELD_PULL_QUEUE). */
  private readonly retries = new Map<string, { tries: number, cancel: (() => void) | undefined }>()
  /**
   * Provider-record pulls put off to the end of their agent's interval, by
   * agent id: what cancels the wait (at most CARD_HELD_MAX, one per agent).
   * Dropped when a pull of that agent starts meanwhile, when its card is
   * dropped from `held`, and on stop.
   */
  private readonly deferred = new Map<string, () => void>()
  private running = 0
  /** The size of the last own card `answer` was given. */
  private ownBytes?: { card: AgentCard, bytes: number }
  private readonly stopping = new AbortController()
  private readonly now: () => number
  private readonly schedule: (fn: () => void, ms: number) => () => void
  private readonly pullMinIntervalMs: number
  private readonly init: HeldCardsInit

  constructor (init: HeldCardsInit) {
    this.init = init
    this.now = init.now ?? Date.now
    this.schedule = init.schedule ?? later
    this.pullMinIntervalMs = init.pullMinIntervalMs ?? CARD_HELD_PULL_MIN_INTERVAL_MS
  }

  get size (): number { return this.held.size }

  /** Keep a verified card, unless a newer unexpired one of the same agent is kept. */
  hold (card: AgentCard): void {
    const prev = this.held.get(card.agent_id)
    if (prev !== undefined && this.valid(prev.card) && compareCards(prev.card, card) >= 0) return
    this.held.delete(card.agent_id)
    this.held.set(card.agent_id, { card, bytes: Buffer.byteLength(JSON.stringify(card)) })
    if (this.held.size > CARD_HELD_MAX) {
      const dropped = this.dropOldest(this.held)
      if (dropped !== undefined) this.cancelDeferred(dropped)
    }
  }

  /**
   * A peer stored a provider record here: pull its card over that connection,
   * whatever card of it is held (at most once per CARD_HELD_PULL_MIN_INTERVAL_MS,
   * as every pull): a record that comes with an agent's new card (a key it
   * gained or dropped: announce.ts walks a dropped key once more before it
   * withdraws it; every key the card names, once, when it says something new,
   * such as another version under a key still named; its rewalk) brings that
   * card here before the held one is due. A record that comes within the
   * interval of the agent's last pull (that pull may have taken the card
   * before this one) is pulled at the interval's end: one such pull per agent.
   */
  onProviderRecord (peer: PeerId): void {
    const id = peer.toString()
    if (this.stopping.signal.aborted || this.queue.has(id)) return
    const wait = this.tooSoon(id)
    if (wait > 0) this.defer(peer, wait)
    else this.enqueue(peer, false)
  }

  /**
   * The held, unexpired cards of `agents`, as many as fit in one answer frame
   * (and `max` at most); those likely re-signed since are pulled again for
   * the next asker. `own`, this node's own card when the asker wants it (it
   * asked for this agent, or for a key this node provides), comes first.
   */
  answer (agents: Iterable<string>, own?: AgentCard, max = CARD_HELD_ASK_MAX): AgentCard[] {
    const out: AgentCard[] = []
    let room = CARD_MAX_FRAME_BYTES - ANSWER_ENVELOPE_BYTES
    if (own !== undefined && this.valid(own)) {
      // the own card changes only when it is re-signed: measured once per card, not per answer
      if (this.ownBytes?.card !== own) this.ownBytes = { card: own, bytes: Buffer.byteLength(JSON.stringify(own)) }
      const bytes = this.ownBytes.bytes
      if (bytes + 1 <= room && max > 0) {
        room -= bytes + 1
        out.push(own)
      }
    }
    for (const id of new Set(agents)) {
      if (out.length >= max) break
      if (id === own?.agent_id) continue
      const held = this.held.get(id)
      if (held === undefined) {
        // its record is kept here but its pull failed: asked for, pull it again (never a dial)
        if (this.pulledAt.has(id) && !this.retries.has(id)) this.enqueue(peerIdOfAgent(id), false)
        continue
      }
      if (this.due(held.card)) this.enqueue(peerIdOfAgent(id), true)
      if (!this.valid(held.card) || held.bytes + 1 > room) continue
      room -= held.bytes + 1
      out.push(held.card)
    }
    this.init.stats.heldCardsServed += out.length
    return out
  }

  stop (): void {
    this.stopping.abort()
    this.queue.clear()
    for (const r of this.retries.values()) r.cancel?.()
    this.retries.clear()
    for (const cancel of this.deferred.values()) cancel()
    this.deferred.clear()
  }

  private valid (card: AgentCard): boolean { return Date.parse(card.expires_at) > this.now() }
  private due (card: AgentCard): boolean { return this.now() - Date.parse(card.issued_at) >= CARD_REPUBLISH_INTERVAL_MS || !this.valid(card) }

  /** Queue a pull; false when none is queued or waiting for its turn. */
  private enqueue (peer: PeerId, dial: boolean, retry = false): boolean {
    const id = peer.toString()
    if (this.stopping.signal.aborted) return false
    if (this.queue.has(id)) return true
    if (!retry && this.tooSoon(id) > 0) return false
    if (this.queue.size >= CARD_HELD_PULL_QUEUE) {
      this.init.stats.heldCardPullsDropped++
      return false
    }
    this.queue.set(id, { peer, dial })
    this.pump()
    return true
  }

  private pump (): void {
    while (this.running < CARD_HELD_PULL_CONCURRENCY && this.queue.size > 0) {
      const [id, next] = this.queue.entries().next().value as [string, { peer: PeerId, dial: boolean }]
      this.queue.delete(id)
      // a pull after a provider record rides the connection that record came on; it never dials
      if (!next.dial && !this.init.connected(next.peer)) {
        this.init.stats.heldCardPullsSkipped++
        this.retries.delete(id)
        continue
      }
      // this pull takes the card the agent publishes now: a pull put off for it is done
      this.cancelDeferred(id)
      this.pulledAt.delete(id)
      this.pulledAt.set(id, this.now())
      if (this.pulledAt.size > CARD_HELD_MAX) this.dropOldest(this.pulledAt)
      this.running++
      this.init.pull(next.peer, this.stopping.signal)
        .then(card => {
          this.init.stats.heldCardPulls++
          this.retries.delete(id)
          this.hold(card)
        }, (err: unknown) => {
          this.init.stats.heldCardPullFailures++
          // the client reports its own time limits and lost streams as AGENT_NOT_FOUND with a reason (wire/client.ts)
          const e = toAapError(err)
          const reason = e.details?.reason
          const timedOut = e.code === 'TIMEOUT' || reason === 'timeout'
          const lost = reason === 'closed' || reason === 'unreachable'
          if (timedOut) this.init.stats.heldCardPullTimeouts++
          else if (lost) this.init.stats.heldCardPullsLost++
          this.init.log.debug({ err: e, peer: id }, 'could not pull the card of a provider whose record this node keeps')
          if (timedOut || lost) this.retryLater(next.peer)
          else this.retries.delete(id)
        })
        .finally(() => {
          this.running--
          this.pump()
        })
    }
  }

  /** Try a pull that ran out of time or lost its connection again, unless it was tried CARD_HELD_PULL_RETRIES times. */
  private retryLater (peer: PeerId): void {
    const id = peer.toString()
    const tries = (this.retries.get(id)?.tries ?? 0) + 1
    if (this.stopping.signal.aborted || tries > CARD_HELD_PULL_RETRIES) {
      this.retries.delete(id)
      return
    }
    if (!this.retries.has(id) && this.retries.size >= CARD_HELD_PULL_QUEUE) {
      this.init.stats.heldCardPullsDropped++
      return
    }
    const wait = CARD_HELD_PULL_RETRY_MS * tries * (0.5 + Math.random() / 2)
    const entry: { tries: number, cancel: (() => void) | undefined } = { tries, cancel: undefined }
    this.retries.set(id, entry)
    this.init.stats.heldCardPullRetries++
    entry.cancel = this.schedule(() => {
      entry.cancel = undefined
      if (!this.enqueue(peer, false, true)) this.retries.delete(id)
    }, wait)
  }

  /** How long until the agent's card may be pulled again (CARD_HELD_PULL_MIN_INTERVAL_MS after its last pull); 0 when it may now. */
  private tooSoon (id: string): number {
    const last = this.pulledAt.get(id)
    return last === undefined ? 0 : Math.max(0, last + this.pullMinIntervalMs - this.now())
  }

  /** Pull the agent's card after its provider record in `wait` ms, at the end of its interval; one such pull per agent. */
  private defer (peer: PeerId, wait: number): void {
    const id = peer.toString()
    if (this.deferred.has(id)) return
    if (this.deferred.size >= CARD_HELD_MAX) {
      this.init.stats.heldCardPullsDropped++
      return
    }
    this.deferred.set(id, this.schedule(() => {
      this.deferred.delete(id)
      // as if the record came now: pulled, or put off again should the interval have moved
      this.onProviderRecord(peer)
    }, wait))
  }

  private cancelDeferred (id: string): void {
    const cancel = this.deferred.get(id)
    if (cancel === undefined) return
    this.deferred.delete(id)
    cancel()
  }

  /** Drop the first (least recently set) entry of `map`; returns its key. */
  private dropOldest (map: Map<string, unknown>): string | undefined {
    const oldest = map.keys().next().value
    if (oldest !== undefined) map.delete(oldest)
    return oldest
  }
}

/**
 * Ask `holder` for the cards it holds: of `agents` (at most
 * CARD_HELD_ASK_MAX), or of the providers whose records it keeps under `key`
 * (picked by `seed` when it keeps more than an answer names; verified as
 * `pace` says: ask-pace.ts).
 * Each card is handed to `onCard` as soon as it is verified, and the verified
 * ones are returned; a card that fails verification, or names an agent not
 * asked for or one twice, goes to `onRejected` instead. A card sent for a key
 * need not match the query: the caller checks that, as for any provider.
 */
export async function askHolder (client: RpcClient, holder: PeerId, what: { agents: PeerId[] } | { key: CID, seed?: string, pace?: AskPace }, signal: AbortSignal, onRejected: (err: AapError, from: string) => void, onCard?: (card: AgentCard) => void, signatures?: SignatureCache): Promise<AgentCard[]> {
  const wanted = 'agents' in what ? new Set(what.agents.slice(0, CARD_HELD_ASK_MAX).map(p => p.toString())) : undefined
  const seen = new Set<string>()
  const from = holder.toString()
  const ask = async (body: GetHeldCardsRequest): Promise<unknown> => client.call(holder, 'get_held_cards', body, {
    signal, callTimeoutMs: CARD_HELD_ASK_TIMEOUT_MS, responseTimeoutMs: CARD_HELD_ASK_TIMEOUT_MS
  })
  const byKey = 'key' in what ? what : undefined
  let answer: unknown
  if (byKey === undefined) answer = await ask({ agents: [...(wanted ?? [])] })
  else {
    const key = byKey.key.toString()
    try {
      answer = await ask(byKey.seed === undefined ? { key } : { key, seed: byKey.seed })
    } catch (err) {
      // a node from before the seed refuses it (its schema allows no other member): asked once more without one
      if (byKey.seed === undefined || toAapError(err).code !== 'INVALID_REQUEST' || signal.aborted) throw err
      answer = await ask({ key })
    }
  }
  const out: AgentCard[] = []
  const pace = byKey?.pace
  pace?.answered()
  const firstBatch = pace?.short() ?? 0
  let checked = 0
  let waited = false
  for (const value of isGetHeldCardsResponse.assert(answer, 'get_held_cards answer').cards) {
    // a discover that has what it wanted stops here: the rest is not verified, used or counted. Its results are
    // ready before the discover reads them and ends (`signal`): `short` says so at once
    if (signal.aborted || (pace !== undefined && pace.short() <= 0)) break
    // after as many cards as the discover wants (forged ones too), the rest waits for the answers of the contacts
    // asked beside this one (CARD_KEY_ANSWERS_WAIT_MS at most): with the same seed they send the same agents' cards
    // first, whose checks back these (fetch-order.ts `backed`) and are often all the discover needs
    // (held-cards-turns.test.ts)
    if (pace !== undefined && !waited && checked >= firstBatch) {
      waited = true
      // until the other asks by key have answered or ended, the discover aborts, or CARD_KEY_ANSWERS_WAIT_MS pass:
      // whichever ends the wait also takes it out of KeyAnswers
      await withinDeadline(signal, CARD_KEY_ANSWERS_WAIT_MS, async stop => { await pace.othersAnswered(stop) })
      if (signal.aborted || pace.short() <= 0) break
      // their cards are checked in microtasks once they are in: one turn of the event loop lets them go first
      await nextTurn()
      if (signal.aborted || pace.short() <= 0) break
    }
    checked++
    const id = (value as { agent_id?: unknown }).agent_id
    if (typeof id !== 'string' || seen.has(id) || (wanted !== undefined && !wanted.has(id))) {
      onRejected(new InvalidRequestError('a held card names an agent that was not asked for, or one twice', { reason: 'not_asked' }), from)
      continue
    }
    seen.add(id)
    let card: AgentCard
    try {
      card = await verifyCard(value, { expectAgent: id, ...(signatures === undefined ? {} : { signatures }) })
    } catch (err) {
      onRejected(toAapError(err), from)
      continue
    }
    out.push(card)
    onCard?.(card)
  }
  return out
}
