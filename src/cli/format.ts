/**
 * Text output of the remote commands: short, aligned, one thing per line.
 * (--json prints the API's documents as they are.) Every line is made
 * printable as a whole: names, reasons and messages come from other peers,
 * and a control character in one must not reach the operator's terminal.
 */
import type { AgentCard, CapabilityRef } from '../card/card.ts'
import type { CorrelationReplay, Transition } from '../events/replay.ts'
import type { AgentEvent, Run } from '../runlog/types.ts'
import { printable } from './printable.ts'

export function cap (c: CapabilityRef | null | undefined): string {
  return c === null || c === undefined ? '-' : `${c.capability_id}@${c.version}`
}

function table (rows: Array<[string, string]>): string {
  const width = Math.max(...rows.map(([k]) => k.length))
  return rows.map(([k, v]) => printable(`${k.padEnd(width)}  ${v}`)).join('\n')
}

function compact (v: unknown): string {
  const s = JSON.stringify(v)
  return s.length > 200 ? s.slice(0, 197) + '...' : s
}

export function cardText (agentId: string, card: AgentCard | null, webhook: string | null, serving: CapabilityRef[]): string {
  if (card === null) return table([['agent', agentId], ['card', 'none published (aap-mesh card set --name ... --capability id@version)']])
  const served = new Set(serving.map(cap))
  return table([
    ['agent', agentId],
    ['name', card.name],
    ['description', card.description === '' ? '-' : card.description],
    ['capabilities', card.capabilities.length === 0 ? '-' : card.capabilities.map(c => `${cap(c)}${served.has(cap(c)) ? ' (served by the API)' : ''}`).join(', ')],
    ['tags', card.tags.length === 0 ? '-' : card.tags.join(', ')],
    ['seq', String(card.seq)],
    ['expires', card.expires_at],
    ['webhook', webhook ?? '-']
  ])
}

export function cardsText (cards: AgentCard[]): string {
  if (cards.length === 0) return 'no agent found'
  return cards.map(c => printable(`${c.agent_id}  ${c.name}  ${c.capabilities.map(cap).join(',') || '-'}${c.tags.length > 0 ? `  [${c.tags.join(',')}]` : ''}`)).join('\n')
}

export function runText (run: Run): string {
  const rows: Array<[string, string]> = [
    ['run', run.run_id],
    ['state', run.state],
    ['agent', run.agent_id],
    ['correlation', run.correlation_id],
    ['capability', cap(run.capability)],
    ['delegator', run.delegator],
    ['created', run.created_at],
    ['updated', run.updated_at]
  ]
  if (run.parent_run !== null) rows.push(['parent run', run.parent_run])
  if (run.handoff_from !== null) rows.push(['handed from', `${run.handoff_from.run_id} (agent ${run.handoff_from.agent_id})`])
  if (run.handoff_to !== null) rows.push(['handed to', `${run.handoff_to.run_id} (agent ${run.handoff_to.agent_id})`])
  if (run.state === 'blocked') rows.push(['checkpoint', `${run.checkpoint_id ?? '-'}: ${run.block_reason ?? ''}`])
  if (run.output !== null) rows.push(['output', compact(run.output)])
  if (run.failure !== null) rows.push(['failure', `${run.failure.code}: ${run.failure.message}`])
  return table(rows)
}

export function runLine (run: Run, side?: string): string {
  return printable([side, run.state.padEnd(9), run.run_id, run.correlation_id, cap(run.capability)].filter(x => x !== undefined).join('  '))
}

export function eventLine (e: AgentEvent): string {
  const p = e.payload
  let what = ''
  if (e.type === 'run.started') what = `by ${String(p.delegator ?? '-')}${p.handoff_from !== undefined ? ' (handoff)' : ''}`
  else if (e.type === 'run.blocked') what = `checkpoint ${String(p.checkpoint_id ?? '-')}: ${String(p.reason ?? '')}`
  else if (e.type === 'run.progress' && p.transition === 'resume') what = `resumed ${String(p.checkpoint_id ?? '-')} with ${compact(p.resolution)}`
  else if (e.type === 'run.completed' && p.transition === 'handoff') what = `handed off to ${compact(p.handoff_to)}`
  else what = compact(p)
  return printable(`${e.at}  ${e.run_id}#${e.seq}  ${e.type}  ${what}`)
}

function transitionLine (t: Transition): string {
  switch (t.kind) {
    case 'delegate': return `delegate  ${t.run_id} to ${t.to}${t.by === null ? '' : ` by ${t.by}`}  ${cap(t.capability)}`
    case 'progress': return `progress  ${t.run_id}  ${compact(t.payload)}`
    case 'block': return `block     ${t.run_id}  checkpoint ${t.checkpoint_id ?? '-'}: ${t.reason ?? ''}`
    case 'resume': return `resume    ${t.run_id}  checkpoint ${t.checkpoint_id ?? '-'} resolved with ${compact(t.resolution)}`
    case 'handoff': return `handoff   ${t.from.run_id} -> ${t.to.run_id} (agent ${t.to.agent_id})`
    case 'complete': return `complete  ${t.run_id}  ${compact(t.output)}`
    case 'fail': return `fail      ${t.run_id}  ${compact(t.failure)}`
  }
}

export function replayText (r: CorrelationReplay): string {
  const lines = [`correlation ${r.correlation_id}: ${r.runs.length} run(s), ${r.events.length} event(s)`]
  for (const run of r.runs) {
    lines.push(`${'  '.repeat(run.depth)}run ${run.run_id} on ${run.executor} (${run.started_by}${run.orphan ? ', predecessor not held here' : ''}): ${run.state}`)
  }
  for (const t of r.transitions) lines.push(`${t.at}  ${transitionLine(t)}`)
  for (const f of r.forks) lines.push(`forked: run ${f.run_id} at seq ${f.seq}: ${f.executor} signed two events there; the successors they name are canceled`)
  // what the replay may be missing: said last, so it is not read past
  for (const u of r.unreached) lines.push(`not reached: ${u.agent_id} (${u.code}); what only it holds is missing here`)
  return lines.map(printable).join('\n')
}
