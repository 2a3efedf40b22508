/**
 * MESH-LINEAGE-SUBDELEGATION (only the executor of a run may delegate under it) was decided by its refusal half
 * alone: a target that refused every delegation with a parent_run, its parent run's own executor's too (so no run
 * anywhere could sub-delegate to it), passed it. The subdelegation-accepted check has the kit's receiver delegate
 * under a run it executes to the target: such a target now fails the clause.
 */
import { afterAll, describe, expect, it } from 'vitest'
import { DELEGATE_MAX_FRAME_BYTES, DELEGATE_PROTOCOL } from '../src/constants.ts'
import { UnauthorizedError } from '../src/errors.ts'
import { isWireDelegate } from '../src/runs/messages.ts'
import { method, serve, type CallContext } from '../src/wire/rpc.ts'
import type { Run } from '../src/runlog/types.ts'
import { runConformance } from '../src/conformance/runner.ts'
import { startTarget, type Target } from './fixtures/broken-targets.ts'

interface ExecutorInside {
  acceptDelegation: (req: unknown, ctx: CallContext) => Promise<Run>
  answered: (runId: string, delivered: boolean) => void
}

describe('sub-delegation authority, positive half', () => {
  let t: Target | undefined
  afterAll(async () => { await t?.node.stop() })

  it('a target that refuses every sub-delegation fails MESH-LINEAGE-SUBDELEGATION', async () => {
    t = await startTarget()
    const x = (t.node.runs as unknown as { executor: ExecutorInside }).executor
    let refused = 0
    await t.node.host.unhandle(DELEGATE_PROTOCOL)
    await serve(t.node.host, {
      protocol: DELEGATE_PROTOCOL,
      maxFrameBytes: DELEGATE_MAX_FRAME_BYTES,
      methods: {
        delegate: method(isWireDelegate, async (req, ctx) => {
          if (req.parent_run !== null && req.parent_run !== undefined) {
            refused++
            throw new UnauthorizedError('this node takes no sub-delegation, whoever sends it', { reason: 'not_parent_executor' })
          }
          return { run: await x.acceptDelegation(req, ctx) }
        }, (res, delivered) => { x.answered(res.run.run_id, delivered) })
      }
    })
    const r = await runConformance({ target: t.address })
    expect(refused).toBeGreaterThan(0)
    expect(r.checks.filter(c => c.status !== 'pass').map(c => c.id)).toEqual(['subdelegation-accepted'])
    expect(r.clauses.find(c => c.id === 'MESH-LINEAGE-SUBDELEGATION')?.status).toBe('fail')
  }, 300_000)
})
