/**
 * The Loops flow between two agents behind two different NATs, each node an
 * `aap-mesh start` process in its own network namespace:
 *
 *   pub1, pub2, pub3  public hosts on the lab's internet (pub2 also on WebSockets)
 *   nata              behind router r1 (198.18.1.0/24, nftables masquerade)
 *   natb              behind router r2 (198.18.2.0/24)
 *   natc              behind router r2 as well (a second host on that LAN)
 *
 * The public nodes learn they are reachable (AutoNAT v2) and serve relay
 * reservations; the NATed nodes learn they are not, reserve slots on relays
 * they meet through their bootstrap peers and publish /p2p-circuit addresses.
 * A Python agent beside each NATed node then runs discover, delegate, block,
 * resume, handoff and complete; pub3 replays the correlation.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import type { Proc } from '../cli-helpers.ts'
import { until } from '../helpers.ts'
import { Lab } from './lab.ts'
import { Dirs, killSpawned, procIn, startNode, type NetNode } from './nodes.ts'

const CAP = 'cap:summarize@1.0.0'

describe('two agents behind two NATs, over relays', () => {
  let lab: Lab
  const dirs = new Dirs()
  const procs: Proc[] = []
  const nodes: Record<string, NetNode> = {}

  function track<T extends Proc> (p: T): T {
    procs.push(p)
    return p
  }

  beforeAll(async () => {
    lab = await Lab.create()
    const [pub1, pub2, pub3] = [await lab.publicHost('pub1'), await lab.publicHost('pub2'), await lab.publicHost('pub3')]
    const r1 = await lab.router('r1', 1)
    const r2 = await lab.router('r2', 2)
    const [nata, natb, natc] = [await lab.natHost('nata', r1), await lab.natHost('natb', r2), await lab.natHost('natc', r2)]

    nodes.pub1 = track(await startNode(pub1, dirs, ['--name', 'pub1']))
    nodes.pub2 = track(await startNode(pub2, dirs, ['--bootstrap', nodes.pub1.tcpAddr], true))
    nodes.pub3 = track(await startNode(pub3, dirs, ['--bootstrap', nodes.pub1.tcpAddr]))
    // public nodes: AutoNAT verifies their address, then they serve relay reservations
    await Promise.all([nodes.pub1, nodes.pub2].map(async n => n.event('reachability', l => l.public === true && l.relay_serving === true)))
    const wsAddr = `/ip4/${pub2.ip}/tcp/4002/ws/p2p/${nodes.pub2.peerId}`
    nodes.nata = track(await startNode(nata, dirs, ['--bootstrap', nodes.pub1.tcpAddr, '--bootstrap', nodes.pub2.tcpAddr]))
    nodes.natb = track(await startNode(natb, dirs, ['--bootstrap', nodes.pub1.tcpAddr, '--bootstrap', wsAddr]))
    nodes.natc = track(await startNode(natc, dirs, ['--bootstrap', nodes.pub1.tcpAddr]))
  }, 90_000)

  afterAll(async () => {
    await Promise.all(procs.map(async p => p.stop('SIGKILL')))
    await killSpawned()
    await lab?.destroy()
    await dirs.cleanup()
  })

  it('public nodes learn they are reachable; NATed nodes reserve relay slots and publish relay addresses', async () => {
    for (const name of ['nata', 'natb', 'natc']) {
      const r = await nodes[name]!.event('reachability', l => (l.relay_addresses as number) > 0)
      expect(r).toMatchObject({ public: false, relay_serving: false })
    }
    // pub2 was joined over WebSockets by natb
    expect(nodes.natb!.connectionsTo(nodes.pub2!.peerId).some(c => !c.relayed)).toBe(true)
    expect(nodes.pub3!.lines.find(l => l.event === 'reachability' && l.public === true)).toBeDefined()
  }, 60_000)

  it('runs the Loops flow between the two NATed agents and replays it on a third host', async () => {
    const a = nodes.nata!
    const b = nodes.natb!
    const pyB = track(procIn(b.host, ['python3', 'examples/python-agent.py', '--data-dir', b.dataDir, '--name', 'summarizer']))
    const pyA = track(procIn(a.host, ['python3', 'examples/python-agent.py', '--data-dir', a.dataDir, '--name', 'finisher']))
    expect((await pyB.event('registered')).agent_id).toBe(b.agentId)
    await Promise.all([pyB.event('ready'), pyA.event('ready')])

    // discover: nata finds natb's agent through the DHT of the public nodes
    const found = await a.cli(['discover', '--capability', CAP, '--wait', '30000', '--json'])
    expect(found.code, found.stderr).toBe(0)
    expect((found.json.cards as Array<{ agent_id: string }>).map(c => c.agent_id)).toContain(b.agentId)

    // delegate across both NATs
    const d = await a.cli(['delegate', '--to', b.agentId, '--capability', CAP, '--task', 'task-nat', '--input', '{"text":"two NATs, one relay"}', '--json'])
    expect(d.code, d.stderr).toBe(0)
    const run = d.json.run as { run_id: string }
    const blocked = await pyB.event('blocked', l => l.run_id === run.run_id)

    // resume from nata; the resolution asks natb's agent to hand the run back to nata's
    const resolution = { handoff_to: a.agentId, notes: 'back across the NATs' }
    const resumed = await a.cli(['resume', run.run_id, '--resolution', JSON.stringify(resolution), '--json'])
    expect(resumed.code, resumed.stderr).toBe(0)
    const handed = await pyB.event('handed_off', l => l.run_id === run.run_id)
    expect(handed.to_agent).toBe(a.agentId)
    const done = await pyA.event('completed', l => l.run_id === handed.new_run_id)
    expect(done.output).toMatchObject({ continued_from: run.run_id, context: { notes: 'back across the NATs' } })

    // the path: the two NATed nodes met over a relay. DCUtR is configured but has nothing to
    // punch with: js-libp2p ignores TCP observed addresses (a dial's source port is not the
    // listen port; libp2p/js-libp2p#2620), so neither side knows a public address of its own
    // to offer, and both LAN addresses are private. Every connection between them is relayed.
    const aToB = a.connectionsTo(b.peerId)
    const bToA = b.connectionsTo(a.peerId)
    expect(aToB.length + bToA.length).toBeGreaterThan(0)
    expect([...aToB, ...bToA][0]!.relayed).toBe(true)
    expect([...aToB, ...bToA].every(c => c.relayed)).toBe(true)

    // replay on a third host, which took no part. A replay is what it could collect within its
    // budget: a participant reached over a relay can miss a round (once in CI at a2bf686, the
    // successor's run.completed came later), so the third host asks again until both runs ended
    let replay = await nodes.pub3!.cli(['replay', 'task-nat', '--participant', a.agentId, '--participant', b.agentId, '--json'])
    await until(async () => {
      if (replay.code === 0 && (replay.json.runs as Array<{ state: string }>).filter(r => r.state === 'completed').length === 2) return true
      replay = await nodes.pub3!.cli(['replay', 'task-nat', '--participant', a.agentId, '--participant', b.agentId, '--json'])
      return false
    }, 'a replay on the third host that holds both runs to their end', 60_000)
    expect(replay.code, replay.stderr).toBe(0)
    expect(replay.json.runs.map((r: { run_id: string, executor: string, state: string, started_by: string }) => [r.run_id, r.executor, r.state, r.started_by]))
      .toEqual([[run.run_id, b.agentId, 'completed', 'delegate'], [handed.new_run_id, a.agentId, 'completed', 'handoff']])
    expect(replay.json.checkpoints).toEqual([expect.objectContaining({ run_id: run.run_id, checkpoint_id: blocked.checkpoint_id, resolution, resolved_by: a.agentId, attested: true })])
    // and it agrees with the delegator's own replay
    const own = await a.cli(['replay', 'task-nat', '--json'])
    expect(own.json.events.map((e: { event_id: string }) => e.event_id)).toEqual(replay.json.events.map((e: { event_id: string }) => e.event_id))
  }, 120_000)
})
