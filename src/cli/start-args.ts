/**
 * What `start` (and `card set`) make of their arguments before anything
 * starts: every multiaddr parsed, and the card draft the file and flags give.
 */
import { readFile } from 'node:fs/promises'
import { InvalidArgumentError } from 'commander'
import { AapError, InvalidRequestError } from '../errors.ts'
import type { CardDraft } from '../card/card.ts'
import type { StartOptions } from './start.ts'

/** card.ts compiles the wire schemas when loaded: only the commands that check a card pay for it. */
async function cardModule (): Promise<typeof import('../card/card.ts')> {
  return import('../card/card.ts')
}

function messageOf (err: unknown): string {
  if (err instanceof AapError) return `${err.message} (${err.code})`
  return err instanceof Error ? err.message : String(err)
}

/**
 * Every --listen, --announce and --bootstrap value parsed as a multiaddr, so
 * a mistyped one is a usage error before anything starts (libp2p would throw
 * it later, from deep inside a running node).
 */
export async function checkMultiaddrs (opts: Pick<StartOptions, 'listen' | 'announce' | 'bootstrap'>): Promise<void> {
  const { multiaddr } = await import('@multiformats/multiaddr')
  const given: Array<[string, string[] | undefined]> = [['--listen', opts.listen], ['--announce', opts.announce], ['--bootstrap', opts.bootstrap]]
  for (const [option, values] of given) {
    for (const value of values ?? []) {
      try {
        multiaddr(value)
      } catch (err) {
        throw new InvalidRequestError(`${option} ${value} is not a multiaddr (${messageOf(err)}); write one like /ip4/203.0.113.7/tcp/4001`)
      }
    }
  }
}

/**
 * Option parser of --api-host, --metrics-host and --a2a-host: an empty or
 * blank host is "every interface" to Node (and no loopback, so the metrics
 * did not check Host), never what an operator who typed it meant.
 */
export function hostArg (value: string): string {
  if (value.trim() === '') throw new InvalidArgumentError('a host is an address or name (e.g. 127.0.0.1); an empty one would listen on every interface')
  return value
}

/**
 * A host or port given for a server that does not start: --metrics-host
 * without --metrics-port, --a2a-host without --a2a-port, --api-host or
 * --api-port with --no-api. `given` tells an option typed on the command line
 * from its default.
 */
export function checkServerFlags (opts: Pick<StartOptions, 'api' | 'apiPort' | 'metricsPort' | 'a2aPort'>, given: (option: 'apiHost' | 'metricsHost' | 'a2aHost') => boolean): void {
  if (given('metricsHost') && opts.metricsPort === undefined) throw new InvalidRequestError('--metrics-host needs --metrics-port (the metrics are off without it)')
  if (given('a2aHost') && opts.a2aPort === undefined) throw new InvalidRequestError('--a2a-host needs --a2a-port (the A2A server is off without it)')
  if (!opts.api && (given('apiHost') || opts.apiPort !== undefined)) throw new InvalidRequestError(`${given('apiHost') ? '--api-host' : '--api-port'} with --no-api: the API is not served (drop one of them)`)
}

/**
 * The card to publish: the file's draft with the flags applied, or undefined
 * when neither a file nor any card flag was given.
 */
export async function cardDraftFrom (opts: Pick<StartOptions, 'card' | 'name' | 'description' | 'capability' | 'tag'>, base?: CardDraft): Promise<CardDraft | undefined> {
  const flagCapabilities = opts.capability ?? []
  const flagTags = opts.tag ?? []
  const flagsGiven = opts.name !== undefined || opts.description !== undefined || flagCapabilities.length > 0 || flagTags.length > 0
  if (opts.card === undefined && !flagsGiven) return undefined
  const { capabilityString, parseCapability, parseCardDraft } = await cardModule()
  // without a file, the flags apply to `base` (the current card, for `card set`)
  let fields: Record<string, unknown> = opts.card === undefined && base !== undefined ? { ...base } : {}
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
  if (capabilities.length > 0) {
    const have = Array.isArray(fields.capabilities) ? fields.capabilities as unknown[] : []
    // one capability is one id@version, whatever the file's key order or extra fields (the draft's check refuses those)
    const key = (c: unknown): string => typeof c === 'object' && c !== null && 'capability_id' in c && 'version' in c && typeof c.capability_id === 'string' && typeof c.version === 'string'
      ? capabilityString({ capability_id: c.capability_id, version: c.version })
      : JSON.stringify(c)
    const known = new Set(have.map(key))
    const added = capabilities.filter(c => {
      const k = key(c)
      if (known.has(k)) return false
      known.add(k)
      return true
    })
    fields.capabilities = [...have, ...added]
  }
  if (flagTags.length > 0) {
    const have = Array.isArray(fields.tags) ? fields.tags as unknown[] : []
    fields.tags = [...have, ...flagTags.filter(t => !have.includes(t))]
  }
  return parseCardDraft(fields, opts.card === undefined ? 'card' : `card file ${opts.card}`)
}
