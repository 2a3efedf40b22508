// A task's timeline as SVG: one lane per run (replay order), events in time order
// left to right, a block and the resume that ends it drawn as one pause with the
// checkpoint and its resolution, handoffs and sub-delegations as links between
// lanes, turns and artifacts when events carry them, and a verdict mark on every
// event (its signature and its link to the event before it).

const LABEL_W = 250
const STEP = 70
const PAUSE_W = 230
const LANE_H = 78
const TOP = 34
const RIGHT = 70

export function esc (v) {
  return String(v ?? '').replace(/[&<>"']/g, c => `&#${c.charCodeAt(0)};`)
}

/**
 * The visible form of an id: its first and last 8 characters. Every agent id starts with the same
 * `12D3KooW` (an Ed25519 peer id's multihash prefix), so that part is left out: shown, it left 6
 * characters (35 bits) to tell agents apart, and a peer could grind a key whose id looks like another's.
 */
export const PEER_ID_PREFIX = '12D3KooW'
export function shortId (id) {
  let s = String(id ?? '')
  if (s.startsWith(PEER_ID_PREFIX) && s.length > PEER_ID_PREFIX.length + 16) s = s.slice(PEER_ID_PREFIX.length)
  return s.length <= 18 ? s : `${s.slice(0, 8)}…${s.slice(-8)}`
}

/**
 * The newest `max` of `items` (events or transitions: each has `at` and `seq`), by time then seq, in the
 * order they were given: a task may hold tens of thousands, and the view draws a bounded number.
 */
export function newest (items, max) {
  if (items.length <= max) return items
  const byTime = [...items].sort((a, b) => a.at < b.at ? -1 : a.at > b.at ? 1 : a.seq - b.seq)
  const keep = new Set(byTime.slice(-max))
  return items.filter(i => keep.has(i))
}

const clip = (s, n) => (s.length <= n ? s : `${s.slice(0, n - 1)}…`)
const runShort = (id) => shortId(id.split(':')[1] ?? id)

function kindOf (e) {
  if (e.type === 'run.progress' && e.payload.transition === 'resume') return 'resume'
  if (e.type === 'run.completed' && e.payload.transition === 'handoff') return 'handoff'
  return e.type.slice(4)
}

const LABEL = { started: 'started', progress: 'progress', blocked: 'blocked', resume: 'resumed', completed: 'completed', failed: 'failed', handoff: 'handed off' }

function turnOf (p) {
  if (typeof p.turn === 'number' || typeof p.turn === 'string') return String(p.turn)
  if (typeof p.turn === 'object' && p.turn !== null && (typeof p.turn.index === 'number' || typeof p.turn.role === 'string')) return [p.turn.index, p.turn.role].filter(x => x !== undefined).join(' ')
  return null
}

function artifactsOf (p) {
  if (Array.isArray(p.artifacts)) return p.artifacts.length
  if (p.artifact !== undefined && p.artifact !== null) return 1
  return 0
}

/**
 * An agent in SVG text: its name (`name(agentId)`, null when unknown; cut to `chars`) beside its short id, the
 * full id as the tooltip. A card's name is the agent's own choice (a stranger may copy another's): the id says who.
 */
function agentText (id, name, chars) {
  const n = name(id)
  return `${n === null || n === undefined ? '' : `${esc(clip(n, chars))} `}<tspan class="aid">${esc(shortId(id))}</tspan><title>${esc(id)}</title>`
}

/**
 * The SVG of a timeline answer ({replay, verdicts}); `name(agentId)` names agents (null: no name known), each
 * shown beside its id. Only the newest `max` events are drawn, with a lane for each run that has one of them
 * (the caller says how many are left out).
 */
export function drawTimeline (t, { name, max = Infinity }) {
  const r = t.replay
  if (r.runs.length === 0) return ''
  const order = new Map(r.runs.map((run, i) => [run.run_id, i]))
  const yOf = (runId) => TOP + (lane.get(runId) ?? 0) * LANE_H + LANE_H / 2
  const verdict = new Map(t.verdicts.map(v => [`${v.run_id} ${v.seq}`, v]))
  const key = (e) => `${e.run_id} ${e.seq}`

  // columns: every event in time order (lane order, then seq, breaks ties); a block widens the gap after it.
  // The run a handoff starts is created before the old run logs its handoff: it is placed after that.
  const at = new Map(r.events.map(e => [key(e), e.at]))
  for (const e of r.events) {
    const from = e.type === 'run.started' ? e.payload.handoff_from : undefined
    const done = from === undefined || from === null ? undefined : r.events.find(o => o.run_id === from.run_id && kindOf(o) === 'handoff')
    if (done !== undefined && done.at > e.at) at.set(key(e), done.at)
  }
  // and a run's own events stay in seq order
  for (const run of r.runs) {
    let prev = ''
    for (const e of run.events) {
      if (at.get(key(e)) < prev) at.set(key(e), prev)
      prev = at.get(key(e))
    }
  }
  const ordered = [...r.events].sort((a, b) => at.get(key(a)) < at.get(key(b)) ? -1 : at.get(key(a)) > at.get(key(b)) ? 1 : (order.get(a.run_id) - order.get(b.run_id)) || a.seq - b.seq).slice(-max)
  const drawn = new Set(ordered.map(key))
  // the runs with an event drawn, each with those events
  const runs = r.runs.map(run => ({ ...run, events: run.events.filter(e => drawn.has(key(e))) })).filter(run => run.events.length > 0)
  const lane = new Map(runs.map((run, i) => [run.run_id, i]))
  const x = new Map()
  let cx = LABEL_W + 40
  for (const e of ordered) {
    x.set(key(e), cx)
    cx += STEP + (e.type === 'run.blocked' ? PAUSE_W : 0)
  }
  const width = cx - STEP + RIGHT + (runs.some(run => !run.complete) ? 60 : 0)
  const height = TOP + runs.length * LANE_H + 14
  const out = []
  out.push(`<svg xmlns="http://www.w3.org/2000/svg" class="tl" width="${width}" height="${height}" viewBox="0 0 ${width} ${height}" role="img" aria-label="timeline of ${esc(r.correlation_id)}">`)
  out.push('<defs><marker id="arrow" viewBox="0 0 10 10" refX="9" refY="5" markerWidth="7" markerHeight="7" orient="auto-start-reverse"><path d="M0,0 L10,5 L0,10 z" class="arrowhead"/></marker>' +
    '<marker id="arrow-d" viewBox="0 0 10 10" refX="9" refY="5" markerWidth="7" markerHeight="7" orient="auto-start-reverse"><path d="M0,0 L10,5 L0,10 z" class="arrowhead delegate"/></marker></defs>')

  // time at the first and last column
  const first = ordered[0]
  const last = ordered.at(-1)
  out.push(`<text class="axis" x="${LABEL_W + 40}" y="16">${esc(new Date(first.at).toLocaleTimeString())}</text>`)
  const lastX = x.get(key(last))
  if (lastX - (LABEL_W + 40) > 160 && new Date(last.at).toLocaleTimeString() !== new Date(first.at).toLocaleTimeString()) out.push(`<text class="axis" x="${lastX}" y="16" text-anchor="end">${esc(new Date(last.at).toLocaleTimeString())}</text>`)

  // lanes
  runs.forEach((run, i) => {
    const y = yOf(run.run_id)
    const top = TOP + i * LANE_H
    out.push(`<rect class="lane ${i % 2 === 0 ? 'even' : 'odd'}" x="0" y="${top}" width="${width}" height="${LANE_H}"/>`)
    out.push(`<g class="lane-label" data-run="${esc(run.run_id)}"><text x="14" y="${y - 12}" class="who">${agentText(run.executor, name, 14)}</text>` +
      `<text x="14" y="${y + 6}" class="sub">${esc(clip(run.capability === null ? '' : `${run.capability.capability_id}@${run.capability.version}`, 30))}</text>` +
      `<text x="14" y="${y + 22}" class="sub">run ${esc(runShort(run.run_id))} · <tspan class="st ${esc(run.state)}">${esc(run.state)}</tspan>${run.started_by === 'handoff' ? ' · from handoff' : run.parent_run ? ' · sub-delegated' : ''}</text></g>`)
    const xs = run.events.map(e => x.get(key(e)))
    const x0 = Math.min(...xs)
    const x1 = Math.max(...xs)
    out.push(`<line class="track ${esc(run.state)}" x1="${x0}" y1="${y}" x2="${x1}" y2="${y}"/>`)
    if (!run.complete && run.state !== 'blocked') out.push(`<line class="track live" x1="${x1}" y1="${y}" x2="${x1 + 60}" y2="${y}"/>`)
  })

  // pauses: a block and the resume that ended it (or the open end, while blocked)
  for (const c of r.checkpoints) {
    const y = yOf(c.run_id)
    const xb = x.get(`${c.run_id} ${c.blocked_seq}`)
    if (xb === undefined) continue
    const xr = c.resumed_seq === null ? xb + STEP + PAUSE_W - 20 : x.get(`${c.run_id} ${c.resumed_seq}`)
    if (xr === undefined) continue
    const open = c.resumed_seq === null
    out.push(`<g class="pause${open ? ' open' : ''}" data-checkpoint="${esc(c.checkpoint_id)}">` +
      `<rect x="${xb}" y="${y - 11}" width="${Math.max(0, xr - xb)}" height="22" rx="11"/>` +
      `<text x="${(xb + xr) / 2}" y="${y + 4}" text-anchor="middle" class="cp"><tspan class="cpl">checkpoint</tspan> ${esc(clip(c.checkpoint_id ?? '?', 28))}</text>` +
      `<text x="${(xb + xr) / 2}" y="${y + 26}" text-anchor="middle" class="res">${open ? 'waiting for a decision' : esc(clip(`→ ${JSON.stringify(c.resolution)}`, 36))}</text>` +
      `<title>checkpoint ${esc(c.checkpoint_id)}: ${esc(c.reason ?? '')}${open ? ' (open)' : `\nresolved by ${esc([name(c.resolved_by ?? ''), c.resolved_by ?? '?'].filter(s => typeof s === 'string').join(' '))} with ${esc(JSON.stringify(c.resolution))}${c.attested === false ? ' (the executor\'s word: not signed by its resumer)' : ''}`}</title></g>`)
  }

  // links between lanes: handoffs, and sub-delegations (a run whose parent is in the replay)
  for (const tr of r.transitions) {
    if (tr.kind !== 'handoff') continue
    const from = r.events.find(e => e.run_id === tr.from.run_id && kindOf(e) === 'handoff')
    const to = r.events.find(e => e.run_id === tr.to.run_id && e.seq === 1)
    if (from === undefined || to === undefined || !drawn.has(key(from)) || !drawn.has(key(to))) continue
    out.push(link(x.get(key(from)), yOf(from.run_id), x.get(key(to)), yOf(to.run_id), 'handoff', 'handoff'))
  }
  for (const run of runs) {
    if (run.parent_run === null || !lane.has(run.parent_run) || run.started_by !== 'delegate') continue
    const start = r.runs[order.get(run.run_id)].events[0]
    const xs = start === undefined ? undefined : x.get(key(start))
    if (xs === undefined) continue
    out.push(link(xs - STEP / 2, yOf(run.parent_run), xs, yOf(run.run_id), 'delegate', 'sub-delegation'))
  }

  // events
  for (const e of ordered) {
    const ex = x.get(key(e))
    const y = yOf(e.run_id)
    const k = kindOf(e)
    const v = verdict.get(key(e))
    const good = v !== undefined && v.signature === 'valid' && v.chain === 'linked'
    const tip = `${e.type}${e.payload.transition ? ` (${e.payload.transition})` : ''} #${e.seq}\n${new Date(e.at).toLocaleString()}\nsignature: ${v?.signature ?? '?'} · chain: ${v?.chain ?? '?'}\n${JSON.stringify(e.payload).slice(0, 300)}`
    out.push(`<g class="ev ${k}" data-kind="${k}" data-seq="${e.seq}" data-run="${esc(e.run_id)}"><title>${esc(tip)}</title>`)
    if (k === 'handoff') out.push(`<rect x="${ex - 7}" y="${y - 7}" width="14" height="14" transform="rotate(45 ${ex} ${y})"/>`)
    else out.push(`<circle cx="${ex}" cy="${y}" r="${k === 'progress' ? 5 : 8}"/>`)
    if (k !== 'blocked' && k !== 'resume') out.push(`<text x="${ex}" y="${y + 26}" text-anchor="middle" class="evl">${esc(LABEL[k] ?? k)}</text>`)
    else out.push(`<text x="${ex}" y="${y - 16}" text-anchor="middle" class="evl">${esc(LABEL[k])}</text>`)
    out.push(`<g class="verdict ${good ? 'good' : 'bad'}"><circle cx="${ex + 9}" cy="${y - 9}" r="4.5"/><text x="${ex + 9}" y="${y - 6.5}" text-anchor="middle">${good ? '✓' : '!'}</text></g>`)
    const turn = turnOf(e.payload)
    const n = artifactsOf(e.payload)
    const extras = [turn === null ? null : `turn ${clip(turn, 12)}`, n === 0 ? null : `${n} artifact${n === 1 ? '' : 's'}`].filter(s => s !== null)
    if (extras.length > 0) out.push(`<text x="${ex}" y="${y + 39}" text-anchor="middle" class="turn">${esc(extras.join(' · '))}</text>`)
    if (e.type === 'run.started' && e.payload.handoff_from == null && (e.payload.parent_run == null || !lane.has(e.payload.parent_run)) && typeof e.payload.delegator === 'string') {
      out.push(`<text x="${ex}" y="${y - 16}" text-anchor="middle" class="from">from ${agentText(e.payload.delegator, name, 12)}</text>`)
    }
    out.push('</g>')
  }
  out.push('</svg>')
  return out.join('')
}

function link (x1, y1, x2, y2, cls, text) {
  const mx = (x1 + x2) / 2
  const d = `M${x1},${y1} C${mx},${y1} ${mx},${y2} ${x2 - 9},${y2}`
  const ly = (y1 + y2) / 2
  return `<g class="link ${cls}"><path d="${d}" marker-end="url(#${cls === 'delegate' ? 'arrow-d' : 'arrow'})"/>` +
    `<text x="${mx + 6}" y="${ly}" class="linkl">${esc(text)}</text></g>`
}
