/**
 * A2A agents as mesh agents: an official @a2a-js/sdk server joined to the
 * mesh by a node, delegated to from another node: in-process (streaming and
 * polling, cancel, a server that goes away) and through the CLI with
 * `aap-mesh start --a2a-agent` (block and resume included).
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { TaskState } from '@a2a-js/sdk'
import type { MeshNode } from '../src/node.ts'
import { silentLogger } from '../src/logger.ts'
import { A2aOutbound, mergeDrafts } from '../src/a2a/outbound.ts'
import { PART_DELEGATE, PART_RESUME } from '../src/a2a/constants.ts'
import { startMesh, stopAll, until } from './helpers.ts'
import { BRIDGED_CAP, SKILL, startApprovalServer, type A2aTestServer } from './a2a-helpers.ts'
import { NodeProc, TempDirs } from './cli-helpers.ts'

function dataType (m: { parts: Array<{ content?: { $case: string, value: unknown } }> }): unknown {
  const p = m.parts.find(x => x.content?.$case === 'data')
  return (p?.content?.value as { type?: unknown } | undefined)?.type
}

describe('A2A outbound, in process', () => {
  let nodes: MeshNode[] = []
  let caller: MeshNode, bridge: MeshNode, pollBridge: MeshNode
  let streaming: A2aTestServer, polling: A2aTestServer

  beforeAll(async () => {
    nodes = await startMesh(4, { transport: 'tcp' })
    ;[caller, bridge, pollBridge] = nodes as [MeshNode, MeshNode, MeshNode]
    streaming = await startApprovalServer({ streaming: true })
    polling = await startApprovalServer({ streaming: false })
    const out = new A2aOutbound(bridge, silentLogger())
    const agent = await out.add(streaming.url)
    expect(agent.draft.capabilities).toEqual([BRIDGED_CAP])
    await bridge.publishCard(mergeDrafts(undefined, [agent.draft])!)
    const out2 = new A2aOutbound(pollBridge, silentLogger())
    await pollBridge.publishCard(mergeDrafts({ name: 'own', capabilities: [] }, [(await out2.add(polling.url)).draft])!)
  })
  afterAll(async () => {
    await streaming?.close()
    await polling?.close()
    await stopAll(nodes)
  })

  it('publishes a mesh card for the A2A agent: its skills as capabilities', async () => {
    const card = await caller.getCard(bridge.agentId, { fresh: true })
    expect(card.name).toBe('order approver')
    expect(card.capabilities).toEqual([BRIDGED_CAP])
    expect(card.tags).toEqual(expect.arrayContaining(['a2a', 'orders']))
    expect((await caller.getCard(pollBridge.agentId, { fresh: true })).name).toBe('own')
  })

  for (const which of ['streaming', 'polling'] as const) {
    it(`forwards a delegation (${which}): input-required is a block, resume a message on the task, the artifact the output`, async () => {
      const to = which === 'streaming' ? bridge : pollBridge
      const server = which === 'streaming' ? streaming : polling
      const task = `corr-out-${which}`
      const run = await caller.delegate({ to_agent: to.agentId, task_id: task, capability: BRIDGED_CAP, input: { order: 42 } })
      await until(async () => (await caller.getRun(run.run_id)).state === 'blocked', 'the run to block on the A2A input request')
      const blocked = await caller.getRun(run.run_id)
      expect(blocked.block_reason).toContain('approve order')
      expect(blocked.checkpoint_id).toMatch(/^a2a:/)
      const first = server.received.find(m => m.contextId === task)
      expect(first).toBeDefined()
      expect(dataType(first!)).toBe(PART_DELEGATE)

      await caller.resume(run.run_id, { approved: true, by: 'alice' })
      await until(async () => (await caller.getRun(run.run_id)).state === 'completed', 'the run to complete')
      const done = await caller.getRun(run.run_id)
      expect(done.output).toEqual({ artifacts: [{ artifact_id: 'decision', name: 'decision', parts: [{ data: { decision: 'approved', by: 'alice' } }] }] })
      const second = server.received.filter(m => m.contextId === task)[1]
      expect(dataType(second!)).toBe(PART_RESUME)
      expect(second!.taskId).not.toBe('')
      // the run's events name the A2A task
      const replay = await caller.events.replay(task)
      expect(JSON.stringify(replay)).toContain(second!.taskId)
    })
  }

  it('a canceled run cancels its A2A task', async () => {
    const run = await caller.delegate({ to_agent: bridge.agentId, task_id: 'corr-out-cancel', capability: BRIDGED_CAP, input: { hold: true } })
    await until(async () => JSON.stringify(await caller.events.replay('corr-out-cancel')).includes('a2a_task_id'), 'the A2A task id in the run\'s events')
    const replay = await caller.events.replay('corr-out-cancel')
    const taskId = (replay.events.find(e => e.payload.a2a_task_id !== undefined)?.payload.a2a_task_id) as string
    await caller.cancel(run.run_id, 'no longer needed')
    const { ClientFactory } = await import('@a2a-js/sdk/client')
    const direct = await new ClientFactory().createFromUrl(streaming.url)
    await until(async () => (await direct.getTask({ tenant: '', id: taskId })).status?.state === TaskState.TASK_STATE_CANCELED, 'the A2A task to be canceled')
  })

  it('a server that goes away fails its runs with the reason', async () => {
    const gone = await startApprovalServer()
    const node = nodes[3]!
    const out = new A2aOutbound(node, silentLogger())
    const agent = await out.add(gone.url)
    const cap = agent.draft.capabilities![0]!
    // one node bridges one agent per capability
    await expect(out.add(polling.url)).rejects.toThrow(/already/)
    await node.publishCard(mergeDrafts(undefined, [agent.draft])!)
    const run = await caller.delegate({ to_agent: node.agentId, task_id: 'corr-out-gone-1', capability: cap, input: {} })
    await until(async () => (await caller.getRun(run.run_id)).state === 'blocked', 'the run to block')
    await gone.close()
    // the resume reaches a server that is no more: the run fails and says why
    await caller.resume(run.run_id, { approved: true })
    await until(async () => (await caller.getRun(run.run_id)).state === 'failed', 'the run to fail')
    const failed = await caller.getRun(run.run_id)
    expect(failed.failure?.message).toContain(`A2A agent ${gone.url}/`)
    // and so does a new delegation
    const again = await caller.delegate({ to_agent: node.agentId, task_id: 'corr-out-gone-2', capability: cap, input: {} })
    await until(async () => (await caller.getRun(again.run_id)).state === 'failed', 'the new run to fail')
    expect((await caller.getRun(again.run_id)).failure?.message).toContain('A2A agent')
  })

  it('refuses what is not an A2A agent', async () => {
    const out = new A2aOutbound(caller, silentLogger())
    await expect(out.add('ftp://127.0.0.1/')).rejects.toThrow(/http/)
    await expect(out.add('not a url')).rejects.toThrow(/not a URL/)
    await expect(out.add('http://127.0.0.1:9/')).rejects.toThrow(/cannot fetch the A2A agent card/)
  })
})

describe('A2A outbound through the CLI: aap-mesh start --a2a-agent', () => {
  const dirs = new TempDirs()
  const procs: NodeProc[] = []
  let server: A2aTestServer

  beforeAll(async () => {
    server = await startApprovalServer()
  })
  afterAll(async () => {
    await Promise.all(procs.map(async p => p.stop('SIGKILL')))
    await server?.close()
    await dirs.cleanup()
  })

  it('joins the A2A server to the mesh; another node delegates, the run blocks, is resumed and completes', async () => {
    const a = new NodeProc(await dirs.make(), [])
    procs.push(a)
    const sa = await a.started()
    const b = new NodeProc(await dirs.make(), ['--bootstrap', sa.addresses[0]!, '--a2a-agent', server.url])
    procs.push(b)
    const bStarted = await b.event('started')
    const bId = bStarted.agent_id as string
    expect((bStarted.card as { capabilities: unknown }).capabilities).toEqual([BRIDGED_CAP])

    const cap = `${BRIDGED_CAP.capability_id}@${BRIDGED_CAP.version}`
    const found = await a.cli(['discover', '--capability', cap, '--wait', '20000', '--json'])
    expect(found.json.cards.map((c: { agent_id: string }) => c.agent_id)).toContain(bId)
    const d = await a.cli(['delegate', '--to', bId, '--capability', cap, '--task', 'task-a2a-cli', '--input', '{"order":7}', '--json'])
    expect(d.code, d.stderr).toBe(0)
    const runId = d.json.run.run_id as string
    const follow = await a.cli(['events', '--follow', 'task-a2a-cli', '--until', 'run.blocked', '--json'])
    expect(follow.code, follow.stderr).toBe(0)
    const shown = await a.cli(['runs', 'show', runId, '--json'])
    expect(shown.json.run.state).toBe('blocked')
    expect(shown.json.run.block_reason).toContain('approve order {"order":7}')

    const resumed = await a.cli(['resume', runId, '--resolution', '{"approved":true,"by":"cli"}', '--json'])
    expect(resumed.code, resumed.stderr).toBe(0)
    const end = await a.cli(['events', '--follow', 'task-a2a-cli', '--until', 'run.completed', '--json'])
    expect(end.code, end.stderr).toBe(0)
    const after = await a.cli(['runs', 'show', runId, '--json'])
    expect(after.json.run.state).toBe('completed')
    expect(after.json.run.output.artifacts[0].parts[0].data).toEqual({ decision: 'approved', by: 'cli' })
    expect(server.received.filter(m => m.contextId === 'task-a2a-cli')).toHaveLength(2)
    expect(SKILL).toBe('approve-order')
  })

  it('a card that cannot be fetched stops start with an error', async () => {
    const c = new NodeProc(await dirs.make(), ['--a2a-agent', 'http://127.0.0.1:9/'])
    procs.push(c)
    const { code } = await c.exited
    expect(code).toBe(1)
    expect(c.stderr).toContain('cannot fetch the A2A agent card')
  })
})
