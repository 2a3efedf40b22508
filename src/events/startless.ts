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
 * events come again. A relayer that answers with nothing (or fails) is
 * followed by the executor when it is reached without routing by then; a
 * fetch made again (an event of the run came meanwhile, a lock drained)
 * asks by the relayer of the event that made it (Syncer.fetch), and a run
 * whose gossip was shed while its correlation's lock was behind, or whose
 * fetched page that lock refused, is fetched once it drains by its
 * relayer's ask again, within the share (`again`; shed.ts): none of these
 * walks the DHT.
 */
import type { PeerId } from '@libp2p/interface'
import { peerIdOfAgent } from '../identity/identity.ts'
import type { Logger } from '../logger.ts'
import { dialableWithoutRouting } from '../wire/dial.ts'
import type { MeshHost } from '../wire/host.ts'
import { EVENTS_STARTLESS_FETCHES_PER_SOURCE } from './constants.ts'
import type { EventsStats } from './track.ts'

/** A startless run's fetch on behalf of one relayed message (Syncer.fetch). */
export interface StartlessAsk {
  /** The agent to ask first: the executor when reached without routing, else the relayer. */
  source: (executor: string) => Promise<string>
  /** Whether a dial to `agentId` needs no peer routing (the executor, asked after a relayer that had nothing). */
  reachable: (agentId: string) => Promise<boolean>
  /** The same relayer's ask again (a fetch made later, once a lock drains), or undefined (counted) past its share. */
  again: () => StartlessAsk | undefined
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
      reachable: async (agentId) => this.reachable(agentId),
      again: () => this.take(from),
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
    try {
      return await dialableWithoutRouting(this.host, peer)
    } catch (err) {
      // the peer store could not be read: the relayer is asked, as for an executor not reachable without routing
      this.log.debug({ err, agent_id: agentId }, 'a startless run\'s executor could not be read from the peer store')
      return false
    }
  }
}
