/**
 * `signal` or a time limit, whichever ends first, with a `clear()` that ends
 * the limit's timer once the call is over.
 *
 * `AbortSignal.any([signal, AbortSignal.timeout(ms)])` keeps its timeout
 * signal (Node holds a timeout signal that another signal follows until it
 * fires) for the whole `ms`, however soon the call ended: about 0.75 KB each.
 * Where `ms` is long (an A2A task may take an hour) or calls come often (a poll
 * every 250 ms with a 30 s limit each) that is memory held for nothing.
 */
export interface Deadline {
  signal: AbortSignal
  clear: () => void
}

export function withDeadline (signal: AbortSignal, ms: number): Deadline {
  const limit = new AbortController()
  const timer = setTimeout(() => { limit.abort(new DOMException(`no answer within ${ms} ms`, 'TimeoutError')) }, ms)
  timer.unref?.()
  return { signal: AbortSignal.any([signal, limit.signal]), clear: () => { clearTimeout(timer) } }
}

/** `fn` with `signal` or `ms`, whichever ends first; the timer goes when `fn` settles. */
export async function withinDeadline<T> (signal: AbortSignal, ms: number, fn: (signal: AbortSignal) => Promise<T>): Promise<T> {
  const d = withDeadline(signal, ms)
  try {
    return await fn(d.signal)
  } finally {
    d.clear()
  }
}

/**
 * `p`, or the reason of `signal` once it aborts first; the listener goes when
 * either ends. For a caller waiting on work it shares with others: leaving
 * ends its own wait, not the work.
 */
export async function untilAborted<T> (p: Promise<T>, signal: AbortSignal | undefined): Promise<T> {
  if (signal === undefined) return p
  signal.throwIfAborted()
  let onAbort: (() => void) | undefined
  try {
    return await Promise.race([p, new Promise<never>((_resolve, reject) => {
      onAbort = () => { reject(signal.reason) }
      signal.addEventListener('abort', onAbort, { once: true })
    })])
  } finally {
    if (onAbort !== undefined) signal.removeEventListener('abort', onAbort)
  }
}
