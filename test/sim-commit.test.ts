/** A simulation report names the commit it ran from (src/sim/commit.ts). */
import { execFileSync } from 'node:child_process'
import { describe, expect, it } from 'vitest'
import { sourceCommit } from '../src/sim/commit.ts'

describe('the commit of a simulation report', () => {
  it('is the short hash of HEAD, marked when tracked files differ from it', () => {
    const head = execFileSync('git', ['rev-parse', '--short=12', 'HEAD'], { encoding: 'utf8' }).trim()
    const dirty = execFileSync('git', ['status', '--porcelain', '--untracked-files=no'], { encoding: 'utf8' }).trim() !== ''
    expect(sourceCommit()).toBe(dirty ? `${head}+changes` : head)
  })
})
