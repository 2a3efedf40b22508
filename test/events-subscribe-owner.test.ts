/**
 * A subscription whose owner is not a valid agent id, or conflicts with the
 * owner this node already follows the correlation for, is refused before the
 * correlation is tracked: it joins no topic (and at MAX_CORRELATION_TOPICS
 * takes none from another correlation) and leaves nothing behind. It used to
 * be checked after the correlation was tracked on its gossip topic, which
 * was never let go.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import type { MeshNode } from '../src/node.ts'
import { rejectsWith, startMesh, stopAll, until } from './helpers.ts'

describe('the owner of a subscription is checked before the correlation is tracked', () => {
  let nodes: MeshNode[] = []
  beforeAll(async () => { nodes = await startMesh(2) })
  afterAll(async () => { await stopAll(nodes) })

  it('an owner that is not an agent id: AGENT_NOT_FOUND, and no topic joined', async () => {
    const [a] = nodes as [MeshNode]
    const err = await rejectsWith(a.events.subscribe('owner-bad', { owner: '1'.repeat(46) }), 'AGENT_NOT_FOUND')
    expect(err.message).toContain('not a valid agent id')
    expect(a.events.topics()).not.toContain('owner-bad')
    expect(a.events.participants('owner-bad')).toEqual([])
  })

  it('an owner that conflicts with the one followed: owner_conflict, and the correlation is let go once its subscriber leaves', async () => {
    const [a, b] = nodes as [MeshNode, MeshNode]
    const sub = await a.events.subscribe('owner-two', { owner: a.agentId })
    const err = await rejectsWith(a.events.subscribe('owner-two', { owner: b.agentId }), 'INVALID_REQUEST')
    expect(err.details?.reason).toBe('owner_conflict')
    sub.close()
    await until(() => !a.events.topics().includes('owner-two'), 'the correlation to be let go')
  })
})
