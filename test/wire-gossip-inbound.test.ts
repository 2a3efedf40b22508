/**
 * How big a gossip frame a node takes in (src/wire/host.ts,
 * GOSSIP_MAX_INBOUND_BYTES). It was one event and 1 KiB, but gossipsub
 * answers an IWANT with one frame carrying every message asked for: a peer
 * that missed two events of 26 KiB and asked for both after an IHAVE got a
 * frame over the bound, its reader threw, and it dropped the honest sender
 * from gossip on every topic (found by session 57's review). Real nodes; the
 * IWANT is sent through the asker's own gossipsub.
 */
import { sha256 } from 'multiformats/hashes/sha2'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { EVENT_MAX_BYTES } from '../src/constants.ts'
import type { MeshNode } from '../src/node.ts'
import { startMesh, stopAll, until } from './helpers.ts'

const TOPIC = 'aap-test-iwant-bundle'
/** Two of these in one answer are over one event and 1 KiB, each well under EVENT_MAX_BYTES. */
const BYTES = 26 * 1024

interface Router {
  subscribe: (topic: string) => void
  publish: (topic: string, data: Uint8Array) => Promise<unknown>
  getPeers: () => Array<{ toString: () => string }>
  getSubscribers: (topic: string) => Array<{ toString: () => string }>
  sendRpc: (id: string, rpc: { subscriptions: []; messages: []; control: { ihave: []; iwant: Array<{ messageIDs: Uint8Array[] }>; graft: []; prune: []; idontwant: [] } }) => boolean
  addEventListener: (type: 'message', fn: (evt: CustomEvent<{ topic: string; data: Uint8Array }>) => void) => void
}
const routerOf = (n: MeshNode): Router => n.host.services.pubsub as unknown as Router

describe('a gossip answer that bundles several big events', () => {
  let nodes: MeshNode[] = []
  beforeAll(async () => { nodes = await startMesh(2, { transport: 'tcp' }) })
  afterAll(async () => { await stopAll(nodes) })

  it('is taken in, and the sender stays the asker\'s gossip peer', async () => {
    expect(2 * BYTES).toBeGreaterThan(EVENT_MAX_BYTES + 1024)
    const [A, B] = nodes as [MeshNode, MeshNode]
    const a = routerOf(A)
    const b = routerOf(B)
    const got: string[] = []
    b.addEventListener('message', (evt) => { if (evt.detail.topic === TOPIC) got.push(new TextDecoder().decode(evt.detail.data.subarray(0, 2))) })
    a.subscribe(TOPIC)
    b.subscribe(TOPIC)
    await until(() => a.getSubscribers(TOPIC).some(p => p.toString() === B.agentId) && b.getSubscribers(TOPIC).some(p => p.toString() === A.agentId), 'each sees the other on the topic')

    const data = ['m1', 'm2'].map(m => new TextEncoder().encode(m + 'x'.repeat(BYTES - 2)))
    for (const d of data) await a.publish(TOPIC, d)
    await until(() => got.length === 2, 'B received both')
    // B asks for both again, as after an IHAVE for messages it missed: A answers with one frame holding both
    const ids = await Promise.all(data.map(async d => (await sha256.digest(d)).digest))
    expect(b.sendRpc(A.agentId, { subscriptions: [], messages: [], control: { ihave: [], iwant: [{ messageIDs: ids }], graft: [], prune: [], idontwant: [] } })).toBe(true)

    // B's next frame to A, behind the IWANT on the same stream: once A has it, A has sent its answer
    b.subscribe(`${TOPIC}-after`)
    await until(() => a.getSubscribers(`${TOPIC}-after`).some(p => p.toString() === B.agentId), 'A read the frame after the IWANT')
    // a small message behind the answer: before, B dropped A from gossip when the answer came, and it never arrived
    await a.publish(TOPIC, new TextEncoder().encode('m3'))
    await until(() => got.includes('m3'), 'B received the message after the bundled answer')
    expect(b.getPeers().map(p => p.toString())).toContain(A.agentId)
  }, 60_000)
})
