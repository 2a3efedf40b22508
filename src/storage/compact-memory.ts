/**
 * The memory datastore of an ephemeral node (no data dir) and of
 * simulations, keeping each value in a buffer of its own size.
 *
 * What the DHT and the peer store put is often a small view into a much
 * larger buffer: a record decoded from a 64 KiB network read keeps that
 * whole read alive for as long as it is stored. A heap snapshot of a
 * 43-node simulation process held 118 MiB of such reads through the memory
 * datastore alone (session 6). A disk datastore copies by writing;
 * this one copies a value whose buffer is larger than the value.
 */
import { MemoryDatastore } from 'datastore-core'
import type { Key } from 'interface-datastore'

export class CompactMemoryDatastore extends MemoryDatastore {
  override put (key: Key, val: Uint8Array, options?: { signal?: AbortSignal }): Key {
    return super.put(key, val.byteLength < val.buffer.byteLength ? val.slice() : val, options) as Key
  }
}
