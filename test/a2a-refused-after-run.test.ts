/**
 * A SendMessage the SDK refuses after the handler started its mesh run (a
 * check of the SDK's own that comes after the delegation: push-notification
 * config storage, a future validation) leaves no run behind with no task to
 * show it: the run is canceled. Before, it ran on (or stayed blocked) with
 * nothing on the A2A side that could reach it. The SDK's refusal is made here
 * by its handler's sendMessage throwing after the handler's own prepare.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { ClientFactory } from '@a2a-js/sdk/client'
import { A2aServer } from '../src/a2a/server.ts'
import { REFUSED_BEFORE_KEPT } from '../src/a2a/task-runs.ts'
import { silentLogger } from '../src/logger.ts'
import type { MeshNode } from '../src/node.ts'
import type { Run } from '../src/runlog/types.ts'
import { startMesh, stopAll, until } from './helpers.ts'
import { handlerOf, send } from './fixtures/a2a-messages.ts'

const WAIT = { capability_id: 'cap:wait', version: '1.0.0' }

describe('A2A inbound: a SendMessage the SDK refuses after its run started', () => {
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

  it('cancels the run no task shows, and the send fails with the SDK\'s error', async () => {
    const a2a = await A2aServer.start(gateway, { port: 0, logger: silentLogger() })
    try {
      const client = await new ClientFactory().createFromUrl(a2a.clientUrl(worker.agentId))
      const handler = await handlerOf(a2a, worker.agentId)
      const inner = (handler as unknown as { inner: { sendMessage: (...args: unknown[]) => Promise<unknown> } }).inner
      const sdkSend = inner.sendMessage.bind(inner)
      const delegated = Promise.withResolvers<Run>()
      const delegate = gateway.delegate.bind(gateway)
      gateway.delegate = async (req, opts) => {
        const run = await delegate(req, opts)
        delegated.resolve(run)
        return run
      }
      inner.sendMessage = async () => { throw new Error('refused by the SDK after the run started') }
      try {
        const err = await client.sendMessage(send(WAIT, {}, 'ctx-refused-after-run')).then(() => undefined, (e: unknown) => e as Error)
        expect(err).toBeInstanceOf(Error)
        const run = await delegated.promise
        await until(async () => (await gateway.getRun(run.run_id)).state === 'failed', 'the run no task shows to be canceled')
        const after = await gateway.getRun(run.run_id)
        expect(after.failure).toMatchObject({ code: 'CANCELED' })
        expect(after.failure?.message).toContain(REFUSED_BEFORE_KEPT)
      } finally {
        inner.sendMessage = sdkSend
        gateway.delegate = delegate
      }
    } finally {
      await a2a.close()
    }
  })
})
