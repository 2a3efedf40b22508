/**
 * Who may use the inbound A2A server, and how it refuses a request, for
 * server.ts.
 *
 * Access: a server given a token (`A2aServerOptions.token`: the CLI gives the
 * node's API token when the server listens beyond loopback) asks every
 * request for `Authorization: Bearer <token>` (the scheme's name in any
 * case), compared in constant time; one without it gets HTTP 401 with
 * `WWW-Authenticate: Bearer` before its body is read or its agent looked up.
 * A server with none is open, and listens on loopback only.
 *
 * Refusals: an agent that cannot be served (no such agent, or the server at
 * capacity) is answered in its binding's error shape: a JSON-RPC envelope
 * echoing the request's id on the JSON-RPC binding, the SDK's REST error body
 * elsewhere, its HTTP status from the AAP code.
 */
import { timingSafeEqual } from 'node:crypto'
import { bearerToken, isLoopbackAddress, tokenDigest } from '../util/bearer.ts'
import express, { type NextFunction, type Request, type Response } from 'express'
import { A2A_ERROR_CODE, toJsonRpcError, toRestErrorBody, type RestErrorBody } from '@a2a-js/sdk/errors'
import { AapError, InvalidRequestError } from '../errors.ts'
import { A2A_AGENTS_PATH, A2A_BODY_MAX_BYTES, A2A_JSONRPC_SUBPATH } from './constants.ts'
import { toA2aError } from './mapping.ts'

/** The JSON-RPC endpoint of a served agent, as the full path of a request. */
const JSONRPC_PATH = new RegExp(`^${A2A_AGENTS_PATH}/[^/]+${A2A_JSONRPC_SUBPATH}/?$`)
/** A POST to a served agent's JSON-RPC endpoint (the full path: the agent's prefix is not stripped). */
export function isJsonRpcPost (req: Request): boolean {
  return req.method === 'POST' && JSONRPC_PATH.test(req.originalUrl.split('?', 1)[0] ?? '')
}

/** Whether `host` is loopback only (one judge for the API, the CLI and this server: util/bearer.ts). */
export const isLoopbackHost = isLoopbackAddress

/** The bearer check of a server given a token. */
export class BearerGate {
  private readonly expected: Buffer

  constructor (token: string) {
    if (token === '') throw new InvalidRequestError('the A2A server\'s bearer token is empty')
    this.expected = tokenDigest(token)
  }

  /** A server on a host beyond loopback must be given a token: none, and it does not start. */
  static forHost (host: string, token: string | undefined): BearerGate | undefined {
    if (token !== undefined) return new BearerGate(token)
    if (!isLoopbackHost(host)) {
      throw new InvalidRequestError(`an A2A server on ${host} (not loopback) needs a bearer token: any machine that reaches it could read, resume and cancel every task`, { host })
    }
    return undefined
  }

  /** Express middleware: a request without the token is answered 401 (its body unread, its agent not looked up). */
  readonly check = (req: Request, res: Response, next: NextFunction): void => {
    const header = req.headers.authorization
    const token = bearerToken(header)
    if (token !== undefined && timingSafeEqual(tokenDigest(token), this.expected)) {
      next()
      return
    }
    const message = token === undefined
      ? 'missing token: send "Authorization: Bearer <token>" (the node\'s API token, in <data dir>/api-token)'
      : 'wrong token (the node writes a new API token to <data dir>/api-token at every start)'
    res.setHeader('www-authenticate', 'Bearer')
    // the body is not read: the id of a JSON-RPC request is not known
    if (isJsonRpcPost(req)) res.status(401).json({ jsonrpc: '2.0', id: null, error: { code: A2A_ERROR_CODE.INVALID_REQUEST, message, data: { aap_code: 'UNAUTHORIZED' } } })
    else res.status(401).json(restError(401, 'UNAUTHENTICATED', message))
  }
}

function restError (code: number, status: string, message: string): RestErrorBody {
  return { error: { code, status, message, details: [] } }
}

/**
 * The body of a POST to a JSON-RPC endpoint, read before its agent is looked up (so a refusal echoes its id), with
 * the parser and bound of the SDK's binding, which then finds it read. A body that is not JSON is answered as the
 * binding answers it (`-32700`); one over the bound, or in a charset or encoding the parser does not take, goes
 * to the server's error handler.
 */
export function readJsonRpcBody (): (req: Request, res: Response, next: NextFunction) => void {
  const parse = express.json({ limit: A2A_BODY_MAX_BYTES })
  return (req, res, next) => {
    if (!isJsonRpcPost(req)) {
      next()
      return
    }
    parse(req, res, (err?: unknown) => {
      if (err instanceof SyntaxError && 'body' in err) {
        res.status(200).json({ jsonrpc: '2.0', id: null, error: { code: A2A_ERROR_CODE.PARSE_ERROR, message: 'Invalid JSON payload.' } })
        return
      }
      next(err)
    })
  }
}

/** The id of a JSON-RPC request as read (a string or a number), else null (JSON-RPC 2.0: an id that could not be read). */
export function jsonRpcId (body: unknown): string | number | null {
  if (typeof body !== 'object' || body === null || !('id' in body)) return null
  const id = body.id
  return typeof id === 'string' || (typeof id === 'number' && Number.isFinite(id)) ? id : null
}

/** The HTTP status of an agent that cannot be served: 503 at capacity (DELEGATION_REFUSED: try again later), else 404. */
export function refusalStatus (err: unknown): number {
  return err instanceof AapError && err.code === 'DELEGATION_REFUSED' ? 503 : 404
}

/**
 * The agent could not be served: on the JSON-RPC binding a JSON-RPC error (HTTP 200, the request's id), elsewhere
 * the SDK's REST error body with refusalStatus(err).
 */
export function refuse (req: Request, res: Response, err: unknown): void {
  const a2aErr = toA2aError(err)
  if (isJsonRpcPost(req)) {
    res.status(200).json({ jsonrpc: '2.0', id: jsonRpcId(req.body), error: toJsonRpcError(a2aErr) })
    return
  }
  const status = refusalStatus(err)
  const body = toRestErrorBody(a2aErr, status)
  res.status(status).json({ error: { ...body.error, status: status === 503 ? 'UNAVAILABLE' : 'NOT_FOUND' } })
}
