/**
 * The libp2p host: transports, security, muxing, DHT and gossip, configured
 * for an agent mesh. This is the only module (with rpc.ts) that deals in
 * multiaddrs; everything above it speaks agent ids.
 */
import { noise } from '@chainsafe/libp2p-noise'
import { yamux } from '@chainsafe/libp2p-yamux'
import { gossipsub, type GossipSub } from '@libp2p/gossipsub'
import { identify, type Identify } from '@libp2p/identify'
import { kadDHT, passthroughMapper, type KadDHT } from '@libp2p/kad-dht'
import { mdns } from '@libp2p/mdns'
import { memory } from '@libp2p/memory'
import { ping, type Ping } from '@libp2p/ping'
import { tcp } from '@libp2p/tcp'
import { webSockets } from '@libp2p/websockets'
import { peerIdFromPrivateKey } from '@libp2p/peer-id'
import { multiaddr } from '@multiformats/multiaddr'
import { createLibp2p, type Libp2pOptions } from 'libp2p'
import type { Libp2p, PeerId, PrivateKey } from '@libp2p/interface'
import type { Datastore } from 'interface-datastore'
import {
  CONNECTIONS_HEADROOM, CONNECTIONS_MAX, DHT_ALPHA, DHT_DISJOINT_PATHS, DHT_K, DHT_PROTOCOL, DHT_PROVIDER_VALIDITY_MS,
  DHT_REPROVIDE_CHECK_INTERVAL_MS, DHT_REPROVIDE_THRESHOLD_MS, DIAL_TIMEOUT_MS, GOSSIP_MAX_TOPIC_BYTES_PER_PEER, GOSSIP_IDONTWANT_MIN_BYTES, GOSSIP_MAX_INBOUND_BYTES
} from '../constants.ts'
import type { Selectors, Validators } from '@libp2p/kad-dht'
import { networkServices, networkTransports, relayListenAddrs, type NetworkOptions } from './network.ts'
import { withCachedSigning } from '../identity/signing.ts'
import { libp2pLogger } from './libp2p-log.ts'
import { meshNoiseCrypto } from './noise-crypto.ts'
import { contactLiveness, type ContactLivenessStats } from './dht-contacts.ts'
import { dhtWithoutKeepAlive } from './dht-keepalive.ts'
import { dhtRepeatStats, dhtWithoutRepeats, type DhtRepeatStats } from './dht-repeats.ts'
import { cachePeerStore, type PeerStoreCacheStats } from './peer-store-cache.ts'
import { peerStoreBound, type PeerStoreBound, type PeerStoreBoundInit } from './peer-store-bound.ts'
import { dhtUpkeep, type DhtUpkeep, type DhtUpkeepInit } from './dht-upkeep.ts'
import { rememberedPeers, type RememberedPeers, type RememberedPeersInit } from './remembered-peers.ts'
import { coalesceTcpWrites } from './tcp-writes.ts'
import { INBOUND_ADMITTED_OPEN_MS } from './network-constants.ts'
import { AddressFilter, allowConfigured, registerFilter } from './address-filter.ts'
import { RelayGuard } from './relay-guard.ts'
import { NO_RELAY_CLIENT_STATS, RelayClient, type RelayClientStats } from './relay-client.ts'
import './lp-decoder.ts'
import './yamux-window.ts'

export type { NetworkOptions } from './network.ts'

export interface HostServices {
  identify: Identify
  ping: Ping
  dht: KadDHT
  pubsub: GossipSub
  peerStoreBound: PeerStoreBound
  dhtUpkeep: DhtUpkeep
  rememberedPeers: RememberedPeers
  [key: string]: unknown
}

export type MeshHost = Libp2p<HostServices>

export interface DhtTuning {
  /** Peers per bucket and replicas per record and provider key. */
  k?: number
  /** Peers asked at once per lookup path. */
  alpha?: number
  /** Disjoint lookup paths. */
  disjointPaths?: number
  /**
   * Ask the DHT but do not serve it: the node does not announce the DHT
   * protocol, so no other node keeps it in its routing table (default: only
   * a node that reserves relay slots, which others cannot reach directly).
   */
  clientMode?: boolean
  /** Card records stored for others at most (default DHT_RECORDS_STORED_MAX, src/card/record-cap.ts). */
  recordsMax?: number
  /** How contacts a DHT request failed to reach are checked and removed (dht-upkeep.ts). */
  upkeep?: DhtUpkeepInit
}

export interface HostOptions {
  privateKey: PrivateKey
  datastore: Datastore
  /** Multiaddrs to listen on; `/memory/<name>` selects the memory transport. */
  listen: string[]
  /** Announce these instead of the listen addresses (optional). */
  announce?: string[]
  mdns?: boolean
  /** Extra latency per buffer on the memory transport (simulations). */
  memoryLatencyMs?: number
  /** Many nodes on one host or process: relax per-IP limits and turn off the connection monitor. */
  localMesh?: boolean
  metrics?: Libp2pOptions['metrics']
  /** Kademlia parameters (defaults: DHT_K, DHT_ALPHA, DHT_DISJOINT_PATHS). */
  dht?: DhtTuning
  /** Connections kept open before the least valuable are closed (libp2p's default otherwise). */
  maxConnections?: number
  /** libp2p's own limit is maxConnections plus this (default CONNECTIONS_HEADROOM). */
  connectionHeadroom?: number
  /** DHT record namespaces of the layers above, each with its validator and selector. */
  dhtValidators?: Validators
  dhtSelectors?: Selectors
  /**
   * Reachability across networks: AutoNAT, Circuit Relay v2 (client and
   * server), DCUtR, optional UPnP (see network.ts). Unset: none of them, as
   * in-process and loopback meshes need none.
   */
  network?: NetworkOptions
  /** The peer-store bound (peer-store-bound.ts; defaults: PEER_STORE_PEERS_MAX, PEER_STORE_PRUNE_INTERVAL_MS). */
  peerStore?: PeerStoreBoundInit
  /** The peers remembered to rejoin through (remembered-peers.ts; defaults: REMEMBERED_PEERS_MAX, REMEMBERED_PEERS_SAVE_INTERVAL_MS). */
  remembered?: RememberedPeersInit
}

export async function createHost (opts: HostOptions): Promise<MeshHost> {
  const usesMemory = opts.listen.some(a => a.startsWith('/memory'))
  const usesTcp = opts.listen.some(a => !a.startsWith('/memory')) || opts.listen.length === 0
  const usesWs = opts.listen.some(a => /\/wss?(\/|$)/.test(a))
  const network = opts.network
  const localMesh = opts.localMesh ?? false
  const quietLogger = libp2pLogger()

  const peerDiscovery: Array<ReturnType<typeof mdns>> = []
  if (opts.mdns === true) peerDiscovery.push(mdns({ serviceTag: 'aap-mesh.local' }))

  // libp2p refuses an inbound connection at its limit when the socket arrives, but sockets accepted
  // together are upgraded together and took nodes past it. The gater checks again once the peer is known,
  // and last when the upgrade is done, counting the connections it let through that are not open yet
  // (libp2p opens an upgraded connection without waiting, so each admitted one is the next inbound open)
  const hardLimit = (opts.maxConnections ?? CONNECTIONS_MAX) + (opts.connectionHeadroom ?? CONNECTIONS_HEADROOM)
  let created: MeshHost | undefined
  // when each admitted connection was let through; one not seen open within INBOUND_ADMITTED_OPEN_MS no longer counts
  // (libp2p starts before the listener that sees them open is on, so one admitted then would count for good)
  const admitted: number[] = []
  const admittedNow = (): number => {
    const cutoff = Date.now() - INBOUND_ADMITTED_OPEN_MS
    while (admitted.length > 0 && (admitted[0] ?? 0) < cutoff) admitted.shift()
    return admitted.length
  }
  const contacts = contactLiveness()
  const repeats = dhtRepeatStats()
  const full = (): boolean => (created?.getConnections().length ?? 0) + admittedNow() >= hardLimit
  // which addresses of other peers the node keeps and dials (address-filter.ts); what the operator announced is its own
  const addresses = new AddressFilter(peerIdFromPrivateKey(opts.privateKey), { listen: [...opts.listen, ...(opts.announce ?? [])], localMesh })
  const relayGuard = new RelayGuard(localMesh)
  const relayClient = new RelayClient()
  const config: Libp2pOptions<HostServices> = {
    privateKey: withCachedSigning(opts.privateKey),
    connectionGater: {
      denyInboundEncryptedConnection: full,
      denyInboundUpgradedConnection: () => {
        if (full()) return true
        admitted.push(Date.now())
        return false
      },
      // never waits: a name is dialed once its lookup has said where it points (mayDialNow). `!` of mayDial's
      // Promise had let every name through, and awaiting it let a stranger's names hold kad-dht's walks
      denyDialMultiaddr: (ma) => !addresses.mayDialNow(ma),
      filterMultiaddrForPeer: (peer, ma) => addresses.mayKeep(peer, ma),
      denyInboundRelayReservation: (peer) => relayGuard.deny(peer)
    },
    datastore: opts.datastore,
    addresses: {
      listen: [...opts.listen, ...(network === undefined ? [] : relayListenAddrs(network))],
      ...(opts.announce === undefined || opts.announce.length === 0 ? {} : { announce: opts.announce }),
      // bounded: relays name the circuit addresses, and a peer cannot read an identify message past 8 KiB
      announceFilter: relayClient.announceFilter
    },
    transports: [
      ...(usesTcp ? [tcp()] : []),
      // a node that listens on TCP can dial the WebSockets addresses of others
      ...(usesTcp || usesWs ? [webSockets()] : []),
      ...(usesMemory ? [memory({ latency: opts.memoryLatencyMs ?? 0 })] : []),
      ...(network === undefined ? [] : networkTransports(relayClient))
    ],
    // each decrypted message in a buffer of its own, so kept slices do not pin 64 KiB socket reads, and the
    // handshake's keys imported once (noise-crypto.ts)
    connectionEncrypters: [noise({ crypto: meshNoiseCrypto })],
    // Deliberate: yamux's keep-alive pings every connection every 30 s (and once when it opens) but only logs
    // a ping that fails; liveness is the connection monitor's job (it pings over a stream and closes a
    // connection that does not answer), and its traffic keeps NAT mappings open too. A local mesh has no
    // NAT and no half-open loopback connections. At 500 simulated nodes the keep-alive was 6 % of a process.
    streamMuxers: [yamux({ enableKeepAlive: false })],
    peerDiscovery,
    connectionManager: {
      ...(localMesh ? { inboundConnectionThreshold: 10_000, maxIncomingPendingConnections: 1_000 } : {}),
      // the budget (budget.ts) keeps the node under maxConnections; libp2p's own limit, where it refuses
      // inbound connections, leaves room above it so a new delegation gets in before an idle one goes
      maxConnections: hardLimit,
      dialTimeout: DIAL_TIMEOUT_MS
    },
    // the monitor pings every connection; with hundreds of nodes in one process it starves the event loop
    connectionMonitor: { enabled: !localMesh },
    ...(opts.metrics === undefined ? {} : { metrics: opts.metrics }),
    // libp2p's debug lines only when DEBUG asks for them (libp2p-log.ts)
    ...(quietLogger === undefined ? {} : { logger: quietLogger }),
    services: {
      identify: identify(),
      ping: ping(),
      // kad-dht's closest peers keep their value for the budget but are not redialed on every close (dht-keepalive.ts)
      dht: contacts.wrap(dhtWithoutRepeats(dhtWithoutKeepAlive(kadDHT({
        protocol: DHT_PROTOCOL,
        // a node that reserves relay slots is not reachable directly: it asks, it does not serve
        clientMode: opts.dht?.clientMode ?? network?.relayClient === true,
        kBucketSize: opts.dht?.k ?? DHT_K,
        alpha: opts.dht?.alpha ?? DHT_ALPHA,
        disjointPaths: opts.dht?.disjointPaths ?? DHT_DISJOINT_PATHS,
        // keep loopback and /memory addresses: the default mapper drops them and the table stays empty
        peerInfoMapper: passthroughMapper,
        // provider keys are announced once (discovery.ts); kad-dht provides them again before they
        // expire, and drops the records of others once they are older than the validity
        reprovide: { validity: DHT_PROVIDER_VALIDITY_MS, threshold: DHT_REPROVIDE_THRESHOLD_MS, interval: DHT_REPROVIDE_CHECK_INTERVAL_MS },
        validators: opts.dhtValidators ?? {},
        selectors: opts.dhtSelectors ?? {}
      })), repeats, Date.now, ma => addresses.mayKeep(undefined, ma))),
      pubsub: gossipsub({
        // events are durable in the executor's log and synced; gossip is the fast path, so a
        // publish with no mesh peers yet is not an error
        allowPublishToZeroTopicPeers: true,
        // Deliberate: every message on our topics is an event its executor signed, and every
        // receiver verifies that signature, so gossipsub's own per-message signature only adds
        // a sign per publish and a verify per receiver (0.3 ms each here). Unsigned messages get
        // a content id (SHA-256 of the data), so one event republished by anyone is one message.
        globalSignaturePolicy: 'StrictNoSign',
        emitSelf: false,
        // Deliberate: gossipsub would write a tag to the peer store at every GRAFT and PRUNE (a
        // record read, re-encoded and stored, and a peer:update to every listener), about a dozen
        // per correlation topic a node joins and leaves. The connection budget reads the mesh
        // from gossipsub itself instead (budget.ts).
        tagMeshPeers: false,
        maxInboundDataLength: GOSSIP_MAX_INBOUND_BYTES,
        maxTopicBytesPerPeer: GOSSIP_MAX_TOPIC_BYTES_PER_PEER,
        idontwantMinDataSize: GOSSIP_IDONTWANT_MIN_BYTES,
        // Deliberate: many nodes share one IP in local meshes and simulations; the default
        // colocation penalty graylists them. Score stays on for every other behaviour.
        scoreParams: { IPColocationFactorWeight: 0 },
        // two private nodes meet over a relay; their gossip must be able to use it
        runOnLimitedConnection: network !== undefined
      }),
      // libp2p ages peer-store records out only when it reads them, six hours on: the count is bounded here
      peerStoreBound: peerStoreBound(opts.peerStore),
      // kad-dht keeps a contact it cannot reach while its bucket has room: one a DHT request failed to reach
      // while not connected, and that then does not answer a ping, is removed here
      dhtUpkeep: dhtUpkeep({ ...opts.dht?.upkeep, forget: contacts.forget }),
      // the peers the bootstrap loop rejoins through when none of its own answers
      rememberedPeers: rememberedPeers({ ...opts.remembered, filter: addresses }),
      ...(network === undefined ? {} : networkServices(network))
    }
  }
  created = await createLibp2p(config)
  registerFilter(created.peerId, addresses)
  relayGuard.start(created)
  relayGuards.set(created, relayGuard)
  relayClients.set(created, relayClient)
  contactStats.set(created, contacts.stats)
  repeatStats.set(created, repeats)
  peerStoreStats.set(created, cachePeerStore(created.peerStore))
  created.addEventListener('connection:open', (evt) => {
    if (evt.detail.direction === 'inbound') admitted.shift()
    if (!tcpWritesCoalesced) tcpWritesCoalesced = coalesceTcpWrites(Reflect.get(evt.detail, 'maConn'))
  })
  return created
}

// libp2p's TCP connection class is patched once, on the first TCP connection any host opens (tcp-writes.ts)
let tcpWritesCoalesced = false
const contactStats = new WeakMap<MeshHost, ContactLivenessStats>()
const peerStoreStats = new WeakMap<MeshHost, PeerStoreCacheStats>()
const repeatStats = new WeakMap<MeshHost, DhtRepeatStats>()
const relayGuards = new WeakMap<MeshHost, RelayGuard>()
const relayClients = new WeakMap<object, RelayClient>()

/** What this host's relay client looked up, reserved, refused and dropped (relay-client.ts); zeros for a host made elsewhere. */
export function relayClientStats (host: object): Readonly<RelayClientStats> {
  return relayClients.get(host)?.stats ?? NO_RELAY_CLIENT_STATS
}

/** What this host's relay guard dropped and refused (relay-guard.ts); zeros for a host made elsewhere. */
export function relayGuardStats (host: MeshHost): RelayGuard['stats'] {
  return relayGuards.get(host)?.stats ?? { dropped: 0, refusedPerNetwork: 0 }
}

/** What this host's kad-dht was spared (dht-repeats.ts); not applied for a host made elsewhere. */
export function dhtRepeats (host: MeshHost): DhtRepeatStats {
  return repeatStats.get(host) ?? dhtRepeatStats()
}

/** What this host's peer-store cache saved (peer-store-cache.ts); zeros for a host made elsewhere. */
export function peerStoreCacheStats (host: MeshHost): PeerStoreCacheStats {
  return peerStoreStats.get(host) ?? { hits: 0, misses: 0, mergesSkipped: 0 }
}

/** How this host's DHT routing table judged its contacts alive (dht-contacts.ts); zeros for a host made elsewhere. */
export function dhtContactStats (host: MeshHost): ContactLivenessStats {
  return contactStats.get(host) ?? { connected: 0, recent: 0, unverified: 0, pinged: 0, failed: 0 }
}

/** Dial peers given as multiaddrs (bootstrap). Returns the ones that answered. */
export async function dialAddrs (host: MeshHost, addrs: string[], signal?: AbortSignal): Promise<PeerId[]> {
  // the operator's: kept and dialed whatever their kind (address-filter.ts)
  allowConfigured(host.peerId, addrs)
  const results = await Promise.allSettled(addrs.map(async a => {
    const conn = await host.dial(multiaddr(a), { signal: signal ?? AbortSignal.timeout(DIAL_TIMEOUT_MS) })
    return conn.remotePeer
  }))
  return results.flatMap(r => r.status === 'fulfilled' ? [r.value] : [])
}

export function listenAddrs (host: MeshHost): string[] {
  return host.getMultiaddrs().map(a => a.toString())
}
