/**
 * End to end, all in separate processes but the two A2A ends: an official
 * @a2a-js/sdk client -> node 1 (`start --a2a-port`) -> the mesh -> node 2
 * (`start --a2a-agent`) -> an official @a2a-js/sdk server. The task asks for
 * input and is resumed from the A2A client; then `aap-mesh replay` on a third
 * node shows one correlation, from the client's contextId to the server's,
 * with every transition.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { Role, TaskState } from '@a2a-js/sdk'
import type { Message, Part, Task } from '@a2a-js/sdk'
import { ClientFactory } from '@a2a-js/sdk/client'
import { PART_CHECKPOINT, PART_DELEGATE, PART_OUTPUT, PART_RESUME } from '../src/a2a/constants.ts'
import { BRIDGED_CAP, startApprovalServer, type A2aTestServer } from './a2a-helpers.ts'
import { NodeProc, TempDirs } from './cli-helpers.ts'

const CORR = 'corr-a2a-e2e'

function msg (parts: Part[], ids: { taskId?: string, contextId?: string }): Message {
  return { messageId: crypto.randomUUID(), contextId: ids.contextId ?? '', taskId: ids.taskId ?? '', role: Role.ROLE_USER, parts, metadata: undefined, extensions: [], referenceTaskIds: [] }
}
function data (type: string, body: Record<string, unknown>): Part {
  return { content: { $case: 'data', value: { type, ...body } }, metadata: undefined, filename: '', mediaType: 'application/json' }
}
function partData (parts: readonly Part[] | undefined, type: string): Record<string, any> | undefined {
  for (const p of parts ?? []) if (p.content?.$case === 'data' && p.content.value?.type === type) return p.content.value
  return undefined
}

describe('A2A client -> node 1 -> mesh -> node 2 -> A2A server', () => {
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

  it('one correlation end to end, block and resume included, replayed on a third node', async () => {
    const n1 = new NodeProc(await dirs.make(), ['--a2a-port', '0', '--name', 'gateway'])
    procs.push(n1)
    const s1 = await n1.event('started')
    const a2aUrl = s1.a2a as string
    expect(a2aUrl).toMatch(/^http:\/\/127\.0\.0\.1:\d+$/)
    const boot = (s1.addresses as string[])[0]!
    const n2 = new NodeProc(await dirs.make(), ['--bootstrap', boot, '--a2a-agent', server.url])
    procs.push(n2)
    const n2Id = (await n2.event('started')).agent_id as string
    const n3 = new NodeProc(await dirs.make(), ['--bootstrap', boot])
    procs.push(n3)
    await n3.started()

    // the A2A client knows only node 1's A2A address and node 2's agent id
    const client = await new ClientFactory().createFromUrl(`${a2aUrl}/a2a/agents/${n2Id}/`)
    const card = await client.getAgentCard()
    expect(card.skills.map(s => s.id)).toEqual([`${BRIDGED_CAP.capability_id}@${BRIDGED_CAP.version}`])

    const first = await client.sendMessage({ tenant: '', message: msg([data(PART_DELEGATE, { capability: BRIDGED_CAP, input: { order: 9 } })], { contextId: CORR }), configuration: undefined, metadata: undefined }) as Task
    expect(first.status?.state).toBe(TaskState.TASK_STATE_INPUT_REQUIRED)
    const checkpoint = partData(first.status?.message?.parts, PART_CHECKPOINT)
    expect(checkpoint?.reason).toContain('approve order {"order":9}')

    const second = await client.sendMessage({ tenant: '', message: msg([data(PART_RESUME, { resolution: { approved: true, by: 'a2a-client' } })], { taskId: first.id, contextId: CORR }), configuration: undefined, metadata: undefined }) as Task
    expect(second.status?.state).toBe(TaskState.TASK_STATE_COMPLETED)
    const output = partData(second.artifacts[0]?.parts, PART_OUTPUT)?.output
    expect(output.artifacts[0].parts[0].data).toEqual({ decision: 'approved', by: 'a2a-client' })

    // the A2A server saw the same correlation as its contextId
    expect(server.received.map(m => m.contextId)).toEqual([CORR, CORR])

    // a third node replays the correlation: one run, every transition, one correlation id
    const r = await n3.cli(['replay', CORR, '--participant', n2Id, '--json'])
    expect(r.code, r.stderr).toBe(0)
    const replay = r.json
    expect(replay.runs).toHaveLength(1)
    expect(replay.runs[0]).toMatchObject({ executor: n2Id, state: 'completed', started_by: 'delegate' })
    const types = replay.events.map((e: { type: string }) => e.type)
    expect(types[0]).toBe('run.started')
    expect(types).toContain('run.blocked')
    expect(types.at(-1)).toBe('run.completed')
    expect(new Set(replay.events.map((e: { correlation_id: string }) => e.correlation_id))).toEqual(new Set([CORR]))
    const payloads = replay.events.map((e: { payload: Record<string, unknown> }) => e.payload)
    expect(payloads.some((p: Record<string, unknown>) => p.a2a_task_id !== undefined)).toBe(true)
    expect(payloads.some((p: Record<string, any>) => p.transition === 'resume' && p.resolution?.by === 'a2a-client')).toBe(true)
    expect(replay.checkpoints).toEqual([expect.objectContaining({ checkpoint_id: checkpoint?.checkpoint_id, resolution: { approved: true, by: 'a2a-client' }, attested: true })])
    // delegate, the A2A task id, the server's "checking" status, its input request, the resume, the artifact
    expect(replay.transitions.map((t: { kind: string }) => t.kind)).toEqual(['delegate', 'progress', 'progress', 'block', 'resume', 'complete'])
  })
})
