// The task view's lists: its events with their verdicts, its transitions, and
// the line saying how many older ones are left out (only the newest are shown).
import { esc, newest, shortId } from './timeline.js'

export const capText = (c) => c === null || c === undefined ? '—' : `${c.capability_id}@${c.version}`
const runShort = (id) => `<code>${esc(shortId(id.split(':')[1] ?? id))}</code>`

/** The line that says how many of `total` items are left out when only `max` are shown (`how`: drawn, listed). */
export function hiddenNote (total, max, how, tag = 'p') {
  const hidden = total - max
  return hidden <= 0 ? '' : `<${tag} class="more" data-hidden="${hidden}">${hidden} older of ${total} not ${how}: the newest ${max} are.</${tag}>`
}

/**
 * The events table of a timeline answer ({replay, verdicts, omitted}): the newest `max` events of those it
 * holds (the node left out `omitted.events` older ones).
 */
export function eventsTable (t, max) {
  const verdict = new Map(t.verdicts.map(v => [`${v.run_id} ${v.seq}`, v]))
  const shown = Math.min(max, t.replay.events.length)
  return `${hiddenNote(t.replay.events.length + (t.omitted?.events ?? 0), shown, 'listed')}<table class="grid events"><thead><tr><th>Time</th><th>Run</th><th>#</th><th>Event</th><th>Signature</th><th>Chain</th></tr></thead><tbody>${newest(t.replay.events, max).map(e => {
    const v = verdict.get(`${e.run_id} ${e.seq}`)
    return `<tr data-event="${esc(e.type)}" data-seq="${e.seq}">
      <td>${esc(new Date(e.at).toLocaleTimeString())}</td>
      <td>${runShort(e.run_id)}</td><td class="num">${e.seq}</td>
      <td>${esc(e.type)}${e.payload.transition ? ` <small>(${esc(e.payload.transition)})</small>` : ''}</td>
      <td><span class="verdict ${v?.signature === 'valid' ? 'good' : 'bad'}" title="${esc(e.signature)}">${v?.signature === 'valid' ? '✔ valid' : '✘ invalid'}</span></td>
      <td><span class="verdict ${v?.chain === 'linked' ? 'good' : 'bad'}" title="prev ${esc(e.prev ?? 'none (first event)')}">${v?.chain === 'linked' ? '✔ linked' : `✘ ${esc(v?.chain ?? '?')}`}</span></td></tr>`
  }).join('')}</tbody></table>`
}

/**
 * The list items of a replay's transitions: the newest `max` (`omitted`: older ones the node left out);
 * `label(agentId)` is the HTML naming an agent (its id beside any name).
 */
export function transitionItems (r, max, label, omitted = 0) {
  return hiddenNote(r.transitions.length + omitted, Math.min(max, r.transitions.length), 'listed', 'li') + newest(r.transitions, max).map(x => `<li data-kind="${esc(x.kind)}" data-run="${esc(x.run_id)}"${x.checkpoint_id ? ` data-checkpoint="${esc(x.checkpoint_id)}"` : ''}>
    <span class="kind ${esc(x.kind)}">${esc(x.kind)}</span> ${transitionText(x, label)}</li>`).join('')
}

function transitionText (x, label) {
  const run = runShort(x.run_id)
  switch (x.kind) {
    case 'delegate': return `${x.by === null || x.by === undefined ? '—' : label(x.by)} → ${label(x.to)} (${esc(capText(x.capability))})${x.parent_run ? ', sub-delegation' : ''}`
    case 'block': return `${run} checkpoint <code>${esc(x.checkpoint_id)}</code>: ${esc(x.reason ?? '')}`
    case 'resume': return `${run} checkpoint <code>${esc(x.checkpoint_id)}</code> resolved with <code>${esc(JSON.stringify(x.resolution))}</code>`
    case 'handoff': return `${label(x.from.agent_id)} → ${label(x.to.agent_id)}`
    case 'complete': return `${run} ${esc(JSON.stringify(x.output ?? {}).slice(0, 120))}`
    case 'fail': return `${run} ${esc(JSON.stringify(x.failure ?? {}).slice(0, 120))}`
    default: return `${run} ${esc(JSON.stringify(x.payload ?? {}).slice(0, 120))}`
  }
}

/** A peer's protocol chips, `/aap/` ones marked (the node lists them first), and how many more it announced of `total`. */
export function protocolChips (protocols, total = protocols.length) {
  const chips = protocols.map(p => `<span class="chip proto${p.startsWith('/aap/') ? ' aap' : ''}">${esc(p)}</span>`)
  return [...chips, ...(total > protocols.length ? [`<small class="more" data-more="${total - protocols.length}">and ${total - protocols.length} more</small>`] : [])].join(' ')
}

/** The node's counts at a glance: `counts` of GET /v1/runs (per side, per state) and the peers shown. */
export function statsHtml (counts, peers) {
  const count = (s) => counts.executing[s] + counts.delegated[s]
  const total = (side) => Object.values(counts[side]).reduce((a, b) => a + b, 0)
  const relayed = peers.filter(p => p.connections.some(c => c.type === 'relayed')).length
  return `<div class="stats">
    <div><b>${peers.length}</b><span>peers</span><small>${peers.length - relayed} direct · ${relayed} relayed</small></div>
    <div><b>${total('executing')}</b><span>runs here</span><small>executing on this node</small></div>
    <div><b>${total('delegated')}</b><span>delegated</span><small>from this node</small></div>
    <div class="${count('blocked') > 0 ? 'warn' : ''}"><b>${count('blocked')}</b><span>blocked</span><small>waiting for a decision</small></div>
    <div><b>${count('running')}</b><span>running</span><small>${count('completed')} completed · ${count('failed')} failed</small></div>
  </div>`
}
