/**
 * The end of a stream this side has closed. In libp2p 3 `stream.close()`
 * ends only this side: a peer that never ends its own keeps the stream, and
 * whatever is buffered for it, for as long as the connection lives. So once
 * this side is closed, the peer has STREAM_CLOSE_TIMEOUT_MS to end its side
 * too, and the stream is aborted if it has not (session 51's review of
 * src/wire: responder streams given up on, and client sessions closed as
 * idle, stayed with their decoders' buffers).
 */
import type { Stream } from '@libp2p/interface'
import { STREAM_CLOSE_TIMEOUT_MS } from '../constants.ts'
import type { Logger } from '../logger.ts'
import { untilAborted, withDeadline } from '../util/deadline.ts'

/**
 * End this side of `stream`: wait for `before` (what is queued to be sent) and
 * close, both within STREAM_CLOSE_TIMEOUT_MS, then give the peer as long to end
 * its side (abortUnlessEnded). A close that fails or runs out of time aborts the
 * stream, logged with `why`. Never rejects.
 */
export async function closeThenEnd (stream: Stream, log: Logger, why: string, before?: Promise<void>): Promise<void> {
  const limit = withDeadline(new AbortController().signal, STREAM_CLOSE_TIMEOUT_MS)
  try {
    if (before !== undefined) await untilAborted(before, limit.signal)
    await stream.close({ signal: limit.signal })
  } catch (err: unknown) {
    log.debug({ err, protocol: stream.protocol, why }, 'a stream did not close in time and was aborted')
    stream.abort(new Error(`${why}: close timed out`))
    return
  } finally {
    limit.clear()
  }
  abortUnlessEnded(stream, log, why)
}

/** Abort `stream` unless it is closed both ways STREAM_CLOSE_TIMEOUT_MS from now (call once this side is closed). */
export function abortUnlessEnded (stream: Stream, log: Logger, why: string): void {
  if (stream.status === 'closed') return
  const left = setTimeout(() => {
    if (stream.status === 'closed') return
    log.debug({ protocol: stream.protocol, why }, 'the peer did not end its side of a stream this side had closed: aborted')
    stream.abort(new Error(`${why}: the peer did not end its side`))
  }, STREAM_CLOSE_TIMEOUT_MS)
  left.unref?.()
  stream.addEventListener('close', () => { clearTimeout(left) }, { once: true })
}
