/**
 * `aap-mesh mcp` as the README starts it (bin/aap-mesh.mjs, a child process
 * speaking JSON-RPC lines on stdio) against a real node's local API in this
 * process. Each case was a finding of session 44's review: a client closing
 * stdin ended the server with exit code 13 (an unsettled top-level await),
 * after waiting out a pending events call; a line that was not JSON vanished
 * without a word; one message past the SDK's read buffer ended the server
 * with exit code 0 and no reason.
 */
import { spawn, type ChildProcessWithoutNullStreams } from 'node:child_process'
import { join } from 'node:path'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { newToken } from '../src/api/files.ts'
import { startApiServer, type ApiServer } from '../src/api/server.ts'
import type { MeshNode } from '../src/node.ts'
import { startMesh, stopAll, until } from './helpers.ts'
import { root } from './cli-helpers.ts'

const BIN = join(root, 'bin/aap-mesh.mjs')

interface Child {
  proc: ChildProcessWithoutNullStreams
  replies: Array<{ id?: unknown, result?: unknown, error?: unknown }>
  stderr: () => string
  exit: Promise<{ code: number | null, at: number }>
  send: (msg: unknown) => void
}

function startMcp (api: ApiServer, token: string): Child {
  const proc = spawn(process.execPath, [BIN, 'mcp', '--api-url', api.url, '--token', token], { cwd: root, stdio: ['pipe', 'pipe', 'pipe'] })
  const replies: Child['replies'] = []
  let out = ''
  let err = ''
  proc.stdout.setEncoding('utf8').on('data', (s: string) => {
    out += s
    for (let i = out.indexOf('\n'); i >= 0; i = out.indexOf('\n')) {
      replies.push(JSON.parse(out.slice(0, i)))
      out = out.slice(i + 1)
    }
  })
  proc.stderr.setEncoding('utf8').on('data', (s: string) => { err += s })
  // a child that ended first (the oversized-line test) leaves the rest of a write unsent: EPIPE is expected there
  proc.stdin.on('error', (e: NodeJS.ErrnoException) => { if (e.code !== 'EPIPE') throw e })
  const exit = new Promise<{ code: number | null, at: number }>(resolve => proc.on('exit', code => { resolve({ code, at: Date.now() }) }))
  return { proc, replies, stderr: () => err, exit, send: (msg) => { proc.stdin.write(typeof msg === 'string' ? msg : JSON.stringify(msg) + '\n') } }
}

const INIT = { jsonrpc: '2.0', id: 1, method: 'initialize', params: { protocolVersion: '2025-06-18', capabilities: {}, clientInfo: { name: 'mcp-stdio-test', version: '0' } } }
const INITIALIZED = { jsonrpc: '2.0', method: 'notifications/initialized' }

describe('aap-mesh mcp over stdio', () => {
  let nodes: MeshNode[] = []
  let api: ApiServer
  const token = newToken()
  const children: Child[] = []

  beforeAll(async () => {
    nodes = await startMesh(1, { transport: 'tcp' })
    api = await startApiServer(nodes[0]!, { token, port: 0 })
  })
  afterAll(async () => {
    for (const c of children) if (c.proc.exitCode === null) c.proc.kill('SIGKILL')
    await api?.close()
    await stopAll(nodes)
  })

  const open = async (): Promise<Child> => {
    const c = startMcp(api, token)
    children.push(c)
    c.send(INIT)
    await until(() => c.replies.some(r => r.id === 1), 'initialize answered')
    c.send(INITIALIZED)
    return c
  }

  it('a client that closes stdin ends the server cleanly (exit 0, nothing on stderr)', async () => {
    const c = await open()
    c.proc.stdin.end()
    const { code } = await c.exit
    expect(code).toBe(0)
    expect(c.stderr()).toBe('')
  })

  it('a client that leaves with an events call pending ends it and its stream of the node at once', async () => {
    const c = await open()
    c.send({ jsonrpc: '2.0', id: 2, method: 'tools/call', params: { name: 'events', arguments: { correlation_id: 'linger', wait_ms: 30_000 } } })
    await until(() => api.stats().streams === 1, 'the events stream open')
    c.proc.stdin.end()
    const { code } = await c.exit
    expect(code).toBe(0)
    await until(() => api.stats().streams === 0, 'the node\'s stream closed')
  })

  it('a line that is not JSON is told on stderr, and the server goes on', async () => {
    const c = await open()
    c.send('this is not json\n')
    c.send({ jsonrpc: '2.0', id: 7, method: 'ping' })
    await until(() => c.replies.some(r => r.id === 7), 'ping answered')
    await until(() => c.stderr().includes('aap-mesh mcp:'), 'the bad line told on stderr')
    c.proc.stdin.end()
    expect((await c.exit).code).toBe(0)
  })

  it('one message past the SDK\'s read buffer ends the server with its reason on stderr and exit code 1', async () => {
    const c = await open()
    c.send({ jsonrpc: '2.0', id: 8, method: 'tools/call', params: { name: 'delegate', arguments: { input: { x: 'a'.repeat(11 * 1024 * 1024) } } } })
    c.send({ jsonrpc: '2.0', id: 9, method: 'ping' })
    const { code } = await c.exit
    expect(code).toBe(1)
    expect(c.stderr()).toMatch(/aap-mesh mcp: .+/)
  })
})
