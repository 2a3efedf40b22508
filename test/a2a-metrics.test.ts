/**
 * The A2A counters are on a node's metrics page: the inbound gateway's
 * (`aap_a2a_gateway`: watches dropped, save and watch errors, busy tries and
 * give-ups, src/a2a/task-runs.ts) and the outbound bridge's
 * (`aap_a2a_outbound`: status messages cut or refused, src/a2a/outbound.ts).
 * Before, they were kept on the A2A objects only, which no scrape reached.
 * Real nodes, the official SDK client, and a hand-made A2A server on
 * 127.0.0.1 whose status messages no progress event can carry.
 */
import { once } from 'node:events'
import { createServer, type Server } from 'node:http'
import type { AddressInfo } from 'node:net'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { TaskState } from '@a2a-js/sdk'
import { A2aOutbound, mergeDrafts } from '../src/a2a/outbound.ts'
import { NodeMetrics, serveMetrics } from '../src/api/metrics.ts'
import { silentLogger } from '../src/logger.ts'
import { until } from './helpers.ts'
import { APPROVE, startA2aMesh, stopA2aMesh, type A2aMesh } from './fixtures/a2a-mesh.ts'
import { asTask, runIdOf, send } from './fixtures/a2a-messages.ts'
import { a2aCardJson } from './fixtures/a2a-card-json.ts'

/** The value of `metric{what="<what>"}` on the page, undefined when absent. */
function figure (page: string, metric: string, what: string): number | undefined {
  const m = new RegExp(`^${metric}\\{what="${what}"\\} (\\d+)$`, 'm').exec(page)
  return m === null ? undefined : Number(m[1])
}

describe('A2A counters on the metrics page', () => {
  let m: A2aMesh | undefined
  const metrics = new NodeMetrics()
  let served: Awaited<ReturnType<typeof serveMetrics>> | undefined
  let hostile: Server | undefined
  let hostileUrl = ''

  async function scrape (): Promise<string> {
    const res = await fetch((served as { url: string }).url)
    expect(res.status).toBe(200)
    return await res.text()
  }

  beforeAll(async () => {
    // one watch of a task waiting for input at most: a second task drops the first one's
    m = await startA2aMesh({ server: { maxInputWatches: 1 } })
    metrics.attach(m.gateway)
    served = await serveMetrics(metrics, '127.0.0.1', 0)
    // an A2A agent that cannot stream: its task works with a status message past what a progress event carries, then completes
    hostile = createServer((req, res) => {
      let body = ''
      req.on('data', (c: Buffer) => { body += c.toString() })
      req.on('end', () => {
        res.writeHead(200, { 'content-type': 'application/json' })
        if (req.url?.endsWith('agent-card.json') === true) {
          res.end(JSON.stringify(a2aCardJson({ name: 'wordy', skill: 'wordy', url: hostileUrl })))
          return
        }
        const rpc = JSON.parse(body) as { id: unknown, method: string }
        const working = rpc.method === 'SendMessage'
        const status = working
          ? { state: 'TASK_STATE_WORKING', timestamp: new Date().toISOString(), message: { messageId: 'big', role: 'ROLE_AGENT', parts: [{ text: 'x'.repeat(200 * 1024) }] } }
          : { state: 'TASK_STATE_COMPLETED', timestamp: new Date().toISOString() }
        const task = { id: 't1', contextId: 'c', status, artifacts: working ? [] : [{ artifactId: 'r', name: 'r', parts: [{ data: { ok: true } }] }], history: [] }
        // SendMessage answers a task or a message, GetTask the task itself
        res.end(JSON.stringify({ jsonrpc: '2.0', id: rpc.id, result: working ? { task } : task }))
      })
    })
    hostile.listen(0, '127.0.0.1')
    await once(hostile, 'listening')
    hostileUrl = `http://127.0.0.1:${(hostile.address() as AddressInfo).port}`
  }, 60_000)
  afterAll(async () => {
    metrics.detach()
    await served?.close()
    hostile?.closeAllConnections()
    hostile?.close()
    await stopA2aMesh(m)
  })

  it('exports the gateway\'s counters, and a dropped watch moves watches_dropped', async () => {
    const { client, gateway } = m as A2aMesh
    const before = await scrape()
    expect(before).toMatch(/^# HELP aap_a2a_gateway /m)
    expect(before).toMatch(/^# TYPE aap_a2a_gateway gauge$/m)
    for (const what of ['watches_dropped', 'save_errors', 'watch_errors', 'busy_retries', 'busy_gave_up']) {
      expect(figure(before, 'aap_a2a_gateway', what), what).toBeDefined()
    }
    const dropped = figure(before, 'aap_a2a_gateway', 'watches_dropped') as number

    const older = asTask(await client.sendMessage(send(APPROVE, { doc: 'metrics-1' }, 'corr-a2a-metrics-1')))
    const newer = asTask(await client.sendMessage(send(APPROVE, { doc: 'metrics-2' }, 'corr-a2a-metrics-2')))
    expect(newer.status?.state).toBe(TaskState.TASK_STATE_INPUT_REQUIRED)
    expect(figure(await scrape(), 'aap_a2a_gateway', 'watches_dropped')).toBe(dropped + 1)
    await gateway.cancel(runIdOf(older), 'cleanup')
    await gateway.cancel(runIdOf(newer), 'cleanup')
  }, 60_000)

  it('exports the bridge\'s counters, and a status message cut to fit moves progress_cut', async () => {
    const { gateway, worker } = m as A2aMesh
    expect(await scrape()).not.toMatch(/^aap_a2a_outbound\{/m)
    const out = new A2aOutbound(gateway, silentLogger(), { progress: { minIntervalMs: 0 } })
    const agent = await out.add(hostileUrl)
    const page = await scrape()
    expect(page).toMatch(/^# HELP aap_a2a_outbound /m)
    expect(figure(page, 'aap_a2a_outbound', 'progress_cut')).toBe(0)
    expect(figure(page, 'aap_a2a_outbound', 'progress_refused')).toBe(0)

    await gateway.publishCard(mergeDrafts({ name: 'gateway', capabilities: [] }, [agent.draft])!)
    const run = await worker.delegate({ to_agent: gateway.agentId, task_id: 'a2a-metrics-wordy', capability: agent.draft.capabilities![0]!, input: { text: 'go' } })
    await until(async () => ['completed', 'failed'].includes((await gateway.runs.store.get(run.run_id))?.state ?? ''), 'the bridged run to end', 30_000)
    const ended = await gateway.runs.store.get(run.run_id)
    expect(ended?.state, ended?.failure?.message).toBe('completed')
    expect(out.stats.progressCut).toBe(1)
    expect(figure(await scrape(), 'aap_a2a_outbound', 'progress_cut')).toBe(1)
  }, 60_000)
})
