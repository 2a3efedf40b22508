/**
 * Card publishing and `agent.discover`.
 *
 * Publishing: the signed card goes to the DHT under /aap-card/<agentId> and the node announces itself as provider
 * of one key per capability id and one per tag (announce.ts). The card is re-signed and put again before it expires;
 * a provider key is announced until its records are out while the card names it, again after ANNOUNCE_REWALK_MS,
 * and kad-dht provides it again before its records expire.
 *
 * Discovery: a provider lookup on the query's key yields peers (kad-dht's, which stops at k providers, then, when
 * the caller wants more, this node's own records and the key's closest peers: src/wire/dht-providers.ts); each
 * peer's card comes from a verified cache, from the peer whose DHT answer named it (it keeps the cards of the
 * providers whose records it holds: held-cards.ts) when another source names the agent too (fetch-order.ts), or
 * from the peer itself over /aap/card/0.1.0, and the DHT record is the fallback when the peer cannot be reached.
 * Nothing unverified is ever returned.
 */
import type { PeerId, PrivateKey } from '@libp2p/interface'
import { CID } from 'multiformats/cid'
import { Key, type Datastore } from 'interface-datastore'
import {
  CARD_FETCH_TIMEOUT_MS, CARD_MAX_FRAME_BYTES, CARD_PROTOCOL, CARD_REPUBLISH_INTERVAL_MS, DHT_GET_TIMEOUT_MS, DISCOVER_MAX_RESULTS, DISCOVER_TIMEOUT_MS
} from '../constants.ts'
import { AapError, AgentNotFoundError, InvalidRequestError, toAapError } from '../errors.ts'
import { agentIdOf, peerIdOfAgent } from '../identity/identity.ts'
import { SignatureCache } from '../identity/signature-cache.ts'
import { componentLogger, type Logger } from '../logger.ts'
import { CardCache } from './card-store.ts'
import { fetchCard } from './card-fetch.ts'
import { askHolder, HeldCards, heldSeed, isGetHeldCardsRequest } from './held-cards.ts'
import { routingTableOf } from './routing-view.ts'
import { Announcer } from './announce.ts'
import { newDiscoveryStats, type DiscoveryStats } from './discovery-stats.ts'
import { DISCOVER_PROVIDERS_PER_PEER_MAX, DISCOVER_TIMEOUT_MAX_MS } from './constants.ts'
import { CardRefreshes } from './card-refresh.ts'
import { untilAborted } from '../util/deadline.ts'
import { schema } from '../schema/validate.ts'
import { readOptional } from '../storage/read.ts'
import { RpcClient, method, serve } from '../wire/rpc.ts'
import { lookupProviders, type ProviderDemand } from '../wire/dht-providers.ts'
import { ownProviderRecords, watchProviderRecords } from '../wire/provider-answers.ts'
import { holdsConnection, holdsOwnConnection } from '../wire/dial.ts'
import type { AskPace } from './ask-pace.ts'
import { CardFetches, type CardOrigin, type CardSource } from './fetch-order.ts'
import type { MeshHost } from '../wire/host.ts'
import { capabilityKey, cardMatches, draftOf, issueCard, providerKeys, tagKey, verifyCard } from './card.ts'
import type { AgentCard, CapabilityQuery, CardDraft } from './card.ts'

export type { DiscoveryStats } from './discovery-stats.ts'
export type { CardOrigin, CardSource } from './fetch-order.ts'

export interface DiscoveryQuery { capability?: CapabilityQuery | null, tags?: string[] | null }

export interface DiscoverOptions {
  signal?: AbortSignal
  /** How long this discover may collect providers (default DISCOVER_TIMEOUT_MS, at most DISCOVER_TIMEOUT_MAX_MS). */
  timeoutMs?: number
  /** Stop after this many cards (default and cap: DISCOVER_MAX_RESULTS). */
  limit?: number
  /** Include this node's own card when it matches (default false). */
  includeSelf?: boolean
  /** Ask every provider for its card again instead of using cached cards or the holders' (still never accepts an older seq). */
  fresh?: boolean
  /** False: do not answer from this node's card cache; the holders and agents are asked (a node that just started). Default true. */
  cache?: boolean
  /**
   * Ask the contact the lookup asks first, at the same time, for the cards it holds of the providers of the query's
   * key (protocols/card.md, get_held_cards by key). Default true; false leaves naming providers to the lookup's
   * answers alone (diagnosis, tests). Never with `fresh`.
   */
  byKey?: boolean
  /** Told where each card made ready came from (a holder, the cache, the agent, the DHT), for diagnosis. */
  explain?: (origin: CardOrigin) => void
  /** Told of the providers the lookup names, in order, and whose DHT answer named them (none: this node's own records). */
  onNamed?: (providers: string[], by: string | undefined) => void
}

function noop (): void {}

const isGetCardRequest = schema<Record<string, never>>('aap:card#/definitions/GetCardRequest')
const isDiscoveryQuery = schema<DiscoveryQuery>('aap:card#/definitions/DiscoveryQuery')
const SELF_CARD_KEY = new Key('/aap/self/card')

export interface DiscoveryInit {
  host: MeshHost
  privateKey: PrivateKey
  datastore: Datastore
  /** Called with every card that failed verification and the reason (for metrics and logs). */ onRejected?: (err: AapError, from: string) => void
  /** The node's logger (this service logs as component `discovery`). */ logger?: Logger
  /** The node's verification cache: a card met again (a holder's, not cached) is not checked with Ed25519 again. */ signatures?: SignatureCache
}

export class Discovery {
  readonly agentId: string
  readonly stats: DiscoveryStats = newDiscoveryStats()
  private readonly host: MeshHost
  private readonly key: PrivateKey
  private readonly datastore: Datastore
  private readonly client: RpcClient
  private readonly cache = new CardCache()
  /** Cached cards that lacked what a caller wanted, fetched again (CARD_MISMATCH_REFRESH_MS). */
  private readonly refreshes = new CardRefreshes()
  private readonly held: HeldCards
  private readonly onRejected?: (err: AapError, from: string) => void
  private own?: AgentCard
  /** The provider keys of the own card (providerKeys), for the card they were made of. */
  private ownKeys?: { card: AgentCard, keys: Set<string> }
  private unserve?: () => Promise<void>
  private republishTimer?: ReturnType<typeof setInterval>
  private republishing?: Promise<void>
  /** Publications run one after the other, so seq numbers never collide. */
  private publishing: Promise<unknown> = Promise.resolve()
  private readonly announcer: Announcer
  private readonly log: Logger
  private readonly signatures: SignatureCache

  constructor (init: DiscoveryInit) {
    this.host = init.host
    this.key = init.privateKey
    this.datastore = init.datastore
    this.agentId = agentIdOf(init.privateKey)
    this.log = componentLogger(init.logger, 'discovery')
    this.signatures = init.signatures ?? new SignatureCache()
    this.client = new RpcClient(init.host, { protocol: CARD_PROTOCOL, maxFrameBytes: CARD_MAX_FRAME_BYTES, log: this.log })
    if (init.onRejected !== undefined) this.onRejected = init.onRejected
    this.announcer = new Announcer({ host: init.host, stats: this.stats, log: this.log, routing: routingTableOf(init.host.services.dht), card: () => this.own })
    this.held = new HeldCards({ pull: async (peer, signal) => this.pullCard(peer, signal), connected: p => holdsConnection(this.host, p), stats: this.stats, log: this.log })
    if (!watchProviderRecords(init.host.services.dht, init.host.peerId, peer => { this.held.onProviderRecord(peer) })) {
      this.log.warn('this kad-dht has no provider store to watch: this node holds no cards for others')
    }
  }

  async start (): Promise<void> {
    // The stored card may have expired while the node was down: what matters
    // is that this key signed it, so its seq (and its draft) carry over.
    const stored = await readOptional(this.datastore, SELF_CARD_KEY)
    if (stored !== undefined) {
      try {
        this.own = await verifyCard(JSON.parse(new TextDecoder().decode(stored)), { ignoreTime: true, expectAgent: this.agentId })
        // its keys are among kad-dht's own records still: the next card withdraws those it no longer names
        await this.announcer.rememberAnnounced(this.own)
        // one near expiry or past it is re-signed now: knownCard (a handoff's to_card) hands the card out as it is
        await this.currentCard()
      } catch (err) {
        this.log.warn({ err: toAapError(err) }, 'the stored card of this node does not verify; starting without a card')
      }
    }
    this.unserve = await serve(this.host, {
      protocol: CARD_PROTOCOL,
      maxFrameBytes: CARD_MAX_FRAME_BYTES,
      log: this.log,
      methods: {
        get_card: method(isGetCardRequest, async () => {
          const card = await this.currentCard()
          if (card === undefined) throw new AgentNotFoundError('this node has not published a card')
          return { card }
        }),
        get_held_cards: method(isGetHeldCardsRequest, async req => ({
          cards: req.agents !== undefined
            ? this.held.answer(req.agents, req.agents.includes(this.agentId) ? await this.currentCard() : undefined)
            : await this.heldOfKey(req.key ?? '', req.seed)
        }))
      }
    })
    this.republishTimer = setInterval(() => { void this.republish() }, CARD_REPUBLISH_INTERVAL_MS)
    this.republishTimer.unref?.()
  }

  async stop (): Promise<void> {
    this.announcer.stop()
    this.held.stop()
    clearInterval(this.republishTimer)
    this.client.close()
    await this.unserve?.()
  }

  /** This node's card, re-signed when it is close to expiry. */
  async currentCard (): Promise<AgentCard | undefined> {
    if (this.own === undefined) return undefined
    if (Date.parse(this.own.expires_at) - Date.now() < CARD_REPUBLISH_INTERVAL_MS) await this.republish()
    return this.own
  }

  /** The last card this node published, as it is (may be undefined before the first publish). */
  get card (): AgentCard | undefined { return this.own }

  /**
   * Sign a new card with a higher seq, store it, and announce it. Resolves once
   * it is stored locally (with `unstored`, also once storing it failed: it is
   * served all the same); `announce()` reports how the DHT side went.
   *
   * The seq is the previous one plus one, and never less than the clock in
   * milliseconds: a node that lost its data directory (and so its last seq)
   * still outranks the cards it published before.
   */
  async publish (draft: CardDraft | (() => CardDraft), opts: { announce?: boolean, /** Serve the card even when storing it fails (a re-signed one, `republish`). */ unstored?: boolean } = {}): Promise<AgentCard> {
    // a publication that failed was reported to its own caller; the next one goes on regardless
    const run = this.publishing.then(noop, noop).then(async () => {
      const now = Date.now()
      const seq = Math.max((this.own?.seq ?? 0) + 1, now)
      const card = await issueCard(this.key, typeof draft === 'function' ? draft() : draft, seq, now)
      try {
        await this.datastore.put(SELF_CARD_KEY, new TextEncoder().encode(JSON.stringify(card)))
      } catch (err) {
        // a new draft the caller hears of; a re-signed card is served all the same, or peers get the expired
        // one: after a restart the stored (older) card's seq + 1 would fall short, but the seq is never below the clock
        if (!opts.unstored) throw err
        this.log.warn({ err: toAapError(err), seq }, 'the re-signed card could not be stored; it is served all the same')
      }
      this.own = card
      // the card is served over the card protocol at once; the DHT side follows
      // now, or when the caller schedules it (`announce: false`, e.g. a simulation
      // that spreads the announcements of many nodes sharing one CPU)
      if (opts.announce !== false) this.announcer.inBackground()
      return card
    })
    this.publishing = run
    return run
  }

  /**
   * Re-sign the card as it is when its turn comes (a publish of a new draft
   * queued before it is not undone); one at a time: every caller that finds
   * the card near expiry meanwhile waits for the same one.
   */
  private async republish (): Promise<void> {
    if (this.own === undefined) return
    this.republishing ??= (async () => {
      try {
        await this.publish(() => draftOf(this.own!), { unstored: true })
      } catch (err) {
        this.log.warn({ err: toAapError(err) }, 'republishing this node\'s card failed; the next interval tries again')
      } finally {
        this.republishing = undefined
      }
    })()
    await this.republishing
  }

  /**
   * Put the card record to the DHT and announce the provider keys not yet announced (announce.ts). Returns how many
   * of the card's provider keys have records at one peer or more (0 when `signal` ends first).
   */
  async announce (signal?: AbortSignal): Promise<number> {
    return this.announcer.announce(signal)
  }

  /** This node is announcing its card, or will walk keys whose records reached too few peers again (announce.ts). */
  get announcing (): boolean { return this.announcer.pending }

  /** `agent.discover`: verified cards matching the query. Empty when none match. */
  async discover (query: DiscoveryQuery, opts: DiscoverOptions = {}): Promise<AgentCard[]> {
    const out: AgentCard[] = []
    for await (const card of this.discoverStream(query, opts)) out.push(card)
    return out
  }

  /** As `discover`, yielding each verified card as soon as it is known. */
  async * discoverStream (query: DiscoveryQuery, opts: DiscoverOptions = {}): AsyncGenerator<AgentCard> {
    isDiscoveryQuery.assert(query, 'discovery query')
    const limit = Math.min(opts.limit ?? DISCOVER_MAX_RESULTS, DISCOVER_MAX_RESULTS)
    if (!(limit >= 1)) return
    if (opts.timeoutMs !== undefined && !(opts.timeoutMs > 0)) throw new InvalidRequestError(`a discover's timeoutMs must be a positive number of ms, not ${opts.timeoutMs}`)
    // aborted when the caller stops reading, so no lookup or fetch goes on after the stream
    const stopped = new AbortController()
    const signal = AbortSignal.any([
      ...(opts.signal === undefined ? [] : [opts.signal]),
      AbortSignal.timeout(Math.min(opts.timeoutMs ?? DISCOVER_TIMEOUT_MS, DISCOVER_TIMEOUT_MAX_MS)),
      stopped.signal
    ])
    let yielded = 0
    // checked before the own card is yielded: an empty query matches every card
    const key = await this.queryKey(query)
    if (key === undefined) throw new InvalidRequestError('a discovery query needs a capability or at least one tag')
    const seed = heldSeed()
    // the lookup never names this node: its card comes from here, if asked for (re-signed when near expiry)
    const own = opts.includeSelf === true ? await this.currentCard() : undefined
    if (own !== undefined && cardMatches(own, query)) {
      yield own
      if (++yielded >= limit) return
    }
    // fetch cards of providers concurrently, yield in arrival order (fetch-order.ts)
    let wake: (() => void) | undefined
    let done = false
    /** The lookup waiting for fetches to prove providers useless (ProviderDemand). */
    let lookupWaits: (() => void) | undefined
    const notify = (): void => {
      wake?.(); wake = undefined
      lookupWaits?.(); lookupWaits = undefined
    }
    const fetches = new CardFetches<AgentCard>({
      self: this.host.peerId,
      wanted: () => limit - yielded,
      matches: card => cardMatches(card, query),
      signal,
      stopped: stopped.signal,
      connected: p => holdsConnection(this.host, p),
      preferred: p => holdsOwnConnection(this.host, p),
      known: p => opts.cache !== false && this.cache.fresh(p.toString()) !== undefined,
      // a cached card that does not match may be older than the card that got the agent named for this key
      fetch: async (p, s, source) => this.getCard(p.toString(), { signal: s, fresh: opts.fresh === true || opts.cache === false, source, hedge: false, wants: card => cardMatches(card, query) }),
      ...(opts.fresh === true
        ? {}
        : {
            ask: async (holder, agents, s, onCard) => askHolder(this.client, holder, { agents }, s, (err, from) => { this.reject(err, from) }, onCard, this.signatures),
            // one seed for the contacts asked at once: those that keep the same records send the same agents' cards (card.md)
            ...(opts.byKey === false ? {} : { askKey: async (holder: PeerId, s: AbortSignal, onCard: (card: AgentCard) => void, together: boolean, pace: AskPace) => askHolder(this.client, holder, { key, seed: together ? seed : heldSeed(), pace }, s, (err, from) => { this.reject(err, from) }, onCard, this.signatures) })
          }),
      // a holder's card is not cached, its agent may not exist (fetch-order.ts fromHolder); a result's seq is kept
      remember: (card, result) => result === true ? this.cache.witness(card) : this.cache.newest(card),
      stats: this.stats,
      log: this.log,
      onChange: notify,
      ...(opts.explain === undefined ? {} : { explain: opts.explain })
    })
    // named providers whose cards could not be had do not count: the lookup goes on past them
    const demand: ProviderDemand = {
      spent: () => fetches.spent,
      least: limit,
      waitedOut: () => {
        this.stats.lookupsWaitedOut++
        // the providers named so far had their time: those still being fetched no longer hold the next ones back
        fetches.writeOff()
      },
      changed: async (s) => new Promise<void>(resolve => {
        const stop = (): void => { resolve() }
        s.addEventListener('abort', stop, { once: true })
        lookupWaits = () => { s.removeEventListener('abort', stop); resolve() }
      })
    }
    void (async () => {
      this.stats.lookups++
      try {
        let swept = false // counted once per discover
        const onConnectedAsk = (hedged: boolean): void => {
          this.stats.connectedAsks++
          if (hedged) this.stats.connectedHedges++
        }
        // the contact asked first holds the key's records most likely: it is asked by key too, and its cards come with its answer
        const onContacts = (near: PeerId[]): void => { fetches.contacts(near) }
        for await (const ev of lookupProviders(this.host.services.dht, this.host.peerId, key, { want: limit * 2, signal, log: this.log, connected: p => holdsOwnConnection(this.host, p), demand, onConnectedAsk, onContacts, perPeerMax: DISCOVER_PROVIDERS_PER_PEER_MAX })) {
          if (ev.name === 'answer') {
            this.stats.lookupAnswers++
            if (ev.connected === true) this.stats.connectedAnswers++
          } else if (ev.name === 'walk') this.stats.lookupWalks++
          else if (ev.name === 'error') this.stats.lookupErrors++
          else if (ev.name === 'over_share') this.stats.providersOverShare += ev.providers
          else if (ev.name === 'also_named') fetches.alsoNamed(ev.providers, ev.from)
          else {
            if (ev.sweep && !swept) this.stats.providerSweeps++
            if (ev.sweep) { this.stats.sweptProviders += ev.providers.length; swept = true }
            this.stats.lookupProviders += ev.providers.length
            opts.onNamed?.(ev.providers.map(p => p.toString()), ev.from?.toString())
            fetches.add(ev.providers, ev.from)
          }
        }
      } catch (err) {
        // the lookup's time is up or no peer answers: what was found is the answer
        this.log.debug({ err }, 'a provider lookup ended early')
      } finally {
        done = true
        notify()
      }
    })()

    try {
      while (true) {
        fetches.drain()
        const card = fetches.ready.shift()
        if (card !== undefined) {
          yield card
          if (++yielded >= limit) return
          continue
        }
        if (done && fetches.idle) return
        await new Promise<void>(resolve => { wake = resolve })
      }
    } finally {
      if (signal.aborted && !stopped.signal.aborted) this.stats.discoversCutShort++
      done = true
      // the lookup and the fetches still going end on this abort; the caller
      // does not wait for the DHT query to wind down (its in-flight requests
      // abort in the background; the lookup above never rejects)
      stopped.abort()
    }
  }

  /**
   * get_held_cards by key: the held cards of providers whose records this
   * node keeps under `key` (a pick of them when it keeps more than an answer
   * names: by the asker's `seed`, or at random; provider-answers.ts).
   */
  private async heldOfKey (key: string, seed?: string): Promise<AgentCard[]> {
    let cid: CID
    try {
      cid = CID.parse(key)
    } catch {
      throw new InvalidRequestError('get_held_cards: key is not a CID', { reason: 'bad_key' })
    }
    const records = ownProviderRecords(this.host.services.dht)
    const own = await this.ownCardUnder(cid)
    if (records === undefined) return own === undefined ? [] : [own]
    this.stats.heldKeyAnswers++
    return this.held.answer((await records(cid, undefined, seed)).map(p => p.toString()), own)
  }

  /** This node's current card when it is announced under `key` (so the asker gets it without asking this agent again). */
  private async ownCardUnder (key: CID): Promise<AgentCard | undefined> {
    const card = await this.currentCard()
    if (card === undefined) return undefined
    if (this.ownKeys?.card !== card) this.ownKeys = { card, keys: new Set((await providerKeys(card)).map(k => k.toString())) }
    return this.ownKeys.keys.has(key.toString()) ? card : undefined
  }

  private async queryKey (query: DiscoveryQuery): Promise<CID | undefined> {
    const cap = query.capability
    // one key per capability id: an exact version is checked on the cards found (cardMatches)
    if (cap !== undefined && cap !== null) return capabilityKey(cap.capability_id)
    const first = query.tags?.[0]
    return first === undefined ? undefined : tagKey(first)
  }

  /**
   * One agent's verified card: cache, then the agent itself, then the DHT
   * when the agent cannot be reached or answers with an error (not when it
   * answers with an invalid card: `reason: invalid_card`), or beside the
   * agent's call once that has gone unanswered CARD_DHT_HEDGE_MS (with
   * `hedge` false, CARD_DHT_FALLBACK_AFTER_MS; card-fetch.ts).
   * AGENT_NOT_FOUND when none of them yields a valid card; its details name
   * why each source failed (`peer_error`, `dht_error`: error codes, and
   * `peer_reason` when the peer's error gave one). A card
   * older (lower seq) than one already verified and unexpired is never
   * returned: the newer one is, so a replayed record cannot roll an agent back;
   * when the newer one left the cache, AGENT_NOT_FOUND (`reason: stale_seq`).
   * An `offered` card (one the caller holds, e.g. a delegator naming a
   * handoff's receiver) is verified like a fetched one and nothing is fetched;
   * one that fails verification is refused with its error; none is kept.
   * A cached card that lacks what `wants` asks of it is fetched again (the
   * agent may have a newer card): one fetch per agent at a time, which callers
   * that come meanwhile wait for, the next CARD_MISMATCH_REFRESH_MS after it
   * ended at the earliest (card-refresh.ts); should it fail, the cached card
   * is the answer.
   */
  async getCard (agentId: string, opts: { signal?: AbortSignal, fresh?: boolean, offered?: unknown, source?: (s: CardSource) => void, hedge?: boolean, wants?: (card: AgentCard) => boolean } = {}): Promise<AgentCard> {
    if (agentId === this.agentId && this.own !== undefined) return await this.currentCard() ?? this.own
    if (opts.offered !== undefined) return this.cache.offered(await verifyCard(opts.offered, { expectAgent: agentId }))
    const peer = peerIdOfAgent(agentId)
    const cached = opts.fresh === true ? undefined : this.cache.fresh(agentId)
    if (cached !== undefined && (opts.wants === undefined || opts.wants(cached) || !this.refreshes.may(agentId))) {
      opts.source?.('cache')
      return cached
    }
    if (cached !== undefined) {
      try {
        // one fetch for every caller; each leaves it on its own signal
        const refreshed = this.refreshes.run(agentId, async () => {
          let source: CardSource = 'agent'
          const card = await this.getCard(agentId, { fresh: true, source: s => { source = s }, ...(opts.hedge === undefined ? {} : { hedge: opts.hedge }) })
          return { card, source }
        }, () => { this.stats.mismatchRefreshes++ })
        // every caller may leave before it ends (or come already aborted): its failure is then only logged here
        refreshed.catch((err: unknown) => { this.log.debug({ err, agent: agentId }, 'fetching a cached card again failed') })
        const got = await untilAborted(refreshed, opts.signal)
        opts.source?.(got.source)
        return got.card
      } catch (err) {
        this.log.debug({ err, agent: agentId }, 'a cached card that lacked what was asked could not be fetched again: the cached one stands')
        opts.source?.('cache')
        return cached
      }
    }
    // its own bound even under a longer caller budget (a delegate's), so the call after it has its time
    const signal = AbortSignal.any([...(opts.signal === undefined ? [] : [opts.signal]), AbortSignal.timeout(CARD_FETCH_TIMEOUT_MS + DHT_GET_TIMEOUT_MS)])
    const deps = { client: this.client, dht: this.host.services.dht, stats: this.stats, reject: (err: AapError, from: string) => { this.reject(err, from) }, signatures: this.signatures }
    return this.cache.remember(await fetchCard(deps, agentId, peer, {
      signal,
      ...(opts.hedge === undefined ? {} : { hedge: opts.hedge }),
      ...(opts.source === undefined ? {} : { source: opts.source })
    }))
  }

  /** A verified card of the agent this node holds now (its own, or a fresh cached one), without asking anyone. */
  knownCard (agentId: string): AgentCard | undefined { return agentId === this.agentId ? this.own : this.cache.fresh(agentId) }

  /** An agent's own card, verified, for the cards this node holds for others (held-cards.ts; not this node's own cache). */
  private async pullCard (peer: PeerId, signal: AbortSignal): Promise<AgentCard> {
    const answer = await this.client.call(peer, 'get_card', {}, { signal, callTimeoutMs: CARD_FETCH_TIMEOUT_MS, responseTimeoutMs: CARD_FETCH_TIMEOUT_MS })
    try {
      return await verifyCard(answer.card, { expectAgent: peer.toString(), signatures: this.signatures })
    } catch (err) {
      this.stats.heldCardPullsInvalid++
      this.reject(toAapError(err), peer.toString())
      throw err
    }
  }

  private reject (err: AapError, from: string): void {
    this.stats.rejectedCards++
    this.onRejected?.(err, from)
  }
}
