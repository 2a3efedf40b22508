// What a task's timeline answer says besides its events: the lineage facts
// (runs held under the task id that are not its owner's, participants that did
// not answer, forks), and the answer made whole again for drawing. The node
// sends each payload once (GET /v1/events/{id}/timeline, src/api/ui-timeline.ts):
// runs carry no events, transitions and checkpoints no payload parts of an
// event the answer holds; they are read back here from the events.
import { esc, shortId } from './timeline.js'

const runShort = (id) => `<code title="${esc(id)}">${esc(shortId(id.split(':')[1] ?? id))}</code>`

/** The answer `t` ({replay, verdicts, checked, omitted}) with each run's events and each transition's payload parts back in place. */
export function hydrate (t) {
  const r = t.replay
  const byKey = new Map(r.events.map(e => [`${e.run_id} ${e.seq}`, e]))
  const payloadAt = (runId, seq) => byKey.get(`${runId} ${seq}`)?.payload ?? null
  const obj = (v) => typeof v === 'object' && v !== null && !Array.isArray(v) ? v : null
  const runs = r.runs.map(run => ({ ...run, events: r.events.filter(e => e.run_id === run.run_id) }))
  const transitions = r.transitions.map(x => {
    const p = payloadAt(x.run_id, x.seq)
    if (p === null) return x
    switch (x.kind) {
      case 'progress': return { ...x, payload: p }
      case 'complete': return { ...x, output: obj(p.output) }
      case 'fail': return { ...x, failure: obj(p.failure) }
      case 'resume': return { ...x, resolution: obj(p.resolution) ?? {} }
      case 'block': return { ...x, reason: typeof p.reason === 'string' ? p.reason : null }
      default: return x
    }
  })
  const checkpoints = r.checkpoints.map(c => {
    const blocked = payloadAt(c.run_id, c.blocked_seq)
    const resumed = c.resumed_seq === null ? null : payloadAt(c.run_id, c.resumed_seq)
    return {
      ...c,
      reason: c.reason ?? (typeof blocked?.reason === 'string' ? blocked.reason : null),
      resolution: c.resolution ?? (resumed === null ? null : obj(resumed.resolution) ?? {})
    }
  })
  return { ...t, replay: { ...r, runs, transitions, checkpoints } }
}

/**
 * The task summary's lineage facts of replay `r`, as HTML: the runs held under the task id that are not its
 * owner's task (with why), the participants the replay asked that did not answer, and the forked runs.
 * `label(agentId)` is the HTML naming an agent (its id beside any name).
 */
export function lineageFacts (r, label) {
  const out = []
  if (r.owner !== null && r.owner !== undefined) out.push(`<p class="owner">Task of ${label(r.owner)}</p>`)
  if (r.rejected_runs.length > 0) {
    out.push(`<div class="rejected"><p class="bad">${r.rejected_runs.length} run(s) under this task id are not this task's:</p><ul>${r.rejected_runs.map(x =>
      `<li data-rejected-run="${esc(x.run_id)}" data-reason="${esc(x.reason)}">run ${runShort(x.run_id)}: <code>${esc(x.reason)}</code></li>`).join('')}</ul></div>`)
  }
  if (r.unreached.length > 0) {
    out.push(`<div class="unreached"><p class="bad">${r.unreached.length} participant(s) did not answer: what only they hold may be missing.</p><ul>${r.unreached.map(x =>
      `<li data-unreached="${esc(x.agent_id)}">${label(x.agent_id)}: <code>${esc(x.code)}</code></li>`).join('')}</ul></div>`)
  }
  if (r.forks.length > 0) {
    out.push(`<div class="forks"><p class="bad">${r.forks.length} run(s) forked: their executor signed two events at one seq.</p><ul>${r.forks.map(f =>
      `<li data-fork="${esc(f.run_id)}">run ${runShort(f.run_id)} at #${esc(f.seq)}, signed twice by ${label(f.executor)}</li>`).join('')}</ul></div>`)
  }
  return out.join('')
}
