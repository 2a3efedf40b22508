import { mkdtemp, readFile, rm, writeFile } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { settleAll, startChild } from '../scripts/campaign/common.ts'
import { until } from './helpers.ts'

function alive (pid: number): boolean {
  try { process.kill(pid, 0); return true } catch { return false }
}

describe('campaign children never outlive a failed start', () => {
  let dir = ''
  beforeAll(async () => { dir = await mkdtemp(join(tmpdir(), 'aap-campaign-children-')) })
  afterAll(async () => { await rm(dir, { recursive: true, force: true }) })

  it('a child that never says it is ready is killed when its ready wait is over', async () => {
    const script = join(dir, 'never-ready.mjs')
    const pidFile = join(dir, 'pid')
    // writes its pid, then waits forever without the ready message
    await writeFile(script, `import { writeFileSync } from 'node:fs'\nwriteFileSync(process.argv[2], String(process.pid))\nsetInterval(() => {}, 1000)\n`)
    await expect(startChild([pidFile], { script, readyTimeoutMs: 1000 })).rejects.toThrow(/not ready within 1000 ms/)
    const pid = Number(await readFile(pidFile, 'utf8'))
    expect(pid).toBeGreaterThan(0)
    await until(() => !alive(pid), 'the never-ready child is gone', 10_000)
    expect(alive(pid)).toBe(false)
  })
})

describe('settleAll: a failure is reported only once nothing is left running', () => {
  it('waits for the slow restart beside a failed one, then fails with the first failure', async () => {
    let slowDone = false
    const slow = Promise.withResolvers<void>()
    const failed = Promise.reject(new Error('restart failed'))
    const all = settleAll([failed, slow.promise.then(() => { slowDone = true })])
    let settledWhileRunning = false
    all.then(() => {}, () => { settledWhileRunning = !slowDone })
    await new Promise(resolve => setImmediate(resolve))
    slow.resolve()
    await expect(all).rejects.toThrow('restart failed')
    expect(settledWhileRunning).toBe(false)
    expect(slowDone).toBe(true)
  })
})
