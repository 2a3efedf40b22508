/**
 * `aap-mesh mcp`: an MCP server over stdio (the official
 * @modelcontextprotocol/sdk) in front of a running node's local API. Tools:
 * discover, delegate, get_run, list_runs, resume, cancel, events, replay.
 * Arguments are checked against the tool's schema before anything is sent; a
 * refusal of the node comes back as a tool error with its AAP code.
 *
 * stdout belongs to the protocol: nothing else is written there.
 */
import { Server } from '@modelcontextprotocol/sdk/server/index.js'
import { StdioServerTransport } from '@modelcontextprotocol/sdk/server/stdio.js'
import { CallToolRequestSchema, ListToolsRequestSchema, type CallToolResult } from '@modelcontextprotocol/sdk/types.js'
import { Ajv, type ValidateFunction } from 'ajv'
import pkg from '../../package.json' with { type: 'json' }
import { ApiError, ApiUnreachableError, type ApiClient } from '../api/client.ts'
import { AapError } from '../errors.ts'
import { TOOLS, type Tool } from './tools.ts'

const ajv = new Ajv({ allErrors: false, strict: false, allowUnionTypes: true })

function errorResult (code: string, message: string): CallToolResult {
  return { isError: true, content: [{ type: 'text', text: JSON.stringify({ error: { code, message } }) }], structuredContent: { error: { code, message } } }
}

/** The MCP server (not yet connected to a transport). */
export function createMcpServer (client: ApiClient): Server {
  const server = new Server({ name: 'aap-mesh', version: pkg.version }, { capabilities: { tools: {} } })
  const byName = new Map<string, { tool: Tool, check: ValidateFunction }>(TOOLS.map(t => [t.name, { tool: t, check: ajv.compile(t.inputSchema) }]))

  server.setRequestHandler(ListToolsRequestSchema, async () => ({
    tools: TOOLS.map(t => ({ name: t.name, description: t.description, inputSchema: t.inputSchema as { type: 'object' } }))
  }))

  server.setRequestHandler(CallToolRequestSchema, async (req): Promise<CallToolResult> => {
    const entry = byName.get(req.params.name)
    if (entry === undefined) return errorResult('INVALID_REQUEST', `no tool ${req.params.name.slice(0, 64)}; the tools are ${TOOLS.map(t => t.name).join(', ')}`)
    const args = req.params.arguments ?? {}
    if (!entry.check(args)) {
      const e = entry.check.errors?.[0]
      return errorResult('INVALID_REQUEST', `${entry.tool.name}: ${e?.instancePath === '' ? 'arguments' : e?.instancePath ?? 'arguments'} ${e?.message ?? 'are invalid'}`)
    }
    try {
      const result = await entry.tool.run(client, args)
      return { content: [{ type: 'text', text: JSON.stringify(result) }], structuredContent: result as Record<string, unknown> }
    } catch (err) {
      if (err instanceof ApiUnreachableError) return errorResult('UNREACHABLE', err.message)
      if (err instanceof ApiError || err instanceof AapError) return errorResult(err.code, err.message)
      return errorResult('INTERNAL', err instanceof Error ? err.message : String(err))
    }
  })
  return server
}

/** Serve MCP on stdin/stdout until stdin closes. */
export async function serveStdio (client: ApiClient): Promise<void> {
  const server = createMcpServer(client)
  const closed = Promise.withResolvers<void>()
  server.onclose = () => { closed.resolve() }
  await server.connect(new StdioServerTransport())
  await closed.promise
}
