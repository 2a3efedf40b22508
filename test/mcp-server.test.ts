/**
 * `aap-mesh mcp` as a child process, driven by the MCP SDK's own client over
 * stdio: every tool against a running node (an `aap-mesh start` process)
 * whose mesh holds a worker agent, error paths included.
 */
import { join } from 'node:path'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { Client } from '@modelcontextprotocol/sdk/client/index.js'
import { StdioClientTransport } from '@modelcontextprotocol/sdk/client/stdio.js'
import type { MeshNode } from '../src/node.ts'
import { startMesh, stopAll } from './helpers.ts'
import { MAIN, NodeProc, TempDirs, root } from './cli-helpers.ts'

const APPROVE = { capability_id: 'cap:mcp-approve', version: '1.0.0' }
const WAIT = { capability_id: 'cap:mcp-wait', version: '1.0.0' }

describe('aap-mesh mcp over stdio', () => {
  const dirs = new TempDirs()
  let nodes: MeshNode[] = []
  let worker: MeshNode
  let a: NodeProc
  let client: Client
  let mcpStderr = ''

  beforeAll(async () => {
    nodes = await startMesh(1, { transport: 'tcp' })
    worker = nodes[0]!
    worker.runs.handle(APPROVE, async (ctx) => {
      const r = await ctx.block('approve?', 'cp-mcp')
      return { approved: r.approved }
    })
    worker.runs.handle(WAIT, async (ctx) => {
      await new Promise<void>(resolve => { ctx.signal.addEventListener('abort', () => { resolve() }, { once: true }) })
    })
    await worker.publishCard({ name: 'mcp-worker', capabilities: [APPROVE, WAIT] })
    const dir = await dirs.make()
    a = new NodeProc(dir, ['--bootstrap', worker.addresses[0]!])
    await a.started()
    client = new Client({ name: 'aap-mesh-test', version: '0.0.0' })
    const transport = new StdioClientTransport({ command: process.execPath, args: [MAIN, 'mcp', '--data-dir', dir], cwd: root, stderr: 'pipe' })
    transport.stderr?.on('data', (chunk: Buffer) => { mcpStderr += chunk.toString() })
    try {
      await client.connect(transport)
    } catch (err) {
      throw new Error(`mcp did not start: ${(err as Error).message}; stderr: ${mcpStderr.slice(-2000)}`)
    }
  })
  afterAll(async () => {
    await client?.close()
    await a?.stop('SIGKILL')
    await stopAll(nodes)
    await dirs.cleanup()
  })

  const call = async (name: string, args: Record<string, unknown>): Promise<{ isError: boolean, data: any }> => {
    const r = await client.callTool({ name, arguments: args })
    const text = (r.content as Array<{ type: string, text: string }>)[0]?.text ?? ''
    return { isError: r.isError === true, data: JSON.parse(text) }
  }

  it('lists every tool with an input schema from protocols/', async () => {
    const { tools } = await client.listTools()
    expect(tools.map(t => t.name).sort()).toEqual(['cancel', 'delegate', 'discover', 'events', 'get_run', 'list_runs', 'replay', 'resume'])
    const delegate = tools.find(t => t.name === 'delegate')!
    expect(delegate.inputSchema.required).toEqual(expect.arrayContaining(['to_agent', 'task_id', 'capability', 'input']))
    expect(JSON.stringify(delegate.inputSchema)).not.toContain('$ref')
  })

  it('discover, delegate, events, get_run, list_runs, resume, replay, cancel', async () => {
    let found: any
    for (let i = 0; i < 50; i++) {
      found = await call('discover', { capability: 'cap:mcp-approve@1.0.0', fresh: true })
      if (found.data.cards?.length > 0) break
    }
    expect(found.isError).toBe(false)
    expect(found.data.cards.map((c: { agent_id: string }) => c.agent_id)).toContain(worker.agentId)

    const d = await call('delegate', { to_agent: worker.agentId, task_id: 'corr-mcp', capability: APPROVE, input: { doc: 1 } })
    expect(d.isError).toBe(false)
    const runId = d.data.run.run_id as string
    const blocked = await call('events', { correlation_id: 'corr-mcp', until: 'run.blocked', wait_ms: 20000 })
    expect(blocked.data.ended_by).toBe('until')
    expect(blocked.data.events.map((e: { type: string }) => e.type)).toEqual(['run.started', 'run.blocked'])
    expect((await call('get_run', { run_id: runId })).data.run).toMatchObject({ state: 'blocked', checkpoint_id: 'cp-mcp' })
    const listed = await call('list_runs', { correlation_id: 'corr-mcp' })
    expect(listed.data.delegated.map((r: { run_id: string }) => r.run_id)).toEqual([runId])

    const resumed = await call('resume', { run_id: runId, resolution: { approved: true } })
    expect(resumed.isError).toBe(false)
    const done = await call('events', { correlation_id: 'corr-mcp', until: 'run.completed', wait_ms: 20000 })
    expect(done.data.events.at(-1)).toMatchObject({ type: 'run.completed', payload: { output: { approved: true } } })
    const replay = await call('replay', { correlation_id: 'corr-mcp' })
    expect(replay.isError).toBe(false)
    expect(replay.data.runs.map((r: { state: string }) => r.state)).toEqual(['completed'])
    // the owner is passed on (it was dropped): the task's own owner replays its run; under another owner the run
    // is not that owner's task
    const owned = await call('replay', { correlation_id: 'corr-mcp', owner: replay.data.owner })
    expect(owned.data.runs.map((r: { state: string }) => r.state)).toEqual(['completed'])
    const other = await call('replay', { correlation_id: 'corr-mcp', owner: worker.agentId })
    expect(other.isError).toBe(false)
    expect(other.data.owner).toBe(worker.agentId)
    expect(other.data.runs).toEqual([])

    const w = await call('delegate', { to_agent: worker.agentId, task_id: 'corr-mcp-cancel', capability: WAIT, input: {} })
    const canceled = await call('cancel', { run_id: w.data.run.run_id, reason: 'from an AI tool' })
    expect(canceled.isError).toBe(false)
    expect(canceled.data.run).toMatchObject({ state: 'failed', failure: { code: 'CANCELED' } })
  })

  it('errors come back as tool errors with their code, and the server goes on', async () => {
    const missing = await call('get_run', { run_id: 'no-such-run' })
    expect(missing.isError).toBe(true)
    expect(missing.data.error.code).toBe('RUN_NOT_FOUND')
    const bad = await call('delegate', { to_agent: worker.agentId, task_id: 'x' })
    expect(bad).toMatchObject({ isError: true, data: { error: { code: 'INVALID_REQUEST' } } })
    const extra = await call('get_run', { run_id: 'r', nope: 1 })
    expect(extra.data.error.code).toBe('INVALID_REQUEST')
    const unknown = await call('no_such_tool', {})
    expect(unknown.data.error.code).toBe('INVALID_REQUEST')
    const refused = await call('delegate', { to_agent: worker.agentId, task_id: 'corr-mcp-x', capability: { capability_id: 'cap:none', version: '1.0.0' }, input: {} })
    expect(refused.data.error.code).toBe('CAPABILITY_NOT_SUPPORTED')
    expect((await call('list_runs', {})).isError).toBe(false)
  })

  it('with no node to talk to, mcp exits with the reason on stderr', async () => {
    const { cli } = await import('./cli-helpers.ts')
    const r = await cli(['mcp', '--data-dir', join(await dirs.make(), 'none')])
    expect(r.code).toBe(3)
    expect(r.stdout).toBe('')
    expect(r.stderr).toContain('UNREACHABLE')
  })
})
