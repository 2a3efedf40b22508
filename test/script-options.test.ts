/**
 * The simulation and campaign scripts read their options strictly (scripts/lib/options.ts):
 * a bad command line ends with the reason and the usage, exit code 2, never a
 * stack trace; --help prints the usage.
 */
import { spawnSync } from 'node:child_process'
import { describe, expect, it } from 'vitest'

const run = (script: string, ...args: string[]): { status: number | null, stdout: string, stderr: string } => {
  const r = spawnSync(process.execPath, [script, ...args], { encoding: 'utf8', timeout: 60_000 })
  return { status: r.status, stdout: r.stdout, stderr: r.stderr }
}

describe('script options', () => {
  it.each(['scripts/sim.ts', 'scripts/sim-scale.ts', 'scripts/ui-screenshots.ts', 'scripts/campaign/main.ts'])('%s: an unknown option or a missing value is a usage error, --help the usage', (script) => {
    const unknown = run(script, '--no-such-option')
    expect(unknown.status).toBe(2)
    expect(unknown.stderr).toMatch(/^Unknown option '--no-such-option'\nusage: /)
    expect(unknown.stderr).not.toMatch(/\n\s+at /)
    const missing = run(script, '--out')
    expect(missing.status).toBe(2)
    expect(missing.stderr).toMatch(/argument missing/)
    const help = run(script, '--help')
    expect(help.status).toBe(0)
    expect(help.stdout).toMatch(/^usage: /)
  })
})
