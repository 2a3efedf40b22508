/**
 * The commit a simulation ran from, so a report says which code it measured:
 * the short hash of HEAD, with "+changes" when tracked files differ from it.
 * "unknown (why)" outside a git work tree.
 */
import { execFileSync } from 'node:child_process'
import { fileURLToPath } from 'node:url'

/** Bound on each git call (a work tree of this size answers in milliseconds). */
const GIT_TIMEOUT_MS = 5_000

export function sourceCommit (): string {
  const cwd = fileURLToPath(new URL('../..', import.meta.url))
  const git = (args: string[]): string => execFileSync('git', args, { cwd, timeout: GIT_TIMEOUT_MS, encoding: 'utf8', stdio: ['ignore', 'pipe', 'ignore'] }).trim()
  try {
    const head = git(['rev-parse', '--short=12', 'HEAD'])
    const changed = git(['status', '--porcelain', '--untracked-files=no']) !== ''
    return changed ? `${head}+changes` : head
  } catch (err) {
    return `unknown (${(err as Error).message.split('\n')[0] ?? 'git failed'})`
  }
}
