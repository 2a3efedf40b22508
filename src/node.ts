/**
 * createMeshNode: one node of the agent mesh, beside one agent. It owns the
 * libp2p host, the datastore, discovery, runs and events, and starts and
 * stops them in order.
 */
import { CompactMemoryDatastore } from './storage/compact-memory.ts'
import type { PrivateKey } from '@libp2p/interface'
import { componentLogger, type Logger } from './logger.ts'
import { AapError } from './errors.ts'
import type { Datastore } from 'interface-datastore'
import { CARD_DHT_NAMESPACE, CONNECTIONS_MAX, DEFAULT_TCP_LISTEN, DHT_PROVIDERS_PER_ANSWER, DIAL_TIMEOUT_MS } from './constants.ts'
import { ConnectionBudget } from './wire/budget.ts'
import { heldAnswersOf, type HeldAnswers } from './wire/held-answers.ts'
import { keepPeerRecordsInMemory, type PeerStoreMemoryStats } from './wire/peer-store-memory.ts'
import { selectCardRecord, validateCardRecord, type AgentCard, type CardDraft } from './card/card.ts'
import { keepNewestCards, type RecordCapStats } from './card/record-guard.ts'
import { Discovery, type DiscoverOptions, type DiscoveryQuery } from './card/discovery.ts'
import { agentIdOf, agentKey, loadOrCreateKey, openDatastore } from './identity/identity.ts'
import { generateKeyPair } from '@libp2p/crypto/keys'
import { limitProviderAnswers } from './wire/provider-answers.ts'
import { limitPeerRecords } from './wire/value-puts.ts'
import { createHost, dialAddrs, listenAddrs, type DhtTuning, type HostOptions, type MeshHost, type NetworkOptions } from './wire/host.ts'
import { limitedConnectionsHost } from './wire/network.ts'
import { Reachability } from './wire/reachability.ts'
import { Bootstrapper } from './wire/bootstrap.ts'
import { Runs, type DelegateRequest } from './runs/runtime.ts'
import type { LivenessOptions } from './runs/liveness.ts'
import { groupCommitter, groupCommitting } from './storage/group-commit.ts'
import { DurableSync, levelOf } from './storage/durability.ts'
import { STORAGE_SYNC_INTERVAL_MS } from './storage/constants.ts'
import { guardWrites, type GuardedDatastore } from './storage/write-guard.ts'
import { Events } from './events/service.ts'
import { SignatureCache } from './runlog/event.ts'
import type { Run } from './runlog/types.ts'
import type { CallOptions } from './wire/rpc.ts'
import { Artifacts } from './artifacts/service.ts'
import { mkdtemp, rm } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { compileSchemas } from './schema/validate.ts'
import { Lifecycle, started } from './util/lifecycle.ts'

export interface MeshNodeOptions {
  /** Keeps the key and the LevelDB datastore. Without it the node is ephemeral (memory datastore). */
  dataDir?: string
  /** Use this key instead of the data directory's (tests, simulations). */
  privateKey?: PrivateKey
  /** With a data dir: how often the log is synced to disk for power-loss durability (default STORAGE_SYNC_INTERVAL_MS, 1 s; 0: never). */
  storageSyncIntervalMs?: number
  /** Use this datastore instead of opening one (tests, simulations). */
  datastore?: Datastore
  /**
   * The node's cache of verified signatures (default: its own). Nodes of one
   * process never share one unless given the same: each checks what it is sent.
   */
  signatures?: SignatureCache
  /** Multiaddrs to listen on; `/memory/<name>` uses the in-process memory transport. */
  listen?: string[]
  /** Multiaddrs of peers to join through. Any node can be a bootstrap node. */
  bootstrap?: string[]
  /** Find peers on the LAN with mDNS. */
  mdns?: boolean
  /** Many nodes in one host or process (relaxed per-IP limits, no connection monitor). */
  localMesh?: boolean
  memoryLatencyMs?: number
  /**
   * The node's logger (pino). Each service logs as a child with its
   * `component`; without one, a process-wide logger on stderr at
   * $AAP_MESH_LOG_LEVEL (default warn).
   */
  logger?: Logger
  /** Kademlia parameters; the defaults suit a real mesh (see DHT_K in constants.ts). */
  dht?: DhtTuning
  /**
   * Open connections the node keeps (default CONNECTIONS_MAX, 64): above it
   * the least valuable are closed, never a peer it has live runs with
   * (src/wire/budget.ts).
   */
  maxConnections?: number
  /**
   * The hard limit is `maxConnections` plus this (default CONNECTIONS_HEADROOM):
   * libp2p refuses inbound connections there, and the budget closes young idle
   * ones past it.
   */
  connectionHeadroom?: number
  /** A connection younger than this is not pruned (default CONNECTION_GRACE_MS, 20 s). */
  connectionGraceMs?: number
  /** The card to publish at start. */
  card?: CardDraft
  /** Runs this node executes at once before it refuses delegations (default MAX_CONCURRENT_INBOUND_RUNS). */
  maxConcurrentInboundRuns?: number
  /** Of those, the most one delegator may hold (default: a quarter of the limit, rounded up, at most MAX_INBOUND_RUNS_PER_DELEGATOR: 64 of the default 256). */
  maxInboundRunsPerDelegator?: number
  /** How long a run handed to this node waits for the sender's confirmation (default HANDOFF_CONFIRM_TIMEOUT_MS). */
  handoffConfirmTimeoutMs?: number
  /** Each request's budget on the run protocols (default HANDLER_TIMEOUT_MS); lowered by tests. */
  runHandlerTimeoutMs?: number
  /**
   * Liveness of the runs this node delegates (protocols/liveness.md): how
   * often each executor of a live run is probed (default
   * LIVENESS_PROBE_INTERVAL_MS, 5 s) and how long it may stay unreachable
   * before its live runs are declared failed with EXECUTOR_LOST (default
   * EXECUTOR_LOST_AFTER_MS, 30 s).
   */
  liveness?: LivenessOptions
  /** libp2p metrics implementation, e.g. `prometheusMetrics()` from @libp2p/prometheus-metrics. */
  metrics?: HostOptions['metrics']
  /**
   * Whether `delegate` and `handoff` follow the runs they start (default true):
   * join the correlation's topic, keep a verified copy of each run's events and
   * keep the outgoing record (`runs.list()`) up to date as the run moves. Off,
   * they return the handle like `runs.delegate` and no more; `events.subscribe`
   * and `events.replay` still find the events on demand. A call's own `follow`
   * option wins over this.
   */
  followDelegations?: boolean
  /**
   * Reachability across networks (AutoNAT, Circuit Relay v2, DCUtR, UPnP;
   * see src/wire/network.ts). Unset: none, as in-process and loopback meshes
   * need none. With it the mesh's protocols also run over relayed connections.
   */
  network?: NetworkOptions
  /** Announce these multiaddrs instead of the listen addresses (an operator who knows the public address). */
  announce?: string[]
  /** Bound of the artifact store on disk (default ARTIFACT_STORE_MAX_BYTES). */
  artifactStoreMaxBytes?: number
}

/** Options of `MeshNode.delegate` and `MeshNode.handoff`. */
export interface DelegateCallOptions extends CallOptions {
  /**
   * Follow the run's events (default: MeshNodeOptions.followDelegations).
   * `false` costs the delegation nothing beyond the run service's own work:
   * the outgoing record keeps the state of the handle until `getRun` asks
   * the executor, and the node holds the run's events only once a
   * subscription or replay fetches them. A node that restarts follows every
   * live run it delegated, whichever way it was started.
   */
  follow?: boolean
}

export class MeshNode {
  readonly options: MeshNodeOptions
  private _host?: MeshHost
  private _discovery?: Discovery
  private _budget?: ConnectionBudget
  private _runs?: Runs
  private _events?: Events
  private datastore?: GuardedDatastore & { close?: () => Promise<void> }
  private peerRecords?: ReturnType<typeof keepPeerRecordsInMemory>
  /** Syncs the LevelDB log to disk (storage/durability.ts); only with a data dir this node opened. */
  durability?: DurableSync
  private ownsDatastore = false
  private key?: PrivateKey
  /** Starts and stops, one after another (the last call wins), and whether the node is started. */
  private readonly lifecycle = new Lifecycle({ start: async () => this.startOnce(), stop: async () => this.stopOnce(), refused: stoppedError })
  private readonly state = this.lifecycle.state
  private readonly log: Logger
  /** Every signature this node checks goes through its own cache (the run and event services share it). */
  readonly signatures: SignatureCache
  readonly cardRecords: RecordCapStats = { refused: 0, swept: 0, evicted: 0 } // DHT card records refused for want of room, expired ones swept (record-cap.ts)
  private _reachability?: Reachability
  private bootstrapper?: Bootstrapper
  private _artifacts?: Artifacts
  /** The artifact store's folder when the node has no data dir (removed at stop). */
  private tempArtifactDir?: string

  constructor (options: MeshNodeOptions) {
    this.options = options
    this.signatures = options.signatures ?? new SignatureCache()
    this.log = componentLogger(options.logger, 'node')
  }

  get agentId (): string {
    if (this.key === undefined) throw new Error('node not started')
    return agentIdOf(this.key)
  }

  get host (): MeshHost { return started(this._host) }

  /** Peer-store records kept in memory because the disk refused them (src/wire/peer-store-memory.ts). */
  get peerStoreMemory (): PeerStoreMemoryStats | undefined { return this.peerRecords?.stats }

  /** The bound on answers this node's responders hold for callers that do not read them (src/wire/held-answers.ts). */
  get heldAnswers (): HeldAnswers {
    return heldAnswersOf(this.host, this.log)
  }

  /** The connection budget (src/wire/budget.ts): its bound and what it pruned. */
  get connections (): ConnectionBudget { return started(this._budget) }

  get discovery (): Discovery { return started(this._discovery) }

  get runs (): Runs { return started(this._runs) }

  /** Correlated run events: subscribe, replay, fetch (see protocols/events.md). */
  get events (): Events { return started(this._events) }

  /** Typed outputs too large for an event: stored by content id, fetched from any holder (protocols/artifact.md). */
  get artifacts (): Artifacts { return started(this._artifacts) }

  /** This node's listen addresses (for operators and bootstrap lists only). */
  get addresses (): string[] {
    return listenAddrs(this.host)
  }

  /** Reachability across networks; undefined without `network`. */
  get reachability (): Reachability | undefined {
    return this._reachability
  }

  get card (): AgentCard | undefined {
    return this._discovery?.card
  }

  /**
   * Start every part, after every start or stop called before has ended: the
   * last call wins (a start while one is under way is that start).
   */
  async start (): Promise<void> { return this.lifecycle.start() }

  private async startOnce (): Promise<void> {
    if (this.state.started) return
    try {
      await this.startParts()
      this.state.started = true
      const o = this.options
      if (o.bootstrap !== undefined && o.bootstrap.length > 0) await dialAddrs(this.host, o.bootstrap, AbortSignal.timeout(DIAL_TIMEOUT_MS))
      if (o.card !== undefined) await this._discovery?.publish(o.card)
    } catch (err) {
      // a failed start (a bad listen address, a locked data dir, a card the disk refused) leaves nothing open
      // behind it: the datastore, its sync timer and the host close whichever step it failed at
      this.state.started = true
      await this.stopOnce().catch((stopErr: unknown) => {
        // the start failure is what the caller hears; what the clean-up met is said here
        this.log.warn({ err: stopErr }, 'stopping a node that failed to start did not finish cleanly')
      })
      throw err
    }
  }

  /** Open and start every part, in order; start() closes them again when one fails. */
  private async startParts (): Promise<void> {
    const o = this.options
    // the validators' first use would otherwise compile them inside the first requests (once per process)
    compileSchemas()
    this.key = o.privateKey !== undefined ? agentKey(o.privateKey) : o.dataDir === undefined ? await generateKeyPair('Ed25519') : await loadOrCreateKey(o.dataDir)
    // a full or failing disk makes writes fail with STORAGE_FULL, not with the store's plain errors
    if (o.datastore !== undefined) {
      this.datastore = guardWrites(o.datastore)
    } else {
      // without a data dir, a memory store that does not keep the network reads its values were cut from
      const opened = o.dataDir === undefined ? new CompactMemoryDatastore() : await openDatastore(o.dataDir)
      this.datastore = guardWrites(opened)
      this.ownsDatastore = true
      const level = levelOf(this.datastore)
      const intervalMs = o.storageSyncIntervalMs ?? STORAGE_SYNC_INTERVAL_MS
      if (level !== undefined && intervalMs > 0) {
        this.durability = new DurableSync({ level, committer: groupCommitter(this.datastore), intervalMs, log: componentLogger(o.logger, 'storage') })
        this.durability.start()
      }
    }
    // a replica never goes back from a card it verified to an older one someone replays (record-guard.ts); a
    // peer-store write a full disk refuses is kept in memory (libp2p writes its own record while it starts)
    this.peerRecords = keepPeerRecordsInMemory(keepNewestCards(this.datastore, componentLogger(o.logger, 'card-records'), { self: this.agentId, stats: this.cardRecords, max: o.dht?.recordsMax }), componentLogger(o.logger, 'storage'))
    this._host = await createHost({
      privateKey: this.key,
      datastore: this.peerRecords.store,
      listen: o.listen ?? [DEFAULT_TCP_LISTEN],
      mdns: o.mdns ?? false,
      localMesh: o.localMesh ?? false,
      ...(o.memoryLatencyMs === undefined ? {} : { memoryLatencyMs: o.memoryLatencyMs }),
      ...(o.dht === undefined ? {} : { dht: o.dht }),
      ...(o.maxConnections === undefined ? {} : { maxConnections: o.maxConnections }),
      ...(o.connectionHeadroom === undefined ? {} : { connectionHeadroom: o.connectionHeadroom }),
      ...(o.metrics === undefined ? {} : { metrics: o.metrics }),
      ...(o.network === undefined ? {} : { network: o.network }),
      ...(o.announce === undefined ? {} : { announce: o.announce }),
      peerStore: { writable: () => this.datastore?.health.failing === undefined },
      dhtValidators: { [CARD_DHT_NAMESPACE]: validateCardRecord },
      dhtSelectors: { [CARD_DHT_NAMESPACE]: selectCardRecord }
    })
    const peers = this._host.peerStore
    if (!limitProviderAnswers(this._host.services.dht, DHT_PROVIDERS_PER_ANSWER, async (peer) => peers.has(peer))) {
      this.log.warn('this kad-dht has no provider store to limit: provider answers name every provider')
    }
    // across networks the mesh's protocols must also run over relayed (limited) connections
    const wire = o.network === undefined ? this._host : limitedConnectionsHost(this._host)
    if (o.network !== undefined) this._reachability = new Reachability(this._host, o.network.relayServer, componentLogger(o.logger, 'reachability'))
    this._discovery = new Discovery({ host: wire, privateKey: this.key, datastore: this.datastore, signatures: this.signatures, ...(o.logger === undefined ? {} : { logger: o.logger }) })
    // outside every hook on the provider store (set above and by Discovery): a record refused tells them nothing
    limitPeerRecords(this._host.services.dht, this._host.peerId, this.log)
    const discovery = this._discovery
    // runs and events write through one group-committing view of the datastore, so a run's
    // records and the copies of events that arrive in the same turn share one batch
    const runData = groupCommitting(this.datastore)
    if (o.dataDir === undefined) this.tempArtifactDir = await mkdtemp(join(tmpdir(), 'aap-mesh-artifacts-'))
    this._artifacts = new Artifacts({
      host: wire,
      dir: o.dataDir === undefined ? this.tempArtifactDir ?? '' : join(o.dataDir, 'artifacts'),
      ...(o.artifactStoreMaxBytes === undefined ? {} : { maxBytes: o.artifactStoreMaxBytes }),
      ...(o.logger === undefined ? {} : { logger: o.logger })
    })
    this._runs = new Runs({
      artifacts: this._artifacts,
      signatures: this.signatures,
      host: wire,
      privateKey: this.key,
      datastore: runData,
      resolveCard: async (agentId, opts) => discovery.getCard(agentId, opts),
      knownCard: (agentId) => discovery.knownCard(agentId),
      ownCard: () => discovery.card,
      ...(o.maxConcurrentInboundRuns === undefined ? {} : { maxConcurrentInboundRuns: o.maxConcurrentInboundRuns }),
      ...(o.maxInboundRunsPerDelegator === undefined ? {} : { maxInboundRunsPerDelegator: o.maxInboundRunsPerDelegator }),
      ...(o.handoffConfirmTimeoutMs === undefined ? {} : { handoffConfirmTimeoutMs: o.handoffConfirmTimeoutMs }),
      ...(o.runHandlerTimeoutMs === undefined ? {} : { handlerTimeoutMs: o.runHandlerTimeoutMs }),
      ...(o.liveness === undefined ? {} : { liveness: o.liveness }),
      ...(o.logger === undefined ? {} : { logger: o.logger }),
      // a successor of a run this node delegated is followed like the run itself
      onSuccessor: (run) => { if (this.follows(undefined)) this._events?.follow(run) }
    })
    const runs = this._runs
    this._events = new Events({
      signatures: this.signatures,
      host: wire,
      privateKey: this.key,
      datastore: runData,
      ...(o.logger === undefined ? {} : { logger: o.logger }),
      onFork: (fork) => { void runs.settleFork(fork.events) },
      runs: {
        onEvent: (listener) => runs.onEvent(listener),
        // the live runs, from the run index (opened before the events service starts)
        executing: () => runs.store.live('executing'),
        delegated: () => runs.store.live('delegated'),
        delegatedEvents: async (events) => { await runs.store.foldOutgoing(events) }
      }
    })
    const events = this._events
    runs.liveness.connect({
      lastEvent: async (run) => events.lastEvent(run.run_id),
      onDeclared: async (verdict) => { await events.placeVerdict(verdict) },
      onUnchained: (run) => { events.unfollow(run) },
      reconcile: async (verdict, signal) => events.reconcileVerdict(verdict, signal)
    })
    runs.connectConfirmations({ spread: (e) => { events.spread(e) }, eventFrom: async (runId, seq) => events.eventFrom(runId, seq) })
    await this._host.start()
    this._budget = new ConnectionBudget(this._host, o.maxConnections ?? CONNECTIONS_MAX, componentLogger(o.logger, 'connections'), o.connectionGraceMs, o.connectionHeadroom)
    this._budget.start()
    await this._reachability?.start()
    await this._discovery.start()
    await this._artifacts.start()
    await this._runs.store.open()
    // before runs: restart recovery commits events that must be published
    await this._events.start()
    await this._runs.start()
  }

  /** Connect to peers by multiaddr; returns how many answered. */
  async join (addrs: string[], signal?: AbortSignal): Promise<number> {
    return this.live('join', async () => (await dialAddrs(this.host, addrs, signal ?? AbortSignal.timeout(DIAL_TIMEOUT_MS))).length)
  }

  /**
   * Join through bootstrap peers and stay joined (see src/wire/bootstrap.ts):
   * one round of dials now (returns how many answered, remembered peers too:
   * src/wire/remembered-peers.ts), then retries while none is connected.
   */
  async keepJoined (addrs: string[], onJoined?: (peers: number) => void): Promise<number> {
    if (!this.state.started) throw stoppedError('keepJoined')
    if (this.bootstrapper !== undefined) throw new Error('keepJoined was already called')
    this.bootstrapper = new Bootstrapper({ host: this.host, addrs, log: componentLogger(this.options.logger, 'bootstrap'), remembered: async (signal) => this.host.services.rememberedPeers.dial(signal), hasRemembered: () => this.host.services.rememberedPeers.size > 0, ...(onJoined === undefined ? {} : { onJoined }) })
    return this.bootstrapper.start()
  }

  /** The bootstrap loop's counters (src/wire/bootstrap.ts), once keepJoined was called. */
  get bootstrap (): Pick<Bootstrapper, 'failedRounds' | 'churnRedials' | 'churnWaits' | 'cutOffRedials' | 'churnDelayMs' | 'rejoined'> | undefined {
    return this.bootstrapper
  }

  /**
   * Stop every part, in order, after every start or stop called before has
   * ended: the last call wins; every caller waits for the one stop under way
   * (the data dir is free then).
   */
  async stop (): Promise<void> { return this.lifecycle.stop() }

  private async stopOnce (): Promise<void> {
    if (!this.state.started) return
    // from here the node's calls are refused, and those under way fail as stopped (util/lifecycle.ts)
    this.state.started = false
    this.state.stops++
    await this.bootstrapper?.stop()
    this.bootstrapper = undefined
    this._reachability?.stop()
    // in order, and each step even if an earlier one failed: nothing is left open
    const steps: Array<(() => Promise<void>) | undefined> = [
      this._events === undefined ? undefined : async () => this._events?.stop(),
      this._runs === undefined ? undefined : async () => this._runs?.stop(),
      this._discovery === undefined ? undefined : async () => this._discovery?.stop(),
      this._budget === undefined ? undefined : async () => this._budget?.stop(),
      this._artifacts === undefined ? undefined : async () => this._artifacts?.stop(),
      this._host === undefined ? undefined : async () => this._host?.stop(),
      this.durability === undefined ? undefined : async () => this.durability?.stop(),
      this.ownsDatastore ? async () => this.datastore?.close?.() : undefined,
      this.tempArtifactDir === undefined ? undefined : async () => rm(this.tempArtifactDir ?? '', { recursive: true, force: true })
    ]
    let first: unknown
    for (const step of steps) {
      try { await step?.() } catch (err) { first ??= err }
    }
    if (first !== undefined) throw first
  }

  // ---- AAP surface --------------------------------------------------------------
  // each verb needs a started node: on a stopped (or stopping) one, or one that stops under it, it fails as stoppedError says
  private async live<T> (what: string, call: () => Promise<T>): Promise<T> { return this.lifecycle.live(what, call) }

  async publishCard (draft: CardDraft): Promise<AgentCard> { return this.live('publishCard', async () => this.discovery.publish(draft)) }

  async discover (query: DiscoveryQuery, opts?: DiscoverOptions): Promise<AgentCard[]> { return this.live('discover', async () => this.discovery.discover(query, opts)) }

  async getCard (agentId: string, opts?: { signal?: AbortSignal, fresh?: boolean }): Promise<AgentCard> { return this.live('getCard', async () => this.discovery.getCard(agentId, opts)) }

  /** The datastore's write health (a node whose writes fail refuses new runs with STORAGE_FULL). */
  get storage (): GuardedDatastore['health'] {
    return this.datastore?.health ?? { refusedWrites: 0, reopens: 0, reopenFailures: 0 }
  }

  /**
   * While the datastore's last write failed, one probe write: STORAGE_FULL
   * when the store still refuses writes (a run this node could not record is
   * never started), nothing once the fault has cleared.
   */
  private async storageWritable (): Promise<void> {
    if (this.datastore?.health.failing !== undefined) await this.datastore.probe()
  }

  async delegate (req: DelegateRequest, opts: DelegateCallOptions = {}): Promise<Run> {
    return this.live('delegate', async () => {
      await this.storageWritable()
      try {
        return await this.delegateChecked(req, opts)
      } catch (err) {
        // a failing store also breaks dials (the peer store writes): say what really refused the run
        await this.storageWritable()
        throw err
      }
    })
  }

  private async delegateChecked (req: DelegateRequest, opts: DelegateCallOptions): Promise<Run> {
    const { follow, ...call } = opts
    if (!this.follows(follow)) return this.runs.delegate(req, call)
    // the delegator follows its run's events: it joins the topic first, so the first event
    // reaches it by gossip, and syncs only what gossip did not bring
    const release = this._events?.prepare(req.task_id, (req.parent_run ?? null) === null)
    let delegated = false
    try {
      const run = await this.runs.delegate(req, call)
      delegated = true
      // without an idempotency key the executor created this run just now (a key may return an
      // earlier run, whose events this node may hold): its head is known to be empty here
      this._events?.follow(run, { prepared: true, fresh: req.idempotency_key === undefined })
      return run
    } finally {
      release?.(delegated)
    }
  }

  private follows (perCall: boolean | undefined): boolean {
    return perCall ?? this.options.followDelegations ?? true
  }

  async block (runId: string, reason: string, checkpointId: string, opts?: CallOptions): Promise<Run> { return this.live('block', async () => this.runs.block(runId, reason, checkpointId, opts)) }

  async resume (runId: string, resolution: Record<string, unknown>, opts?: CallOptions & { checkpointId?: string }): Promise<Run> { return this.live('resume', async () => this.runs.resume(runId, resolution, opts)) }

  async handoff (runId: string, toAgent: string, context: Record<string, unknown>, opts: DelegateCallOptions = {}): Promise<Run> {
    const { follow, ...call } = opts
    return this.live('handoff', async () => {
      const run = await this.runs.handoff(runId, toAgent, context, call)
      if (this.follows(follow)) this._events?.follow(run)
      return run
    })
  }

  async cancel (runId: string, reason?: string, opts?: CallOptions): Promise<Run> { return this.live('cancel', async () => this.runs.cancel(runId, reason, opts)) }

  async getRun (runId: string, opts?: CallOptions): Promise<Run> { return this.live('getRun', async () => this.runs.getRun(runId, opts)) }
}

/** A verb of a stopped or stopping node (`cause`: what a call met as the node stopped under it). */
function stoppedError (what: string, cause?: unknown): AapError {
  return new AapError('INTERNAL', `the node is stopped: ${what} needs a started node`, { reason: 'node_stopped' }, cause === undefined ? undefined : { cause })
}

export async function createMeshNode (options: MeshNodeOptions = {}): Promise<MeshNode> {
  return new MeshNode(options)
}
