/**
 * The node's two concurrency primitives, used by every service that needs
 * them: a mutex (one task at a time, in call order, optionally keyed) and a
 * limiter (at most n tasks at once, optionally per key).
 */

/**
 * Tasks run one at a time in the order they were queued. A task that fails
 * does not stop the ones behind it. `busy` counts tasks queued or running, so
 * a caller can take a synchronous fast path when nothing waits; `waiting`
 * counts those not started yet, so a caller can bound what it queues.
 */
export class Mutex {
  private tail: Promise<unknown> = Promise.resolve()
  private queued = 0
  private notStarted = 0

  get busy (): number {
    return this.queued
  }

  /** Tasks queued behind the one running, not started yet. */
  get waiting (): number {
    return this.notStarted
  }

  async run<T> (fn: () => Promise<T>): Promise<T> {
    this.queued++
    this.notStarted++
    const start = (): Promise<T> => {
      this.notStarted--
      return fn()
    }
    const task = this.tail.then(start, start)
    // the next task waits for this one to end, whatever its outcome; the caller sees the outcome
    this.tail = task.then(noop, noop)
    try {
      return await task
    } finally {
      this.queued--
    }
  }

  /** Resolves once every task queued so far has ended. */
  async idle (): Promise<void> {
    await this.tail
  }
}

/** One Mutex per key, dropped when its last task ends. */
export class KeyedMutex {
  private readonly byKey = new Map<string, Mutex>()

  async run<T> (key: string, fn: () => Promise<T>): Promise<T> {
    let m = this.byKey.get(key)
    if (m === undefined) {
      m = new Mutex()
      this.byKey.set(key, m)
    }
    try {
      return await m.run(fn)
    } finally {
      if (m.busy === 0 && this.byKey.get(key) === m) this.byKey.delete(key)
    }
  }

  /** Resolves once every task queued so far, under any key, has ended. */
  async idle (): Promise<void> {
    await Promise.all([...this.byKey.values()].map(async m => m.idle()))
  }
}

/** A counting semaphore: at most `n` tasks at once, the rest wait in order. */
export class Limiter {
  private active = 0
  private readonly waiting: Array<() => void> = []
  private readonly n: number

  constructor (n: number) {
    this.n = n
  }

  /**
   * Run `fn` in a slot. `signal`: a caller that gives up while it waits (out of time, cancelled) leaves the queue
   * at once, rejected with the signal's reason, and `fn` never runs; once in a slot, `fn` sees the signal itself.
   */
  async run<T> (fn: () => Promise<T>, signal?: AbortSignal): Promise<T> {
    // a task that ends hands its slot to the first waiter directly: a caller that comes between the wake-up and
    // the waiter's turn finds no free slot, so never more than `n` run at once
    if (this.active >= this.n) await this.queue(signal)
    else this.active++
    try {
      return await fn()
    } finally {
      const next = this.waiting.shift()
      if (next === undefined) this.active--
      else next()
    }
  }

  private async queue (signal: AbortSignal | undefined): Promise<void> {
    signal?.throwIfAborted()
    await new Promise<void>((resolve, reject) => {
      // handed a slot: the wake-up is the turn, whatever the signal does after
      const wake = (): void => {
        signal?.removeEventListener('abort', giveUp)
        resolve()
      }
      const giveUp = (): void => {
        const at = this.waiting.indexOf(wake)
        if (at < 0) return
        this.waiting.splice(at, 1)
        reject(signal?.reason)
      }
      this.waiting.push(wake)
      signal?.addEventListener('abort', giveUp, { once: true })
    })
  }
}

/** One Limiter of `n` per key, dropped when its last task ends: a share per key (a peer) besides any limit of all. */
export class KeyedLimiter {
  private readonly byKey = new Map<string, { limiter: Limiter, tasks: number }>()
  private readonly n: number

  constructor (n: number) {
    this.n = n
  }

  /** Keys with tasks queued or running. */
  get size (): number {
    return this.byKey.size
  }

  async run<T> (key: string, fn: () => Promise<T>): Promise<T> {
    let e = this.byKey.get(key)
    if (e === undefined) {
      e = { limiter: new Limiter(this.n), tasks: 0 }
      this.byKey.set(key, e)
    }
    e.tasks++
    try {
      return await e.limiter.run(fn)
    } finally {
      if (--e.tasks === 0 && this.byKey.get(key) === e) this.byKey.delete(key)
    }
  }
}

function noop (): void {}
