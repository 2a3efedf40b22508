/**
 * A2A reference server (official @a2a-js/sdk over Express) for the reference
 * benchmark.
 *
 *   node scripts/ref-server-a2a.ts [--host 127.0.0.1] [--port 0] [--first JSONRPC|HTTP+JSON]
 *
 * Serves the agent card at /.well-known/agent-card.json, JSON-RPC at
 * /a2a/jsonrpc and HTTP+JSON at /a2a/rest. Every SendMessage yields a Task in
 * state WORKING. Prints {"ready":true,"url":...} once listening; exits on
 * SIGTERM/SIGINT or when stdin closes.
 */
import { announceReady, exitOnShutdown, intArg, parseArgs } from './lib/proc.ts'
import { startA2aServer } from './lib/ref-a2a.ts'
import type { A2aBinding } from './lib/ref-a2a.ts'

const args = parseArgs(process.argv.slice(2), {
  known: ['host', 'port', 'first'],
  text: 'usage: node scripts/ref-server-a2a.ts [--host 127.0.0.1] [--port 0] [--first JSONRPC|HTTP+JSON]'
})
const first = args.get('first') ?? 'JSONRPC'
if (first !== 'JSONRPC' && first !== 'HTTP+JSON') throw new Error(`--first must be JSONRPC or HTTP+JSON, got ${first}`)

const server = await startA2aServer({
  host: args.get('host') ?? '127.0.0.1',
  port: intArg(args, 'port', 0),
  first: first satisfies A2aBinding
})
exitOnShutdown(server.close)

announceReady({
  kind: 'a2a',
  url: server.url,
  agentCardUrl: server.agentCardUrl,
  interfaces: server.card.supportedInterfaces.map(i => `${i.protocolBinding} ${i.url}`),
  pid: process.pid
})
