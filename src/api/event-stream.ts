/**
 * GET /v1/events/{correlation_id}/stream: a correlation's verified events
 * as server-sent events, the history first, then live, `ready` between them.
 *
 * The stream reads its subscription as an iterator (the pull form of
 * src/events/catch-up.ts): the history comes from the log a page at a time,
 * and past API_SSE_HISTORY_HIGH_WATER_BYTES unread the stream waits for its
 * client before it reads more. A history of any length is never held whole,
 * neither in the node nor in the response's buffer. Live events are written
 * as they come, under the SSE cut-off (API_SSE_MAX_BUFFERED_BYTES unread).
 */
import type { FastifyReply } from 'fastify'
import { toAapError } from '../errors.ts'
import type { EventSubscription } from '../events/subscription.ts'
import type { Logger } from '../logger.ts'
import type { MeshNode } from '../node.ts'
import { API_SSE_HISTORY_HIGH_WATER_BYTES } from './constants.ts'
import { correlationHints } from './query.ts'
import type { SseStream } from './sse.ts'

/** What the stream needs from the API server: its stream slots, its SSE responses, its subscriptions. */
export interface EventStreamPorts {
  node: MeshNode
  /** A stream slot (API_MAX_SSE_CLIENTS); the function releases it. */
  reserve: () => () => void
  /** The SSE response on `reply`; its end releases the slot. */
  open: (reply: FastifyReply, release: () => void) => SseStream
  /** Closed when the server closes. */
  subscriptions: Set<EventSubscription>
  log: Logger
  /** Counts of the server's event streams (ApiStats). */
  counts: EventStreamCounts
}

export interface EventStreamCounts {
  /** Times a stream waited for its client to read history before it read more from the log. */
  historyWaits: number
  /** Streams ended because their subscription failed (the client is sent an `error` event, `{ error: { code, message } }`, first). */
  failed: number
}

export async function serveEventStream (ports: EventStreamPorts, correlation: string, q: Record<string, unknown>, reply: FastifyReply): Promise<void> {
  const release = ports.reserve()
  // The client may leave while the node subscribes (dials and syncs take a moment). The
  // subscription is then closed once subscribe() has returned, not aborted through its
  // signal: a subscription aborted while subscribe() is still running leaves the node on
  // the correlation's topic (Events keeps the track while subscribe holds it, and nothing
  // untracks it afterwards). Waiting costs at most SYNC_TIMEOUT_MS.
  const gone = new AbortController()
  const onGone = (): void => { gone.abort() }
  reply.raw.once('close', onGone)
  let sub: EventSubscription
  try {
    sub = await ports.node.events.subscribe(correlation, { ...correlationHints(q), history: q.history !== false })
  } catch (err) {
    release()
    reply.raw.off('close', onGone)
    throw err
  }
  reply.raw.off('close', onGone)
  ports.subscriptions.add(sub)
  // a subscription that ended while it subscribed (it fell behind live events during its first syncs, say) still
  // opens the stream: pump sends its failure as the `error` event, or ends the stream as an ended one ends
  if (gone.signal.aborted) {
    sub.close()
    ports.subscriptions.delete(sub)
    release()
    return
  }
  const stream = ports.open(reply, release)
  stream.onClose(() => {
    sub.close()
    ports.subscriptions.delete(sub)
  })
  void pump(ports, sub, stream, correlation)
}

/** Write the subscription's events until either side ends; the history at the client's pace. */
async function pump (ports: EventStreamPorts, sub: EventSubscription, stream: SseStream, correlation: string): Promise<void> {
  let live = false
  try {
    for (;;) {
      if (!live && await sub.pastHistory()) {
        live = true
        stream.send('ready', { stream: 'events', correlation_id: correlation })
      }
      const r = await sub.next()
      if (r.done === true || stream.closed) break
      const e = r.value
      // history is the backlog a client is sent on connecting: the cut-off counts above it (a keep-alive written
      // while the stream waits for the client must not cut it off); live events count in full
      if (live) stream.send(e.type, e)
      else stream.burst(() => { stream.send(e.type, e) })
      if (!live && stream.buffered > API_SSE_HISTORY_HIGH_WATER_BYTES) {
        ports.counts.historyWaits++
        await stream.drained()
      }
    }
  } catch (err) {
    // the subscription failed (it fell behind live events, or the log could not be read): the client hears why
    const e = toAapError(err)
    ports.counts.failed++
    ports.log.warn({ err, correlation_id: correlation, code: e.code }, 'an event stream ended: its subscription failed')
    stream.send('error', { error: e.toFrame() })
  }
  stream.close()
}
