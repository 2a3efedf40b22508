/**
 * The wire form is A2A v1.0's canonical ProtoJSON, checked against the A2A
 * JSON examples of the spec texts (the JSON objects of
 * shared/spec/a2a-v1-profile-example-auto-agent-protocol.txt, kept as test
 * vectors in test/fixtures/a2a-spec-examples.json so the suite runs in a
 * clone that has only this repository): the SDK's codec
 * round-trips them unchanged, what our mapping emits has their shape
 * (messageId, ROLE_* enum names, parts typed by their member with no `kind`,
 * typed DataParts with a `type` and a `mediaType`), and the inbound server
 * takes the spec's example Message verbatim over raw JSON-RPC `SendMessage`
 * and answers in the same form.
 */
import { readFileSync } from 'node:fs'
import { join } from 'node:path'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { Message, Role, Task } from '@a2a-js/sdk'
import { Part } from '@a2a-js/sdk'
import type { MeshNode } from '../src/node.ts'
import { silentLogger } from '../src/logger.ts'
import { A2aServer } from '../src/a2a/server.ts'
import { A2A_MESH_EXTENSION_URI, MEDIA_TYPES, PART_CHECKPOINT, PART_DELEGATE, PART_OUTPUT } from '../src/a2a/constants.ts'
import { dataPart, delegateMessage, eventToUpdates, message, resumeMessage, runToTask } from '../src/a2a/mapping.ts'
import type { Run } from '../src/runlog/types.ts'
import { startMesh, stopAll } from './helpers.ts'
import { root } from './cli-helpers.ts'

const EXAMPLES = join(root, 'test', 'fixtures', 'a2a-spec-examples.json')
const AAP_TYPE = /^[a-z_]+(\.[a-z_]+){1,2}$/

const examples = JSON.parse(readFileSync(EXAMPLES, 'utf8')) as Array<Record<string, any>>
const messages = examples.filter(e => typeof e.messageId === 'string')
const parts = examples.filter(e => e.messageId === undefined && e.data !== undefined)

/** The shape rules of the spec's canonical form, for a Message in JSON. */
function assertCanonicalMessage (m: Record<string, any>, role: 'ROLE_USER' | 'ROLE_AGENT'): void {
  expect(typeof m.messageId).toBe('string')
  expect(m.messageId.length).toBeGreaterThan(0)
  expect(m.role).toBe(role)
  expect(m.kind).toBeUndefined()
  for (const p of m.parts as Array<Record<string, any>>) {
    expect(p.kind).toBeUndefined()
    const members = ['text', 'data', 'url', 'raw'].filter(k => p[k] !== undefined)
    expect(members).toHaveLength(1)
    if (p.data !== undefined) {
      expect(p.data.type).toMatch(AAP_TYPE)
      expect(typeof p.mediaType).toBe('string')
    }
  }
}

describe('A2A v1.0 ProtoJSON: the spec examples', () => {
  it('finds the spec\'s JSON examples: a DataPart, a request and a response Message', () => {
    expect(parts.length).toBeGreaterThanOrEqual(1)
    expect(messages.map(m => m.role)).toEqual(['ROLE_USER', 'ROLE_AGENT'])
  })

  it('the SDK codec round-trips every example unchanged (its wire form is the spec\'s)', () => {
    for (const m of messages) {
      assertCanonicalMessage(m, m.role)
      expect(Message.toJSON(Message.fromJSON(m))).toEqual(m)
    }
    for (const p of parts) expect(Part.toJSON(Part.fromJSON(p))).toEqual(p)
    expect(Message.fromJSON(messages[0]).role).toBe(Role.ROLE_USER)
  })

  it('what the mapping emits has the examples\' form', () => {
    const cap = { capability_id: 'cap:inventory', version: '1.0.0' }
    const del = Message.toJSON(delegateMessage(cap, { filters: { make: ['Honda'] } }, 'corr-1')) as Record<string, any>
    assertCanonicalMessage(del, 'ROLE_USER')
    expect(del.parts[0]).toEqual({ data: { type: PART_DELEGATE, capability: cap, input: { filters: { make: ['Honda'] } } }, mediaType: MEDIA_TYPES[PART_DELEGATE] })
    expect(del.contextId).toBe('corr-1')
    expect(del.extensions).toEqual([A2A_MESH_EXTENSION_URI])
    assertCanonicalMessage(Message.toJSON(resumeMessage('t1', 'corr-1', { approved: true })) as Record<string, any>, 'ROLE_USER')
    assertCanonicalMessage(Message.toJSON(message(Role.ROLE_AGENT, [dataPart(PART_OUTPUT, { output: {} })])) as Record<string, any>, 'ROLE_AGENT')

    const run: Run = {
      run_id: 'r1', agent_id: 'a1', correlation_id: 'corr-1', state: 'blocked', created_at: '2026-01-01T00:00:00.000Z', updated_at: '2026-01-01T00:00:01.000Z',
      capability: cap, delegator: 'd1', authorized: [], parent_run: null, handoff_from: null, handoff_to: null,
      checkpoint_id: 'cp-1', block_reason: 'needs a yes', output: null, failure: null, last_seq: 2
    }
    const task = Task.toJSON(runToTask(run, 'task-1')) as Record<string, any>
    expect(task.status.state).toBe('TASK_STATE_INPUT_REQUIRED')
    assertCanonicalMessage(task.status.message, 'ROLE_AGENT')
    expect(task.status.message.parts[0].data).toEqual({ type: PART_CHECKPOINT, checkpoint_id: 'cp-1', reason: 'needs a yes' })
    const done = Task.toJSON(runToTask({ ...run, state: 'completed', output: { total: 1 } }, 'task-1')) as Record<string, any>
    expect(done.status.state).toBe('TASK_STATE_COMPLETED')
    expect(done.artifacts[0].parts[0]).toEqual({ data: { type: PART_OUTPUT, output: { total: 1 } }, mediaType: MEDIA_TYPES[PART_OUTPUT] })
    const updates = eventToUpdates({ run_id: 'r1', correlation_id: 'corr-1', type: 'run.failed', payload: { failure: { code: 'CANCELED', message: 'no' } }, at: run.updated_at, seq: 3, prev: null, executor: 'a1', signature: '' }, { taskId: 'task-1', contextId: 'corr-1' })
    expect(updates.map(u => u.kind === 'statusUpdate' ? u.data.status?.state : -1)).toEqual([5])
  })
})

describe('A2A v1.0 ProtoJSON on the wire (raw JSON-RPC to the inbound server)', () => {
  let nodes: MeshNode[] = []
  let a2a: A2aServer
  let worker: MeshNode

  beforeAll(async () => {
    nodes = await startMesh(2)
    worker = nodes[0]!
    const gateway = nodes[1]!
    worker.runs.handle({ capability_id: 'cap:inventory-search', version: '1.0.0' }, async (ctx) => ({
      type: 'inventory.search.response', data: { total: 0, echo: ctx.input }
    }))
    await worker.publishCard({ name: 'dealer', capabilities: [{ capability_id: 'cap:inventory-search', version: '1.0.0' }] })
    a2a = await A2aServer.start(gateway, { port: 0, logger: silentLogger() })
  })
  afterAll(async () => {
    await a2a?.close()
    await stopAll(nodes)
  })

  it('takes the spec\'s example Message verbatim and answers with a Task in the same form', async () => {
    const request = { ...messages[0], messageId: crypto.randomUUID() }
    const res = await fetch(`${a2a.agentUrl(worker.agentId)}/jsonrpc`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', 'A2A-Version': '1.0' },
      body: JSON.stringify({ jsonrpc: '2.0', id: 'req-1', method: 'SendMessage', params: { message: request } }),
      signal: AbortSignal.timeout(10_000)
    })
    const body = await res.json() as Record<string, any>
    expect(body.error).toBeUndefined()
    expect(body).toMatchObject({ jsonrpc: '2.0', id: 'req-1' })
    const task = body.result.task as Record<string, any>
    expect(task.status.state).toBe('TASK_STATE_COMPLETED')
    expect(task.kind).toBeUndefined()
    expect(typeof task.id).toBe('string')
    const history = task.history as Array<Record<string, any>>
    assertCanonicalMessage(history[0]!, 'ROLE_USER')
    expect(history[0]!.parts[0].data).toEqual(messages[0]!.parts[0].data)
    const out = task.artifacts[0].parts[0]
    expect(out.kind).toBeUndefined()
    expect(out.mediaType).toBe(MEDIA_TYPES[PART_OUTPUT])
    // the example's DataPart became the run's input, untouched
    expect(out.data.output).toEqual({ type: 'inventory.search.response', data: { total: 0, echo: messages[0]!.parts[0].data } })
    expect(task.metadata[A2A_MESH_EXTENSION_URI].correlation_id).toBe(task.contextId)
  })
})
