/**
 * The kit and the target's concurrent-run limits. Every run a check creates
 * is canceled when the check ends, pass or fail, so one failing check holds
 * none of the target's slots for the next. A capacity refusal
 * (DELEGATION_REFUSED, reason capacity) is not blamed on the clause the check
 * decides: the check is undecided, the report names the cause and how many
 * concurrent runs per delegator the kit needs, and the kit still exits 1 (a
 * MUST is not shown to pass). A target with that many per delegator passes.
 */
import { readFile } from 'node:fs/promises'
import { join } from 'node:path'
import { afterAll, describe, expect, it } from 'vitest'
import { installConformanceAgent } from '../src/conformance/agent.ts'
import { CONFORMANCE_CAPABILITY, KIT_RUNS_PER_DELEGATOR_NEEDED } from '../src/conformance/constants.ts'
import { runConformance, type ConformanceReport } from '../src/conformance/runner.ts'
import { createMeshNode, type MeshNode } from '../src/node.ts'
import { cli, TempDirs } from './cli-helpers.ts'
import { startTarget, type Target } from './fixtures/broken-targets.ts'

async function shareTarget (perDelegator: number): Promise<{ node: MeshNode, address: string }> {
  const node = await createMeshNode({ listen: ['/ip4/127.0.0.1/tcp/0'], maxInboundRunsPerDelegator: perDelegator })
  await node.start()
  installConformanceAgent(node)
  await node.publishCard({ name: `share-${perDelegator}-target`, capabilities: [CONFORMANCE_CAPABILITY], tags: [] })
  const addr = node.addresses.find(a => a.startsWith('/ip4/127.0.0.1/tcp/'))!
  return { node, address: addr.includes('/p2p/') ? addr : `${addr}/p2p/${node.agentId}` }
}

describe('the kit within the target\'s concurrent-run limits', () => {
  const nodes: MeshNode[] = []
  const dirs = new TempDirs()
  let broken: Target | undefined
  afterAll(async () => {
    await Promise.all([...nodes.map(async n => n.stop()), broken?.node.stop()])
    await dirs.cleanup()
  })

  it('a check that fails half way leaves none of its runs on the target', async () => {
    // stranger-control fails at its first assertion, with a blocked and a held run of the target in hand
    broken = await startTarget('stranger-resume')
    const r = await runConformance({ target: broken.address })
    const failed = r.checks.find(c => c.id === 'stranger-control')!
    expect(failed.status).toBe('fail')
    const own = failed.evidence.runs.filter(id => id.startsWith(`${broken!.node.agentId}:`))
    expect(own.length).toBe(2)
    // the stranger's resume let the blocked run complete; the held one would hold its slot for AGENT_HOLD_MAX_MS
    const runs = await Promise.all(own.map(async id => broken!.node.getRun(id)))
    for (const run of runs) expect([run.run_id, run.state === 'completed' || run.state === 'failed']).toEqual([run.run_id, true])
    expect(runs.some(run => run.failure?.code === 'CANCELED')).toBe(true)
  }, 120_000)

  it('a per-delegator share too small leaves checks undecided, names the cause, fails nothing, exits 1', async () => {
    const t = await shareTarget(2)
    nodes.push(t.node)
    const out = await dirs.make('aap-conformance-')
    const json = join(out, 'c.json')
    const md = join(out, 'c.md')
    const res = await cli(['conformance', t.address, '--json', json, '--markdown', md])
    expect(res.code, res.stderr).toBe(1)
    const r = JSON.parse(await readFile(json, 'utf8')) as ConformanceReport
    const detail = JSON.stringify(r.checks.filter(c => c.status !== 'pass').map(c => [c.id, c.status, c.message]))
    expect(r.checks.filter(c => c.status === 'fail'), detail).toEqual([])
    const undecided = r.checks.filter(c => c.status === 'inconclusive')
    expect(undecided.map(c => c.id), detail).toContain('states')
    expect(undecided.find(c => c.id === 'states')?.message).toMatch(new RegExp(`DELEGATION_REFUSED, reason capacity\\): its concurrent-run limit per delegator is too low for the kit, which needs ${KIT_RUNS_PER_DELEGATOR_NEEDED}`))
    // each names the cause, the checks over everything too (they had nothing to judge)
    for (const c of undecided) expect(c.message).toMatch(new RegExp(`capacity.*needs ${KIT_RUNS_PER_DELEGATOR_NEEDED}`))
    expect(r.summary.must_failed).toEqual([])
    expect(r.summary.must_inconclusive).toContain('AAP-CONF-STATES')
    expect(r.clauses.find(c => c.id === 'AAP-CONF-STATES')?.status).toBe('inconclusive')
    expect(res.stdout).toMatch(/^AAP-CONF-STATES\s+MUST\s+UNDECIDED\s+states: /m)
    expect(res.stdout).toContain(`the kit needs ${KIT_RUNS_PER_DELEGATOR_NEEDED} concurrent runs per delegator`)
    const text = await readFile(md, 'utf8')
    expect(text).toContain('MUST undecided: ')
    expect(text).not.toContain('Every MUST passed.')
  }, 120_000)

  it(`a share of ${KIT_RUNS_PER_DELEGATOR_NEEDED} per delegator is enough: every clause passes`, async () => {
    const t = await shareTarget(KIT_RUNS_PER_DELEGATOR_NEEDED)
    nodes.push(t.node)
    const r = await runConformance({ target: t.address })
    expect(r.checks.filter(c => c.status !== 'pass').map(c => [c.id, c.message])).toEqual([])
    expect(r.summary.must_failed).toEqual([])
    expect(r.summary.must_inconclusive).toEqual([])
  }, 120_000)
})
