/**
 * `aap-mesh ui` opens the browser on a page only this user can read, which
 * sends it on to the one-time link: the link (a login until it is used) is
 * never a process argument, which every local user can read in
 * /proc/<pid>/cmdline. A stand-in `xdg-open` records what it was given.
 * On Windows, which has no POSIX file modes, the page's folder is not refused
 * for its mode bits (the CLI is run with process.platform set to win32).
 */
import { chmod, mkdir, readdir, readFile, stat, writeFile } from 'node:fs/promises'
import { join } from 'node:path'
import { fileURLToPath } from 'node:url'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { cli, NodeProc, TempDirs } from './cli-helpers.ts'
import { until } from './helpers.ts'

describe('aap-mesh ui: the link reaches the browser without being a process argument', () => {
  const dirs = new TempDirs()
  let node: NodeProc
  beforeAll(async () => {
    node = new NodeProc(await dirs.make(), ['--name', 'ui-open'])
    await node.started()
  })
  afterAll(async () => {
    await node.stop()
    await dirs.cleanup()
  })

  it('the opener is given a file URL of a page (owner-only) that goes on to the link', async () => {
    if (process.platform !== 'linux') return
    const bin = await dirs.make('aap-bin-')
    const tmp = await dirs.make('aap-tmp-')
    const record = join(bin, 'args.txt')
    await writeFile(join(bin, 'xdg-open'), `#!/bin/sh\nprintf '%s' "$*" > '${record}'\n`)
    await chmod(join(bin, 'xdg-open'), 0o755)
    const ui = await cli(['ui', '--json', '--data-dir', node.dataDir], { PATH: `${bin}:${process.env.PATH ?? ''}`, TMPDIR: tmp })
    expect(ui.code, ui.stderr).toBe(0)
    const link = (ui.json as { url: string, code: string }).url
    const code = (ui.json as { url: string, code: string }).code
    await until(async () => (await stat(record).catch(() => undefined)) !== undefined, 'the opener ran')
    const given = await readFile(record, 'utf8')
    expect(given.startsWith('file://')).toBe(true)
    expect(given).not.toContain(code)
    const page = fileURLToPath(given)
    expect(page.startsWith(tmp)).toBe(true)
    expect((await stat(page)).mode & 0o777).toBe(0o600)
    expect((await stat(join(page, '..'))).mode & 0o777).toBe(0o700)
    expect(await readFile(page, 'utf8')).toContain(`location.replace(${JSON.stringify(link)})`)
  })

  it('on Windows the folder\'s mode bits (which mean nothing there) do not stop the page', async () => {
    if (process.platform !== 'linux' || process.getuid === undefined) return
    const tmp = await dirs.make('aap-tmp-')
    const bin = await dirs.make('aap-bin-')
    const preload = join(bin, 'win32.mjs')
    await writeFile(preload, "Object.defineProperty(process, 'platform', { value: 'win32' })\n")
    // the folder as Windows would show it through node: mode bits for everyone
    const folder = join(tmp, `aap-mesh-ui-${process.getuid()}`)
    await mkdir(folder)
    await chmod(folder, 0o755)
    const ui = await cli(['ui', '--json', '--data-dir', node.dataDir], { TMPDIR: tmp, TEMP: tmp, TMP: tmp, PATH: bin, NODE_OPTIONS: `--import=${preload}` })
    expect(ui.code, ui.stderr).toBe(0)
    expect(ui.stderr).not.toContain('could not write the login page')
    const pages = await readdir(folder)
    expect(pages).toHaveLength(1)
    expect(await readFile(join(folder, pages[0]!), 'utf8')).toContain(JSON.stringify((ui.json as { url: string }).url))
  })
})
