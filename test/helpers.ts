import { createMeshNode, type MeshNode, type MeshNodeOptions } from '../src/node.ts'

let memCounter = 0

export interface MeshOptions {
  transport?: 'memory' | 'tcp'
  /** Node i joins through node `bootstrapOf(i)` (default: a random earlier node). */
  bootstrapOf?: (i: number) => number
  nodeOptions?: (i: number) => Partial<MeshNodeOptions>
}

/** Start `n` real nodes, each joining through another one: no central server. */
export async function startMesh (n: number, opts: MeshOptions = {}): Promise<MeshNode[]> {
  const nodes: MeshNode[] = []
  for (let i = 0; i < n; i++) {
    const listen = opts.transport === 'tcp' ? ['/ip4/127.0.0.1/tcp/0'] : [`/memory/aap-test-${process.pid}-${memCounter++}`]
    const node = await createMeshNode({ listen, localMesh: true, ...(opts.nodeOptions?.(i) ?? {}) })
    await node.start()
    if (i > 0) {
      const j = opts.bootstrapOf?.(i) ?? Math.floor(Math.random() * i)
      const other = nodes[j]
      if (other === undefined) throw new Error('bad bootstrap index')
      const joined = await node.join(other.addresses)
      if (joined === 0) throw new Error(`node ${i} could not join node ${j}`)
    }
    nodes.push(node)
  }
  await waitForRouting(nodes)
  return nodes
}

/** Resolve when every node has at least `min` peers in its DHT routing table. */
export async function waitForRouting (nodes: MeshNode[], min = Math.min(nodes.length - 1, 3)): Promise<void> {
  await Promise.all(nodes.map(async node => {
    await until(async () => (await node.host.services.dht.routingTable.size) >= min, `routing table of ${node.agentId} >= ${min}`)
  }))
}

/** Re-check a condition until it holds (bounded); for state that exposes no event, e.g. the DHT routing table size. */
export async function until (cond: () => boolean | Promise<boolean>, what: string, timeoutMs = 20_000): Promise<void> {
  const deadline = Date.now() + timeoutMs
  while (!(await cond())) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`)
    await new Promise(resolve => setTimeout(resolve, 5))
  }
}

export async function stopAll (nodes: MeshNode[]): Promise<void> {
  await Promise.all(nodes.map(async n => n.stop()))
}
