/**
 * Issue #17: kad-dht's closest peers keep their value for the connection
 * budget, but no keep-alive tag: libp2p's reconnect queue redials a peer with
 * one whenever its connection closes, also when the other side's budget
 * closed it, and the two nodes then fight over the connection
 * (src/wire/dht-keepalive.ts).
 */
import { KEEP_ALIVE } from '@libp2p/interface'
import { describe, expect, it } from 'vitest'
import { withoutKeepAliveTags } from '../src/wire/dht-keepalive.ts'
import type { MeshHost } from '../src/wire/host.ts'
import { until } from './helpers.ts'
import { loopbackHostsPerTest } from './loopback-hosts.ts'

describe('kad-dht\'s closest peers are valued, not kept alive', () => {
  const start = loopbackHostsPerTest()

  it('a closest peer has kad-dht\'s kad-close tag and no keep-alive tag', async () => {
    const [a, b] = await start(2) as [MeshHost, MeshHost]
    await a.dial(b.getMultiaddrs()[0]!)
    // kad-dht tags its closest peers every 5 s once they answered a ping (here: the connection)
    let tags = new Map<string, unknown>()
    await until(async () => {
      tags = (await a.peerStore.get(b.peerId)).tags
      return tags.has('kad-close')
    }, 'kad-dht to tag its closest peer', 30_000)
    expect([...tags.keys()].filter(k => k.startsWith(KEEP_ALIVE))).toEqual([])
  })

  it('leaves a write without keep-alive tags alone and takes them out of one with them, as a record or a map', () => {
    const plain = { tags: { 'kad-close': { value: 50 } } }
    expect(withoutKeepAliveTags(plain)).toBe(plain)
    expect(withoutKeepAliveTags({ tags: { 'kad-close': { value: 50 }, [`${KEEP_ALIVE}-kad-dht`]: { value: 1 } } }))
      .toEqual({ tags: { 'kad-close': { value: 50 } } })
    expect(withoutKeepAliveTags({ tags: new Map([['kad-close', undefined], [`${KEEP_ALIVE}-kad-dht`, undefined]]) }))
      .toEqual({ tags: { 'kad-close': undefined } })
    const none = { multiaddrs: [] }
    expect(withoutKeepAliveTags(none)).toBe(none)
  })
})
