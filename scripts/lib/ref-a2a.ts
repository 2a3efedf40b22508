/**
 * A2A reference: what a user would pick instead of the mesh. Uses the official
 * @a2a-js/sdk (v1.x, A2A protocol 1.0) on both sides: an Express server whose
 * executor immediately answers with a Task in state WORKING, and the SDK's
 * ClientFactory/Client for `SendMessage` plus its card resolver for the
 * agent-card fetch.
 */
import { once } from 'node:events'
import type { AddressInfo } from 'node:net'
import { AGENT_CARD_PATH, Role, TaskState } from '@a2a-js/sdk'
import type { AgentCard, Message, SendMessageRequest, Task } from '@a2a-js/sdk'
import { ClientFactory, ClientFactoryOptions, DefaultAgentCardResolver } from '@a2a-js/sdk/client'
import { AgentEvent, DefaultRequestHandler, InMemoryTaskStore } from '@a2a-js/sdk/server'
import type { AgentExecutor, ExecutionEventBus, RequestContext } from '@a2a-js/sdk/server'
import { agentCardHandler, jsonRpcHandler, restHandler, UserBuilder } from '@a2a-js/sdk/server/express'
import express from 'express'
import { benchRequests } from './stats.ts'
import type { RequestBenchResult } from './stats.ts'

export const A2A_JSONRPC_PATH = '/a2a/jsonrpc'
export const A2A_REST_PATH = '/a2a/rest'

/** Wire bindings the reference server exposes, as named on the agent card. */
export type A2aBinding = 'JSONRPC' | 'HTTP+JSON'

// ---------------------------------------------------------------------------
// Server side

/** Agent card for the reference agent served at `baseUrl`; `first` is listed first (= the client's default pick). */
export function buildAgentCard (baseUrl: string, first: A2aBinding = 'JSONRPC'): AgentCard {
  const jsonrpc = { url: baseUrl + A2A_JSONRPC_PATH, protocolBinding: 'JSONRPC', tenant: '', protocolVersion: '1.0' }
  const rest = { url: baseUrl + A2A_REST_PATH, protocolBinding: 'HTTP+JSON', tenant: '', protocolVersion: '1.0' }
  return {
    name: 'aap-bench reference agent',
    description: 'Accepts any message and answers with a Task in state WORKING (benchmark reference).',
    supportedInterfaces: first === 'JSONRPC' ? [jsonrpc, rest] : [rest, jsonrpc],
    provider: undefined,
    version: '0.1.0',
    capabilities: { streaming: false, pushNotifications: false, extensions: [], extendedAgentCard: false },
    securitySchemes: {},
    securityRequirements: [],
    defaultInputModes: ['text/plain'],
    defaultOutputModes: ['text/plain'],
    skills: [{
      id: 'accept',
      name: 'Accept task',
      description: 'Acknowledges a request by creating a task that is being worked on.',
      tags: ['benchmark'],
      examples: [],
      inputModes: ['text/plain'],
      outputModes: ['text/plain'],
      securityRequirements: []
    }],
    signatures: []
  }
}

/**
 * Executor that publishes a Task in state WORKING (history = the user's
 * message) and returns at once; the SDK then settles the event bus, so a
 * blocking SendMessage answers with that WORKING task.
 */
export const workingTaskExecutor: AgentExecutor = {
  execute: async (ctx: RequestContext, bus: ExecutionEventBus): Promise<void> => {
    const task: Task = {
      id: ctx.taskId,
      contextId: ctx.contextId,
      status: { state: TaskState.TASK_STATE_WORKING, message: undefined, timestamp: new Date().toISOString() },
      artifacts: [],
      history: [ctx.userMessage],
      metadata: undefined
    }
    bus.publish(AgentEvent.task(task))
  },
  cancelTask: async (): Promise<void> => {}
}

/**
 * Executor that completes at once: the Task (WORKING), then an artifact with
 * one DataPart echoing the request, then COMPLETED. For the bridge benchmark,
 * whose forwarded runs wait for a final state.
 */
export const completingTaskExecutor: AgentExecutor = {
  execute: async (ctx: RequestContext, bus: ExecutionEventBus): Promise<void> => {
    const { taskId, contextId } = ctx
    const now = new Date().toISOString()
    bus.publish(AgentEvent.task({ id: taskId, contextId, status: { state: TaskState.TASK_STATE_WORKING, message: undefined, timestamp: now }, artifacts: [], history: [ctx.userMessage], metadata: undefined }))
    bus.publish(AgentEvent.artifactUpdate({
      taskId, contextId, append: false, lastChunk: true, metadata: undefined,
      artifact: { artifactId: 'result', name: 'result', description: '', parts: [{ content: { $case: 'data', value: { ok: true } }, metadata: undefined, filename: '', mediaType: 'application/json' }], metadata: undefined, extensions: [] }
    }))
    bus.publish(AgentEvent.statusUpdate({ taskId, contextId, status: { state: TaskState.TASK_STATE_COMPLETED, message: undefined, timestamp: now }, metadata: undefined }))
  },
  cancelTask: async (): Promise<void> => {}
}

export interface A2aServerHandle {
  /** base URL, e.g. http://127.0.0.1:41234 */
  url: string
  agentCardUrl: string
  card: AgentCard
  close: () => Promise<void>
}

/** Start the reference A2A server (JSON-RPC + HTTP+JSON + agent card) on host:port (0 = ephemeral). */
export async function startA2aServer (opts: { host?: string, port?: number, first?: A2aBinding, executor?: AgentExecutor, streaming?: boolean } = {}): Promise<A2aServerHandle> {
  const host = opts.host ?? '127.0.0.1'
  const app = express()
  const server = app.listen(opts.port ?? 0, host)
  await once(server, 'listening')
  const { port } = server.address() as AddressInfo
  const url = `http://${host}:${port}`

  // the card names absolute interface URLs, so it is built once the port is known
  const card = buildAgentCard(url, opts.first)
  if (opts.streaming === true) card.capabilities = { ...card.capabilities, streaming: true, extensions: [] }
  const requestHandler = new DefaultRequestHandler(card, new InMemoryTaskStore(), opts.executor ?? workingTaskExecutor)
  const userBuilder = UserBuilder.noAuthentication
  app.use(`/${AGENT_CARD_PATH}`, agentCardHandler({ agentCardProvider: requestHandler }))
  app.use(A2A_JSONRPC_PATH, jsonRpcHandler({ requestHandler, userBuilder }))
  app.use(A2A_REST_PATH, restHandler({ requestHandler, userBuilder }))

  return {
    url,
    agentCardUrl: `${url}/${AGENT_CARD_PATH}`,
    card,
    close: async () => {
      const closed = once(server, 'close')
      server.close()
      server.closeAllConnections()
      await closed
    }
  }
}

// ---------------------------------------------------------------------------
// Client side

export interface MeasureA2aSendOptions {
  /** server base URL (the agent card is resolved from it) */
  url: string
  /** measured sequential requests */
  requests: number
  /** requests in flight during the throughput phase */
  concurrency: number
  /** measured requests in the throughput phase; see benchRequests for the default */
  concurrentRequests?: number
  /** unmeasured requests before each phase; see benchRequests for the default */
  warmup?: number
  /** force a binding instead of the card's first interface */
  preferredTransport?: A2aBinding
  /** bound on each request; default 10 s */
  timeoutMs?: number
}

export interface A2aSendResult extends RequestBenchResult {
  kind: 'a2a-send'
  /** transport the SDK client picked ('JSONRPC' or 'HTTP+JSON') */
  transport: string
  /** A2A method invoked */
  method: 'SendMessage'
  protocolVersion: string
  /** state of the returned task, as checked on every response */
  taskState: 'TASK_STATE_WORKING'
}

function userMessage (i: number): Message {
  return {
    messageId: crypto.randomUUID(),
    contextId: '',
    taskId: '',
    role: Role.ROLE_USER,
    parts: [{ content: { $case: 'text', value: `bench request ${i}` }, metadata: undefined, filename: '', mediaType: 'text/plain' }],
    metadata: undefined,
    extensions: [],
    referenceTaskIds: []
  }
}

/**
 * Resolve the agent card and build an SDK client (default transports, so the
 * card's first interface wins unless `preferredTransport` is given), then time
 * blocking SendMessage calls, each creating a new task.
 */
export async function measureA2aSend (opts: MeasureA2aSendOptions): Promise<A2aSendResult> {
  const timeoutMs = opts.timeoutMs ?? 10_000
  const factory = opts.preferredTransport === undefined
    ? new ClientFactory()
    : new ClientFactory(ClientFactoryOptions.createFrom(ClientFactoryOptions.default, { preferredTransports: [opts.preferredTransport] }))
  const client = await factory.createFromUrl(opts.url)

  const request = async (i: number): Promise<void> => {
    const params: SendMessageRequest = { tenant: '', message: userMessage(i), configuration: undefined, metadata: undefined }
    const result = await client.sendMessage(params, { signal: AbortSignal.timeout(timeoutMs) })
    if (!('status' in result) || result.status?.state !== TaskState.TASK_STATE_WORKING) {
      throw new Error(`unexpected SendMessage result: ${JSON.stringify(result).slice(0, 300)}`)
    }
  }

  const result = await benchRequests(request, {
    name: 'a2a SendMessage',
    requests: opts.requests,
    concurrency: opts.concurrency,
    concurrentRequests: opts.concurrentRequests,
    warmup: opts.warmup
  })
  return {
    kind: 'a2a-send',
    transport: client.transport.protocolName,
    method: 'SendMessage',
    protocolVersion: client.protocolVersion,
    taskState: 'TASK_STATE_WORKING',
    ...result
  }
}

export interface MeasureA2aCardFetchOptions {
  url: string
  /** measured sequential fetches */
  requests: number
  /** fetches in flight for the throughput phase; 0 or omitted skips it */
  concurrency?: number
  concurrentRequests?: number
  warmup?: number
  timeoutMs?: number
}

export interface A2aCardFetchResult extends RequestBenchResult {
  kind: 'a2a-card-fetch'
  /** what performs the fetch */
  via: 'DefaultAgentCardResolver'
  path: string
}

/** Time agent-card resolution (HTTP GET + JSON parse + SDK normalisation) with the SDK's DefaultAgentCardResolver. */
export async function measureA2aCardFetch (opts: MeasureA2aCardFetchOptions): Promise<A2aCardFetchResult> {
  const timeoutMs = opts.timeoutMs ?? 10_000
  // resolve() takes no signal; it makes exactly one fetch per call, so bound that
  const resolver = new DefaultAgentCardResolver({
    fetchImpl: async (input, init) => fetch(input, { ...init, signal: AbortSignal.timeout(timeoutMs) })
  })
  const request = async (): Promise<void> => {
    const card = await resolver.resolve(opts.url)
    if (card.supportedInterfaces.length === 0) throw new Error('agent card has no interfaces')
  }
  const result = await benchRequests(request, {
    name: 'a2a agent-card fetch',
    requests: opts.requests,
    concurrency: opts.concurrency ?? 0,
    concurrentRequests: opts.concurrentRequests,
    warmup: opts.warmup
  })
  return { kind: 'a2a-card-fetch', via: 'DefaultAgentCardResolver', path: `/${AGENT_CARD_PATH}`, ...result }
}
