/**
 * gossipsub v1.2's IDONTWANT only for large messages (protocols/events.md,
 * "Topics"): a node that receives a message of GOSSIP_IDONTWANT_MIN_BYTES or
 * more tells its other mesh peers not to send it; a smaller one (every usual
 * event) goes without, since the hint costs a frame per mesh peer, about
 * what the duplicate it may spare costs.
 *
 * Three real nodes, all on one topic and in each other's mesh. A publishes a
 * small message and then a large one on the same streams, so B and C each
 * receive the small one first: an IDONTWANT for it between B and C would go
 * ahead of the one for the large message on the same stream.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { GOSSIP_IDONTWANT_MIN_BYTES } from '../src/constants.ts'
import type { MeshNode } from '../src/node.ts'
import { startMesh, stopAll, until } from './helpers.ts'

const TOPIC = 'aap-test-idontwant'

/** What gossipsub keeps of the IDONTWANTs a peer sent (v1.2; not part of its interface, so read by shape). */
function idontwantsFrom (receiver: MeshNode, sender: MeshNode): Map<string, number> | undefined {
  const router = receiver.host.services.pubsub as unknown as { idontwants?: Map<string, Map<string, number>> }
  if (!(router.idontwants instanceof Map)) throw new Error('gossipsub no longer keeps received IDONTWANTs as idontwants')
  return router.idontwants.get(sender.host.peerId.toString())
}

describe('gossip IDONTWANT', () => {
  let nodes: MeshNode[] = []
  let A: MeshNode, B: MeshNode, C: MeshNode
  const received = new Map<MeshNode, number>()

  beforeAll(async () => {
    nodes = await startMesh(3)
    ;[A, B, C] = nodes as [MeshNode, MeshNode, MeshNode]
    for (const n of nodes) {
      received.set(n, 0)
      n.host.services.pubsub.addEventListener('message', (evt) => {
        if (evt.detail.topic === TOPIC) received.set(n, (received.get(n) ?? 0) + 1)
      })
    }
    // every pair connected, so A floods both and B and C are each other's mesh peers
    expect(await B.join(A.addresses)).toBe(1)
    expect(await C.join([...A.addresses, ...B.addresses])).toBe(2)
    for (const n of nodes) n.host.services.pubsub.subscribe(TOPIC)
    const meshOf = (n: MeshNode): string[] => (n.host.services.pubsub as unknown as { getMeshPeers: (t: string) => string[] }).getMeshPeers(TOPIC)
    await until(() => meshOf(B).includes(C.host.peerId.toString()) && meshOf(C).includes(B.host.peerId.toString()), 'B and C meshed on the topic')
    await until(() => [B, C].every(n => A.host.services.pubsub.getSubscribers(TOPIC).some(p => p.equals(n.host.peerId))), 'A seeing B and C on the topic')
  })
  afterAll(async () => { await stopAll(nodes) })

  it('is sent between mesh peers for a large message and not for a small one', async () => {
    const small = new Uint8Array(1200).fill(1)
    const large = new Uint8Array(GOSSIP_IDONTWANT_MIN_BYTES).fill(2)
    await A.host.services.pubsub.publish(TOPIC, small)
    await A.host.services.pubsub.publish(TOPIC, large)
    await until(() => received.get(B) === 2 && received.get(C) === 2, 'both messages at B and C')
    // whichever of B and C got the large message from A first told the other; often both did
    await until(() => (idontwantsFrom(B, C)?.size ?? 0) + (idontwantsFrom(C, B)?.size ?? 0) > 0, 'an IDONTWANT between B and C')
    for (const [to, from] of [[B, C], [C, B]] as const) {
      // at most the large message's id: one for the small message would have come first on the same stream
      expect(idontwantsFrom(to, from)?.size ?? 0).toBeLessThanOrEqual(1)
    }
    expect(received.get(A)).toBe(0)
  })
})
