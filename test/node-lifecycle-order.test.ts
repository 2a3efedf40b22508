/**
 * Starts and stops of a MeshNode called together, without waiting: the last
 * call wins (src/util/lifecycle.ts). Found by session 59's review: a stop, a
 * start and a stop left the node listening after the last stop resolved (the
 * second stop was the first one, and the start ran after it); a start, a
 * stop and a start on a new node left it stopped (the second start was the
 * first one, and the stop ran after it).
 */
import { afterAll, describe, expect, it } from 'vitest'
import { silentLogger } from '../src/logger.ts'
import { createMeshNode, type MeshNode } from '../src/node.ts'

const LOOPBACK = ['/ip4/127.0.0.1/tcp/0']
/** TCP servers this process has open. */
const tcpServers = (): number => process.getActiveResourcesInfo().filter(r => r === 'TCPServerWrap').length

describe('a MeshNode started and stopped by calls made together', () => {
  const nodes: MeshNode[] = []
  afterAll(async () => { await Promise.all(nodes.map(async n => n.stop())) })
  const node = async (): Promise<MeshNode> => {
    const n = await createMeshNode({ listen: LOOPBACK, localMesh: true, logger: silentLogger() })
    nodes.push(n)
    return n
  }

  it('stop, start, stop on a started node: stopped once all three resolved', async () => {
    const before = tcpServers()
    const n = await node()
    await n.start()
    const outcomes = await Promise.allSettled([n.stop(), n.start(), n.stop()])
    expect(outcomes.map(o => o.status)).toEqual(['fulfilled', 'fulfilled', 'fulfilled'])
    // before: the addresses of a node still listening, and its TCP server open
    expect(n.addresses).toEqual([])
    expect(n.host.status).toBe('stopped')
    expect(tcpServers()).toBe(before)
  })

  it('start, stop, start on a new node: started once all three resolved, and one stop stops it', async () => {
    const before = tcpServers()
    const n = await node()
    const outcomes = await Promise.allSettled([n.start(), n.stop(), n.start()])
    expect(outcomes.map(o => o.status)).toEqual(['fulfilled', 'fulfilled', 'fulfilled'])
    // before: [] (the node ended stopped)
    expect(n.addresses.length).toBeGreaterThan(0)
    expect(n.host.status).toBe('started')
    await n.stop()
    expect(n.addresses).toEqual([])
    expect(tcpServers()).toBe(before)
  })

  it('each call waits for the ones before it: a start after stop, start, stop starts the node again', async () => {
    const n = await node()
    await n.start()
    const outcomes = await Promise.allSettled([n.stop(), n.start(), n.stop(), n.start()])
    expect(outcomes.map(o => o.status)).toEqual(['fulfilled', 'fulfilled', 'fulfilled', 'fulfilled'])
    expect(n.host.status).toBe('started')
    // the node works: its own card is published and read back
    await n.publishCard({ name: 'again', capabilities: [] })
    expect(n.card?.name).toBe('again')
  })
})
