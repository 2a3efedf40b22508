/**
 * Frames of the aap stream protocols: an unsigned varint length, then UTF-8
 * JSON. The decoder checks each length prefix as soon as it is complete, so an
 * oversized frame is refused before its body is buffered. See
 * protocols/README.md.
 */
import type { StreamMessageEvent } from '@libp2p/interface'
import { ERROR_MESSAGE_MAX_CHARS, FRAME_ID_MAX, MAX_LENGTH_PREFIX_BYTES } from '../constants.ts'
import { AapError, InvalidRequestError, isErrorCode, type ErrorFrame } from '../errors.ts'
import { nestedDeeperThan } from '../util/json-depth.ts'
import { cutText } from '../util/text.ts'
import { FRAME_BUFFER_START_BYTES, FRAME_JSON_MAX_DEPTH } from './network-constants.ts'

const encoder = new TextEncoder()
const decoder = new TextDecoder('utf-8', { fatal: true })

/** Encode one frame: varint length + JSON. */
export function encodeFrame (value: unknown): Uint8Array {
  const json = JSON.stringify(value)
  // the body's exact size: a buffer of 3 bytes per UTF-16 unit (the most a unit can take) held three times an
  // ASCII frame's bytes for as long as the frame waited to be sent, while every bound on unread answers counted
  // its length (session 51's review). Then the body after room for the longest prefix
  const room = MAX_LENGTH_PREFIX_BYTES
  const buf = new Uint8Array(room + Buffer.byteLength(json, 'utf8'))
  const { written } = encoder.encodeInto(json, buf.subarray(room))
  let n = written
  let prefixLen = 1
  while (n >= 0x80) { prefixLen++; n = Math.floor(n / 128) }
  let at = room - prefixLen
  const start = at
  n = written
  while (n >= 0x80) {
    buf[at++] = (n & 0x7f) | 0x80
    n = Math.floor(n / 128)
  }
  buf[at] = n
  return buf.subarray(start, room + written)
}

/** The length N of the body of a frame encodeFrame made: what a protocol's frame limit bounds (protocols/README.md), its prefix not counted. */
export function frameBodyBytes (frame: Uint8Array): number {
  let prefix = 1
  while (prefix < frame.byteLength && ((frame[prefix - 1] ?? 0) & 0x80) !== 0) prefix++
  return frame.byteLength - prefix
}

/** The varint length prefix of a frame of `length` bytes (for binary frames sent after it). */
export function lengthPrefix (length: number): Uint8Array {
  const out: number[] = []
  let n = length
  while (n >= 0x80) {
    out.push((n & 0x7f) | 0x80)
    n = Math.floor(n / 128)
  }
  out.push(n)
  return Uint8Array.from(out)
}

/** Why a byte stream stopped making sense as frames. */
export class FramingError extends Error {
  readonly reason: 'oversized' | 'bad_prefix'
  constructor (reason: 'oversized' | 'bad_prefix', message: string) {
    super(message)
    this.reason = reason
  }
}

/**
 * Splits a byte stream into frames. Checks each length prefix as soon as it
 * is complete, so an oversized frame is refused before its body is buffered.
 */
export class FrameDecoder {
  private readonly maxFrameBytes: number
  /**
   * The frame that has started, once its length prefix is known: its body's
   * length and the bytes of it here so far, in a buffer that doubles as they
   * come (to the body's length at most). Each byte is copied about twice at
   * most: a frame dribbled in one byte at a time costs no copy of all of it
   * per byte, and a prefix alone allocates little.
   */
  private body: Uint8Array | undefined
  private bodyLength = 0
  private filled = 0
  /** The length prefix of that frame, read already: it counts as buffered (a frame has started). */
  private prefixBytes = 0
  /** The start of a frame whose length prefix is not complete yet (fewer than MAX_LENGTH_PREFIX_BYTES). */
  private head: Uint8Array = EMPTY

  constructor (maxFrameBytes: number) {
    this.maxFrameBytes = maxFrameBytes
  }

  /** Bytes of a frame that has started but is not complete. */
  get buffered (): number {
    return this.body !== undefined ? this.prefixBytes + this.filled : this.head.byteLength
  }

  /** Append bytes; returns every frame they complete. Throws FramingError. */
  push (chunk: Uint8Array): Uint8Array[] {
    const { frames, error } = this.read(chunk)
    if (error !== undefined) throw error
    return frames
  }

  /**
   * Append bytes; returns every frame they complete before the framing broke,
   * and why it broke (then nothing more can be read). The frames of a chunk
   * that precede a bad length prefix are whole requests: a responder answers
   * them whatever the chunking, and only then says the framing is lost.
   */
  read (chunk: Uint8Array): { frames: Uint8Array[], error?: FramingError } {
    try {
      return { frames: this.decode(chunk) }
    } catch (err) {
      if (!(err instanceof FramingError)) throw err
      const frames = this.decoded
      this.decoded = []
      this.body = undefined
      this.filled = 0
      this.head = EMPTY
      return { frames, error: err }
    }
  }

  /** Frames completed by the chunk being decoded (kept when a later prefix in it is bad). */
  private decoded: Uint8Array[] = []

  private decode (chunk: Uint8Array): Uint8Array[] {
    const frames: Uint8Array[] = []
    this.decoded = frames
    let rest = chunk
    if (this.body !== undefined) {
      const take = Math.min(rest.byteLength, this.bodyLength - this.filled)
      this.fill(rest.subarray(0, take))
      rest = rest.subarray(take)
      if (this.filled < this.bodyLength) {
        this.decoded = []
        return frames
      }
      frames.push(this.body.byteLength === this.bodyLength ? this.body : this.body.subarray(0, this.bodyLength))
      this.body = undefined
      this.filled = 0
    } else if (this.head.byteLength > 0) {
      const joined = new Uint8Array(this.head.byteLength + rest.byteLength)
      joined.set(this.head, 0)
      joined.set(rest, this.head.byteLength)
      rest = joined
      this.head = EMPTY
    }
    this.scan(rest, frames)
    this.decoded = []
    return frames
  }

  /** The whole frames of `buf` into `frames`; a frame it only starts is kept (copied: the transport may reuse its chunk). */
  private scan (buf: Uint8Array, frames: Uint8Array[]): void {
    let at = 0
    while (at < buf.byteLength) {
      // read the varint length
      let len = 0
      let shift = 1
      let i = at
      let complete = false
      while (i < buf.byteLength) {
        const b = buf[i] ?? 0
        len += (b & 0x7f) * shift
        i++
        if ((b & 0x80) === 0) { complete = true; break }
        shift *= 128
        if (i - at >= MAX_LENGTH_PREFIX_BYTES) throw new FramingError('bad_prefix', `length prefix longer than ${MAX_LENGTH_PREFIX_BYTES} bytes`)
      }
      if (!complete) {
        this.head = buf.slice(at)
        return
      }
      if (len > this.maxFrameBytes) throw new FramingError('oversized', `frame of ${len} bytes exceeds ${this.maxFrameBytes} bytes`)
      if (buf.byteLength - i < len) {
        this.bodyLength = len
        this.prefixBytes = i - at
        this.body = new Uint8Array(Math.min(len, Math.max(FRAME_BUFFER_START_BYTES, 2 * (buf.byteLength - i))))
        this.filled = 0
        this.fill(buf.subarray(i))
        return
      }
      frames.push(buf.subarray(i, i + len))
      at = i + len
    }
  }

  /** Append to the body, doubling its buffer (to bodyLength at most) when it is full. */
  private fill (bytes: Uint8Array): void {
    if (bytes.byteLength === 0 || this.body === undefined) return
    if (this.filled + bytes.byteLength > this.body.byteLength) {
      const grown = new Uint8Array(Math.min(this.bodyLength, Math.max(2 * this.body.byteLength, this.filled + bytes.byteLength)))
      grown.set(this.body.subarray(0, this.filled), 0)
      this.body = grown
    }
    this.body.set(bytes, this.filled)
    this.filled += bytes.byteLength
  }
}

const EMPTY = new Uint8Array(0)

export function parseJson (bytes: Uint8Array): unknown {
  let value: unknown
  try {
    value = JSON.parse(decoder.decode(bytes))
  } catch (err) {
    throw new InvalidRequestError('frame is not UTF-8 JSON', { reason: 'not_json' }, { cause: err })
  }
  // JSON.parse takes thousands of levels; the node's own encoders (JSON.stringify, the canonical form of a
  // signed record) run out of stack a little further on, where a stranger's 12 KiB of brackets would turn a
  // request into an INTERNAL error, or worse, later
  if (nestedDeeperThan(value, FRAME_JSON_MAX_DEPTH)) {
    throw new FrameTooDeepError(isRecord(value) && isFrameId(value.id) ? value.id : null)
  }
  return value
}

/**
 * A frame nested past FRAME_JSON_MAX_DEPTH (INVALID_REQUEST, reason too_deep).
 * It parsed, so its id is known when it has one: a responder answers under
 * it, and a caller fails that one call, not its whole session.
 */
export class FrameTooDeepError extends InvalidRequestError {
  readonly frameId: number | null

  constructor (frameId: number | null) {
    super(`frame is nested deeper than ${FRAME_JSON_MAX_DEPTH} levels`, { reason: 'too_deep', max: FRAME_JSON_MAX_DEPTH })
    this.frameId = frameId
  }
}

/** The id to answer a frame parseJson refused under: its own when it was too deep, else null. */
export function refusedFrameId (err: unknown): number | null {
  return err instanceof FrameTooDeepError ? err.frameId : null
}

export function isRecord (v: unknown): v is Record<string, unknown> {
  return typeof v === 'object' && v !== null && !Array.isArray(v)
}

export function isFrameId (v: unknown): v is number {
  return typeof v === 'number' && Number.isInteger(v) && v >= 0 && v <= FRAME_ID_MAX
}

export function chunkOf (evt: StreamMessageEvent): Uint8Array {
  const data = evt.data
  return data instanceof Uint8Array ? data : data.subarray()
}

/** An error as a frame, its message cut to ERROR_MESSAGE_MAX_CHARS (never between the halves of a surrogate pair). */
export function errorFrame (err: AapError): ErrorFrame {
  const frame = err.toFrame()
  frame.message = cutText(frame.message, ERROR_MESSAGE_MAX_CHARS)
  return frame
}

/** The AapError an answer's error frame carries; a malformed one is INVALID_REQUEST (reason bad_response). */
export function errorFromFrame (value: unknown): AapError {
  if (isRecord(value) && isErrorCode(value.code) && typeof value.message === 'string') {
    // cut as errorFrame cuts: a message kept or passed on holds no lone surrogate
    const frame: ErrorFrame = { code: value.code, message: cutText(value.message, ERROR_MESSAGE_MAX_CHARS) }
    if (isRecord(value.details)) frame.details = value.details
    return AapError.fromFrame(frame)
  }
  return new InvalidRequestError('peer sent a malformed error frame', { reason: 'bad_response' })
}

/**
 * A response frame from `peer` read as an envelope with a frame id, or the
 * error that ends the stream: INVALID_REQUEST (bad_response) for a frame that
 * is not JSON or not an envelope, or the AapError of a stream-level error
 * frame (id null: the responder gave up on the stream).
 */
export function responseEnvelope (bytes: Uint8Array, peer: string): (Record<string, unknown> & { id: number }) | AapError {
  let res: unknown
  try {
    res = parseJson(bytes)
  } catch (err) {
    if (!(err instanceof FrameTooDeepError)) return new InvalidRequestError(`agent ${peer} sent a frame that is not JSON`, { reason: 'bad_response' })
    // its own reason: the caller tells an answer too deep to read from its request refused as too deep
    const refused = new InvalidRequestError(`agent ${peer} answered with ${err.message}`, { ...err.details, reason: 'answer_too_deep' })
    // too deep to take, but its id is known: that one call fails, the session goes on
    return err.frameId === null ? refused : { id: err.frameId, ok: false, error: errorFrame(refused) }
  }
  if (!isRecord(res) || (res.id !== null && !isFrameId(res.id))) {
    return new InvalidRequestError(`agent ${peer} sent a malformed response frame`, { reason: 'bad_response' })
  }
  if (res.id === null) return errorFromFrame(res.error)
  return res as Record<string, unknown> & { id: number }
}
