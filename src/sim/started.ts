/**
 * What a simulation run has started (its nodes here, its worker and group
 * processes, its work directory), so that all of it is stopped when the run
 * ends, and also when it fails on the way (runScenario's finally): a failed
 * run leaves no node or child process running.
 */
import { rm } from 'node:fs/promises'
import { stopGroup, type Group } from './group.ts'
import { stopSimMesh, type SimNode } from './mesh.ts'
import { stopWorker, type Member } from './processes.ts'

export class Started {
  mesh: SimNode[] = []
  /** The run's agents: those in worker processes are stopped. */
  members: Member[] = []
  groups: Group[] = []
  workDir?: string
  /** Ends what runs beside the tasks (the churn loop) before the rest stops. */
  halt?: () => Promise<void>
  private stopping?: Promise<void>

  /** Stop everything started (once; a second call waits for the first). */
  async stop (): Promise<void> {
    this.stopping ??= this.stopAll()
    return this.stopping
  }

  private async stopAll (): Promise<void> {
    await this.halt?.().catch((err: unknown) => { process.stderr.write(`simulation: the churn loop failed: ${String(err)}\n`) })
    await stopSimMesh(this.mesh)
    await Promise.all(this.members.map(async m => { if (m.worker !== undefined) await stopWorker(m.worker, 'SIGTERM') }))
    await Promise.all(this.groups.map(async g => stopGroup(g)))
    if (this.workDir !== undefined) await rm(this.workDir, { recursive: true, force: true })
  }
}
