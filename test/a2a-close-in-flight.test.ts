/**
 * A SendMessage the A2A server's close() catches after its mesh run started
 * and before its task was kept leaves no run behind with no task: the send
 * fails (DELEGATION_REFUSED, reason closing) and the run is canceled, and
 * close() resolves once it is.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { ClientFactory } from '@a2a-js/sdk/client'
import { A2aServer } from '../src/a2a/server.ts'
import { silentLogger } from '../src/logger.ts'
import type { MeshNode } from '../src/node.ts'
import type { Run } from '../src/runlog/types.ts'
import { startMesh, stopAll, until } from './helpers.ts'
import { handlerOf, send } from './fixtures/a2a-messages.ts'

const WAIT = { capability_id: 'cap:wait', version: '1.0.0' }

describe('A2A inbound: close() with a SendMessage in flight', () => {
  let nodes: MeshNode[] = []
  let worker: MeshNode, gateway: MeshNode
  const started = new Set<string>()

  beforeAll(async () => {
    nodes = await startMesh(2, { transport: 'tcp' })
    ;[worker, gateway] = nodes as [MeshNode, MeshNode]
    worker.runs.handle(WAIT, async (ctx) => {
      started.add(ctx.run.run_id)
      await new Promise<void>(resolve => { ctx.signal.addEventListener('abort', () => { resolve() }, { once: true }) })
      return {}
    })
    await worker.publishCard({ name: 'worker', capabilities: [WAIT] })
  })
  afterAll(async () => {
    await stopAll(nodes)
  })

  it('the run of a task not kept yet is canceled, and the send fails', async () => {
    const a2a = await A2aServer.start(gateway, { port: 0, logger: silentLogger() })
    const client = await new ClientFactory().createFromUrl(a2a.clientUrl(worker.agentId))
    // the delegation answers, and the server closes before the task is made from it
    const delegate = gateway.delegate.bind(gateway)
    const delegated = Promise.withResolvers<Run>()
    const gate = Promise.withResolvers<void>()
    gateway.delegate = async (req, opts) => {
      const run = await delegate(req, opts)
      delegated.resolve(run)
      await gate.promise
      return run
    }
    try {
      const sent = client.sendMessage(send(WAIT, {}, 'ctx-close-in-flight')).then(() => undefined, (err: unknown) => err as Error)
      const run = await delegated.promise
      await until(() => started.has(run.run_id), 'the run to start at its executor')
      const handler = await handlerOf(a2a, worker.agentId)
      const closing = a2a.close()
      gate.resolve()
      await closing
      // canceled by the time close() resolves
      const after = await gateway.getRun(run.run_id)
      expect(after.state).toBe('failed')
      expect(after.failure).toMatchObject({ code: 'CANCELED' })
      expect(after.failure?.message).toContain('closed before it kept')
      expect(handler.unkeptAtClose).toBe(1)
      // the send fails (with DELEGATION_REFUSED, reason closing, unless its connection was closed first)
      const err = await sent
      expect(err).toBeInstanceOf(Error)
    } finally {
      gateway.delegate = delegate
      gate.resolve()
    }
  })
})
