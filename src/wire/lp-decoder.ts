/**
 * Noise's frame decoder stops at the end of its buffer without throwing.
 *
 * @chainsafe/libp2p-noise (17.x) cuts its 2-byte length-prefixed frames out
 * of each socket read with @libp2p/utils' LengthPrefixedDecoder. That decoder
 * learns that the buffer holds no further frame by calling the length decoder
 * and catching the RangeError it throws; Noise's uint16 decoder reads an
 * empty Uint8ArrayList through a DataView, so every read of a whole frame
 * ends in a native RangeError with its stack trace. In a profile of the
 * 100-node events benchmark that exception was 9 % of a subscriber process's
 * busy time (each gossip message forwarded is one read on each receiver).
 *
 * This replaces `LengthPrefixedDecoder.prototype.decode` with the same loop
 * that first checks the buffer holds at least the shortest length prefix
 * (`encodingLength(0)`: 2 bytes for Noise, 1 for a varint). A shorter buffer
 * waits for the next read, as it did when the decoder threw; a prefix that
 * is longer and still incomplete (a split varint) goes through the length
 * decoder's RangeError as before. Frames, limits and errors are unchanged:
 * test/wire-lp-decoder.test.ts decodes random frames cut at random places
 * with both versions and compares them.
 *
 * The patch reaches into fields the class keeps private; the pinned
 * version's fields are checked when the module loads.
 */
import { InvalidParametersError } from '@libp2p/interface'
import { InvalidMessageLengthError, LengthPrefixedDecoder } from '@libp2p/utils'

/** The byte list the decoder buffers into and yields (uint8arraylist, which @libp2p/utils does not re-export). */
type Uint8ArrayList = ReturnType<LengthPrefixedDecoder['decode']> extends Generator<infer T> ? T : never

/** What the patched method reads of a LengthPrefixedDecoder (private in its types). */
interface DecoderFields {
  buffer: Uint8ArrayList
  maxBufferSize: number
  maxDataLength: number
  lengthDecoder: (data: Uint8ArrayList) => number
  encodingLength: (length: number) => number
}

type Decode = (this: DecoderFields, buf: Uint8Array | Uint8ArrayList) => Generator<Uint8ArrayList>

export interface LpDecoderStats {
  /** Reads that ended with fewer bytes than the shortest prefix, so no exception was thrown to find that out. */
  stoppedEarly: number
}

/** Process-wide counts, for tests. */
export const lpDecoderStats: LpDecoderStats = { stoppedEarly: 0 }

const proto = LengthPrefixedDecoder.prototype as unknown as { decode: Decode }
const PATCHED = Symbol.for('aap-mesh.lp-decoder-no-throw')

/** The library's own decode, kept for the comparison test. */
export const originalDecode: Decode = proto.decode

function * decode (this: DecoderFields, buf: Uint8Array | Uint8ArrayList): Generator<Uint8ArrayList> {
  const buffer = this.buffer
  buffer.append(buf)
  if (buffer.byteLength > this.maxBufferSize) {
    throw new InvalidParametersError(`Buffer length limit exceeded - ${buffer.byteLength}/${this.maxBufferSize}`)
  }
  const shortestPrefix = this.encodingLength(0)
  while (true) {
    if (buffer.byteLength < shortestPrefix) {
      lpDecoderStats.stoppedEarly++
      return
    }
    let dataLength: number
    try {
      dataLength = this.lengthDecoder(buffer)
    } catch (err) {
      // not enough bytes for the whole prefix: wait for the next read
      if (err instanceof RangeError) return
      throw err
    }
    if (dataLength < 0 || dataLength > this.maxDataLength) throw new InvalidMessageLengthError('Invalid message length')
    const chunkLength = this.encodingLength(dataLength) + dataLength
    if (buffer.byteLength < chunkLength) return
    const frame = buffer.sublist(chunkLength - dataLength, chunkLength)
    buffer.consume(chunkLength)
    if (frame.byteLength > 0) yield frame
  }
}

function install (): void {
  const marked = proto as unknown as Record<symbol, boolean>
  if (marked[PATCHED] === true) return
  const probe = new LengthPrefixedDecoder() as unknown as Partial<DecoderFields>
  if (typeof proto.decode !== 'function' || probe.buffer === undefined || typeof probe.lengthDecoder !== 'function' ||
    typeof probe.encodingLength !== 'function' || typeof probe.maxBufferSize !== 'number' || typeof probe.maxDataLength !== 'number') {
    throw new Error('@libp2p/utils LengthPrefixedDecoder has changed: the patch in src/wire/lp-decoder.ts needs updating for this version')
  }
  proto.decode = decode
  marked[PATCHED] = true
}

install()
