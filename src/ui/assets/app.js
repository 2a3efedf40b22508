// The node's browser view: plain ES module, no dependencies, served by the node.
// Every call goes to this node's own local API with the session cookie and the
// session's secret in the x-aap-ui header: browsers send the cookie to every
// port of 127.0.0.1, so the API takes no call on the cookie alone. The login
// hands the secret over in the URL fragment (#k=…, never sent to a server);
// it is moved at once to sessionStorage, which is per origin (so per port)
// and survives reloads of this tab.
import { rebuildNames } from './names.js'
import { coalesced } from './schedule.js'
import { follow } from './stream.js'
import { hydrate, lineageFacts } from './lineage.js'
import { capText, eventsTable, hiddenNote, protocolChips, statsHtml, transitionItems } from './tables.js'
import { drawTimeline, esc, shortId } from './timeline.js'

const RUNS_REFRESH_MS = 2000
const PEERS_REFRESH_MS = 5000
const TIMELINE_DEBOUNCE_MS = 150
const REPLAY_TIMEOUT_MS = 3000
/** A task's newest events drawn, at most: UI_EVENTS_SHOWN_MAX of src/ui/constants.ts (the page cannot import it). */
const EVENTS_SHOWN_MAX = 300
/** The fragment's name for the secret (UI_SECRET_FRAGMENT in src/ui/constants.ts) and the sessionStorage key. */
const SECRET_FRAGMENT = 'k'
const SECRET_KEY = 'aap-ui-secret'
const AGAIN = 'Open the view again with "aap-mesh ui" (it prints a new login link).'

const $ = (sel) => document.querySelector(sel)
const state = { node: null, card: null, runs: { executing: [], delegated: [], counts: { executing: { running: 0, blocked: 0, completed: 0, failed: 0 }, delegated: { running: 0, blocked: 0, completed: 0, failed: 0 } } }, names: new Map(), found: [], taskAgents: [], task: null, owner: null, source: null, timers: [] }

class ApiError extends Error {
  constructor (status, body) {
    super(body?.error?.message ?? `HTTP ${status}`)
    this.status = status
    this.code = body?.error?.code ?? 'INTERNAL'
    this.details = body?.error?.details ?? {}
  }
}

/** The secret of this tab's session: from the login's fragment (then cleared from the URL), else from sessionStorage. */
function takeSecret () {
  const m = new RegExp(`^#${SECRET_FRAGMENT}=([A-Za-z0-9_-]+)$`).exec(location.hash)
  if (m !== null) {
    sessionStorage.setItem(SECRET_KEY, m[1])
    history.replaceState(null, '', location.pathname + location.search)
  }
  return sessionStorage.getItem(SECRET_KEY)
}

const secret = takeSecret()
const authHeaders = () => ({ 'x-aap-ui': secret ?? '' })

/** The page stops calling the API: the session is gone (or this tab never had its secret). */
function lock (text) {
  for (const t of state.timers) clearInterval(t)
  state.timers = []
  if (state.source !== null) state.source.close()
  state.source = null
  notice(text, true)
  $('main').hidden = true
  $('#logout').hidden = true
  document.body.dataset.locked = 'true'
}

async function api (method, path, body) {
  const headers = authHeaders()
  if (body !== undefined) headers['content-type'] = 'application/json'
  const res = await fetch(path, { method, headers, credentials: 'same-origin', ...(body === undefined ? {} : { body: JSON.stringify(body) }) })
  const text = await res.text()
  const parsed = text === '' ? undefined : JSON.parse(text)
  if (res.status === 401) lock(`The session has ended. ${AGAIN}`)
  if (!res.ok) throw new ApiError(res.status, parsed)
  return parsed
}

async function logout () {
  try {
    await fetch('/ui/logout', { method: 'POST', headers: authHeaders(), credentials: 'same-origin' })
  } finally {
    sessionStorage.removeItem(SECRET_KEY)
    lock(`Logged out. ${AGAIN}`)
  }
}

function notice (text, error = false) {
  const n = $('#notice')
  n.textContent = text
  n.hidden = text === ''
  n.classList.toggle('error', error)
}

const seg = (s) => encodeURIComponent(s)

/** The names shown for agent ids, rebuilt from what the view shows now (names.js): the map never only grows. */
function refreshNames () {
  const keep = [...state.runs.executing, ...state.runs.delegated].flatMap(r => [r.agent_id, r.delegator])
  state.names = rebuildNames(state.names, {
    self: (state.card?.card ?? null) === null ? null : { agent_id: state.node.agent_id, name: state.card.card.name },
    peers: state.peers ?? [],
    found: state.found,
    keep: [...keep, ...state.taskAgents]
  })
}
const nameOf = (id) => state.names.get(id) ?? null
const agentLabel = (id) => {
  if (id === null || id === undefined) return '—'
  const n = nameOf(id)
  const me = state.node?.agent_id === id ? ' <span class="chip me">this node</span>' : ''
  return `${n === null ? '' : `<b>${esc(n)}</b> `}<code title="${esc(id)}">${esc(shortId(id))}</code>${me}`
}
const badge = (s) => `<span class="badge ${esc(s)}">${esc(s)}</span>`
const ago = (iso) => {
  const s = Math.max(0, Math.round((Date.now() - Date.parse(iso)) / 1000))
  return s < 60 ? `${s}s ago` : s < 3600 ? `${Math.floor(s / 60)}m ago` : `${Math.floor(s / 3600)}h ago`
}

// ---- node and peers -----------------------------------------------------------------------

async function loadNode () {
  const [node, card] = await Promise.all([api('GET', '/v1/node?addresses=true'), api('GET', '/v1/card')])
  state.node = node
  state.card = card
  refreshNames()
  $('#who-name').textContent = card.card?.name ?? 'no card yet'
  $('#who-id').textContent = shortId(node.agent_id)
  $('#who-id').title = node.agent_id
  const c = card.card
  $('#node-card .body').innerHTML = `
    <dl class="kv">
      <dt>Name</dt><dd>${c === null ? '<i>no card published</i>' : `<b>${esc(c.name)}</b>`}</dd>
      ${c?.description ? `<dt>Description</dt><dd>${esc(c.description)}</dd>` : ''}
      <dt>Agent id</dt><dd><code class="wrap">${esc(node.agent_id)}</code></dd>
      <dt>Capabilities</dt><dd>${(c?.capabilities ?? []).map(x => `<span class="chip cap">${esc(capText(x))}</span>`).join(' ') || '—'}</dd>
      <dt>Tags</dt><dd>${(c?.tags ?? []).map(t => `<span class="chip">${esc(t)}</span>`).join(' ') || '—'}</dd>
      <dt>Card</dt><dd>${c === null ? '—' : `seq ${esc(c.seq)}, valid until ${esc(new Date(c.expires_at).toLocaleString())}`}</dd>
      <dt>Serving</dt><dd>${card.serving.length === 0 ? 'nothing through the API' : `${card.serving.map(x => `<span class="chip cap">${esc(capText(x))}</span>`).join(' ')}${card.webhook ? ` via webhook <code>${esc(card.webhook)}</code>` : ' via the work stream'}`}</dd>
      <dt>Listening</dt><dd>${node.addresses.map(a => `<code class="wrap">${esc(a)}</code>`).join('<br>')}</dd>
      <dt>Version</dt><dd>aap-mesh ${esc(node.version)}</dd>
    </dl>`
  renderStats()
}

function renderStats () {
  $('#node-stats .body').innerHTML = statsHtml(state.runs.counts, state.peers ?? [])
}

async function loadPeers () {
  const { peers, total } = await api('GET', '/v1/peers')
  state.peers = peers
  refreshNames()
  $('#peers-total').textContent = total > peers.length ? `${peers.length} of ${total}` : String(total)
  $('#peers').innerHTML = peers.length === 0
    ? '<p class="empty">Not connected to any peer.</p>'
    : `<table class="grid"><thead><tr><th>Agent</th><th>Connection</th><th>Latency</th><th>Protocols</th></tr></thead><tbody>${peers.map(p => `
      <tr data-peer="${esc(p.agent_id)}">
        <td>${agentLabel(p.agent_id)}</td>
        <td>${p.connections.map(c => `<span class="chip conn ${esc(c.type)}">${esc(c.type)}</span> <small>${esc(c.transport)}, ${esc(c.direction)}, ${esc(ago(c.opened_at))}</small>`).join('<br>')}</td>
        <td class="num">${p.latency_ms === null ? '—' : `${p.latency_ms < 10 ? p.latency_ms.toFixed(1) : Math.round(p.latency_ms)} ms`}</td>
        <td class="protocols">${protocolChips(p.protocols, p.protocols_total)}</td>
      </tr>`).join('')}</tbody></table>`
  renderStats()
}

// ---- runs -----------------------------------------------------------------------------------

async function loadRuns () {
  // the newest runs of each side (one page each, from the run index) and the node's counts of all of them
  const [here, out] = await Promise.all([
    api('GET', '/v1/runs?side=executing&order=newest&limit=100'),
    api('GET', '/v1/runs?side=delegated&order=newest&limit=100')
  ])
  state.runs = { executing: here.executing, delegated: out.delegated, counts: out.counts }
  const rows = [
    ...state.runs.executing.map(r => ({ r, side: 'here' })),
    ...state.runs.delegated.map(r => ({ r, side: 'delegated' }))
  ].sort((a, b) => (b.r.updated_at > a.r.updated_at ? 1 : -1))
  const html = rows.length === 0
    ? '<p class="empty">No runs yet. Delegate one with the form.</p>'
    : `<table class="grid"><thead><tr><th>Task</th><th>Run</th><th>State</th><th>Side</th><th>Executor</th><th>Capability</th><th>Updated</th><th></th></tr></thead><tbody>${rows.map(({ r, side }) => `
      <tr data-run="${esc(r.run_id)}" data-state="${esc(r.state)}" data-side="${side}">
        <td><a href="#task/${esc(seg(r.correlation_id))}">${esc(r.correlation_id)}</a></td>
        <td><code title="${esc(r.run_id)}">${esc(shortId(r.run_id.split(':')[1] ?? r.run_id))}</code></td>
        <td>${badge(r.state)}${r.state === 'blocked' ? `<div class="cpn">checkpoint <code>${esc(r.checkpoint_id)}</code></div>` : ''}</td>
        <td><span class="chip side ${side}">${side === 'here' ? 'executing here' : 'delegated'}</span></td>
        <td>${agentLabel(r.agent_id)}</td>
        <td>${esc(capText(r.capability))}</td>
        <td>${esc(ago(r.updated_at))}</td>
        <td>${side === 'delegated' && (r.state === 'running' || r.state === 'blocked') ? cancelButton(r.run_id, r.correlation_id, r.agent_id, r.capability, 'Cancel') : ''}</td>
      </tr>`).join('')}</tbody></table>`
  $('#runs').innerHTML = html
  $('#node-runs').innerHTML = html.replaceAll('data-run=', 'data-node-run=')
  renderStats()
}

/**
 * A cancel button holds its run's id and the words naming it, both from its own row: the list is sorted again
 * every RUNS_REFRESH_MS, so the confirmation says which run (session 49's review: it said "Cancel this run?").
 */
function cancelButton (runId, task, agent, capability, text) {
  const what = `run ${shortId(runId.split(':')[1] ?? runId)} (${capText(capability)} on ${agentLabelText(agent)}) of task ${task}`
  return `<button class="small danger" data-cancel="${esc(runId)}" data-what="${esc(what)}">${esc(text)}</button>`
}

async function cancelRun (runId, what) {
  if (!window.confirm(`Cancel ${what ?? `run ${runId}`}?`)) return
  try {
    await api('POST', `/v1/runs/${seg(runId)}/cancel`, { reason: 'canceled from the node view' })
    notice('')
  } catch (err) {
    notice(`Cancel failed: ${err.code}: ${err.message}`, true)
  }
  await Promise.all([runs.now(), state.task === null ? null : timeline.now()])
}

// ---- delegate and discover ---------------------------------------------------------------

function parseCapability (text) {
  const at = text.lastIndexOf('@')
  if (at <= 0) return { capability_id: text.trim(), version: null }
  return { capability_id: text.slice(0, at).trim(), version: text.slice(at + 1).trim() }
}

async function delegate (ev) {
  ev.preventDefault()
  const f = ev.target
  const msg = $('#delegate-msg')
  msg.className = 'form-msg'
  try {
    const capability = parseCapability(f.capability.value)
    if (capability.version === null || capability.version === '' || capability.version === '*') throw new Error(`the capability needs an exact version, e.g. ${capability.capability_id}@1.0.0`)
    let input
    try { input = JSON.parse(f.input.value || '{}') } catch (err) { throw new Error(`the input is not JSON: ${err.message}`) }
    if (typeof input !== 'object' || input === null || Array.isArray(input)) throw new Error('the input must be a JSON object')
    let to = f.to_agent.value.trim()
    if (to === '') {
      msg.textContent = 'discovering…'
      const found = await api('GET', `/v1/discover?capability=${seg(f.capability.value.trim())}`)
      if (found.cards.length === 0) throw new Error(`no agent offers ${f.capability.value}`)
      to = found.cards[0].agent_id
    }
    const task = f.task_id.value.trim()
    const { run } = await api('POST', '/v1/delegate', { to_agent: to, task_id: task, capability, input })
    msg.textContent = `delegated: run ${shortId(run.run_id.split(':')[1] ?? run.run_id)} on ${agentLabelText(run.agent_id)}`
    msg.classList.add('ok')
    f.task_id.value = newTaskId()
    await runs.now()
  } catch (err) {
    msg.textContent = err instanceof ApiError ? `${err.code}: ${err.message}` : err.message
    msg.classList.add('error')
  }
}

const newTaskId = () => `task-${new Date().toISOString().slice(11, 19).replaceAll(':', '')}-${Math.random().toString(36).slice(2, 6)}`

async function discover (ev) {
  ev.preventDefault()
  const f = ev.target
  const q = new URLSearchParams()
  if (f.capability.value.trim() !== '') q.set('capability', f.capability.value.trim())
  if (f.tag.value.trim() !== '') q.append('tag', f.tag.value.trim())
  if (f.include_self.checked) q.set('include_self', 'true')
  const out = $('#found')
  out.innerHTML = '<p class="empty">looking…</p>'
  try {
    const { cards } = await api('GET', `/v1/discover?${q}`)
    state.found = cards.map(c => ({ agent_id: c.agent_id, name: c.name }))
    refreshNames()
    out.innerHTML = cards.length === 0 ? '<p class="empty">No agent found.</p>' : `<p class="found-note">${cards.length} agent(s), each card verified. Pick a capability to delegate to that agent.</p><div class="cards">${cards.map(c => `
      <div class="agent-card" data-agent="${esc(c.agent_id)}">
        <h3>${esc(c.name)}</h3><code title="${esc(c.agent_id)}">${esc(shortId(c.agent_id))}</code>
        <p>${esc(c.description ?? '')}</p>
        <div>${c.capabilities.map(x => `<button class="chip cap pick" data-to="${esc(c.agent_id)}" data-cap="${esc(capText(x))}" title="delegate to this agent">${esc(capText(x))} →</button>`).join(' ')}</div>
        <div>${c.tags.map(t => `<span class="chip">${esc(t)}</span>`).join(' ')}</div>
      </div>`).join('')}</div>`
  } catch (err) {
    out.innerHTML = `<p class="error">${esc(err.code ?? '')}: ${esc(err.message)}</p>`
  }
}

// ---- the task timeline ----------------------------------------------------------------------

/** `owner`: whose task it is, when two delegators started tasks under one id (the node asks: ambiguous_owner). */
function openTask (correlation, owner = null) {
  if (state.source !== null) state.source.close()
  state.source = null
  setLive(false)
  state.task = correlation
  state.owner = owner
  $('#task-form').task.value = correlation ?? ''
  $('#timeline').innerHTML = ''
  $('#events').innerHTML = ''
  $('#transitions').innerHTML = ''
  $('#checkpoints').innerHTML = ''
  $('#live').dataset.events = '0'
  $('#task-summary').innerHTML = correlation === null ? '<p class="empty">Open a task from the runs list, or type its id.</p>' : '<p class="empty">loading…</p>'
  if (correlation === null) return
  const hints = participantHints(correlation) + ownerHint()
  const changes = new Set(['run.started', 'run.progress', 'run.blocked', 'run.completed', 'run.failed'])
  state.source = follow(`/v1/events/${seg(correlation)}/stream?history=false${hints}`, authHeaders(), (type) => {
    if (type === 'ready') setLive(true)
    else if (type === 'error') setLive(false)
    else if (changes.has(type)) {
      // how many came since the task was opened: on the badge, for whoever wants to know (and for the tests)
      $('#live').dataset.events = String(Number($('#live').dataset.events ?? 0) + 1)
      timeline.soon()
      runs.soon()
    }
  }, () => setLive(false), () => lock(`The session has ended. ${AGAIN}`))
  setLive(false)
  timeline.now().catch(report)
}

function ownerHint () {
  return state.owner === null ? '' : `&owner=${seg(state.owner)}`
}

function participantHints (correlation) {
  const ids = new Set()
  for (const r of [...state.runs.executing, ...state.runs.delegated]) {
    if (r.correlation_id !== correlation) continue
    ids.add(r.agent_id)
    ids.add(r.delegator)
  }
  ids.delete(state.node?.agent_id)
  return [...ids].slice(0, 16).map(id => `&participant=${seg(id)}`).join('')
}

function setLive (on) {
  const live = $('#live')
  live.classList.toggle('off', !on)
  live.hidden = state.source === null
  live.title = on ? `following ${state.task} as its events come` : 'reconnecting…'
}

// the runs list and the open task's timeline (a full replay): each asked once at a time (schedule.js)
const debounced = { delayMs: TIMELINE_DEBOUNCE_MS, report, stopped: () => document.body.dataset.locked === 'true' }
const runs = coalesced(loadRuns, debounced)
const timeline = coalesced(refreshTimeline, debounced)

async function refreshTimeline () {
  const correlation = state.task
  if (correlation === null) return
  let t
  try {
    // the newest events only: the node leaves the older out and says how many (omitted)
    t = hydrate(await api('GET', `/v1/events/${seg(correlation)}/timeline?timeout_ms=${REPLAY_TIMEOUT_MS}&max_events=${EVENTS_SHOWN_MAX}${participantHints(correlation)}${ownerHint()}`))
  } catch (err) {
    if (state.task !== correlation) return
    $('#task-summary').innerHTML = `<p class="error">${esc(err.code ?? 'error')}: ${esc(err.message)}</p>`
    // whose task to show: one button per delegator that started one under this id (ambiguous_owner), or the one whose task the node follows
    // under it (owner_conflict), each named by its id (a card's name is its own choice); a network failure (a TypeError) has no details
    const owners = err.details?.reason === 'ambiguous_owner' ? err.details.owners : err.details?.reason === 'owner_conflict' ? [err.details.owner] : null
    if (Array.isArray(owners) && owners.every(o => typeof o === 'string')) {
      $('#task-summary').innerHTML += `<p>Show the task of: ${owners.map(o => `<button type="button" data-owner="${esc(o)}" title="${esc(o)}">${esc(agentLabelText(o))}</button>`).join(' ')}</p>`
      for (const b of document.querySelectorAll('#task-summary button[data-owner]')) b.addEventListener('click', () => { openTask(correlation, b.dataset.owner) })
    }
    return
  }
  if (state.task !== correlation) return
  const r = t.replay
  state.taskAgents = r.runs.flatMap(x => [x.executor, x.delegator])
  const { events: checked, passed } = t.checked
  const total = r.events.length + t.omitted.events
  $('#task-summary').innerHTML = (r.runs.length === 0
    ? '<p class="empty">No events of this task reached this node yet.</p>'
    : `<p><b>${esc(correlation)}</b>: ${r.runs.length} run(s), ${total} event(s);
       <span class="${passed === checked ? 'good' : 'bad'}">${passed} of ${checked} signatures and chain links verified</span></p>`) + lineageFacts(r, agentLabel)
  $('#timeline').innerHTML = hiddenNote(total, Math.min(r.events.length, EVENTS_SHOWN_MAX), 'drawn') + drawTimeline(t, { name: nameOf, max: EVENTS_SHOWN_MAX })
  renderCheckpoints(r)
  $('#events').innerHTML = eventsTable(t, EVENTS_SHOWN_MAX)
  $('#transitions').innerHTML = transitionItems(r, EVENTS_SHOWN_MAX, agentLabel, t.omitted.transitions)
}

/** An agent in plain text: its card's name (its own choice: a stranger may copy another's) beside its short id. */
const agentLabelText = (id) => {
  const n = nameOf(id)
  return n === null ? shortId(id) : `${n} ${shortId(id)}`
}

/**
 * The open checkpoints' forms, and a cancel button per live run delegated from here. A form stays while its
 * checkpoint (run, id, block) is open, and starts empty: redrawn on each event, it lost what the user typed,
 * and sent its default approval instead of a typed refusal (found by session 49's review).
 */
function renderCheckpoints (r) {
  const box = $('#checkpoints')
  if (box.querySelector(':scope > .cp-forms') === null) box.innerHTML = '<div class="cp-forms"></div><div class="cp-runs"></div>'
  const forms = box.querySelector(':scope > .cp-forms')
  const mine = new Set(state.runs.delegated.map(x => x.run_id))
  const open = r.checkpoints.filter(c => c.resumed_seq === null && r.runs.find(x => x.run_id === c.run_id)?.state === 'blocked')
  const live = r.runs.filter(x => !x.complete && mine.has(x.run_id))
  const want = new Map(open.map(c => [`${c.run_id} ${c.checkpoint_id ?? ''} ${c.blocked_seq}`, c]))
  for (const f of [...forms.children]) {
    const c = want.get(f.dataset.key)
    if (c === undefined) {
      f.remove()
      continue
    }
    want.delete(f.dataset.key)
    f.querySelector('.since').textContent = `since ${ago(c.blocked_at)}`
  }
  for (const [key, c] of want) {
    forms.insertAdjacentHTML('beforeend', `<form class="checkpoint" data-key="${esc(key)}" data-run="${esc(c.run_id)}" data-checkpoint="${esc(c.checkpoint_id)}">
      <div><span class="badge blocked">blocked</span> checkpoint <code>${esc(c.checkpoint_id)}</code> on run <code>${esc(shortId(c.run_id.split(':')[1] ?? c.run_id))}</code>: ${esc(c.reason ?? '')}
      <small class="since">since ${esc(ago(c.blocked_at))}</small></div>
      <textarea name="resolution" rows="2" placeholder='the resolution, a JSON object: {"approved": true} or {"approved": false}'></textarea>
      <button type="submit">Resolve checkpoint</button><span class="form-msg"></span></form>`)
  }
  box.querySelector(':scope > .cp-runs').innerHTML = live.map(x => `<div class="run-actions">Run <code>${esc(shortId(x.run_id.split(':')[1] ?? x.run_id))}</code> on ${agentLabel(x.executor)} is ${badge(x.state)} ${cancelButton(x.run_id, r.correlation_id, x.executor, x.capability, 'Cancel run')}</div>`).join('')
}

async function resolveCheckpoint (form) {
  const msg = form.querySelector('.form-msg')
  msg.classList.remove('error')
  try {
    let resolution
    const text = form.resolution.value.trim()
    if (text === '') throw new Error('write the resolution first (a JSON object, e.g. {"approved": false})')
    try { resolution = JSON.parse(text) } catch (err) { throw new Error(`the resolution is not JSON: ${err.message}`) }
    if (typeof resolution !== 'object' || resolution === null || Array.isArray(resolution)) throw new Error('the resolution must be a JSON object')
    // the form answers the checkpoint it shows: if the run was resumed elsewhere and blocked again meanwhile, the node
    // refuses this answer (INVALID_TRANSITION, checkpoint_mismatch) instead of resolving the new checkpoint with it
    const checkpoint = form.dataset.checkpoint ?? ''
    await api('POST', `/v1/runs/${seg(form.dataset.run)}/resume`, checkpoint === '' ? { resolution } : { resolution, checkpoint_id: checkpoint })
    msg.textContent = 'resolved'
    await Promise.all([timeline.now(), runs.now()])
  } catch (err) {
    msg.textContent = err instanceof ApiError ? `${err.code}: ${err.message}` : err.message
    msg.classList.add('error')
  }
}

// ---- wiring ----------------------------------------------------------------------------------

function route () {
  const hash = location.hash.slice(1)
  const [view, ...rest] = hash.split('/')
  const name = ['node', 'runs', 'discover', 'task'].includes(view) ? view : 'node'
  for (const v of document.querySelectorAll('.view')) v.hidden = v.id !== `view-${name}`
  for (const a of document.querySelectorAll('nav a')) a.classList.toggle('on', a.dataset.view === name)
  if (name === 'task') {
    let correlation = state.task
    try {
      if (rest.length > 0) correlation = decodeURIComponent(rest.join('/'))
    } catch (err) {
      // a malformed escape (#task/%E0) threw here and ended main() before the page's polling started
      notice(`The address names no task: ${err.message}`, true)
      return
    }
    if (correlation !== state.task || state.source === null) openTask(correlation ?? null)
  }
}

/** A failed background load: said in the notice line, unless the view is locked (which says why). */
function report (err) {
  if (document.body.dataset.locked !== 'true') notice(`${err.code ?? 'error'}: ${err.message}`, err.status === 401)
}

function every (ms, fn) {
  state.timers.push(setInterval(() => { fn().catch(report) }, ms))
}

async function main () {
  if (secret === null) {
    lock(`This tab has no key to the node's view (each login link opens it in one tab). ${AGAIN}`)
    return
  }
  $('#logout').addEventListener('click', () => { void logout() })
  $('#delegate-form').addEventListener('submit', delegate)
  $('#delegate-form').task_id.value = newTaskId()
  $('#discover-form').addEventListener('submit', discover)
  $('#task-form').addEventListener('submit', (ev) => {
    ev.preventDefault()
    const t = ev.target.task.value.trim()
    if (t !== '') location.hash = `#task/${seg(t)}`
  })
  document.body.addEventListener('click', (ev) => {
    const b = ev.target.closest('button')
    if (b?.dataset.cancel) void cancelRun(b.dataset.cancel, b.dataset.what)
    if (b?.dataset.to) {
      const f = $('#delegate-form')
      f.to_agent.value = b.dataset.to
      f.capability.value = b.dataset.cap
      location.hash = '#runs'
    }
  })
  document.body.addEventListener('submit', (ev) => {
    if (!ev.target.classList.contains('checkpoint')) return
    ev.preventDefault()
    void resolveCheckpoint(ev.target)
  })
  window.addEventListener('hashchange', route)
  await loadNode()
  await runs.now()
  route()
  await loadPeers()
  every(RUNS_REFRESH_MS, runs.now)
  every(PEERS_REFRESH_MS, loadPeers)
  document.body.dataset.ready = 'true'
}

main().catch(err => { if (document.body.dataset.locked !== 'true') notice(`Could not load the node: ${err.message}`, true) })
