/**
 * AAP-CARD-ENDPOINT-HIDDEN: the kit's `no-endpoint-upward` check finds every
 * form of transport endpoint in what the target gave (a multiaddr, a /p2p/
 * address, a URL, an IPv4 or IPv6 literal with or without a port, the
 * target's own listen host, a member named for an endpoint, addr or url),
 * and none in aap-mesh's own honest output (agent ids, run ids, timestamps,
 * signatures). End to end: a target whose agent puts its listen address in
 * its output fails exactly that check.
 */
import { afterAll, describe, expect, it } from 'vitest'
import { FINAL_CHECKS } from '../src/conformance/checks-handoff.ts'
import { Kit, type KitNodes, type WireEvent } from '../src/conformance/kit.ts'
import { ConformanceAgent } from '../src/conformance/agent.ts'
import { CONFORMANCE_CAPABILITY } from '../src/conformance/constants.ts'
import { runConformance } from '../src/conformance/runner.ts'
import { createMeshNode, type MeshNode } from '../src/node.ts'
import type { Run } from '../src/runlog/types.ts'

const target = '12D3KooWHP8jJ31tCQ42oSSpRPTir3ykenymoWugUfipcdHCzkXu'
const runId = `${target}:${'a1'.repeat(12)}`
const check = FINAL_CHECKS.find(c => c.id === 'no-endpoint-upward')!

/** The check's verdict on one run.started event whose payload is `payload` (the check reads only what the kit holds). */
async function verdict (payload: Record<string, unknown>, targetAddrs: string[] = []): Promise<string> {
  // the check judges the kit's record only: no node is asked anything
  const kit = new Kit({} as unknown as KitNodes, target)
  kit.targetAddrs = targetAddrs
  kit.handles.set(runId, { run: { run_id: runId, agent_id: target } as unknown as Run, expected: 't' })
  const event: WireEvent = { run_id: runId, correlation_id: 't', type: 'run.started', seq: 1, payload }
  kit.events.set(runId, [event])
  try {
    await check.run(kit.scope())
    return 'pass'
  } catch (err) {
    return `fail: ${(err as Error).message}`
  }
}

describe('no-endpoint-upward finds endpoint data in every form', () => {
  it('flags multiaddrs, /p2p/ addresses, URLs, IP literals and endpoint-named members', async () => {
    for (const payload of [
      { reach: '/ip4/10.0.0.7/tcp/4001' },
      { reach: `/p2p/${target}` },
      { via: `/dns4/relay.example/tcp/443/wss/p2p-circuit/p2p/${target}` },
      { note: 'call https://10.0.0.7:8443/a2a/v1' },
      { next: 'grpc://agent.internal:50051' },
      { host: '10.0.0.7:4001' },
      { host: '10.0.0.7' },
      { host: '[2001:db8::7]:4001' },
      { host: 'fe80::1' },
      { peers: ['::1'] },
      { agent_endpoint: 'somewhere' },
      { listenAddrs: [] },
      { nested: { callback_URL: 'x' } },
      { Endpoint: 'x' }
    ]) expect(await verdict(payload), JSON.stringify(payload)).toMatch(/^fail: endpoint data/)
  })

  it('flags the target\'s own listen host, whatever form it takes', async () => {
    expect(await verdict({ host: 'node-7.mesh.internal' }, ['/dns4/node-7.mesh.internal/tcp/4001'])).toMatch(/listen host node-7\.mesh\.internal/)
    expect(await verdict({ host: 'node-7.mesh.internal' })).toBe('pass')
  })

  it('passes aap-mesh\'s honest values: agent and run ids, timestamps, signatures, capability ids, versions', async () => {
    expect(await verdict({
      delegator: target,
      parent_run: runId,
      handoff_to: { run_id: runId, agent_id: target },
      at: '2026-11-23T11:33:30.264Z',
      signature: 'q3Jd-2kf_9sJd0aZ1xLq8mN4pQ7rT2uV5wX8yZ0aB3cD6eF9gH1iJ4kL7mN0pQ3rS6tU9vW2xY5zA8bC1dE4fA',
      capability: CONFORMANCE_CAPABILITY,
      message: 'module std::io failed; retry at 11:33:30',
      ticket: { issuer: target, executor: target, run_id: runId }
    })).toBe('pass')
  })

  it('a value nested too deep to scan is not shown clean', async () => {
    let deep: Record<string, unknown> = { leaf: 'x' }
    for (let i = 0; i < 200; i++) deep = { d: deep }
    expect(await verdict(deep)).toMatch(/nested deeper than/)
  })
})

describe('a target whose agent puts its listen address in its output', () => {
  let node: MeshNode | undefined
  afterAll(async () => { await node?.stop() })

  it('fails exactly no-endpoint-upward (AAP-CARD-ENDPOINT-HIDDEN), naming the run and the place', async () => {
    node = await createMeshNode({ listen: ['/ip4/127.0.0.1/tcp/0'] })
    await node.start()
    const n = node
    const addr = n.addresses.find(a => a.startsWith('/ip4/127.0.0.1/tcp/'))!
    const port = /\/tcp\/(\d+)/.exec(addr)?.[1]
    const agent = new ConformanceAgent(n)
    agent.install()
    // the same agent, but every `complete` run's output says where to reach the node
    n.runs.handle(CONFORMANCE_CAPABILITY, async (ctx) => {
      const out = await agent.handler(ctx)
      return ctx.input.op === 'complete' && typeof out === 'object' && out !== null ? { ...out, via: `127.0.0.1:${port}` } : out
    })
    await n.publishCard({ name: 'endpoint-leaking-target', capabilities: [CONFORMANCE_CAPABILITY], tags: [] })
    const r = await runConformance({ target: addr.includes('/p2p/') ? addr : `${addr}/p2p/${n.agentId}` })
    const failed = r.checks.filter(c => c.status !== 'pass')
    expect(failed.map(c => c.id), JSON.stringify(failed.map(c => [c.id, c.message]))).toEqual(['no-endpoint-upward'])
    expect(r.summary.must_failed).toEqual(['AAP-CARD-ENDPOINT-HIDDEN'])
    expect(failed[0]!.message).toMatch(new RegExp(`\\.via: an IPv4 address \\(127\\.0\\.0\\.1:${port}\\)`))
    // only the leaking outputs are flagged, never an id, a timestamp or a signature
    for (const e of failed[0]!.evidence.events) expect(e).toMatch(/\.output\.via: an IPv4 address/)
  }, 120_000)
})
