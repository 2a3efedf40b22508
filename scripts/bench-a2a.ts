/**
 * The A2A bridge: an @a2a-js/sdk client through two mesh nodes to an A2A
 * server, beside the same client straight to that server, in the same run:
 *
 *   client -> node 1 (A2A inbound, `--a2a-port`) -> delegate over the mesh ->
 *   node 2 (A2A outbound, `--a2a-agent`) -> SendStreamingMessage -> server
 *
 * The server completes each task at once (one DataPart artifact); every
 * request is a blocking SendMessage answered with the COMPLETED task. Both
 * nodes run in this process on TCP loopback (node 1 follows the run's events
 * back from node 2, as always), each with a LevelDB data directory. Figures
 * are for comparison within the run.
 *
 *   node scripts/bench-a2a.ts [--requests 300] [--concurrency 8] [--json]
 */
import { mkdtemp, rm } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { TaskState } from '@a2a-js/sdk'
import type { Message, SendMessageRequest } from '@a2a-js/sdk'
import { ClientFactory, type Client } from '@a2a-js/sdk/client'
import { createMeshNode } from '../src/node.ts'
import { silentLogger } from '../src/logger.ts'
import { A2aServer } from '../src/a2a/server.ts'
import { A2aOutbound, mergeDrafts } from '../src/a2a/outbound.ts'
import { delegateMessage } from '../src/a2a/mapping.ts'
import { intArg, parseArgs } from './lib/proc.ts'
import { completingTaskExecutor, startA2aServer } from './lib/ref-a2a.ts'
import { benchRequests, fmtMs, fmtRate, printTable, type RequestBenchResult } from './lib/stats.ts'

const args = parseArgs(process.argv.slice(2), {
  known: ['requests', 'concurrency', 'json'],
  text: 'usage: node scripts/bench-a2a.ts [--requests 300] [--concurrency 8] [--json]'
})
const REQUESTS = intArg(args, 'requests', 300)
const CONCURRENCY = intArg(args, 'concurrency', 8)
const JSON_OUT = args.has('json')
const REQUEST_TIMEOUT_MS = 20_000
const READY_TIMEOUT_MS = 30_000
const log = (m: string): void => { process.stderr.write(m + '\n') }

const server = await startA2aServer({ executor: completingTaskExecutor, streaming: true })
// LevelDB data dirs, as a node has in use (the memory datastore scans every key on a prefix query)
const dirs = [await mkdtemp(join(tmpdir(), 'aap-bench-a2a-1-')), await mkdtemp(join(tmpdir(), 'aap-bench-a2a-2-'))]
const n1 = await createMeshNode({ dataDir: dirs[0], listen: ['/ip4/127.0.0.1/tcp/0'], localMesh: true })
const n2 = await createMeshNode({ dataDir: dirs[1], listen: ['/ip4/127.0.0.1/tcp/0'], localMesh: true })
await n1.start()
await n2.start()
let a2a: A2aServer | undefined
try {
  if (await n2.join(n1.addresses) === 0) throw new Error('node 2 could not join node 1')
  const bridged = await new A2aOutbound(n2, silentLogger()).add(server.url)
  await n2.publishCard(mergeDrafts(undefined, [bridged.draft])!)
  const cap = bridged.draft.capabilities![0]!
  a2a = await A2aServer.start(n1, { port: 0, logger: silentLogger() })
  // node 1 resolves node 2's card before the first request
  const deadline = AbortSignal.timeout(READY_TIMEOUT_MS)
  await n1.getCard(n2.agentId, { signal: deadline, fresh: true })

  const direct = await new ClientFactory().createFromUrl(server.url)
  const viaMesh = await new ClientFactory().createFromUrl(a2a.clientUrl(n2.agentId))
  const request = (client: Client) => async (i: number): Promise<void> => {
    const message: Message = delegateMessage(cap, { i }, `bench-a2a-${i}-${Math.random().toString(36).slice(2)}`)
    const params: SendMessageRequest = { tenant: '', message, configuration: undefined, metadata: undefined }
    const r = await client.sendMessage(params, { signal: AbortSignal.timeout(REQUEST_TIMEOUT_MS) })
    if (!('status' in r) || r.status?.state !== TaskState.TASK_STATE_COMPLETED) throw new Error(`unexpected answer: ${JSON.stringify(r).slice(0, 300)}`)
  }
  const opts = { requests: REQUESTS, concurrency: CONCURRENCY }
  log(`[bench-a2a] A2A client -> A2A server, ${REQUESTS} sequential + concurrency ${CONCURRENCY}`)
  const straight: RequestBenchResult = await benchRequests(request(direct), { name: 'a2a direct', ...opts })
  log('[bench-a2a] A2A client -> node 1 -> mesh -> node 2 -> A2A server')
  const mesh: RequestBenchResult = await benchRequests(request(viaMesh), { name: 'a2a via mesh', ...opts })
  const ratio = mesh.latency.p50 / straight.latency.p50
  const rateRatio = mesh.reqPerSec / straight.reqPerSec
  if (JSON_OUT) {
    process.stdout.write(JSON.stringify({ direct: straight, mesh, ratio_p50: ratio, ratio_rate: rateRatio }) + '\n')
  } else {
    printTable([
      { what: 'A2A SendMessage -> COMPLETED, straight to the server', p50: fmtMs(straight.latency.p50), p99: fmtMs(straight.latency.p99), [`rate @${CONCURRENCY}`]: fmtRate(straight.reqPerSec) },
      { what: 'the same through two mesh nodes', p50: fmtMs(mesh.latency.p50), p99: fmtMs(mesh.latency.p99), [`rate @${CONCURRENCY}`]: fmtRate(mesh.reqPerSec) }
    ])
    process.stdout.write(`\nvia mesh / straight: p50 ${ratio.toFixed(2)}x, rate ${rateRatio.toFixed(2)}x\n`)
  }
} finally {
  await a2a?.close()
  await n1.stop()
  await n2.stop()
  await server.close()
  for (const d of dirs) await rm(d, { recursive: true, force: true })
}
