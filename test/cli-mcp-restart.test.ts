/**
 * `aap-mesh mcp --data-dir` outlives restarts of its node: a node writes a
 * new token at each start, maybe on a new port, and the MCP server reads the
 * data directory's API files again when the old address refuses it (a new
 * port) or the new node refuses the old token (the same port).
 */
import { afterAll, describe, expect, it } from 'vitest'
import { Client } from '@modelcontextprotocol/sdk/client/index.js'
import { StdioClientTransport } from '@modelcontextprotocol/sdk/client/stdio.js'
import { MAIN, NodeProc, TempDirs, root } from './cli-helpers.ts'

describe('aap-mesh mcp across node restarts', () => {
  const dirs = new TempDirs()
  const nodes: NodeProc[] = []
  let client: Client | undefined
  afterAll(async () => {
    await client?.close()
    await Promise.all(nodes.map(async n => n.stop('SIGKILL')))
    await dirs.cleanup()
  })

  it('tool calls reach the restarted node, on a new port and on the same one', async () => {
    const dir = await dirs.make()
    const start = async (args: string[]): Promise<{ node: NodeProc, api: string }> => {
      const node = new NodeProc(dir, args)
      nodes.push(node)
      return { node, api: (await node.started()).api }
    }
    const first = await start([])
    const mcp = new Client({ name: 'test', version: '0.0.0' })
    client = mcp
    await mcp.connect(new StdioClientTransport({ command: process.execPath, args: [MAIN, 'mcp', '--data-dir', dir], cwd: root, stderr: 'pipe' }))
    const listRuns = async (): Promise<{ isError: boolean, text: string }> => {
      const r = await mcp.callTool({ name: 'list_runs', arguments: {} })
      return { isError: r.isError === true, text: (r.content as Array<{ text: string }>)[0]?.text ?? '' }
    }
    expect(await listRuns()).toMatchObject({ isError: false })

    // down: the call fails and says so
    await first.node.stop('SIGTERM')
    const down = await listRuns()
    expect(down.isError).toBe(true)
    expect(down.text).toContain('UNREACHABLE')

    // up again on another port, with a new token: the old port refuses, the files name the new one
    const second = await start([])
    expect(second.api).not.toBe(first.api)
    const afterMove = await listRuns()
    expect(afterMove.isError, afterMove.text).toBe(false)
    expect(JSON.parse(afterMove.text)).toMatchObject({ executing: [], delegated: [] })

    // up again on the same port, with a new token: the node answers UNAUTHORIZED to the old one
    await second.node.stop('SIGTERM')
    const port = new URL(second.api).port
    const third = await start(['--api-port', port])
    expect(third.api).toBe(second.api)
    const samePort = await listRuns()
    expect(samePort.isError, samePort.text).toBe(false)
  }, 60_000)
})
