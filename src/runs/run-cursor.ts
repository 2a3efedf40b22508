/**
 * The run index's cursors (run-index.ts): opaque, the position (side and
 * order key) and a digest of the filter, MACed with the secret kept in the
 * index's meta record. A cursor that was altered, or is used with other
 * filters, is refused (INVALID_REQUEST).
 */
import { createHmac, timingSafeEqual } from 'node:crypto'
import { RUN_LIST_CURSOR_MAX_CHARS } from '../constants.ts'
import { InvalidRequestError } from '../errors.ts'
import { RUN_CURSOR_MAC_CHARS as MAC_CHARS } from './constants.ts'

type Side = 'executing' | 'delegated'

const BAD_CURSOR = 'the cursor is not one this node issued for this listing (filters must stay the same from page to page)'

function mac (secret: Buffer, payload: string): string {
  return createHmac('sha256', secret).update(payload).digest('base64url').slice(0, MAC_CHARS)
}

/** A cursor at order key `t` of `side` (its tag `x` or `d`), for the listing with filter digest `digest`. */
export function encodeCursor (secret: Buffer, tag: string, t: string, digest: string): string {
  const payload = Buffer.from(JSON.stringify([tag, t, digest])).toString('base64url')
  return `${payload}.${mac(secret, payload)}`
}

/** Where a cursor this node issued for the listing with filter digest `digest` points; INVALID_REQUEST for any other. */
export function decodeCursor (secret: Buffer, cursor: string, digest: string): { side: Side, t: string } {
  const bad = (why: string): InvalidRequestError => new InvalidRequestError(BAD_CURSOR, { reason: 'bad_cursor', why })
  if (cursor.length > RUN_LIST_CURSOR_MAX_CHARS) throw bad('too long')
  const dot = cursor.indexOf('.')
  if (dot <= 0) throw bad('malformed')
  const payload = cursor.slice(0, dot)
  const given = Buffer.from(cursor.slice(dot + 1))
  const want = Buffer.from(mac(secret, payload))
  if (given.length !== want.length || !timingSafeEqual(given, want)) throw bad('not signed by this node')
  let parsed: unknown
  try {
    parsed = JSON.parse(Buffer.from(payload, 'base64url').toString())
  } catch (err) {
    throw new InvalidRequestError(BAD_CURSOR, { reason: 'bad_cursor', why: 'malformed' }, { cause: err })
  }
  if (!Array.isArray(parsed) || parsed.length !== 3 || typeof parsed[1] !== 'string') throw bad('malformed')
  const side = parsed[0] === 'x' ? 'executing' : parsed[0] === 'd' ? 'delegated' : undefined
  if (side === undefined) throw bad('malformed')
  if (parsed[2] !== digest) throw bad('other filters')
  return { side, t: parsed[1] }
}
