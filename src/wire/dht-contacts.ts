/**
 * How kad-dht's routing table learns that a contact is alive, without a
 * connection of its own for each question.
 *
 * kad-dht queues every peer that a DHT answer names (closer peers and
 * providers) for its routing table, and pings each before adding it; it also
 * pings the oldest contacts of a full bucket before it evicts one. A ping needs
 * a connection, so each of those pings to a peer this node was not connected
 * to dialed it: a Noise handshake, identify, a gossip stream and the
 * peer-store writes that come with them, for a connection the budget
 * (budget.ts) closed again soon after. In a 100-node simulation they were the
 * largest single source of dials, 44 % of all of them, and most went to peers
 * this node had never been connected to.
 *
 * The ping kad-dht is given here answers:
 *  - alive, without a ping, while this node has an open connection to the
 *    peer (an authenticated connection is what a ping would prove), or when its
 *    last connection closed less than DHT_CONTACT_FRESH_MS ago;
 *  - with a real ping, which may dial, for a contact already in the routing
 *    table (a full bucket keeps a contact that answers, as Kademlia wants);
 *  - not verified, without a dial, for a peer that is neither: a peer only
 *    named by another one enters the table once this node has talked to it (a
 *    lookup that asks it adds it on its answer), not on hearsay.
 */
import { isPeerId, type ComponentLogger, type Connection, type Libp2pEvents, type PeerId, type TypedEventTarget } from '@libp2p/interface'
import type { KadDHT, KadDHTComponents } from '@libp2p/kad-dht'
import type { Ping } from '@libp2p/ping'
import { DHT_CONTACT_FRESH_MS, DHT_CONTACTS_TRACKED } from '../constants.ts'
import { reasonOf } from '../errors.ts'
import { kadMember } from './kad-internals.ts'

export interface ContactLivenessStats {
  /** Contacts judged alive by an open connection. */
  connected: number
  /** Contacts judged alive because their connection closed less than DHT_CONTACT_FRESH_MS ago. */
  recent: number
  /** Contacts only named by other peers, left out of the table without a dial. */
  unverified: number
  /** Contacts of the table pinged over the network (kad-dht's own ping, which dials when not connected). */
  pinged: number
  /** Of `pinged`, those that did not answer (kad-dht then evicts them). */
  failed: number
}

export class ContactNotVerifiedError extends Error {
  override readonly name = 'ContactNotVerifiedError'
}

interface Components {
  ping: Ping
  connectionManager: { getConnections: (peer?: PeerId) => Connection[] }
  events: TypedEventTarget<Libp2pEvents>
  logger: ComponentLogger
}

export interface LivenessOptions {
  /** Whether the peer is a contact of the routing table already. */
  inTable: (peer: PeerId) => Promise<boolean>
  freshMs?: number
  tracked?: number
}

/**
 * The ping given to kad-dht, which also says, without a ping, whether a peer
 * counts as alive (an open connection, or one closed less than
 * DHT_CONTACT_FRESH_MS ago): dht-repeats.ts queues a routing-table job for a
 * named peer only then (any other new contact would be refused).
 */
export interface LivenessPing extends Ping {
  aliveWithoutPing: (peer: PeerId) => boolean
  /** Forget when the peer's last connection closed (dht-upkeep.ts found it gone): it counts as alive only on a ping again. */
  forget: (peer: PeerId) => void
}

/** The ping kad-dht's routing table is given (see the module comment). */
export function livenessPing (components: Components, stats: ContactLivenessStats, opts: LivenessOptions): LivenessPing {
  const log = components.logger.forComponent('aap:wire:dht-contacts')
  const freshMs = opts.freshMs ?? DHT_CONTACT_FRESH_MS
  const tracked = opts.tracked ?? DHT_CONTACTS_TRACKED
  /** When each recently connected peer's last connection closed (ms), oldest first. */
  const closedAt = new Map<string, number>()
  components.events.addEventListener('connection:close', (evt) => {
    const peer = evt.detail.remotePeer.toString()
    closedAt.delete(peer)
    closedAt.set(peer, Date.now())
    if (closedAt.size > tracked) {
      const oldest = closedAt.keys().next()
      if (oldest.done !== true) closedAt.delete(oldest.value)
    }
  })
  const connectedNow = (peer: PeerId): boolean => components.connectionManager.getConnections(peer).some(c => c.status === 'open')
  const closedLately = (peer: PeerId): boolean => {
    const closed = closedAt.get(peer.toString())
    return closed !== undefined && Date.now() - closed < freshMs
  }
  return {
    aliveWithoutPing: (peer) => connectedNow(peer) || closedLately(peer),
    forget: (peer) => { closedAt.delete(peer.toString()) },
    ping: async (peer, options) => {
      if (isPeerId(peer)) {
        if (connectedNow(peer)) {
          stats.connected++
          return 0
        }
        if (closedLately(peer)) {
          stats.recent++
          return 0
        }
        if (!await opts.inTable(peer)) {
          stats.unverified++
          throw new ContactNotVerifiedError(`peer ${peer.toString()} was only named by others; it enters the routing table once this node talks to it`)
        }
      }
      stats.pinged++
      try {
        return await components.ping.ping(peer, options)
      } catch (err) {
        stats.failed++
        log('contact %s did not answer its ping: %s', peer.toString(), reasonOf(err))
        throw err
      }
    }
  }
}

/** What kad-dht's routing table offers here: `find` resolves to the peer when it is a contact. */
interface TableLookup { find: (peer: PeerId) => Promise<PeerId | undefined> }

export interface ContactLiveness {
  readonly stats: ContactLivenessStats
  /** The ping's `forget`, once kad-dht was made. */
  forget: (peer: PeerId) => void
  /** kad-dht's factory, with the ping above in its components. */
  wrap: (factory: (components: KadDHTComponents) => KadDHT) => (components: KadDHTComponents) => KadDHT
}

export function contactLiveness (): ContactLiveness {
  const stats: ContactLivenessStats = { connected: 0, recent: 0, unverified: 0, pinged: 0, failed: 0 }
  let made: LivenessPing | undefined
  return {
    stats,
    forget: (peer) => { made?.forget(peer) },
    wrap: (factory) => (components) => {
      let table: TableLookup | undefined
      // made before the DHT, so the closes before its first ping are known too
      const ping = made = livenessPing(components, stats, {
        // without a routing table to ask (another kad-dht version), every contact is pinged as kad-dht would
        inTable: async (peer) => table === undefined || await table.find(peer) !== undefined
      })
      const view = new Proxy(components, {
        get (target, prop, receiver) {
          return prop === 'ping' ? ping : Reflect.get(target, prop, receiver)
        }
      })
      const dht = factory(view)
      table = kadMember<TableLookup>(dht, 'routingTable', ['find'])
      return dht
    }
  }
}
