/** A simulation report names the commit it ran from (src/sim/commit.ts). */
import { execFileSync } from 'node:child_process'
import { mkdir, mkdtemp, rm, writeFile } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { describe, expect, it } from 'vitest'
import { sourceCommit } from '../src/sim/commit.ts'

describe('the commit of a simulation report', () => {
  it('is the short hash of HEAD, marked when tracked files differ from it', () => {
    const head = execFileSync('git', ['rev-parse', '--short=12', 'HEAD'], { encoding: 'utf8' }).trim()
    const dirty = execFileSync('git', ['status', '--porcelain', '--untracked-files=no', '--', '.', ':(exclude)docs', ':(exclude)reports'], { encoding: 'utf8' }).trim() !== ''
    expect(sourceCommit()).toBe(dirty ? `${head}+changes` : head)
  })

  it('is not marked for changed reports, only for changed code', async () => {
    const dir = await mkdtemp(join(tmpdir(), 'aap-commit-'))
    try {
      const git = (...args: string[]): string => execFileSync('git', ['-c', 'user.name=t', '-c', 'user.email=t@t', ...args], { cwd: dir, encoding: 'utf8' }).trim()
      git('init', '-q')
      await mkdir(join(dir, 'docs'))
      await mkdir(join(dir, 'src'))
      await writeFile(join(dir, 'docs', 'scaling.md'), 'old report')
      await writeFile(join(dir, 'src', 'a.ts'), 'code')
      git('add', '.')
      git('commit', '-qm', 'first')
      const head = git('rev-parse', '--short=12', 'HEAD')
      await writeFile(join(dir, 'docs', 'scaling.md'), 'new report')
      expect(sourceCommit(dir)).toBe(head)
      await writeFile(join(dir, 'src', 'a.ts'), 'changed code')
      expect(sourceCommit(dir)).toBe(`${head}+changes`)
    } finally {
      await rm(dir, { recursive: true, force: true })
    }
  })
})
