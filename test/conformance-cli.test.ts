/**
 * CI runs the conformance kit against a fresh node: `aap-mesh start
 * --conformance-agent` as a real process, then `aap-mesh conformance` as
 * another, over TCP loopback. Every MUST (and every SHOULD) passes, the
 * reports are written, and the command exits 0.
 */
import { readFile } from 'node:fs/promises'
import { join } from 'node:path'
import { afterAll, describe, expect, it } from 'vitest'
import { CLAUSES } from '../src/conformance/clauses.ts'
import type { ConformanceReport } from '../src/conformance/runner.ts'
import { cli, NodeProc, TempDirs } from './cli-helpers.ts'
import { startTarget } from './fixtures/broken-targets.ts'

describe('aap-mesh conformance against a fresh aap-mesh start --conformance-agent', () => {
  const dirs = new TempDirs()
  let node: NodeProc | undefined

  afterAll(async () => {
    await node?.stop()
    await dirs.cleanup()
  })

  it('passes every clause it can observe and exits 0', async () => {
    node = new NodeProc(await dirs.make(), ['--conformance-agent', '--api-port', '0'])
    const { agentId, addresses } = await node.started()
    const addr = addresses.find(a => a.startsWith('/ip4/127.0.0.1/'))!
    const target = addr.includes('/p2p/') ? addr : `${addr}/p2p/${agentId}`
    const out = await dirs.make('aap-conformance-')
    const json = join(out, 'conformance.json')
    const md = join(out, 'conformance.md')
    const res = await cli(['conformance', target, '--json', json, '--markdown', md])
    expect(res.code, `${res.stdout}\n${res.stderr}`).toBe(0)
    const report = JSON.parse(await readFile(json, 'utf8')) as ConformanceReport
    expect(report.target).toBe(agentId)
    expect(report.summary.must_failed).toEqual([])
    expect(report.summary.should_failed).toEqual([])
    expect(report.clauses.map(c => c.id)).toEqual(CLAUSES.map(c => c.id))
    for (const c of report.clauses) expect([c.id, c.status]).toEqual([c.id, c.checks.length === 0 ? 'n/a' : 'pass'])
    // the terminal table names every clause with its result
    for (const c of CLAUSES) expect(res.stdout).toMatch(new RegExp(`^${c.id}\\s+${c.level}\\s+(pass|n/a)`, 'm'))
    const text = await readFile(md, 'utf8')
    expect(text).toContain('Every MUST passed.')
    expect(text).toContain(`Command: \`aap-mesh conformance ${target} --json ${json} --markdown ${md}\``)
  }, 120_000)

  it('exits 1 and names the failing MUST clauses, with the error frame, when the target breaks one', async () => {
    const t = await startTarget('unknown-run-code')
    try {
      const out = await dirs.make('aap-conformance-')
      const md = join(out, 'conformance.md')
      const res = await cli(['conformance', t.address, '--json', join(out, 'conformance.json'), '--markdown', md])
      expect(res.code, res.stderr).toBe(1)
      expect(res.stdout).toMatch(/^AAP-ERROR-RUN_NOT_FOUND\s+MUST\s+FAIL\s+unknown-run: get_run of an unknown run: expected RUN_NOT_FOUND, got INVALID_REQUEST/m)
      expect(res.stdout).toContain('MUST clauses failed: AAP-ERROR-RUN_NOT_FOUND, AAP-CONF-ERRORS')
      const text = await readFile(md, 'utf8')
      expect(text).toContain('MUST failed: AAP-ERROR-RUN_NOT_FOUND, AAP-CONF-ERRORS.')
      expect(text).toMatch(/\| unknown-run \| FAIL: get_run of an unknown run: expected RUN_NOT_FOUND, got INVALID_REQUEST/)
    } finally {
      await t.node.stop()
    }
  }, 120_000)

  it('exits 2 for an agent id without --bootstrap, and 3 for a target nobody answers at', async () => {
    const usage = await cli(['conformance', '12D3KooWHP8jJ31tCQ42oSSpRPTir3ykenymoWugUfipcdHCzkXu'])
    expect(usage.code).toBe(2)
    expect(usage.stderr).toContain('--bootstrap')
    const out = await dirs.make('aap-conformance-')
    const gone = await cli(['conformance', '/ip4/127.0.0.1/tcp/1/p2p/12D3KooWHP8jJ31tCQ42oSSpRPTir3ykenymoWugUfipcdHCzkXu', '--json', join(out, 'x.json'), '--markdown', join(out, 'x.md')])
    expect(gone.code).toBe(3)
    expect(gone.stderr).toMatch(/cannot reach/)
  }, 60_000)
})
