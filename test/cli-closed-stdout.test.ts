/**
 * A reader that goes away (`aap-mesh events --follow | head -1`, `aap-mesh runs
 * show x | head -0`) ended the command with an unhandled EPIPE and its stack
 * trace (exit 1). Now the command stops (a follow ends its stream) and exits
 * 0 quietly, as `start` and `conformance` already went on past a closed stdout.
 * A small HTTP server plays the node.
 *
 * Only a closed pipe is a reader gone away: stdout on a full disk (ENOSPC,
 * EIO) lost the output, and the command said nothing and exited 0 (`runs show
 * x --json > out.json` left an empty file as a success). Now it says so on
 * stderr and exits 1. /dev/full (Linux) fails every write with ENOSPC.
 */
import { spawn } from 'node:child_process'
import { closeSync, openSync } from 'node:fs'
import { createServer, type Server, type ServerResponse } from 'node:http'
import type { AddressInfo } from 'node:net'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { MAIN, Proc, root } from './cli-helpers.ts'

/** Run the CLI to its end with stdout on /dev/full: every write fails with ENOSPC. */
async function onFullDisk (args: string[]): Promise<{ code: number | null, stderr: string }> {
  const full = openSync('/dev/full', 'w')
  try {
    const child = spawn(process.execPath, [MAIN, ...args], { cwd: root, stdio: ['ignore', full, 'pipe'] })
    let stderr = ''
    child.stderr?.setEncoding('utf8')
    child.stderr?.on('data', (chunk: string) => { stderr += chunk })
    const code = await new Promise<number | null>(resolve => { child.on('close', (c) => { resolve(c) }) })
    return { code, stderr }
  } finally {
    closeSync(full)
  }
}

const RUN = {
  run_id: 'run-1', state: 'running', agent_id: 'agent-b', correlation_id: 't1', capability: { capability_id: 'cap:x', version: '1.0.0' },
  delegator: 'D', created_at: '2026-01-01T00:00:00Z', updated_at: '2026-01-01T00:00:00Z', parent_run: null, handoff_from: null, handoff_to: null,
  output: null, failure: null
}
const event = (seq: number): string => `event: run.progress\ndata: ${JSON.stringify({ run_id: 'run-1', seq, type: 'run.progress', at: '2026-01-01T00:00:00Z', payload: { n: seq } })}\n\n`

describe('a closed stdout', () => {
  let server: Server
  let url: string
  const streams: ServerResponse[] = []
  beforeAll(async () => {
    server = createServer((req, res) => {
      req.resume()
      if (req.url?.includes('/stream') === true) {
        res.writeHead(200, { 'content-type': 'text/event-stream' })
        res.write('event: ready\ndata: {}\n\n')
        res.write(event(1))
        streams.push(res)
        return
      }
      res.writeHead(200, { 'content-type': 'application/json' })
      res.end(JSON.stringify({ run: RUN }))
    })
    await new Promise<void>(resolve => server.listen(0, '127.0.0.1', resolve))
    url = `http://127.0.0.1:${(server.address() as AddressInfo).port}`
  })
  afterAll(async () => {
    server.closeAllConnections()
    await new Promise<void>(resolve => server.close(() => { resolve() }))
  })

  it('events --follow: the reader gone after the first line ends the follow, exit 0, no stack trace', async () => {
    const p = new Proc(process.execPath, [MAIN, 'events', 't1', '--follow', '--json', '--api-url', url, '--token', 'x'])
    // the first event printed: the reader (head -1) takes it and goes
    await p.line(l => l.seq === 1, 'the first event')
    p.proc.stdout?.destroy()
    const res = streams.at(-1)!
    res.write(event(2))
    res.write(event(3))
    const { code } = await p.exited
    res.end()
    expect(p.stderr).not.toMatch(/EPIPE|Error|at /)
    expect(code).toBe(0)
  }, 20_000)

  it('a one-shot command whose reader left before its output exits 0 with no stack trace', async () => {
    const p = new Proc(process.execPath, [MAIN, 'runs', 'show', 'run-1', '--api-url', url, '--token', 'x'])
    p.proc.stdout?.destroy()
    const { code } = await p.exited
    expect(p.stderr).not.toMatch(/EPIPE|Error|at /)
    expect(code).toBe(0)
  }, 20_000)

  it('a one-shot command whose output cannot be written (ENOSPC) says so on stderr and exits 1', async () => {
    const { code, stderr } = await onFullDisk(['runs', 'show', 'run-1', '--json', '--api-url', url, '--token', 'x'])
    expect(stderr).toMatch(/^aap-mesh: OUTPUT_FAILED: .*ENOSPC/m)
    expect(stderr).not.toMatch(/\n\s+at /)
    expect(code).toBe(1)
  }, 20_000)

  it('events --follow whose output cannot be written (ENOSPC) ends the follow, says so and exits 1', async () => {
    const { code, stderr } = await onFullDisk(['events', 't1', '--follow', '--json', '--api-url', url, '--token', 'x'])
    expect(stderr).toMatch(/^aap-mesh: OUTPUT_FAILED: .*ENOSPC/m)
    expect(code).toBe(1)
    for (const res of streams) res.end()
  }, 20_000)
})
