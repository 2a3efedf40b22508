/**
 * Write coalescing for one stream (see Outbox).
 */
import type { Logger } from '../logger.ts'
import type { Stream } from '@libp2p/interface'
import { OUTBOX_JOIN_MAX_BYTES } from './network-constants.ts'

/**
 * The frames one stream sends. Frames queued in the same run of the
 * microtask queue leave as one write (one yamux frame, one Noise encryption,
 * one socket write) instead of one each (a large frame is not copied into
 * the joined buffer: sendAll): under load, answers released by one
 * group commit, or calls issued as earlier answers arrive, share a write.
 * While the stream waits to drain, frames queue behind it.
 */
export class Outbox {
  private readonly stream: Stream
  private readonly log: Logger
  private frames: Uint8Array[] = []
  private size = 0
  private batch: PromiseWithResolvers<boolean> | undefined
  private draining: Promise<void> | undefined
  private readonly onDrained: (() => void) | undefined

  /** `onDrained`: told once the stream drained and what waited for it was handed on. */
  constructor (stream: Stream, log: Logger, onDrained?: () => void) {
    this.stream = stream
    this.log = log
    this.onDrained = onDrained
  }

  /** The stream's buffer is full and what is sent now waits for it to drain (the peer reads slower than it asks). */
  get waiting (): boolean {
    return this.draining !== undefined
  }

  /** Milliseconds the stream has waited to drain without a drain (0 while it is not waiting). */
  waitingFor (): number {
    return this.draining === undefined ? 0 : Date.now() - this.drainingSince
  }

  private drainingSince = 0

  /** Bytes sent and not yet passed on to the muxer: queued here, or in the stream's own write buffer. */
  get heldBytes (): number {
    return this.size + this.stream.writeBufferLength
  }

  /** Resolves true once the frame is handed to the stream, false if the stream cannot take it. */
  async send (frame: Uint8Array): Promise<boolean> {
    if (this.batch === undefined) {
      this.batch = Promise.withResolvers<boolean>()
      queueMicrotask(() => { this.flush() })
    }
    this.frames.push(frame)
    this.size += frame.byteLength
    return this.batch.promise
  }

  /** Resolves once nothing is queued or waiting for a drain. */
  async whenSent (): Promise<void> {
    while (this.batch !== undefined || this.draining !== undefined) {
      if (this.draining !== undefined) {
        await this.draining
      } else {
        const b = this.batch
        this.flush()
        await b?.promise
      }
    }
  }

  /**
   * Resolves once the stream's own write buffer is empty too: every byte
   * sent has gone on to the muxer (or the stream ended). `whenSent` resolves
   * at the first drain, when most of a large answer may still be buffered.
   */
  async whenEmpty (): Promise<void> {
    await this.whenSent()
    const stream = this.stream
    if (stream.writeBufferLength === 0 || stream.status !== 'open') return
    await new Promise<void>(resolve => {
      const done = (): void => {
        stream.removeEventListener('idle', done)
        stream.removeEventListener('close', done)
        resolve()
      }
      stream.addEventListener('idle', done)
      stream.addEventListener('close', done)
    })
  }

  /**
   * Small frames are joined into one buffer per run of them; a frame of
   * OUTBOX_JOIN_MAX_BYTES or more is handed on as it is, not copied into a
   * joined buffer. All of it goes to the stream in this one synchronous turn,
   * in order, so nothing else is written between the frames. False when the
   * stream must drain before it takes more.
   */
  private sendAll (frames: Uint8Array[], size: number): boolean {
    if (frames.length === 1 && frames[0] !== undefined) return this.stream.send(frames[0])
    if (size < OUTBOX_JOIN_MAX_BYTES) return this.stream.send(join(frames, size))
    let ok = true
    let run: Uint8Array[] = []
    let runBytes = 0
    const sendRun = (): void => {
      if (run.length > 0) ok = this.stream.send(run.length === 1 ? run[0]! : join(run, runBytes))
      run = []
      runBytes = 0
    }
    for (const f of frames) {
      if (f.byteLength < OUTBOX_JOIN_MAX_BYTES) {
        run.push(f)
        runBytes += f.byteLength
        continue
      }
      sendRun()
      ok = this.stream.send(f)
    }
    sendRun()
    return ok
  }

  /** Hand everything queued to the stream now (unless it waits for a drain). */
  flush (): void {
    const batch = this.batch
    if (batch === undefined) return
    if (this.draining !== undefined) return // the drain will flush
    const frames = this.frames
    const size = this.size
    this.batch = undefined
    this.frames = []
    this.size = 0
    if (this.stream.writeStatus !== 'writable') {
      batch.resolve(false)
      return
    }
    try {
      if (this.sendAll(frames, size)) {
        batch.resolve(true)
        return
      }
    } catch (err) {
      // the senders learn it from `false`; why, only the log knows
      this.log.debug({ err }, 'a stream refused a write')
      batch.resolve(false)
      return
    }
    // accepted, but the stream's buffer is full: what comes next waits for the drain
    batch.resolve(true)
    this.drainingSince = Date.now()
    this.draining = nextDrain(this.stream).then(() => {
      this.draining = undefined
      this.flush()
      this.onDrained?.()
    }, (err: unknown) => {
      this.log.debug({ err }, 'a stream closed while its writes waited for it to drain')
      this.draining = undefined
      this.batch?.resolve(false)
      this.batch = undefined
      this.frames = []
      this.size = 0
    })
  }
}

/**
 * The stream's next 'drain' after which it can take more (rejects when it
 * closes first). Not `stream.onDrain()`: @libp2p/utils 7.4 makes its
 * promise once and never clears it, so after a stream's first drain every
 * later call resolved at once, even while its buffer was full, and a caller
 * that never read its answers had them all queued in memory. Not any
 * 'drain' either: the muxer sends one to every stream of the connection
 * when the connection drains (onMuxerDrain), also to a stream whose peer
 * gave it no window. The stream's own drain listener (registered first)
 * clears writableNeedsDrain and retries its buffer in a microtask: only if
 * the stream still needs no drain after that has it drained.
 */
async function nextDrain (stream: Stream): Promise<void> {
  if (stream.status !== 'open' || stream.writeStatus !== 'writable') throw new Error(`the stream is ${stream.status}, its writes ${stream.writeStatus}`)
  if (!stream.writableNeedsDrain) return
  await new Promise<void>((resolve, reject) => {
    const drained = (): void => {
      queueMicrotask(() => {
        if (stream.writableNeedsDrain) return
        off()
        resolve()
      })
    }
    const closed = (evt: Event): void => { off(); reject((evt as Event & { error?: Error }).error ?? new Error('the stream closed before it drained')) }
    const off = (): void => {
      stream.removeEventListener('drain', drained)
      stream.removeEventListener('close', closed)
    }
    stream.addEventListener('drain', drained)
    stream.addEventListener('close', closed)
  })
}

/** `frames`, `bytes` in all, as one buffer. */
function join (frames: Uint8Array[], bytes: number): Uint8Array {
  const out = new Uint8Array(bytes)
  let at = 0
  for (const f of frames) { out.set(f, at); at += f.byteLength }
  return out
}
