/**
 * GET /v1/events/{correlation_id}/stream: a correlation's verified events
 * as server-sent events, the history first (the backlog a client is sent on
 * connecting), then live, `ready` between them.
 */
import type { FastifyReply } from 'fastify'
import type { EventSubscription } from '../events/subscription.ts'
import type { MeshNode } from '../node.ts'
import type { AgentEvent } from '../runlog/types.ts'
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
  let sse: SseStream | undefined
  const early: AgentEvent[] = []
  let sub: EventSubscription
  try {
    sub = await ports.node.events.subscribe(correlation, {
      ...correlationHints(q),
      history: q.history !== false,
      onEvent: (e) => { if (sse === undefined) early.push(e); else sse.send(e.type, e) }
    })
  } catch (err) {
    release()
    reply.raw.off('close', onGone)
    throw err
  }
  reply.raw.off('close', onGone)
  ports.subscriptions.add(sub)
  if (gone.signal.aborted || sub.closed) {
    sub.close()
    ports.subscriptions.delete(sub)
    release()
    return
  }
  const stream = ports.open(reply, release)
  sse = stream
  stream.onClose(() => {
    sub.close()
    ports.subscriptions.delete(sub)
  })
  // the history is the backlog a client is sent on connecting: not counted against the cut-off
  stream.burst(() => { for (const e of early.splice(0)) stream.send(e.type, e) })
  stream.send('ready', { stream: 'events', correlation_id: correlation })
}
