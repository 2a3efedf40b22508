/**
 * An event stream whose subscription failed ends with an `error` event
 * (`{ error: { code, message, details } }`, openapi.ts). `aap-mesh events
 * --follow` read it as an AgentEvent: as text it threw a TypeError (INTERNAL,
 * the node's reason lost), and with --json it printed the error as an event
 * and exited 0. Now both say the node's code and message and exit 3, as for
 * a stream that ended. Found by session 46's review. A small HTTP server plays
 * the node and sends exactly the documented stream.
 */
import { createServer, type Server } from 'node:http'
import type { AddressInfo } from 'node:net'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { cli } from './cli-helpers.ts'

describe('aap-mesh events --follow and a stream that ends with an error event', () => {
  let server: Server
  let url: string
  beforeAll(async () => {
    server = createServer((_req, res) => {
      res.writeHead(200, { 'content-type': 'text/event-stream; charset=utf-8' })
      res.write('event: ready\ndata: {"stream":"events","correlation_id":"t"}\n\n')
      res.end('event: error\ndata: {"error":{"code":"INTERNAL","message":"the subscription fell behind","details":{"reason":"overflow"}}}\n\n')
    })
    await new Promise<void>(resolve => server.listen(0, '127.0.0.1', resolve))
    url = `http://127.0.0.1:${(server.address() as AddressInfo).port}`
  })
  afterAll(async () => { await new Promise<void>(resolve => server.close(() => { resolve() })) })

  for (const json of [false, true]) {
    it(`${json ? '--json' : 'text'}: says the node's code and message and exits 3`, async () => {
      const r = await cli(['events', 't', '--follow', '--api-url', url, '--token', 'x', ...(json ? ['--json'] : [])])
      expect(r.code).toBe(3)
      expect(r.stderr).not.toMatch(/Cannot read properties/)
      if (json) {
        // the failure is the command's JSON answer, not an event line
        expect(r.json.error).toMatchObject({ code: 'INTERNAL', message: expect.stringMatching(/the subscription fell behind/) })
        expect(r.stdout.split('\n')).toHaveLength(1)
      } else {
        expect(r.stderr).toMatch(/INTERNAL: .*the subscription fell behind/)
        expect(r.stdout).toBe('')
      }
    })
  }
})
