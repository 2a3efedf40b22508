/**
 * A resume that names its checkpoint, sent to an executor from before
 * resumes could name one: such an executor refuses the request for its
 * `checkpoint_id` member (INVALID_REQUEST, additional properties), which
 * broke every resume the A2A gateway and the web view make (they always name
 * the checkpoint they showed). The delegator then reads the run and resumes
 * it without the member while it is blocked on that checkpoint, and refuses
 * (checkpoint_mismatch) when it is not. The older executor is a real node
 * whose /aap/control answers resumes as the older schema did.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { CONTROL_MAX_FRAME_BYTES, CONTROL_PROTOCOL } from '../src/constants.ts'
import { InvalidRequestError } from '../src/errors.ts'
import type { MeshNode } from '../src/node.ts'
import type { RunExecutor } from '../src/runs/executor.ts'
import { resumeCommand } from '../src/runs/messages.ts'
import { serve } from '../src/wire/rpc.ts'
import { namedGates, rejectsWith, startMesh, stopAll, until } from './helpers.ts'

const ASKS = { capability_id: 'cap:resume-older-executor', version: '1.0.0' }
/** The members an executor's ResumeRequest schema named before checkpoint_id, and before grants. */
const BEFORE_CHECKPOINTS = ['run_id', 'resolution', 'trace']
const BEFORE_GRANTS = [...BEFORE_CHECKPOINTS, 'checkpoint_id']

describe('runs: a resume naming its checkpoint, to an executor that predates it', () => {
  let nodes: MeshNode[] = []
  let A: MeshNode, B: MeshNode
  const gates = namedGates()
  let refusals = 0
  /** What B's schema names now: an executor from before checkpoint_id, or one from before grants. */
  let known = new Set(BEFORE_CHECKPOINTS)

  beforeAll(async () => {
    nodes = await startMesh(2)
    ;[A, B] = nodes as [MeshNode, MeshNode]
    B.runs.handle(ASKS, async (ctx) => {
      const answer = await ctx.block('go on?', 'cp-older')
      await gates.get(ctx.run.correlation_id).promise
      return { answer }
    })
    await B.publishCard({ name: 'older', capabilities: [ASKS] })
    // B answers control requests as an executor from before checkpoint_id: a member its schema did not name is refused
    const executor = (B.runs as unknown as { executor: RunExecutor }).executor
    await B.host.unhandle(CONTROL_PROTOCOL)
    await serve(B.host, {
      protocol: CONTROL_PROTOCOL,
      maxFrameBytes: CONTROL_MAX_FRAME_BYTES,
      methods: {
        resume: {
          handle: async (body, ctx) => {
            const req = body as { run_id: string, resolution: Record<string, unknown>, checkpoint_id?: string }
            if (Object.keys(req).some(k => !known.has(k))) {
              refusals++
              throw new InvalidRequestError('request body does not match its schema: must NOT have additional properties', { schema: 'aap:runs#/definitions/ResumeRequest', path: '' })
            }
            return { run: await executor.applyRemote(req.run_id, ctx, resumeCommand(req.resolution, req.checkpoint_id)) }
          }
        },
        get_run: { handle: async (body) => ({ run: await executor.localRun((body as { run_id: string }).run_id) }) }
      }
    })
  })
  afterAll(async () => {
    gates.openAll()
    await stopAll(nodes)
  })

  async function blocked (task: string): Promise<string> {
    const run = await A.delegate({ to_agent: B.agentId, task_id: task, capability: ASKS, input: {} })
    await until(async () => (await B.runs.getRun(run.run_id)).state === 'blocked', `run ${run.run_id} to block`)
    return run.run_id
  }

  it('resumes the run when it is blocked on the checkpoint named', async () => {
    const runId = await blocked('older-match')
    const before = refusals
    const run = await A.resume(runId, { approved: true }, { checkpointId: 'cp-older' })
    // refused with its grant, then with its checkpoint: read, then resumed without either
    expect(refusals).toBe(before + 2)
    expect(run.state).toBe('running')
    gates.get('older-match').resolve()
    await until(async () => (await B.runs.getRun(runId)).state === 'completed', 'the run to complete')
    expect((await B.runs.getRun(runId)).output).toEqual({ answer: { approved: true } })
  })

  it('refuses (checkpoint_mismatch) when the run is blocked on another checkpoint, and leaves it blocked', async () => {
    const runId = await blocked('older-mismatch')
    const err = await rejectsWith(A.resume(runId, { approved: true }, { checkpointId: 'cp-earlier' }), 'INVALID_TRANSITION')
    expect(err.details).toMatchObject({ reason: 'checkpoint_mismatch', open_checkpoint_id: 'cp-older' })
    expect((await B.runs.getRun(runId)).state).toBe('blocked')
  })

  it('to an executor that knows checkpoints but not grants, resends with the checkpoint and no grant', async () => {
    known = new Set(BEFORE_GRANTS)
    try {
      const runId = await blocked('older-grants')
      const before = refusals
      expect((await A.resume(runId, { approved: true }, { checkpointId: 'cp-older' })).state).toBe('running')
      expect(refusals).toBe(before + 1)
      // the checkpoint went with it: the executor checked it (a wrong one is refused by its state machine)
      const other = await blocked('older-grants-wrong')
      const err = await rejectsWith(A.resume(other, { approved: true }, { checkpointId: 'cp-wrong' }), 'INVALID_TRANSITION')
      expect(err.details).toMatchObject({ reason: 'checkpoint_mismatch' })
      // its event shows the resolution unattested: the executor's word alone
      await until(async () => (await A.events.replay('older-grants')).checkpoints[0]?.resumed_seq != null, 'A to hold the resume')
      expect((await A.events.replay('older-grants')).checkpoints[0]).toMatchObject({ checkpoint_id: 'cp-older', attested: false })
    } finally {
      known = new Set(BEFORE_CHECKPOINTS)
    }
  })
})
