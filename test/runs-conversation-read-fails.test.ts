/**
 * runHandler reads the run's conversation (contexts.conversation) before the
 * handler starts. A read that failed there (a failing disk, a broken record,
 * a store closing) was an unhandled rejection (Node's default: the process
 * exits), and the run stayed `running` for good, holding its slot, with no
 * handler. Now the run fails (HANDLER_FAILED) and the error is logged.
 * Found by session 45's delegate review.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { MemoryDatastore } from 'datastore-core'
import type { Datastore, Key } from 'interface-datastore'
import type { MeshNode } from '../src/node.ts'
import { startMesh, until } from './helpers.ts'

const REVIEW = { capability_id: 'cap:code-review', version: '2.1.0' }

describe('a conversation read that fails as the handler starts', () => {
  let A: MeshNode, B: MeshNode
  let failContextReads = false
  const unhandled: unknown[] = []
  const onUnhandled = (err: unknown): void => { unhandled.push(err) }
  beforeAll(async () => {
    const inner = new MemoryDatastore()
    const ds = new Proxy(inner, {
      get (target, prop) {
        if (prop === 'get') {
          return async (k: Key, o?: unknown) => {
            if (failContextReads && k.toString().startsWith('/aap/contexts/')) throw Object.assign(new Error('IO error: Input/output error'), { code: 'EIO' })
            return target.get(k, o as never)
          }
        }
        const v: unknown = Reflect.get(target, prop, target)
        return typeof v === 'function' ? (v as (...a: unknown[]) => unknown).bind(target) : v
      }
    }) as unknown as Datastore
    const nodes = await startMesh(2, { nodeOptions: i => i === 1 ? { datastore: ds } : {} })
    ;[A, B] = nodes as [MeshNode, MeshNode]
    B.runs.handle(REVIEW, async () => ({ ok: true }))
    await B.publishCard({ name: 'b', capabilities: [REVIEW] })
    // the read fails from the moment the run is announced (just before its handler starts)
    B.runs.onEvent((e) => { if (e.type === 'run.started' && e.correlation_id === 'task-ctx-read') failContextReads = true })
    process.on('unhandledRejection', onUnhandled)
  })
  afterAll(async () => {
    process.off('unhandledRejection', onUnhandled)
    failContextReads = false
    await Promise.all([A.stop(), B.stop()])
  })

  it('the run ends (failed) and nothing is left unhandled', async () => {
    const run = await A.delegate({ to_agent: B.agentId, task_id: 'task-ctx-read', capability: REVIEW, input: {}, context_id: 'ctx-read' })
    await until(async () => (await B.runs.store.get(run.run_id))?.state !== 'running', 'the run to end', 5000)
    const ended = await B.runs.store.get(run.run_id)
    expect(ended?.state).toBe('failed')
    expect(ended?.failure).toMatchObject({ code: 'HANDLER_FAILED', message: expect.stringMatching(/conversation could not be read/) })
    expect({ unhandled: unhandled.map(e => String(e)), slots: B.runs.slots.size }).toEqual({ unhandled: [], slots: 0 })
  }, 30_000)
})
