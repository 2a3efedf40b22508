/**
 * The run protocols as the executor serves them: /aap/delegate (new runs),
 * /aap/control (the verbs on runs this node executes) and /aap/handoff (runs
 * handed over by another executor). Each request body is checked against its
 * schema (messages.ts) before the executor sees it. Each is answered in a
 * server span under the request's trace context (trace.ts); a new run keeps
 * the accepting span's context in its run.started payload.
 */
import type { Logger } from '../logger.ts'
import { executorOfRun } from '../runlog/event.ts'
import {
  CONTROL_MAX_FRAME_BYTES, CONTROL_PROTOCOL, DELEGATE_MAX_FRAME_BYTES, DELEGATE_PROTOCOL, HANDLER_TIMEOUT_MS, HANDOFF_MAX_FRAME_BYTES,
  HANDOFF_PROTOCOL, NESTED_CALL_MARGIN_MS
} from '../constants.ts'
import type { MeshHost } from '../wire/host.ts'
import { tagRunPeer } from '../wire/budget.ts'
import { takePeerRecord } from '../wire/peer-records.ts'
import { method, serve } from '../wire/rpc.ts'
import type { RunExecutor } from './executor.ts'
import { peerOf } from './peers.ts'
import { contextOf, incoming, inSpan, type TraceContext } from './trace.ts'
import { assertPayloadValueDepth, isBlock, isCancel, isControlHandoff, isExecutorLost, isGetRun, isGetVerdict, isResume, isWireDelegate, isWireHandoff, isWireHandoffConfirm, requestGrant, resumeCommand } from './messages.ts'

/**
 * What a handler's call to another agent may take of the handler's budget:
 * the callee's typed error (AGENT_NOT_FOUND) then reaches the caller before
 * the handler's own TIMEOUT.
 */
export function nestedCallLimit (handlerTimeoutMs: number = HANDLER_TIMEOUT_MS): number {
  return handlerTimeoutMs - Math.min(NESTED_CALL_MARGIN_MS, handlerTimeoutMs / 2)
}

/** Serve the three run protocols; returns the functions that stop serving them. */
export async function serveRunProtocols (host: MeshHost, x: RunExecutor, log: Logger, handlerTimeoutMs?: number): Promise<Array<() => Promise<void>>> {
  const limits = handlerTimeoutMs === undefined ? {} : { handlerTimeoutMs }
  const nestedMs = nestedCallLimit(handlerTimeoutMs)
  const agentId = host.peerId.toString()
  /** Answer a request in a server span under its trace context; `fn` gets the span's (the run's, for a new run). */
  const traced = async <T> (name: string, req: { trace?: TraceContext, run_id?: string }, fn: (trace: TraceContext | undefined) => Promise<T>): Promise<T> =>
    inSpan(name, 'server', contextOf(incoming(req.trace, log)), { 'aap.agent_id': agentId, ...(req.run_id === undefined ? {} : { 'aap.run_id': req.run_id }) }, fn)
  const withTrace = <R extends { trace?: TraceContext }> (req: R, trace: TraceContext | undefined): R => {
    const { trace: _given, ...rest } = req
    return (trace === undefined ? rest : { ...rest, trace }) as R
  }
  return [
    await serve(host, {
      protocol: DELEGATE_PROTOCOL,
      maxFrameBytes: DELEGATE_MAX_FRAME_BYTES,
      log,
      ...limits,
      methods: {
        delegate: method(isWireDelegate, async (req, ctx) => traced('aap.delegate.accept', req, async (trace) => {
          const run = await x.acceptDelegation(withTrace(req, trace), ctx)
          // the delegator's connection carries the run's control: the budget keeps it (budget.ts)
          tagRunPeer(host, ctx.peer, log)
          return { run }
        }),
          (res, delivered) => { x.answered(res.run.run_id, delivered) })
      }
    }),
    await serve(host, {
      protocol: CONTROL_PROTOCOL,
      maxFrameBytes: CONTROL_MAX_FRAME_BYTES,
      log,
      ...limits,
      methods: {
        block: method(isBlock, async (req, ctx) => traced('aap.control.block.handle', req, async () => ({ run: await x.applyRemote(req.run_id, ctx, { type: 'block', reason: req.reason, checkpoint_id: req.checkpoint_id }) }))),
        resume: method(isResume, async (req, ctx) => traced('aap.control.resume.handle', req, async () => {
          assertPayloadValueDepth(req.resolution, 'resolution')
          const grant = requestGrant(req, ctx.peer.toString(), x.side.signatures)
          return { run: await x.applyRemote(req.run_id, ctx, resumeCommand(req.resolution, req.checkpoint_id, grant)) }
        })),
        cancel: method(isCancel, async (req, ctx) => traced('aap.control.cancel.handle', req, async () => ({ run: await x.applyRemote(req.run_id, ctx, { type: 'cancel', reason: req.reason ?? 'canceled by delegator' }) }))),
        get_run: method(isGetRun, async (req) => traced('aap.control.get_run.handle', req, async () => ({ run: await x.localRun(req.run_id) }))),
        // liveness (protocols/liveness.md): a delegator tells the executor its verdict; an executor asks a delegator for one
        executor_lost: method(isExecutorLost, async (req, ctx) => ({ run: await x.adoptVerdict(req.run_id, req.verdict, ctx.peer.toString()) })),
        // `held` tells whether this node's delegation of the run is still live: only the run's executor, which asks it
        // to find its orphaned blocked runs (orphans.ts), gets it; anyone else who knows a run id could poll it to watch
        // this node's delegations end. The verdict is answered to any asker, as before
        get_verdict: method(isGetVerdict, async (req, ctx) => {
          const { verdict, held } = await x.verdictOn(req.run_id)
          // with a verdict, `held` tells its executor nothing more (the verdict ends the run), and executors older
          // than `held` refuse an answer that carries it: they would never take the verdict
          return verdict === null && ctx.peer.toString() === executorOfRun(req.run_id) ? { verdict, held } : { verdict }
        }),
        handoff: method(isControlHandoff, async (req, ctx) => traced('aap.control.handoff.handle', req, async () => {
          const run = await x.localRun(req.run_id)
          // the receiver's signed addresses, when the caller sent them: the dial to it then needs no DHT lookup
          if (req.to_record !== undefined) await takePeerRecord(host, peerOf(req.to_agent), req.to_record, log)
          // the receiver is called within this handler's budget (past it the caller is answered TIMEOUT, so nothing may commit later)
          const opts = { signal: ctx.signal, callTimeoutMs: nestedMs, ...(req.to_card === undefined ? {} : { card: req.to_card }) }
          return { run: await x.handoff(run.run_id, req.to_agent, req.context, x.actorOf(run, ctx.peer.toString()), opts) }
        }))
      }
    }),
    await serve(host, {
      protocol: HANDOFF_PROTOCOL,
      maxFrameBytes: HANDOFF_MAX_FRAME_BYTES,
      log,
      ...limits,
      methods: {
        handoff: method(isWireHandoff, async (req, ctx) => traced('aap.handoff.accept', req, async (trace) => ({ run: await x.acceptHandoff(withTrace(req, trace), ctx) })),
          (res, delivered) => { x.answered(res.run.run_id, delivered) }),
        confirm: method(isWireHandoffConfirm, async (req, ctx) => ({ run: await x.confirmHandoff(req, ctx) }))
      }
    })
  ]
}
