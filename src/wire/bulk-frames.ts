/**
 * The bulk caller's frame reader (bulk.ts): the answers of a bulk stream, where a binary frame may be as long as
 * the session's frame limit (a MiB).
 */
import { MAX_LENGTH_PREFIX_BYTES } from '../constants.ts'
import { FramingError } from './framing.ts'

const NONE = new Uint8Array(0)

/**
 * Reads frames into buffers that grow with the bytes that came, never past the announced length: reserving the
 * whole announced length at its prefix let a responder that announces a MiB and drips it in make each session
 * hold a MiB. A frame whose bytes have all come in the message being read is given one buffer of its full length,
 * filled in place (a binary frame of a MiB is not re-concatenated per piece); one spread over messages has its
 * buffer at least doubled at each growth, so it is copied about once more in all, and holds less than twice the
 * bytes that came. A message that comes as a list of pieces (yamux hands on its frames' Noise messages so, up to
 * the stream's window) is read piece by piece: joining it first copied each MiB once more.
 */
export class FrameReader {
  private prefix: number[] = []
  /** The frame being read (NONE while a prefix is read); its length is what has been reserved, not announced. */
  private body = NONE
  /** The announced length of the frame being read, -1 while a prefix is read. */
  private need = -1
  private filled = 0
  private readonly maxFrameBytes: number

  constructor (maxFrameBytes: number) {
    this.maxFrameBytes = maxFrameBytes
  }

  /** Bytes this reader holds for the frame being read. */
  get heldBytes (): number { return this.body.byteLength }

  /** Read a message; a message in pieces is read piece by piece, never joined first. */
  push (data: Uint8Array | Iterable<Uint8Array>, out: (frame: Uint8Array) => void): void {
    if (data instanceof Uint8Array) {
      this.pushPiece(data, 0, out)
      return
    }
    const pieces = [...data]
    let after = pieces.reduce((n, p) => n + p.byteLength, 0)
    for (const piece of pieces) {
      after -= piece.byteLength
      this.pushPiece(piece, after, out)
    }
  }

  /** Read one piece; `after` is the bytes of the message that follow it (they have come too). */
  private pushPiece (chunk: Uint8Array, after: number, out: (frame: Uint8Array) => void): void {
    let at = 0
    while (at < chunk.byteLength) {
      if (this.need < 0) {
        const b = chunk[at++] ?? 0
        this.prefix.push(b)
        if ((b & 0x80) !== 0) {
          if (this.prefix.length >= MAX_LENGTH_PREFIX_BYTES) throw new FramingError('bad_prefix', `length prefix longer than ${MAX_LENGTH_PREFIX_BYTES} bytes`)
          continue
        }
        let len = 0
        let shift = 1
        for (const p of this.prefix) { len += (p & 0x7f) * shift; shift *= 128 }
        this.prefix = []
        if (len > this.maxFrameBytes) throw new FramingError('oversized', `frame of ${len} bytes exceeds ${this.maxFrameBytes} bytes`)
        this.need = len
        this.filled = 0
      } else {
        const take = Math.min(this.need - this.filled, chunk.byteLength - at)
        if (this.filled + take > this.body.byteLength) {
          // room for all of the message that has come (a whole frame: its full length at once), or twice as much
          this.grow(Math.min(this.need, Math.max(this.filled + chunk.byteLength - at + after, this.body.byteLength * 2)))
        }
        this.body.set(chunk.subarray(at, at + take), this.filled)
        this.filled += take
        at += take
      }
      if (this.need >= 0 && this.filled === this.need) {
        // never grown past the announced length, so the frame is the whole of its own buffer
        const frame = this.need === 0 ? new Uint8Array(0) : this.body
        this.body = NONE
        this.need = -1
        out(frame)
      }
    }
  }

  private grow (bytes: number): void {
    const body = new Uint8Array(bytes)
    body.set(this.body.subarray(0, this.filled))
    this.body = body
  }
}
