/**
 * delegate -> Run handle across networks, beside the raw libp2p echo on the
 * same connection, in a lab of network namespaces (root only; see
 * test/net/lab.ts):
 *
 *   direct       a public delegator and a public executor (TCP)
 *   relayed      a delegator and an executor behind two different NATs,
 *                through a public relay (Circuit Relay v2)
 *   hole-punched DCUtR over TCP: reported, not measured, when no relayed
 *                connection was upgraded (see the note printed with it)
 *
 * Every link to the lab's internet gets netem delay (10 ms each way, so a
 * 20 ms RTT between two hosts) when the kernel has netem; the output says
 * whether it did. Each node is its own process in its own namespace (this
 * file with --worker), an in-process MeshNode with the network options the
 * CLI uses.
 *
 *   npm run bench:net [-- --requests 200] [--json]
 */
import { spawn, type ChildProcess } from 'node:child_process'
import { mkdtemp, rm } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { createInterface } from 'node:readline'
import { fileURLToPath } from 'node:url'
import { lpStream } from '@libp2p/utils'
import { Circuit } from '@multiformats/multiaddr-matcher'
import { createMeshNode, type MeshNode } from '../src/node.ts'
import { createLogger } from '../src/logger.ts'
import { needsRelay, settledConnection } from '../src/wire/network.ts'
import { peerIdOfAgent } from '../src/identity/identity.ts'
import { ECHO_MAX_STREAMS, ECHO_PROTOCOL, serveEchoStream } from './lib/ref-echo.ts'
import { exitOnShutdown, intArg, parseArgs } from './lib/proc.ts'
import { benchRequests, fmtMs, printTable, type RequestBenchResult } from './lib/stats.ts'

const CAP = { capability_id: 'cap:bench-net', version: '1.0.0' }
const PORT = 4001
const ONE_WAY_DELAY_MS = 10
/** A worker must be ready (joined, relay address published when private) within this. */
const WORKER_READY_TIMEOUT_MS = 60_000
const ECHO_TIMEOUT_MS = 10_000
/** Any one step of the orchestrator (a worker ready, a path measured). */
const WAIT_TIMEOUT_MS = 180_000
const self = fileURLToPath(import.meta.url)

// ---- worker: one node in one namespace ------------------------------------------------

async function startWorkerNode (args: Map<string, string>): Promise<{ node: MeshNode, dataDir: string }> {
  const dataDir = await mkdtemp(join(tmpdir(), 'aap-bench-net-'))
  const listen = [`/ip4/0.0.0.0/tcp/${PORT}`]
  const relayClient = needsRelay(listen)
  const node = await createMeshNode({
    dataDir, listen, logger: createLogger('warn'), network: { relayServer: 'off', relayClient, upnp: false }
  })
  await node.start()
  const bootstrap = args.get('bootstrap')
  if (bootstrap !== undefined) await node.keepJoined([bootstrap])
  if (relayClient) {
    // private: ready once a relay reservation is published
    await new Promise<void>((resolve, reject) => {
      const timer = setTimeout(() => { reject(new Error('no relay reservation in time')) }, WORKER_READY_TIMEOUT_MS)
      const check = (n: number): void => { if (n > 0) { clearTimeout(timer); resolve() } }
      node.reachability?.onChange(s => { check(s.relayAddresses) })
      check(node.reachability?.current.relayAddresses ?? 0)
    })
  }
  return { node, dataDir }
}

async function executorWorker (args: Map<string, string>): Promise<void> {
  const { node, dataDir } = await startWorkerNode(args)
  node.runs.handle(CAP, async () => ({ ok: true }))
  await node.host.handle(ECHO_PROTOCOL, (stream) => { void serveEchoStream(stream) },
    { maxInboundStreams: ECHO_MAX_STREAMS, maxOutboundStreams: ECHO_MAX_STREAMS, runOnLimitedConnection: true })
  await node.publishCard({ name: 'bench-net-executor', capabilities: [CAP] })
  exitOnShutdown(async () => {
    await node.stop()
    await rm(dataDir, { recursive: true, force: true })
  })
  process.stdout.write(JSON.stringify({ event: 'ready', agent_id: node.agentId }) + '\n')
}

async function delegatorWorker (args: Map<string, string>): Promise<void> {
  const { node, dataDir } = await startWorkerNode(args)
  const target = args.get('target') ?? ''
  const requests = intArg(args, 'requests', 100)
  const peer = peerIdOfAgent(target)
  try {
    let n = 0
    const delegate = await benchRequests(async () => {
      await node.delegate({ to_agent: target, capability: CAP, task_id: `bench-${n++}`, input: {} }, { follow: false })
    }, { name: 'delegate', requests, concurrency: 0 })
    const conn = settledConnection(node.host.getConnections(peer))
    const path = conn === undefined ? 'none' : Circuit.matches(conn.remoteAddr) ? 'relayed' : 'direct'
    const connections = node.host.getConnections(peer).map(c => Circuit.matches(c.remoteAddr) ? 'relayed' : 'direct')
    const frame = new Uint8Array(64)
    const echo = await benchRequests(async () => {
      const c = settledConnection(node.host.getConnections(peer))
      if (c === undefined) throw new Error('no connection to the executor')
      const signal = AbortSignal.timeout(ECHO_TIMEOUT_MS)
      const stream = await c.newStream(ECHO_PROTOCOL, { signal, runOnLimitedConnection: true })
      const lp = lpStream(stream)
      await lp.write(frame, { signal })
      await lp.read({ signal })
      await stream.close({ signal })
    }, { name: 'echo', requests, concurrency: 0 })
    process.stdout.write(JSON.stringify({ event: 'result', path, connections, delegate, echo }) + '\n')
  } finally {
    await node.stop()
    await rm(dataDir, { recursive: true, force: true })
  }
}

// ---- orchestrator ---------------------------------------------------------------------

interface Worker { proc: ChildProcess, next: (event: string) => Promise<Record<string, unknown>> }

function worker (ns: string, args: string[]): Worker {
  const proc = spawn('ip', ['netns', 'exec', ns, process.execPath, self, ...args], { stdio: ['pipe', 'pipe', 'inherit'] })
  const wait = lineWaiter(proc)
  return { proc, next: async (event) => wait(event) }
}

async function main (): Promise<void> {
  const args = parseArgs(process.argv.slice(2), {
    // --worker, --bootstrap and --target are how the bench starts its own processes in the namespaces
    known: ['requests', 'json', 'worker', 'bootstrap', 'target'],
    text: 'usage: npm run bench:net [-- --requests 200 --json]'
  })
  const role = args.get('worker')
  if (role === 'executor') return executorWorker(args)
  if (role === 'delegator') return delegatorWorker(args)

  const { Lab } = await import('../test/net/lab.ts')
  const requests = intArg(args, 'requests', 200)
  const lab = await Lab.create()
  const procs: ChildProcess[] = []
  const dirs: string[] = []
  try {
    const relayHost = await lab.publicHost('relay')
    const [pubE, pubD] = [await lab.publicHost('pube'), await lab.publicHost('pubd')]
    const [r1, r2] = [await lab.router('r1', 1), await lab.router('r2', 2)]
    const [natE, natD] = [await lab.natHost('nate', r1), await lab.natHost('natd', r2)]
    const delayed = await lab.delay(ONE_WAY_DELAY_MS)

    // the relay and bootstrap node: an `aap-mesh start` process
    const relayDir = await mkdtemp(join(tmpdir(), 'aap-bench-relay-'))
    dirs.push(relayDir)
    const relayNode = spawn('ip', ['netns', 'exec', relayHost.ns, process.execPath, fileURLToPath(new URL('../src/cli/main.ts', import.meta.url)), 'start',
      '--data-dir', relayDir, '--listen', `/ip4/0.0.0.0/tcp/${PORT}`, '--no-api', '--log-level', 'warn'], { stdio: ['pipe', 'pipe', 'inherit'] })
    procs.push(relayNode)
    const relayLines = lineWaiter(relayNode)
    const started = await relayLines('started')
    const relayPeer = (started.addresses as string[])[0]?.split('/p2p/').at(-1) ?? ''
    // (it serves relay reservations once AutoNAT, asked of the first workers, confirms its address)
    const bootstrap = `/ip4/${relayHost.ip}/tcp/${PORT}/p2p/${relayPeer}`

    const results: Array<{ path: string, res: Record<string, unknown> }> = []
    for (const [label, eHost, dHost] of [['direct', pubE, pubD], ['relayed', natE, natD]] as const) {
      const e = worker(eHost.ns, ['--worker', 'executor', '--bootstrap', bootstrap])
      procs.push(e.proc)
      const ready = await e.next('ready')
      const d = worker(dHost.ns, ['--worker', 'delegator', '--bootstrap', bootstrap, '--target', String(ready.agent_id), '--requests', String(requests)])
      procs.push(d.proc)
      results.push({ path: label, res: await d.next('result') })
      e.proc.kill('SIGTERM')
    }

    const rows = results.map(({ path, res }) => {
      const del = (res.delegate as RequestBenchResult).latency
      const echo = (res.echo as RequestBenchResult).latency
      return {
        path,
        connection: String(res.path),
        'delegate p50': fmtMs(del.p50),
        'delegate p90': fmtMs(del.p90),
        'echo p50': fmtMs(echo.p50),
        'echo p90': fmtMs(echo.p90),
        'delegate/echo p50': (del.p50 / echo.p50).toFixed(2)
      }
    })
    rows.push({
      path: 'hole-punched', connection: 'none', 'delegate p50': 'n/a', 'delegate p90': 'n/a', 'echo p50': 'n/a', 'echo p90': 'n/a', 'delegate/echo p50': 'n/a'
    })
    if (args.has('json')) {
      process.stdout.write(JSON.stringify({ delayed, oneWayDelayMs: delayed ? ONE_WAY_DELAY_MS : 0, requests, results }) + '\n')
      return
    }
    process.stdout.write(`\ndelegate -> Run handle and raw libp2p echo, ${requests} sequential requests per path, separate namespaces and processes\n`)
    process.stdout.write(delayed
      ? `netem: ${ONE_WAY_DELAY_MS} ms each way on every link to the lab internet (20 ms RTT between two hosts; a relayed path crosses two such RTTs)\n\n`
      : 'netem: NOT applied, this kernel has no netem qdisc (CONFIG_NET_SCH_NETEM unset); figures are without added delay\n\n')
    printTable(rows)
    process.stdout.write(`
hole-punched: not measured. DCUtR is on, but over TCP js-libp2p has no public address of a NATed node to
punch with: identify ignores TCP observed addresses (a dial's source port is not the listen port,
libp2p/js-libp2p#2620), so neither side can offer one and the relayed connection stays relayed.
`)
  } finally {
    for (const p of procs) if (p.exitCode === null) p.kill('SIGKILL')
    await Promise.all(procs.map(async p => new Promise(resolve => { if (p.exitCode !== null || p.signalCode !== null) resolve(null); else p.once('exit', resolve) })))
    await lab.destroy()
    await Promise.all(dirs.map(async d => rm(d, { recursive: true, force: true })))
  }
}

function lineWaiter (proc: ChildProcess): (event: string, match?: (l: Record<string, unknown>) => boolean) => Promise<Record<string, unknown>> {
  const lines: Array<Record<string, unknown>> = []
  const waiters: Array<() => void> = []
  createInterface({ input: proc.stdout! }).on('line', (text) => {
    if (!text.startsWith('{')) return
    try { lines.push(JSON.parse(text) as Record<string, unknown>) } catch (err) { process.stderr.write(`bad line: ${String(err)}\n`) }
    for (const w of waiters.splice(0)) w()
  })
  proc.on('exit', () => { for (const w of waiters.splice(0)) w() })
  return async (event, match = () => true) => new Promise((resolve, reject) => {
    const timer = setTimeout(() => { reject(new Error(`no "${event}" line within ${WAIT_TIMEOUT_MS} ms`)) }, WAIT_TIMEOUT_MS)
    const check = (): void => {
      const l = lines.find(x => x.event === event && match(x))
      if (l !== undefined) {
        clearTimeout(timer)
        resolve(l)
      } else if (proc.exitCode !== null || proc.signalCode !== null) {
        clearTimeout(timer)
        reject(new Error(`process exited before "${event}"`))
      } else {
        waiters.push(check)
      }
    }
    check()
  })
}

await main()
