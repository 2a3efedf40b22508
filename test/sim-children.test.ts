/**
 * The simulation's child processes never outlive it: a group process whose
 * driver goes away while it starts exits, a worker that does not start is
 * killed, and a child that ignores SIGTERM is killed once the stop bound
 * (SIM_STOP_TIMEOUT_MS, here a small one) runs out; when one worker of a
 * batch does not start, the ones that did are stopped.
 */
import { spawn, spawnSync, type ChildProcess } from 'node:child_process'
import { once } from 'node:events'
import { mkdir, mkdtemp, readFile, rm, writeFile } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { createInterface } from 'node:readline'
import { afterEach, describe, expect, it } from 'vitest'
import { stopGroup, type Group } from '../src/sim/group.ts'
import { spawnWorker, spawnWorkers, stopWorker } from '../src/sim/processes.ts'
import { until } from './helpers.ts'

const GROUP_SCRIPT = new URL('../src/sim/group-worker.ts', import.meta.url).pathname

/** Whether a process of that id runs (signal 0 only checks). */
function alive (pid: number): boolean {
  try {
    process.kill(pid, 0)
    return true
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'ESRCH') return false
    throw err
  }
}

/** Processes a test started, killed at its end if still there (so a failing run leaves no orphan). */
const pids: number[] = []
const dirs: string[] = []
afterEach(async () => {
  for (const pid of pids.splice(0)) if (alive(pid)) process.kill(pid, 'SIGKILL')
  await Promise.all(dirs.splice(0).map(async d => rm(d, { recursive: true, force: true })))
})

/** The simulation workers (src/sim/worker.ts) this process started that still run. */
function workerChildren (): string[] {
  // ps exits 1 when it lists nothing: what it printed is what counts
  const out = spawnSync('ps', ['-o', 'pid=,args=', '--ppid', String(process.pid)], { encoding: 'utf8' }).stdout
  return out.split('\n').filter(l => l.includes('sim/worker.ts'))
}

async function firstLine (child: ChildProcess): Promise<string> {
  if (child.stdout === null) throw new Error('child has no stdout')
  const lines = createInterface({ input: child.stdout })
  const [line] = await once(lines, 'line') as [string]
  return line
}

describe('the simulation\'s child processes', () => {
  it('a group process whose driver goes away while the group starts exits', async () => {
    // a driver that forks a group of one node, says the group's pid once the group listens, and exits without a word to it
    const parent = spawn(process.execPath, ['--input-type=module', '-e', `
      import { fork } from 'node:child_process'
      const child = fork(${JSON.stringify(GROUP_SCRIPT)}, ['--first', '0', '--count', '1', '--seed', '1'], { execArgv: [], stdio: ['ignore', 'ignore', 'ignore', 'ipc'] })
      child.on('message', (msg) => {
        if (msg.type !== 'listening') return
        process.stdout.write(String(child.pid) + '\\n')
        process.exit(1)
      })
    `], { stdio: ['ignore', 'pipe', 'inherit'] })
    const exited = once(parent, 'exit')
    const pid = Number(await firstLine(parent))
    pids.push(pid)
    await exited
    expect(pid).toBeGreaterThan(0)
    // the group was waiting for the driver's join when the driver went: it goes too
    await until(() => !alive(pid), `group ${pid} to exit after its driver went`, 20_000)
  }, 60_000)

  it('kills a worker that does not start: a ready line that is no JSON, or no line in time', async () => {
    const dir = await mkdtemp(join(tmpdir(), 'aap-sim-children-'))
    dirs.push(dir)
    // a worker that writes its pid into its data directory, then a line (or none) and stays up
    const worker = async (name: string, line: string): Promise<string> => {
      const script = join(dir, `${name}.mjs`)
      await writeFile(script, `
        import { writeFileSync } from 'node:fs'
        import { join } from 'node:path'
        const dataDir = process.argv[process.argv.indexOf('--data-dir') + 1]
        writeFileSync(join(dataDir, 'pid'), String(process.pid))
        ${line === '' ? '' : `process.stdout.write(${JSON.stringify(`${line}\n`)})`}
        setInterval(() => { process.stderr.write('') }, 1000)
      `)
      return script
    }
    const pidOf = async (dataDir: string): Promise<number> => Number(await readFile(join(dataDir, 'pid'), 'utf8'))

    const bad = join(dir, 'bad')
    await mkdir(bad)
    await expect(spawnWorker(1, bad, [], await worker('bad', 'not json'))).rejects.toThrow(/no JSON/)
    const badPid = await pidOf(bad)
    pids.push(badPid)
    expect(alive(badPid)).toBe(false)

    const silent = join(dir, 'silent')
    await mkdir(silent)
    await expect(spawnWorker(2, silent, [], await worker('silent', ''), 2_000)).rejects.toThrow(/timed out after 2000 ms/)
    const silentPid = await pidOf(silent)
    pids.push(silentPid)
    expect(alive(silentPid)).toBe(false)
  }, 30_000)

  it('kills a group or worker that ignores SIGTERM once the stop bound runs out', async () => {
    const stubborn = async (): Promise<ChildProcess> => {
      const child = spawn(process.execPath, ['-e', `
        process.on('SIGTERM', () => { process.stderr.write('SIGTERM ignored\\n') })
        setInterval(() => { process.stderr.write('') }, 1000)
        process.stdout.write('ready\\n')
      `], { stdio: ['ignore', 'pipe', 'ignore'] })
      if (child.pid !== undefined) pids.push(child.pid)
      expect(await firstLine(child)).toBe('ready')
      return child
    }
    const g: Group = { hostile: false, first: 0, count: 1, child: await stubborn(), members: [], incidents: {}, pending: new Map(), nextId: 1 }
    await stopGroup(g, 200)
    expect(g.child.signalCode).toBe('SIGKILL')
    expect(g.incidents).toEqual({ stop_killed: 1 })

    const child = await stubborn()
    expect(await stopWorker({ index: 7, dataDir: '', child, pending: new Map(), nextId: 1 }, 'SIGTERM', 200)).toBe(true)
    expect(child.signalCode).toBe('SIGKILL')
  }, 20_000)

  it('spawnWorkers: when one worker of a batch does not start, the ones that did are stopped and its error goes on', async () => {
    const dir = await mkdtemp(join(tmpdir(), 'aap-sim-children-'))
    dirs.push(dir)
    // worker 1's data directory cannot be made: a file stands where it would be
    await writeFile(join(dir, 'w1'), 'not a directory')
    const started: number[] = []
    await expect(spawnWorkers(0, 3, dir, [], (n) => { started.push(n) })).rejects.toThrow(/worker 1 exited/)
    // the batch never counted as started, and workers 0 and 2 (which did start) are gone
    expect(started).toEqual([])
    expect(workerChildren()).toEqual([])
  }, 120_000)
})
