/**
 * The slab size of Node's Buffer pool, for a process that runs mesh nodes.
 *
 * `Buffer.allocUnsafe` hands out a small buffer as a view of a shared slab
 * (`Buffer.poolSize`), and the libraries under a node allocate most of their
 * small values that way: peer id digests, multiaddr bytes, kad-dht's routing
 * entries (via `uint8arrays`). A value kept for long (a peer in the routing
 * table or the peer store, a connection's address) keeps its whole slab
 * alive, and the slabs' other bytes are garbage nobody can reclaim. Node 24
 * made the slab 64 KiB (Node 20: 8 KiB): a heap snapshot of a simulation
 * process at 200 nodes held about 60 MiB of such 64 KiB slabs for its 43
 * nodes (docs/scaling.md, "Backing stores of 64 KiB and more").
 *
 * It is a process-wide setting, so the process's entry point sets it (the
 * CLI, the simulation's processes), never a node a host program embeds.
 * The slab in use when it is set is used up first.
 */
import { BUFFER_POOL_BYTES } from './network-constants.ts'

export function useNodeBufferPool (bytes: number = BUFFER_POOL_BYTES): void {
  Buffer.poolSize = bytes
}
