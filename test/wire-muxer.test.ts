/**
 * Connections carry no yamux keep-alive pings (src/wire/host.ts): liveness is
 * the connection monitor's job, and the pings cost CPU on every connection.
 */
import { afterAll, describe, expect, it } from 'vitest'
import type { MeshHost } from '../src/wire/host.ts'
import { startLoopbackHost, until } from './helpers.ts'

describe('the stream muxer of a connection', () => {
  const hosts: MeshHost[] = []
  afterAll(async () => { await Promise.all(hosts.map(async h => h.stop())) })

  it('sends no keep-alive pings, on either side, and still carries streams', async () => {
    const a = await startLoopbackHost()
    const b = await startLoopbackHost()
    hosts.push(a, b)
    const conn = await a.dial(b.getMultiaddrs()[0]!)
    // the other side's connection: the one b holds for a, once b has it
    await until(() => b.getConnections(a.peerId).length > 0, 'b to hold the connection from a')
    const back = b.getConnections(a.peerId)[0]
    expect(back).toBeDefined()
    for (const c of [conn, back]) {
      const muxer = Reflect.get(c as object, 'muxer') as { enableKeepAlive: boolean, keepAlive?: unknown, nextPingID: number }
      expect(muxer.enableKeepAlive).toBe(false)
      expect(muxer.keepAlive).toBeUndefined()
      // yamux sends its first keep-alive ping as the connection opens: none was sent
      expect(muxer.nextPingID).toBe(0)
    }
    // a ping over a stream (what the connection monitor does) still works
    expect(await a.services.ping.ping(b.peerId, { signal: AbortSignal.timeout(5_000) })).toBeGreaterThanOrEqual(0)
  })
})
