/**
 * readRange answers the same entries, in the same order, from LevelDB (seeking) as from a memory
 * datastore (prefix query, then sort), whatever the bounds and direction.
 */
import { mkdtemp, rm } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { MemoryDatastore } from 'datastore-core'
import fc from 'fast-check'
import { Key } from 'interface-datastore'
import { afterAll, describe, expect, it } from 'vitest'
import { openDatastore } from '../src/identity/identity.ts'
import { readRange } from '../src/storage/range.ts'
import { CompactMemoryDatastore } from '../src/storage/compact-memory.ts'

const seg = fc.string({ unit: fc.constantFrom('a', 'b', '0', '9', '-', '~', '%'), minLength: 1, maxLength: 3 })
const key = fc.tuple(fc.constantFrom('/p', '/p/x', '/q', '/pp'), seg, fc.option(seg, { nil: undefined })).map(([a, b, c]) => c === undefined ? `${a}/${b}` : `${a}/${b}/${c}`)

describe('readRange', () => {
  const dirs: string[] = []
  afterAll(async () => { for (const d of dirs) await rm(d, { recursive: true, force: true }) })

  it('LevelDB and memory answer alike', async () => {
    const dir = await mkdtemp(join(tmpdir(), 'aap-range-'))
    dirs.push(dir)
    const level = await openDatastore(dir)
    try {
      await fc.assert(fc.asyncProperty(
        fc.uniqueArray(key, { maxLength: 40 }),
        fc.constantFrom('/p/', '/p', '/p/x/', '/q/', '/'),
        fc.option(key, { nil: undefined }), fc.option(key, { nil: undefined }), fc.option(key, { nil: undefined }), fc.boolean(), fc.boolean(),
        async (keys, prefix, gt, gte, lt, reverse, values) => {
          const mem = new MemoryDatastore()
          const compact = new CompactMemoryDatastore()
          for await (const k of level.queryKeys({})) await level.delete(k)
          for (const [i, k] of keys.entries()) {
            const v = Uint8Array.of(i)
            await level.put(new Key(k), v)
            await mem.put(new Key(k), v)
            compact.put(new Key(k), v)
          }
          const q = { prefix, reverse, values, ...(gt === undefined ? {} : { gt }), ...(gte === undefined ? {} : { gte }), ...(lt === undefined ? {} : { lt }) }
          const read = async (ds: Parameters<typeof readRange>[0]): Promise<Array<[string, number | undefined]>> => {
            const out: Array<[string, number | undefined]> = []
            for await (const e of readRange(ds, q)) out.push([e.key, e.value?.[0]])
            return out
          }
          const a = await read(level)
          expect(await read(mem)).toEqual(a)
          expect(await read(compact)).toEqual(a)
        }), { numRuns: 150 })
    } finally {
      await level.close?.()
    }
  }, 120_000)
})
