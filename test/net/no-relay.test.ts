/**
 * Behind NAT with no relay anywhere: the only public node serves none
 * (`--relay off`), so the NATed nodes cannot publish a relay address. A
 * delegation from one NATed agent to the other finds the card (through the
 * public node's DHT) but no way to reach the agent, and fails with
 * AGENT_NOT_FOUND: typed, and within the dial bound, not a hang.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import type { Proc } from '../cli-helpers.ts'
import { Lab } from './lab.ts'
import { Dirs, killSpawned, startNode, type NetNode } from './nodes.ts'

describe('a NATed agent with no relay reachable', () => {
  let lab: Lab
  const dirs = new Dirs()
  const procs: Proc[] = []
  let pub: NetNode
  let a: NetNode
  let b: NetNode

  beforeAll(async () => {
    lab = await Lab.create()
    const pub1 = await lab.publicHost('pub1')
    const [r1, r2] = [await lab.router('r1', 1), await lab.router('r2', 2)]
    pub = await startNode(pub1, dirs, ['--relay', 'off'])
    procs.push(pub)
    a = await startNode(await lab.natHost('nata', r1), dirs, ['--bootstrap', pub.tcpAddr])
    procs.push(a)
    b = await startNode(await lab.natHost('natb', r2), dirs, ['--bootstrap', pub.tcpAddr, '--name', 'unreachable', '--capability', 'cap:echo@1.0.0'])
    procs.push(b)
  }, 90_000)

  afterAll(async () => {
    await Promise.all(procs.map(async p => p.stop('SIGKILL')))
    await killSpawned()
    await lab?.destroy()
    await dirs.cleanup()
  })

  it('fails delegations to it with AGENT_NOT_FOUND', async () => {
    // the public node is reachable but serves no relay, and says so
    await pub.event('reachability', l => l.public === true)
    expect(pub.lines.filter(l => l.event === 'reachability').every(l => l.relay_serving === false)).toBe(true)
    // natb's card is in the DHT (it was announced through the public node)
    await b.event('announced', l => (l.provider_keys as number) > 0)
    const card = await a.cli(['discover', '--capability', 'cap:echo@1.0.0', '--wait', '30000', '--json'])
    expect(card.code, card.stderr).toBe(0)
    expect(card.json.cards.map((c: { agent_id: string }) => c.agent_id)).toContain(b.agentId)

    const started = Date.now()
    const d = await a.cli(['delegate', '--to', b.agentId, '--capability', 'cap:echo@1.0.0', '--task', 'task-unreachable', '--input', '{}', '--json'])
    const tookMs = Date.now() - started
    expect(d.code).not.toBe(0)
    expect(d.json.error.code, d.stdout + d.stderr).toBe('AGENT_NOT_FOUND')
    // informative only (no timed assertion): how long the typed failure took
    console.info(`delegation to an unreachable NATed agent failed with AGENT_NOT_FOUND after ${tookMs} ms`)
    // neither NATed node ever had a relay address to offer
    for (const n of [a, b]) expect(n.lines.filter(l => l.event === 'reachability').every(l => l.relay_addresses === 0)).toBe(true)
  }, 90_000)
})
