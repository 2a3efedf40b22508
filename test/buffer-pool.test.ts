/**
 * The Buffer pool of a node process (src/wire/buffer-pool.ts): once set, a
 * small buffer, like the peer id digests the libraries allocate with
 * Buffer.allocUnsafe, is cut from a slab of BUFFER_POOL_BYTES, so keeping it
 * keeps at most that much alive (Node 24's own slab is 64 KiB).
 */
import { afterAll, describe, expect, it } from 'vitest'
import { allocUnsafe } from 'uint8arrays/alloc'
import { BUFFER_POOL_BYTES } from '../src/wire/network-constants.ts'
import { useNodeBufferPool } from '../src/wire/buffer-pool.ts'

describe('the Buffer pool of a node process', () => {
  const before = Buffer.poolSize
  afterAll(() => { Buffer.poolSize = before })

  it('cuts small buffers from slabs of BUFFER_POOL_BYTES once the slab in use is spent', () => {
    useNodeBufferPool()
    expect(Buffer.poolSize).toBe(BUFFER_POOL_BYTES)
    // spend whatever slab was in use when the size changed (at most Node's default, 64 KiB)
    const kept: Uint8Array[] = []
    for (let spent = 0; spent <= 64 * 1024; spent += 38) kept.push(allocUnsafe(38))
    const digest = allocUnsafe(38) // the size of an Ed25519 peer id's multihash
    expect(digest.buffer.byteLength).toBe(BUFFER_POOL_BYTES)
    expect(kept.at(-1)?.buffer.byteLength).toBe(BUFFER_POOL_BYTES)
  })

  it('leaves a buffer of half a slab or more its own memory, as Node does', () => {
    useNodeBufferPool()
    expect(allocUnsafe(BUFFER_POOL_BYTES / 2).buffer.byteLength).toBe(BUFFER_POOL_BYTES / 2)
  })
})
