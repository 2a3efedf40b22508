/**
 * `aap-mesh start` without --bootstrap, on a data dir whose node remembers
 * peers (src/wire/remembered-peers.ts): it rejoins the mesh through them
 * (src/cli/start.ts, src/wire/bootstrap.ts). Before, the CLI ran the
 * bootstrap loop only when given --bootstrap, so a node restarted without the
 * flag started alone although it knew peers of the mesh. A real node process
 * and a real loopback peer in this process, restarted on its port with its key.
 */
import { generateKeyPair } from '@libp2p/crypto/keys'
import type { PrivateKey } from '@libp2p/interface'
import { afterEach, describe, expect, it } from 'vitest'
import { createMeshNode, type MeshNode } from '../src/node.ts'
import { NodeProc, TempDirs } from './cli-helpers.ts'
import { freePort, until } from './helpers.ts'

const dirs = new TempDirs()
const procs: NodeProc[] = []
const nodes: MeshNode[] = []
afterEach(async () => {
  await Promise.all(procs.splice(0).map(async p => p.stop()))
  await Promise.all(nodes.splice(0).map(async n => n.stop()))
  await dirs.cleanup()
})

async function peer (privateKey: PrivateKey, port: number): Promise<MeshNode> {
  const n = await createMeshNode({ privateKey, listen: [`/ip4/127.0.0.1/tcp/${port}`], localMesh: true })
  await n.start()
  nodes.push(n)
  return n
}

async function stopPeer (n: MeshNode): Promise<void> {
  nodes.splice(nodes.indexOf(n), 1)
  await n.stop()
}

const connectedTo = (n: MeshNode, id: string): boolean => n.host.getConnections().some(c => c.remotePeer.toString() === id)

/** Start a node with `--bootstrap <peer>`, wait until it remembers the peer, stop it: its data dir now names the peer. */
async function rememberingDir (b: MeshNode): Promise<{ dir: string, agentId: string }> {
  const dir = await dirs.make('aap-rejoin-')
  const first = new NodeProc(dir, ['--bootstrap', b.addresses[0]!, '--metrics-port', '0'])
  procs.push(first)
  const started = await first.started()
  expect(started.metrics).not.toBeNull()
  await until(async () => /^aap_remembered_peers\{what="held"\} 1$/m.test(await (await fetch(started.metrics!)).text()), 'the peer remembered')
  expect((await first.stop()).code).toBe(0)
  procs.splice(procs.indexOf(first), 1)
  return { dir, agentId: started.agentId }
}

describe('aap-mesh start without --bootstrap', () => {
  it('dials the peers its data dir remembers once it has started', async () => {
    const b = await peer(await generateKeyPair('Ed25519'), await freePort())
    const { dir, agentId } = await rememberingDir(b)

    const again = new NodeProc(dir, [])
    procs.push(again)
    await again.started()
    // dialed once the node is up, so the start does not wait on remembered peers that are gone; before: never
    expect((await again.event('joined')).peers).toBe(1)
    // stdout's first line is still the started line
    const order = again.lines.map(l => l.event).filter(e => e === 'started' || e === 'joined')
    expect(order[0]).toBe('started')
    await until(() => connectedTo(b, agentId), 'the remembered peer connected to')
  })

  it('dials them again with backoff while it holds no connection, and joins once one is back', async () => {
    const key = await generateKeyPair('Ed25519')
    const port = await freePort()
    const b = await peer(key, port)
    const { dir, agentId } = await rememberingDir(b)
    await stopPeer(b)

    const again = new NodeProc(dir, [])
    procs.push(again)
    await again.started()
    await until(() => /none of the 1 peer\(s\) remembered from before answered/.test(again.stderr), 'the warning that no remembered peer answered')

    // the same peer, back on its address
    const back = await peer(key, port)
    // before: never (the remembered peers were dialed by no one)
    const joined = await again.event('joined')
    expect(joined.peers).toBe(1)
    await until(() => connectedTo(back, agentId), 'the remembered peer connected to again')
  })
})
