/**
 * A node started before its bootstrap peer: its first dials fail (nothing
 * listens there yet), it keeps dialing with backoff, and it joins, and finds
 * the peer's agent, once the peer comes up.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import type { Proc } from '../cli-helpers.ts'
import { Lab, type Host } from './lab.ts'
import { Dirs, killSpawned, NetNode, NODE_PORT, startNode } from './nodes.ts'

describe('bootstrap with retries', () => {
  let lab: Lab
  const dirs = new Dirs()
  const procs: Proc[] = []
  let pubHost: Host
  let joinerHost: Host

  beforeAll(async () => {
    lab = await Lab.create()
    pubHost = await lab.publicHost('pub1')
    joinerHost = await lab.publicHost('pub2')
  }, 60_000)

  afterAll(async () => {
    await Promise.all(procs.map(async p => p.stop('SIGKILL')))
    await killSpawned()
    await lab?.destroy()
    await dirs.cleanup()
  })

  it('joins once the bootstrap peer comes up', async () => {
    // learn the bootstrap node's peer id (its key stays in its data dir), then stop it
    const first = await startNode(pubHost, dirs, ['--name', 'late', '--capability', 'cap:late@1.0.0'])
    procs.push(first)
    const bootstrapAddr = first.tcpAddr
    expect(await first.stop('SIGTERM')).toEqual({ code: 0, signal: null })

    // the joiner starts while nothing answers at that address
    const joiner = await startNode(joinerHost, dirs, ['--bootstrap', bootstrapAddr])
    procs.push(joiner)
    expect(joiner.lines.find(l => l.event === 'started')?.peers).toBe(0)

    // the bootstrap node comes back on the same key and port
    const again = new NetNode(pubHost, first.dataDir, ['--listen', `/ip4/0.0.0.0/tcp/${NODE_PORT}`])
    procs.push(again)
    expect((await again.started()).agentId).toBe(first.agentId)

    const joined = await joiner.event('joined')
    expect(joined.peers).toBe(1)
    const found = await joiner.cli(['discover', '--capability', 'cap:late@1.0.0', '--wait', '30000', '--json'])
    expect(found.code, found.stderr).toBe(0)
    expect(found.json.cards.map((c: { agent_id: string }) => c.agent_id)).toEqual([first.agentId])
  }, 90_000)
})
