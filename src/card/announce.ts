/**
 * Announcing this node's card: its DHT record, and one provider record per
 * capability id and tag at the key's closest peers.
 *
 * kad-dht's `provide` walks to the key's closest peers and only then sends
 * each of them an ADD_PROVIDER, all within the caller's one signal. On a busy
 * node the walk can use up that time, and the records then go to few peers or
 * none, although peers answered the walk; src/wire/dht-provide.ts bounds the
 * walk on its own so the records go out. A key counts as announced only by
 * the records actually sent (ADD_PROVIDER), and a key whose records
 * reached fewer than ANNOUNCE_MIN_PROVIDER_RECORDS peers (or half of kad-dht's
 * k, if smaller; or fewer than the routing table holds, in a small mesh) is
 * walked again, at most
 * ANNOUNCE_MAX_RETRIES times per card: after about ANNOUNCE_RETRY_MS, then
 * twice that, each wait drawn from half to all of it, so nodes that announced
 * together under load do not walk again together (a busy mesh walks short,
 * and unbounded retries only made it busier). A key whose records went out
 * stays announced for ANNOUNCE_REWALK_MS: a republished card with the same
 * keys costs one walk (its DHT record), not one per key. After that the
 * next publication walks it again: the peers that took its records may have
 * left, and kad-dht provides it again only hours later (its reprovide
 * threshold), so the key's new closest peers would not name the node until
 * then. A key still short after its retries is walked again when the card is
 * next published.
 *
 * A card whose draft differs from the one last walked (a capability added,
 * dropped or moved to another version, a tag, the name or description) walks
 * every key it names once, settled or not: the peers near each key hold the
 * agent's whole card (held-cards.ts) and hand it out for any query, and only a
 * provider record makes them pull the new one before the held card is due
 * (CARD_REPUBLISH_INTERVAL_MS). Skipped, a key still named kept handing out
 * a card for a version or tag the agent had dropped (cap:x@1 and cap:x@2
 * share one key). A card re-signed from the same draft walks none of them.
 * Such a walk, and a dropped key's last one, also sends the record to the
 * peers that took the key's earlier records (key-holders.ts): they hold the
 * card too, and a walk that no longer finds them closest (a peer that joined
 * nearer the key, a request lost on a busy node) left them handing out the
 * older one. Only the walk's own peers count toward a key's `enough`.
 */
import type { CID } from 'multiformats/cid'
import { MessageType } from '@libp2p/kad-dht'
import { ANNOUNCE_MAX_RETRIES, ANNOUNCE_MIN_PROVIDER_RECORDS, ANNOUNCE_RETRY_MS, DHT_K, DHT_PUT_TIMEOUT_MS } from '../constants.ts'
import { ANNOUNCE_REWALK_MS } from './constants.ts'
import { KeyHolders } from './key-holders.ts'
import { toAapError } from '../errors.ts'
import type { Logger } from '../logger.ts'
import type { MeshHost } from '../wire/host.ts'
import { capabilityString, cardRecordKey, encodeCardRecord, providerKeys, type AgentCard } from './card.ts'
import type { DiscoveryStats } from './discovery-stats.ts'
import { firstRoutingPeer, type RoutingTableView } from './routing-view.ts'
import { provideKey } from '../wire/dht-provide.ts'
import { kadInternals } from '../wire/kad-internals.ts'

function noop (): void {}

/** What a card says, whatever its seq, signature and times, in one order: equal for a card re-signed from the same draft. */
function draftDigest (card: AgentCard): string {
  return JSON.stringify([card.name, card.description, card.capabilities.map(capabilityString).sort(), [...card.tags].sort()])
}

export interface AnnouncerInit {
  host: MeshHost
  stats: DiscoveryStats
  log: Logger
  routing: RoutingTableView | undefined
  /** The card to announce now (undefined before the first publish). */
  card: () => AgentCard | undefined
  /** The first wait before a short key is walked again (default ANNOUNCE_RETRY_MS). */
  retryMs?: number
  /** How long a key whose records went out counts as announced (default ANNOUNCE_REWALK_MS). */
  rewalkMs?: number
}

/**
 * A provider key this node started to announce, the records sent so far, when they last reached enough (`settledAt`),
 * who holds one, and whether the card dropped it and its last walk has not yet ended in time (`withdrawing`).
 */
interface Provided { cid: CID, records: number, settled: boolean, settledAt: number, holders: KeyHolders, withdrawing?: boolean }

export class Announcer {
  private readonly init: AnnouncerInit
  /** The announcement in progress and the seq of the card it carries. */
  private announcing?: { seq: number, done: Promise<number> }
  /** Provider keys by key text: kad-dht keeps each among its own (and provides it again) until it is withdrawn. */
  private readonly provided = new Map<string, Provided>()
  /** The current card has not reached any peer yet: announce it when the first one arrives. */
  private unannounced = false
  private retryTimer: ReturnType<typeof setTimeout> | undefined
  /** draftDigest of the card whose keys were last walked: a card that says something else walks all its keys once. */
  private walkedDraft: string | undefined
  /** Retries made for the card of this seq (none after ANNOUNCE_MAX_RETRIES). */
  private retries = { seq: -1, made: 0 }
  /** Aborted by stop(): ends announcements still waiting on the DHT. */
  private readonly stopping = new AbortController()
  private readonly onRoutingPeer = (): void => {
    if (this.unannounced && this.init.card() !== undefined) this.inBackground()
  }

  constructor (init: AnnouncerInit) {
    this.init = init
    init.routing?.addEventListener('peer:add', this.onRoutingPeer)
  }

  /** An announcement is running, or a walk of short keys is scheduled (scheduleRetry). */
  get pending (): boolean {
    return this.announcing !== undefined || this.retryTimer !== undefined
  }

  stop (): void {
    this.stopping.abort()
    clearTimeout(this.retryTimer)
    this.init.routing?.removeEventListener('peer:add', this.onRoutingPeer)
  }

  /** Announce the current card without waiting; the outcome is counted and logged. */
  inBackground (): void {
    this.announce().then((reached) => {
      if (reached === 0) this.init.log.debug('the card announcement reached no peer yet')
    }, (err: unknown) => {
      this.init.stats.failedAnnouncements++
      this.init.log.warn({ err: toAapError(err) }, 'announcing this node\'s card failed')
    })
  }

  /**
   * Put the card record to the DHT and announce the provider keys not yet
   * announced. Returns how many of the card's provider keys have records at
   * one peer or more, by this call or an earlier one (0 when `signal` ends
   * first). Concurrent calls for the same card share one run; a card published
   * while an older one is being announced is announced right after it, never
   * skipped.
   */
  async announce (signal?: AbortSignal): Promise<number> {
    const seq = this.init.card()?.seq
    if (seq === undefined) return 0
    let entry = this.announcing
    if (entry === undefined || entry.seq !== seq) {
      // the announcement before this one ends first, however it ends (its callers heard how)
      const previous = entry?.done.then(noop, noop) ?? Promise.resolve()
      const next = { seq, done: previous.then(async () => this.run(signal)) }
      const forget = (): void => { if (this.announcing === next) this.announcing = undefined }
      next.done.then(forget, forget)
      this.announcing = next
      entry = next
    }
    if (signal === undefined) return entry.done
    // a caller that joins a run already going still gets its answer within its own signal
    let onAbort: (() => void) | undefined
    const ended = new Promise<number>(resolve => {
      onAbort = () => { resolve(0) }
      if (signal.aborted) resolve(0)
      else signal.addEventListener('abort', onAbort, { once: true })
    })
    try {
      return await Promise.race([entry.done, ended])
    } finally {
      if (onAbort !== undefined) signal.removeEventListener('abort', onAbort)
    }
  }

  private async run (signal?: AbortSignal): Promise<number> {
    const card = this.init.card()
    if (card === undefined) return 0
    const { host, stats, routing, log } = this.init
    const sig = AbortSignal.any([signal ?? AbortSignal.timeout(DHT_PUT_TIMEOUT_MS), this.stopping.signal])
    // With an empty routing table a DHT put or provide reaches nobody and only
    // ends when its signal does: wait for the first peer instead. If none comes
    // in time, the first one to come later triggers the announcement.
    if (routing !== undefined && routing.size === 0) {
      this.unannounced = true
      if (!await firstRoutingPeer(routing, sig)) return 0
    }
    const dht = host.services.dht
    const put = (async () => {
      // the replicas: the peers sent the record, and those that answered the put's walk (kad-dht puts the record at the
      // closest that answered; one whose stream for it could not be opened fails before any PUT_VALUE is sent). The
      // walk's own errors come from peers that did not answer it, and are not theirs
      const replicas = new Set<string>()
      for await (const ev of dht.put(cardRecordKey(card.agent_id), encodeCardRecord(card), { signal: sig })) {
        if (ev.name === 'SEND_QUERY' && ev.messageType === MessageType.PUT_VALUE) replicas.add(ev.to.toString())
        if (ev.name === 'PEER_RESPONSE') replicas.add(ev.from.toString())
        if (ev.name !== 'QUERY_ERROR' || !replicas.has(ev.from.toString())) continue
        // a replica that refused the record (its store full, say) or failed: the others still hold it
        stats.cardPutsRefused++
        log.debug({ err: ev.error, peer: ev.from.toString() }, 'a replica did not take the card record')
      }
    })().catch((err: unknown) => {
      // the provider records below still say who serves what; the card comes from the peer itself
      log.debug({ err }, 'putting the card record to the DHT failed')
    })
    const keys = new Map((await providerKeys(card)).map(k => [k.toString(), k]))
    // the dropped keys' last walks go alongside the named keys' walks: a slow one (holders that left, a send running
    // to its timeout) used up the run's time first, and the new keys went unannounced in the run and its retries
    const withdrawn = this.withdrawKeysNotIn(keys, sig).catch((err: unknown) => {
      log.warn({ err: toAapError(err) }, 'withdrawing the provider keys the card no longer names failed; the next announcement tries again')
    })
    // enough records for a key: half the peers kad-dht places a record at (a lookup walking to the key meets one of them),
    // where the mesh has that many peers (a small mesh has fewer)
    const k = kadInternals(dht)?.k ?? DHT_K
    const enough = Math.max(1, Math.min(ANNOUNCE_MIN_PROVIDER_RECORDS, Math.ceil(k / 2), routing?.size ?? ANNOUNCE_MIN_PROVIDER_RECORDS))
    // a card that says something new: the holders near every key it names pull it on the record (held-cards.ts)
    const draft = draftDigest(card)
    const changed = draft !== this.walkedDraft
    this.walkedDraft = draft
    const results = await Promise.allSettled([...keys].filter(([text]) => changed || !this.announced(text)).map(async ([text, cid]) => {
      stats.providerWalks++
      // kad-dht keeps the key among its own from here, whether or not a peer hears of it
      const entry = this.provided.get(text) ?? { cid, records: 0, settled: false, settledAt: 0, holders: new KeyHolders() }
      this.provided.set(text, entry)
      // each holder is owed the new card's record until a send to it succeeds (key-holders.ts)
      if (changed) entry.holders.owe()
      entry.withdrawing = undefined
      let sent = 0
      let alsoSent = 0
      try {
        const outcome = await provideKey(dht, host.peerId, host.getMultiaddrs(), cid, sig, { also: entry.holders.owed() })
        // `reached` lists the walk's peers first: they are named last here, as the newest holders
        entry.holders.took([...outcome.reached.slice(outcome.sent), ...outcome.reached.slice(0, outcome.sent)])
        if (!sig.aborted) entry.holders.missed(outcome.missed)
        sent = outcome.sent
        alsoSent = outcome.alsoSent
        stats.providerRecordsFailed += outcome.failed + outcome.alsoFailed
        if (!outcome.walked) stats.providerWalksCut++
        if (outcome.converged) stats.providerWalksConverged++
      } finally {
        stats.providerRecordsSent += sent + alsoSent
        entry.records += sent + alsoSent
        // the earlier holders may be far from the key now: only the walk's peers say a lookup will meet the record;
        // a holder still owed the new card keeps the key short, so its retry sends the record again
        entry.settled = sent >= enough && entry.holders.owed().length === 0
        if (entry.settled) entry.settledAt = Date.now()
        if (sent < enough) stats.shortProviderWalks++
      }
    }))
    for (const r of results) {
      if (r.status === 'rejected') log.debug({ err: r.reason }, 'announcing a provider key failed; it is tried again')
    }
    await withdrawn
    await put
    const reached = [...keys.keys()].filter(text => (this.provided.get(text)?.records ?? 0) > 0).length
    // waiting for a first peer is for a node alone; a node with peers whose records did not go out retries (below)
    if (this.init.card() === card) this.unannounced = false
    if (reached > 0) stats.announcements++
    this.scheduleRetry(card.seq, [...keys.keys()].some(text => this.provided.get(text)?.settled !== true))
    return reached
  }

  /** The key's records reached enough peers, less than ANNOUNCE_REWALK_MS ago: it is not walked now. */
  private announced (text: string): boolean {
    const entry = this.provided.get(text)
    return entry !== undefined && entry.settled && Date.now() - entry.settledAt < (this.init.rewalkMs ?? ANNOUNCE_REWALK_MS)
  }

  /** Walk the keys whose records reached too few peers again later, a bounded number of times per card. */
  private scheduleRetry (seq: number, short: boolean): void {
    clearTimeout(this.retryTimer)
    this.retryTimer = undefined
    if (this.retries.seq !== seq) this.retries = { seq, made: 0 }
    if (!short || this.stopping.signal.aborted || this.retries.made >= ANNOUNCE_MAX_RETRIES) return
    const base = (this.init.retryMs ?? ANNOUNCE_RETRY_MS) * 2 ** this.retries.made
    this.retries.made++
    this.retryTimer = setTimeout(() => {
      this.retryTimer = undefined
      this.init.stats.announceRetries++
      this.inBackground()
    }, base / 2 + Math.random() * base / 2)
    this.retryTimer.unref?.()
  }

  /**
   * The keys of the card this node announced before it last stopped (its
   * stored card): kad-dht keeps its provider records in the datastore and
   * provides them again after a restart, so a key the next card no longer
   * names is withdrawn as one dropped while running is. Walked again at the
   * next announcement (none is settled yet in this run).
   */
  async rememberAnnounced (card: AgentCard): Promise<void> {
    for (const cid of await providerKeys(card)) {
      const text = cid.toString()
      if (!this.provided.has(text)) this.provided.set(text, { cid, records: 0, settled: false, settledAt: 0, holders: new KeyHolders() })
    }
  }

  /**
   * Stop providing the keys the new card no longer names. Each is walked once more, its record sent to the
   * key's earlier holders too: the peers near it that hold this agent's card (held-cards.ts) pull the new card on
   * that record, so they stop handing out the old one, which still names the key, for a capability the agent now
   * refuses. A last walk cut by the announcement's end keeps the key, and the holders it did not reach, for the
   * next announcement's try; one that ended in time withdraws it (a holder whose send failed then keeps the older
   * card until it is due).
   */
  private async withdrawKeysNotIn (keys: Map<string, CID>, signal: AbortSignal): Promise<void> {
    const { host } = this.init
    for (const [text, entry] of this.provided) {
      if (keys.has(text)) continue
      const { cid, holders } = entry
      if (entry.withdrawing !== true) holders.owe()
      entry.withdrawing = true
      try {
        const outcome = await provideKey(host.services.dht, host.peerId, host.getMultiaddrs(), cid, signal, { also: holders.owed() })
        holders.took(outcome.reached)
        this.init.stats.providerRecordsSent += outcome.sent + outcome.alsoSent
        this.init.stats.providerRecordsFailed += outcome.failed + outcome.alsoFailed
      } catch (err) {
        this.init.log.debug({ err, key: text }, 'the last walk of a provider key the card no longer names was cut; the next announcement tries it again')
      }
      if (signal.aborted) continue
      this.provided.delete(text)
      this.init.stats.withdrawnKeys++
      // the records peers already hold expire by themselves (DHT_PROVIDER_VALIDITY_MS)
      await host.services.dht.cancelReprovide(cid).catch((err: unknown) => {
        this.init.log.warn({ err, key: text }, 'a provider key the card no longer names could not be withdrawn')
      })
    }
  }
}
