/**
 * `aap-mesh conformance` whose reports cannot be written (--json under a
 * regular file): the failure reached main.ts unhandled, a stack trace and
 * exit 1, which means "a MUST failed". Now the table is printed, the failure
 * said in one line, and the exit status is its own (4).
 */
import { writeFile } from 'node:fs/promises'
import { join } from 'node:path'
import { afterAll, describe, expect, it } from 'vitest'
import { EXIT_REPORTS_UNWRITTEN } from '../src/cli/conformance.ts'
import { MAIN, Proc, TempDirs } from './cli-helpers.ts'
import { startTarget, type Target } from './fixtures/broken-targets.ts'

describe('the conformance command and reports it cannot write', () => {
  const dirs = new TempDirs()
  let t: Target | undefined
  afterAll(async () => {
    await t?.node.stop()
    await dirs.cleanup()
  })

  it('prints the table, says why, and exits with its own status', async () => {
    t = await startTarget()
    const out = await dirs.make('aap-conformance-')
    const file = join(out, 'not-a-dir')
    await writeFile(file, 'a file, not a folder\n')
    const p = new Proc(process.execPath, [MAIN, 'conformance', t.address, '--json', join(file, 'c.json'), '--markdown', join(out, 'c.md')])
    const { code } = await p.exited
    expect(code).toBe(4)
    expect(EXIT_REPORTS_UNWRITTEN).toBe(4)
    expect(p.text.join('\n')).toMatch(/pass/)
    expect(p.stderr).toMatch(/error: the reports could not be written \(.*not-a-dir\/c\.json.*\): (EEXIST|ENOTDIR)/)
    expect(p.stderr).not.toMatch(/\n\s+at /)
  }, 180_000)
})
