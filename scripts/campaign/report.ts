/**
 * The figures of each campaign part and docs/reliability.md made of them.
 */
import { mkdir, writeFile } from 'node:fs/promises'
import { dirname } from 'node:path'
import os from 'node:os'

export interface Must {
  figure: string
  value: number
  /** The figure must be at most this. */
  max: number
}

export interface PartResult {
  name: string
  title: string
  built: boolean
  ran: boolean
  seconds?: number
  /** Figures to report, in order: name → value. */
  figures?: Array<[string, string | number]>
  musts?: Must[]
  notes?: string[]
  error?: string
}

export function passed (p: PartResult): boolean {
  return p.ran && p.error === undefined && (p.musts ?? []).every(m => m.value <= m.max)
}

function outcome (p: PartResult): string {
  if (!p.built) return 'not built'
  if (!p.ran) return 'not run in this invocation'
  if (p.error !== undefined) return `FAILED: ${p.error}`
  return passed(p) ? 'pass' : 'FAIL'
}

export function markdown (command: string, parts: PartResult[], started: Date): string {
  const lines: string[] = []
  lines.push('# Reliability: the fault and attack campaign (issue #18)', '')
  lines.push('Written by `scripts/campaign/main.ts`; do not edit by hand. Each part is bounded and')
  lines.push('self-stopping and runs against real nodes on this machine (child processes or in-process')
  lines.push('libp2p nodes on TCP 127.0.0.1). A "must" figure holds when it is at most its bound.', '')
  lines.push(`- command: \`${command}\``)
  lines.push(`- started: ${started.toISOString()}, machine: ${os.cpus().length} cores, ${Math.round(os.totalmem() / 1024 ** 3)} GiB, Node ${process.version}`, '')
  lines.push('| part | outcome | seconds | must figures |', '| --- | --- | --- | --- |')
  for (const p of parts) {
    const musts = (p.musts ?? []).map(m => `${m.figure}: ${m.value} (≤ ${m.max})`).join('; ')
    lines.push(`| ${p.name}: ${p.title} | ${outcome(p)} | ${p.seconds === undefined ? '' : p.seconds.toFixed(0)} | ${musts} |`)
  }
  for (const p of parts.filter(p => p.ran)) {
    lines.push('', `## ${p.name}: ${p.title}`, '')
    lines.push(`Outcome: **${outcome(p)}**.`, '')
    if ((p.figures ?? []).length > 0) {
      lines.push('| figure | value |', '| --- | --- |')
      for (const [k, v] of p.figures ?? []) lines.push(`| ${k} | ${v} |`)
    }
    for (const n of p.notes ?? []) lines.push('', n)
  }
  const missing = parts.filter(p => !p.built)
  if (missing.length > 0) {
    lines.push('', '## Not built', '')
    lines.push('These parts of issue #18 have no script yet; they have no figures, and nothing here claims them:', '')
    for (const p of missing) lines.push(`- ${p.name}: ${p.title}`)
  }
  return lines.join('\n') + '\n'
}

export async function writeReport (path: string, text: string): Promise<void> {
  await mkdir(dirname(path), { recursive: true })
  await writeFile(path, text)
}
