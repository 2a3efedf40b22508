/** The kit's report: a terminal table, a JSON file and a Markdown file, all from one ConformanceReport. */
import { mkdir, writeFile } from 'node:fs/promises'
import { dirname } from 'node:path'
import { KIT_MESSAGE_MAX_CHARS, KIT_RUNS_PER_DELEGATOR_NEEDED } from './constants.ts'
import { clean } from './kit.ts'
import type { CheckResult, ClauseResult, ConformanceReport } from './runner.ts'

/** How a clause's or a check's status is written, in every report and on the terminal. */
export const MARK: Record<ClauseResult['status'], string> = { pass: 'pass', fail: 'FAIL', inconclusive: 'UNDECIDED', 'n/a': 'n/a' }
const MARK_WIDTH = Math.max(...Object.values(MARK).map(m => m.length))

/** The check's result as the report writes it. */
function checkMark (c: CheckResult): string {
  return c.status === 'pass' ? MARK.pass : `${MARK[c.status]}: ${c.message ?? ''}`
}

/** Evidence of a clause in one line: its checks' failure messages, run ids, event seqs, error frames. */
export function evidenceOf (clause: ClauseResult, checks: Map<string, CheckResult>, max = 240): string {
  if (clause.status === 'n/a') return clause.notApplicable ?? ''
  const parts: string[] = []
  for (const id of clause.checks) {
    const c = checks.get(id)
    if (c === undefined) continue
    if (c.status !== 'pass') parts.push(`${id}: ${c.message ?? ''}`)
  }
  for (const id of clause.checks) {
    const c = checks.get(id)
    if (c === undefined) continue
    const ev = c.evidence
    const bits = [
      ev.runs.length > 0 ? `runs ${ev.runs.slice(0, 3).map(r => `…${r.slice(-10)}`).join(' ')}` : '',
      ev.events.length > 0 ? `events ${ev.events.slice(0, 4).join('; ')}` : '',
      ev.frames.length > 0 ? `frame ${ev.frames[0] ?? ''}` : ''
    ].filter(b => b !== '')
    if (bits.length === 0 && ev.notes.length > 0) bits.push(ev.notes[0] ?? '')
    if (bits.length > 0) parts.push(`${id}: ${bits.join(', ')}`)
  }
  // the report's checks are cleaned already; a report read back from elsewhere is not
  return clean(parts.join(' | ').replace(/\s+/g, ' '), max)
}

export function terminalTable (r: ConformanceReport, width = 120): string {
  const checks = new Map(r.checks.map(c => [c.id, c]))
  const idW = Math.max(...r.clauses.map(c => c.id.length))
  const lines = [`${'clause'.padEnd(idW)}  level     ${'result'.padEnd(MARK_WIDTH)}  evidence`]
  lines.push('-'.repeat(Math.min(width, idW + 30)))
  for (const c of r.clauses) {
    const ev = evidenceOf(c, checks, Math.max(40, width - idW - 14 - MARK_WIDTH))
    lines.push(`${c.id.padEnd(idW)}  ${c.level.padEnd(8)}  ${MARK[c.status].padEnd(MARK_WIDTH)}  ${ev}`)
  }
  const s = r.summary
  lines.push('')
  lines.push(`${r.clauses.length} clauses: ${s.pass} pass, ${s.fail} fail, ${s.inconclusive} undecided, ${s.not_applicable} not applicable; ` +
    `${r.checks.filter(c => c.status === 'pass').length}/${r.checks.length} checks passed against ${clean(r.target)}`)
  if (s.must_failed.length > 0) lines.push(`MUST clauses failed: ${s.must_failed.join(', ')}`)
  if (s.should_failed.length > 0) lines.push(`SHOULD clauses failed: ${s.should_failed.join(', ')}`)
  if (s.must_inconclusive.length > 0) lines.push(`MUST clauses undecided: ${s.must_inconclusive.join(', ')}. ${undecidedCause()}`)
  return lines.join('\n')
}

/** Why clauses are undecided, and what the target needs to decide them. */
function undecidedCause (): string {
  return `The UNDECIDED checks say why: the target refused runs for capacity (the kit needs ${KIT_RUNS_PER_DELEGATOR_NEEDED} concurrent runs per delegator), ` +
    'or it answered a read a check needs with an error frame (a busy target: run the kit again).'
}

/** A Markdown table cell: controls escaped, at most `max` characters, no pipe or line break that would end the cell. */
function cell (text: string, max = Number.MAX_SAFE_INTEGER): string {
  return clean(text, max).replace(/\|/g, '\\|')
}

export function markdown (r: ConformanceReport): string {
  const checks = new Map(r.checks.map(c => [c.id, c]))
  const out: string[] = []
  out.push('# AAP conformance report', '')
  out.push(`Target: \`${r.target}\`${r.target_address === null ? '' : ` at \`${r.target_address}\``}  `)
  out.push(`Kit: ${r.kit}, run ${r.started_at} .. ${r.finished_at}  `)
  if (r.command !== null) out.push(`Command: \`${r.command}\`  `)
  const s = r.summary
  out.push(`Result: ${r.clauses.length} clauses, ${s.pass} pass, ${s.fail} fail, ${s.inconclusive} undecided, ${s.not_applicable} not applicable; ` +
    `${r.checks.filter(c => c.status === 'pass').length} of ${r.checks.length} checks passed.` +
    (s.must_failed.length > 0 ? ` MUST failed: ${s.must_failed.join(', ')}.` : '') +
    (s.must_inconclusive.length > 0 ? ` MUST undecided: ${s.must_inconclusive.join(', ')}. ${undecidedCause()}` : '') +
    (s.must_failed.length === 0 && s.must_inconclusive.length === 0 ? ' Every MUST passed.' : ''), '')
  out.push('Clauses and checks are described in [protocols/conformance.md](../protocols/conformance.md). To reproduce: start a target ' +
    'that provides the conformance agent (`aap-mesh start --conformance-agent --listen /ip4/127.0.0.1/tcp/0`), then run the command ' +
    'above with the address it prints (`npm run conformance -- <multiaddr>` from a checkout).', '')
  out.push('## Clauses', '')
  out.push('| clause | level | result | text | checks | evidence |', '|---|---|---|---|---|---|')
  for (const c of r.clauses) {
    out.push(`| ${c.id} | ${c.level} | ${MARK[c.status]} | ${cell(c.text)} | ${c.checks.join(', ') || '-'} | ${cell(evidenceOf(c, checks, 400))} |`)
  }
  out.push('', '## Checks', '')
  out.push('| check | result | ms | what | runs | events | error frames | notes |', '|---|---|---|---|---|---|---|---|')
  for (const c of r.checks) {
    const ev = c.evidence
    out.push(`| ${c.id} | ${cell(checkMark(c), KIT_MESSAGE_MAX_CHARS)} | ${c.ms} | ${cell(c.title)} | ${ev.runs.map(x => `\`${x}\``).join('<br>')} | ${cell(ev.events.slice(0, 12).join('<br>'))} | ${cell(ev.frames.slice(0, 6).join('<br>'))} | ${cell(ev.notes.join('<br>'))} |`)
  }
  if (r.pending_clauses.length > 0) {
    out.push('', '## Not yet in the catalog', '')
    for (const p of r.pending_clauses) out.push(`- ${p}`)
  }
  out.push('')
  return out.join('\n')
}

export async function writeReports (r: ConformanceReport, files: { json?: string, markdown?: string }): Promise<void> {
  if (files.json !== undefined) {
    await mkdir(dirname(files.json), { recursive: true })
    await writeFile(files.json, `${JSON.stringify(r, null, 2)}\n`)
  }
  if (files.markdown !== undefined) {
    await mkdir(dirname(files.markdown), { recursive: true })
    await writeFile(files.markdown, markdown(r))
  }
}
