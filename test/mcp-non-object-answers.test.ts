/**
 * Answers of a "node's API" that are not what the API answers, seen through
 * the MCP server. Found by session 57's review: a 2xx answer that was not a
 * JSON object went into the tool result's structured content unchecked, so
 * the SDK refused the result and the MCP client got a JSON-RPC protocol
 * error (-32602) instead of a tool error; an empty body was an INTERNAL
 * tool error about Buffer.byteLength; and a run.* event whose data was null
 * threw a TypeError in the `events` tool. Against a fake API on 127.0.0.1.
 */
import { createServer, type Server } from 'node:http'
import type { AddressInfo } from 'node:net'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { Client } from '@modelcontextprotocol/sdk/client/index.js'
import { InMemoryTransport } from '@modelcontextprotocol/sdk/inMemory.js'
import { ApiClient } from '../src/api/client.ts'
import { createMcpServer } from '../src/mcp/server.ts'

/** What the fake API answers a run's GET with, by run id (the body as sent; '' is an empty body). */
const BODIES: Record<string, string> = {
  array: '[1,2]',
  null: 'null',
  text: '"text"',
  number: '42',
  empty: ''
}

const RUN_EVENT = { run_id: 'agent:run-1', seq: 1, type: 'run.started', correlation_id: 'c1', payload: {} }

describe('the MCP server when the node\'s API answers something other than an object', () => {
  let fake: Server
  let mcp: Client

  beforeAll(async () => {
    fake = createServer((req, res) => {
      const url = req.url ?? ''
      if (url.startsWith('/v1/events/c1/stream')) {
        res.writeHead(200, { 'content-type': 'text/event-stream' })
        res.end('event: ready\ndata: {}\n\n' +
          'event: run.started\ndata: null\n\n' +
          'event: run.progress\ndata: [1]\n\n' +
          `event: run.started\ndata: ${JSON.stringify(RUN_EVENT)}\n\n`)
        return
      }
      const id = decodeURIComponent(url.replace(/^\/v1\/runs\//, ''))
      res.writeHead(200, { 'content-type': 'application/json' })
      res.end(BODIES[id] ?? '{}')
    })
    await new Promise<void>((resolve) => { fake.listen(0, '127.0.0.1', resolve) })
    const client = new ApiClient(`http://127.0.0.1:${(fake.address() as AddressInfo).port}`, 'token')
    const server = createMcpServer(client)
    const [ct, st] = InMemoryTransport.createLinkedPair()
    await server.connect(st)
    mcp = new Client({ name: 'mcp-non-object-test', version: '0.0.0' })
    await mcp.connect(ct)
  })

  afterAll(async () => {
    await mcp.close()
    fake.closeAllConnections()
    await new Promise<void>((resolve) => { fake.close(() => { resolve() }) })
  })

  const kinds: Array<[string, string]> = [['array', 'an array'], ['null', 'null'], ['text', 'a string'], ['number', 'a number'], ['empty', 'an empty body']]
  for (const [id, kind] of kinds) {
    it(`a 200 answer that is ${kind} is an INTERNAL tool error, not a protocol error`, async () => {
      const r = await mcp.callTool({ name: 'get_run', arguments: { run_id: id } })
      expect(r.isError).toBe(true)
      expect(r.structuredContent).toMatchObject({ error: { code: 'INTERNAL', details: { reason: 'not_an_object', answered: kind } } })
      const text = (r.content as Array<{ type: string, text: string }>)[0]?.text ?? ''
      expect(JSON.parse(text)).toMatchObject({ error: { code: 'INTERNAL', message: expect.stringContaining('non-object') } })
    })
  }

  it('an object answer still goes through', async () => {
    const r = await mcp.callTool({ name: 'get_run', arguments: { run_id: 'object' } })
    expect(r.isError).not.toBe(true)
    expect(r.structuredContent).toEqual({})
  })

  it('events skips (and counts) run events whose data is not an object, and returns the others', async () => {
    const r = await mcp.callTool({ name: 'events', arguments: { correlation_id: 'c1', wait_ms: 0 } })
    expect(r.isError).not.toBe(true)
    expect(r.structuredContent).toMatchObject({ events: [RUN_EVENT], skipped_not_objects: 2, after: { 'agent:run-1': 1 } })
  })
})
