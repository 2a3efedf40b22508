/**
 * An artifact id may be spelled in any multibase. The served-manifest cache was keyed by the id as the peer
 * spelled it, and a removal forgot only the canonical (base32) key: a peer that asked in base58btc went on
 * getting the chunks of a removed artifact that were still in chunks/ (shared with another artifact). And the
 * fetches under way were keyed by the caller's spelling, so two spellings ran two fetches of the same bytes.
 * Now both go by the canonical id. Real nodes; found by session 49's artifact review. A removal asked in
 * another base answered with the caller's spelling, which no listing uses (noticed in session 52).
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { CID } from 'multiformats/cid'
import { base58btc } from 'multiformats/bases/base58'
import { ARTIFACT_PROTOCOL } from '../src/constants.ts'
import type { MeshNode } from '../src/node.ts'
import { rawCall } from '../src/wire/raw.ts'
import { startMesh, stopAll } from './helpers.ts'

const MIB = 1024 * 1024
const octets = { media_type: 'application/octet-stream' }

describe('an artifact id in another base', () => {
  let nodes: MeshNode[] = []
  let holder: MeshNode, peer: MeshNode
  beforeAll(async () => {
    nodes = await startMesh(2)
    ;[holder, peer] = nodes as [MeshNode, MeshNode]
  })
  afterAll(async () => { await stopAll(nodes) })

  it('is not served after the artifact is removed', async () => {
    const first = new Uint8Array(MIB).fill(1)
    const both = new Uint8Array(2 * MIB)
    both.set(first, 0)
    both.fill(2, MIB)
    const x = await holder.artifacts.put(both, octets)
    // another artifact names chunk 0 of x: that chunk stays in chunks/ after x is removed
    await holder.artifacts.put(first, octets)
    const b58 = CID.parse(x.artifact).toString(base58btc)
    const chunk0 = async (artifact: string): Promise<unknown> => await rawCall(peer.host, holder.host.peerId, ARTIFACT_PROTOCOL, 'chunk', { artifact, index: 0 }, {})
    expect(await chunk0(b58)).toMatchObject({ ok: true })
    await holder.artifacts.remove(x.artifact)
    expect(await chunk0(x.artifact)).toMatchObject({ ok: false, error: { code: 'ARTIFACT_NOT_FOUND' } })
    expect(await chunk0(b58)).toMatchObject({ ok: false, error: { code: 'ARTIFACT_NOT_FOUND' } })
  })

  it('is removed under another spelling and the answer names it by its canonical id', async () => {
    const a = await holder.artifacts.put(new Uint8Array(4096).fill(5), octets)
    const b58 = CID.parse(a.artifact).toString(base58btc)
    const removed = await holder.artifacts.remove(b58)
    expect(removed.artifact).toBe(a.artifact)
    expect(removed.freed_bytes).toBeGreaterThan(0)
    expect(holder.artifacts.store.holds(a.artifact)).toBeUndefined()
  })

  it('joins the fetch of the same artifact under way, however the callers spell it', async () => {
    const bytes = new Uint8Array(3 * MIB).fill(9)
    const a = await holder.artifacts.put(bytes, octets)
    const b58 = CID.parse(a.artifact).toString(base58btc)
    const fetchedBefore = peer.artifacts.stats.fetched
    const servedBefore = holder.artifacts.stats.chunksServed
    const holders = [holder.agentId]
    const [m1, m2] = await Promise.all([
      peer.artifacts.fetch(a.artifact, { holders }),
      peer.artifacts.fetch(b58, { holders })
    ])
    expect(m1).toEqual(m2)
    expect(peer.artifacts.stats.fetched - fetchedBefore).toBe(1)
    // one fetch: each distinct chunk served once (the 3 chunks of 9s are one chunk, fetched once since session 56)
    expect(holder.artifacts.stats.chunksServed - servedBefore).toBe(new Set(m1.chunks).size)
    expect(peer.artifacts.store.holds(b58)).toEqual({ pinned: false })
  })
})
