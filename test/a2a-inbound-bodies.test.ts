/**
 * Request bodies the inbound server does not take, and hostile inputs: each
 * gets a typed error and the node serves on. A body past A2A_BODY_MAX_BYTES
 * (declared so, or sent without a length and cut off by the parser) and one
 * in a charset the parser does not take are the client's fault: HTTP 413 or
 * 415 with a JSON-RPC envelope (-32600) on the JSON-RPC binding, the SDK's
 * REST error body on the HTTP+JSON one; never a 500 "internal error".
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { TaskState } from '@a2a-js/sdk'
import { ClientFactory } from '@a2a-js/sdk/client'
import type { MeshNode } from '../src/node.ts'
import { silentLogger } from '../src/logger.ts'
import { A2aServer } from '../src/a2a/server.ts'
import { A2A_BODY_MAX_BYTES, PART_DELEGATE, PART_RESUME } from '../src/a2a/constants.ts'
import { startMesh, stopAll } from './helpers.ts'
import { asTask, send } from './fixtures/a2a-messages.ts'

const ECHO = { capability_id: 'cap:echo', version: '1.0.0' }
const APPROVE = { capability_id: 'cap:approve', version: '1.0.0' }

interface Answer { status: number, body: any }

describe('A2A inbound: refused bodies and hostile inputs', () => {
  let nodes: MeshNode[] = []
  let a2a: A2aServer
  let n = 0
  const base = (): string => a2a.agentUrl(nodes[0]!.agentId)
  /** POST a raw body; `chunked` sends it as a stream, with no Content-Length. */
  const post = async (path: string, body: string, opts: { type?: string, chunked?: boolean } = {}): Promise<Answer> => {
    const bytes = new TextEncoder().encode(body)
    const stream = new ReadableStream<Uint8Array>({
      start (c) {
        for (let i = 0; i < bytes.length; i += 16 * 1024) c.enqueue(bytes.subarray(i, i + 16 * 1024))
        c.close()
      }
    })
    const res = await fetch(base() + path, {
      method: 'POST',
      headers: { 'content-type': opts.type ?? 'application/json', 'A2A-Version': '1.0' },
      body: opts.chunked === true ? stream : body,
      ...(opts.chunked === true ? { duplex: 'half' } : {}),
      signal: AbortSignal.timeout(20_000)
    } as RequestInit)
    const text = await res.text()
    let parsed: unknown
    try { parsed = JSON.parse(text) } catch (err) { parsed = { unparsed: text.slice(0, 200), err: (err as Error).message } }
    return { status: res.status, body: parsed }
  }
  const rpc = async (method: string, params: unknown): Promise<Answer> => await post('/jsonrpc', JSON.stringify({ jsonrpc: '2.0', id: ++n, method, params }))
  const msg = (parts: unknown[], ids: { taskId?: string, contextId?: string } = {}): unknown => ({ message: { messageId: crypto.randomUUID(), taskId: ids.taskId ?? '', contextId: ids.contextId ?? '', role: 'ROLE_USER', parts } })
  const over = (): Record<string, unknown> => ({ messageId: 'm-big', taskId: '', contextId: 'ctx-bodies-big', role: 'ROLE_USER', parts: [{ data: { type: PART_DELEGATE, capability: ECHO, input: { s: 'x'.repeat(2 * A2A_BODY_MAX_BYTES) } } }] })

  beforeAll(async () => {
    nodes = await startMesh(2, { transport: 'tcp' })
    const [w, gw] = nodes as [MeshNode, MeshNode]
    w.runs.handle(ECHO, async (ctx) => ({ echo: ctx.input }))
    w.runs.handle(APPROVE, async (ctx) => ({ r: await ctx.block('yes?', `cp-${ctx.run.run_id}`) }))
    await w.publishCard({ name: 'w', capabilities: [ECHO, APPROVE] })
    await gw.publishCard({ name: 'gw', capabilities: [] })
    a2a = await A2aServer.start(gw, { port: 0, logger: silentLogger() })
  })
  afterAll(async () => {
    await a2a?.close()
    await stopAll(nodes)
  })

  it('JSON-RPC: a body past A2A_BODY_MAX_BYTES is 413 with an invalid-request envelope, declared or streamed', async () => {
    const body = JSON.stringify({ jsonrpc: '2.0', id: 1, method: 'SendMessage', params: { message: over() } })
    for (const chunked of [false, true]) {
      const r = await post('/jsonrpc', body, { chunked })
      expect(r.status, JSON.stringify(r.body)).toBe(413)
      expect(r.body.jsonrpc).toBe('2.0')
      expect(r.body.error.code).toBe(-32600)
      expect(r.body.error.message).toContain('A2A_BODY_MAX_BYTES')
    }
  })

  it('JSON-RPC: a charset the parser does not take is 415 with an invalid-request envelope', async () => {
    const r = await post('/jsonrpc', JSON.stringify({ jsonrpc: '2.0', id: 2, method: 'GetTask', params: { id: 'x' } }), { type: 'application/json; charset=latin1' })
    expect(r.status, JSON.stringify(r.body)).toBe(415)
    expect(r.body.error.code).toBe(-32600)
  })

  it('REST: a body past A2A_BODY_MAX_BYTES is 413 with a typed error body, declared or streamed', async () => {
    for (const chunked of [false, true]) {
      const r = await post('/rest/message:send', JSON.stringify({ message: over() }), { chunked })
      expect(r.status, JSON.stringify(r.body)).toBe(413)
      expect(JSON.stringify(r.body)).toContain('A2A_BODY_MAX_BYTES')
    }
    const fine = await rpc('SendMessage', msg([{ data: { type: PART_DELEGATE, capability: ECHO, input: { after: 'bodies' } } }], { contextId: 'ctx-bodies-after' }))
    expect(fine.body.result?.task?.status?.state, JSON.stringify(fine.body).slice(0, 300)).toBe('TASK_STATE_COMPLETED')
  })

  it('a resume naming another task\'s checkpoint is a transition error, and the task stays resumable', async () => {
    const client = await new ClientFactory().createFromUrl(a2a.clientUrl(nodes[0]!.agentId))
    const a = asTask(await client.sendMessage(send(APPROVE, {}, 'ctx-bodies-a')))
    const b = asTask(await client.sendMessage(send(APPROVE, {}, 'ctx-bodies-b')))
    expect(b.status?.state).toBe(TaskState.TASK_STATE_INPUT_REQUIRED)
    const cpB = (b.status?.message?.parts[0]?.content as { value: { checkpoint_id: string } }).value.checkpoint_id
    const r = await rpc('SendMessage', msg([{ data: { type: PART_RESUME, resolution: { ok: true }, checkpoint_id: cpB } }], { taskId: a.id }))
    expect(r.body.error?.code, JSON.stringify(r.body)).toBe(-32002)
    const bad = await rpc('SendMessage', msg([{ data: { type: PART_RESUME, resolution: { ok: true }, checkpoint_id: 42 } }], { taskId: a.id }))
    expect(bad.body.error?.code, JSON.stringify(bad.body)).toBe(-32602)
    const ok = await rpc('SendMessage', msg([{ data: { type: PART_RESUME, resolution: { ok: true } } }], { taskId: a.id }))
    expect(ok.body.result?.task?.status?.state, JSON.stringify(ok.body)).toBe('TASK_STATE_COMPLETED')
    await client.cancelTask({ tenant: '', id: b.id, metadata: undefined })
  })

  it('a deeply nested input is refused as malformed, and the node serves on', async () => {
    const deep = '{"a":'.repeat(3000) + '1' + '}'.repeat(3000)
    const raw = (id: number, ctx: string, input: string): string => `{"jsonrpc":"2.0","id":${id},"method":"SendMessage","params":{"message":{"messageId":"m-${ctx}","taskId":"","contextId":"${ctx}","role":"ROLE_USER","parts":[{"data":{"type":"${PART_DELEGATE}","capability":{"capability_id":"cap:echo","version":"1.0.0"},"input":{"x":${input}}}}]}}}`
    const r = await post('/jsonrpc', raw(6, 'ctx-bodies-deep', deep))
    expect(r.status).toBe(200)
    expect(r.body.error?.code, JSON.stringify(r.body).slice(0, 300)).toBe(-32602)
    const arr = '['.repeat(40_000) + '1' + ']'.repeat(40_000)
    const r2 = await post('/jsonrpc', raw(7, 'ctx-bodies-deep2', arr))
    expect(r2.status, JSON.stringify(r2.body).slice(0, 300)).toBe(200)
    expect(r2.body.error?.code).toBe(-32602)
    const fine = await rpc('SendMessage', msg([{ data: { type: PART_DELEGATE, capability: ECHO, input: { y: 1 } } }], { contextId: 'ctx-bodies-fine' }))
    expect(fine.body.result?.task?.status?.state, JSON.stringify(fine.body).slice(0, 300)).toBe('TASK_STATE_COMPLETED')
  })

  it('unknown tasks and bad list or send params get typed errors', async () => {
    expect((await rpc('SendMessage', msg([{ text: 'hi' }], { taskId: 'no-such-task' }))).body.error?.code).toBe(-32001)
    expect((await rpc('GetTask', { id: 'x'.repeat(5000) })).body.error?.code).toBe(-32001)
    expect((await rpc('ListTasks', { pageToken: '-1' })).body.error?.code).toBe(-32602)
    expect((await rpc('ListTasks', { pageSize: 0 })).status).toBe(200)
    expect((await rpc('CancelTask', { id: '' })).body.error?.code).not.toBe(-32603)
    expect((await rpc('SendMessage', msg([{ text: 'hi' }], { contextId: 'bad context id with spaces' }))).body.error?.code).toBe(-32602)
  })
})
