/**
 * A provider lookup that dials nobody when the contacts it is connected to
 * can answer, and that can name more than k providers.
 *
 * kad-dht's walk starts from the k contacts of its routing table closest to
 * the key, nearest first, and dials each one it holds no connection to. A
 * node keeps connections to a bounded few (CONNECTIONS_MAX), so in a mesh
 * larger than that bound most walks dialed: a TCP connection, a Noise
 * handshake, identify both ways, on both nodes, and often a pruned
 * connection in exchange. The holders of a key's provider records are its
 * closest peers, and each names up to DHT_PROVIDERS_PER_ANSWER providers; so
 * the lookup first asks the connected ones among those k contacts,
 * DHT_CONNECTED_FIRST_ASKS at most, all at once. The walk runs only when
 * their answers name fewer providers than the caller wants. Discovery counts
 * only connections this node opened itself (`connected`): any peer can
 * connect to a node, and a contact asked first whose answer names enough
 * providers ends the lookup, so a hostile peer that connected to everyone
 * would otherwise answer every lookup with providers of its choosing
 * (session 30: 7 of 40 discovers at rest found nothing at 100 nodes).
 *
 * kad-dht's findProviders ends once it has named k providers (its bucket
 * size), however many hold the key, and each answer names at most
 * DHT_PROVIDERS_PER_ANSWER of them (provider-answers.ts). So a capability that
 * more than k agents offer was discovered as k of them, whatever limit the
 * caller gave: a router that compares agents saw a fixed few.
 *
 * After that round this lookup runs kad-dht's own. When the caller wants more, it reads
 * this node's own provider records for the key (kad-dht hands out at most k
 * of them, and none whose peer is missing from the peer store; this read
 * names those too: the card fetch finds them through the DHT). When kad-dht's
 * walk named k or more, it goes on with a sweep: the k peers closest to the
 * key (kad-dht's getClosestPeers: the holders of its provider records), each
 * asked with a GET_PROVIDERS of its own, DHT_PROVIDER_SWEEP_CONCURRENCY at a
 * time, until the caller has enough, every holder has answered, or a batch of
 * answers that each named all their holder holds named nobody new. Each
 * holder names its own pick of what it holds, so their answers together cover
 * more than any one of them; and a holder whose answer was a full pick
 * (DHT_PROVIDERS_PER_ANSWER: it may hold more) names a fresh pick each time
 * it is asked, so those are asked again (while they have share left, below),
 * round after round until a round names nobody new,
 * DHT_PROVIDER_SWEEP_ROUNDS rounds in all at most. (With 60 agents under one
 * key at 100 nodes, k 10, one round left 128 of 200 whole cold discovers 1 to
 * 6 agents short: ten answers of 20 picked from 60 rarely cover all 60. With
 * the rounds, 1 to 5 of 200 were 1 or 2 short, in four runs.)
 *
 * One peer names at most `perPeerMax` providers to one lookup, all its answers
 * together (this node's own records are not capped). A provider past that
 * share is dropped, counted (`over_share`) and not taken as named: another
 * peer's answer can still name it. The walk's providers are read from each
 * answer, not from kad-dht's PROVIDER events, which leave out every provider
 * kad-dht met before, the dropped ones too. (Before session 39 a dropped
 * provider counted as named, so a peer could hide providers by naming them
 * past its share; and at 100 nodes with 24 agents under one key, a holder
 * asked by the connected round and again by kad-dht's walk named the 4 it had
 * left out the first time past its share of 20, which no other answer could
 * then name: 13 of 1000 whole cold discovers in bench-discover missed 1 to 4
 * agents.)
 *
 * It reads kad-dht members its KadDHT interface does not declare (k, network,
 * providers). Their shape is checked: without them the lookup is kad-dht's
 * alone, and the log says so once.
 */
import type { PeerId } from '@libp2p/interface'
import { MessageType, type KadDHT } from '@libp2p/kad-dht'
import { createHash } from 'node:crypto'
import type { CID } from 'multiformats/cid'
import { DHT_PROVIDER_SWEEP_CONCURRENCY, DHT_PROVIDERS_PER_ANSWER } from '../constants.ts'
import { reasonOf } from '../errors.ts'
import { ownProviderRecords } from './provider-answers.ts'
import { kadInternals, kadRoutingTable, NO_PATH, type KadInternals, type KadRoutingTable } from './kad-internals.ts'
import { DHT_CONNECTED_FIRST_ASKS, DHT_CONNECTED_HEDGE_MS, DHT_CONNECTED_ROUND_MS, DHT_LOOKUP_PATIENCE_MS, DHT_PROVIDER_SWEEP_ROUNDS } from './network-constants.ts'
import type { Logger } from '../logger.ts'

/** What a provider lookup reports, in order: answers, failed requests and new providers. */
export type ProviderLookupEvent =
  /** `connected`: from the connected round, before any walk. */
  | { name: 'answer', from: PeerId, connected?: true }
  /** kad-dht's walk starts: the connected round did not name enough providers. */
  | { name: 'walk' }
  | { name: 'error', from: PeerId, reason: string }
  /** `from`: the peer whose answer named them (none for this node's own records). */
  | { name: 'providers', providers: PeerId[], sweep: boolean, from?: PeerId }
  /** `providers` new ones that `from`'s answer named past its share (`perPeerMax`): dropped, not named. */
  | { name: 'over_share', from: PeerId, providers: number }
  /**
   * Providers named before (by another peer, or this node's own records) that `from`'s answer names too (none:
   * this node's own records), each once per namer: not new, so they count toward neither the providers found nor
   * `from`'s share, but the caller learns that one more source names them (a provider a hostile peer named last
   * behind its own picks is not kept there by the honest peers that name it first: protocols/card.md).
   */
  | { name: 'also_named', providers: PeerId[], from?: PeerId }

/**
 * What the caller made of the providers named so far. A provider named is
 * not a card found: its fetch may fail, or its card may not match. With a
 * demand the lookup counts only providers not `spent`, so providers that
 * serve nothing useful (a hostile holder's pick, agents gone) do not end it:
 * once it named `want`, it waits on `changed` instead of ending, and goes on
 * when fewer than `least` of them may still give a card.
 */
export interface ProviderDemand {
  /** Providers named so far that proved useless: no card could be had, or it did not match. */
  spent: () => number
  /** Once `want` are named, the lookup goes on only when fewer than this many are not spent (the caller's limit). */
  least: number
  /** Resolves once `spent` may have grown, or `signal` ends. */
  changed: (signal: AbortSignal) => Promise<void>
  /** How long one wait lasts at most (default DHT_LOOKUP_PATIENCE_MS). */
  patienceMs?: number
  /** Told when a wait ran out with providers still live: the lookup names more all the same. */
  waitedOut?: () => void
}

let warnedNoSweep = false

/** One GET_PROVIDERS to `peer`, outside kad-dht's walk (in the connected round or the sweep): its answer, or why it failed. */
async function askProviders (parts: KadInternals, peer: PeerId, key: CID, signal: AbortSignal, connected: boolean): Promise<ProviderLookupEvent[]> {
  const out: ProviderLookupEvent[] = []
  try {
    for await (const ev of parts.network.sendRequest(peer, { type: MessageType.GET_PROVIDERS, key: key.multihash.bytes }, { signal, path: NO_PATH })) {
      if (ev.name === 'PEER_RESPONSE') {
        out.push(connected ? { name: 'answer', from: peer, connected } : { name: 'answer', from: peer })
        out.push({ name: 'providers', providers: ev.providers.map(p => p.id), sweep: !connected, from: peer })
      } else if (ev.name === 'QUERY_ERROR') {
        out.push({ name: 'error', from: peer, reason: reasonOf(ev.error) })
      }
    }
  } catch (err) {
    out.push({ name: 'error', from: peer, reason: reasonOf(err) })
  }
  return out
}

/**
 * The connected round: of the routing table's k contacts closest to `key`
 * (those kad-dht's walk starts from), the ones this node holds a connection
 * to, DHT_CONNECTED_FIRST_ASKS at most: the closest first, then the next
 * when no answer has come DHT_CONNECTED_HEDGE_MS after the last ask, and all
 * the rest once the caller wants more than the answers so far named (it
 * resumes this generator; a caller whose providers proved useless comes back
 * after DHT_LOOKUP_PATIENCE_MS at most). Each answer is handed on as it
 * arrives. Whatever the caller stops at, the requests still out end; so does
 * each one DHT_CONNECTED_ROUND_MS after it was sent (an `error`).
 *
 * Asking all of them at once (before session 35) cost two answers in three
 * for nothing at rest: the first named enough providers, and the others were
 * read, parsed and their peers handled all the same (2.4 to 2.9
 * GET_PROVIDERS per discover, the largest part of a discover's CPU).
 */
async function * connectedAnswers (parts: KadInternals, table: KadRoutingTable, self: PeerId, key: CID, connected: (peer: PeerId) => boolean, signal: AbortSignal, onAsk?: (hedged: boolean) => void, onContacts?: (near: PeerId[]) => void): AsyncGenerator<ProviderLookupEvent[]> {
  const kadId = createHash('sha256').update(key.multihash.bytes).digest()
  const near = table.closestPeers(kadId, { count: parts.k }).filter(p => !p.equals(self) && connected(p)).slice(0, DHT_CONNECTED_FIRST_ASKS)
  if (near.length === 0) return
  onContacts?.([...near])
  const done = new AbortController()
  const pending = new Map<number, Promise<readonly [number, ProviderLookupEvent[]]>>()
  let asked = 0
  const askNext = (hedged: boolean): void => {
    onAsk?.(hedged)
    const i = asked++
    // a contact that does not answer holds the lookup up for DHT_CONNECTED_ROUND_MS at most: then the walk goes on.
    // Each ask has its own clock: the caller may wait between answers (for the providers named to prove useless)
    // as long as that, and the contacts not yet asked must still be asked when it comes back for more
    const asking = AbortSignal.any([signal, done.signal, AbortSignal.timeout(DHT_CONNECTED_ROUND_MS)])
    pending.set(i, askProviders(parts, near[i] as PeerId, key, asking, true).then(evs => [i, evs] as const))
  }
  askNext(false)
  let hedge: ReturnType<typeof setTimeout> | undefined
  try {
    while (pending.size > 0) {
      const hedged = asked < near.length && !signal.aborted
        ? new Promise<'hedge'>((resolve) => { hedge = setTimeout(() => { resolve('hedge') }, DHT_CONNECTED_HEDGE_MS) })
        : undefined
      const racing: Array<Promise<readonly [number, ProviderLookupEvent[]] | 'hedge'>> = [...pending.values()]
      if (hedged !== undefined) racing.push(hedged)
      const first = await Promise.race(racing)
      clearTimeout(hedge)
      if (first === 'hedge') {
        if (!signal.aborted) askNext(true)
        continue
      }
      const [i, evs] = first
      pending.delete(i)
      yield evs
      // resumed: the caller wants more than the answers so far named (or they proved useless): every contact
      // left is asked now, as the round once asked them all at its start
      while (asked < near.length && !signal.aborted) askNext(false)
    }
  } finally {
    clearTimeout(hedge)
    done.abort()
  }
}

/**
 * Providers of `key`: first from the closest contacts this node holds a
 * connection to (`connected`), which cost no dial; then, while fewer than
 * `want`, as kad-dht's walk names them; then this node's own records, and
 * (when kad-dht named k or more) those of the key's closest peers. Never names
 * this node or a provider twice (a provider named before that another peer
 * names too is told as `also_named`, once per namer); ends at `want` providers (with a `demand`:
 * `want` not yet spent), when the sweep is done, or on `signal`. The
 * connected contacts, closest to the key first, go to `onContacts` just
 * before the first is asked.
 */
export async function * lookupProviders (dht: KadDHT, self: PeerId, key: CID, opts: { want: number, signal: AbortSignal, log: Logger, connected?: (peer: PeerId) => boolean, demand?: ProviderDemand, onConnectedAsk?: (hedged: boolean) => void, onContacts?: (near: PeerId[]) => void, perPeerMax?: number }): AsyncGenerator<ProviderLookupEvent> {
  const seen = new Set<string>([self.toString()])
  /** Providers each peer named so far (its share: `perPeerMax`). */
  const shares = new Map<string, number>()
  /** Each namer and provider it named, as `namer provider` ('' for this node's own records): an also-named provider is told once per namer. */
  const namings = new Set<string>()
  const asked = new Set<string>([self.toString()])
  /** Peers whose last answer named as many providers as an answer holds (DHT_PROVIDERS_PER_ANSWER): they may hold more. */
  const full = new Set<string>()
  const heard = (from: PeerId, providers: number): void => {
    if (providers >= DHT_PROVIDERS_PER_ANSWER) full.add(from.toString())
    else full.delete(from.toString())
  }
  let found = 0
  const { demand } = opts
  /** Providers named that may still give the caller a card. */
  const live = (): number => found - (demand?.spent() ?? 0)
  const patienceMs = demand?.patienceMs ?? DHT_LOOKUP_PATIENCE_MS
  /** How many were live when a wait last ran out (-1: none did). */
  let liveAtWaitOut = -1
  /**
   * Name more? While fewer than `want` are live. With a demand, once `want`
   * are: it waits until fewer than `demand.least` are (the rest proved
   * useless), or DHT_LOOKUP_PATIENCE_MS at most: providers that never answer
   * are proved useless only when their dials run out of time, a few at a
   * time, and one peer can name many of them. After a wait ran out it waits
   * again only once more live providers were named.
   */
  const goOn = async (): Promise<boolean> => {
    if (opts.signal.aborted) return false
    if (live() < opts.want) return true
    if (demand === undefined) return false
    // a wait ran out and no provider that may still give a card was named since: nothing new to wait for
    if (live() < demand.least || live() <= liveAtWaitOut) return true
    const waiting = AbortSignal.any([opts.signal, AbortSignal.timeout(patienceMs)])
    while (live() >= demand.least && !waiting.aborted) await demand.changed(waiting)
    if (live() >= demand.least && !opts.signal.aborted) {
      liveAtWaitOut = live()
      demand.waitedOut?.()
    }
    return !opts.signal.aborted
  }
  /** The providers of `list` not named before, within `from`'s share (none: this node's own records), how many were past it, and those named before by others (`also_named`). */
  const fresh = (list: Iterable<PeerId>, from: PeerId | undefined): { news: PeerId[], dropped: number, again: PeerId[] } => {
    const news: PeerId[] = []
    const again: PeerId[] = []
    const peer = from === undefined || from.equals(self) ? undefined : from.toString()
    let named = peer === undefined ? 0 : shares.get(peer) ?? 0
    let dropped = 0
    for (const p of list) {
      const id = p.toString()
      const naming = `${peer ?? ''} ${id}`
      if (seen.has(id)) {
        // named before: not new, whatever this peer's share, but one more source names it (never this node itself)
        if (!namings.has(naming) && id !== self.toString()) again.push(p)
        namings.add(naming)
        continue
      }
      // past the peer's share: not named, so the next peer that names it is heard
      if (peer !== undefined && opts.perPeerMax !== undefined && named >= opts.perPeerMax) {
        dropped++
        continue
      }
      seen.add(id)
      namings.add(naming)
      news.push(p)
      named++
    }
    if (peer !== undefined) shares.set(peer, named)
    found += news.length
    return { news, dropped, again }
  }
  /** The events that name `list` as `from`'s answer: its providers not named before, those past its share, and those others named before; how many were new. */
  function * naming (list: PeerId[], from: PeerId | undefined, sweep: boolean): Generator<ProviderLookupEvent, number> {
    const { news, dropped, again } = fresh(list, from)
    const namer = from === undefined || from.equals(self) ? {} : { from }
    if (dropped > 0 && from !== undefined) yield { name: 'over_share', from, providers: dropped }
    // those another peer named too first: their fetches rank ahead of this answer's new picks (provider-queue.ts), so
    // a provider two peers name does not wait behind picks only one of them vouches for
    if (again.length > 0) yield { name: 'also_named', providers: again, ...namer }
    if (news.length > 0) yield { name: 'providers', providers: news, sweep, ...(from === undefined ? {} : { from }) }
    return news.length
  }
  /** The answers of requests outside the walk, handed on with only providers not named before; how many were new. */
  function * handOn (evs: ProviderLookupEvent[]): Generator<ProviderLookupEvent, number> {
    let added = 0
    for (const ev of evs) {
      if (ev.name === 'answer') asked.add(ev.from.toString())
      if (ev.name !== 'providers') {
        yield ev
        continue
      }
      if (ev.from !== undefined) heard(ev.from, ev.providers.length)
      added += yield * naming(ev.providers, ev.from, ev.sweep)
    }
    return added
  }
  const parts = kadInternals(dht)

  const table = kadRoutingTable(dht)
  if (parts !== undefined && table !== undefined && opts.connected !== undefined) {
    for await (const evs of connectedAnswers(parts, table, self, key, opts.connected, opts.signal, opts.onConnectedAsk, opts.onContacts)) {
      yield * handOn(evs)
      if (!(await goOn())) return
    }
  }

  let named = 0
  yield { name: 'walk' }
  for await (const ev of dht.findProviders(key, { signal: opts.signal })) {
    if (ev.name === 'PEER_RESPONSE') {
      asked.add(ev.from.toString())
      heard(ev.from, ev.providers.length)
      yield { name: 'answer', from: ev.from }
      // the answer's own providers: kad-dht's PROVIDER events leave out those it met in an earlier answer
      if ((yield * naming(ev.providers.map(p => p.id), ev.from, false)) > 0 && !(await goOn())) return
    } else if (ev.name === 'QUERY_ERROR') {
      yield { name: 'error', from: ev.from, reason: reasonOf(ev.error) }
    } else if (ev.name === 'PROVIDER') {
      // how many kad-dht named: fewer than k means its walk ran to its end
      named += ev.providers.length
    }
  }
  if (parts === undefined) {
    if (!warnedNoSweep) {
      warnedNoSweep = true
      opts.log.warn('this kad-dht does not expose k, network and providers: a discover names at most k providers')
    }
    return
  }
  if (opts.signal.aborted) return
  // kad-dht names at most k of this node's own records, and none whose peer it has no address for
  const own = ownProviderRecords(dht) ?? parts.providers.getProviders
  yield * naming(await own(key, { signal: opts.signal }), undefined, true)
  // a walk that named fewer than k ran to its end: it named every provider the network told it of
  if (named < parts.k || !(await goOn())) return

  const holders: PeerId[] = []
  for await (const ev of dht.getClosestPeers(key.multihash.bytes, { signal: opts.signal })) {
    if (ev.name === 'FINAL_PEER' && !ev.peer.id.equals(self)) holders.push(ev.peer.id)
  }
  /** A holder asked again may name someone new: it answered with a full pick of what it holds, and has share left. */
  const again = (p: PeerId): boolean => full.has(p.toString()) && (opts.perPeerMax === undefined || (shares.get(p.toString()) ?? 0) < opts.perPeerMax)
  for (let round = 0; round < DHT_PROVIDER_SWEEP_ROUNDS; round++) {
    const targets = holders.filter(p => round === 0 ? !asked.has(p.toString()) : again(p))
    let roundNamed = 0
    for (let i = 0; i < targets.length; i += DHT_PROVIDER_SWEEP_CONCURRENCY) {
      if (!(await goOn())) return
      const batch = targets.slice(i, i + DHT_PROVIDER_SWEEP_CONCURRENCY)
      const answers = await Promise.all(batch.map(async peer => askProviders(parts, peer, key, opts.signal, false)))
      const added = yield * handOn(answers.flat())
      roundNamed += added
      // holders that named all they hold and nobody new: the others most likely hold the same, and the round ends
      // (a full pick that named nobody new may be a chance draw: the round goes on)
      if (added === 0 && answers.some(list => list.some(ev => ev.name === 'answer')) && !batch.some(p => full.has(p.toString()))) break
    }
    // a round of fresh picks that named nobody new ends the sweep (the first round asks holders not asked before:
    // those that answered with a full pick are asked again whatever it named)
    if (roundNamed === 0 && round > 0) return
  }
}
