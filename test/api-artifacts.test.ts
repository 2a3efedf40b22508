/**
 * Artifacts through the local API and the CLI: bytes go in and out as
 * streams (live memory sampled as they flow stays far below their size), a
 * node fetches from a holder when it lacks the artifact, errors are the
 * documented JSON ones, and `aap-mesh artifact put/get` moves a file.
 */
import { createHash } from 'node:crypto'
import { readFile, writeFile } from 'node:fs/promises'
import { join } from 'node:path'
import { setFlagsFromString } from 'node:v8'
import { runInNewContext } from 'node:vm'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { ApiClient, ApiError } from '../src/api/client.ts'
import { newToken } from '../src/api/files.ts'
import { responseValidator } from '../src/api/openapi.ts'
import { startApiServer, type ApiServer } from '../src/api/server.ts'
import type { FilePart } from '../src/artifacts/types.ts'
import { JSON_CODEC, cidOf } from '../src/artifacts/manifest.ts'
import type { MeshNode } from '../src/node.ts'
import { raw } from './api-helpers.ts'
import { cli, TempDirs } from './cli-helpers.ts'
import { startMesh, stopAll } from './helpers.ts'

setFlagsFromString('--expose-gc')
const gc = runInNewContext('gc') as () => void

const MIB = 1024 * 1024
/** A well-formed artifact id nobody holds. */
const missing = cidOf(JSON_CODEC, new TextEncoder().encode('nobody has this')).toString()
/**
 * Large enough that holding most of it cannot pass for streaming: what a transfer holds at once is the windows of
 * the way (the fetch window, the chunks on their way through Noise and yamux, the HTTP buffers at both ends), which
 * do not grow with the artifact. Until session 30 the client's upload went through undici's fetch, which read the
 * body ahead of the socket: 40 MiB held 24 to 29 MiB at its peak, 96 MiB about 70.
 */
const SIZE = 96 * MIB

function liveBytes (): number {
  gc()
  const m = process.memoryUsage()
  return m.heapUsed + m.external
}

/** Pseudo-random bytes made as they are read; `onMiB` is called after each MiB. */
async function * bytes (size: number, seed: number, onMiB: () => void = () => {}): AsyncGenerator<Uint8Array> {
  let x = seed | 1
  const piece = 64 * 1024
  for (let done = 0; done < size; done += piece) {
    const words = new Uint32Array(piece / 4)
    for (let i = 0; i < words.length; i++) { x ^= x << 13; x ^= x >>> 17; x ^= x << 5; words[i] = x >>> 0 }
    yield new Uint8Array(words.buffer, 0, Math.min(piece, size - done))
    if ((done + piece) % MIB === 0) onMiB()
  }
}

async function sha (source: AsyncIterable<Uint8Array>): Promise<string> {
  const h = createHash('sha256')
  for await (const c of source) h.update(c)
  return h.digest('hex')
}

describe('artifacts through the API and the CLI', () => {
  let nodes: MeshNode[] = []
  let a: MeshNode, b: MeshNode
  let apiA: ApiServer, apiB: ApiServer
  const tokens = { a: newToken(), b: newToken() }
  let clientA: ApiClient, clientB: ApiClient
  const dirs = new TempDirs()

  beforeAll(async () => {
    nodes = await startMesh(2, { transport: 'tcp' })
    ;[a, b] = nodes as [MeshNode, MeshNode]
    apiA = await startApiServer(a, { token: tokens.a, port: 0, checkResponses: true })
    apiB = await startApiServer(b, { token: tokens.b, port: 0, checkResponses: true })
    clientA = new ApiClient(apiA.url, tokens.a)
    clientB = new ApiClient(apiB.url, tokens.b)
  })
  afterAll(async () => {
    await apiA.close()
    await apiB.close()
    await stopAll(nodes)
    await dirs.cleanup()
  })

  it('streams 96 MiB in on one node and out of another (fetched from the first) with bounded memory', async () => {
    const expected = await sha(bytes(SIZE, 3))
    const base = liveBytes()
    let peak = 0
    const sample = (): void => { peak = Math.max(peak, liveBytes() - base) }
    const { part } = await clientA.upload<{ part: FilePart }>('/v1/artifacts', bytes(SIZE, 3, sample), 'video/mp4', { name: 'clip.mp4' })
    expect(part).toMatchObject({ kind: 'file', size: SIZE, media_type: 'video/mp4', name: 'clip.mp4' })
    expect(responseValidator('putArtifact', 201)!({ part })).toBe(true)

    // the upload alone held no more than the windows of the way (undici's fetch had read ahead of the socket)
    expect(peak).toBeLessThan(SIZE / 4)
    const got = await clientB.download(`/v1/artifacts/${part.artifact}`, { from: [a.agentId], media_type: 'video/mp4' })
    expect(got.size).toBe(SIZE)
    expect(got.contentType).toBe('video/mp4')
    const h = createHash('sha256')
    let read = 0
    let nextSample = MIB
    for await (const c of got.body) {
      h.update(c)
      read += c.byteLength
      if (read >= nextSample) { sample(); nextSample += MIB }
    }
    expect(read).toBe(SIZE)
    expect(h.digest('hex')).toBe(expected)
    // 96 MiB went in and 96 MiB came out; the process never held more than the windows of the way, well under half of it
    expect(peak).toBeLessThan(SIZE / 2)
    expect(b.artifacts.stats.fetched).toBe(1)
  })

  it('answers the documented errors: no holder, not an id, no token; a Content-Type that is not a media type', async () => {
    const res = await raw(`${apiB.url}/v1/artifacts/${missing}`, { token: tokens.b })
    expect(res.status).toBe(404)
    expect(res.body.error.code).toBe('ARTIFACT_NOT_FOUND')
    expect(responseValidator('getArtifact', 404)!(res.body)).toBe(true)
    const bad = await raw(`${apiB.url}/v1/artifacts/not-a-cid`, { token: tokens.b })
    expect(bad.status).toBe(400)
    expect(responseValidator('getArtifact', 400)!(bad.body)).toBe(true)
    const noToken = await raw(`${apiA.url}/v1/artifacts`, { method: 'POST', body: 'x', type: 'text/plain' })
    expect(noToken.status).toBe(401)
    expect(responseValidator('putArtifact', 401)!(noToken.body)).toBe(true)
    const badType = await raw(`${apiA.url}/v1/artifacts`, { method: 'POST', token: tokens.a, body: 'x', type: 'not a type' })
    // a Content-Type that is not a media type is refused before the body is read
    expect(badType.status).toBe(415)
    expect(badType.body.error.code).toBe('INVALID_REQUEST')
    expect(responseValidator('putArtifact', 415)!(badType.body)).toBe(true)
    // a JSON route still refuses a body that is not JSON (the raw parser is scoped to the artifact route)
    const json = await raw(`${apiA.url}/v1/delegate`, { method: 'POST', token: tokens.a, body: 'x', type: 'text/plain' })
    expect(json.status).toBe(415)
  })

  it('aap-mesh artifact put / get: a file in on one node, saved from another', async () => {
    const dir = await dirs.make()
    const src = join(dir, 'report.pdf')
    const content = Buffer.from(Array.from({ length: 3 * MIB + 77 }, (_, i) => (i * 31) & 0xff))
    await writeFile(src, content)
    const put = await cli(['artifact', 'put', src, '--media-type', 'application/pdf', '--api-url', apiA.url, '--token', tokens.a, '--json'])
    expect(put.code, put.stderr).toBe(0)
    const part = put.json.part as FilePart
    expect(part).toMatchObject({ kind: 'file', size: content.length, media_type: 'application/pdf', name: 'report.pdf' })

    const out = join(dir, 'copy.pdf')
    const get = await cli(['artifact', 'get', part.artifact, '--out', out, '--from', a.agentId, '--api-url', apiB.url, '--token', tokens.b, '--json'])
    expect(get.code, get.stderr).toBe(0)
    expect(get.json).toEqual({ artifact: part.artifact, file: out, size: content.length })
    expect(Buffer.compare(await readFile(out), content)).toBe(0)

    const none = await cli(['artifact', 'get', missing, '--out', join(dir, 'none'), '--api-url', apiB.url, '--token', tokens.b, '--json'])
    expect(none.code).toBe(1)
    expect(none.json.error.code).toBe('ARTIFACT_NOT_FOUND')
  })

  it('serves an artifact as a download, whatever type the caller names: never as a page of the API\'s origin', async () => {
    const page = new TextEncoder().encode('<script>fetch("/v1/node")</script>')
    const { part } = await clientA.upload<{ part: FilePart }>('/v1/artifacts', (async function * () { yield page })(), 'text/html')
    const res = await fetch(`${apiA.url}/v1/artifacts/${part.artifact}?media_type=text/html`, { headers: { authorization: `Bearer ${tokens.a}` } })
    expect(res.status).toBe(200)
    expect(res.headers.get('content-type')).toBe('text/html')
    expect(res.headers.get('content-disposition')).toBe('attachment')
    expect(res.headers.get('x-content-type-options')).toBe('nosniff')
    expect(res.headers.get('content-security-policy')).toBe("default-src 'none'; sandbox")
    expect(new Uint8Array(await res.arrayBuffer())).toEqual(page)
  })

  it('aap-mesh artifact rm takes an artifact off one node; a node that fetched it keeps its copy and serves it back', async () => {
    const dir = await dirs.make()
    const src = join(dir, 'notes.txt')
    const content = Buffer.from('notes of a run, '.repeat(1000))
    await writeFile(src, content)
    const put = await cli(['artifact', 'put', src, '--api-url', apiA.url, '--token', tokens.a, '--json'])
    expect(put.code, put.stderr).toBe(0)
    const id = (put.json.part as FilePart).artifact
    // b fetches a copy
    const copied = await cli(['artifact', 'get', id, '--out', join(dir, 'b.txt'), '--from', a.agentId, '--api-url', apiB.url, '--token', tokens.b, '--json'])
    expect(copied.code, copied.stderr).toBe(0)
    expect(b.artifacts.store.holds(id)).toEqual({ pinned: false })
    const usedBefore = a.artifacts.store.used
    const rm = await cli(['artifact', 'rm', id, '--api-url', apiA.url, '--token', tokens.a, '--json'])
    expect(rm.code, rm.stderr).toBe(0)
    expect(rm.json.artifact).toBe(id)
    expect(rm.json.freed_bytes).toBeGreaterThan(content.length)
    expect(a.artifacts.store.used).toBe(usedBefore - rm.json.freed_bytes)
    expect(a.artifacts.store.holds(id)).toBeUndefined()
    // not here any more: a second removal is ARTIFACT_NOT_FOUND (404), a bad id INVALID_REQUEST (400)
    const again = await cli(['artifact', 'rm', id, '--api-url', apiA.url, '--token', tokens.a, '--json'])
    expect(again.code).toBe(1)
    expect(again.json.error.code).toBe('ARTIFACT_NOT_FOUND')
    const bad = await raw(`${apiA.url}/v1/artifacts/not-a-cid`, { method: 'DELETE', token: tokens.a })
    expect(bad.status).toBe(400)
    // b still holds its copy, and a gets it back from b
    const back = await cli(['artifact', 'get', id, '--out', join(dir, 'a.txt'), '--from', b.agentId, '--api-url', apiA.url, '--token', tokens.a, '--json'])
    expect(back.code, back.stderr).toBe(0)
    expect(Buffer.compare(await readFile(join(dir, 'a.txt')), content)).toBe(0)
    // fetched back, it is a copy on a now
    expect(a.artifacts.store.holds(id)).toEqual({ pinned: false })
    // and a's listing says so, with how full its store is
    const ls = await cli(['artifact', 'ls', '--all', '--limit', '1', '--api-url', apiA.url, '--token', tokens.a, '--json'])
    expect(ls.code, ls.stderr).toBe(0)
    expect(ls.json.artifacts.find((x: { artifact: string }) => x.artifact === id)).toMatchObject({ size: content.length, pinned: false })
    expect(ls.json.artifacts).toHaveLength(a.artifacts.store.count)
    expect(ls.json.next_cursor).toBeNull()
    expect(ls.json.used_bytes).toBe(a.artifacts.store.used)
    const text = await cli(['artifact', 'ls', '--api-url', apiA.url, '--token', tokens.a])
    expect(text.stdout).toContain(`${id}  ${content.length} bytes  copy  last used `)
    expect(text.stdout).toMatch(/store: \d+ of 1073741824 bytes, \d+ of 100000 artifacts/)
  })

  it('the client raises the API error as an ApiError', async () => {
    await expect(clientB.download('/v1/artifacts/not-a-cid')).rejects.toBeInstanceOf(ApiError)
  })
})
