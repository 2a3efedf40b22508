/**
 * Prometheus metrics of a node: libp2p's own (through @libp2p/prometheus-metrics,
 * passed to the node as its `metrics` option) and the node's: runs by state,
 * delegations, run events, errors by code, API streams, discovery counters, the A2A gateway's and bridge's
 * counters. Served on an opt-in
 * port by `aap-mesh start --metrics-port`; on loopback, to requests whose Host
 * header names the server itself (no DNS rebinding, as the API's view).
 */
import { createServer, type Server } from 'node:http'
import type { AddressInfo } from 'node:net'
import { prometheusMetrics } from '@libp2p/prometheus-metrics'
import { Counter, Gauge, Registry } from 'prom-client'
import type { MeshNode } from '../node.ts'
import { RUN_STATES } from '../runlog/types.ts'
import { providerRecordStats } from '../wire/provider-records.ts'
import { valuePutStats } from '../wire/value-puts.ts'
import { addressFilterOf } from '../wire/address-filter.ts'
import { relayClientStats, relayGuardStats } from '../wire/host.ts'
import { a2aStats } from '../a2a/stats.ts'
import { METRICS_CONNECTION_CHECK_MS, METRICS_MAX_CONNECTIONS, METRICS_REQUEST_TIMEOUT_MS } from './constants.ts'
import { errorReply, HttpError } from './errors.ts'
import { hostForUrl, hostIsOwn, isLoopbackAddress } from './own-host.ts'

export class NodeMetrics {
  readonly registry = new Registry()
  readonly delegations: Counter<'outcome'>
  readonly events: Counter<'type'>
  readonly errors: Counter<'code' | 'source'>
  readonly sseClients: Gauge<'stream'>
  private node?: MeshNode
  private offEvents?: () => void

  constructor () {
    const registers = [this.registry]
    this.delegations = new Counter({
      name: 'aap_delegations_total',
      help: 'Delegations this node made, by outcome (ok or the error code)',
      labelNames: ['outcome'],
      registers
    })
    this.events = new Counter({
      name: 'aap_run_events_total',
      help: 'Run events committed by this node as executor, by type',
      labelNames: ['type'],
      registers
    })
    this.errors = new Counter({
      name: 'aap_errors_total',
      help: 'Errors by code and source (api: answers of the local API; ui_login: logins to the view refused; metrics: requests refused by the metrics port)',
      labelNames: ['code', 'source'],
      registers
    })
    this.sseClients = new Gauge({
      name: 'aap_api_sse_clients',
      help: 'Open server-sent-event streams of the local API',
      labelNames: ['stream'],
      registers
    })
    const self = this
    new Gauge({
      name: 'aap_runs',
      help: 'Runs by state and side (executing: this node executes them; delegated: this node delegated them)',
      labelNames: ['state', 'side'],
      registers,
      collect () {
        const node = self.node
        if (node === undefined) return
        // the run index keeps these counts beside its keys: a scrape reads no run
        const counts = node.runs.counts()
        for (const side of ['executing', 'delegated'] as const) {
          for (const state of RUN_STATES) this.set({ state, side }, counts[side][state])
        }
      }
    })
    new Gauge({
      name: 'aap_event_sync_errors',
      help: 'Failed event syncs since start, by error code',
      labelNames: ['code'],
      registers,
      collect () {
        const stats = self.node?.events.stats
        if (stats === undefined) return
        for (const [code, n] of Object.entries(stats.syncErrors)) this.set({ code }, n)
      }
    })
    /** A gauge of named figures, label `what`; `read` gives them (undefined: the part is absent, no samples). */
    const figures = (name: string, help: string, read: (node: MeshNode) => Record<string, number> | undefined): void => {
      new Gauge({
        name,
        help,
        labelNames: ['what'],
        registers,
        collect () {
          const f = self.node === undefined ? undefined : read(self.node)
          if (f !== undefined) for (const [what, n] of Object.entries(f)) this.set({ what }, n)
        }
      })
    }
    figures('aap_liveness', 'Executor liveness of the runs this node delegated (protocols/liveness.md), since start: probes, failed probes, failed probes the executor answered all the same, runs declared lost (EXECUTOR_LOST), of them the runs whose probes were answered unread past the bound, verdicts that could not be chained, verdicts settled with their executor, verdicts never seen by it (expired, or dropped past the bound on open notices), rounds of notice offers and the offers made, verdicts replaced by the executor\'s own events, runs whose end was held before a verdict (and of them, ends kept without an output or failure that broke the Run schema), records ended because the executor answered with a run this node did not delegate, and those ended with no verdict because the ticket held names another delegator', (node) => {
      const l = node.runs.liveness
      const s = l.stats
      return {
        probes: s.probes,
        probe_failures: s.probeFailures,
        probes_answered_unread: s.probesAnsweredUnread,
        declared: s.declared,
        unread_declared: s.unreadDeclared,
        unchained: s.unchained,
        notices_delivered: s.noticesDelivered,
        notices_expired: s.noticesExpired,
        notices_dropped: s.noticesDropped,
        notice_rounds: s.noticeRounds,
        notice_offers: s.noticeOffers,
        superseded: s.superseded,
        ended_unseen: s.endedUnseen,
        malformed_ends: s.malformedEnds,
        disowned: s.disowned,
        not_delegated: s.notDelegated,
        notices_open: l.openNotices
      }
    })
    figures('aap_run_records', 'Run records this node read since start that did not parse (a torn write, a disk fault: src/storage/read.ts CorruptRecordError), left out of listings and restarts, run index entries or summaries that did not parse (the index is rebuilt at the next open), and executors\' events not folded into a delegated run\'s record because the result broke the Run schema (src/runs/fold-checked.ts)', ({ runs }) => {
      return { corrupt_records: runs.store.stats.corruptRecords, corrupt_index_entries: runs.store.index.stats.corrupt, refused_events: runs.store.stats.refusedEvents }
    })
    figures('aap_blocked_orphans', 'The executor\'s watch on the delegators of its blocked runs (src/runs/orphans.ts), since start: check rounds, asks (get_verdict) and those that reached nobody, delegators that answered they hold no record of the run, runs ended with a verdict found by an ask, blocked runs failed with DELEGATOR_LOST; successors of a handoff kept from its link alone, and refused', ({ runs }) => {
      const s = runs.orphans.stats
      return { rounds: s.rounds, probes: s.probes, probe_failures: s.probeFailures, unheld: s.unheld, verdicts: s.verdicts, ended: s.ended, successors_held: runs.successorStats.held, successors_refused: runs.successorStats.refused }
    })
    figures('aap_run_slots', 'Run slots of this node as executor (src/runs/slots.ts): held now (of them by handlers whose run ended and that have not returned: outliving), new runs refused since start because the node (refused_node) or the delegator\'s share (refused_delegator) was full, handlers still running when another party ended their run (outlived); expired idempotency records deleted since start, and sweeps that failed', ({ runs }) => ({
      held: runs.slots.size,
      outliving: runs.slots.outlivingNow,
      outlived: runs.slots.outlived,
      refused_node: runs.slots.refused.node,
      refused_delegator: runs.slots.refused.delegator,
      idempotency_deleted: runs.idempotency.stats.deleted,
      idempotency_sweep_failures: runs.idempotency.stats.failures
    }))
    figures('aap_handoff_confirmations', 'Handoff successors on this node whose confirmation did not come in time (protocols/handoff.md), since start: asks of the sender (get_run), successors started because the predecessor named them, successors failed with HANDOFF_UNCONFIRMED', ({ runs }) => {
      const s = runs.handoffConfirmations
      return { asks: s.asks, started_on_ask: s.startedOnAsk, failed: s.failed }
    })
    figures('aap_storage_syncs', 'Syncs of the datastore\'s log to disk since start (src/storage/durability.ts), and those that failed; absent without a data dir', ({ durability: d }) =>
      d === undefined ? undefined : { syncs: d.stats.syncs, failures: d.stats.failures })
    figures('aap_bootstrap', 'The bootstrap loop (src/wire/bootstrap.ts), since start: rounds that reached no bootstrap peer since the last that did (without --bootstrap: rounds that reached no remembered peer while the node held no connection), redials of a peer that closed the connection again while this node held others, checks that waited before such a redial, redials at once of a node that looked cut off, the wait before the next such redial (ms), and rounds that reached no bootstrap peer but rejoined through peers remembered from before (src/wire/remembered-peers.ts); absent on a node whose loop never started (`aap-mesh start` starts it, with or without --bootstrap)', ({ bootstrap: b }) =>
      b === undefined ? undefined : { failed_rounds: b.failedRounds, churn_redials: b.churnRedials, churn_waits: b.churnWaits, cut_off_redials: b.cutOffRedials, churn_delay_ms: b.churnDelayMs, rejoined: b.rejoined })
    figures('aap_remembered_peers', 'Peers this node dialed and found serving the DHT, remembered to rejoin through when no bootstrap peer answers (src/wire/remembered-peers.ts): held now and the bound; since start, lists written, writes refused, stored lists or entries left out as damaged, rejoin rounds and the peers they reached', (node) => {
      const r = node.host.services.rememberedPeers
      return { held: r.size, max: r.max, saved: r.stats.saved, save_failures: r.stats.saveFailures, load_failures: r.stats.loadFailures, dials: r.stats.dials, reached: r.stats.reached }
    })
    figures('aap_connections', 'The connection budget (src/wire/budget.ts): open connections, the bound, connections pruned since start, rounds that ended over the bound (every other connection carried live runs), errors', (node) => {
      const b = node.connections
      return { open: node.host.getConnections().length, max: b.max, pruned: b.stats.pruned, over_budget: b.stats.overBudget, errors: b.stats.errors }
    })
    figures('aap_artifacts', 'The artifact store (protocols/artifact.md): bytes held and its bound, artifacts held and their bound; since start, artifacts stored here and fetched from peers, copies evicted to make room, artifacts removed on purpose, files of removed artifacts that could not be deleted', (node) => {
      const { store, stats } = node.artifacts
      return { used_bytes: store.used, max_bytes: store.capacity, artifacts: store.count, max_artifacts: store.maxCount, stored: stats.stored, fetched: stats.fetched, evicted: store.stats.evicted, removed: store.stats.removed, delete_failures: store.stats.deleteFailures }
    })
    figures('aap_peer_store_memory', 'Peer-store records kept in memory because the disk refused them (src/wire/peer-store-memory.ts): held now, and since start those kept, those refused with memory full, and those dropped because they came after the store closed', (node) => {
      const s = node.peerStoreMemory
      return s === undefined ? undefined : { held: s.held, kept: s.kept, overflow: s.overflow, after_close: s.afterClose }
    })
    figures('aap_peer_store', 'The peer-store bound (src/wire/peer-store-bound.ts): records found by its last pass and the bound; since start, records of peers neither connected nor tagged deleted past the bound, passes, passes that failed, and passes over the bound that deleted nothing while the disk refused writes', (node) => {
      const s = node.host.services.peerStoreBound.stats
      return { records: s.records, max: node.host.services.peerStoreBound.maxPeers, pruned: s.pruned, passes: s.passes, failures: s.failures, held_back: s.heldBack }
    })
    figures('aap_dht_upkeep', 'Routing-table contacts a DHT request failed to reach while not connected, since start (src/wire/dht-upkeep.ts): checked, removed because their ping failed too, kept because they answered, left because the table was at DHT_UPKEEP_TABLE_FLOOR, suspects not queued past DHT_UPKEEP_SUSPECTS_MAX, and checks that failed otherwise', (node) => {
      const s = node.host.services.dhtUpkeep.stats
      return { checked: s.checked, removed: s.removed, kept: s.kept, at_floor: s.atFloor, dropped: s.dropped, failures: s.failures }
    })
    figures('aap_forks', 'Runs found forked here since start (two events their executor signed at one seq: src/events/forks.ts), and the proofs kept', (node) => ({ found: node.events.forks.found, kept: node.events.forks.size }))
    figures('aap_held_answers', 'Answers this node\'s responders hold for callers that have not read them (src/wire/held-answers.ts): bytes and streams now, the bound, and since start the streams cut off past it and the bytes they held', (node) => {
      const h = node.heldAnswers
      return { bytes: h.bytes, streams: h.streams, max_bytes: h.maxBytes, shed: h.stats.shed, shed_bytes: h.stats.shedBytes }
    })
    figures('aap_dht_provider_records', 'Provider records other peers had this node store since start, and those refused past their provider\'s bucket (DHT_PROVIDER_ADDS_PER_PEER_BURST, src/wire/provider-records.ts)', (node) => {
      const s = providerRecordStats(node.host.services.dht)
      return s === undefined ? undefined : { stored: s.stored, refused: s.refused }
    })
    figures('aap_dht_card_records', 'DHT card records other peers wrote here that were refused since start because DHT_RECORDS_STORED_MAX were held, expired ones swept and far ones evicted to make room for nearer keys (src/card/record-cap.ts), and PUT_VALUEs refused past their sender\'s bucket (DHT_VALUE_PUTS_PER_PEER_BURST, src/wire/value-puts.ts)', (node) => ({
      refused: node.cardRecords.refused, swept: node.cardRecords.swept, evicted: node.cardRecords.evicted, refused_per_peer: valuePutStats(node.host.services.dht)?.refused ?? 0
    }))
    figures('aap_peer_addresses', 'Addresses other peers named that this node refused to keep or dial since start (src/wire/address-filter.ts), and names of peers it could not look up before a dial (refused too)', (node) => {
      const f = addressFilterOf(node.host.peerId)
      return f === undefined ? undefined : { refused: f.refused, lookup_failures: f.lookupFailures }
    })
    figures('aap_relay_guard', 'Relay reservations this node dropped since start because their holder left, and reservations refused past RELAY_RESERVATIONS_PER_NETWORK_MAX for one network (src/wire/relay-guard.ts)', (node) => {
      const s = relayGuardStats(node.host)
      return { dropped: s.dropped, refused_per_network: s.refusedPerNetwork }
    })
    figures('aap_relay_client', 'This node\'s relay client since start (src/wire/relay-client.ts): relay discovery lookups and those that failed, the wait before the next one (ms) and its restarts, reservations made, renewed, failed and lost, relays not asked (reached only over a relay, or past the bound on relays that dialed this node), relays asked again after a lost reservation, relay-named addresses not taken or forgotten, addresses the announce filter held back at its last call, and relays not listened on because a peer opened a STOP stream without a reservation there (not one the operator configured)', (node) => {
      const s = relayClientStats(node.host)
      return {
        lookups: s.lookups, lookup_failures: s.lookupFailures, backoff_ms: s.backoffMs, backoff_resets: s.backoffResets,
        reservations: s.reservations, renewals: s.renewals, reservations_failed: s.reservationsFailed, reservations_removed: s.reservationsRemoved,
        candidates_refused: s.candidatesRefused, reasked: s.reasked, addrs_dropped: s.addrsDropped, addrs_forgotten: s.addrsForgotten, announce_held_back: s.announceHeldBack,
        stop_listens_refused: s.stopListensRefused
      }
    })
    figures('aap_a2a_gateway', 'The inbound A2A server\'s hold on the runs of its tasks, all its agents together since start (src/a2a/task-runs.ts): watches of tasks waiting for input dropped (past A2A_INPUT_WATCHES_MAX, or for a new task\'s run), run events that could not be saved to their task, watches that could not start, subscriptions tried again because the run\'s correlation was busy on this node, and runs left unfollowed after A2A_BUSY_RETRIES_MAX such tries (their tasks brought up to date when read); absent while no A2A server ran', (node) => {
      const s = a2aStats(node).gateway
      return s === undefined ? undefined : { watches_dropped: s.watchesDropped, save_errors: s.saveErrors, watch_errors: s.watchErrors, busy_retries: s.busyRetries, busy_gave_up: s.busyGaveUp }
    })
    figures('aap_a2a_outbound', 'Status messages of the tasks the bridged A2A agents carry (src/a2a/outbound.ts) since start: reported as run.progress cut to fit, and not reported because the run refused them; absent while no A2A agent was bridged', (node) => {
      const s = a2aStats(node).outbound
      return s === undefined ? undefined : { progress_cut: s.progressCut, progress_refused: s.progressRefused }
    })
    figures('aap_discovery', 'Discovery counters since start, by counter (src/card/discovery-stats.ts): announcements, provider walks and the records they sent, lookups, card fetches and rejections, cards held for others and pulls that failed', (node) => ({ ...node.discovery.stats }))
    figures('aap_events_lock', 'Tasks that did not queue on a task\'s lock past its bound since start (src/events/lock-queues.ts): gossip shed, events of this node\'s runs read back from the log instead (and read-backs that failed and were tried again), sync pages refused, subscriptions that waited for it to drain and those refused after the wait, catch-up pulls that waited, and gossiped startless runs not fetched because their relayer had EVENTS_STARTLESS_FETCHES_PER_SOURCE fetches in flight', (node) => {
      const s = node.events.stats
      return { gossip_shed: s.lockShed, local_deferred: s.lockRefused.local, local_read_back_errors: s.readBackErrors, sync_refused: s.lockRefused.sync, subscribe_waited: s.subscribeWaited, subscribe_refused: s.lockRefused.subscribe, pull_waited: s.lockRefused.pull, startless_dropped: s.startlessDropped }
    })
    new Gauge({
      name: 'aap_events_published',
      help: 'Run events this node published on gossip since start',
      registers,
      collect () {
        const stats = self.node?.events.stats
        if (stats !== undefined) this.set(stats.published)
      }
    })
  }

  /** The libp2p metrics implementation to pass as MeshNodeOptions.metrics: it registers in this registry. */
  libp2p (): ReturnType<typeof prometheusMetrics> {
    return prometheusMetrics({ registry: this.registry, preserveExistingMetrics: true })
  }

  /** Start counting the node's runs and events (after node.start()). */
  attach (node: MeshNode): void {
    this.node = node
    this.offEvents = node.runs.onEvent((event) => { this.events.inc({ type: event.type }) })
  }

  detach (): void {
    this.offEvents?.()
    this.node = undefined
  }

  async text (): Promise<string> {
    return this.registry.metrics()
  }
}

/**
 * A plain HTTP server with one route, GET /metrics. On a loopback address it answers only requests that name it in
 * their Host header (a page whose name was rebound to 127.0.0.1 would read the counters); listening wider, it is
 * there for scrapers on other machines, which name it as they reach it (a DNS name, a port mapping).
 */
export async function serveMetrics (metrics: NodeMetrics, host: string, port: number): Promise<{ url: string, close: () => Promise<void>, droppedConnections: () => number }> {
  const names = [hostForUrl(host)]
  const checkHost = isLoopbackAddress(host)
  // a scraper sends one short request: a socket that sends none holds its connection no longer than the bound
  const server: Server = createServer({ requestTimeout: METRICS_REQUEST_TIMEOUT_MS, headersTimeout: METRICS_REQUEST_TIMEOUT_MS, connectionsCheckingInterval: METRICS_CONNECTION_CHECK_MS }, (req, res) => {
    if (checkHost && !hostIsOwn(req, names)) {
      // a browser page that rebound its name to this address would read the node's counters
      const { status, body } = errorReply(new HttpError(403, 'UNAUTHORIZED', `the metrics answer only at their own address, not at Host ${JSON.stringify((req.headers.host ?? '').slice(0, 100))}`, { reason: 'host' }))
      metrics.errors.inc({ code: body.error.code, source: 'metrics' })
      res.writeHead(status, { 'content-type': 'application/json; charset=utf-8' }).end(JSON.stringify(body))
      return
    }
    if (req.method !== 'GET' || (req.url ?? '').split('?')[0] !== '/metrics') {
      res.writeHead(404, { 'content-type': 'text/plain' }).end('only GET /metrics here\n')
      return
    }
    metrics.text().then(
      (text) => { res.writeHead(200, { 'content-type': metrics.registry.contentType }).end(text) },
      (err: unknown) => { res.writeHead(500, { 'content-type': 'text/plain' }).end(`${(err as Error).message}\n`) }
    )
  })
  // past the bound a new connection is closed as it comes (counted: see droppedConnections)
  server.maxConnections = METRICS_MAX_CONNECTIONS
  let dropped = 0
  server.on('drop', () => { dropped++ })
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject)
    server.listen(port, host, () => { server.off('error', reject); resolve() })
  })
  const addr = server.address() as AddressInfo
  return {
    url: `http://${hostForUrl(addr.address)}:${addr.port}/metrics`,
    droppedConnections: () => dropped,
    close: async () => new Promise<void>(resolve => {
      server.close(() => { resolve() })
      server.closeAllConnections()
    })
  }
}
