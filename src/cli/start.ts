/**
 * `aap-mesh start`: run one mesh node in the foreground, with its local agent
 * API (HTTP+SSE on loopback) and, on request, Prometheus metrics.
 *
 * stdout carries one JSON object per line, for programs (`started`,
 * `announced`, `discovered`, `stopped`); stderr carries the structured log
 * (pino JSON lines, --log-level). The node stays up until SIGINT or SIGTERM,
 * then stops gracefully: the API closes its streams, the node finishes its
 * writes, and the API files are removed from the data directory.
 */
import { readFile, rm } from 'node:fs/promises'
import { join } from 'node:path'
import { setTimeout as sleep } from 'node:timers/promises'
import { InvalidArgumentError, Option, type Command } from 'commander'
import {
  API_DEFAULT_HOST, API_DEFAULT_PORT, CLI_DISCOVER_DEADLINE_MS, CLI_DISCOVER_RETRY_MS, DEFAULT_DATA_DIR, DEFAULT_TCP_LISTEN,
  CONNECTIONS_MAX, EXECUTOR_LOST_AFTER_MS, METRICS_DEFAULT_HOST, STOP_TIMEOUT_MS
} from '../constants.ts'
import type { NodeMetrics } from '../api/metrics.ts'
import type { ApiServer } from '../api/server.ts'
import { createLogger, LOG_LEVELS, type LogLevel, type Logger } from '../logger.ts'
import type { AgentCard, CapabilityQuery, CardDraft } from '../card/card.ts'

/** card.ts compiles the wire schemas when loaded: only the commands that check a card pay for it. */
async function cardModule (): Promise<typeof import('../card/card.ts')> {
  return import('../card/card.ts')
}
import { AapError } from '../errors.ts'
import type { MeshNode } from '../node.ts'
import { A2A_DEFAULT_HOST } from '../a2a/constants.ts'
import { API_INFO_FILE, API_TOKEN_FILE } from '../api/files.ts'
import { isLoopbackAddress } from '../api/own-host.ts'
import { CLI_EXECUTOR_LOST_AFTER_MIN_MS } from './constants.ts'
import { cardDraftFrom, checkMultiaddrs, checkServerFlags, hostArg } from './start-args.ts'
import { onInterrupt } from './signals.ts'

export interface StartOptions {
  dataDir: string
  listen?: string[]
  bootstrap?: string[]
  mdns: boolean
  card?: string
  name?: string
  description?: string
  capability?: string[]
  tag?: string[]
  /** Test hook: look this capability up after joining and print what was found. */
  discover?: string
  /** false with --no-api. */
  api: boolean
  apiHost: string
  /** Unset: API_DEFAULT_PORT, or any free port when that one is taken. */
  apiPort?: number
  logLevel: LogLevel
  metricsPort?: number
  metricsHost: string
  /** Serve A2A v1.0 for the mesh's agents on this port (off unless given). */
  a2aPort?: number
  a2aHost: string
  /** A2A servers (their base URLs) to join to the mesh, repeatable. */
  a2aAgent?: string[]
  /** Serve cap:aap-conformance@0.1.0 with the scripted conformance agent (protocols/conformance.md). */
  conformanceAgent?: boolean
  announce?: string[]
  /** The connection budget (default CONNECTIONS_MAX). */
  maxConnections?: number
  /** Liveness bound of the runs this node delegates (default EXECUTOR_LOST_AFTER_MS). */
  executorLostAfter?: number
  relay: 'auto' | 'on' | 'off'
  relayClient: 'auto' | 'on' | 'off'
  upnp: boolean
  /** Test hook: one `connection` line per opened connection. */
  reportConnections: boolean
}

/** Option parser of a TCP port (0: any free port). */
function positiveCount (value: string): number {
  const n = Number(value)
  if (!/^[0-9]{1,9}$/.test(value) || n < 1) throw new InvalidArgumentError('a whole number of at least 1')
  return n
}

/** Option parser of --executor-lost-after: at least CLI_EXECUTOR_LOST_AFTER_MIN_MS, so one missed probe never fails a run. */
function lostAfter (value: string): number {
  const n = positiveCount(value)
  if (n < CLI_EXECUTOR_LOST_AFTER_MIN_MS) throw new InvalidArgumentError(`at least ${CLI_EXECUTOR_LOST_AFTER_MIN_MS} ms (one liveness probe interval and one probe's timeout): shorter, one missed probe fails the executor's live runs with EXECUTOR_LOST`)
  return n
}

export function parsePort (value: string): number {
  const n = Number(value)
  if (!/^[0-9]{1,5}$/.test(value) || n > 65535) throw new InvalidArgumentError('a port is an integer from 0 to 65535')
  return n
}

/** Option parser of repeatable options (no default, so help does not print one). */
function collect (value: string, previous: string[] | undefined): string[] {
  return [...(previous ?? []), value]
}

/** Set once stdout failed (whoever read it closed the pipe): the node goes on, with no more lines. */
let stdoutGone = false

/** One JSON line on stdout. */
function emit (event: string, fields: Record<string, unknown>): void {
  if (stdoutGone) return
  process.stdout.write(JSON.stringify({ event, ...fields }) + '\n')
}

/** Before the logger exists (the node failed to start): one line for people on stderr. */
function say (text: string): void {
  process.stderr.write(`aap-mesh: ${text}\n`)
}

export function registerStart (program: Command): Command {
  return program.command('start')
    .description('run a mesh node in the foreground: join the mesh, publish this agent\'s card, serve until SIGINT/SIGTERM')
    .option('--data-dir <dir>', 'directory of the node key (peer.key) and its datastore', `./${DEFAULT_DATA_DIR}`)
    .option('--listen <multiaddr>', `address to listen on, repeatable (default ${DEFAULT_TCP_LISTEN})`, collect)
    .option('--bootstrap <multiaddr>', 'a peer to join through (its /p2p/ address), repeatable', collect)
    .option('--mdns', 'also find peers on the local network with mDNS', false)
    .option('--announce <multiaddr>', 'announce this address instead of the listen addresses (you know your public address), repeatable', collect)
    .addOption(new Option('--relay <mode>', 'serve Circuit Relay v2 reservations: auto (once AutoNAT confirms a public address), on, off').choices(['auto', 'on', 'off']).default('auto'))
    .addOption(new Option('--relay-client <mode>', 'reserve slots on relays and publish relay addresses: auto (when every routable address is private and none is announced), on, off').choices(['auto', 'on', 'off']).default('auto'))
    .option('--upnp', 'ask the LAN gateway for a port mapping (UPnP)', false)
    .option('--max-connections <n>', `open connections the node keeps; the least valuable go first, never a peer with live runs (default ${CONNECTIONS_MAX})`, positiveCount)
    .option('--executor-lost-after <ms>', `a run's executor unreachable this long is declared lost and the run failed with EXECUTOR_LOST (default ${EXECUTOR_LOST_AFTER_MS}, at least ${CLI_EXECUTOR_LOST_AFTER_MIN_MS})`, lostAfter)
    .option('--card <file>', 'a card draft, JSON: {name, description, capabilities: [{capability_id, version}], tags}')
    .option('--name <name>', 'card name (overrides the file)')
    .option('--description <text>', 'card description (overrides the file)')
    .option('--capability <id@version>', 'a capability this agent offers, repeatable (added to the file\'s)', collect)
    .option('--tag <tag>', 'a tag, repeatable (added to the file\'s)', collect)
    .option('--api-host <host>', 'address of the local agent API (not empty: that is every interface)', hostArg, API_DEFAULT_HOST)
    .option('--api-port <port>', `port of the local agent API, 0 for any free one (default ${API_DEFAULT_PORT}, or a free one if that is taken)`, parsePort)
    .option('--no-api', 'do not serve the local agent API')
    .addOption(new Option('--log-level <level>', 'structured log (JSON lines on stderr) from this level up').choices(LOG_LEVELS).default('info'))
    .option('--metrics-port <port>', 'serve Prometheus metrics on this port at /metrics (off unless given)', parsePort)
    .option('--metrics-host <host>', 'address of the metrics endpoint (with --metrics-port; not empty)', hostArg, METRICS_DEFAULT_HOST)
    .option('--a2a-port <port>', 'serve A2A v1.0 (JSON-RPC, HTTP+JSON) for every mesh agent on this port, 0 for any free one (off unless given)', parsePort)
    .option('--a2a-host <host>', 'address of the A2A server (with --a2a-port; not empty); on one beyond loopback every request must carry the API token (Authorization: Bearer)', hostArg, A2A_DEFAULT_HOST)
    .option('--a2a-agent <url>', 'join an A2A v1.0 server (its base URL) to the mesh as this node\'s agent, repeatable', collect)
    .option('--conformance-agent', 'also serve cap:aap-conformance@0.1.0 with the scripted agent the conformance kit drives (protocols/conformance.md); for test meshes only: any peer may make this node delegate or hand off to an agent it names, under this node\'s identity')
    .addOption(new Option('--discover <capability>', 'after joining, look this capability up and print the cards found').hideHelp())
    .addOption(new Option('--report-connections', 'print a `connection` line per opened connection and a `disconnection` line per closed one').default(false).hideHelp())
    .addHelpText('after', `
The API's URL and bearer token go to <data dir>/api.json and <data dir>/api-token
(mode 0600); the other aap-mesh commands read them from --data-dir.`)
    .action(async (opts: StartOptions, cmd: Command) => {
      let draft: CardDraft | undefined
      let lookup: CapabilityQuery | undefined
      try {
        if (opts.conformanceAgent === true) {
          // the agent's capability goes on the card like any --capability (a name if nothing else gives one)
          opts.capability = [...(opts.capability ?? []), 'cap:aap-conformance@0.1.0']
          if (opts.card === undefined) opts.name ??= 'aap-conformance-agent'
        }
        await checkMultiaddrs(opts)
        checkServerFlags(opts, (option) => cmd.getOptionValueSource(option) === 'cli')
        if (opts.a2aPort !== undefined && !opts.api && !isLoopbackAddress(opts.a2aHost)) {
          throw new Error(`--a2a-host ${opts.a2aHost} is not loopback: the A2A server there asks the API token, and --no-api makes none (serve the API, or A2A on loopback)`)
        }
        draft = await cardDraftFrom(opts)
        if (opts.discover !== undefined) lookup = (await cardModule()).parseCapability(opts.discover)
      } catch (err) {
        cmd.error(`error: ${messageOf(err)}`, { exitCode: 2, code: 'aap-mesh.invalidArgument' })
      }
      await runNode(opts, draft, lookup)
    })
}

async function runNode (opts: StartOptions, draft: CardDraft | undefined, lookup: CapabilityQuery | undefined): Promise<void> {
  // loaded here, not at the top: the other commands share this module and need none of it
  const { createMeshNode } = await import('../node.ts')
  const { NodeMetrics } = await import('../api/metrics.ts')
  const log = createLogger(opts.logLevel)
  // a supervisor that read the `started` line and closed the pipe: an unhandled EPIPE would end the node
  process.stdout.on('error', (err: NodeJS.ErrnoException) => {
    if (!stdoutGone) log.warn({ code: err.code }, 'stdout failed: no more event lines are written; the node goes on')
    stdoutGone = true
  })
  try {
    await (await import('./data-dir.ts')).prepareDataDir(opts.dataDir, say)
  } catch (err) {
    say(`could not start: the data directory ${opts.dataDir}: ${messageOf(err)}`)
    process.exitCode = 1
    return
  }
  const { needsRelay } = await import('../wire/network.ts')
  const metrics = opts.metricsPort === undefined ? undefined : new NodeMetrics()
  const listen = opts.listen ?? [DEFAULT_TCP_LISTEN]
  const relayClient = opts.relayClient === 'auto' ? needsRelay(listen, opts.announce) : opts.relayClient === 'on'
  const node = await createMeshNode({
    dataDir: opts.dataDir,
    listen,
    mdns: opts.mdns,
    logger: log,
    network: { relayServer: opts.relay, relayClient, upnp: opts.upnp },
    ...(opts.announce === undefined ? {} : { announce: opts.announce }),
    ...(opts.maxConnections === undefined ? {} : { maxConnections: opts.maxConnections }),
    ...(opts.executorLostAfter === undefined ? {} : { liveness: { lostAfterMs: opts.executorLostAfter } }),
    ...(metrics === undefined ? {} : { metrics: metrics.libp2p() })
  })
  const parts: Parts = { node, log }
  const stop = stopOnSignals(parts, opts.dataDir)
  try {
    await node.start()
  } catch (err) {
    say(`could not start: ${await startFailure(err, opts.dataDir)}`)
    await node.stop().catch((err: unknown) => { log.warn({ err }, 'stopping the node that failed to start did not finish cleanly') })
    process.exitCode = 1
    stop.dispose()
    return
  }
  try {
    await serve(node, parts, stop, opts, draft, lookup, metrics)
  } catch (err) {
    // a bad value that got past the checks, a libp2p surprise: a clean stop and one line, not a stack trace
    say(`stopping: ${messageOf(err)}`)
    log.error({ err }, 'the node failed after it started; stopping')
    await stop.now(1)
  }
}

/** Why the node did not start, for people: a data directory in use names the node that holds it. */
async function startFailure (err: unknown, dataDir: string): Promise<string> {
  const { DataDirLockedError } = await import('../identity/identity.ts')
  if (!(err instanceof DataDirLockedError)) return messageOf(err)
  let pid: unknown
  try {
    pid = (JSON.parse(await readFile(join(dataDir, API_INFO_FILE), 'utf8')) as { pid?: unknown }).pid
  } catch {
    // no api.json (a node started with --no-api, or one still starting): the message names no pid
    pid = undefined
  }
  const who = typeof pid === 'number' ? `another node (pid ${pid})` : 'another node'
  return `${who} holds the data directory ${dataDir}: stop it, or give this node a --data-dir of its own`
}

/** What `start` does once the node runs: bootstrap, card, API, metrics, A2A; the `started` line. */
async function serve (node: MeshNode, parts: Parts, stop: Stopper, opts: StartOptions, draft: CardDraft | undefined, lookup: CapabilityQuery | undefined, metrics: NodeMetrics | undefined): Promise<void> {
  const log = parts.log
  const { serveMetrics } = await import('../api/metrics.ts')
  const { newToken, writeApiFiles } = await import('../api/files.ts')
  if (opts.conformanceAgent === true) (await import('../conformance/agent.ts')).installConformanceAgent(node, log)

  node.reachability?.onChange((s) => { emit('reachability', { public: s.public, relay_addresses: s.relayAddresses, relay_serving: s.relayServing }) })
  if (opts.reportConnections) {
    node.reachability?.onConnectionChange((c) => { emit(c.open ? 'connection' : 'disconnection', { peer: c.peer, relayed: c.relayed, direction: c.direction }) })
  }

  const bootstrap = opts.bootstrap ?? []
  // a join the loop makes before the started line is said right after it (stdout: started comes first)
  let up = false
  let joinedEarly = 0
  const onJoined = (peers: number): void => {
    if (up) emit('joined', { peers })
    else joinedEarly += peers
  }
  let joined = 0
  if (bootstrap.length > 0) {
    // dialed again with backoff while none is connected: a node may start before its bootstrap peers
    joined = await node.keepJoined(bootstrap, onJoined)
    if (joined === 0) log.warn({ bootstrap }, `none of the ${bootstrap.length} bootstrap peer(s) answered, nor a peer remembered from before; dialing them again with backoff`)
  }

  // a node restarted without card options re-signs the card it had, so it stays current
  let toPublish = draft ?? (node.card === undefined ? undefined : (await cardModule()).draftOf(node.card))
  let outbound: import('../a2a/outbound.ts').A2aOutbound | undefined
  if (opts.a2aAgent !== undefined && opts.a2aAgent.length > 0) {
    const { A2aOutbound, mergeDrafts } = await import('../a2a/outbound.ts')
    const bridged = new A2aOutbound(node, log)
    outbound = bridged
    try {
      for (const url of opts.a2aAgent) await bridged.add(url)
    } catch (err) {
      failedAfterStart(log, `could not join the A2A agent: ${messageOf(err)}`)
      await stop.now(1)
      return
    }
    toPublish = mergeDrafts(draft, bridged.list().map(a => a.draft))
  }
  let card: AgentCard | undefined
  try {
    if (toPublish !== undefined) card = await node.publishCard(toPublish)
  } catch (err) {
    failedAfterStart(log, `could not publish the card: ${messageOf(err)}`)
    await stop.now(1)
    return
  }

  const announce = (published: AgentCard): void => {
    node.discovery.announce().then(
      (keys) => { if (node.card?.seq === published.seq) emit('announced', { seq: published.seq, provider_keys: keys }) },
      (err: unknown) => { log.warn({ err: messageOf(err) }, 'announcement failed') }
    )
  }

  metrics?.attach(node)
  let apiUrl: string | null = null
  let metricsUrl: string | null = null
  let a2aUrl: string | null = null
  // the API's token; an A2A server beyond loopback asks it too (protocols/a2a.md)
  const token = opts.api ? newToken() : undefined
  try {
    if (opts.a2aPort !== undefined) {
      const { A2aServer } = await import('../a2a/server.ts')
      const bearer = isLoopbackAddress(opts.a2aHost) ? undefined : token
      const a2a = await A2aServer.start(node, { host: opts.a2aHost, port: opts.a2aPort, logger: log, ...(bearer === undefined ? {} : { token: bearer }) })
      parts.a2a = a2a
      a2aUrl = a2a.url
    }
    if (token !== undefined) {
      parts.api = await listenApi(node, opts, token, log, metrics, announce, outbound)
      apiUrl = parts.api.url
      // a stop under way (a signal while starting) writes no files it would then have to remove
      if (stop.signal.aborted) return
      parts.apiWrite = writeApiFiles(opts.dataDir, token, { url: apiUrl, agent_id: node.agentId, pid: process.pid })
      await parts.apiWrite
    }
    if (metrics !== undefined && opts.metricsPort !== undefined) {
      parts.metrics = await serveMetrics(metrics, opts.metricsHost, opts.metricsPort)
      metricsUrl = parts.metrics.url
    }
  } catch (err) {
    failedAfterStart(log, `could not serve the API, the metrics or A2A: ${messageOf(err)}`)
    await stop.now(1)
    return
  }

  const reach = node.reachability?.current
  emit('started', {
    agent_id: node.agentId, addresses: node.addresses, peers: joined, card: card ?? null, api: apiUrl, metrics: metricsUrl, a2a: a2aUrl,
    ...(reach === undefined ? {} : { reachability: { public: reach.public, relay_addresses: reach.relayAddresses, relay_serving: reach.relayServing } })
  })
  log.info({ agent_id: node.agentId, name: card?.name ?? null, addresses: node.addresses, api: apiUrl, metrics: metricsUrl },
    card === undefined ? 'node is up (no card yet: pass --name/--capability or --card, or PUT /v1/card)' : `node is up as "${card.name}"`)
  up = true
  if (joinedEarly > 0) emit('joined', { peers: joinedEarly })
  if (bootstrap.length === 0) rejoinRemembered(node, log, stop.signal, onJoined)

  if (card !== undefined) announce(card)
  if (lookup !== undefined) await discoverUntilFound(node, lookup, stop.signal)
}

/**
 * Without --bootstrap the loop runs on the peers this node remembers (a node restarted with its data dir rejoins
 * through them), once the node is up: remembered peers that are gone for good do not hold the start up.
 */
function rejoinRemembered (node: MeshNode, log: Logger, stopping: AbortSignal, onJoined: (peers: number) => void): void {
  const remembered = node.host.services.rememberedPeers.size
  node.keepJoined([], onJoined).then((peers) => {
    if (stopping.aborted) return
    if (peers > 0) onJoined(peers)
    else if (remembered > 0 && node.host.getConnections().length === 0) log.warn({ remembered }, `none of the ${remembered} peer(s) remembered from before answered; dialing them again with backoff`)
  }, (err: unknown) => {
    if (!stopping.aborted) log.warn({ err: messageOf(err) }, 'the bootstrap loop did not start')
  })
}

/** A failure once the node is up: one line for people (the log may be off: --log-level silent), and the log's record. */
function failedAfterStart (log: Logger, text: string): void {
  say(`stopping: ${text}`)
  log.error(text)
}

/**
 * The API on its port; when no port was asked for and the default one is
 * taken (another node on this machine), on any free port: clients find it in
 * the data directory either way.
 */
async function listenApi (node: MeshNode, opts: StartOptions, token: string, log: Logger, metrics: NodeMetrics | undefined, onCardPublished: (card: AgentCard) => void, a2a?: import('../a2a/outbound.ts').A2aOutbound): Promise<ApiServer> {
  const { startApiServer } = await import('../api/server.ts')
  const base = { token, host: opts.apiHost, logger: log, serveCard: true, onCardPublished, ...(metrics === undefined ? {} : { metrics }), ...(a2a === undefined ? {} : { a2a }) }
  try {
    return await startApiServer(node, { ...base, port: opts.apiPort ?? API_DEFAULT_PORT })
  } catch (err) {
    if (opts.apiPort !== undefined || (err as { code?: string }).code !== 'EADDRINUSE') throw err
    log.warn({ port: API_DEFAULT_PORT }, 'the default API port is taken; using a free one')
    return startApiServer(node, { ...base, port: 0 })
  }
}

/** Look a capability up until some card is found, the deadline passes or the node stops; print the result. */
function noop (): void {}

async function discoverUntilFound (node: MeshNode, query: CapabilityQuery, stopped: AbortSignal): Promise<void> {
  const deadline = AbortSignal.any([stopped, AbortSignal.timeout(CLI_DISCOVER_DEADLINE_MS)])
  let cards: AgentCard[] = []
  let error: string | undefined
  while (!deadline.aborted) {
    try {
      cards = await node.discover({ capability: query }, { signal: deadline, fresh: true })
      error = undefined
    } catch (err) {
      error = messageOf(err)
    }
    if (cards.length > 0) break
    // the deadline ends the wait early: the loop then sees it and stops
    await sleep(CLI_DISCOVER_RETRY_MS, undefined, { signal: deadline }).then(noop, noop)
  }
  if (stopped.aborted) return
  emit('discovered', { capability: (await cardModule()).capabilityString(query), cards, ...(error === undefined ? {} : { error }) })
}

interface Stopper {
  /** Aborted once the node starts stopping. */
  signal: AbortSignal
  /** Stop now and exit with `code`. */
  now: (code: number) => Promise<void>
  dispose: () => void
}

/** What a running `start` holds, stopped in reverse order. */
interface Parts {
  node: MeshNode
  log: Logger
  api?: ApiServer
  /** The write of the API files, once begun: the stop waits for it, then removes what it wrote. */
  apiWrite?: Promise<void>
  metrics?: { url: string, close: () => Promise<void> }
  a2a?: { close: () => Promise<void> }
}

/**
 * Stop gracefully on the first SIGINT/SIGTERM, at once on the second
 * (signals.ts: one delivered twice is one): the API first (no new requests,
 * streams ended), then the node (its writes finish), then the API files and
 * the metrics endpoint.
 */
function stopOnSignals (parts: Parts, dataDir: string): Stopper {
  const ctl = new AbortController()
  const now = async (code: number): Promise<void> => {
    if (ctl.signal.aborted) return
    ctl.abort()
    const timer = setTimeout(() => {
      parts.log.error(`did not stop within ${STOP_TIMEOUT_MS} ms; exiting`)
      process.exit(1)
    }, STOP_TIMEOUT_MS)
    timer.unref()
    try {
      await parts.api?.close()
      await parts.a2a?.close()
      await parts.node.stop()
      await removeOwnApiFiles(parts, dataDir)
      await parts.metrics?.close()
      emit('stopped', {})
      process.exit(code)
    } catch (err) {
      parts.log.error({ err: messageOf(err) }, 'stop failed')
      process.exit(1)
    }
  }
  const release = onInterrupt((signal) => {
    // a stop already under way (a failure after start): a signal now ends the process at once
    if (ctl.signal.aborted) {
      parts.log.warn(`${signal} again: exiting without a clean stop`)
      process.exit(130)
    }
    parts.log.info({ signal }, 'stopping')
    void now(0)
  }, ['SIGINT', 'SIGTERM'], (signal) => { parts.log.warn(`${signal} again: exiting without a clean stop`) })
  return { signal: ctl.signal, now, dispose: release }
}

/**
 * The API files this process wrote, after their write ended (a signal may
 * come while it is under way), and its temporary files whatever became of
 * them (files.ts names them <file>.<pid>.tmp). Files it never began to
 * write are left: they may be another node's.
 */
async function removeOwnApiFiles (parts: Parts, dataDir: string): Promise<void> {
  if (parts.apiWrite !== undefined) {
    // a failed write was reported where it failed (serve); its leftovers go below all the same
    await parts.apiWrite.catch((err: unknown) => { parts.log.debug({ err: messageOf(err) }, 'the API files were not all written; removing what is there') })
    await (await import('../api/files.ts')).removeApiFiles(dataDir)
  }
  for (const file of [API_TOKEN_FILE, API_INFO_FILE]) await rm(join(dataDir, `${file}.${process.pid}.tmp`), { force: true })
}

function messageOf (err: unknown): string {
  if (err instanceof AapError) return `${err.message} (${err.code})`
  return err instanceof Error ? err.message : String(err)
}
