/**
 * Issue #17: a TCP connection's send is one write to the kernel
 * (src/wire/tcp-writes.ts). Two real hosts on TCP loopback: the connection's
 * class is patched, and frames of every size, many in flight at once, arrive
 * whole and in order both ways.
 */
import type { Stream } from '@libp2p/interface'
import { lpStream } from '@libp2p/utils'
import { describe, expect, it } from 'vitest'
import type { MeshHost } from '../src/wire/host.ts'
import { coalesceTcpWrites } from '../src/wire/tcp-writes.ts'
import { loopbackHostsPerTest } from './loopback-hosts.ts'

const ECHO = '/aap-test/echo/1.0.0'

async function echo (stream: Stream): Promise<void> {
  const lp = lpStream(stream)
  try {
    for (;;) await lp.write(await lp.read({ signal: AbortSignal.timeout(10_000) }), { signal: AbortSignal.timeout(10_000) })
  } catch {
    // the caller closed its end: the loop ends on the failed read
    stream.abort(new Error('echo done'))
  }
}

describe('TCP sends, one write each', () => {
  const start = loopbackHostsPerTest()

  it('patches the TCP connection and keeps every byte in order', async () => {
    const [a, b] = await start(2) as [MeshHost, MeshHost]
    await b.handle(ECHO, (stream) => { void echo(stream) })
    const conn = await a.dial(b.getMultiaddrs()[0]!)
    // already patched by the hosts (the first TCP connection of the process): says so again
    expect(coalesceTcpWrites(Reflect.get(conn, 'maConn'))).toBe(true)
    const stream = await conn.newStream(ECHO, { signal: AbortSignal.timeout(10_000) })
    const lp = lpStream(stream)
    // sizes from one byte to past a Noise frame (64 KiB), all written before any is read
    const frames = [1, 100, 1_000, 70_000, 10, 200_000, 3].map((n, i) => new Uint8Array(n).map((_, j) => (i * 31 + j) % 251))
    await Promise.all(frames.map(async f => lp.write(f, { signal: AbortSignal.timeout(10_000) })))
    for (const f of frames) {
      const back = await lp.read({ signal: AbortSignal.timeout(10_000) })
      expect(Buffer.from(back.subarray()).equals(Buffer.from(f))).toBe(true)
    }
    await stream.close()
  })

  it('leaves what is not a TCP connection alone', () => {
    expect(coalesceTcpWrites(undefined)).toBe(false)
    expect(coalesceTcpWrites({ sendData: () => ({}) })).toBe(false)
    expect(coalesceTcpWrites({ socket: {}, sendData: () => ({}) })).toBe(false)
  })
})
