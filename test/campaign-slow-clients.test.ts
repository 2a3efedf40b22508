import { createServer, type Server, type ServerResponse } from 'node:http'
import type { AddressInfo } from 'node:net'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { cutMusts, reader } from '../scripts/campaign/slow-clients.ts'

describe('slow-clients: an SSE reader never waits forever for its stream', () => {
  let server: Server
  let base = ''
  const held: ServerResponse[] = []
  beforeAll(async () => {
    server = createServer((req, res) => {
      if (req.url === '/empty') { res.writeHead(200, { 'content-type': 'text/event-stream' }); res.end(); return }
      if (req.url === '/early-end') { res.writeHead(200, { 'content-type': 'text/event-stream' }); res.end(': keep-alive\n'); return }
      res.writeHead(200, { 'content-type': 'text/event-stream' })
      res.flushHeaders()
      held.push(res)
      if (req.url === '/ready') res.write('event: ready\ndata: {}\n\n')
    })
    await new Promise<void>(resolve => server.listen(0, '127.0.0.1', resolve))
    base = `http://127.0.0.1:${(server.address() as AddressInfo).port}`
  })
  afterAll(async () => {
    for (const r of held) r.destroy()
    server.closeAllConnections()
    await new Promise<void>(resolve => { server.close(() => { resolve() }) })
  })

  it('resolves on a stream that says it is ready', async () => {
    const r = await reader(`${base}/ready`, 't', true)
    expect(r.text).toContain('event: ready')
    r.req.destroy()
  })

  it('rejects a 200 answer that ends without a byte', async () => {
    await expect(reader(`${base}/empty`, 't', true)).rejects.toThrow(/ended before it was ready/)
  })

  it('rejects a 200 answer that ends before "event: ready"', async () => {
    await expect(reader(`${base}/early-end`, 't', true)).rejects.toThrow(/ended before it was ready/)
  })

  it('rejects a 200 answer that sends nothing, once its ready wait is over', async () => {
    await expect(reader(`${base}/silent`, 't', true, 300)).rejects.toThrow(/not ready within 300 ms/)
  })
})

describe('slow-clients: the cut musts, from the clients\' view', () => {
  const open = { ended: false }
  const ended = { ended: true }

  it('passes when every stalled reader saw its cut and neither reading client was cut', () => {
    expect(cutMusts([ended, ended], open, open).musts.every(m => m.value <= m.max)).toBe(true)
  })

  it('fails a stalled reader left open even when the server counts two streams (the idle reader was cut instead)', () => {
    const { stalledNotCut, musts } = cutMusts([ended, open], open, ended)
    expect(stalledNotCut).toBe(1)
    expect(musts.filter(m => m.value > m.max).map(m => m.figure)).toEqual(['stalled readers not cut off (the clients\' view, once they read again)', 'reading clients cut off (the work reader, the idle event reader)'])
  })

  it('fails an idle event reader that was cut', () => {
    expect(cutMusts([ended], open, ended).musts.some(m => m.value > m.max)).toBe(true)
  })
})
