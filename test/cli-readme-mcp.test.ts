/**
 * The MCP client configuration the README gives starts this checkout's own
 * command by absolute path. `npx aap-mesh` would not: the package is not
 * published, and an MCP client starts the server from a directory of its
 * own, so npx would fetch whatever the public registry holds under that name.
 */
import { spawn } from 'node:child_process'
import { readFile } from 'node:fs/promises'
import { isAbsolute } from 'node:path'
import { describe, expect, it } from 'vitest'
import pkg from '../package.json' with { type: 'json' }
import { root } from './cli-helpers.ts'

/** Where the README's example puts the checkout. */
const PLACEHOLDER = '/path/to/aap-mesh'

describe('README: the MCP client configuration', () => {
  it('names the checkout\'s Node and bin/aap-mesh.mjs by absolute path, and that command runs', async () => {
    const readme = await readFile(new URL('../README.md', import.meta.url), 'utf8')
    const blocks = [...readme.matchAll(/```json\n([\s\S]*?)```/g)].map(m => m[1] ?? '').filter(b => b.includes('"mcpServers"'))
    expect(blocks).toHaveLength(1)
    const server = (JSON.parse(blocks[0] ?? '') as { mcpServers: Record<string, { command: string, args: string[] }> }).mcpServers['aap-mesh']
    expect(server).toBeDefined()
    const { command, args } = server!
    expect(command).not.toMatch(/(^|\/)np[mx]$/)
    expect(isAbsolute(command)).toBe(true)
    expect(isAbsolute(args[0] ?? '')).toBe(true)
    expect(args.slice(1, 2)).toEqual(['mcp'])
    // in this checkout, the same command answers
    const here = (s: string): string => s.replace(PLACEHOLDER, root.replace(/\/$/, ''))
    const child = spawn(here(command), [here(args[0] ?? ''), '--version'], { cwd: '/', stdio: ['ignore', 'pipe', 'pipe'] })
    let out = ''
    child.stdout.setEncoding('utf8').on('data', (s: string) => { out += s })
    const code = await new Promise<number | null>(resolve => child.on('exit', resolve))
    expect(code).toBe(0)
    expect(out.trim()).toBe(pkg.version)
    // and nowhere else does the README start the command through npx
    expect(readme).not.toMatch(/"command":\s*"npx"/)
    expect(readme.split('\n').filter(l => /^\s*npx aap-mesh\b/.test(l))).toEqual([])
  })
})
