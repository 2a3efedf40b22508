/**
 * Guards the frame completion timer of the responder (src/wire/responder.ts armPartial, onMessage): it bounds
 * ONE frame ("a frame that has started must be complete within FRAME_COMPLETION_TIMEOUT_MS"). It was armed when a
 * chunk ended inside a frame and cleared only when a chunk ended exactly on a frame boundary, so a caller whose
 * chunks kept ending mid-frame was cut off as "truncated" although every frame completed in time (a review).
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import type { MeshNode } from '../src/node.ts'
import { encodeFrame, serve } from '../src/wire/rpc.ts'
import { RawWire } from './fixtures/raw-wire.ts'
import { startMesh, stopAll } from './helpers.ts'

const PROTO = '/aap-test/partial-frames/0.1.0'
const FRAME_TIMEOUT_MS = 1_000
const WORK_MS = 40

describe('the frame completion timer measures one frame', () => {
  let nodes: MeshNode[] = []
  let A: MeshNode, B: MeshNode
  let unserve: () => Promise<void>
  beforeAll(async () => {
    nodes = await startMesh(2)
    ;[A, B] = nodes as [MeshNode, MeshNode]
    unserve = await serve(B.host, {
      protocol: PROTO,
      maxFrameBytes: 4096,
      frameTimeoutMs: FRAME_TIMEOUT_MS,
      // a little work per request (the handler's own time, not a sleep of the test)
      methods: { work: { handle: async (body) => new Promise<object>(resolve => { setTimeout(() => { resolve(body as object) }, WORK_MS) }) } }
    })
  })
  afterAll(async () => {
    await unserve()
    await stopAll(nodes)
  })

  it('does not call a stream truncated when its chunks end mid-frame but every frame completes in time', async () => {
    const wire = await RawWire.open(A.host, B.host.peerId, PROTO)
    try {
      const N = 40 // 40 x ~40 ms: past FRAME_TIMEOUT_MS in all, each frame done in ~40 ms (a loaded machine has the rest as margin)
      const frames = Array.from({ length: N + 1 }, (_, i) => encodeFrame({ id: i + 1, type: 'work', body: { i } }))
      const half = (f: Uint8Array): number => Math.floor(f.byteLength / 2)
      const join = (a: Uint8Array, b: Uint8Array): Uint8Array => { const o = new Uint8Array(a.byteLength + b.byteLength); o.set(a); o.set(b, a.byteLength); return o }
      // frame 1 whole and the first half of frame 2
      wire.write(join(frames[0]!, frames[1]!.subarray(0, half(frames[1]!))))
      const started = Date.now()
      for (let i = 1; i <= N; i++) {
        expect(await wire.next()).toMatchObject({ id: i, ok: true })
        // the rest of frame i+1 and the first half of frame i+2: each frame completes one handler time after it started
        const rest = frames[i]!.subarray(half(frames[i]!))
        wire.write(i < N ? join(rest, frames[i + 1]!.subarray(0, half(frames[i + 1]!))) : rest)
      }
      expect(await wire.next()).toMatchObject({ id: N + 1, ok: true })
      // the run of partial chunks lasted longer than one frame may take
      expect(Date.now() - started).toBeGreaterThan(FRAME_TIMEOUT_MS)
    } finally {
      wire.abort()
    }
  })

  it('still ends a stream whose one frame does not complete in time', async () => {
    const wire = await RawWire.open(A.host, B.host.peerId, PROTO)
    try {
      const frames = [encodeFrame({ id: 1, type: 'work', body: {} }), encodeFrame({ id: 2, type: 'work', body: {} })]
      // a whole frame, then half of one whose end never comes
      const head = new Uint8Array(frames[0]!.byteLength + 5)
      head.set(frames[0]!)
      head.set(frames[1]!.subarray(0, 5), frames[0]!.byteLength)
      wire.write(head)
      const answers = [await wire.next(), await wire.next()]
      expect(answers).toContainEqual(expect.objectContaining({ id: 1, ok: true }))
      expect(answers).toContainEqual(expect.objectContaining({ id: null, ok: false, error: expect.objectContaining({ details: expect.objectContaining({ reason: 'truncated' }) }) }))
    } finally {
      wire.abort()
    }
  })
})
