/**
 * What this node knows of its own reachability, from the addresses libp2p
 * announces (AutoNAT verifies public ones; --announce asserts them; relay
 * reservations add /p2p-circuit ones), and the relay server's `auto` mode:
 * the hop protocol is served only while the node has a verified public
 * address, so private nodes never offer relay slots nobody can reach. When
 * it stops serving, the reservations it granted go with it: libp2p's relay
 * kept them for their TTL (and budget.ts kept their holders' connections),
 * so holders announced circuit addresses through a relay that refused to
 * carry them for up to an hour (found by a review). Their direct connections
 * to this node are closed, which makes their relay clients drop this relay
 * and look for another (circuit relay v2 has no message to revoke a slot);
 * not one that carries work (runs, requests, relayed circuits: budget.ts
 * carriesLiveWork), whose holder learns at its reservation's renewal.
 */
import { RELAY_V2_HOP_CODEC } from '@libp2p/circuit-relay-v2'
import { isPrivate } from '@libp2p/utils'
import type { Connection, Libp2p, PeerId, StreamHandler } from '@libp2p/interface'
import type { Logger } from '../logger.ts'
import { RELAY_SERVICE, relayServiceOf, type RelayServerMode } from './network.ts'
import { RELAY_MAX_INBOUND_HOP_STREAMS, RELAY_MAX_STOP_STREAMS } from './network-constants.ts'
import { carriesLiveWork } from './budget.ts'
import { isRelayed } from './connection-facts.ts'
import { relayClientStats } from './host.ts'
import type { RelayClientStats } from './relay-client.ts'

export interface ReachabilityState {
  /** The node announces a public address (verified by AutoNAT, or announced by the operator). */
  public: boolean
  /** Relay (/p2p-circuit) addresses the node announces: its reservations. */
  relayAddresses: number
  /** The node serves relay reservations now. */
  relayServing: boolean
}

export interface ConnectionInfo {
  /** The remote peer id (a transport reference, for operators and tests only). */
  peer: string
  relayed: boolean
  direction: 'inbound' | 'outbound'
  remote: string
  /** False when the connection closed. */
  open: boolean
}

export class Reachability {
  private readonly host: Libp2p<Record<string, unknown>>
  private readonly mode: RelayServerMode
  private readonly log: Logger
  private state: ReachabilityState = { public: false, relayAddresses: 0, relayServing: false }
  private readonly listeners: Array<(s: ReachabilityState) => void> = []
  private readonly connListeners: Array<(c: ConnectionInfo) => void> = []
  private serving = false
  /** Updates run one after another: two at once would both switch the relay server. */
  private updating: Promise<void> = Promise.resolve()
  private readonly onUpdate = (): void => { void this.update() }
  private readonly onConnection = (evt: CustomEvent<Connection>): void => { this.tell(evt.detail, true) }
  private readonly onClose = (evt: CustomEvent<Connection>): void => { this.tell(evt.detail, false) }

  constructor (host: Libp2p<Record<string, unknown>>, mode: RelayServerMode, log: Logger) {
    this.host = host
    this.mode = mode
    this.log = log
  }

  get current (): ReachabilityState {
    return { ...this.state }
  }

  /** What the relay client looked up, reserved, refused and dropped since start (relay-client.ts): failed and lost reservations among them. */
  get relayClient (): RelayClientStats {
    return { ...relayClientStats(this.host) }
  }

  onChange (listener: (s: ReachabilityState) => void): void {
    this.listeners.push(listener)
  }

  private tell (c: Connection, open: boolean): void {
    const info: ConnectionInfo = { peer: c.remotePeer.toString(), relayed: isRelayed(c), direction: c.direction, remote: c.remoteAddr.toString(), open }
    for (const l of this.connListeners) l(info)
  }

  /** Told of every connection that opens or closes. */
  onConnectionChange (listener: (c: ConnectionInfo) => void): void {
    this.connListeners.push(listener)
  }

  /** After the host started: in auto mode the hop protocol waits for a public address. */
  async start (): Promise<void> {
    this.serving = this.mode === 'on'
    if (this.mode === 'auto' && this.relayService() !== undefined) await this.host.unhandle(RELAY_V2_HOP_CODEC)
    this.host.addEventListener('self:peer:update', this.onUpdate)
    this.host.addEventListener('connection:open', this.onConnection)
    this.host.addEventListener('connection:close', this.onClose)
    await this.update()
  }

  stop (): void {
    this.host.removeEventListener('self:peer:update', this.onUpdate)
    this.host.removeEventListener('connection:open', this.onConnection)
    this.host.removeEventListener('connection:close', this.onClose)
  }

  private relayService (): { onHop?: StreamHandler } | undefined {
    return this.host.services[RELAY_SERVICE] as { onHop?: StreamHandler } | undefined
  }

  private async update (): Promise<void> {
    // one update that fails (a listener that throws) is logged and does not stop the ones after it
    this.updating = this.updating.then(async () => this.apply()).catch((err: unknown) => {
      this.log.error({ err: err instanceof Error ? err.message : String(err) }, 'a reachability update failed')
    })
    return this.updating
  }

  private async apply (): Promise<void> {
    const addrs = this.host.getMultiaddrs()
    const relayAddresses = addrs.filter(a => isRelayed(a)).length
    const isPublic = addrs.some(a => !isRelayed(a) && !isPrivate(a))
    if (this.mode === 'auto' && isPublic !== this.serving) await this.serve(isPublic)
    const next: ReachabilityState = { public: isPublic, relayAddresses, relayServing: this.serving }
    if (next.public === this.state.public && next.relayAddresses === this.state.relayAddresses && next.relayServing === this.state.relayServing) return
    this.state = next
    this.log.info({ reachability: next }, 'reachability changed')
    for (const l of this.listeners) l({ ...next })
  }

  /** Serving stopped: the reservations granted go, and their holders' direct connections close (module comment). */
  private async dropReservations (): Promise<void> {
    const store = relayServiceOf(this.host)?.reservations
    if (store === undefined || store.size === 0) return
    const holders: PeerId[] = []
    for (const [peer, held] of store.entries()) {
      // its timer would otherwise delete the holder's next reservation when this one's TTL ends (relay-guard.ts)
      held.signal.clear()
      holders.push(peer)
    }
    store.clear()
    const direct = holders.flatMap(peer => this.host.getConnections(peer)).filter(c => !isRelayed(c))
    // a holder this node has runs or requests with keeps its connection (budget.ts): it learns at its renewal
    const idle = await Promise.all(direct.map(async c => !(await carriesLiveWork(this.host, c).catch((err: unknown) => {
      this.log.warn({ err: err instanceof Error ? err.message : String(err), peer: c.remotePeer.toString() }, 'a relay reservation holder\'s work could not be read: its connection is kept')
      return true
    }))))
    const conns = direct.filter((_c, i) => idle[i] === true)
    this.log.info({ reservations: holders.length, closed: conns.length, kept: direct.length - conns.length }, 'relay serving stopped: reservations dropped, the connections of their holders with no work under way closed')
    await Promise.all(conns.map(async c => c.close().catch((err: unknown) => {
      this.log.warn({ err: err instanceof Error ? err.message : String(err), peer: c.remotePeer.toString() }, 'a relay reservation holder\'s connection did not close cleanly; aborted')
      c.abort(err instanceof Error ? err : new Error(String(err)))
    })))
  }

  private async serve (on: boolean): Promise<void> {
    const svc = this.relayService()
    if (svc === undefined) return
    if (typeof svc.onHop !== 'function') {
      this.log.error('the relay server exposes no hop handler; relay mode auto cannot switch it')
      return
    }
    try {
      if (on) {
        await this.host.handle(RELAY_V2_HOP_CODEC, svc.onHop, {
          maxInboundStreams: RELAY_MAX_INBOUND_HOP_STREAMS, maxOutboundStreams: RELAY_MAX_STOP_STREAMS, runOnLimitedConnection: true
        })
      } else {
        await this.host.unhandle(RELAY_V2_HOP_CODEC)
        await this.dropReservations()
      }
      this.serving = on
    } catch (err) {
      this.log.error({ err: err instanceof Error ? err.message : String(err), on }, 'could not switch the relay server')
    }
  }
}
