/**
 * A stream asked of a connection that is closing goes on a new connection.
 *
 * libp2p's dialProtocol reuses the connection it has to a peer; one being
 * closed at that instant (by either side's connection budget) refuses the
 * stream, and a delegation in a 100-node simulation failed with "The
 * connection muxer is "closed" and not "open"" although its executor was up.
 * src/wire/dial.ts tries such a refusal once more on a new connection, and so
 * a stream the peer's side ended while its protocol was negotiated.
 */
import type { Stream } from '@libp2p/interface'
import { StreamResetError } from '@libp2p/interface'
import { UnexpectedEOFError } from '@libp2p/utils'
import { describe, expect, it } from 'vitest'
import { dialStats, dialStream, isClosingConnectionError, isCutNegotiationError } from '../src/wire/dial.ts'
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

  it('is opened on a new connection when the peer\'s side ended it during the protocol negotiation', async () => {
    const [a, b] = await start(2) as [MeshHost, MeshHost]
    await b.handle(ECHO, (stream) => {
      stream.addEventListener('message', (evt) => { stream.send(evt.data instanceof Uint8Array ? evt.data : evt.data.subarray()) })
    })
    const first = await a.dial(b.getMultiaddrs()[0]!)
    for (const cut of [new UnexpectedEOFError('Unexpected EOF - stream closed while reading 0/1 bytes'), new StreamResetError('the stream was reset')]) {
      expect(isCutNegotiationError(cut)).toBe(true)
      // the first negotiation ends as libp2p reports one the peer's side cut; the next is real
      const calls: Array<{ force?: boolean }> = []
      const host = {
        dialProtocol: async (...args: Parameters<MeshHost['dialProtocol']>) => {
          calls.push({ force: (args[2] as { force?: boolean } | undefined)?.force })
          if (calls.length === 1) throw cut
          return a.dialProtocol(...args)
        }
      }
      const before = dialStats.retriedOnCutNegotiation
      const stream = await dialStream(host, b.peerId, ECHO, { signal: AbortSignal.timeout(5_000) })
      expect(calls).toEqual([{ force: undefined }, { force: true }])
      expect(dialStats.retriedOnCutNegotiation).toBe(before + 1)
      expect(await echoOnce(stream, 'answered')).toBe('answered')
    }
    // each retry opened a connection of its own beside the first
    expect(a.getConnections(b.peerId).map(c => c.id)).toContain(first.id)
    expect(a.getConnections(b.peerId)).toHaveLength(3)
  })
})

