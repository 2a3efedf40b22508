/**
 * A node of the campaign in its own process, driven over the IPC channel of
 * child_process.fork. Roles:
 *  - `target <dataDir>`: a node on TCP 127.0.0.1 with a LevelDB datastore that
 *    serves an echo capability and publishes its card; answers `heap` (after a
 *    full GC) so the parent can see what the attack left in memory;
 *  - `honest <targetAddrsJson>`: a node that delegates to the target at a
 *    steady pace and answers `window` with the latencies of its calls since the
 *    last `window`, so the parent compares them before and during an attack.
 * Both answer `stop`; a child whose parent is gone (IPC disconnect) stops too.
 */
import { rm } from 'node:fs/promises'
import { createMeshNode, type MeshNode } from '../../src/node.ts'
import { ECHO, HONEST_CALL_INTERVAL_MS, HONEST_CALL_TIMEOUT_MS, SPAM_TASK } from './common.ts'

type Request = { id: number, cmd: 'heap' | 'window' | 'stats' | 'stop' }

function send (msg: object): void {
  process.send?.(msg)
}

async function target (dataDir: string): Promise<MeshNode> {
  const node = await createMeshNode({ listen: ['/ip4/127.0.0.1/tcp/0'], dataDir, localMesh: true })
  await node.start()
  node.runs.handle(ECHO, async (ctx) => ({ echo: ctx.input }))
  await node.publishCard({ name: 'campaign-target', capabilities: [ECHO] })
  // a correlation the target follows, so a gossip flood on its topic reaches its validator
  await node.events.subscribe(SPAM_TASK, { onEvent: () => {} })
  send({ type: 'ready', agentId: node.agentId, addresses: node.addresses })
  return node
}

interface Window { latencies: number[], failures: number, errors: Record<string, number> }

async function honest (targetAddrs: string[], targetId: string): Promise<{ node: MeshNode, window: () => Window, stop: () => void }> {
  const node = await createMeshNode({ listen: ['/ip4/127.0.0.1/tcp/0'], localMesh: true })
  await node.start()
  if (await node.join(targetAddrs) === 0) throw new Error('the honest node could not reach the target')
  let current: Window = { latencies: [], failures: 0, errors: {} }
  let running = true
  let i = 0
  const loop = async (): Promise<void> => {
    while (running) {
      const started = performance.now()
      try {
        await node.delegate({ to_agent: targetId, task_id: `honest-${process.pid}-${i++}`, capability: ECHO, input: { i } }, { signal: AbortSignal.timeout(HONEST_CALL_TIMEOUT_MS) })
        current.latencies.push(performance.now() - started)
      } catch (err) {
        current.failures++
        const code = (err as { code?: string }).code ?? (err as Error).name
        current.errors[code] = (current.errors[code] ?? 0) + 1
      }
      const wait = HONEST_CALL_INTERVAL_MS - (performance.now() - started)
      if (wait > 0) await new Promise(resolve => setTimeout(resolve, wait))
    }
  }
  void loop()
  send({ type: 'ready', agentId: node.agentId })
  return {
    node,
    window: () => { const w = current; current = { latencies: [], failures: 0, errors: {} }; return w },
    stop: () => { running = false }
  }
}

async function main (): Promise<void> {
  const [role, arg1, arg2] = process.argv.slice(2)
  let node: MeshNode
  let window: (() => Window) | undefined
  let stopLoop = (): void => {}
  if (role === 'target' && arg1 !== undefined) {
    node = await target(arg1)
  } else if (role === 'honest' && arg1 !== undefined && arg2 !== undefined) {
    const h = await honest(JSON.parse(arg1) as string[], arg2)
    node = h.node
    window = h.window
    stopLoop = h.stop
  } else {
    throw new Error('usage: child.ts target <dataDir> | honest <targetAddrsJson> <targetAgentId>')
  }
  const stop = async (): Promise<void> => {
    stopLoop()
    await node.stop()
    if (role === 'target' && arg1 !== undefined) await rm(arg1, { recursive: true, force: true })
    process.exit(0)
  }
  process.on('disconnect', () => { void stop() })
  process.on('message', (msg: Request) => {
    if (msg.cmd === 'heap') {
      const gc = (globalThis as { gc?: () => void }).gc
      gc?.()
      gc?.()
      send({ id: msg.id, heapUsed: process.memoryUsage().heapUsed, rss: process.memoryUsage().rss, gc: gc !== undefined })
    } else if (msg.cmd === 'stats') {
      // what the target holds for its peers: topics it tracks (gossipsub, bounded per peer) and gossip verdicts
      const topics = (node.host.services.pubsub as unknown as { topics?: Map<string, Set<string>> }).topics ?? new Map<string, Set<string>>()
      const perPeer = new Map<string, number>()
      for (const peers of topics.values()) for (const p of peers) perPeer.set(p, (perPeer.get(p) ?? 0) + 1)
      send({ id: msg.id, trackedTopics: topics.size, maxTopicsOfOnePeer: Math.max(0, ...perPeer.values()), gossip: node.events.stats.gossip })
    } else if (msg.cmd === 'window') {
      send({ id: msg.id, ...(window?.() ?? { latencies: [], failures: 0, errors: {} }) })
    } else if (msg.cmd === 'stop') {
      send({ id: msg.id, stopping: true })
      void stop()
    }
  })
}

main().catch((err: unknown) => {
  console.error(err)
  process.exit(1)
})
