/**
 * A MeshNode's start and stop called while the other (or the same) is under
 * way (src/node.ts), found by session 57's review: a stop during a start
 * returned at once and the node came up afterwards, listening for good; a
 * second stop returned while the first still held the data dir; two starts
 * at once both built the node's parts, and the loser's clean-up stopped the
 * winner's host while a TCP server of the other stayed open; keepJoined after
 * a stop started a retry loop nothing stopped.
 */
import { mkdtemp, rm } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { createServer, type AddressInfo, type Server } from 'node:net'
import { generateKeyPair } from '@libp2p/crypto/keys'
import { peerIdFromPrivateKey } from '@libp2p/peer-id'
import { afterAll, describe, expect, it } from 'vitest'
import { silentLogger } from '../src/logger.ts'
import { createMeshNode, type MeshNode } from '../src/node.ts'
import { rejectsWith, until } from './helpers.ts'

const LOOPBACK = ['/ip4/127.0.0.1/tcp/0']
/** Connections the silent bootstrap peer took. */
let silentConnections = 0
/** TCP servers this process has open. */
const tcpServers = (): number => process.getActiveResourcesInfo().filter(r => r === 'TCPServerWrap').length

describe('a MeshNode started and stopped while a start or stop is under way', () => {
  const dirs: string[] = []
  const nodes: MeshNode[] = []
  afterAll(async () => {
    await Promise.all(nodes.map(async n => n.stop()))
    await Promise.all(dirs.map(async d => rm(d, { recursive: true, force: true })))
  })
  const node = async (dataDir?: string): Promise<MeshNode> => {
    const n = await createMeshNode({ listen: LOOPBACK, localMesh: true, logger: silentLogger(), ...(dataDir === undefined ? {} : { dataDir }) })
    nodes.push(n)
    return n
  }

  it('a stop during a start waits for it and stops the node', async () => {
    const before = tcpServers()
    const n = await node()
    const starting = n.start()
    await n.stop()
    await starting
    // before: 'started', one TCP server left listening
    expect(n.host.status).toBe('stopped')
    expect(tcpServers()).toBe(before)
  })

  it('every stop waits for the one stop under way: the data dir is free when the second returns', async () => {
    const dir = await mkdtemp(join(tmpdir(), 'aap-node-overlap-'))
    dirs.push(dir)
    const n = await node(dir)
    await n.start()
    const first = n.stop()
    await n.stop()
    expect(n.host.status).toBe('stopped')
    await first
    // before: the second stop returned at once, and this start found the data dir held
    const again = await node(dir)
    await again.start()
    expect(again.agentId).toBe(n.agentId)
    await again.stop()
  }, 30_000)

  it('two starts at once are one start, and one stop leaves nothing listening', async () => {
    const before = tcpServers()
    const n = await node()
    const results = await Promise.allSettled([n.start(), n.start()])
    // before: the second rejected (a protocol handled twice) and its clean-up stopped the first one's host
    expect(results.map(r => r.status)).toEqual(['fulfilled', 'fulfilled'])
    expect(n.host.status).toBe('started')
    await n.stop()
    expect(tcpServers()).toBe(before)
  })

  it('keepJoined is refused on a stopped node, and works again once it is started again', async () => {
    const seed = await node()
    await seed.start()
    const n = await node()
    await n.start()
    expect(await n.keepJoined(seed.addresses)).toBe(1)
    await n.stop()
    // before: it resolved 0 and began a retry loop no stop ended
    await rejectsWith(n.keepJoined(seed.addresses), 'INTERNAL')
    await n.start()
    // before: "keepJoined was already called" (the stopped loop was still held)
    expect(await n.keepJoined(seed.addresses)).toBe(1)
    await n.stop()
    await seed.stop()
  }, 30_000)
})

describe('a MeshNode restarted without waiting, or started twice while it joins', () => {
  const nodes: MeshNode[] = []
  const servers: Server[] = []
  afterAll(async () => {
    await Promise.all(nodes.map(async n => n.stop()))
    for (const s of servers) s.close()
  })

  it('a start right after a stop not waited for starts once the stop has ended', async () => {
    const n = await createMeshNode({ listen: LOOPBACK, localMesh: true, logger: silentLogger() })
    nodes.push(n)
    await n.start()
    const stopping = n.stop()
    await n.start()
    await stopping
    // before: the start returned at once and the stop went on after it
    expect(n.host.status).toBe('started')
  })

  it('a second start while the first one joins shares its outcome (its card refused)', async () => {
    // a bootstrap peer that takes the connection and never speaks: the first start's join waits on it
    const silent = createServer(() => { silentConnections++ })
    servers.push(silent)
    await new Promise<void>(resolve => { silent.listen(0, '127.0.0.1', resolve) })
    const peer = peerIdFromPrivateKey(await generateKeyPair('Ed25519')).toString()
    const bootstrap = [`/ip4/127.0.0.1/tcp/${(silent.address() as AddressInfo).port}/p2p/${peer}`]
    const n = await createMeshNode({ listen: LOOPBACK, localMesh: true, logger: silentLogger(), bootstrap, card: { name: 'x', capabilities: 'not a list' as unknown as [] } })
    nodes.push(n)
    const first = n.start()
    // the first start is past its parts (the node counts as started) and joining
    await until(() => silentConnections > 0, 'the first start to dial its bootstrap peer')
    const second = n.start()
    const outcomes = await Promise.allSettled([first, second])
    // before: the second resolved while the first failed and stopped the node
    expect(outcomes.map(o => o.status)).toEqual(['rejected', 'rejected'])
    expect(n.host.status).toBe('stopped')
  })
})
