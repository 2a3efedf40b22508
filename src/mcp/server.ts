/**
 * `aap-mesh mcp`: an MCP server over stdio (the official
 * @modelcontextprotocol/sdk) in front of a running node's local API. Tools:
 * discover, delegate, get_run, list_runs, resume, cancel, events, replay.
 * Arguments are checked against the tool's schema before anything is sent; a
 * refusal of the node comes back as a tool error with its AAP code and
 * details (UNREACHABLE when the node cannot be reached at all). A result is
 * at most MCP_RESULT_MAX_BYTES of JSON; a call the client cancels, or one in
 * flight when the client goes away, is aborted, and the node's stream it
 * held is let go. At most MCP_CALLS_CONCURRENT_MAX calls run at once, up to
 * MCP_CALLS_QUEUED_MAX more wait their turn (past them INVALID_REQUEST,
 * `reason: too_many_calls`), and a call not done within
 * MCP_CALL_TIMEOUT_MS (its wait included) is a TIMEOUT tool error, before
 * the MCP client's own 60 s run out.
 *
 * stdout belongs to the protocol: nothing else is written there. What goes
 * wrong with the transport (a line that is not JSON-RPC, one too long) is
 * written to stderr.
 */
import { Server } from '@modelcontextprotocol/sdk/server/index.js'
import { StdioServerTransport } from '@modelcontextprotocol/sdk/server/stdio.js'
import { CallToolRequestSchema, ListToolsRequestSchema, type CallToolResult } from '@modelcontextprotocol/sdk/types.js'
import { Ajv, type ValidateFunction } from 'ajv'
import pkg from '../../package.json' with { type: 'json' }
import { ApiError, ApiUnreachableError, type ApiClient } from '../api/client.ts'
import { AapError } from '../errors.ts'
import { nestedDeeperThan } from '../util/json-depth.ts'
import { FRAME_JSON_MAX_DEPTH } from '../wire/network-constants.ts'
import { Limiter } from '../util/concurrency.ts'
import { MCP_CALL_TIMEOUT_MS, MCP_CALLS_CONCURRENT_MAX, MCP_CALLS_QUEUED_MAX, MCP_RESULT_MAX_BYTES } from './constants.ts'
import { TOOLS, type Tool } from './tools.ts'

const ajv = new Ajv({ allErrors: false, strict: false, allowUnionTypes: true })

function errorResult (code: string, message: string, details?: Record<string, unknown>): CallToolResult {
  const error = { code, message, ...(details === undefined ? {} : { details }) }
  return { isError: true, content: [{ type: 'text', text: JSON.stringify({ error }) }], structuredContent: { error } }
}

function isObject (v: unknown): v is Record<string, unknown> {
  return typeof v === 'object' && v !== null && !Array.isArray(v)
}

/** What a JSON answer that is not an object is, for the tool error that refuses it. */
function kindOf (v: unknown): string {
  if (v === undefined) return 'an empty body'
  if (v === null) return 'null'
  return Array.isArray(v) ? 'an array' : `a ${typeof v}`
}

export interface McpServerOptions {
  /** The longest a tool call takes, its wait for a place included; default MCP_CALL_TIMEOUT_MS (tests set it lower). */
  callTimeoutMs?: number
}

/** The tool calls of a server: running, waiting for a place, refused past MCP_CALLS_QUEUED_MAX, ended by the call timeout. */
export interface McpCallStats {
  running: number
  queued: number
  refused: number
  timedOut: number
}

/** The MCP server with the counts of its tool calls. */
export type AapMcpServer = Server & { readonly calls: McpCallStats }

/** The MCP server (not yet connected to a transport). */
export function createMcpServer (client: ApiClient, opts: McpServerOptions = {}): AapMcpServer {
  const callTimeoutMs = opts.callTimeoutMs ?? MCP_CALL_TIMEOUT_MS
  const server = Object.assign(new Server({ name: 'aap-mesh', version: pkg.version }, { capabilities: { tools: {} } }), {
    calls: { running: 0, queued: 0, refused: 0, timedOut: 0 }
  })
  const calls = server.calls
  const byName = new Map<string, { tool: Tool, check: ValidateFunction }>(TOOLS.map(t => [t.name, { tool: t, check: ajv.compile(t.inputSchema) }]))
  /** Calls in flight: aborted when the transport closes, so none outlives its client. */
  const inFlight = new Set<AbortController>()
  /** Each call holds one request to the node's API, whose connections are bounded: the rest wait their turn. */
  const places = new Limiter(MCP_CALLS_CONCURRENT_MAX)

  server.setRequestHandler(ListToolsRequestSchema, async () => ({
    tools: TOOLS.map(t => ({ name: t.name, description: t.description, inputSchema: t.inputSchema as { type: 'object' } }))
  }))

  server.setRequestHandler(CallToolRequestSchema, async (req, extra): Promise<CallToolResult> => {
    const entry = byName.get(req.params.name)
    if (entry === undefined) return errorResult('INVALID_REQUEST', `no tool ${req.params.name.slice(0, 64)}; the tools are ${TOOLS.map(t => t.name).join(', ')}`)
    const args = req.params.arguments ?? {}
    // deeper than any frame the node takes: refused here, as the node would (and before JSON.stringify has to walk it)
    if (nestedDeeperThan(args, FRAME_JSON_MAX_DEPTH)) {
      return errorResult('INVALID_REQUEST', `${entry.tool.name}: arguments nested deeper than ${FRAME_JSON_MAX_DEPTH} levels`, { reason: 'too_deep', max: FRAME_JSON_MAX_DEPTH })
    }
    if (!entry.check(args)) {
      const e = entry.check.errors?.[0]
      return errorResult('INVALID_REQUEST', `${entry.tool.name}: ${e?.instancePath === '' ? 'arguments' : e?.instancePath ?? 'arguments'} ${e?.message ?? 'are invalid'}`)
    }
    if (calls.running + calls.queued >= MCP_CALLS_CONCURRENT_MAX + MCP_CALLS_QUEUED_MAX) {
      calls.refused++
      return errorResult('INVALID_REQUEST', `${entry.tool.name}: ${MCP_CALLS_CONCURRENT_MAX} calls are running and ${MCP_CALLS_QUEUED_MAX} waiting already; wait for one to end`,
        { reason: 'too_many_calls', running_max: MCP_CALLS_CONCURRENT_MAX, queued_max: MCP_CALLS_QUEUED_MAX })
    }
    const ctl = new AbortController()
    const onCancel = (): void => { ctl.abort(extra.signal.reason) }
    extra.signal.addEventListener('abort', onCancel, { once: true })
    if (extra.signal.aborted) onCancel()
    inFlight.add(ctl)
    // the call's whole time, its wait for a place included: a frozen node is a TIMEOUT tool error, not the MCP
    // client's own protocol timeout
    let timedOut = false
    const deadline = setTimeout(() => {
      timedOut = true
      calls.timedOut++
      ctl.abort(new DOMException(`the call took more than ${callTimeoutMs} ms`, 'TimeoutError'))
    }, callTimeoutMs)
    const tool = entry.tool
    const run = async (): Promise<CallToolResult> => {
      try {
        // cancelled or out of time while it waited: the node is not asked
        if (ctl.signal.aborted) throw ctl.signal.reason
        const result = await tool.run(client, args, ctl.signal)
        // an MCP result's structured content is an object: anything else (an empty body too) is no answer of the node's API
        if (!isObject(result)) {
          return errorResult('INTERNAL', `${tool.name}: the node's API answered a non-object (${kindOf(result)}); is the API URL the node's?`, { reason: 'not_an_object', answered: kindOf(result) })
        }
        const text = JSON.stringify(result)
        const bytes = Buffer.byteLength(text)
        if (bytes > MCP_RESULT_MAX_BYTES) {
          return errorResult('INVALID_REQUEST', `${tool.name}: the result has ${bytes} bytes of JSON, more than an MCP result may (${MCP_RESULT_MAX_BYTES}); narrow the call`, { reason: 'result_too_large', bytes, max_bytes: MCP_RESULT_MAX_BYTES })
        }
        return { content: [{ type: 'text', text }], structuredContent: result }
      } catch (err) {
        if (timedOut) return errorResult('TIMEOUT', `${tool.name}: the call was not done in ${callTimeoutMs} ms (MCP_CALL_TIMEOUT_MS): is the node frozen?`, { timeout_ms: callTimeoutMs })
        if (err instanceof ApiUnreachableError) return errorResult('UNREACHABLE', err.message)
        if (err instanceof ApiError || err instanceof AapError) return errorResult(err.code, err.message, err.details)
        return errorResult('INTERNAL', err instanceof Error ? err.message : String(err))
      }
    }
    calls.queued++
    let started = false
    try {
      return await places.run(async () => {
        calls.queued--
        started = true
        calls.running++
        try {
          return await run()
        } finally {
          calls.running--
        }
      }, ctl.signal)
    } catch (err) {
      // out of time or cancelled while it waited for a place: it left the queue then, and the node is not asked
      if (!started && ctl.signal.aborted) return await run()
      throw err
    } finally {
      if (!started) calls.queued--
      clearTimeout(deadline)
      extra.signal.removeEventListener('abort', onCancel)
      inFlight.delete(ctl)
    }
  })
  const closed = server.onclose
  server.onclose = () => {
    for (const ctl of inFlight) ctl.abort(new Error('the MCP client went away'))
    closed?.()
  }
  return server
}

/**
 * Serve MCP on stdin/stdout until stdin ends (the client closed it) or the
 * transport fails. A transport error (a line that is not JSON-RPC, one past
 * the SDK's read buffer) is written to stderr; one that ends the session
 * makes the process exit with 1.
 */
export async function serveStdio (client: ApiClient): Promise<void> {
  const server = createMcpServer(client)
  const closed = Promise.withResolvers<void>()
  let failed: unknown
  const onclose = server.onclose
  server.onclose = () => {
    onclose?.()
    closed.resolve()
  }
  server.onerror = (err) => {
    failed ??= err
    process.stderr.write(`aap-mesh mcp: ${err.message}\n`)
  }
  // the SDK's stdio transport does not end when its input does: the client closing stdin ends the session
  const ended = (): void => { server.close().catch((err: unknown) => { process.stderr.write(`aap-mesh mcp: closing: ${(err as Error).message}\n`) }) }
  process.stdin.once('end', ended)
  process.stdin.once('close', ended)
  await server.connect(new StdioServerTransport())
  await closed.promise
  process.stdin.off('end', ended)
  process.stdin.off('close', ended)
  // stdin ended: a clean exit; the transport gave up on an error: not one
  if (failed !== undefined && !process.stdin.readableEnded) process.exitCode = 1
}
