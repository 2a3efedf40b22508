/**
 * The local API's resume takes the checkpoint it answers (`checkpoint_id`,
 * ResumeRequest in protocols/api.openapi.json): a resume of a checkpoint the
 * run is no longer blocked on is refused (409 INVALID_TRANSITION, reason
 * checkpoint_mismatch) and changes nothing; the matching one resolves it; one
 * without `checkpoint_id` resolves the open checkpoint, as before; the MCP
 * `resume` tool (its input schema read from the same document) passes it on. Real nodes:
 * B executes, A delegates and serves the API; every answer is checked against
 * the OpenAPI document.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { ApiClient, ApiError } from '../src/api/client.ts'
import { newToken } from '../src/api/files.ts'
import { startApiServer, type ApiServer } from '../src/api/server.ts'
import { TOOLS } from '../src/mcp/tools.ts'
import type { MeshNode } from '../src/node.ts'
import type { Run } from '../src/runlog/types.ts'
import { startMesh, stopAll, until } from './helpers.ts'

const TWICE = { capability_id: 'cap:api-resume-two-checkpoints', version: '1.0.0' }

describe('API: POST /v1/runs/{run_id}/resume with checkpoint_id', () => {
  let nodes: MeshNode[] = []
  let A: MeshNode, B: MeshNode
  let api: ApiServer
  let client: ApiClient

  beforeAll(async () => {
    nodes = await startMesh(2)
    ;[A, B] = nodes as [MeshNode, MeshNode]
    B.runs.handle(TWICE, async (ctx) => {
      const first = await ctx.block('first?', 'cp-first')
      const second = await ctx.block('second?', 'cp-second')
      return { first, second }
    })
    await B.publishCard({ name: 'asker', capabilities: [TWICE] })
    const token = newToken()
    api = await startApiServer(A, { token, port: 0, checkResponses: true })
    client = new ApiClient(api.url, token)
  })
  afterAll(async () => {
    await api?.close()
    await stopAll(nodes)
  })

  const resume = async (runId: string, body: Record<string, unknown>): Promise<{ run: Run }> =>
    client.call<{ run: Run }>('POST', `/v1/runs/${encodeURIComponent(runId)}/resume`, body)

  async function blockedOn (runId: string, checkpoint: string): Promise<Run> {
    await until(async () => {
      const run = await B.runs.getRun(runId)
      return run.state === 'blocked' && run.checkpoint_id === checkpoint
    }, `run ${runId} blocked on ${checkpoint}`)
    return B.runs.getRun(runId)
  }

  it('a stale checkpoint_id is refused and the run stays blocked on the new checkpoint; the matching one resolves it', async () => {
    const run = await A.delegate({ to_agent: B.agentId, task_id: 'api-resume-cp', capability: TWICE, input: {} })
    await blockedOn(run.run_id, 'cp-first')
    expect((await resume(run.run_id, { resolution: { n: 1 }, checkpoint_id: 'cp-first' })).run.run_id).toBe(run.run_id)
    const blocked = await blockedOn(run.run_id, 'cp-second')

    let refused: unknown
    try {
      await resume(run.run_id, { resolution: { n: 'late' }, checkpoint_id: 'cp-first' })
    } catch (err) {
      refused = err
    }
    expect(refused).toBeInstanceOf(ApiError)
    expect((refused as ApiError).status).toBe(409)
    expect((refused as ApiError).code).toBe('INVALID_TRANSITION')
    expect((refused as ApiError).details).toMatchObject({ reason: 'checkpoint_mismatch', checkpoint_id: 'cp-first', open_checkpoint_id: 'cp-second' })
    expect(await B.runs.getRun(run.run_id)).toMatchObject({ state: 'blocked', checkpoint_id: 'cp-second', last_seq: blocked.last_seq })

    await resume(run.run_id, { resolution: { n: 2 }, checkpoint_id: 'cp-second' })
    await until(async () => (await B.runs.getRun(run.run_id)).state === 'completed', 'the run to complete')
    expect((await B.runs.getRun(run.run_id)).output).toEqual({ first: { n: 1 }, second: { n: 2 } })
  })

  it('without checkpoint_id the open checkpoint is resolved, as before', async () => {
    const run = await A.delegate({ to_agent: B.agentId, task_id: 'api-resume-cp-unnamed', capability: TWICE, input: {} })
    await blockedOn(run.run_id, 'cp-first')
    await resume(run.run_id, { resolution: { n: 1 } })
    await blockedOn(run.run_id, 'cp-second')
    await resume(run.run_id, { resolution: { n: 2 } })
    await until(async () => (await B.runs.getRun(run.run_id)).state === 'completed', 'the run to complete')
    expect((await B.runs.getRun(run.run_id)).output).toEqual({ first: { n: 1 }, second: { n: 2 } })
  })

  it('the MCP resume tool offers checkpoint_id and sends it', async () => {
    const tool = TOOLS.find(t => t.name === 'resume')
    expect((tool?.inputSchema.properties as Record<string, unknown>).checkpoint_id).toBeDefined()
    const run = await A.delegate({ to_agent: B.agentId, task_id: 'api-resume-cp-mcp', capability: TWICE, input: {} })
    await blockedOn(run.run_id, 'cp-first')
    await tool?.run(client, { run_id: run.run_id, resolution: { n: 1 }, checkpoint_id: 'cp-first' })
    const blocked = await blockedOn(run.run_id, 'cp-second')
    let refused: unknown
    try {
      await tool?.run(client, { run_id: run.run_id, resolution: { n: 'late' }, checkpoint_id: 'cp-first' })
    } catch (err) {
      refused = err
    }
    expect((refused as ApiError).details).toMatchObject({ reason: 'checkpoint_mismatch', open_checkpoint_id: 'cp-second' })
    expect((await B.runs.getRun(run.run_id)).last_seq).toBe(blocked.last_seq)
    await A.cancel(run.run_id, 'done')
  })

  it('a checkpoint_id that is no checkpoint id is INVALID_REQUEST (400) from the document\'s schema', async () => {
    const run = await A.delegate({ to_agent: B.agentId, task_id: 'api-resume-cp-bad', capability: TWICE, input: {} })
    await blockedOn(run.run_id, 'cp-first')
    for (const checkpoint of ['', 'x'.repeat(129), 7]) {
      let refused: unknown
      try {
        await resume(run.run_id, { resolution: { n: 1 }, checkpoint_id: checkpoint })
      } catch (err) {
        refused = err
      }
      expect((refused as ApiError).code).toBe('INVALID_REQUEST')
      expect((refused as ApiError).status).toBe(400)
    }
    expect((await B.runs.getRun(run.run_id)).state).toBe('blocked')
    await A.cancel(run.run_id, 'done')
  })
})
