/**
 * What ends a fetch's use of one holder besides a holder's own errors (service.ts): the least average rate at
 * which it must send what it is asked for, and the errors of this node's own store, which end the whole fetch.
 * A holder dropped for its rate is asked again, without the bound, once every other holder has failed
 * (service.ts `holders`): the bound makes room for a faster holder, it does not fail a fetch only a slow one can serve.
 */
import type { PeerId } from '@libp2p/interface'
import { AgentNotFoundError, toAapError } from '../errors.ts'
import type { BulkSession } from '../wire/bulk.ts'
import { ARTIFACT_FETCH_MIN_BYTES_PER_SEC, ARTIFACT_FETCH_RATE_GRACE_MS } from './constants.ts'
import { chunkLength, firstIndexes, type Manifest } from './manifest.ts'

/** A holder's deadline, running from when it was asked for the chunks still missing. */
export interface RateBound {
  /** Set once the holder missed its deadline: the error its session was aborted with. */
  err?: AgentNotFoundError
  clear: () => void
}

/**
 * Abort `session` with AGENT_NOT_FOUND (`reason: too_slow`) unless the distinct chunks missing (`have[i]` not true) have all
 * come within ARTIFACT_FETCH_RATE_GRACE_MS plus what ARTIFACT_FETCH_MIN_BYTES_PER_SEC allows for their bytes. Each
 * answer is also timed from the one before (bulk.ts), but that alone let a holder that sends one chunk just under
 * every timeout hold a fetch of 128 chunks for half an hour. One timer per holder, none per chunk.
 */
export function rateBound (session: BulkSession, peer: PeerId, m: Manifest, have: readonly boolean[], onSlow: () => void): RateBound {
  // each distinct chunk missing once: a chunk the manifest repeats is asked for once (service.ts `pullChunks`)
  const first = firstIndexes(m)
  let bytes = 0
  for (let i = 0; i < m.chunks.length; i++) if (have[i] !== true && first[i] === i) bytes += chunkLength(m, i)
  const limitMs = ARTIFACT_FETCH_RATE_GRACE_MS + Math.ceil(bytes * 1000 / ARTIFACT_FETCH_MIN_BYTES_PER_SEC)
  const bound: RateBound = { clear: () => { clearTimeout(timer) } }
  const timer = setTimeout(() => {
    bound.err = new AgentNotFoundError(`agent ${peer.toString()} did not send the ${bytes} bytes asked of it within ${limitMs} ms (${ARTIFACT_FETCH_MIN_BYTES_PER_SEC} bytes/s after ${ARTIFACT_FETCH_RATE_GRACE_MS} ms)`, {
      reason: 'too_slow', limit_ms: limitMs, bytes, min_bytes_per_sec: ARTIFACT_FETCH_MIN_BYTES_PER_SEC
    })
    tooSlow.add(bound.err)
    onSlow()
    session.abort(bound.err)
  }, limitMs)
  return bound
}

/** The errors of holders this node dropped for missing their rate bound (a holder's error frame may say `too_slow` too). */
const tooSlow = new WeakSet<object>()

export function droppedSlow (err: unknown): boolean {
  return typeof err === 'object' && err !== null && tooSlow.has(err)
}

/**
 * Errors this node's own store raised while a fetch staged a chunk. A holder's
 * error frame may carry the same code (STORAGE_FULL, store_closed): that is
 * the holder's word about its own store, and the fetch goes on to the next.
 */
const fromStore = new WeakSet<object>()

export function storeError (err: unknown): unknown {
  if (typeof err === 'object' && err !== null) fromStore.add(err)
  return err
}

/** This node's store, not the holder, refused a chunk: it is full (STORAGE_FULL) or closed (`reason: store_closed`). */
export function storeRefused (err: unknown): boolean {
  if (typeof err !== 'object' || err === null || !fromStore.has(err)) return false
  const e = toAapError(err)
  return e.code === 'STORAGE_FULL' || e.details?.reason === 'store_closed'
}

/**
 * Errors of this node's own checks of what a holder sent (the manifest against the id, a chunk against the manifest,
 * the lengths of chunks held here): the holder sent damaged bytes, and a fetch all of whose holders failed says
 * ARTIFACT_CORRUPT for it. A holder's error frame with that code is its word only: it drops the holder like any other.
 */
const fromOwnCheck = new WeakSet<object>()

export function ownCheck (err: unknown): unknown {
  if (typeof err === 'object' && err !== null) fromOwnCheck.add(err)
  return err
}

export function failedOwnCheck (err: unknown): boolean {
  return typeof err === 'object' && err !== null && fromOwnCheck.has(err) && toAapError(err).code === 'ARTIFACT_CORRUPT'
}
