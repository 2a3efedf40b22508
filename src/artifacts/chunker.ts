/**
 * An upload into the artifact store (store.ts): a byte stream is cut into
 * chunks of ARTIFACT_CHUNK_BYTES as it arrives, each staged as soon as it is
 * full (at most one chunk in memory), and the manifest that names them is
 * committed pinned: the node's own upload stays until it is removed on
 * purpose, a run's output while run outputs stay within their share (pins.ts).
 */
import { ARTIFACT_CHUNK_BYTES, ARTIFACT_MAX_BYTES } from '../constants.ts'
import { InvalidRequestError } from '../errors.ts'
import { JSON_CODEC, RAW_CODEC, cidOf, encodeManifest, type Manifest } from './manifest.ts'
import type { ArtifactStore } from './store.ts'

export async function putStream (store: ArtifactStore, source: AsyncIterable<Uint8Array>, pin: true | 'run-output'): Promise<{ id: string, size: number }> {
  const chunks: string[] = []
  const w = await store.begin()
  let buf = new Uint8Array(ARTIFACT_CHUNK_BYTES)
  let filled = 0
  let size = 0
  const flush = async (): Promise<void> => {
    const bytes = buf.subarray(0, filled)
    const cid = cidOf(RAW_CODEC, bytes).toString()
    await store.stage(w, cid, bytes)
    chunks.push(cid)
    // the chunk is on disk: a fresh buffer, since writeFile may still hold the old one's view
    buf = new Uint8Array(ARTIFACT_CHUNK_BYTES)
    filled = 0
  }
  try {
    for await (const piece of source) {
      let at = 0
      size += piece.byteLength
      if (size > ARTIFACT_MAX_BYTES) throw new InvalidRequestError(`an artifact may hold at most ${ARTIFACT_MAX_BYTES} bytes`, { reason: 'oversized', max_bytes: ARTIFACT_MAX_BYTES })
      while (at < piece.byteLength) {
        const take = Math.min(ARTIFACT_CHUNK_BYTES - filled, piece.byteLength - at)
        buf.set(piece.subarray(at, at + take), filled)
        filled += take
        at += take
        if (filled === ARTIFACT_CHUNK_BYTES) await flush()
      }
    }
    if (filled > 0) await flush()
    const manifest: Manifest = { v: 1, size, chunk_bytes: ARTIFACT_CHUNK_BYTES, chunks }
    const bytes = encodeManifest(manifest)
    const id = cidOf(JSON_CODEC, bytes).toString()
    await store.commit(w, id, bytes, pin)
    return { id, size }
  } finally {
    await store.abandon(w)
  }
}
