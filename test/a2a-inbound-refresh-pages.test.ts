/**
 * ListTasks pages are newest status first. A page's unwatched task that is
 * read again gets a newer status, which would move it to the front: were the
 * page listed anew, it would leave out the task it refreshed and show one of
 * an earlier page twice. Walking the pages shows every task once.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { TaskState } from '@a2a-js/sdk'
import type { Task } from '@a2a-js/sdk'
import type { Client } from '@a2a-js/sdk/client'
import type { MeshNode } from '../src/node.ts'
import { A2aServer } from '../src/a2a/server.ts'
import { until } from './helpers.ts'
import { APPROVE, startA2aMesh, stopA2aMesh, type A2aMesh } from './fixtures/a2a-mesh.ts'
import { asTask, handlerOf, runIdOf, send } from './fixtures/a2a-messages.ts'


describe('A2A inbound: ListTasks pages with a task read again', () => {
  let m: A2aMesh | undefined
  let worker: MeshNode, gateway: MeshNode
  let a2a: A2aServer
  let client: Client

  beforeAll(async () => {
    m = await startA2aMesh({ server: { maxInputWatches: 1 } })
    ;({ worker, gateway, a2a, client } = m)
  })
  afterAll(async () => { await stopA2aMesh(m) })

  it('walking the pages of ListTasks shows every task once', async () => {
    const tasks: Task[] = []
    for (const c of ['corr-page-1', 'corr-page-2', 'corr-page-3']) {
      const t = asTask(await client.sendMessage(send(APPROVE, { c }, c)))
      tasks.push(t)
      // the next task's status is a millisecond newer at least, so the pages' order is known: t3, t2, t1
      const stamp = Date.parse(t.status?.timestamp ?? '')
      await until(() => Date.now() > stamp, 'the clock to pass the task\'s status time')
    }
    const [t1, t2, t3] = tasks as [Task, Task, Task]
    const handler = await handlerOf(a2a, worker.agentId)
    expect(handler.runs.get(t3.id)).toBeDefined()
    expect(handler.runs.get(t2.id)).toBeUndefined()
    // t2's run ends outside A2A while nothing watches it
    await gateway.cancel(runIdOf(t2), 'canceled while unwatched')
    const list = async (pageToken: string) => await client.listTasks({ tenant: '', contextId: '', status: TaskState.TASK_STATE_UNSPECIFIED, pageSize: 1, pageToken, historyLength: undefined, statusTimestampAfter: undefined, includeArtifacts: false })
    const seen: string[] = []
    let token = ''
    for (let i = 0; i < 3; i++) {
      const page = await list(token)
      seen.push(...page.tasks.map(t => t.id))
      token = page.nextPageToken
    }
    expect(seen).toEqual([t3.id, t2.id, t1.id])
    // the page that read t2 again showed it as it now stands
    expect((await client.getTask({ tenant: '', id: t2.id })).status?.state).toBe(TaskState.TASK_STATE_CANCELED)
    expect((await handlerOf(a2a, worker.agentId)).refresher.stats.updated).toBeGreaterThan(0)
  })
})
