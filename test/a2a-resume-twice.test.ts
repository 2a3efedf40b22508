/**
 * A second A2A resume of a task while one is under way was refused as an internal fault (-32004, aap_code
 * INTERNAL: the claim threw a plain Error); it is INVALID_TRANSITION (-32002, reason resume_in_progress), as a
 * resume the mesh refuses is.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { TaskState } from '@a2a-js/sdk'
import { ClientFactory } from '@a2a-js/sdk/client'
import type { MeshNode } from '../src/node.ts'
import { silentLogger } from '../src/logger.ts'
import { A2aServer } from '../src/a2a/server.ts'
import { PART_RESUME } from '../src/a2a/constants.ts'
import { startMesh, stopAll } from './helpers.ts'
import { asTask, send } from './fixtures/a2a-messages.ts'

const APPROVE = { capability_id: 'cap:approve', version: '1.0.0' }

describe('a2a: a second resume while one is under way', () => {
  let nodes: MeshNode[] = []
  let a2a: A2aServer

  beforeAll(async () => {
    nodes = await startMesh(2, { transport: 'tcp' })
    const [w, gw] = nodes as [MeshNode, MeshNode]
    w.runs.handle(APPROVE, async (ctx) => ({ r: await ctx.block('yes?', `cp-${ctx.run.run_id}`) }))
    await w.publishCard({ name: 'w', capabilities: [APPROVE] })
    await gw.publishCard({ name: 'gw', capabilities: [] })
    a2a = await A2aServer.start(gw, { port: 0, logger: silentLogger() })
  })
  afterAll(async () => {
    await a2a?.close()
    await stopAll(nodes)
  })

  it('is refused as a transition, not as an internal error', async () => {
    const client = await new ClientFactory().createFromUrl(a2a.clientUrl(nodes[0]!.agentId))
    const blocked = asTask(await client.sendMessage(send(APPROVE, {}, 'ctx-two-resumes')))
    expect(blocked.status?.state).toBe(TaskState.TASK_STATE_INPUT_REQUIRED)
    const resume = async (n: number): Promise<any> => {
      const body = { jsonrpc: '2.0', id: n, method: 'SendMessage', params: { message: { messageId: crypto.randomUUID(), taskId: blocked.id, contextId: blocked.contextId, role: 'ROLE_USER', parts: [{ data: { type: PART_RESUME, resolution: { ok: true } } }] } } }
      const res = await fetch(a2a.agentUrl(nodes[0]!.agentId) + '/jsonrpc', { method: 'POST', headers: { 'content-type': 'application/json', 'A2A-Version': '1.0' }, body: JSON.stringify(body), signal: AbortSignal.timeout(20_000) })
      return await res.json()
    }
    const results = await Promise.all([resume(1), resume(2)])
    const refused = results.find(r => r.error !== undefined)
    expect(refused).toBeDefined()
    expect(refused.error.data?.[0]?.metadata?.aap_code ?? JSON.stringify(refused.error)).not.toContain('INTERNAL')
  })
})
