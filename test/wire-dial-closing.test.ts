/**
 * A stream asked of a connection that is closing goes on a new connection.
 *
 * libp2p's dialProtocol reuses the connection it has to a peer; one being
 * closed at that instant (by either side's connection budget) refuses the
 * stream, and a delegation in a 100-node simulation failed with "The
 * connection muxer is "closed" and not "open"" although its executor was up.
 * src/wire/dial.ts tries such a refusal once more on a new connection.
 */
import type { Stream } from '@libp2p/interface'
import { describe, expect, it } from 'vitest'
import { dialStats, dialStream, isClosingConnectionError } from '../src/wire/dial.ts'
import type { MeshHost } from '../src/wire/host.ts'
import { loopbackHostsPerTest } from './loopback-hosts.ts'

const ECHO = '/aap-test/echo/1.0.0'

async function echoOnce (stream: Stream, text: string): Promise<string> {
  const answer = new Promise<string>((resolve) => {
    stream.addEventListener('message', (evt) => { resolve(new TextDecoder().decode(evt.data instanceof Uint8Array ? evt.data : evt.data.subarray())) }, { once: true })
  })
  stream.send(new TextEncoder().encode(text))
  return answer
}

describe('a stream asked of a closing connection', () => {
  const start = loopbackHostsPerTest()

  it('is opened on a new connection, and answers', async () => {
    const [a, b] = await start(2) as [MeshHost, MeshHost]
    await b.handle(ECHO, (stream) => {
      stream.addEventListener('message', (evt) => { stream.send(evt.data instanceof Uint8Array ? evt.data : evt.data.subarray()) })
    })
    const first = await a.dial(b.getMultiaddrs()[0]!)
    const before = dialStats.retriedOnClosingConnection
    // the connection is still open, its muxer closing: libp2p would hand it out and refuse the stream on it
    const closing = first.close()
    const stream = await dialStream(a, b.peerId, ECHO, { signal: AbortSignal.timeout(5_000) })
    await closing
    expect(dialStats.retriedOnClosingConnection).toBe(before + 1)
    expect(await echoOnce(stream, 'still here')).toBe('still here')
    expect(a.getConnections(b.peerId).map(c => c.id)).not.toContain(first.id)
    await expect(first.newStream(ECHO)).rejects.toSatisfy(isClosingConnectionError)
  })

  it('is not tried again when the failure is anything else', async () => {
    const [a, b] = await start(2) as [MeshHost, MeshHost]
    await a.dial(b.getMultiaddrs()[0]!)
    const before = dialStats.retriedOnClosingConnection
    // b does not speak the protocol: that is the caller's to report, at once
    const err = await dialStream(a, b.peerId, ECHO, { signal: AbortSignal.timeout(5_000) }).then(() => undefined, (e: unknown) => e)
    expect((err as Error).name).toBe('UnsupportedProtocolError')
    expect(isClosingConnectionError(err)).toBe(false)
    expect(dialStats.retriedOnClosingConnection).toBe(before)
  })
})
