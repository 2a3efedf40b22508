/**
 * The pieces of a local server's access check that the API (api/bearer.ts,
 * api/own-host.ts) and the A2A server (a2a/server-access.ts) share: reading a
 * bearer token, comparing tokens in constant time, and whether a listen
 * host is loopback only.
 */
import { createHash } from 'node:crypto'

/** The bearer scheme of an Authorization header, in any case (RFC 7235), and the space after it. */
const BEARER = /^bearer\s+/i

/** What a token is compared by (in constant time, whatever its length). */
export function tokenDigest (text: string): Buffer {
  return createHash('sha256').update(text).digest()
}

/** The token an Authorization header carries, if it is a bearer one. */
export function bearerToken (header: string | undefined): string | undefined {
  return header !== undefined && BEARER.test(header) ? header.replace(BEARER, '').trim() : undefined
}

/** Whether `host` (where a server is told to listen) is loopback only: no other machine can reach it. */
export function isLoopbackAddress (host: string): boolean {
  const h = host.toLowerCase().replace(/^\[|\]$/g, '')
  return h === 'localhost' || h === '::1' || /^127\.\d+\.\d+\.\d+$/.test(h) || /^::ffff:127\./.test(h)
}
