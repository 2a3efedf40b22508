/**
 * The simulation and campaign scripts read their options strictly (scripts/lib/options.ts),
 * and so do the benchmarks and reference servers (scripts/lib/proc.ts parseArgs with
 * a usage): a bad command line ends with the reason and the usage, exit code 2,
 * never a stack trace, before the script starts anything; --help prints the usage.
 */
import { spawnSync } from 'node:child_process'
import { describe, expect, it } from 'vitest'

const run = (script: string, ...args: string[]): { status: number | null, stdout: string, stderr: string } => {
  const r = spawnSync(process.execPath, [script, ...args], { encoding: 'utf8', timeout: 60_000 })
  return { status: r.status, stdout: r.stdout, stderr: r.stderr }
}

describe('script options', () => {
  /** An unknown option and `bad` are usage errors (exit 2, the reason, no stack trace); --help prints the usage. */
  const expectUsage = (script: string, bad: string[], reason: RegExp): void => {
    const unknown = run(script, '--no-such-option')
    expect(unknown.status).toBe(2)
    expect(unknown.stderr).toMatch(/^Unknown option '--no-such-option'\nusage: /)
    expect(unknown.stderr).not.toMatch(/\n\s+at /)
    const wrong = run(script, ...bad)
    expect(wrong.status).toBe(2)
    expect(wrong.stderr).toMatch(reason)
    const help = run(script, '--help')
    expect(help.status).toBe(0)
    expect(help.stdout).toMatch(/^usage: /)
  }

  it.each(['scripts/sim.ts', 'scripts/sim-scale.ts', 'scripts/ui-screenshots.ts', 'scripts/campaign/main.ts'])('%s: an unknown option or a missing value is a usage error, --help the usage', (script) => {
    expectUsage(script, ['--out'], /argument missing/)
  })

  it.each([
    'scripts/bench.ts', 'scripts/bench-events.ts', 'scripts/bench-gossip.ts', 'scripts/bench-discover.ts', 'scripts/bench-delegate.ts',
    'scripts/bench-reference.ts', 'scripts/bench-artifact.ts', 'scripts/bench-a2a.ts', 'scripts/bench-net.ts',
    'scripts/ref-server-a2a.ts', 'scripts/ref-server-echo.ts'
  ])('%s: an unknown option or a stray argument is a usage error, --help the usage', (script) => {
    expectUsage(script, ['stray'], /^Unexpected argument 'stray'\nusage: /)
  })

  it.each([
    ['scripts/bench-events.ts', '--nodes'], ['scripts/bench-discover.ts', '--lookups'], ['scripts/bench-a2a.ts', '--requests']
  ])('%s %s with a value that is not a count is a usage error', (script, option) => {
    const bad = run(script, option, 'many')
    expect(bad.status).toBe(2)
    expect(bad.stderr).toMatch(new RegExp(`^${option} must be a non-negative integer, got "many"`))
    expect(bad.stderr).not.toMatch(/\n\s+at /)
  })

  it.each(['0', '2.5'])('scripts/sim.ts --quiet-discovers %s is a usage error before any node starts (the report divides by it)', (value) => {
    const bad = run('scripts/sim.ts', '--quiet-discovers', value)
    expect(bad.status).toBe(2)
    expect(bad.stderr).toMatch(/^--quiet-discovers must be a whole number of 1 or more/)
    expect(bad.stderr).not.toMatch(/\n\s+at /)
  })

  it.each([['--churn'], ['--processes']])('scripts/sim.ts --per-process with %s is a usage error before any node starts', (flag) => {
    const bad = run('scripts/sim.ts', '--per-process', '50', flag)
    expect(bad.status).toBe(2)
    expect(bad.stderr).toMatch(/^--per-process goes with neither --processes nor --churn/)
    expect(bad.stderr).not.toMatch(/\n\s+at /)
  })
})
