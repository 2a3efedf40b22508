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
 * It also grows the window of a stream that is read fast. The library doubles
 * a stream's receive window when the window was used within four round trips,
 * but it learns the round trip only from keep-alive pings, which this node
 * turns off (host.ts), so every stream kept 256 KiB: a bulk sender (an
 * artifact chunk of a MiB) waited for credit whenever the reader's event loop
 * was busy for a moment. Here an update that follows the previous one within
 * YAMUX_WINDOW_GROW_WITHIN_MS (half the window used that fast) doubles the
 * window, up to YAMUX_MAX_STREAM_WINDOW_BYTES. The bigger window reaches the
 * sender as an ordinary window update, as in any yamux implementation.
 */
import { StreamState, YamuxStream } from '@chainsafe/libp2p-yamux/stream'
import { YAMUX_MAX_STREAM_WINDOW_BYTES, YAMUX_WINDOW_GROW_WITHIN_MS } from './network-constants.ts'

/** What the patched method reads of a YamuxStream (private in its types). */
interface WindowFields {
  state: StreamState
  recvWindow: number
  recvWindowCapacity: number
  /** When the last update was sent (or the stream opened), ms since the epoch. */
  epochStart: number
  sendWindowUpdate: (this: WindowFields) => void
}

export interface YamuxWindowStats {
  /** Window updates sent (the library's method ran). */
  sent: number
  /** Updates left out: less than half the receive window was used since the last one. */
  deferred: number
  /** Updates that doubled a stream's window (it was read fast). */
  grown: number
  /** The largest receive window any stream was given. */
  largest: number
}

/** Process-wide counts, for tests and the benchmarks. */
export const yamuxWindowStats: YamuxWindowStats = { sent: 0, deferred: 0, grown: 0, largest: 0 }

const proto = YamuxStream.prototype as unknown as WindowFields
const PATCHED = Symbol.for('aap-mesh.yamux-half-window')

function install (): void {
  const marked = proto as unknown as Record<symbol, boolean>
  if (marked[PATCHED] === true) return
  const original = proto.sendWindowUpdate
  if (typeof original !== 'function') {
    throw new Error('@chainsafe/libp2p-yamux has no YamuxStream.sendWindowUpdate: the half-window patch (src/wire/yamux-window.ts) needs updating for this version')
  }
  proto.sendWindowUpdate = function (this: WindowFields): void {
    if (this.state === StreamState.Established && this.recvWindow - this.recvWindowCapacity < this.recvWindow / 2) {
      yamuxWindowStats.deferred++
      return
    }
    yamuxWindowStats.sent++
    if (this.state === StreamState.Established && this.recvWindow < YAMUX_MAX_STREAM_WINDOW_BYTES && Date.now() - this.epochStart <= YAMUX_WINDOW_GROW_WITHIN_MS) {
      this.recvWindow = Math.min(this.recvWindow * 2, YAMUX_MAX_STREAM_WINDOW_BYTES)
      yamuxWindowStats.grown++
      if (this.recvWindow > yamuxWindowStats.largest) yamuxWindowStats.largest = this.recvWindow
    }
    original.call(this)
  }
  marked[PATCHED] = true
}

install()
