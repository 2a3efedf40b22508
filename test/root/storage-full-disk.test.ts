/**
 * A real full disk under the node's LevelDB store (a tmpfs this test mounts;
 * root only, so it runs with `npm run test:net`), through the node's own
 * stack: the write guard and the group committer. Found by session 52's
 * review: LevelDB goes on appending to its log after a write that ENOSPC
 * tore, and the next open reads the log only up to the tear, so writes
 * acknowledged after the disk was freed were lost at the next restart (50 of
 * 50); and a table write that failed left an error LevelDB keeps, so the
 * store refused every write, whatever the disk did, until the node restarted.
 * The guard now opens the store again before it takes another write.
 */
import { execFileSync } from 'node:child_process'
import { mkdtempSync, rmSync, statfsSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { Key } from 'interface-datastore'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { openDatastore } from '../../src/identity/identity.ts'
import { STORAGE_REOPEN_MIN_FREE_BYTES } from '../../src/storage/constants.ts'
import { groupCommitting } from '../../src/storage/group-commit.ts'
import { guardWrites } from '../../src/storage/write-guard.ts'
import { until } from '../helpers.ts'

const MiB = 1024 * 1024
/** The tmpfs: room for the reopen's free-space bound once the filler is gone. */
const DISK_BYTES = STORAGE_REOPEN_MIN_FREE_BYTES + 24 * MiB

describe('a real full disk under the node\'s LevelDB store', () => {
  let mnt: string

  beforeAll(() => {
    mnt = mkdtempSync(join(tmpdir(), 'aap-full-disk-'))
    execFileSync('mount', ['-t', 'tmpfs', '-o', `size=${DISK_BYTES}`, 'tmpfs', mnt])
  })

  afterAll(() => {
    try {
      execFileSync('umount', [mnt])
    } catch (err) {
      // a store a failed test left open keeps the mount busy: detach it, it goes once the process ends
      process.stderr.write(`umount ${mnt}: ${String(err)}; detaching it\n`)
      execFileSync('umount', ['-l', mnt])
    }
    rmSync(mnt, { recursive: true, force: true })
  })

  // how much room the filler leaves decides where ENOSPC hits: a log write cut short (a torn record: unless the
  // room ends where a record does, as it did at exactly 1 MiB), or the table a full memtable is written to (an
  // error LevelDB keeps)
  for (const leaveMiB of [2 - 1 / 256, 6]) {
    it(`keeps every write it acknowledged across a restart, and takes writes again once space is freed (${Math.round(leaveMiB * 1024)} KiB left)`, async () => {
      const dir = join(mnt, `store-${leaveMiB}`)
      const filler = join(mnt, 'filler')
      const ds = await openDatastore(dir)
      const guarded = guardWrites(ds)
      const runData = groupCommitting(guarded)
      const fs = statfsSync(mnt)
      writeFileSync(filler, Buffer.alloc(Math.max(0, fs.bavail * fs.bsize - Math.round(leaveMiB * MiB)), 1))
      const acked: string[] = []
      const refused: string[] = []
      const put = async (name: string, bytes: number): Promise<boolean> => {
        const b = runData.batch()
        b.put(new Key(name), new Uint8Array(bytes).fill(7))
        try {
          await b.commit()
        } catch (err) {
          refused.push((err as { code?: string }).code ?? String(err))
          return false
        }
        acked.push(name)
        return true
      }
      for (let i = 0; i < 2000; i++) {
        if (!await put(`/before/${i}`, 20_000)) break
      }
      expect(refused).toEqual(['STORAGE_FULL'])
      expect(guarded.health.failing?.reason).toBe('no_space')
      // the disk stays full: the store is not written again, nor opened again without room
      expect(await put('/while-full', 100)).toBe(false)
      rmSync(filler)
      // a writer retrying (a probe, end-retry) gets the store open again, and every write lands from then on
      await until(async () => guarded.probe().then(() => true, () => false), 'the store to take writes again', 30_000)
      expect(guarded.health.failing).toBeUndefined()
      expect(guarded.health.reopens).toBe(1)
      for (let i = 0; i < 50; i++) expect(await put(`/after/${i}`, 300)).toBe(true)
      await ds.close?.()
      // the restart
      const again = await openDatastore(dir)
      const lost: string[] = []
      for (const k of acked) if (!await again.has(new Key(k))) lost.push(k)
      await again.close?.()
      expect(acked.filter(k => k.startsWith('/after/'))).toHaveLength(50)
      expect(lost).toEqual([])
    })
  }
})
