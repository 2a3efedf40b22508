/** The pure A2A <-> mesh mappings and the bounded task store. */
import { describe, expect, it } from 'vitest'
import { Role, TaskState } from '@a2a-js/sdk'
import type { AgentCard, Message, Part, Task } from '@a2a-js/sdk'
import { A2AError } from '@a2a-js/sdk/errors'
import { AapError, InvalidRequestError, RunNotFoundError } from '../src/errors.ts'
import { A2A_TASK_HISTORY_MAX, PART_CHECKPOINT, PART_DELEGATE, PART_FAILURE, PART_OUTPUT, PART_PROGRESS, PART_RESUME } from '../src/a2a/constants.ts'
import {
  a2aToMeshDraft, dataPart, eventToUpdates, meshToA2aCard, outcomeOf, readDelegate, readResume, runToTask, runToUpdates, skillCapability, taskShowsRun,
  taskStateOf, textPart, toA2aError
} from '../src/a2a/mapping.ts'
import type { Run } from '../src/runlog/types.ts'
import { mergeDrafts } from '../src/a2a/outbound.ts'
import { BoundedTaskStore } from '../src/a2a/task-store.ts'
import type { ServerCallContext } from '@a2a-js/sdk/server'

const CAP = { capability_id: 'cap:a', version: '1.0.0' }
const CAP2 = { capability_id: 'cap:b', version: '2.0.0' }
const ctx = {} as ServerCallContext

function msg (parts: Part[]): Message {
  return { messageId: 'm', contextId: '', taskId: '', role: Role.ROLE_USER, parts, metadata: undefined, extensions: [], referenceTaskIds: [] }
}

describe('a2a mapping', () => {
  it('reads a delegation: the typed part, any DataPart or text for a one-capability agent, else a clear refusal', () => {
    expect(readDelegate(msg([dataPart(PART_DELEGATE, { capability: CAP2, input: { x: 1 } })]), [CAP, CAP2])).toEqual({ capability: CAP2, input: { x: 1 } })
    expect(readDelegate(msg([dataPart(PART_DELEGATE, { input: { x: 1 } })]), [CAP])).toEqual({ capability: CAP, input: { x: 1 } })
    expect(readDelegate(msg([dataPart('shop.search.request', { q: 1 })]), [CAP])).toEqual({ capability: CAP, input: { type: 'shop.search.request', q: 1 } })
    expect(readDelegate(msg([textPart('hello')]), [CAP])).toEqual({ capability: CAP, input: { text: 'hello' } })
    expect(() => readDelegate(msg([textPart('hello')]), [CAP, CAP2])).toThrow(InvalidRequestError)
    expect(() => readDelegate(msg([dataPart(PART_DELEGATE, { capability: 'cap:a' })]), [CAP])).toThrow(/capability_id/)
    expect(() => readDelegate(msg([dataPart(PART_DELEGATE, { capability: CAP, input: [1] })]), [CAP])).toThrow(/input/)
    expect(() => readDelegate(msg([]), [CAP])).toThrow(/neither/)
  })

  it('reads a resolution', () => {
    expect(readResume(msg([dataPart(PART_RESUME, { resolution: { ok: true } })]))).toEqual({ ok: true })
    expect(readResume(msg([textPart('yes')]))).toEqual({ text: 'yes' })
    expect(() => readResume(msg([dataPart(PART_RESUME, { resolution: 'yes' })]))).toThrow(InvalidRequestError)
    expect(() => readResume(msg([]))).toThrow(InvalidRequestError)
  })

  it('maps run states and events to task states and updates', () => {
    expect(taskStateOf({ state: 'running', failure: null })).toBe(TaskState.TASK_STATE_WORKING)
    expect(taskStateOf({ state: 'blocked', failure: null })).toBe(TaskState.TASK_STATE_INPUT_REQUIRED)
    expect(taskStateOf({ state: 'completed', failure: null })).toBe(TaskState.TASK_STATE_COMPLETED)
    expect(taskStateOf({ state: 'failed', failure: { code: 'CANCELED', message: '' } })).toBe(TaskState.TASK_STATE_CANCELED)
    expect(taskStateOf({ state: 'failed', failure: { code: 'HANDLER_FAILED', message: '' } })).toBe(TaskState.TASK_STATE_FAILED)
    const ids = { taskId: 't', contextId: 'c' }
    const base = { run_id: 'r', correlation_id: 'c', at: '2026-01-01T00:00:00.000Z', seq: 2, prev: null, executor: 'x', signature: '' }
    const done = eventToUpdates({ ...base, type: 'run.completed', payload: { output: { y: 1 } } }, ids)
    expect(done.map(u => u.kind)).toEqual(['artifactUpdate', 'statusUpdate'])
    const handoff = eventToUpdates({ ...base, type: 'run.completed', payload: { transition: 'handoff', handoff_to: { run_id: 'r2', agent_id: 'b' } } }, ids)
    expect(handoff[0]?.kind === 'statusUpdate' && handoff[0].data.status?.state).toBe(TaskState.TASK_STATE_WORKING)
    const progress = eventToUpdates({ ...base, type: 'run.progress', payload: { p: 1 } }, ids)[0]
    expect(progress?.kind === 'statusUpdate' && progress.data.status?.message?.parts[0]?.content).toEqual({ $case: 'data', value: { type: PART_PROGRESS, payload: { p: 1 } } })
  })

  it('a run read again gives the updates its events would have, and a task showing it needs none', () => {
    const ids = { taskId: 't', contextId: 'c' }
    const at = '2026-01-01T00:00:00.000Z'
    const run: Run = {
      run_id: 'r', agent_id: 'a', correlation_id: 'c', state: 'blocked', created_at: at, updated_at: at, capability: CAP, delegator: 'd', authorized: [],
      parent_run: null, handoff_from: null, handoff_to: null, checkpoint_id: 'cp-2', block_reason: 'second look', output: null, failure: null, last_seq: 4
    }
    const base = { run_id: 'r', correlation_id: 'c', at, seq: 4, prev: null, executor: 'a', signature: '' }
    const content = (u: ReturnType<typeof runToUpdates>[number] | undefined): unknown =>
      u?.kind === 'statusUpdate' ? [u.data.status?.state, u.data.status?.message?.parts[0]?.content] : u?.kind === 'artifactUpdate' ? u.data.artifact : undefined
    const same = (r: Run, e: Parameters<typeof eventToUpdates>[0]): void => {
      expect(runToUpdates(r, ids).map(content)).toEqual(eventToUpdates(e, ids).map(content))
    }
    same(run, { ...base, type: 'run.blocked', payload: { checkpoint_id: 'cp-2', reason: 'second look' } })
    same({ ...run, state: 'completed', output: { y: 1 } }, { ...base, type: 'run.completed', payload: { output: { y: 1 } } })
    same({ ...run, state: 'failed', failure: { code: 'CANCELED', message: 'no' } }, { ...base, type: 'run.failed', payload: { failure: { code: 'CANCELED', message: 'no' } } })
    same({ ...run, state: 'failed', failure: { code: 'HANDLER_FAILED', message: 'x' } }, { ...base, type: 'run.failed', payload: { failure: { code: 'HANDLER_FAILED', message: 'x' } } })
    expect(runToUpdates({ ...run, state: 'running' }, ids).map(content)).toEqual([[TaskState.TASK_STATE_WORKING, undefined]])
    const handedOff = runToUpdates({ ...run, state: 'completed', handoff_to: { run_id: 'r2', agent_id: 'b' } }, ids)
    expect(handedOff.map(u => u.kind === 'statusUpdate' && u.data.status?.state)).toEqual([TaskState.TASK_STATE_WORKING])

    const shown = runToTask(run, 't')
    expect(taskShowsRun(shown, run)).toBe(true)
    expect(taskShowsRun(shown, { ...run, checkpoint_id: 'cp-3' })).toBe(false)
    expect(taskShowsRun(shown, { ...run, state: 'running' })).toBe(false)
    expect(taskShowsRun(runToTask({ ...run, state: 'running' }, 't'), { ...run, state: 'running', run_id: 'r2' })).toBe(false)
  })

  it('reads A2A task outcomes for forwarded runs', () => {
    const agentMsg = (parts: Part[]): Message => ({ ...msg(parts), role: Role.ROLE_AGENT })
    expect(outcomeOf('t', { state: TaskState.TASK_STATE_INPUT_REQUIRED, message: agentMsg([textPart('ok?')]), timestamp: undefined }, [], 3))
      .toEqual({ kind: 'blocked', reason: 'ok?', checkpoint_id: 'a2a:t:3' })
    expect(outcomeOf('t', { state: TaskState.TASK_STATE_INPUT_REQUIRED, message: agentMsg([dataPart(PART_CHECKPOINT, { checkpoint_id: 'cp', reason: 'why' })]), timestamp: undefined }, [], 0))
      .toEqual({ kind: 'blocked', reason: 'why', checkpoint_id: 'cp' })
    const art = { artifactId: 'a', name: 'n', description: '', parts: [dataPart(PART_OUTPUT, { output: { z: 1 } })], metadata: undefined, extensions: [] }
    expect(outcomeOf('t', { state: TaskState.TASK_STATE_COMPLETED, message: undefined, timestamp: undefined }, [art], 0)).toEqual({ kind: 'completed', output: { z: 1 } })
    expect(outcomeOf('t', { state: TaskState.TASK_STATE_FAILED, message: agentMsg([dataPart(PART_FAILURE, { message: 'boom' })]), timestamp: undefined }, [], 0))
      .toEqual({ kind: 'failed', message: 'the A2A task failed: boom' })
    expect(outcomeOf('t', { state: TaskState.TASK_STATE_REJECTED, message: undefined, timestamp: undefined }, [], 0).kind).toBe('failed')
    expect(outcomeOf('t', { state: TaskState.TASK_STATE_CANCELED, message: undefined, timestamp: undefined }, [], 0).kind).toBe('canceled')
    expect(outcomeOf('t', { state: TaskState.TASK_STATE_WORKING, message: agentMsg([textPart('busy')]), timestamp: undefined }, [], 0)).toEqual({ kind: 'working', progress: { text: 'busy' } })
  })

  it('cards: mesh -> A2A and A2A -> mesh draft (ids made safe, bounded)', () => {
    const card = meshToA2aCard({ agent_id: 'A', name: 'n', description: '', capabilities: [CAP], endpoint: '', protocol: '', tags: ['t'], seq: 3, issued_at: '', expires_at: '', signature: '' }, 'http://127.0.0.1:1/a2a/agents/A')
    expect(card.supportedInterfaces[0]?.url).toBe('http://127.0.0.1:1/a2a/agents/A/jsonrpc')
    expect(card.skills[0]?.id).toBe('cap:a@1.0.0')
    expect(skillCapability('weird skill!', 'v 1')).toEqual({ capability_id: 'a2a:weird_skill_', version: 'v_1' })
    const a2a = { ...card, name: '', version: '', skills: [] } as AgentCard
    const draft = a2aToMeshDraft(a2a)
    expect(draft.capabilities).toEqual([{ capability_id: 'a2a:default', version: '0' }])
    expect(draft.name).toBe('a2a agent')
    expect(mergeDrafts({ name: 'own', capabilities: [CAP] }, [{ name: 'x', capabilities: [CAP, CAP2], tags: ['a2a'] }])).toEqual({ name: 'own', capabilities: [CAP, CAP2], tags: ['a2a'] })
    expect(mergeDrafts(undefined, [])).toBeUndefined()
  })

  it('AAP errors become A2A errors that keep the code', () => {
    const e = toA2aError(new RunNotFoundError('gone'))
    expect(e).toBeInstanceOf(A2AError)
    expect(e.metadata?.aap_code).toBe('RUN_NOT_FOUND')
    expect(toA2aError(new AapError('DELEGATION_REFUSED', 'busy')).message).toContain('DELEGATION_REFUSED')
    expect(toA2aError(new Error('x')).metadata?.aap_code).toBe('INTERNAL')
  })

  it('the task store is bounded (finished tasks go first), tells of each task it drops, and pages', async () => {
    const dropped: string[] = []
    const store = new BoundedTaskStore(3, (id) => { dropped.push(id) })
    const task = (id: string, state: TaskState, ts: string): Task => ({ id, contextId: 'c', status: { state, message: undefined, timestamp: ts }, artifacts: [], history: [], metadata: undefined })
    await store.save(task('w1', TaskState.TASK_STATE_WORKING, '2026-01-01T00:00:01Z'), ctx)
    await store.save(task('d1', TaskState.TASK_STATE_COMPLETED, '2026-01-01T00:00:02Z'), ctx)
    await store.save(task('w2', TaskState.TASK_STATE_WORKING, '2026-01-01T00:00:03Z'), ctx)
    await store.save(task('w3', TaskState.TASK_STATE_WORKING, '2026-01-01T00:00:04Z'), ctx)
    expect(store.size).toBe(3)
    expect(dropped).toEqual(['d1'])
    expect(await store.load('d1', ctx)).toBeUndefined()
    expect(await store.load('w1', ctx)).toBeDefined()
    const req = { tenant: '', contextId: '', status: TaskState.TASK_STATE_UNSPECIFIED, pageToken: '', statusTimestampAfter: undefined }
    const p1 = await store.list({ ...req, pageSize: 2 }, ctx)
    expect(p1.tasks.map(t => t.id)).toEqual(['w3', 'w2'])
    const p2 = await store.list({ ...req, pageSize: 2, pageToken: p1.nextPageToken }, ctx)
    expect(p2.tasks.map(t => t.id)).toEqual(['w1'])
    expect(p2.nextPageToken).toBe('')
    await expect(store.list({ ...req, pageSize: 1000 }, ctx)).rejects.toThrow(/pageSize/)
    await expect(store.list({ ...req, pageToken: 'x' }, ctx)).rejects.toThrow(/pageToken/)
  })

  it(`the task store keeps the latest ${A2A_TASK_HISTORY_MAX} messages of a task's history`, async () => {
    const store = new BoundedTaskStore(3)
    const message = (i: number): Message => ({ messageId: `m${i}`, contextId: 'c', taskId: 'h1', role: Role.ROLE_AGENT, parts: [], metadata: undefined, extensions: [], referenceTaskIds: [] })
    const history = Array.from({ length: A2A_TASK_HISTORY_MAX + 10 }, (_, i) => message(i))
    await store.save({ id: 'h1', contextId: 'c', status: { state: TaskState.TASK_STATE_WORKING, message: undefined, timestamp: '2026-01-01T00:00:01Z' }, artifacts: [], history, metadata: undefined }, ctx)
    const kept = (await store.load('h1', ctx))!.history
    expect(kept).toHaveLength(A2A_TASK_HISTORY_MAX)
    expect(kept[0]?.messageId).toBe('m10')
    expect(kept.at(-1)?.messageId).toBe(`m${A2A_TASK_HISTORY_MAX + 9}`)
    expect(store.historyTrimmed).toBe(10)
  })
})
