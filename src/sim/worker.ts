/**
 * One simulated agent in its own process (`npm run sim -- --processes`): a
 * node on TCP loopback with a LevelDB data directory, the simulated agent
 * behaviour, and a small IPC surface for the driver process (its log, for the
 * audit of forged events). Prints one JSON line when ready.
 *
 *   node src/sim/worker.ts --index 3 --data-dir /tmp/x --bootstrap /ip4/127.0.0.1/tcp/1234/p2p/...
 */
import { parseArgs } from 'node:util'
import { createMeshNode } from '../node.ts'
import { installAgent, simCard } from './agents.ts'
import { useNodeBufferPool } from '../wire/buffer-pool.ts'

// a driver that goes away while this worker starts leaves no orphan: until the worker can stop its node
// (`stop`, below) it exits at once; a channel that closed before this line ran counts as gone too
let onDriverGone = (): void => {
  process.stderr.write('worker: the driver went away while the worker started: exiting\n')
  process.exit(1)
}
process.on('disconnect', () => { onDriverGone() })
if (process.send !== undefined && !process.connected) onDriverGone()

// a process of mesh nodes: small buffers on small slabs (src/wire/buffer-pool.ts)
useNodeBufferPool()

const { values } = parseArgs({
  options: {
    index: { type: 'string' },
    'data-dir': { type: 'string' },
    bootstrap: { type: 'string', multiple: true, default: [] }
  }
})
const index = Number(values.index ?? '0')
const draft = simCard(index)
const node = await createMeshNode({
  listen: ['/ip4/127.0.0.1/tcp/0'],
  localMesh: true,
  ...(values['data-dir'] === undefined ? {} : { dataDir: values['data-dir'] })
})
await node.start()
installAgent(node, draft)
if (values.bootstrap.length > 0) await node.join(values.bootstrap)
const card = await node.publishCard(draft)
await node.discovery.announce().catch((err: unknown) => {
  // the parent's lookups find this node later through its provider records or its peers
  process.stderr.write(`announce failed: ${String(err)}\n`)
})

interface LogRequest { id: number, op: 'log', run_id: string, seq: number }

process.on('message', (msg: LogRequest) => {
  if (msg?.op !== 'log') return
  void node.runs.store.log.get(msg.run_id, msg.seq).then(event => {
    process.send?.({ id: msg.id, event: event ?? null })
  })
})
const stop = (): void => { void node.stop().finally(() => process.exit(0)) }
process.on('SIGTERM', stop)
process.on('SIGINT', stop)
onDriverGone = stop
process.stdout.write(`${JSON.stringify({ ready: true, agent_id: node.agentId, addresses: node.addresses, card })}\n`)
