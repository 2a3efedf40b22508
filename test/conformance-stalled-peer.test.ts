/**
 * The conformance kit's stalled peer (src/conformance/runner.ts holdStalled) holds the handoff streams a target
 * opens to it unanswered. It kept every one, reset ones too, until the kit ended: a target opening and resetting
 * streams in a loop grew the kit's heap by about 14 MB/s and ended it out of memory. Now a stream its opener
 * closed is let go, and at most KIT_STALLED_STREAMS_MAX are held at once.
 */
import type { Stream } from '@libp2p/interface'
import { afterAll, describe, expect, it } from 'vitest'
import { HANDOFF_PROTOCOL } from '../src/constants.ts'
import { KIT_STALLED_STREAMS_MAX } from '../src/conformance/constants.ts'
import { holdStalled } from '../src/conformance/runner.ts'
import type { MeshNode } from '../src/node.ts'
import { startLoneNodes, stopAll, until } from './helpers.ts'

describe('the conformance kit\'s stalled peer', () => {
  let nodes: MeshNode[] = []
  afterAll(async () => { await stopAll(nodes) })

  it('holds a bounded few streams, and lets go of those their opener closed', async () => {
    nodes = await startLoneNodes(2)
    const [target, bystander] = nodes as [MeshNode, MeshNode]
    const stalled = new Set<Stream>()
    await bystander.host.unhandle(HANDOFF_PROTOCOL)
    await bystander.host.handle(HANDOFF_PROTOCOL, (stream) => { holdStalled(stalled, stream) }, { maxInboundStreams: 1024 })
    // the target here is a plain opener of streams: its own handoff service's stream limit does not apply
    await target.host.unhandle(HANDOFF_PROTOCOL)
    await target.join(bystander.addresses)

    // opened and reset in a loop: none stays held
    for (let i = 0; i < 200; i++) {
      const s = await target.host.dialProtocol(bystander.host.peerId, HANDOFF_PROTOCOL, { signal: AbortSignal.timeout(5_000), maxOutboundStreams: 1024 })
      s.abort(new Error('opened and reset'))
    }
    await until(() => stalled.size === 0, 'every reset stream let go')

    // opened and left open: the first KIT_STALLED_STREAMS_MAX are held, the rest reset by the kit
    const open: Stream[] = []
    for (let i = 0; i < KIT_STALLED_STREAMS_MAX + 8; i++) {
      open.push(await target.host.dialProtocol(bystander.host.peerId, HANDOFF_PROTOCOL, { signal: AbortSignal.timeout(5_000), maxOutboundStreams: 1024 }))
    }
    await until(() => open.filter(s => s.status !== 'open').length === 8, 'the streams past the bound reset')
    expect(stalled.size).toBe(KIT_STALLED_STREAMS_MAX)
    for (const s of open) s.abort(new Error('done'))
    await until(() => stalled.size === 0, 'the held streams let go once closed')
  }, 60_000)
})
