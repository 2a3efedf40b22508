/**
 * Starts and stops of a service (the MeshNode) called while others are under
 * way, and its calls that need it started.
 */

type Kind = 'start' | 'stop'

export interface LifecycleSteps {
  start: () => Promise<void>
  stop: () => Promise<void>
  /** What a call fails with while the service is stopped or stopping (`cause`: what the call met as it stopped). */
  refused: (what: string, cause?: unknown) => Error
}

/**
 * One queue of starts and stops: each runs after every one called before it
 * has ended (whatever its outcome), so the last call wins: a stop, then a
 * start, then a stop leave the service stopped, and a start, a stop and a
 * start leave it started. A call of the same kind as the last one queued
 * (running or waiting) is that call and hears its outcome: two starts at
 * once are one start, and every stop waits for the one stop under way.
 */
export class Lifecycle {
  /** started: set by the service's start once its parts run, cleared as its stop begins; stops: how many stops began. */
  readonly state = { started: false, stops: 0 }
  private readonly steps: LifecycleSteps
  private last?: { kind: Kind, done: Promise<void> }
  private chain: Promise<void> = Promise.resolve()

  constructor (steps: LifecycleSteps) {
    this.steps = steps
  }

  async start (): Promise<void> { return this.queue('start') }

  async stop (): Promise<void> { return this.queue('stop') }

  /**
   * A call that needs the service started: refused when it is not, and an
   * error the call meets once the service began to stop while it ran is
   * refused too, with that error as the cause.
   */
  async live<T> (what: string, call: () => Promise<T>): Promise<T> {
    if (!this.state.started) throw this.steps.refused(what)
    const stops = this.state.stops
    try {
      return await call()
    } catch (err) {
      if (this.state.started && this.state.stops === stops) throw err
      throw this.steps.refused(what, err)
    }
  }

  private async queue (kind: Kind): Promise<void> {
    if (this.last?.kind === kind) return this.last.done
    const step = this.steps[kind]
    // the one before ends first, whatever its outcome (its own caller hears it)
    const done = this.chain.then(step)
    const entry = { kind, done }
    this.last = entry
    const ended = (): void => { if (this.last === entry) this.last = undefined }
    this.chain = done.then(ended, ended)
    return done
  }
}

/** A part of a started node (a node never started has none: a plain error, a programming mistake). */
export function started<T> (part: T | undefined): T {
  if (part === undefined) throw new Error('node not started')
  return part
}
