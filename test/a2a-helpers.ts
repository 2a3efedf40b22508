/**
 * An A2A v1.0 server built only from the official @a2a-js/sdk server pieces
 * (express handlers, DefaultRequestHandler, InMemoryTaskStore): an approval
 * agent that asks for input once, then answers with a DataPart artifact; an
 * input with `hold: true` works until it is canceled.
 */
import { once } from 'node:events'
import type { AddressInfo } from 'node:net'
import { AGENT_CARD_PATH, Role, TaskState } from '@a2a-js/sdk'
import type { AgentCard, Message, Part } from '@a2a-js/sdk'
import { AgentEvent, DefaultRequestHandler, InMemoryTaskStore } from '@a2a-js/sdk/server'
import type { AgentExecutor, ExecutionEventBus, RequestContext } from '@a2a-js/sdk/server'
import { agentCardHandler, jsonRpcHandler, restHandler, UserBuilder } from '@a2a-js/sdk/server/express'
import express from 'express'

export const SKILL = 'approve-order'
export const SKILL_VERSION = '2.0.0'
/** The mesh capability the bridge makes of the skill. */
export const BRIDGED_CAP = { capability_id: `a2a:${SKILL}`, version: SKILL_VERSION }

export interface A2aTestServer {
  url: string
  /** Every message the server received, in order. */
  received: Message[]
  close: () => Promise<void>
}

function agentMessage (text: string, taskId: string, contextId: string): Message {
  return {
    messageId: crypto.randomUUID(), contextId, taskId, role: Role.ROLE_AGENT,
    parts: [{ content: { $case: 'text', value: text }, metadata: undefined, filename: '', mediaType: 'text/plain' }],
    metadata: undefined, extensions: [], referenceTaskIds: []
  }
}

function dataOf (parts: readonly Part[]): Record<string, any> | undefined {
  for (const p of parts) if (p.content?.$case === 'data') return p.content.value
  return undefined
}

function card (url: string, streaming: boolean): AgentCard {
  return {
    name: 'order approver',
    description: 'Approves orders after asking a human (test A2A agent).',
    supportedInterfaces: [
      { url: url + '/a2a/jsonrpc', protocolBinding: 'JSONRPC', tenant: '', protocolVersion: '1.0' },
      { url: url + '/a2a/rest', protocolBinding: 'HTTP+JSON', tenant: '', protocolVersion: '1.0' }
    ],
    provider: undefined,
    version: SKILL_VERSION,
    capabilities: { streaming, pushNotifications: false, extensions: [], extendedAgentCard: false },
    securitySchemes: {},
    securityRequirements: [],
    defaultInputModes: ['application/json'],
    defaultOutputModes: ['application/json'],
    skills: [{ id: SKILL, name: 'Approve order', description: 'asks, then decides', tags: ['orders'], examples: [], inputModes: [], outputModes: [], securityRequirements: [] }],
    signatures: []
  }
}

export async function startApprovalServer (opts: { streaming?: boolean } = {}): Promise<A2aTestServer> {
  const received: Message[] = []
  const holds = new Map<string, { release: () => void, contextId: string }>()
  const executor: AgentExecutor = {
    execute: async (ctx: RequestContext, bus: ExecutionEventBus): Promise<void> => {
      const msg = ctx.userMessage
      received.push(msg)
      const { taskId, contextId } = ctx
      const now = (): string => new Date().toISOString()
      const history = [...(ctx.task?.history ?? []), msg]
      bus.publish(AgentEvent.task({ id: taskId, contextId, status: { state: TaskState.TASK_STATE_WORKING, message: undefined, timestamp: now() }, artifacts: ctx.task?.artifacts ?? [], history, metadata: undefined }))
      const status = (state: TaskState, text?: string): void => {
        bus.publish(AgentEvent.statusUpdate({ taskId, contextId, status: { state, message: text === undefined ? undefined : agentMessage(text, taskId, contextId), timestamp: now() }, metadata: undefined }))
      }
      const request = dataOf(msg.parts)
      if (ctx.task === undefined) {
        status(TaskState.TASK_STATE_WORKING, 'checking the order')
        if (request?.input?.hold === true) {
          await new Promise<void>(resolve => { holds.set(taskId, { release: resolve, contextId }) })
          return
        }
        status(TaskState.TASK_STATE_INPUT_REQUIRED, `approve order ${JSON.stringify(request?.input ?? {})}?`)
        return
      }
      const resolution = request?.resolution ?? {}
      bus.publish(AgentEvent.artifactUpdate({
        taskId, contextId, append: false, lastChunk: true, metadata: undefined,
        artifact: { artifactId: 'decision', name: 'decision', description: '', parts: [{ content: { $case: 'data', value: { decision: resolution.approved === true ? 'approved' : 'rejected', by: resolution.by ?? null } }, metadata: undefined, filename: '', mediaType: 'application/json' }], metadata: undefined, extensions: [] }
      }))
      status(TaskState.TASK_STATE_COMPLETED)
    },
    cancelTask: async (taskId: string, bus: ExecutionEventBus): Promise<void> => {
      const held = holds.get(taskId)
      bus.publish(AgentEvent.statusUpdate({ taskId, contextId: held?.contextId ?? '', status: { state: TaskState.TASK_STATE_CANCELED, message: undefined, timestamp: new Date().toISOString() }, metadata: undefined }))
      held?.release()
      holds.delete(taskId)
    }
  }
  const app = express()
  const server = app.listen(0, '127.0.0.1')
  await once(server, 'listening')
  const url = `http://127.0.0.1:${(server.address() as AddressInfo).port}`
  const requestHandler = new DefaultRequestHandler(card(url, opts.streaming ?? true), new InMemoryTaskStore(), executor)
  const userBuilder = UserBuilder.noAuthentication
  app.use(`/${AGENT_CARD_PATH}`, agentCardHandler({ agentCardProvider: requestHandler }))
  app.use('/a2a/jsonrpc', jsonRpcHandler({ requestHandler, userBuilder }))
  app.use('/a2a/rest', restHandler({ requestHandler, userBuilder }))
  return {
    url,
    received,
    close: async () => {
      for (const h of holds.values()) h.release()
      const closed = once(server, 'close')
      server.close()
      server.closeAllConnections()
      await closed
    }
  }
}
