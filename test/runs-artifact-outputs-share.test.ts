/**
 * Every artifact a handler made with ctx.artifact was pinned for good, whoever asked for the run: a stranger that
 * ran the capability a few times filled the store, and from then on every run's ctx.artifact and the operator's
 * own uploads failed STORAGE_FULL until someone removed artifacts by hand. Run outputs are pinned within their
 * share of the store now (src/artifacts/pins.ts). Here the store is bounded at 4 MiB and each run outputs 1 MiB.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import type { FilePart } from '../src/artifacts/types.ts'
import type { MeshNode } from '../src/node.ts'
import { nextEvent, startMesh, stopAll } from './helpers.ts'

const MIB = 1024 * 1024
const CAP = { capability_id: 'cap:review-art-render', version: '1.0.0' }

describe('a capability whose runs output artifacts, called by a stranger (runs side)', () => {
  let nodes: MeshNode[] = []
  let A: MeshNode, S: MeshNode
  beforeAll(async () => {
    nodes = await startMesh(2, { nodeOptions: i => i === 0 ? { artifactStoreMaxBytes: 4 * MIB + 64 * 1024 } : {} })
    ;[A, S] = nodes as [MeshNode, MeshNode]
    let n = 0
    A.runs.handle(CAP, async (ctx) => {
      const bytes = new Uint8Array(MIB).fill(++n)
      const part = await ctx.artifact(bytes, { media_type: 'application/octet-stream' })
      return { parts: [part] }
    })
    await A.publishCard({ name: 'render', capabilities: [CAP] })
  })
  afterAll(async () => { await stopAll(nodes) })

  it('does not lock the node out of its own store', async () => {
    const outcomes: string[] = []
    for (let i = 0; i < 6; i++) {
      const ended = nextEvent(A, e => (e.type === 'run.completed' || e.type === 'run.failed') && e.payload !== undefined && (e as { run_id?: string }).run_id !== undefined, 30_000)
      await S.delegate({ to_agent: A.agentId, task_id: `t-${i}`, capability: CAP, input: {} })
      const e = await ended
      outcomes.push(e.type === 'run.completed' ? 'completed' : `failed:${JSON.stringify(e.payload).slice(0, 120)}`)
    }
    const own = await A.artifacts.put(new Uint8Array(MIB).fill(200), { media_type: 'text/plain' }).then((p: FilePart) => 'stored', (e: { code?: string }) => e.code)
    expect(outcomes).toEqual(Array.from({ length: 6 }, () => 'completed'))
    expect(own).toBe('stored')
  }, 120_000)
})
