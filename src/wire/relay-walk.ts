/**
 * The relay transport's search for relays (relay-client.ts): libp2p's random
 * walk ran DHT lookups back to back for as long as the node held fewer
 * reservations than it wanted; this one waits between them.
 */
import type { AbortOptions, PeerInfo } from '@libp2p/interface'
import type { CircuitRelayTransportComponents } from '@libp2p/circuit-relay-v2'
import { RELAY_DISCOVERY_BACKOFF_MAX_MS, RELAY_DISCOVERY_BACKOFF_MIN_MS } from './network-constants.ts'
import type { RelayClientStats } from './relay-client.ts'

/** A libp2p random walk: what the relay transport's discovery asks for peers. */
type RandomWalk = CircuitRelayTransportComponents['randomWalk']

export interface PeerRoutingLike {
  getClosestPeers: (key: Uint8Array, options?: AbortOptions) => AsyncIterable<PeerInfo>
}

/**
 * The random walk of the relay transport: one DHT lookup for a random key
 * at a time, each after a wait that doubles from RELAY_DISCOVERY_BACKOFF_MIN_MS
 * to RELAY_DISCOVERY_BACKOFF_MAX_MS; `reset` makes the next one run at once.
 * A lookup that fails is counted and the walk goes on (libp2p's ends the
 * relay search for good on one error).
 */
export class PacedWalk implements RandomWalk {
  private readonly routing: () => PeerRoutingLike
  private readonly stats: RelayClientStats
  private readonly log: (msg: string, err: unknown) => void
  private wake?: () => void

  constructor (routing: () => PeerRoutingLike, stats: RelayClientStats, log: (msg: string, err: unknown) => void) {
    this.routing = routing
    this.stats = stats
    this.log = log
  }

  reset (): void {
    this.stats.backoffMs = 0
    this.stats.backoffResets++
    this.wake?.()
  }

  async * walk (options?: AbortOptions): AsyncGenerator<PeerInfo> {
    const signal = options?.signal ?? new AbortController().signal
    while (!signal.aborted) {
      await this.pause(signal)
      if (signal.aborted) return
      const wait = this.stats.backoffMs
      this.stats.backoffMs = wait === 0 ? RELAY_DISCOVERY_BACKOFF_MIN_MS : Math.min(wait * 2, RELAY_DISCOVERY_BACKOFF_MAX_MS)
      this.stats.lookups++
      try {
        for await (const peer of this.routing().getClosestPeers(crypto.getRandomValues(new Uint8Array(32)), { signal })) yield peer
      } catch (err) {
        if (signal.aborted) return
        this.stats.lookupFailures++
        this.log('a relay discovery lookup failed', err)
      }
    }
  }

  /** The current wait, cut short by `reset` or the signal. */
  private async pause (signal: AbortSignal): Promise<void> {
    if (this.stats.backoffMs === 0) return
    await new Promise<void>(resolve => {
      const done = (): void => {
        clearTimeout(timer)
        signal.removeEventListener('abort', done)
        if (this.wake === done) this.wake = undefined
        resolve()
      }
      const timer = setTimeout(done, this.stats.backoffMs)
      signal.addEventListener('abort', done)
      this.wake = done
    })
  }
}
