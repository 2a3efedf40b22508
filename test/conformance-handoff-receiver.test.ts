/**
 * The kit only had the target send handoffs (to the kit's receiver), so a target that refused every handoff it
 * was asked to receive, the legitimate old executor's too, passed every handoff clause. The handoff-receive
 * check has the kit's receiver hand a run it executes to the target: such a target now fails them.
 */
import { afterAll, describe, expect, it } from 'vitest'
import { HANDOFF_MAX_FRAME_BYTES, HANDOFF_PROTOCOL } from '../src/constants.ts'
import { UnauthorizedError } from '../src/errors.ts'
import { isWireHandoff, isWireHandoffConfirm } from '../src/runs/messages.ts'
import { method, serve, type CallContext } from '../src/wire/rpc.ts'
import type { Run } from '../src/runlog/types.ts'
import { runConformance } from '../src/conformance/runner.ts'
import { startTarget, type Target } from './fixtures/broken-targets.ts'

interface ExecutorInside {
  confirmHandoff: (req: unknown, ctx: CallContext) => Promise<Run>
}

describe('handoff, the target as receiver', () => {
  let t: Target | undefined
  afterAll(async () => { await t?.node.stop() })

  it('a target that takes no handoff from anyone fails a handoff clause', async () => {
    t = await startTarget()
    const x = (t.node.runs as unknown as { executor: ExecutorInside }).executor
    let refused = 0
    await t.node.host.unhandle(HANDOFF_PROTOCOL)
    await serve(t.node.host, {
      protocol: HANDOFF_PROTOCOL,
      maxFrameBytes: HANDOFF_MAX_FRAME_BYTES,
      methods: {
        handoff: method(isWireHandoff, async () => {
          refused++
          throw new UnauthorizedError('this node takes no handoff, whoever sends it', { reason: 'not_executor' })
        }),
        // what it needs as a SENDER of handoffs is kept
        confirm: method(isWireHandoffConfirm, async (req, ctx) => ({ run: await x.confirmHandoff(req, ctx) }))
      }
    })
    const r = await runConformance({ target: t.address })
    expect(refused).toBeGreaterThan(0)
    expect(r.checks.filter(c => c.status !== 'pass').map(c => c.id)).toEqual(['handoff-receive'])
    for (const id of ['AAP-HANDOFF-NEW-RUN', 'AAP-HANDOFF-CORRELATION', 'C4-HANDOFF', 'C4-CORRELATION', 'MESH-HANDOFF-LINEAGE']) {
      expect(r.clauses.find(c => c.id === id)?.status, id).toBe('fail')
    }
  }, 300_000)
})
