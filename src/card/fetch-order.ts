/**
 * Which provider's card a discover fetches next. Providers wait in turn over
 * the peers whose DHT answers named them (provider-queue.ts), and one is
 * asked only while the fetches in flight are no more than the cards still
 * wanted: one spare fetch covers a slow or gone provider, instead of dials to
 * every provider named (protocols/card.md). A provider this node holds a
 * connection to answers without a dial (one that needs a dial costs a TCP
 * connection, a Noise handshake and identify both ways, on both nodes), so
 * within its namer's turn it goes first (`preferred`), and the cards holders
 * may still send do not hold it back; it is never asked ahead of the other
 * namers' turns nor past the fetches the rule allows. Before, a provider on
 * such a connection was asked ahead of all and past the rule: a hostile peer
 * whose DHT answer named its Sybils (kad-dht dialed them on its word, so this
 * node holds connections it opened to them) filled every fetch with them,
 * and an honest provider another peer named waited out their timeouts.
 *
 * Only a connection this node opened makes a provider `preferred`. A peer
 * can connect to anyone, and the first cards to arrive are the answer, so a
 * connection the peer opened buys it no rank: such a provider is asked in
 * its turn like one that needs a dial.
 */
import type { PeerId } from '@libp2p/interface'
import { CARD_FETCH_SLOW_MS, CARD_FETCH_TIMEOUT_MS, CARD_HELD_ASK_MAX, DISCOVER_FETCH_CONCURRENCY } from '../constants.ts'
import { CARD_KEY_ASKS_AT_ONCE } from './constants.ts'
import { toAapError } from '../errors.ts'
import { peerIdOfAgent } from '../identity/identity.ts'
import type { Logger } from '../logger.ts'
import type { DiscoveryStats } from './discovery-stats.ts'
import { KeyAnswers, type AskPace } from './ask-pace.ts'
import { ProviderQueue } from './provider-queue.ts'

/**
 * The index in `pending` (in turn over the namers: `namer` of an index) to
 * fetch next, or -1 to wait for a fetch in flight to end: while the fetches
 * in flight are no more than the cards `wanted`, the first `preferred`
 * provider of the namer whose turn it is (the first's), else the first; with
 * `held` (cards holders may still send) counted too, except for a preferred
 * one, which costs no dial. Without `namer`, one namer named them all.
 */
export function nextProvider<P> (pending: readonly P[], preferred: (p: P) => boolean, inFlight: number, wanted: number, namer: (i: number) => number = () => 0, held = 0): number {
  if (pending.length === 0 || inFlight > wanted) return -1
  const turn = namer(0)
  const own = pending.findIndex((p, i) => namer(i) === turn && preferred(p))
  if (own >= 0) return own
  if (inFlight + held <= wanted) return 0
  // a dial waits for the cards holders may still send; a preferred provider, in the namers' order, does not
  return pending.findIndex(preferred)
}

/** Where a discover's card came from: a holder's answer, this node's cache, the agent itself, or the DHT record. */
export type CardSource = 'holder' | 'cache' | 'agent' | 'dht'

/** One card a discover made ready, and how (DiscoverOptions.explain). */
export interface CardOrigin {
  agent_id: string
  source: CardSource
  /** The peer whose DHT answer named the provider and, for `holder`, sent its card. */
  named_by?: string
  /** A connection this node opened to the provider was open when its fetch started. */
  preferred: boolean
  /** Milliseconds from the discover's start to this card being ready. */
  ms: number
}

export interface CardFetchesInit<Card extends { agent_id: string, seq: number }> {
  self: PeerId
  /** Cards still wanted beyond those ready (the caller's limit less what it has yielded). */
  wanted: () => number
  matches: (card: Card) => boolean
  /** The discover's deadline and its caller's stop: fetches end on either. */
  signal: AbortSignal
  stopped: AbortSignal
  connected: (peer: PeerId) => boolean
  /** Asked before the others, without counting against dials (a connection this node opened); absent: `connected`. */
  preferred?: (peer: PeerId) => boolean
  /** A verified card of this agent is cached. */
  known: (peer: PeerId) => boolean
  /** The card of `peer`; `source` is told where it came from (absent: `agent`). */
  fetch: (peer: PeerId, signal: AbortSignal, source: (s: CardSource) => void) => Promise<Card>
  /** Ask the peer whose answer named providers for their cards (held-cards.ts), each verified card handed to `onCard` at once; absent: never. */
  ask?: (holder: PeerId, agents: PeerId[], signal: AbortSignal, onCard: (card: Card) => void) => Promise<Card[]>
  /**
   * Ask a peer for the cards it holds of the providers of the discover's key (held-cards.ts), each verified card handed
   * to `onCard`; absent: never. `together`: one of the contacts asked at the same time (`contacts`), which share the
   * discover's pick seed; a contact asked after their answers gets a seed of its own (see `contacts`). `pace`: what
   * the asker verifies how soon (AskPace).
   */
  askKey?: (holder: PeerId, signal: AbortSignal, onCard: (card: Card) => void, together: boolean, pace: AskPace) => Promise<Card[]>
  /**
   * The newest card known of a holder-sent card's agent: the card, or a newer one this node holds (undefined: a newer
   * one was seen, and is gone). Not a place to keep it: its agent may not exist. With `result` its agent is backed and
   * the card about to be made a result: its seq is recorded, so no later discover goes back to an older card.
   */
  remember: (card: Card, result?: boolean) => Card | undefined
  stats: DiscoveryStats
  log: Logger
  /** Something changed: a card is ready or every fetch has ended. */
  onChange: () => void
  /** Told of every card made ready, and how (absent: nobody asks). */
  explain?: (origin: CardOrigin) => void
}

/** Providers a peer's DHT answer named, waiting for an answer by key. */
interface Deferred { named: PeerId[], from: PeerId }

/**
 * The card fetches of one discover: providers wait in `pending` and are
 * fetched DISCOVER_FETCH_CONCURRENCY at a time in `nextProvider`'s order; the
 * cards that match are `ready` in the order they arrive. Providers named by a
 * peer's answer are first asked of that peer when it holds their cards
 * (held-cards.ts): unconnected agents without a cached card, twice as many
 * as are still wanted and one more, at most CARD_HELD_ASK_MAX; until the
 * answer comes each counts as a fetch in flight for dials (nobody is dialed
 * while the holder may still send enough) but not for `preferred` ones, and
 * the agents are asked only for what it does not send. A holder's card is a
 * result only when a source other than that holder backs its agent
 * (`fromHolder`): a holder could name agents nobody runs and sign their
 * cards with fresh keys. The contact the
 * lookup asks first is also asked by key, and when its answer leaves cards
 * wanted the lookup's next connected contact is (`contacts`).
 */
export class CardFetches<Card extends { agent_id: string, seq: number }> {
  readonly ready: Card[] = []
  /** Providers yet to be asked, round-robin over the peers that named them (provider-queue.ts). */
  private readonly pending = new ProviderQueue()
  private inFlight = 0
  /** Fetches in flight, each marked once it is written off (`writeOff`). */
  private readonly flights = new Set<{ off: boolean }>()
  /** Of `inFlight`, those written off: they no longer hold back a dial to a provider named after (`writeOff`). */
  private writtenOff = 0
  /** Calls of `add` so far, each provider's at its first, and their count at the last `writeOff`. */
  private adds = 0
  private readonly addedAt = new Map<string, number>()
  private writeOffMark = 0
  /** Cards asked of holders whose answers have not come yet. */
  private expected = 0
  /** Which peer's answer named each provider (for `explain`). */
  private readonly namedBy = new Map<string, string>()
  /** Agents whose cards are ready: a holder's answer by key may send a card the lookup names too. */
  private readonly delivered = new Set<string>()
  /** Who named each provider: the peers whose DHT answers named it, '' for this node's own records (`backed`). */
  private readonly namers = new Map<string, Set<string>>()
  /** Matching cards holders sent of agents no other source named yet, by agent, with the holders that sent one: not results until backed. */
  private readonly vouched = new Map<string, { card: Card, by: Set<string> }>()
  /** Asks by key in flight, by holder: what that holder's DHT answer names waits for its cards (`askKey`). */
  private readonly keyAsks = new Map<string, Deferred[]>()
  /** Asks by key whose answers have not come (ask-pace.ts). */
  private readonly keyAnswers = new KeyAnswers()
  /** Every contact asked by key in this discover, and the lookup's connected contacts, closest to the key first (`contacts`). */
  private readonly keyAsked = new Set<string>()
  private nearContacts: readonly PeerId[] = []
  private readonly started = performance.now()
  /** Providers handed over whose card could not be had or did not match (the lookup's ProviderDemand). */
  spent = 0

  private readonly init: CardFetchesInit<Card>

  constructor (init: CardFetchesInit<Card>) { this.init = init }

  private origin (card: Card, source: CardSource, preferred: boolean): void {
    const named = this.namedBy.get(card.agent_id)
    this.init.explain?.({ agent_id: card.agent_id, source, ...(named === undefined ? {} : { named_by: named }), preferred, ms: Math.round(performance.now() - this.started) })
  }

  /** Nothing waits and nothing is in flight. */
  get idle (): boolean { return this.inFlight === 0 && this.expected === 0 && this.pending.length === 0 }

  /** A card made ready, once per agent (nothing when that agent's card is ready already). */
  private deliver (card: Card, source: CardSource, preferred: boolean): void {
    if (this.delivered.has(card.agent_id)) return
    this.delivered.add(card.agent_id)
    this.ready.push(card)
    this.origin(card, source, preferred)
  }

  add (all: PeerId[], from?: PeerId): void {
    this.admit(all, from)
    this.drain()
  }

  /** `add` without the drain: several answers handed on at once are all pending before the fetches start and `idle` is judged. */
  private admit (all: PeerId[], from?: PeerId): void {
    this.adds++
    // a name counts at once, also while this peer's answer waits for its cards: it may back another holder's card
    for (const p of all) this.named(p.toString(), from === undefined ? '' : from.toString())
    for (const p of all) if (!this.addedAt.has(p.toString())) this.addedAt.set(p.toString(), this.adds)
    // the peer is sending the cards it holds under the key: what it names waits for them
    const waiting = from === undefined ? undefined : this.keyAsks.get(from.toString())
    if (waiting !== undefined && from !== undefined) {
      waiting.push({ named: all, from })
      return
    }
    // providers whose cards a holder sent already are neither asked again nor spent
    const providers = all.filter(p => !this.delivered.has(p.toString()))
    this.pending.rank(providers, from)
    if (this.init.explain !== undefined && from !== undefined) for (const p of providers) this.namedBy.set(p.toString(), from.toString())
    this.pending.push(from === undefined ? providers : this.viaHolder(from, providers))
  }

  /**
   * Providers named before that `from`'s DHT answer names too (none: this
   * node's own records; the lookup's `also_named`). Each counts as named by
   * `from` (a card another holder sent of it is backed now: `backed`), moves
   * up to its rank among `from`'s picks when that is earlier
   * (provider-queue.ts), and, named now, is not held back by fetches written
   * off before (`writeOff`). So a peer that names an honest provider last,
   * behind picks that never answer, costs the discover a few dials, not its
   * whole time.
   */
  alsoNamed (all: PeerId[], from?: PeerId): void {
    this.adds++
    for (const p of all) this.named(p.toString(), from === undefined ? '' : from.toString())
    for (const p of all) this.addedAt.set(p.toString(), this.adds)
    this.pending.rerank(all.filter(p => !this.delivered.has(p.toString())), from)
    this.drain()
  }

  drain (): void {
    const { init } = this
    while (!init.stopped.aborted && this.inFlight < DISCOVER_FETCH_CONCURRENCY) {
      const i = this.next()
      if (i < 0) break
      // in its namer's turn: a preferred pick takes the place of its namer's first waiting provider (provider-queue.ts)
      const next = this.pending.takeInTurn(i)
      // a holder's card of it became backed while it waited: nothing to fetch
      if (next !== undefined && !this.delivered.has(next.toString())) this.fetch(next)
    }
    init.onChange()
  }

  /** The index in `pending` to fetch next (nextProvider's rule, with written-off fetches freeing dials for providers named after), or -1. */
  private next (): number {
    const { init } = this
    const first = init.preferred ?? init.connected
    const peers = this.pending.peers
    const wanted = init.wanted() - this.ready.length
    const i = nextProvider(peers, first, this.inFlight, wanted, j => this.pending.namerAt(j), this.expected)
    // none may be asked: the dial rule again, without the written-off fetches
    if (i >= 0 || this.writtenOff === 0 || this.inFlight - this.writtenOff + this.expected > wanted) return i
    return peers.findIndex(p => (this.addedAt.get(p.toString()) ?? 0) > this.writeOffMark)
  }

  /**
   * The lookup waited DHT_LOOKUP_PATIENCE_MS for the providers named so far
   * and their fetches are still out (dials that hang, say): it goes on for
   * more, and so do the fetches. Those in flight no longer count against
   * dials for the providers named from then on, so one the lookup finds next
   * is asked at once instead of behind them; the providers named before still
   * wait their turn as they did (one peer's list of dead providers does not
   * get more dials), and DISCOVER_FETCH_CONCURRENCY still bounds all in
   * flight. The fetches written off go on, and their cards still count.
   */
  writeOff (): void {
    this.writeOffMark = this.adds
    for (const f of this.flights) {
      if (f.off) continue
      f.off = true
      this.writtenOff++
    }
    this.drain()
  }

  private fetch (peer: PeerId): void {
    const { init } = this
    this.inFlight++
    const flight = { off: false }
    this.flights.add(flight)
    const own = AbortSignal.timeout(CARD_FETCH_TIMEOUT_MS)
    const started = performance.now()
    let source: CardSource = 'agent'
    const preferred = init.explain !== undefined && (init.preferred ?? init.connected)(peer)
    init.fetch(peer, AbortSignal.any([init.signal, own]), (s) => { source = s })
      .then(card => {
        if (!init.matches(card)) {
          this.spent++
          return
        }
        this.deliver(card, source, preferred)
      })
      .catch((err: unknown) => {
        // the caller has what it asked for: a fetch cut off by that is not the provider's fault
        if (init.stopped.aborted) return
        // unreachable or invalid (rejections are counted in stats.rejectedCards): not a result
        this.spent++
        init.stats.unreachableProviders++
        if (init.signal.aborted) init.stats.providerFetchesCutShort++
        else if (own.aborted) init.stats.providerFetchTimeouts++
        init.log.debug({ err: toAapError(err), peer: peer.toString() }, 'a provider\'s card could not be had')
      })
      .finally(() => {
        // slow: still unanswered CARD_FETCH_SLOW_MS after it started (one clock read, no timer per fetch)
        if (performance.now() - started >= CARD_FETCH_SLOW_MS) init.stats.slowProviderFetches++
        this.inFlight--
        this.flights.delete(flight)
        if (flight.off) this.writtenOff--
        init.onChange()
      })
  }

  /** Ask `holder` for what it may hold of `providers`; returns those to fetch from the agents now. */
  private viaHolder (holder: PeerId, providers: PeerId[]): PeerId[] {
    const { init } = this
    const ask = init.ask === undefined || holder.equals(init.self) || !init.connected(holder)
      ? []
      : providers.filter(p => !init.connected(p) && !init.known(p) && this.vouched.get(p.toString())?.by.has(holder.toString()) !== true).slice(0, Math.min(CARD_HELD_ASK_MAX, 2 * Math.max(0, init.wanted() - this.ready.length) + 1))
    if (init.ask === undefined || ask.length === 0) return providers
    this.expected += ask.length
    init.stats.heldCardAsks++
    // a held card that does not match proves nothing: it may be an older card than the agent's own (a holder
    // may hand out any valid card it holds), so the agent is asked itself, as for one the holder did not send
    const matched = new Set<string>()
    const onCard = (card: Card): void => {
      if (this.fromHolder(card, holder)) matched.add(card.agent_id)
    }
    init.ask(holder, ask, init.signal, onCard)
      .then(() => {
        this.pending.push(ask.filter(p => !matched.has(p.toString())))
      }, (err: unknown) => {
        if (!init.stopped.aborted) init.stats.heldCardAskFailures++
        init.log.debug({ err: toAapError(err), peer: holder.toString() }, 'the peer that named providers did not send their cards')
        this.pending.push(ask)
      })
      .finally(() => {
        this.expected -= ask.length
        this.drain()
      })
    return providers.filter(p => !ask.includes(p))
  }

  /**
   * A card `holder` sent; whether it was made ready (now or before). Anyone
   * can sign a valid card with a fresh key pair, so a holder could name
   * agents that do not exist and send their cards: a holder's card is the
   * agent's answer only when its existence is backed by a source other than
   * the holder (`backed`). Until then it waits in `vouched` and the agent is
   * asked itself. A card that does not match may be older than the agent's
   * own: the agent is asked too. None is kept in the node's cache (it would
   * answer getCard and a delegation's check for CARD_CACHE_TTL_MS).
   */
  private fromHolder (card: Card, holder: PeerId): boolean {
    const { init } = this
    init.stats.heldCardsReceived++
    // a card sent by key: the holder names its agent by sending it
    if (init.explain !== undefined && !this.namedBy.has(card.agent_id)) this.namedBy.set(card.agent_id, holder.toString())
    const newest = init.matches(card) ? init.remember(card) : undefined
    // one that does not match, or is older than a card of its agent seen before, is left to the agent
    if (newest === undefined || !init.matches(newest)) {
      init.onChange()
      return false
    }
    const id = card.agent_id
    const by = holder.toString()
    const backed = this.backed(id, by)
    const prev = this.vouched.get(id)
    if (!backed && prev === undefined) init.stats.heldCardsUnbacked++
    // of the cards holders sent of one agent, the highest seq stands
    this.vouched.set(id, { card: prev !== undefined && prev.card.seq > newest.seq ? prev.card : newest, by: (prev?.by ?? new Set<string>()).add(by) })
    if (backed) this.deliverVouched(id)
    else init.onChange()
    return this.delivered.has(id)
  }

  /** Whether an agent a holder (`by`) sent a card of exists by another source's word: the agent itself, a connection this node opened to it, another peer's answer or holder, or this node's own records. */
  private backed (agent: string, by: string): boolean {
    // only a connection this node opened counts: anyone can open one to it under as many ids as it likes
    // an agent whose card is a result already is backed: a newer card of it a holder sends still counts (`deliverVouched`)
    if (agent === by || this.delivered.has(agent) || (this.init.preferred ?? this.init.connected)(peerIdOfAgent(agent))) return true
    const others = (names: Set<string> | undefined): boolean => names !== undefined && [...names].some(n => n !== by)
    return others(this.namers.get(agent)) || others(this.vouched.get(agent)?.by)
  }

  /** `agent` was named by `by` ('' for this node's own records): a card another holder sent of it is now backed. */
  private named (agent: string, by: string): void {
    let names = this.namers.get(agent)
    if (names === undefined) this.namers.set(agent, names = new Set())
    names.add(by)
    const vouched = this.vouched.get(agent)
    if (vouched !== undefined && [...vouched.by].some(h => h !== by)) this.deliverVouched(agent)
  }

  /**
   * A backed holder's card of `agent` is a result, unless one of the agent is
   * already. Either way its seq is recorded (`remember` with `result`): a later
   * discover, whose holders may send an older valid card, never goes back to
   * it, and of two cards holders send one after the other the newer guards the
   * next discover even when the older one was made this one's result. A newer
   * card seen meanwhile is the result instead; a newer one seen and gone
   * leaves the agent to be asked itself.
   */
  private deliverVouched (agent: string): void {
    const vouched = this.vouched.get(agent)
    if (vouched === undefined) return
    this.vouched.delete(agent)
    const card = this.init.remember(vouched.card, true)
    if (card !== undefined && this.init.matches(card)) this.deliver(card, card === vouched.card ? 'holder' : 'cache', false)
    this.init.onChange()
  }

  /**
   * Ask `holder` (the contact the lookup asks first, at the same time) for
   * the cards it holds of the providers of the discover's key. Until it
   * answers, nobody is dialed (it may send every card wanted) and what its
   * DHT answer names waits; then the providers it sent no card of are asked
   * for as usual. A card it sends that does not match is not spent: the
   * lookup did not name it (if it does, the agent is asked itself).
   */
  askKey (holder: PeerId, together = false): void {
    this.askByKey(holder, together)
  }

  /** `askKey`; what waits for its answer (undefined: not asked). */
  private askByKey (holder: PeerId, together: boolean): Deferred[] | undefined {
    const { init } = this
    const id = holder.toString()
    if (init.askKey === undefined || holder.equals(init.self) || this.keyAsked.has(id) || init.stopped.aborted) return undefined
    const deferred: Deferred[] = []
    this.keyAsks.set(id, deferred)
    this.keyAsked.add(id)
    const hold = Math.max(1, init.wanted() - this.ready.length)
    this.expected += hold
    init.stats.heldKeyAsks++
    init.askKey(holder, init.signal, card => {
      // this node's own card is never a result (unless asked for, which discovery adds itself); one cached here
      // is taken from the cache once the lookup names its agent, as without the ask
      if (card.agent_id === init.self.toString() || init.known(peerIdOfAgent(card.agent_id))) return
      this.fromHolder(card, holder)
    }, together, this.keyAnswers.asked(id, () => init.wanted() - this.ready.length))
      .catch((err: unknown) => {
        if (!init.stopped.aborted) init.stats.heldKeyAskFailures++
        init.log.debug({ err: toAapError(err), peer: id }, 'the contact asked by key did not send the cards it holds')
      })
      .finally(() => {
        this.expected -= hold
        this.keyAsks.delete(id)
        this.keyAnswers.answered(id)
        // fewer cards than wanted (it holds few, sent forged ones, its cards wait for backing, or it failed): what
        // this one named waits, before any of it is dialed, for an ask by key still out (asked at the same time,
        // CARD_KEY_ASKS_AT_ONCE) or else for the next contact's, asked now
        const short = !init.stopped.aborted && init.wanted() - this.ready.length > 0
        const next = short ? this.keyAsks.values().next().value ?? this.askNextContact() : undefined
        if (next !== undefined) next.push(...deferred)
        else for (const d of deferred) this.admit(d.named, d.from)
        this.drain()
      })
    return deferred
  }

  /**
   * The connected contacts of the lookup's first round, closest to the key
   * first (DHT_CONNECTED_FIRST_ASKS at most), told as the lookup sends its
   * GET_PROVIDERS to the first: the first CARD_KEY_ASKS_AT_ONCE of them are
   * asked by key at the same time, so each one's cards back the other's.
   * After an ask by key that left cards wanted, with none still out, the
   * next of them not asked yet is asked by key too, so a contact that holds
   * few cards, or a hostile one that sends forged cards, costs one more round
   * trip over a connection already open rather than dials to the agents it
   * named. The contacts asked at once share the discover's pick seed (none
   * of them learns it before the others have it); a later one gets its own.
   */
  contacts (near: readonly PeerId[]): void {
    this.nearContacts = near
    for (const contact of near.slice(0, CARD_KEY_ASKS_AT_ONCE)) this.askKey(contact, true)
  }

  private askNextContact (): Deferred[] | undefined {
    const next = this.nearContacts.find(p => !this.keyAsked.has(p.toString()) && !p.equals(this.init.self))
    if (next === undefined) return undefined
    // not with the seed the first contacts had: one of them may be hostile, and a seed it knows lets it make
    // providers that rank first at the next contact while it holds its own answer back (protocols/card.md)
    const waiting = this.askByKey(next, false)
    if (waiting !== undefined) this.init.stats.heldKeyAsksNext++
    return waiting
  }
}
