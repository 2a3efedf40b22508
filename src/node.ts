/**
 * createMeshNode: one node of the agent mesh, beside one agent. It owns the
 * libp2p host, the datastore, discovery, runs and events, and starts and
 * stops them in order.
 */
import type { PrivateKey } from '@libp2p/interface'
import type { Datastore } from 'interface-datastore'
import { CARD_DHT_NAMESPACE, DEFAULT_TCP_LISTEN, DIAL_TIMEOUT_MS } from './constants.ts'
import { selectCardRecord, validateCardRecord, type AgentCard, type CardDraft } from './card/card.ts'
import { Discovery, type DiscoverOptions, type DiscoveryQuery } from './card/discovery.ts'
import { agentIdOf, loadOrCreateKey, openDatastore } from './identity/identity.ts'
import { generateKeyPair } from '@libp2p/crypto/keys'
import { createHost, dialAddrs, listenAddrs, type MeshHost } from './wire/host.ts'

export interface MeshNodeOptions {
  /** Keeps the key and the LevelDB datastore. Without it the node is ephemeral (memory datastore). */
  dataDir?: string
  /** Use this key instead of the data directory's (tests, simulations). */
  privateKey?: PrivateKey
  /** Use this datastore instead of opening one (tests, simulations). */
  datastore?: Datastore
  /** Multiaddrs to listen on; `/memory/<name>` uses the in-process memory transport. */
  listen?: string[]
  /** Multiaddrs of peers to join through. Any node can be a bootstrap node. */
  bootstrap?: string[]
  /** Find peers on the LAN with mDNS. */
  mdns?: boolean
  /** Many nodes in one host or process (relaxed per-IP limits, no connection monitor). */
  localMesh?: boolean
  memoryLatencyMs?: number
  /** The card to publish at start. */
  card?: CardDraft
}

export class MeshNode {
  readonly options: MeshNodeOptions
  private _host?: MeshHost
  private _discovery?: Discovery
  private datastore?: Datastore & { close?: () => Promise<void> }
  private ownsDatastore = false
  private key?: PrivateKey
  private started = false

  constructor (options: MeshNodeOptions) {
    this.options = options
  }

  get agentId (): string {
    if (this.key === undefined) throw new Error('node not started')
    return agentIdOf(this.key)
  }

  get host (): MeshHost {
    if (this._host === undefined) throw new Error('node not started')
    return this._host
  }

  get discovery (): Discovery {
    if (this._discovery === undefined) throw new Error('node not started')
    return this._discovery
  }

  /** This node's listen addresses (for operators and bootstrap lists only). */
  get addresses (): string[] {
    return listenAddrs(this.host)
  }

  get card (): AgentCard | undefined {
    return this._discovery?.card
  }

  async start (): Promise<void> {
    if (this.started) return
    const o = this.options
    this.key = o.privateKey ?? (o.dataDir === undefined ? await generateKeyPair('Ed25519') : await loadOrCreateKey(o.dataDir))
    if (o.datastore !== undefined) {
      this.datastore = o.datastore
    } else {
      this.datastore = await openDatastore(o.dataDir)
      this.ownsDatastore = true
    }
    this._host = await createHost({
      privateKey: this.key,
      datastore: this.datastore,
      listen: o.listen ?? [DEFAULT_TCP_LISTEN],
      mdns: o.mdns ?? false,
      localMesh: o.localMesh ?? false,
      ...(o.memoryLatencyMs === undefined ? {} : { memoryLatencyMs: o.memoryLatencyMs }),
      dhtValidators: { [CARD_DHT_NAMESPACE]: validateCardRecord },
      dhtSelectors: { [CARD_DHT_NAMESPACE]: selectCardRecord }
    })
    this._discovery = new Discovery({ host: this._host, privateKey: this.key, datastore: this.datastore })
    await this._host.start()
    await this._discovery.start()
    this.started = true
    if (o.bootstrap !== undefined && o.bootstrap.length > 0) await this.join(o.bootstrap)
    if (o.card !== undefined) await this._discovery.publish(o.card)
  }

  /** Connect to peers by multiaddr; returns how many answered. */
  async join (addrs: string[], signal?: AbortSignal): Promise<number> {
    const peers = await dialAddrs(this.host, addrs, signal ?? AbortSignal.timeout(DIAL_TIMEOUT_MS))
    return peers.length
  }

  async stop (): Promise<void> {
    if (!this.started) return
    this.started = false
    await this._discovery?.stop()
    await this._host?.stop()
    if (this.ownsDatastore) await this.datastore?.close?.()
  }

  // ---- AAP surface --------------------------------------------------------------

  async publishCard (draft: CardDraft): Promise<AgentCard> {
    return this.discovery.publish(draft)
  }

  async discover (query: DiscoveryQuery, opts?: DiscoverOptions): Promise<AgentCard[]> {
    return this.discovery.discover(query, opts)
  }

  async getCard (agentId: string, opts?: { signal?: AbortSignal }): Promise<AgentCard> {
    return this.discovery.getCard(agentId, opts)
  }
}

export async function createMeshNode (options: MeshNodeOptions = {}): Promise<MeshNode> {
  return new MeshNode(options)
}
