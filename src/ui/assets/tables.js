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

/** The events table of a timeline answer ({replay, verdicts}): the newest `max` events. */
export function eventsTable (t, max) {
  const verdict = new Map(t.verdicts.map(v => [`${v.run_id} ${v.seq}`, v]))
  return `${hiddenNote(t.replay.events.length, max, 'listed')}<table class="grid events"><thead><tr><th>Time</th><th>Run</th><th>#</th><th>Event</th><th>Signature</th><th>Chain</th></tr></thead><tbody>${newest(t.replay.events, max).map(e => {
    const v = verdict.get(`${e.run_id} ${e.seq}`)
    return `<tr data-event="${esc(e.type)}" data-seq="${e.seq}">
      <td>${esc(new Date(e.at).toLocaleTimeString())}</td>
      <td>${runShort(e.run_id)}</td><td class="num">${e.seq}</td>
      <td>${esc(e.type)}${e.payload.transition ? ` <small>(${esc(e.payload.transition)})</small>` : ''}</td>
      <td><span class="verdict ${v?.signature === 'valid' ? 'good' : 'bad'}" title="${esc(e.signature)}">${v?.signature === 'valid' ? '✔ valid' : '✘ invalid'}</span></td>
      <td><span class="verdict ${v?.chain === 'linked' ? 'good' : 'bad'}" title="prev ${esc(e.prev ?? 'none (first event)')}">${v?.chain === 'linked' ? '✔ linked' : `✘ ${esc(v?.chain ?? '?')}`}</span></td></tr>`
  }).join('')}</tbody></table>`
}

/** The list items of a replay's transitions: the newest `max`; `label(agentId)` names agents. */
export function transitionItems (r, max, label) {
  return hiddenNote(r.transitions.length, max, 'listed', 'li') + newest(r.transitions, max).map(x => `<li data-kind="${esc(x.kind)}" data-run="${esc(x.run_id)}"${x.checkpoint_id ? ` data-checkpoint="${esc(x.checkpoint_id)}"` : ''}>
    <span class="kind ${esc(x.kind)}">${esc(x.kind)}</span> ${transitionText(x, label)}</li>`).join('')
}

function transitionText (x, label) {
  const run = runShort(x.run_id)
  switch (x.kind) {
    case 'delegate': return `${esc(label(x.by ?? ''))} → ${esc(label(x.to))} (${esc(capText(x.capability))})${x.parent_run ? ', sub-delegation' : ''}`
    case 'block': return `${run} checkpoint <code>${esc(x.checkpoint_id)}</code>: ${esc(x.reason ?? '')}`
    case 'resume': return `${run} checkpoint <code>${esc(x.checkpoint_id)}</code> resolved with <code>${esc(JSON.stringify(x.resolution))}</code>`
    case 'handoff': return `${esc(label(x.from.agent_id))} → ${esc(label(x.to.agent_id))}`
    case 'complete': return `${run} ${esc(JSON.stringify(x.output ?? {}).slice(0, 120))}`
    case 'fail': return `${run} ${esc(JSON.stringify(x.failure ?? {}).slice(0, 120))}`
    default: return `${run} ${esc(JSON.stringify(x.payload ?? {}).slice(0, 120))}`
  }
}
