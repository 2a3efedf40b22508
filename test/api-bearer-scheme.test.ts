/**
 * The Authorization scheme's name is case-insensitive (RFC 7235). Found by
 * session 57's review: `bearer <token>` was told the token was missing.
 */
import { afterAll, beforeAll, expect, it } from 'vitest'
import { newToken } from '../src/api/files.ts'
import { startApiServer, type ApiServer } from '../src/api/server.ts'
import type { MeshNode } from '../src/node.ts'
import { raw } from './api-helpers.ts'
import { startLoneNodes, stopAll } from './helpers.ts'

let nodes: MeshNode[] = []
let api: ApiServer
let token: string

beforeAll(async () => {
  nodes = await startLoneNodes(1)
  token = newToken()
  api = await startApiServer(nodes[0]!, { token, port: 0 })
})

afterAll(async () => {
  await api.close()
  await stopAll(nodes)
})

it('takes the bearer scheme in any case', async () => {
  for (const scheme of ['Bearer', 'bearer', 'BEARER', 'bEaReR']) {
    const r = await raw(`${api.url}/v1/node`, { authorization: `${scheme} ${token}` })
    expect([scheme, r.status]).toEqual([scheme, 200])
    expect(r.body.agent_id).toBe(nodes[0]!.agentId)
  }
})

it('tells a wrong token in a lower-case scheme from a missing one', async () => {
  const wrong = await raw(`${api.url}/v1/node`, { authorization: `bearer ${newToken()}` })
  expect(wrong.status).toBe(401)
  expect(wrong.body.error.message).toMatch(/^wrong API token/)
  for (const authorization of [`Basic ${token}`, `Bearer${token}`, token]) {
    const missing = await raw(`${api.url}/v1/node`, { authorization })
    expect([authorization, missing.status]).toEqual([authorization, 401])
    expect(missing.body.error.message).toMatch(/^missing API token/)
  }
})
