/**
 * What a peer can send to /aap/artifact/0.1.0 that our fetcher never would:
 * each gets a typed error frame (or the stream is refused with one), never a
 * crash or a hang, and the holder keeps serving honest fetchers afterwards.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { ARTIFACT_MAX_PIPELINED_REQUESTS, ARTIFACT_MAX_REQUEST_FRAME_BYTES, ARTIFACT_PROTOCOL } from '../src/constants.ts'
import { JSON_CODEC, cidOf } from '../src/artifacts/manifest.ts'
import type { FilePart } from '../src/artifacts/types.ts'
import type { MeshNode } from '../src/node.ts'
import { encodeFrame } from '../src/wire/framing.ts'
import { rawCall } from '../src/wire/raw.ts'
import { startMesh, stopAll } from './helpers.ts'

describe('/aap/artifact/0.1.0 against bad requests', () => {
  let nodes: MeshNode[] = []
  let holder: MeshNode, peer: MeshNode
  let part: FilePart
  const call = async (type: string, body: unknown, bytes?: Uint8Array): ReturnType<typeof rawCall> =>
    rawCall(peer.host, holder.host.peerId, ARTIFACT_PROTOCOL, type, body, bytes === undefined ? {} : { bytes })

  beforeAll(async () => {
    nodes = await startMesh(2)
    ;[holder, peer] = nodes as [MeshNode, MeshNode]
    part = await holder.artifacts.put(new Uint8Array(3000).fill(7), { media_type: 'application/octet-stream', name: 'sevens' })
  })
  afterAll(async () => { await stopAll(nodes) })

  it('answers a manifest request with the header, then the bytes that hash to the id', async () => {
    const f = await call('manifest', { artifact: part.artifact })
    expect(f).toMatchObject({ id: 1, ok: true, body: { artifact: part.artifact } })
    expect(typeof (f as unknown as { data: number }).data).toBe('number')
  })

  it('refuses, with typed errors, what the schema or the store rules out', async () => {
    expect((await call('fetch', { artifact: part.artifact })).error).toMatchObject({ code: 'INVALID_REQUEST', details: { reason: 'unknown_type' } })
    expect((await call('chunk', { artifact: 'not-a-cid', index: 0 })).error).toMatchObject({ code: 'INVALID_REQUEST', details: { reason: 'bad_id' } })
    expect((await call('chunk', { artifact: part.artifact, index: -1 })).error?.code).toBe('INVALID_REQUEST')
    expect((await call('chunk', { artifact: part.artifact, index: 5 })).error).toMatchObject({ code: 'INVALID_REQUEST', details: { reason: 'bad_index', chunks: 1 } })
    expect((await call('chunk', { artifact: part.artifact, index: 0, extra: 1 })).error?.code).toBe('INVALID_REQUEST')
    // a chunk id where an artifact id belongs is the wrong codec
    const chunkId = (await holder.artifacts.local(part.artifact))?.chunks[0] ?? ''
    expect((await call('manifest', { artifact: chunkId })).error).toMatchObject({ code: 'INVALID_REQUEST', details: { reason: 'bad_id' } })
    const nobodys = cidOf(JSON_CODEC, new TextEncoder().encode('{}')).toString()
    expect((await call('manifest', { artifact: nobodys })).error?.code).toBe('ARTIFACT_NOT_FOUND')
  })

  it('refuses an oversized request frame and a flood of queued requests on one stream', async () => {
    const big = await call('manifest', { artifact: 'x'.repeat(ARTIFACT_MAX_REQUEST_FRAME_BYTES) })
    expect(big).toMatchObject({ id: null, ok: false, error: { code: 'INVALID_REQUEST', details: { reason: 'oversized' } } })
    // ids from 2: the only answer with id 1 or null the raw call can take is the stream-level refusal
    const frames = Array.from({ length: ARTIFACT_MAX_PIPELINED_REQUESTS * 2 }, (_, i) => encodeFrame({ id: i + 2, type: 'chunk', body: { artifact: part.artifact, index: 0 } }))
    const flood = new Uint8Array(frames.reduce((n, f) => n + f.byteLength, 0))
    let at = 0
    for (const f of frames) { flood.set(f, at); at += f.byteLength }
    const refused = await call('chunk', {}, flood)
    expect(refused).toMatchObject({ id: null, ok: false, error: { code: 'INVALID_REQUEST', details: { reason: 'too_many_requests', limit: ARTIFACT_MAX_PIPELINED_REQUESTS } } })
  })

  it('still serves an honest fetcher afterwards', async () => {
    const m = await peer.artifacts.fetch(part.artifact, { holders: [holder.agentId] })
    expect(m.size).toBe(3000)
    const { chunks } = await peer.artifacts.open(part.artifact)
    const first = await chunks.next()
    expect((first.value as Uint8Array).every(b => b === 7)).toBe(true)
  })
})
