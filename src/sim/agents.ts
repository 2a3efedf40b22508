/**
 * Agent behaviour used by simulations: what a node's agent does with the work
 * it is given. The L2 driver only talks to the mesh; this is the other side.
 *
 * A first executor reports progress, raises a checkpoint and waits for its
 * resolution, reports again, then keeps working until ownership moves away
 * (handoff) or a bound passes. An executor that receives a handed-off run
 * reports progress and completes.
 */
import type { CapabilityRef, CardDraft } from '../card/card.ts'
import type { MeshNode } from '../node.ts'
import type { RunContext } from '../runs/runtime.ts'

export const SIM_CAPABILITIES: CapabilityRef[] = [
  { capability_id: 'cap:code-review', version: '2.1.0' },
  { capability_id: 'cap:security-review', version: '1.0.0' },
  { capability_id: 'cap:summarize', version: '1.3.0' },
  { capability_id: 'cap:translate', version: '3.2.0' }
]

export const SIM_TAGS = ['typescript', 'python', 'eu', 'us', 'fast', 'careful']

/** How long a resumed first executor waits for the ownership transfer before it completes by itself. */
export const SIM_AWAIT_TRANSFER_MS = 30_000

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
  await ctx.progress({ phase: 'started' })
  const resolution = await ctx.block('needs approval', checkpointOf(ctx.run.correlation_id))
  await ctx.progress({ phase: 'resumed', approved: resolution.approved === true })
  // a long-running agent: keep working until the owner transfers the task (abort) or a bound passes
  await new Promise<void>(resolve => {
    const t = setTimeout(resolve, SIM_AWAIT_TRANSFER_MS)
    ctx.signal.addEventListener('abort', () => { clearTimeout(t); resolve() }, { once: true })
  })
  return ctx.signal.aborted ? undefined : { result: 'done without transfer' }
}

/** Register the simulated behaviour for every capability on the node's card. */
export function installAgent (node: MeshNode, card: CardDraft): void {
  for (const cap of card.capabilities ?? []) node.runs.handle(cap, work)
}
