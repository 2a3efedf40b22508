/**
 * An API upload whose client goes away in the middle of the body (with a
 * Content-Length, and chunked) keeps nothing: no artifact, nothing staged in
 * the store's tmp/, no bytes counted against its bound. Checked by session
 * 49's artifact review (it held).
 */
import { request } from 'node:http'
import { readdir } from 'node:fs/promises'
import { join } from 'node:path'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { newToken } from '../src/api/files.ts'
import { startApiServer, type ApiServer } from '../src/api/server.ts'
import type { MeshNode } from '../src/node.ts'
import { startLoneNodes, stopAll, until } from './helpers.ts'

const MIB = 1024 * 1024

describe('an API upload cut short', () => {
  let nodes: MeshNode[] = []
  let a: MeshNode
  let api: ApiServer
  const token = newToken()
  beforeAll(async () => {
    nodes = await startLoneNodes(1)
    a = nodes[0]!
    api = await startApiServer(a, { token, port: 0 })
  })
  afterAll(async () => {
    await api.close()
    await stopAll(nodes)
  })

  for (const chunked of [false, true]) {
    it(`keeps nothing (${chunked ? 'chunked' : 'content-length'})`, async () => {
      const headers: Record<string, string> = { authorization: `Bearer ${token}`, 'content-type': 'application/octet-stream' }
      // five MiB announced, three and a bit sent
      if (!chunked) headers['content-length'] = String(5 * MIB)
      const req = request(new URL('/v1/artifacts', api.url), { method: 'POST', headers })
      const errors: Error[] = []
      // the socket this test destroys ends the request with an error: expected, and kept to look at
      req.on('error', (err) => { errors.push(err) })
      req.on('response', (res) => { res.resume() })
      const body = new Uint8Array(3 * MIB + 5)
      for (let i = 0; i < body.length; i += 1024) body[i] = (i >> 10) & 0xff
      // each chunk its own bytes (a chunk the upload repeats is staged once), and each test's upload its own
      for (let k = 0; k < 4; k++) body[k * MIB + 1] = k + 1
      body[0] = chunked ? 2 : 1
      req.write(body)
      await until(() => a.artifacts.store.used >= 3 * MIB, 'three chunks to be staged')
      req.destroy()
      await until(() => a.artifacts.store.used === 0, 'the upload to be abandoned')
      expect(errors.length).toBeLessThanOrEqual(1)
      expect({ used: a.artifacts.store.used, count: a.artifacts.store.count, tmp: await readdir(join(a.artifacts.store.dir, 'tmp')) }).toEqual({ used: 0, count: 0, tmp: [] })
    }, 30_000)
  }
})
