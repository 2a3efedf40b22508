/**
 * `stalled-frame` (MESH-FRAME-STALL: a frame that has started must be complete within
 * FRAME_COMPLETION_TIMEOUT_MS) checked only that half a frame got an id: null INVALID_REQUEST, never when: a
 * target that gave a started frame 1 ms (so it refused any caller whose frame came in two TCP chunks) passed.
 * The check now also sends a valid delegate frame in two halves KIT_SPLIT_FRAME_GAP_MS apart and needs it taken.
 */
import { afterAll, describe, expect, it } from 'vitest'
import { DELEGATE_MAX_FRAME_BYTES, DELEGATE_PROTOCOL } from '../src/constants.ts'
import { isWireDelegate } from '../src/runs/messages.ts'
import { method, serve, type CallContext } from '../src/wire/rpc.ts'
import type { Run } from '../src/runlog/types.ts'
import { runConformance } from '../src/conformance/runner.ts'
import { startTarget, type Target } from './fixtures/broken-targets.ts'

interface ExecutorInside {
  acceptDelegation: (req: unknown, ctx: CallContext) => Promise<Run>
  answered: (runId: string, delivered: boolean) => void
}

describe('the conformance kit\'s stalled-frame check', () => {
  let t: Target | undefined
  afterAll(async () => { await t?.node.stop() })

  it('a target that gives a started frame 1 ms fails MESH-FRAME-STALL', async () => {
    t = await startTarget()
    const x = (t.node.runs as unknown as { executor: ExecutorInside }).executor
    // the node's own delegate logic, but a frame must be complete within 1 ms of its first byte
    await t.node.host.unhandle(DELEGATE_PROTOCOL)
    await serve(t.node.host, {
      protocol: DELEGATE_PROTOCOL,
      maxFrameBytes: DELEGATE_MAX_FRAME_BYTES,
      frameTimeoutMs: 1,
      methods: {
        delegate: method(isWireDelegate, async (req, ctx) => ({ run: await x.acceptDelegation(req, ctx) }), (res, delivered) => { x.answered(res.run.run_id, delivered) })
      }
    })

    const r = await runConformance({ target: t.address })
    const check = r.checks.find(c => c.id === 'stalled-frame')
    expect(check?.status).toBe('fail')
    expect(check?.message).toMatch(/two halves/)
    expect(r.clauses.find(c => c.id === 'MESH-FRAME-STALL')?.status).toBe('fail')
    // the rest of this target is the node's own: nothing else fails
    expect(r.checks.filter(c => c.status !== 'pass').map(c => c.id)).toEqual(['stalled-frame'])
  }, 300_000)
})
