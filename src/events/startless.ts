/**
 * Which peer a gossiped startless run (events past seq 1 under a run id no
 * one vouched for, isStartless) is fetched from. Any stranger can sign such
 * events under a fresh key per message; asking their executor would make the
 * dialer walk the DHT for a key no node holds, once per message, each walk
 * holding a sync slot. So the run is asked of its executor only when the node
 * reaches it without routing (a connection, or addresses in the peer store),
 * else of the peer that relayed the message (connected); at most
 * EVENTS_STARTLESS_FETCHES_PER_SOURCE of one relayer's messages have a fetch
 * in flight at once. Past that the run is not fetched (`startlessDropped`):
 * it is fetched once an event someone vouches for names it, or its own
 * events come again.
 */
import type { PeerId } from '@libp2p/interface'
import { peerIdOfAgent } from '../identity/identity.ts'
import type { Logger } from '../logger.ts'
import { holdsConnection } from '../wire/dial.ts'
import type { MeshHost } from '../wire/host.ts'
import { EVENTS_STARTLESS_FETCHES_PER_SOURCE } from './constants.ts'
import type { EventsStats } from './track.ts'

/** A startless run's fetch on behalf of one relayed message (Syncer.fetch). */
export interface StartlessAsk {
  /** The agent to ask: the executor when reached without routing, else the relayer. */
  source: (executor: string) => Promise<string>
  /** The fetch ended (or was folded into one in flight): its relayer's share is given back. */
  done: () => void
}

export class StartlessFetches {
  private readonly host: MeshHost
  private readonly stats: EventsStats
  private readonly log: Logger
  /** Startless fetches in flight by the peer that relayed their message. */
  private readonly inflight = new Map<string, number>()

  constructor (host: MeshHost, stats: EventsStats, log: Logger) {
    this.host = host
    this.stats = stats
    this.log = log
  }

  /** A fetch for a startless run `from` relayed, or undefined (counted) when `from` has its share in flight. */
  take (from: string): StartlessAsk | undefined {
    const n = this.inflight.get(from) ?? 0
    if (n >= EVENTS_STARTLESS_FETCHES_PER_SOURCE) {
      this.stats.startlessDropped++
      return undefined
    }
    this.inflight.set(from, n + 1)
    let given = false
    return {
      source: async (executor) => (await this.reachable(executor)) ? executor : from,
      done: () => {
        if (given) return
        given = true
        const left = (this.inflight.get(from) ?? 1) - 1
        if (left <= 0) this.inflight.delete(from)
        else this.inflight.set(from, left)
      }
    }
  }

  /** Whether a dial to `agentId` needs no peer routing: it is connected, or the peer store holds addresses for it. */
  private async reachable (agentId: string): Promise<boolean> {
    let peer: PeerId
    try {
      peer = peerIdOfAgent(agentId)
    } catch (err) {
      // a run id names its executor, and a verified event's executor is a valid agent id: this is not expected
      this.log.debug({ err, agent_id: agentId }, 'a startless run names an executor that is not a peer id')
      return false
    }
    if (holdsConnection(this.host, peer)) return true
    if (!(await this.host.peerStore.has(peer))) return false
    try {
      return (await this.host.peerStore.get(peer)).addresses.length > 0
    } catch (err) {
      // removed meanwhile: not reachable without routing
      this.log.debug({ err, agent_id: agentId }, 'a startless run\'s executor left the peer store')
      return false
    }
  }
}
