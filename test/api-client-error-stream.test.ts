/**
 * Bytes that are not HTTP on a keep-alive connection whose response is under
 * way (here an event stream) close the connection and write nothing into that
 * response. Found by session 52's review: the typed answer of the HTTP layer's
 * refusals (errors.ts answerClientError) wrote its raw "HTTP/1.1 400" status
 * line into the chunked event-stream body; Node's own handler writes nothing
 * then, and now ours does the same.
 */
import { connect } from 'node:net'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { newToken } from '../src/api/files.ts'
import { startApiServer, type ApiServer } from '../src/api/server.ts'
import type { MeshNode } from '../src/node.ts'
import { startMesh, stopAll, until } from './helpers.ts'

describe('a parse error on a connection whose response is under way', () => {
  let nodes: MeshNode[] = []
  let api: ApiServer
  let token: string
  beforeAll(async () => {
    nodes = await startMesh(1)
    token = newToken()
    api = await startApiServer(nodes[0]!, { token, port: 0 })
  })
  afterAll(async () => {
    await api.close()
    await stopAll(nodes)
  })

  it('writes nothing into the open event stream', async () => {
    const u = new URL(api.url)
    const sock = connect(Number(u.port), u.hostname)
    let got = ''
    sock.on('data', (d: Buffer) => { got += d.toString() })
    sock.on('error', () => {})
    const closed = new Promise<void>(resolve => sock.on('close', () => { resolve() }))
    await new Promise<void>(resolve => sock.once('connect', () => { resolve() }))
    sock.write(`GET /v1/work/stream HTTP/1.1\r\nhost: ${u.host}\r\nauthorization: Bearer ${token}\r\naccept: text/event-stream\r\n\r\n`)
    await until(() => got.includes('ready'), 'the stream to be ready')
    const before = got.length
    // the same client then sends a line that is not HTTP on the keep-alive connection
    sock.write('NOT HTTP AT ALL\r\n\r\n')
    await closed
    const after = got.slice(before)
    // inside a chunked text/event-stream body: a raw status line is corruption
    expect(after).not.toContain('HTTP/1.1 400')
  })
})
