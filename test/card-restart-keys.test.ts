/**
 * A provider key that a card named before a restart, and the card published
 * after it no longer names, is withdrawn like one dropped without a restart
 * (protocols/card.md: "A key a newer card no longer names is withdrawn (not
 * provided again)"). Before the fix the keys announced were known only in
 * memory, and kad-dht's reprovider, which keeps its own records in the
 * datastore, announced the dropped key again every round after a restart.
 * Found by session 45's card review.
 */
import { mkdtemp, rm } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { capabilityKey, type CardDraft } from '../src/card/card.ts'
import { createMeshNode, type MeshNode } from '../src/node.ts'
import { waitForRouting } from './helpers.ts'

const tcp = ['/ip4/127.0.0.1/tcp/0']
const before: CardDraft = { name: 'a', capabilities: [{ capability_id: 'cap:old', version: '1.0.0' }] }
const after: CardDraft = { name: 'a', capabilities: [{ capability_id: 'cap:new', version: '1.0.0' }] }

async function selfProvides (node: MeshNode, capId: string): Promise<boolean> {
  // read the store directly (the answer cache lasts 5 s): every record of the key
  const store = (node.host.services.dht as unknown as { providers: { getProviders: (k: unknown) => Promise<Array<{ equals: (p: unknown) => boolean }>> } }).providers
  const found = await store.getProviders(await capabilityKey(capId))
  return found.some(p => p.equals(node.host.peerId))
}

describe('provider keys across a restart', () => {
  let dir: string
  let other: MeshNode
  const running: MeshNode[] = []
  beforeAll(async () => {
    dir = await mkdtemp(join(tmpdir(), 'card-restart-keys-'))
    other = await createMeshNode({ listen: tcp, localMesh: true })
    await other.start()
    running.push(other)
  })
  afterAll(async () => {
    await Promise.all(running.map(async n => n.stop()))
    await rm(dir, { recursive: true, force: true })
  })

  it('control: without a restart, a dropped key is withdrawn', async () => {
    const n = await createMeshNode({ listen: tcp, localMesh: true, card: before })
    await n.start(); running.push(n)
    await n.join(other.addresses)
    await waitForRouting([n, other], 1)
    expect(await n.discovery.announce()).toBeGreaterThan(0)
    expect(await selfProvides(n, 'cap:old')).toBe(true)
    await n.publishCard(after)
    await n.discovery.announce()
    expect(await selfProvides(n, 'cap:old')).toBe(false)
  })

  it('a key the card named before a restart, and no longer names, is not provided again', async () => {
    const first = await createMeshNode({ dataDir: dir, listen: tcp, localMesh: true, card: before })
    await first.start(); running.push(first)
    await first.join(other.addresses)
    await waitForRouting([first, other], 1)
    expect(await first.discovery.announce()).toBeGreaterThan(0)
    expect(await selfProvides(first, 'cap:old')).toBe(true)
    await first.stop(); running.splice(running.indexOf(first), 1)

    const second = await createMeshNode({ dataDir: dir, listen: tcp, localMesh: true, card: after })
    await second.start(); running.push(second)
    await second.join(other.addresses)
    await waitForRouting([second, other], 1)
    expect(await second.discovery.announce()).toBeGreaterThan(0)
    expect(second.card?.capabilities.map(c => c.capability_id)).toEqual(['cap:new'])
    // kad-dht's reprovider re-announces every own record it finds in the datastore (reprovider.js processRecords)
    expect(await selfProvides(second, 'cap:old')).toBe(false)
  })
})
