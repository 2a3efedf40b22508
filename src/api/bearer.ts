/**
 * The API's bearer token check: every request that the browser view's
 * session does not authorize (ui-routes.ts) must carry the token the node
 * wrote to <data dir>/api-token, as `Authorization: Bearer <token>`. The
 * scheme's name is case-insensitive (RFC 7235): `bearer <token>` is taken too.
 */
import { timingSafeEqual } from 'node:crypto'
import type { FastifyReply } from 'fastify'
import { bearerToken, tokenDigest } from '../util/bearer.ts'
import { HttpError } from './errors.ts'

export { bearerToken, tokenDigest }

/** Throw UNAUTHORIZED (401, with its challenge) unless `header` carries the token whose digest is `expected`. */
export function checkBearer (header: string | undefined, expected: Buffer, reply: FastifyReply): void {
  const token = bearerToken(header)
  if (token !== undefined && timingSafeEqual(tokenDigest(token), expected)) return
  reply.header('www-authenticate', 'Bearer')
  throw new HttpError(401, 'UNAUTHORIZED', token === undefined
    ? 'missing API token: send "Authorization: Bearer <token>" (the node writes it to <data dir>/api-token)'
    : 'wrong API token (the node writes a new one to <data dir>/api-token at every start)')
}
