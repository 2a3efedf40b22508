/**
 * An agent that serves runs through the API (the work stream) uploads its
 * outputs with POST /v1/artifacts. Those uploads were pinned for good like
 * the operator's own, so a stranger calling the agent's capability a few
 * hundred times filled the store for good. With `pin=run-output` they are
 * kept within the run outputs' share (src/artifacts/pins.ts), and the
 * operator's own upload still fits. Here the store is bounded at 4 MiB and
 * each output is 1 MiB.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { ApiClient, ApiError } from '../src/api/client.ts'
import { newToken } from '../src/api/files.ts'
import { startApiServer, type ApiServer } from '../src/api/server.ts'
import type { FilePart } from '../src/artifacts/types.ts'
import type { MeshNode } from '../src/node.ts'
import { startMesh, stopAll } from './helpers.ts'

const MIB = 1024 * 1024

async function * once (fill: number): AsyncGenerator<Uint8Array> {
  yield new Uint8Array(MIB).fill(fill)
}

describe('run outputs an API agent uploads', () => {
  let nodes: MeshNode[] = []
  let api: ApiServer
  let client: ApiClient
  const token = newToken()

  beforeAll(async () => {
    nodes = await startMesh(1, { nodeOptions: () => ({ artifactStoreMaxBytes: 4 * MIB + 64 * 1024 }) })
    api = await startApiServer(nodes[0]!, { token, port: 0 })
    client = new ApiClient(api.url, token)
  })
  afterAll(async () => {
    await api?.close()
    await stopAll(nodes)
  })

  it('are kept within the run outputs\' share with pin=run-output, and the operator\'s upload still fits', async () => {
    for (let i = 1; i <= 6; i++) {
      const { part } = await client.upload<{ part: FilePart }>('/v1/artifacts', once(i), 'application/octet-stream', { pin: 'run-output' })
      expect(part.size).toBe(MIB)
    }
    const own = await client.upload<{ part: FilePart }>('/v1/artifacts', once(200), 'application/octet-stream')
    expect(own.part.size).toBe(MIB)
    // without it an upload is the operator's, pinned until removed: the store is full of those soon
    const rest = await Promise.allSettled([201, 202, 203, 204].map(async f => client.upload<{ part: FilePart }>('/v1/artifacts', once(f), 'application/octet-stream')))
    const refused = rest.filter(r => r.status === 'rejected').map(r => (r.reason as ApiError).code)
    expect(refused.length).toBeGreaterThan(0)
    expect(new Set(refused)).toEqual(new Set(['STORAGE_FULL']))
  })

  it('refuses a pin it does not know', async () => {
    const err = await client.upload('/v1/artifacts', once(9), 'application/octet-stream', { pin: 'forever' }).then(() => undefined, (e: unknown) => e)
    expect(err).toBeInstanceOf(ApiError)
    expect((err as ApiError).code).toBe('INVALID_REQUEST')
  })
})
