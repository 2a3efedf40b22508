/**
 * A task made by a request that names a tenant (A2A v1 `tenant`, which the
 * SDK's JSON-RPC binding sets on the request's context) has the same bus as
 * any other: the SDK keys its buses by (tenant, owner) and the gateway kept
 * that key only where a request was at hand. A blocked run's watch
 * published the run's later moves on the bus of no tenant and cleaned that
 * one up, so the tenant's subscribers never saw the task end and the bus the
 * SDK kept for the input-required task (with their listeners) stayed for
 * good. The task store keys tasks by id alone, and now the buses are too
 * (src/a2a/task-buses.ts).
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { TaskState, type StreamResponse } from '@a2a-js/sdk'
import { ServerCallContext, type DefaultExecutionEventBusManager } from '@a2a-js/sdk/server'
import { until } from './helpers.ts'
import { APPROVE, startA2aMesh, stopA2aMesh, type A2aMesh } from './fixtures/a2a-mesh.ts'
import { asTask, handlerOf, runIdOf, send, stateOf } from './fixtures/a2a-messages.ts'

const TENANT = 'acme'

describe('A2A inbound: a task of a request with a tenant', () => {
  let m: A2aMesh | undefined
  beforeAll(async () => { m = await startA2aMesh() }, 60_000)
  afterAll(async () => { await stopA2aMesh(m) })

  it('a blocked run canceled outside A2A reaches the tenant\'s subscriber, and its bus goes', async () => {
    const { gateway, worker, client, a2a } = m as A2aMesh
    const blocked = asTask(await client.sendMessage({ ...send(APPROVE, { doc: 'tenant' }, 'corr-tenant-cancel'), tenant: TENANT }))
    expect(blocked.status?.state).toBe(TaskState.TASK_STATE_INPUT_REQUIRED)
    const handler = await handlerOf(a2a, worker.agentId)
    const buses = (handler as unknown as { buses: DefaultExecutionEventBusManager }).buses
    const scope = new ServerCallContext({ tenant: TENANT })
    // the SDK keeps a bus for the input-required task, made under the request's tenant
    expect(buses.getByTaskId(blocked.id, scope)).toBeDefined()

    const stream = client.resubscribeTask({ tenant: TENANT, id: blocked.id })
    const first = await stream.next()
    expect(first.done).toBe(false)
    const seen: StreamResponse[] = first.done === true ? [] : [first.value]
    let ended = false
    const read = (async () => {
      for await (const ev of stream) seen.push(ev)
      ended = true
    })()

    await gateway.cancel(runIdOf(blocked), 'the delegator changed its mind')
    await until(async () => (await client.getTask({ tenant: TENANT, id: blocked.id })).status?.state === TaskState.TASK_STATE_CANCELED, 'the task to show the cancel')
    // before: the watch published on the bus of no tenant, and this stream waited on for ever
    await until(() => ended, 'the tenant\'s subscriber to see the task end', 15_000)
    await read
    expect(seen.map(stateOf).filter(s => s !== undefined).at(-1)).toBe(TaskState.TASK_STATE_CANCELED)
    // before: the bus made under the tenant was left behind, the cleanup made under no tenant
    await until(() => handler.runs.get(blocked.id) === undefined, 'the watch of the canceled task to go')
    expect(buses.getByTaskId(blocked.id, scope)).toBeUndefined()
  }, 60_000)
})
