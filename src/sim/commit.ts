/**
 * The commit a simulation ran from, so a report says which code it measured:
 * the short hash of HEAD, with "+changes" when tracked files differ from it.
 * Reports themselves (under docs/ and reports/) do not count: a scaling run
 * rewrites the committed reports size by size, and that is no change to the
 * code it measures. "unknown (why)" outside a git work tree.
 */
import { execFileSync } from 'node:child_process'
import { fileURLToPath } from 'node:url'

/** Bound on each git call (a work tree of this size answers in milliseconds). */
const GIT_TIMEOUT_MS = 5_000

/** Tracked paths whose changes do not make a report's code differ from its commit. */
const REPORT_PATHS = ['docs', 'reports']

export function sourceCommit (cwd = fileURLToPath(new URL('../..', import.meta.url))): string {
  const git = (args: string[]): string => execFileSync('git', args, { cwd, timeout: GIT_TIMEOUT_MS, encoding: 'utf8', stdio: ['ignore', 'pipe', 'ignore'] }).trim()
  try {
    const head = git(['rev-parse', '--short=12', 'HEAD'])
    const changed = git(['status', '--porcelain', '--untracked-files=no', '--', '.', ...REPORT_PATHS.map(p => `:(exclude)${p}`)]) !== ''
    return changed ? `${head}+changes` : head
  } catch (err) {
    return `unknown (${(err as Error).message.split('\n')[0] ?? 'git failed'})`
  }
}
