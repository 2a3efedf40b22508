/**
 * Campaign part "disk-faults": an executor node whose real LevelDB datastore
 * (in a temporary data dir) is wrapped in a FaultyDatastore
 * (test/fixtures/faulty-datastore.ts): during each fault window every write
 * throws, as a full disk (ENOSPC) or a failing one (EIO) makes LevelDB throw;
 * the real disk is never filled. A healthy delegator node delegates to it all
 * along. Each round:
 *  1. healthy: `perRound` delegations (acknowledged runs are noted), some of
 *     them held open by their handler;
 *  2. fault: the held runs are let go (their ends fall in the fault),
 *     `perRound` delegations to the faulty node and `perRound / 2` from it;
 *  3. the fault clears: one more delegation must be taken.
 * At the end the executor is stopped and started again on the same data dir.
 * Must: acknowledged runs missing after the restart (0), refusals during a
 * fault that are not STORAGE_FULL (0), runs taken during a fault (0), calls
 * that hung (0), delegations refused once the fault cleared (0), crashes of
 * the process (uncaught errors or unhandled rejections: 0).
 */
import { mkdtemp, rm } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { LevelDatastore } from 'datastore-level'
import { AapError } from '../../src/errors.ts'
import { silentLogger } from '../../src/logger.ts'
import { createMeshNode, type MeshNode } from '../../src/node.ts'
import { FaultyDatastore } from '../../test/fixtures/faulty-datastore.ts'
import { ECHO, HONEST_CALL_TIMEOUT_MS, prng } from './common.ts'
import type { PartResult } from './report.ts'

export interface DiskFaultOptions { rounds: number, perRound: number, seed: number }

const TITLE = 'a datastore that fails writes or runs out of space'
/** A call that has not settled within this is counted as hung (and given up). */
const CALL_LIMIT_MS = HONEST_CALL_TIMEOUT_MS
/** After the restart, wait at most this for its recovery to end the runs the restart interrupted. */
const RECOVERY_WAIT_MS = 30_000
const HELD = { capability_id: 'cap:campaign-held', version: '1.0.0' }

interface Outcome { ok: boolean, code?: string, hung: boolean }

async function attempt (fn: (signal: AbortSignal) => Promise<unknown>): Promise<Outcome> {
  const signal = AbortSignal.timeout(CALL_LIMIT_MS)
  try {
    await fn(signal)
    return { ok: true, hung: false }
  } catch (err) {
    const code = err instanceof AapError ? err.code : (err as Error).name
    return { ok: false, code, hung: signal.aborted }
  }
}

export async function runDiskFaults (o: DiskFaultOptions): Promise<PartResult> {
  const result: PartResult = { name: 'disk-faults', title: TITLE, built: true, ran: true }
  const dataDir = await mkdtemp(join(tmpdir(), 'aap-campaign-disk-'))
  const storeDir = join(dataDir, 'faulty-store')
  let crashes = 0
  const onCrash = (err: unknown): void => { crashes++; console.error('disk-faults: uncaught', err) }
  process.on('uncaughtException', onCrash)
  process.on('unhandledRejection', onCrash)
  let executor: MeshNode | undefined
  let delegator: MeshNode | undefined
  let level: LevelDatastore | undefined
  try {
    const r = prng(o.seed)
    level = new LevelDatastore(storeDir)
    await level.open()
    const faulty = new FaultyDatastore(level)
    const releases: Array<() => void> = []
    const startExecutor = async (store: Parameters<typeof createMeshNode>[0] extends infer O ? O extends { datastore?: infer D } ? D : never : never): Promise<MeshNode> => {
      const n = await createMeshNode({ listen: ['/ip4/127.0.0.1/tcp/0'], localMesh: true, dataDir, datastore: store, logger: silentLogger() })
      await n.start()
      n.runs.handle(ECHO, async (ctx) => ({ echo: ctx.input }))
      n.runs.handle(HELD, async (ctx) => {
        await new Promise<void>(resolve => { releases.push(resolve); ctx.signal.addEventListener('abort', () => { resolve() }, { once: true }) })
        return { held: true }
      })
      await n.publishCard({ name: 'campaign-disk', capabilities: [ECHO, HELD] })
      return n
    }
    executor = await startExecutor(faulty.store)
    delegator = await createMeshNode({ listen: ['/ip4/127.0.0.1/tcp/0'], localMesh: true, logger: silentLogger() })
    await delegator.start()
    if (await delegator.join(executor.addresses) === 0) throw new Error('the delegator could not reach the executor')
    delegator.runs.handle(ECHO, async (ctx) => ({ echo: ctx.input }))
    await delegator.publishCard({ name: 'campaign-disk-delegator', capabilities: [ECHO] })
    const d = delegator
    const x = executor

    const acknowledged = new Map<string, 'healthy' | 'fault' | 'held' | 'cleared'>()
    const faultCodes: Record<string, number> = {}
    let faultCalls = 0
    let takenDuringFault = 0
    let outCalls = 0
    let takenOutDuringFault = 0
    let hung = 0
    let refusedAfterClear = 0
    let heldEndedInFault = 0
    let n = 0
    const delegateTo = async (cap: typeof ECHO, tag: string, note: 'healthy' | 'fault' | 'held' | 'cleared'): Promise<Outcome> => {
      let runId: string | undefined
      const out = await attempt(async (signal) => {
        runId = (await d.delegate({ to_agent: x.agentId, task_id: `disk-${tag}-${n++}`, capability: cap, input: { n } }, { signal, follow: false })).run_id
      })
      if (out.ok && runId !== undefined) acknowledged.set(runId, note)
      if (out.hung) hung++
      return out
    }

    for (let round = 0; round < o.rounds; round++) {
      // 1. healthy, a few runs held open across the fault
      for (let i = 0; i < o.perRound; i++) {
        const held = r() < 0.2
        const out = await delegateTo(held ? HELD : ECHO, `r${round}`, held ? 'held' : 'healthy')
        if (!out.ok) throw new Error(`a delegation to the healthy executor failed: ${out.code ?? ''}`)
      }
      // 2. the fault: full disk or failing disk, by turns
      faulty.mode = round % 2 === 0 ? 'no-space' : 'io'
      faulty.failing = true
      heldEndedInFault += releases.length
      for (const release of releases.splice(0)) release()
      for (let i = 0; i < o.perRound; i++) {
        faultCalls++
        const out = await delegateTo(ECHO, `f${round}`, 'fault')
        if (out.ok) takenDuringFault++
        else faultCodes[out.code ?? '?'] = (faultCodes[out.code ?? '?'] ?? 0) + 1
      }
      for (let i = 0; i < Math.ceil(o.perRound / 2); i++) {
        outCalls++
        const out = await attempt(async (signal) => x.delegate({ to_agent: d.agentId, task_id: `disk-out-${round}-${i}`, capability: ECHO, input: { i } }, { signal, follow: false }))
        if (out.hung) hung++
        if (out.ok) takenOutDuringFault++
        else faultCodes[`${out.code ?? '?'} (as delegator)`] = (faultCodes[`${out.code ?? '?'} (as delegator)`] ?? 0) + 1
      }
      // 3. cleared: the next delegation is taken
      faulty.failing = false
      const out = await delegateTo(ECHO, `c${round}`, 'cleared')
      if (!out.ok) refusedAfterClear++
    }

    // every acknowledged run is readable before the restart ...
    let missingBefore = 0
    for (const runId of acknowledged.keys()) {
      try { await x.getRun(runId) } catch { missingBefore++ }
    }
    // ... and after it, from the same LevelDB
    await x.stop()
    executor = undefined
    await level.close()
    level = new LevelDatastore(storeDir)
    await level.open()
    executor = await startExecutor(level)
    const y = executor
    let missingAfter = 0
    const states: Record<string, number> = {}
    const failures: Record<string, number> = {}
    // runs interrupted by the restart are ended by its recovery (which first asks their delegator): wait, bounded
    const restarted = performance.now()
    let stillRunning = 0
    for (let pass = 0; ; pass++) {
      stillRunning = 0
      for (const runId of acknowledged.keys()) {
        try {
          if ((await y.getRun(runId)).state === 'running') stillRunning++
        } catch {
          stillRunning++ // unreadable now: counted as not ended (and as missing below if it stays so)
        }
      }
      if (stillRunning === 0 || performance.now() - restarted > RECOVERY_WAIT_MS) break
      await new Promise(resolve => setTimeout(resolve, 100))
    }
    const recoverySeconds = (performance.now() - restarted) / 1000
    for (const [runId, note] of acknowledged) {
      try {
        const run = await y.getRun(runId)
        const k = `${note}: ${run.state}`
        states[k] = (states[k] ?? 0) + 1
        if (run.failure !== null) failures[run.failure.code] = (failures[run.failure.code] ?? 0) + 1
      } catch {
        missingAfter++
      }
    }
    const refusedUntyped = Object.entries(faultCodes).filter(([k]) => !k.startsWith('STORAGE_FULL')).reduce((s, [, v]) => s + v, 0)
    result.musts = [
      { figure: 'acknowledged runs missing (before and after the restart)', value: missingBefore + missingAfter, max: 0 },
      { figure: 'delegations taken while the store failed (to or from the node)', value: takenDuringFault + takenOutDuringFault, max: 0 },
      { figure: 'refusals during a fault that are not STORAGE_FULL', value: refusedUntyped, max: 0 },
      { figure: 'calls that hung', value: hung, max: 0 },
      { figure: 'delegations refused after the fault cleared', value: refusedAfterClear, max: 0 },
      { figure: 'crashes (uncaught errors, unhandled rejections)', value: crashes, max: 0 },
      { figure: `acknowledged runs still running ${RECOVERY_WAIT_MS / 1000} s after the restart`, value: stillRunning, max: 0 }
    ]
    result.figures = [
      ['fault rounds (no space / failing disk, by turns)', o.rounds],
      ['acknowledged runs', acknowledged.size],
      ['delegations to the node during faults', faultCalls],
      ['delegations from the node during faults', outCalls],
      ['answers during faults', Object.entries(faultCodes).map(([k, v]) => `${k} ${v}`).join(', ')],
      ['writes the faulty store refused', faulty.refused],
      ['held runs whose end fell in a fault', heldEndedInFault],
      ['acknowledged runs after the restart, by when taken: state', Object.entries(states).sort().map(([k, v]) => `${k} ${v}`).join(', ')],
      ['failure codes of the failed ones', Object.entries(failures).sort().map(([k, v]) => `${k} ${v}`).join(', ') || 'none'],
      ['runs still running after the restart / seconds waited for its recovery', `${stillRunning} / ${recoverySeconds.toFixed(1)}`]
    ]
    result.notes = [
      `Seed ${o.seed}; ${o.perRound} delegations per phase; one executor (LevelDB in a temporary data dir, wrapped so that every write throws during a fault) and one healthy delegator, in this process, on TCP 127.0.0.1. A run whose end fell in a fault could not record it: it stays running until the executor restarts; the restart's recovery then ends it (it asks the delegator for a verdict first, else fails it with EXECUTOR_RESTARTED: protocols/errors.md); it is never lost.`
    ]
  } catch (err) {
    result.error = (err as Error).stack ?? (err as Error).message
  } finally {
    await delegator?.stop().catch((err: unknown) => { console.error('disk-faults: delegator stop', err) })
    await executor?.stop().catch((err: unknown) => { console.error('disk-faults: executor stop', err) })
    await level?.close().catch((err: unknown) => { console.error('disk-faults: store close', err) })
    await rm(dataDir, { recursive: true, force: true })
    process.off('uncaughtException', onCrash)
    process.off('unhandledRejection', onCrash)
  }
  return result
}
