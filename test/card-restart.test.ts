/**
 * A node restarted from its data directory (key file + LevelDB) is the same
 * agent: same id, a card whose seq only grows, and other nodes find it again.
 */
import { mkdtemp, rm, stat } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { DATASTORE_DIR, KEY_FILE } from '../src/identity/identity.ts'
import type { CardDraft } from '../src/card/card.ts'
import { createMeshNode, type MeshNode } from '../src/node.ts'
import { waitForRouting } from './helpers.ts'

const tcp = ['/ip4/127.0.0.1/tcp/0']
const card: CardDraft = {
  name: 'archivist',
  description: 'keeps things',
  capabilities: [{ capability_id: 'cap:archive', version: '1.0.0' }],
  tags: ['storage']
}
const query = { capability: { capability_id: 'cap:archive', version: '1.0.0' } }

describe('restarting a node from the same data directory', () => {
  let dir: string
  let other: MeshNode
  const running: MeshNode[] = []

  async function start (opts: { card?: CardDraft } = {}): Promise<MeshNode> {
    const node = await createMeshNode({ dataDir: dir, listen: tcp, localMesh: true, ...opts })
    await node.start()
    running.push(node)
    return node
  }

  async function stop (node: MeshNode): Promise<void> {
    await node.stop()
    running.splice(running.indexOf(node), 1)
  }

  beforeAll(async () => {
    dir = await mkdtemp(join(tmpdir(), 'aap-card-restart-'))
    other = await createMeshNode({ listen: tcp, localMesh: true })
    await other.start()
    running.push(other)
  })
  afterAll(async () => {
    await Promise.all(running.map(async n => n.stop()))
    await rm(dir, { recursive: true, force: true })
  })

  it('keeps its agent id, reloads its card, publishes with a higher seq and is found again', async () => {
    const first = await start({ card })
    const agentId = first.agentId
    const firstCard = first.card
    expect(firstCard?.agent_id).toBe(agentId)
    expect((await stat(join(dir, KEY_FILE))).mode & 0o777).toBe(0o600)
    expect((await stat(join(dir, DATASTORE_DIR))).isDirectory()).toBe(true)

    expect(await first.join(other.addresses)).toBe(1)
    await waitForRouting([first, other], 1)
    expect(await first.discovery.announce()).toBeGreaterThan(0)
    expect((await other.discover(query)).map(c => c.agent_id)).toEqual([agentId])

    await stop(first)
    // started without a card draft, the node holds the card it published before, as it was
    const second = await start()
    expect(second.agentId).toBe(agentId)
    expect(second.card).toEqual(firstCard)
    expect(second.addresses).not.toEqual([])

    expect(await second.join(other.addresses)).toBe(1)
    await waitForRouting([second, other], 1)
    const changed = await second.publishCard({ ...card, description: 'keeps things, since the restart' })
    expect(changed.seq).toBeGreaterThan(firstCard!.seq)
    expect(await second.discovery.announce()).toBeGreaterThan(0)

    // the other node reaches it at its new address, and gets the new card
    const found = await other.discover(query, { fresh: true })
    expect(found).toEqual([changed])
    expect(await other.discovery.getCard(agentId, { fresh: true })).toEqual(changed)
  })

  it('a card published while the previous one is being announced reaches the DHT too', async () => {
    const node = running.find(n => n !== other)!
    const agentId = node.agentId
    // two publications at once get distinct seqs
    const [first, second] = await Promise.all([
      node.publishCard({ ...card, description: 'first' }),
      node.publishCard({ ...card, description: 'second' })
    ])
    expect(second.seq).toBeGreaterThan(first.seq)
    // each publication starts an announcement; this one lands while the last one is running
    const third = await node.publishCard({ ...card, description: 'third' })
    expect(third.seq).toBeGreaterThan(second.seq)
    expect(await node.discovery.announce()).toBeGreaterThan(0)
    await stop(node)
    // with the agent gone, only the DHT record can answer
    expect(await other.discovery.getCard(agentId, { fresh: true })).toEqual(third)
  })
})
