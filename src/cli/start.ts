/**
 * `aap-mesh start`: run one mesh node in the foreground.
 *
 * stdout carries one JSON object per line, for programs (`started`,
 * `announced`, `discovered`, `stopped`); stderr carries lines for people. The
 * node stays up until SIGINT or SIGTERM, then stops gracefully.
 */
import { readFile } from 'node:fs/promises'
import { setTimeout as sleep } from 'node:timers/promises'
import { Option, type Command } from 'commander'
import {
  CLI_DISCOVER_DEADLINE_MS, CLI_DISCOVER_RETRY_MS, DEFAULT_DATA_DIR, DEFAULT_TCP_LISTEN, STOP_TIMEOUT_MS
} from '../constants.ts'
import { capabilityString, draftOf, parseCapability, parseCardDraft, type AgentCard, type CapabilityQuery, type CardDraft } from '../card/card.ts'
import { AapError, InvalidRequestError } from '../errors.ts'
import { createMeshNode, type MeshNode } from '../node.ts'

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
}

/** Option parser of repeatable options (no default, so help does not print one). */
function collect (value: string, previous: string[] | undefined): string[] {
  return [...(previous ?? []), value]
}

/** One JSON line on stdout. */
function emit (event: string, fields: Record<string, unknown>): void {
  process.stdout.write(JSON.stringify({ event, ...fields }) + '\n')
}

/** One line for people on stderr. */
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
    .option('--card <file>', 'a card draft, JSON: {name, description, capabilities: [{capability_id, version}], tags}')
    .option('--name <name>', 'card name (overrides the file)')
    .option('--description <text>', 'card description (overrides the file)')
    .option('--capability <id@version>', 'a capability this agent offers, repeatable (added to the file\'s)', collect)
    .option('--tag <tag>', 'a tag, repeatable (added to the file\'s)', collect)
    .addOption(new Option('--discover <capability>', 'after joining, look this capability up and print the cards found').hideHelp())
    .action(async (opts: StartOptions, cmd: Command) => {
      let draft: CardDraft | undefined
      let lookup: CapabilityQuery | undefined
      try {
        draft = await cardDraftFrom(opts)
        if (opts.discover !== undefined) lookup = parseCapability(opts.discover)
      } catch (err) {
        cmd.error(`error: ${messageOf(err)}`, { exitCode: 2, code: 'aap-mesh.invalidArgument' })
      }
      await runNode(opts, draft, lookup)
    })
}

/**
 * The card to publish: the file's draft with the flags applied, or undefined
 * when neither a file nor any card flag was given.
 */
export async function cardDraftFrom (opts: Pick<StartOptions, 'card' | 'name' | 'description' | 'capability' | 'tag'>): Promise<CardDraft | undefined> {
  const flagCapabilities = opts.capability ?? []
  const flagTags = opts.tag ?? []
  const flagsGiven = opts.name !== undefined || opts.description !== undefined || flagCapabilities.length > 0 || flagTags.length > 0
  if (opts.card === undefined && !flagsGiven) return undefined
  let fields: Record<string, unknown> = {}
  if (opts.card !== undefined) {
    let text: string
    try {
      text = await readFile(opts.card, 'utf8')
    } catch (err) {
      throw new InvalidRequestError(`cannot read card file ${opts.card}: ${messageOf(err)}`)
    }
    let parsed: unknown
    try {
      parsed = JSON.parse(text)
    } catch (err) {
      throw new InvalidRequestError(`card file ${opts.card} is not JSON: ${messageOf(err)}`)
    }
    if (typeof parsed !== 'object' || parsed === null || Array.isArray(parsed)) throw new InvalidRequestError(`card file ${opts.card} must hold a JSON object`)
    fields = { ...parsed }
  }
  const capabilities = flagCapabilities.map(text => {
    const c = parseCapability(text)
    if (c.version === undefined || c.version === null || c.version === '*') {
      throw new InvalidRequestError(`--capability ${text}: a card offers an exact version, e.g. ${c.capability_id}@1.0.0`)
    }
    return { capability_id: c.capability_id, version: c.version }
  })
  if (opts.name !== undefined) fields.name = opts.name
  if (opts.description !== undefined) fields.description = opts.description
  if (capabilities.length > 0) fields.capabilities = [...(Array.isArray(fields.capabilities) ? fields.capabilities : []), ...capabilities]
  if (flagTags.length > 0) fields.tags = [...(Array.isArray(fields.tags) ? fields.tags : []), ...flagTags]
  return parseCardDraft(fields, opts.card === undefined ? 'card' : `card file ${opts.card}`)
}

async function runNode (opts: StartOptions, draft: CardDraft | undefined, lookup: CapabilityQuery | undefined): Promise<void> {
  const node = await createMeshNode({
    dataDir: opts.dataDir,
    listen: opts.listen ?? [DEFAULT_TCP_LISTEN],
    mdns: opts.mdns
  })
  const stop = stopOnSignals(node)
  try {
    await node.start()
  } catch (err) {
    say(`could not start: ${messageOf(err)}`)
    await node.stop().catch(() => {})
    process.exitCode = 1
    stop.dispose()
    return
  }

  const bootstrap = opts.bootstrap ?? []
  let joined = 0
  if (bootstrap.length > 0) {
    joined = await node.join(bootstrap)
    if (joined === 0) say(`none of the ${bootstrap.length} bootstrap peer(s) answered; waiting for peers to find this node`)
  }

  // a node restarted without card options re-signs the card it had, so it stays current
  const toPublish = draft ?? (node.card === undefined ? undefined : draftOf(node.card))
  let card: AgentCard | undefined
  try {
    if (toPublish !== undefined) card = await node.publishCard(toPublish)
  } catch (err) {
    say(`could not publish the card: ${messageOf(err)}`)
    await stop.now(1)
    return
  }

  emit('started', { agent_id: node.agentId, addresses: node.addresses, peers: joined, card: card ?? null })
  say(`agent ${node.agentId} is up${card === undefined ? ' (no card: pass --name/--capability or --card to publish one)' : ` as "${card.name}"`}`)
  for (const a of node.addresses) say(`  listening on ${a}`)

  if (card !== undefined) {
    node.discovery.announce().then(
      (keys) => { emit('announced', { seq: card.seq, provider_keys: keys }) },
      (err: unknown) => { say(`announcement failed: ${messageOf(err)}`) }
    )
  }
  if (lookup !== undefined) await discoverUntilFound(node, lookup, stop.signal)
}

/** Look a capability up until some card is found, the deadline passes or the node stops; print the result. */
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
    await sleep(CLI_DISCOVER_RETRY_MS, undefined, { signal: deadline }).catch(() => {})
  }
  if (stopped.aborted) return
  emit('discovered', { capability: capabilityString(query), cards, ...(error === undefined ? {} : { error }) })
}

interface Stopper {
  /** Aborted once the node starts stopping. */
  signal: AbortSignal
  /** Stop now and exit with `code`. */
  now: (code: number) => Promise<void>
  dispose: () => void
}

/** Stop the node gracefully on the first SIGINT/SIGTERM, at once on the second. */
function stopOnSignals (node: MeshNode): Stopper {
  const ctl = new AbortController()
  const now = async (code: number): Promise<void> => {
    if (ctl.signal.aborted) return
    ctl.abort()
    const timer = setTimeout(() => {
      say(`did not stop within ${STOP_TIMEOUT_MS} ms; exiting`)
      process.exit(1)
    }, STOP_TIMEOUT_MS)
    timer.unref()
    try {
      await node.stop()
      emit('stopped', {})
      process.exit(code)
    } catch (err) {
      say(`stop failed: ${messageOf(err)}`)
      process.exit(1)
    }
  }
  const onSignal = (signal: NodeJS.Signals): void => {
    if (ctl.signal.aborted) {
      say(`${signal} again: exiting without a clean stop`)
      process.exit(130)
    }
    say(`${signal}: stopping`)
    void now(0)
  }
  process.on('SIGINT', onSignal)
  process.on('SIGTERM', onSignal)
  return {
    signal: ctl.signal,
    now,
    dispose: () => {
      process.off('SIGINT', onSignal)
      process.off('SIGTERM', onSignal)
    }
  }
}

function messageOf (err: unknown): string {
  if (err instanceof AapError) return `${err.message} (${err.code})`
  return err instanceof Error ? err.message : String(err)
}
