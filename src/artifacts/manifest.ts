/**
 * Content addressing of artifacts (protocols/artifact.md): an artifact is
 * cut into chunks of ARTIFACT_CHUNK_BYTES, each named by a CIDv1 (raw codec,
 * SHA-256 of its bytes); its manifest lists them in order with the total
 * size, and the artifact's id is the CIDv1 (json codec, SHA-256) of the
 * manifest's exact bytes. Whoever holds the id can check the manifest, and
 * with it every chunk, as it arrives.
 */
import { createHash } from 'node:crypto'
import { CID } from 'multiformats/cid'
import * as Digest from 'multiformats/hashes/digest'
import { ARTIFACT_CHUNK_BYTES, ARTIFACT_ID_MAX_CHARS, ARTIFACT_MANIFEST_MAX_BYTES, ARTIFACT_MAX_BYTES, ARTIFACT_MAX_CHUNKS } from '../constants.ts'
import { ArtifactCorruptError, InvalidRequestError } from '../errors.ts'
import { schema } from '../schema/validate.ts'

/** Multicodec codes: raw bytes (chunks) and JSON (manifests). */
export const RAW_CODEC = 0x55
export const JSON_CODEC = 0x0200
const SHA2_256 = 0x12

export interface Manifest {
  v: 1
  size: number
  chunk_bytes: number
  chunks: string[]
}

const isManifest = schema<Manifest>('aap:artifact#/definitions/Manifest')

export function sha256 (bytes: Uint8Array): Uint8Array {
  return createHash('sha256').update(bytes).digest()
}

export function cidOf (codec: number, bytes: Uint8Array): CID {
  return CID.createV1(codec, Digest.create(SHA2_256, sha256(bytes)))
}

/** Parse an artifact or chunk id; INVALID_REQUEST unless it is a CIDv1 with a SHA-256 of the expected codec. */
export function parseId (id: string, codec: number, what = 'artifact id'): CID {
  let cid: CID
  try {
    if (id.length > ARTIFACT_ID_MAX_CHARS) throw new Error('too long')
    cid = CID.parse(id)
  } catch (err) {
    throw new InvalidRequestError(`${what} "${id.slice(0, 80)}" is not a CID`, { reason: 'bad_id' }, { cause: err })
  }
  if (cid.version !== 1 || cid.code !== codec || cid.multihash.code !== SHA2_256) {
    throw new InvalidRequestError(`${what} ${id.slice(0, 80)} is not a CIDv1 of codec 0x${codec.toString(16)} with SHA-256`, { reason: 'bad_id' })
  }
  return cid
}

/** Chunks an artifact of `size` bytes has. */
export function chunkCount (size: number, chunkBytes = ARTIFACT_CHUNK_BYTES): number {
  return size === 0 ? 0 : Math.ceil(size / chunkBytes)
}

/** Bytes chunk `index` of a manifest holds. */
export function chunkLength (m: Manifest, index: number): number {
  const last = m.chunks.length - 1
  return index < last ? m.chunk_bytes : m.size - m.chunk_bytes * last
}

export function encodeManifest (m: Manifest): Uint8Array {
  return new TextEncoder().encode(JSON.stringify({ v: m.v, size: m.size, chunk_bytes: m.chunk_bytes, chunks: m.chunks }))
}

/**
 * Check manifest bytes against the artifact id that names them and parse
 * them. ARTIFACT_CORRUPT when the bytes are not the ones the id names or do
 * not make a consistent manifest.
 */
export function verifyManifest (id: CID, bytes: Uint8Array): Manifest {
  if (bytes.byteLength > ARTIFACT_MANIFEST_MAX_BYTES) throw new ArtifactCorruptError(`manifest of ${id.toString()} is over ${ARTIFACT_MANIFEST_MAX_BYTES} bytes`, { reason: 'bad_manifest', artifact: id.toString() })
  if (!sameDigest(id, sha256(bytes))) throw new ArtifactCorruptError(`manifest bytes do not hash to ${id.toString()}`, { reason: 'hash_mismatch', artifact: id.toString(), part: 'manifest' })
  let value: unknown
  try {
    value = JSON.parse(new TextDecoder('utf-8', { fatal: true }).decode(bytes))
  } catch (err) {
    throw new ArtifactCorruptError(`manifest of ${id.toString()} is not JSON: ${(err as Error).message}`, { reason: 'bad_manifest', artifact: id.toString() })
  }
  if (!isManifest(value)) throw new ArtifactCorruptError(`manifest of ${id.toString()} breaks its schema`, { reason: 'bad_manifest', artifact: id.toString() })
  const m = value
  if (m.size > ARTIFACT_MAX_BYTES || m.chunks.length > ARTIFACT_MAX_CHUNKS || m.chunks.length !== chunkCount(m.size, m.chunk_bytes)) {
    throw new ArtifactCorruptError(`manifest of ${id.toString()}: ${m.chunks.length} chunks of ${m.chunk_bytes} bytes cannot hold ${m.size} bytes`, { reason: 'bad_manifest', artifact: id.toString() })
  }
  // a chunk named at two indexes is fetched, stored and counted once: it must have one length at both
  const first = new Map<string, number>()
  for (let i = 0; i < m.chunks.length; i++) {
    let chunk: string
    try {
      chunk = parseId(m.chunks[i] ?? '', RAW_CODEC, 'chunk id').toString()
    } catch {
      throw new ArtifactCorruptError(`manifest of ${id.toString()} names a chunk that is not a raw SHA-256 CID`, { reason: 'bad_manifest', artifact: id.toString() })
    }
    const f = first.get(chunk)
    if (f === undefined) first.set(chunk, i)
    else if (chunkLength(m, f) !== chunkLength(m, i)) {
      throw new ArtifactCorruptError(`manifest of ${id.toString()} names one chunk at indexes ${f} and ${i}, which hold different lengths`, { reason: 'bad_manifest', artifact: id.toString() })
    }
  }
  return m
}

/**
 * For each index of a manifest, the first index that names the same chunk (by its canonical id, however the
 * manifest spelled it). A chunk named at several indexes is one file on disk, fetched once.
 */
export function firstIndexes (m: Manifest): number[] {
  const first = new Map<string, number>()
  return m.chunks.map((c, i) => {
    const chunk = CID.parse(c).toString()
    const f = first.get(chunk)
    if (f !== undefined) return f
    first.set(chunk, i)
    return i
  })
}

/** Bytes of a manifest's distinct chunks: each chunk once, at its first index's length (what they take on disk). */
export function distinctChunkBytes (m: Manifest, first = firstIndexes(m)): number {
  let bytes = 0
  for (let i = 0; i < first.length; i++) if (first[i] === i) bytes += chunkLength(m, i)
  return bytes
}

function sameDigest (cid: CID, digest: Uint8Array): boolean {
  const d = cid.multihash.digest
  if (d.byteLength !== digest.byteLength) return false
  for (let i = 0; i < d.byteLength; i++) if (d[i] !== digest[i]) return false
  return true
}

/** Check one chunk against its place in the manifest: ARTIFACT_CORRUPT (`truncated`, `oversized` or `hash_mismatch`) if it is not that chunk. */
export function verifyChunk (artifact: string, m: Manifest, index: number, bytes: Uint8Array): void {
  const expected = chunkLength(m, index)
  if (bytes.byteLength !== expected) {
    throw new ArtifactCorruptError(`chunk ${index} of ${artifact} has ${bytes.byteLength} bytes, not ${expected}`, {
      reason: bytes.byteLength < expected ? 'truncated' : 'oversized', artifact, index, bytes: bytes.byteLength, expected
    })
  }
  const id = CID.parse(m.chunks[index] ?? '')
  if (!sameDigest(id, sha256(bytes))) throw new ArtifactCorruptError(`chunk ${index} of ${artifact} does not hash to ${id.toString()}`, { reason: 'hash_mismatch', artifact, index })
}

/**
 * A chunk this node holds already (stored, or staged by a write) has one length, the bytes its id hashes: a manifest
 * that places it where another length belongs can never be whole, whatever a holder sends. ARTIFACT_CORRUPT
 * (`bad_manifest`) for the first such place; `sizeOf` gives the recorded size of the chunk at an index, undefined
 * when it is not held here.
 */
export function checkHeldLengths (artifact: string, m: Manifest, sizeOf: (index: number) => number | undefined): void {
  for (let i = 0; i < m.chunks.length; i++) {
    const size = sizeOf(i)
    if (size !== undefined && size !== chunkLength(m, i)) {
      throw new ArtifactCorruptError(`manifest of ${artifact} places a chunk of ${size} bytes at index ${i}, which holds ${chunkLength(m, i)}`, { reason: 'bad_manifest', artifact, index: i, bytes: size, expected: chunkLength(m, i) })
    }
  }
}
