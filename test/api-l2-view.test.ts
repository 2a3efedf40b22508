/**
 * Issue #12: nothing above the transport sees an endpoint or multiaddr. The
 * local API hands L2 callers cards without their `endpoint` (`/p2p/<id>`);
 * an operator asks for it with `addresses=true`. Every JSON answer of a real
 * delegation's life goes through the simulation's contract check
 * (transportLeaks), which finds nothing by default and catches the
 * addresses when an operator asks for them.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { ApiClient } from '../src/api/client.ts'
import { newToken } from '../src/api/files.ts'
import { startApiServer, type ApiServer } from '../src/api/server.ts'
import type { MeshNode } from '../src/node.ts'
import type { Run } from '../src/runlog/types.ts'
import { transportLeaks } from '../src/sim/contracts.ts'
import { nextEvent, startMesh, stopAll, until } from './helpers.ts'

const CAP = { capability_id: 'cap:l2-view', version: '1.0.0' }
const TRANSPORT = /\/(ip4|ip6|dns4|dns6|dns|tcp|udp|memory|p2p|p2p-circuit|ws|wss)\//

describe('the local API hands L2 callers no transport addresses', () => {
  let nodes: MeshNode[] = []
  let api: ApiServer
  let client: ApiClient

  beforeAll(async () => {
    nodes = await startMesh(2)
    const [a, b] = nodes as [MeshNode, MeshNode]
    b.runs.handle(CAP, async (ctx) => ({ echoed: ctx.input }))
    await b.publishCard({ name: 'l2-view', capabilities: [CAP] })
    await a.publishCard({ name: 'self', capabilities: [] })
    const token = newToken()
    api = await startApiServer(a, { token, port: 0, checkResponses: true })
    client = new ApiClient(api.url, token)
  })
  afterAll(async () => {
    await api?.close()
    await stopAll(nodes)
  })

  it('card and discover answers carry no endpoint unless addresses=true', async () => {
    const own = await client.call<{ card: Record<string, unknown> }>('GET', '/v1/card')
    expect(own.card.endpoint).toBeUndefined()
    expect(TRANSPORT.test(JSON.stringify(own))).toBe(false)
    // the card's announcement spreads through the DHT: look until it is found
    let found = { cards: [] as Array<Record<string, unknown>> }
    await until(async () => {
      found = await client.call<{ cards: Array<Record<string, unknown>> }>('GET', '/v1/discover', undefined, { capability: 'cap:l2-view@1.0.0', fresh: true })
      return found.cards.length === 1
    }, 'the card to be discovered')
    expect(TRANSPORT.test(JSON.stringify(found))).toBe(false)
    const withAddresses = await client.call<{ cards: Array<Record<string, unknown>> }>('GET', '/v1/discover', undefined, { capability: 'cap:l2-view@1.0.0', addresses: true })
    expect(withAddresses.cards[0]?.endpoint).toMatch(/^\/p2p\//)
    const ownWith = await client.call<{ card: Record<string, unknown> }>('GET', '/v1/card', undefined, { addresses: true })
    expect(ownWith.card.endpoint).toMatch(/^\/p2p\//)
  })

  it('node, card, discover, delegate, run, list and replay answers name no transport; asked for, addresses are caught', async () => {
    const [, b] = nodes as [MeshNode, MeshNode]
    const answers: Record<string, unknown> = {}
    answers.node = await client.call('GET', '/v1/node')
    answers.card = await client.call('GET', '/v1/card')
    answers.discover = await client.call('GET', '/v1/discover', undefined, { capability: 'cap:l2-view@1.0.0' })
    const done = nextEvent(b, e => e.type === 'run.completed' && e.correlation_id === 'task-l2-view')
    const created = await client.call<{ run: Run }>('POST', '/v1/delegate', { to_agent: b.agentId, task_id: 'task-l2-view', capability: CAP, input: { n: 1 } })
    answers.delegate = created
    await done
    answers.getRun = await client.call('GET', `/v1/runs/${encodeURIComponent(created.run.run_id)}`)
    answers.listRuns = await client.call('GET', '/v1/runs')
    answers.replay = await client.call('GET', '/v1/events/task-l2-view/replay', undefined, { participant: b.agentId, timeout_ms: 5000 })
    for (const [name, body] of Object.entries(answers)) expect(transportLeaks(body, name), name).toEqual([])
    expect((answers.node as Record<string, unknown>).addresses).toBeUndefined()
    // an operator's view, on request
    const node = await client.call<{ addresses: string[] }>('GET', '/v1/node', undefined, { addresses: true })
    expect(node.addresses).toEqual(nodes[0]!.addresses)
    expect(transportLeaks(node, 'node')).toContain('node.addresses: a transport field')
    const card = await client.call('GET', '/v1/card', undefined, { addresses: true })
    expect(transportLeaks(card, 'card')).toContain('card.card.endpoint: a transport field')
  })
})
