/**
 * Agent behaviour used by simulations: what a node's agent does with the work
 * it is given. The L2 driver only talks to the mesh; this is the other side.
 *
 * A first executor reports progress and keeps working; the coordinator raises
 * the task's checkpoint on the run (contract 3: `checkpoint.raise` ->
 * `agent.block` by the delegator), the agent is told (`ctx.onBlocked`), waits
 * for the resolution (`ctx.untilResumed`), reports again with what it was
 * told, then keeps working until ownership moves away (handoff) or a bound
 * passes. An executor that receives a handed-off run
 * reports progress and completes.
 */
import type { CapabilityRef, CardDraft } from '../card/card.ts'
import type { MeshNode } from '../node.ts'
import type { RunContext } from '../runs/runtime.ts'
import type { OpenCheckpoint, ResolvedCheckpoint } from '../runs/types.ts'

export const SIM_CAPABILITIES: CapabilityRef[] = [
  { capability_id: 'cap:code-review', version: '2.1.0' },
  { capability_id: 'cap:security-review', version: '1.0.0' },
  { capability_id: 'cap:summarize', version: '1.3.0' },
  { capability_id: 'cap:translate', version: '3.2.0' }
]

export const SIM_TAGS = ['typescript', 'python', 'eu', 'us', 'fast', 'careful']

/** How long a resumed first executor waits for the ownership transfer before it completes by itself. */
export const SIM_AWAIT_TRANSFER_MS = 30_000

/** How long a first executor waits for the coordinator's checkpoint before it goes on without one. */
export const SIM_AWAIT_CHECKPOINT_MS = 30_000

export function checkpointOf (taskId: string): string {
  return `cp-${taskId}-approve`
}

/** Card of the i-th agent: two capabilities and two tags, spread so each capability has many agents. */
export function simCard (i: number): CardDraft {
  const caps = [SIM_CAPABILITIES[i % SIM_CAPABILITIES.length], SIM_CAPABILITIES[(i + 1) % SIM_CAPABILITIES.length]]
    .filter((c): c is CapabilityRef => c !== undefined)
  const tags = [SIM_TAGS[i % SIM_TAGS.length], SIM_TAGS[(i + 3) % SIM_TAGS.length]].filter((t): t is string => t !== undefined)
  return { name: `sim-agent-${i}`, description: 'simulated agent', capabilities: caps, tags }
}

async function work (ctx: RunContext): Promise<Record<string, unknown> | undefined> {
  if (ctx.handedOff !== null) {
    await ctx.progress({ phase: 'took over', from: ctx.handedOff.from.run_id })
    return { result: 'done', by: ctx.run.agent_id, after_handoff: true }
  }
  // the coordinator raises the checkpoint by blocking the run, at any moment: the agent is told
  const told = watchCheckpoint(ctx)
  await ctx.progress({ phase: 'started' })
  const checkpoint = await told.blocked
  const resolved = await told.resumed
  await ctx.progress({
    phase: 'resumed',
    approved: resolved?.resolution.approved === true,
    checkpoint_id: checkpoint?.checkpoint_id ?? null,
    raised_by: checkpoint?.by ?? null
  })
  // a long-running agent: keep working until the owner transfers the task (abort) or a bound passes
  await new Promise<void>(resolve => {
    const t = setTimeout(resolve, SIM_AWAIT_TRANSFER_MS)
    ctx.signal.addEventListener('abort', () => { clearTimeout(t); resolve() }, { once: true })
  })
  return ctx.signal.aborted ? undefined : { result: 'done without transfer' }
}

/**
 * The run's first checkpoint and its resolution, as the handler is told of
 * them (undefined when none comes within SIM_AWAIT_CHECKPOINT_MS, or the run
 * ends first). Watches from the handler's start, so a block that lands
 * before the handler's first step is seen too.
 */
function watchCheckpoint (ctx: RunContext): { blocked: Promise<OpenCheckpoint | undefined>, resumed: Promise<ResolvedCheckpoint | undefined> } {
  const blocked = Promise.withResolvers<OpenCheckpoint | undefined>()
  const resumed = Promise.withResolvers<ResolvedCheckpoint | undefined>()
  if (ctx.blocked !== null) blocked.resolve(ctx.blocked)
  const offBlocked = ctx.onBlocked(cp => { blocked.resolve(cp) })
  const offResumed = ctx.onResumed(r => { resumed.resolve(r) })
  const giveUp = (): void => { blocked.resolve(undefined); resumed.resolve(undefined) }
  const timer = setTimeout(giveUp, SIM_AWAIT_CHECKPOINT_MS)
  ctx.signal.addEventListener('abort', giveUp, { once: true })
  void Promise.all([blocked.promise, resumed.promise]).then(() => {
    offBlocked()
    offResumed()
    clearTimeout(timer)
    ctx.signal.removeEventListener('abort', giveUp)
  })
  return { blocked: blocked.promise, resumed: resumed.promise }
}

/** Register the simulated behaviour for every capability on the node's card. */
export function installAgent (node: MeshNode, card: CardDraft): void {
  for (const cap of card.capabilities ?? []) node.runs.handle(cap, work)
}
