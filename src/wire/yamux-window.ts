/**
 * Yamux window updates once half the receive window is used, not after every
 * data frame.
 *
 * @chainsafe/libp2p-yamux (8.x) answers every data frame a stream receives
 * with a window update frame for the bytes just taken, however few. For the
 * small messages of this node (a gossip event, a delegate request, a sync
 * page) that doubles the frames on the wire: each update is a Noise
 * encryption and a socket write on the receiver, a decryption and a frame
 * parse on the sender. A profile of the 100-node events benchmark put 37 % of
 * a subscriber process's socket writes on window updates.
 *
 * Yamux leaves it to the receiver when to grant credit (as HTTP/2 does);
 * go-yamux and rust-yamux send an update once half the window is consumed,
 * which keeps a bulk sender from ever waiting on credit while it has half a
 * window left. This applies the same rule to established streams: an update
 * with flags (SYN, ACK), or on a paused or resumed stream, goes out as
 * before, and the library's window growth still runs when an update is sent.
 *
 * The patch is on YamuxStream's prototype (the package exports the class for
 * this: `@chainsafe/libp2p-yamux/stream`), so it holds for every stream of the
 * process, and it reaches into fields the class keeps private: the pinned
 * version is checked at load, and test/wire-yamux-window.test.ts shows both
 * that bulk transfers past the window still flow and that small messages no
 * longer draw an update each.
 *
 * It also grows the window of the streams that ask for it: a fetcher's bulk
 * streams (bulk.ts), whose own requests bound what the other side may send.
 * The library doubles a stream's receive window when the window was used
 * within four round trips, but it learns the round trip only from keep-alive
 * pings, which this node turns off (host.ts), so every stream kept 256 KiB: a
 * holder sending an artifact chunk of a MiB waited for credit whenever the
 * fetcher's event loop was busy for a moment. On a stream marked with
 * `allowWindowGrowth`, an update that follows this node's previous update
 * within YAMUX_WINDOW_GROW_WITHIN_MS (half the window taken that fast)
 * doubles the window, up to YAMUX_MAX_STREAM_WINDOW_BYTES; the first update
 * after a pause never does. The bigger window reaches the sender as an
 * ordinary window update, as in any yamux implementation. Other streams keep
 * 256 KiB: there the sender decides how fast data comes, and a responder
 * that pauses a stream it cannot keep up with must not have granted more.
 * (The ceiling holds while keep-alive is off; with it on, the library's own
 * growth would run too, up to 16 MiB.)
 */
import { StreamState, YamuxStream } from '@chainsafe/libp2p-yamux/stream'
import { YAMUX_MAX_STREAM_WINDOW_BYTES, YAMUX_WINDOW_GROW_WITHIN_MS } from './network-constants.ts'

/** What the patched method reads of a YamuxStream (private in its types). */
interface WindowFields {
  state: StreamState
  recvWindow: number
  recvWindowCapacity: number
  sendWindowUpdate: (this: WindowFields) => void
  sendPause: (this: WindowFields) => void
}

export interface YamuxWindowStats {
  /** Window updates sent (the library's method ran). */
  sent: number
  /** Updates left out: less than half the receive window was used since the last one. */
  deferred: number
  /** Updates that doubled a stream's window (a growable stream read fast). */
  grown: number
  /** The largest receive window any stream was given. */
  largest: number
}

/** What the patch keeps, once per process (every copy of this module shares it, like the patch itself). */
interface WindowState {
  stats: YamuxWindowStats
  /** Streams allowed to grow their window. */
  growable: WeakSet<object>
  /** When this node last sent a window update on a growable stream, while it was not paused. */
  lastSent: WeakMap<object, number>
}

const STATE = Symbol.for('aap-mesh.yamux-window.state')
const registry = globalThis as unknown as Record<symbol, WindowState | undefined>
const state: WindowState = registry[STATE] ??= {
  stats: { sent: 0, deferred: 0, grown: 0, largest: 0 },
  growable: new WeakSet(),
  lastSent: new WeakMap()
}

/** Process-wide counts, for tests and the benchmarks. */
export const yamuxWindowStats: YamuxWindowStats = state.stats

/**
 * Let `stream`'s receive window grow while it is read fast (a no-op for a
 * stream of another muxer). For streams whose reader bounds what it is sent
 * by its own requests, as a bulk fetcher does.
 */
export function allowWindowGrowth (stream: object): void {
  if (stream instanceof YamuxStream) state.growable.add(stream)
}

const proto = YamuxStream.prototype as unknown as WindowFields
const PATCHED = Symbol.for('aap-mesh.yamux-half-window')

function install (): void {
  const marked = proto as unknown as Record<symbol, boolean>
  if (marked[PATCHED] === true) return
  const original = proto.sendWindowUpdate
  const pause = proto.sendPause
  if (typeof original !== 'function' || typeof pause !== 'function') {
    throw new Error('@chainsafe/libp2p-yamux has no YamuxStream.sendWindowUpdate or sendPause: the window patch (src/wire/yamux-window.ts) needs updating for this version')
  }
  const { stats, growable, lastSent } = state
  proto.sendWindowUpdate = function (this: WindowFields): void {
    if (this.state === StreamState.Established && this.recvWindow - this.recvWindowCapacity < this.recvWindow / 2) {
      stats.deferred++
      return
    }
    // a paused stream sends nothing (the library only restarts its epoch)
    if (this.state === StreamState.Paused) {
      original.call(this)
      return
    }
    stats.sent++
    if (this.state === StreamState.Established && growable.has(this)) {
      const now = Date.now()
      const last = lastSent.get(this)
      if (last !== undefined && now - last <= YAMUX_WINDOW_GROW_WITHIN_MS && this.recvWindow < YAMUX_MAX_STREAM_WINDOW_BYTES) {
        this.recvWindow = Math.min(this.recvWindow * 2, YAMUX_MAX_STREAM_WINDOW_BYTES)
        stats.grown++
        if (this.recvWindow > stats.largest) stats.largest = this.recvWindow
      }
      lastSent.set(this, now)
    }
    original.call(this)
  }
  // a pause forgets the last update: the first one after the resume never grows the window
  proto.sendPause = function (this: WindowFields): void {
    lastSent.delete(this)
    pause.call(this)
  }
  marked[PATCHED] = true
}

install()
