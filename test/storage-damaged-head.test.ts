/**
 * A run whose last event was damaged on disk (a torn write) is not stuck
 * running after a restart: recovery ends it (EXECUTOR_RESTARTED) in its record
 * alone, since no event can chain to the damaged one and one signed anew at
 * its seq would fork the log, and its delegator's slot is freed. Reading the
 * damaged event is a typed error (INTERNAL, corrupt_record).
 */
import { generateKeyPair } from '@libp2p/crypto/keys'
import { MemoryDatastore } from 'datastore-core'
import { afterAll, describe, expect, it } from 'vitest'
import type { MeshNode } from '../src/node.ts'
import { EventLog } from '../src/runlog/event-log.ts'
import { servingNode, startLoneNodes, stopAll, until } from './helpers.ts'

const WORK = { capability_id: 'cap:storage-head', version: '1.0.0' }
const enc = new TextEncoder()

describe('storage: a damaged event at restart', () => {
  const nodes: MeshNode[] = []
  afterAll(async () => { await stopAll(nodes) })

  for (const damaged of ['the only event', 'the last of two'] as const) {
    it(`an interrupted run whose last event does not parse ends after the restart (${damaged})`, async () => {
      const ds = new MemoryDatastore()
      const key = await generateKeyPair('Ed25519')
      const started = Promise.withResolvers<void>()
      const proceed = Promise.withResolvers<void>()
      let E = await servingNode(WORK, { datastore: ds, privateKey: key }, async (ctx) => {
        if (damaged === 'the last of two') await ctx.progress({ step: 1 })
        started.resolve()
        await proceed.promise
        return {}
      })
      const [D] = await startLoneNodes(1) as [MeshNode]
      nodes.push(D)
      await D.join(E.addresses)
      const run = await D.delegate({ to_agent: E.agentId, task_id: 'task-head', capability: WORK, input: {} })
      await started.promise
      const seq = damaged === 'the only event' ? 1 : 2
      const log = new EventLog(ds)
      await until(async () => (await log.head(run.run_id))?.seq === seq, 'the events to be stored')
      await E.stop()
      proceed.resolve()
      await ds.put(EventLog.eventKey(run.run_id, seq), enc.encode('{"run_id":"x","se'))
      E = await servingNode(WORK, { datastore: ds, privateKey: key })
      nodes.push(E)
      await until(async () => (await E.runs.getRun(run.run_id)).state !== 'running', 'the interrupted run to end')
      const ended = await E.runs.getRun(run.run_id)
      expect(ended.state).toBe('failed')
      expect(ended.failure?.code).toBe('EXECUTOR_RESTARTED')
      expect(E.runs.slots.heldBy(D.agentId)).toBe(0)
      expect(ended.last_seq).toBe(seq)
      // nothing was signed past (or at) the damaged seq, and the damaged event is a typed error, not a SyntaxError
      expect(await log.get(run.run_id, seq + 1)).toBeUndefined()
      await expect(log.head(run.run_id)).rejects.toMatchObject({ code: 'INTERNAL', details: { reason: 'corrupt_record' } })
      if (seq === 2) expect((await log.get(run.run_id, 1))?.type).toBe('run.started')
    }, 40_000)
  }
})
