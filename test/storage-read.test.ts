/**
 * hasKey and readOptional answer from LevelDB on the caller's thread
 * (classic-level's getSync) and from any other datastore as usual: the same answers through
 * the wrappers a node puts around its store (write guard, group commit),
 * before and after a batch, after a delete and after the store is opened
 * again; a closed store is an error, never a "not held".
 */
import { mkdtemp, rm } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { Key } from 'interface-datastore'
import { afterEach, describe, expect, it } from 'vitest'
import { openDatastore } from '../src/identity/identity.ts'
import { CompactMemoryDatastore } from '../src/storage/compact-memory.ts'
import { groupCommitting } from '../src/storage/group-commit.ts'
import { hasKey, readJson, readOptional } from '../src/storage/read.ts'
import { guardWrites } from '../src/storage/write-guard.ts'

const dirs: string[] = []
afterEach(async () => {
  for (const d of dirs.splice(0)) await rm(d, { recursive: true, force: true })
})

async function levelDir (): Promise<string> {
  const d = await mkdtemp(join(tmpdir(), 'aap-read-'))
  dirs.push(d)
  return d
}

describe('hasKey', () => {
  it('on LevelDB, through the node\'s wrappers: held after a committed batch, not after a delete, and after reopening', async () => {
    const dir = await levelDir()
    const raw = await openDatastore(dir)
    const ds = groupCommitting(guardWrites(raw))
    const k = new Key('/runs/agent:00aa')
    expect(typeof (ds as unknown as { db: { getSync?: unknown } }).db.getSync).toBe('function')
    expect(await hasKey(ds, k)).toBe(false)
    const b = ds.batch()
    b.put(k, new Uint8Array(0)) // an empty value is still a held key
    b.put(new Key('/runs/agent:00ab'), new Uint8Array([1]))
    await b.commit()
    expect(await hasKey(ds, k)).toBe(true)
    expect(await hasKey(ds, new Key('/runs/agent:00a'))).toBe(false)
    expect([...(await readOptional(ds, new Key('/runs/agent:00ab')) ?? [])]).toEqual([1])
    expect(await readOptional(ds, k)).toHaveLength(0)
    expect(await readOptional(ds, new Key('/runs/agent:00a'))).toBeUndefined()
    await ds.put(new Key('/json'), new TextEncoder().encode('{"a":[1]}'))
    expect(await readJson(ds, new Key('/json'))).toEqual({ a: [1] })
    await ds.delete(new Key('/runs/agent:00ab'))
    expect(await hasKey(ds, new Key('/runs/agent:00ab'))).toBe(false)
    await raw.close?.()
    await expect(hasKey(ds, k)).rejects.toThrow()
    await expect(readOptional(ds, k)).rejects.toThrow()
    const again = groupCommitting(guardWrites(await openDatastore(dir)))
    expect(await hasKey(again, k)).toBe(true)
    expect(await hasKey(again, new Key('/runs/agent:00ab'))).toBe(false)
    await (again as unknown as { close: () => Promise<void> }).close()
  })

  it('on the memory datastore, asked as usual', async () => {
    const ds = groupCommitting(guardWrites(new CompactMemoryDatastore()))
    const k = new Key('/runs/x')
    expect(await hasKey(ds, k)).toBe(false)
    await ds.put(k, new Uint8Array([1]))
    expect(await hasKey(ds, k)).toBe(true)
    expect(await readOptional(ds, k)).toEqual(new Uint8Array([1]))
    expect(await readOptional(ds, new Key('/runs/y'))).toBeUndefined()
  })
})
