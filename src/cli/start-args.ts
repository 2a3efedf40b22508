/**
 * What `start` (and `card set`) make of their arguments before anything
 * starts: every multiaddr parsed, and the card draft the file and flags give.
 */
import { readFile } from 'node:fs/promises'
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
 * The card to publish: the file's draft with the flags applied, or undefined
 * when neither a file nor any card flag was given.
 */
export async function cardDraftFrom (opts: Pick<StartOptions, 'card' | 'name' | 'description' | 'capability' | 'tag'>, base?: CardDraft): Promise<CardDraft | undefined> {
  const flagCapabilities = opts.capability ?? []
  const flagTags = opts.tag ?? []
  const flagsGiven = opts.name !== undefined || opts.description !== undefined || flagCapabilities.length > 0 || flagTags.length > 0
  if (opts.card === undefined && !flagsGiven) return undefined
  const { parseCapability, parseCardDraft } = await cardModule()
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
    const known = new Set(have.map(c => JSON.stringify(c)))
    fields.capabilities = [...have, ...capabilities.filter(c => !known.has(JSON.stringify(c)))]
  }
  if (flagTags.length > 0) {
    const have = Array.isArray(fields.tags) ? fields.tags as unknown[] : []
    fields.tags = [...have, ...flagTags.filter(t => !have.includes(t))]
  }
  return parseCardDraft(fields, opts.card === undefined ? 'card' : `card file ${opts.card}`)
}
