/**
 * The conformance command as a process:
 * - `aap-mesh conformance <target> | head -n 3`: the reader is gone when the table is printed; the EPIPE ended
 *   the process (exit 1, "a MUST failed") before the JSON and Markdown reports were written. The reports now
 *   come first, and a failing stdout is logged.
 * - Ctrl-C while the kit runs: nothing stopped the kit's four nodes, so their artifact folders stayed in $TMPDIR
 *   and the target's held runs were left to time out. Now the kit stops, cancels, cleans up and exits 130.
 */
import { access, readdir } from 'node:fs/promises'
import { join } from 'node:path'
import { afterAll, describe, expect, it } from 'vitest'
import { MAIN, Proc, TempDirs } from './cli-helpers.ts'
import { until } from './helpers.ts'
import { startTarget, type Target } from './fixtures/broken-targets.ts'

async function exists (path: string): Promise<boolean> {
  try { await access(path); return true } catch { return false }
}

describe('the conformance command\'s process', () => {
  const dirs = new TempDirs()
  let t: Target | undefined
  afterAll(async () => {
    await t?.node.stop()
    await dirs.cleanup()
  })

  it('writes its reports when stdout\'s reader went away', async () => {
    t ??= await startTarget()
    const out = await dirs.make('aap-conformance-')
    const json = join(out, 'c.json')
    const md = join(out, 'c.md')
    const p = new Proc(process.execPath, [MAIN, 'conformance', t.address, '--json', json, '--markdown', md])
    // a reader that took what it wanted (`| head -n 3`) and closed the pipe
    p.proc.stdout!.destroy()
    const { code } = await p.exited
    expect(await exists(json)).toBe(true)
    expect(await exists(md)).toBe(true)
    expect(code).toBe(0)
  }, 180_000)

  it('stops, cleans up and exits 130 on Ctrl-C', async () => {
    t ??= await startTarget()
    const tmp = await dirs.make('aap-conformance-tmp-')
    const out = await dirs.make('aap-conformance-')
    const p = new Proc(process.execPath, [MAIN, 'conformance', t.address, '--json', join(out, 'c.json'), '--markdown', join(out, 'c.md')], { TMPDIR: tmp })
    // the first check's line on stderr: the kit's nodes are up, with their folders
    await until(() => / {2}(pass|FAIL)/.test(p.stderr), 'the first check to be reported', 60_000)
    expect((await readdir(tmp)).filter(n => n.startsWith('aap-mesh-artifacts-')).length).toBeGreaterThan(0)
    p.proc.kill('SIGINT')
    const { code } = await p.exited
    expect(code).toBe(130)
    expect((await readdir(tmp)).filter(n => n.startsWith('aap-mesh-artifacts-'))).toEqual([])
  }, 180_000)
})
