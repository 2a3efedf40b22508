/**
 * protocols/conformance.md is what another implementation works from: its
 * clause table is the catalog (src/conformance/clauses.ts), its check table
 * names every check the kit runs, and every limit it names is the constant's
 * value. The catalog itself names only checks that exist.
 */
import { readFileSync } from 'node:fs'
import { describe, expect, it } from 'vitest'
import { CLAUSES } from '../src/conformance/clauses.ts'
import * as constants from '../src/conformance/constants.ts'
import { AAP_ERROR_CODES, EXTENSION_ERROR_CODES } from '../src/errors.ts'
import { RUN_FAILURE_CODES } from '../src/runlog/types.ts'
import { ALL_CHECKS, decideClauses, type CheckResult } from '../src/conformance/runner.ts'

const text = readFileSync(new URL('../protocols/conformance.md', import.meta.url), 'utf8')
const UNIT: Record<string, number> = { ms: 1, s: 1000 }
const values = constants as unknown as Record<string, unknown>
const codes = new Set<string>([...AAP_ERROR_CODES, ...EXTENSION_ERROR_CODES, ...RUN_FAILURE_CODES])

function section (title: string): string {
  const start = text.indexOf(`\n## ${title}\n`)
  expect(start, title).toBeGreaterThan(0)
  const end = text.indexOf('\n## ', start + 4)
  return text.slice(start, end === -1 ? undefined : end)
}

describe('the conformance catalog and protocols/conformance.md', () => {
  it('every clause names checks the kit has, and every check decides some clause', () => {
    const ids = new Set(ALL_CHECKS.map(c => c.id))
    expect(ids.size).toBe(ALL_CHECKS.length)
    expect(new Set(CLAUSES.map(c => c.id)).size).toBe(CLAUSES.length)
    for (const c of CLAUSES) {
      for (const id of c.checks) expect(ids.has(id), `${c.id} names ${id}`).toBe(true)
      expect(c.checks.length > 0 || c.notApplicable !== undefined, c.id).toBe(true)
    }
    const used = new Set(CLAUSES.flatMap(c => c.checks))
    for (const id of ids) expect(used.has(id), `check ${id} decides no clause`).toBe(true)
  })

  it('the clause table is the catalog: id, level and checks, in order', () => {
    const rows = [...section('Clauses').matchAll(/^\| `([A-Z0-9_-]+)` \| [PCMWHL] \| ([A-Z ]+) \| [^|]+ \| ([^|]+) \|$/gm)]
    expect(rows.map(r => r[1])).toEqual(CLAUSES.map(c => c.id))
    for (const [i, c] of CLAUSES.entries()) {
      const row = rows[i]!
      expect(row[2], c.id).toBe(c.level)
      const checks = (row[3] ?? '').trim()
      expect(checks.startsWith('n/a') ? [] : checks.split(', '), c.id).toEqual(c.checks)
    }
  })

  it('the check table names every check the kit runs, in order', () => {
    const rows = [...section('Checks').matchAll(/^\| `([a-z-]+)` \|/gm)].map(r => r[1])
    expect(rows).toEqual(ALL_CHECKS.map(c => c.id))
  })

  it('every limit it names is the constant, with its value', () => {
    const named = [...text.matchAll(/`([A-Z][A-Z0-9_]{2,})`/g)].map(m => m[1] ?? '')
    expect(named.length).toBeGreaterThan(5)
    for (const name of named.filter(n => !codes.has(n))) expect(Object.hasOwn(values, name), name).toBe(true)
    for (const m of text.matchAll(/`([A-Z][A-Z0-9_]{2,})`,? \((\d+)(?: (ms|s))?[,)]/g)) {
      const [, name = '', n = '', unit] = m
      expect(values[name], m[0]).toBe(Number(n) * (unit === undefined ? 1 : UNIT[unit] ?? Number.NaN))
    }
  })

  it('a clause fails when one of its checks fails or is missing, and is n/a only without checks', () => {
    const pass = (id: string): CheckResult => ({ id, title: id, status: 'pass', message: null, evidence: { runs: [], events: [], frames: [], notes: [] }, ms: 0 })
    const all = ALL_CHECKS.map(c => pass(c.id))
    expect(decideClauses(all).every(c => c.status === (c.checks.length === 0 ? 'n/a' : 'pass'))).toBe(true)
    const broken = decideClauses(all.map(c => c.id === 'unknown-run' ? { ...c, status: 'fail' as const, message: 'x' } : c))
    expect(broken.filter(c => c.status === 'fail').map(c => c.id)).toEqual(['AAP-ERROR-RUN_NOT_FOUND', 'AAP-CONF-ERRORS'])
    const missing = decideClauses(all.filter(c => c.id !== 'replay'))
    expect(missing.filter(c => c.status === 'fail').map(c => c.id)).toEqual(['AAP-EVENT-REPLAY'])
  })
})
