/**
 * A TypeScript agent that is its own mesh node: the in-process API
 * (`createMeshNode`, `runs.handle`) instead of the HTTP one. It joins the mesh
 * through a local node, publishes a card for one capability, and serves each
 * run: progress, a checkpoint it blocks on until the delegator resumes it,
 * then its output (or a failure when the resolution says {"approved": false}).
 * A checkpoint the delegator raises itself is told (`ctx.onBlocked`, a
 * `paused` line); the work waits for its resume on its own. It also serves
 * `cap:chat@1.0.0`, a conversation that remembers: each turn sees the earlier
 * ones and a note it saves (`aap-mesh send --continue <run>` for the next
 * turn; protocols/turns.md).
 *
 *   npm start -- --data-dir ./.aap-mesh                 # a node, in another terminal
 *   node examples/ts-agent.ts --data-dir ./.aap-mesh    # joins it (address from its API)
 *   node examples/ts-agent.ts --bootstrap /ip4/127.0.0.1/tcp/4001/p2p/<agent id>
 *
 * One JSON object per line on stdout: ready, then one line per run event it
 * commits. Ctrl-C (or SIGTERM) stops it cleanly.
 */
import { parseArgs } from 'node:util'
import { ApiClient } from '../src/api/client.ts'
import { parseCapability, type CapabilityRef } from '../src/card/card.ts'
import { createMeshNode } from '../src/node.ts'
import type { RunContext } from '../src/runs/runtime.ts'

const { values: args } = parseArgs({
  options: {
    'data-dir': { type: 'string', default: './.aap-mesh' },
    bootstrap: { type: 'string', multiple: true },
    'agent-dir': { type: 'string' },
    capability: { type: 'string', default: 'cap:translate@1.0.0' },
    name: { type: 'string', default: 'ts-translator' },
    listen: { type: 'string', default: '/ip4/127.0.0.1/tcp/0' }
  }
})

function say (event: string, fields: Record<string, unknown> = {}): void {
  process.stdout.write(JSON.stringify({ event, ...fields }) + '\n')
}

const query = parseCapability(args.capability)
if (query.version === undefined || query.version === null || query.version === '*') {
  process.stderr.write(`ts-agent: --capability needs an exact version, e.g. ${query.capability_id}@1.0.0\n`)
  process.exit(2)
}
const capability: CapabilityRef = { capability_id: query.capability_id, version: query.version }

/** Where to join: --bootstrap, or the addresses of the node running from --data-dir. */
async function bootstrapAddresses (): Promise<string[]> {
  if (args.bootstrap !== undefined) return args.bootstrap
  const api = await ApiClient.fromDataDir(args['data-dir'])
  // listen addresses are handed out on request only (they are for bootstrap lists, not for agents)
  const info = await api.call<{ addresses?: string[] }>('GET', '/v1/node', undefined, { addresses: true })
  return info.addresses ?? []
}

/** The work: a toy "translation" with one human checkpoint. */
async function translate (ctx: RunContext): Promise<Record<string, unknown>> {
  // a checkpoint the delegator (or an agent it authorized) raises on the run is told at once; the
  // drafting goes on, and anything it reports or returns meanwhile waits for the resume (never lost)
  const off = ctx.onBlocked(cp => { if (cp.by !== ctx.run.agent_id) say('paused', { run_id: ctx.run.run_id, checkpoint_id: cp.checkpoint_id, by: cp.by }) })
  ctx.signal.addEventListener('abort', off, { once: true })
  const text = typeof ctx.input.text === 'string' ? ctx.input.text : ''
  const draft = text.split(/\s+/).filter(Boolean).reverse().join(' ')
  let resolution: Record<string, unknown>
  if (ctx.restored !== null) {
    // the node restarted while this run was blocked; it has just been resumed
    resolution = ctx.restored.resolution
  } else {
    await ctx.progress({ step: 'drafted', words: draft.split(' ').length })
    resolution = await ctx.block('review the translation', `review-${ctx.run.run_id.slice(-8)}`)
  }
  if (resolution.approved === false) throw new Error('the translation was rejected')
  return { translation: draft, reviewed: resolution }
}

/** A conversation that remembers: each turn sees what was said before, from the context it saves. */
const CHAT: CapabilityRef = { capability_id: 'cap:chat', version: '1.0.0' }
async function chat (ctx: RunContext): Promise<Record<string, unknown>> {
  const heard = Array.isArray(ctx.conversation.saved?.heard) ? ctx.conversation.saved.heard as string[] : []
  const text = typeof ctx.input.text === 'string' ? ctx.input.text : ''
  await ctx.saveContext({ heard: [...heard, text] })
  return { turn: ctx.conversation.turn, heard_before: heard, reply: `turn ${ctx.conversation.turn}: you said "${text}"` }
}

const node = await createMeshNode({
  listen: [args.listen],
  ...(args['agent-dir'] === undefined ? {} : { dataDir: args['agent-dir'] })
})
await node.start()
let stopping = false
const stop = async (): Promise<void> => {
  if (stopping) return
  stopping = true
  await node.stop()
  say('stopped')
  process.exit(0)
}
process.on('SIGINT', () => { void stop() })
process.on('SIGTERM', () => { void stop() })

try {
  const joined = await node.join(await bootstrapAddresses())
  if (joined === 0) throw new Error('no bootstrap peer answered')
} catch (err) {
  process.stderr.write(`ts-agent: cannot join the mesh: ${(err as Error).message}\n`)
  await node.stop()
  process.exit(1)
}

node.runs.onEvent((event) => { say(event.type, { run_id: event.run_id, correlation_id: event.correlation_id, seq: event.seq, payload: event.payload }) })
node.runs.handle(capability, translate)
node.runs.handle(CHAT, chat)
const card = await node.publishCard({ name: args.name, description: 'reverses words, after a human review; chats with memory', capabilities: [capability, CHAT] })
const announced = await node.discovery.announce()
say('ready', { agent_id: node.agentId, capability: args.capability, seq: card.seq, provider_keys: announced })
