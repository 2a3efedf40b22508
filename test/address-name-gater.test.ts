/**
 * The dial gater never waits for a name's lookup (src/wire/address-filter.ts
 * mayDialNow, src/wire/host.ts). kad-dht asks whether each closer peer of a
 * walk is dialable, one after another; a gater that awaited each lookup let
 * a stranger that names many slow names hold a walk for
 * ADDRESS_NAME_LOOKUP_TIMEOUT_MS per name (found by a review). The resolver
 * here never answers (node:dns/promises mocked): no query leaves the machine.
 */
import { multiaddr } from '@multiformats/multiaddr'
import { describe, expect, it, vi } from 'vitest'
import { AddressFilter } from '../src/wire/address-filter.ts'
import { ADDRESS_NAME_LOOKUPS_MAX } from '../src/wire/network-constants.ts'

let lookups = 0
vi.mock('node:dns/promises', () => ({ lookup: async () => { lookups++; return new Promise(() => {}) } }))

describe('the dial gater and names', () => {
  it('answers at once for names it has not looked up, refusing them, with at most ADDRESS_NAME_LOOKUPS_MAX lookups under way', () => {
    const filter = new AddressFilter('self', { listen: ['/ip4/203.0.113.1/tcp/4001'], localMesh: false })
    const names = Array.from({ length: 3 * ADDRESS_NAME_LOOKUPS_MAX }, (_, i) => multiaddr(`/dns4/n${i}.slow.example/tcp/443/wss`))
    // a boolean, not a Promise: nothing for a walk to wait on
    for (const ma of names) expect(filter.mayDialNow(ma)).toBe(false)
    expect(filter.pendingNameLookups).toBe(ADDRESS_NAME_LOOKUPS_MAX)
    expect(lookups).toBe(ADDRESS_NAME_LOOKUPS_MAX)
    expect(filter.namesNotLookedUp).toBe(2 * ADDRESS_NAME_LOOKUPS_MAX)
    // a name asked again while its lookup is under way starts no second one
    expect(filter.mayDialNow(names[0]!)).toBe(false)
    expect(lookups).toBe(ADDRESS_NAME_LOOKUPS_MAX)
    // IP literals are judged at once as before
    expect(filter.mayDialNow(multiaddr('/ip4/198.51.100.7/tcp/4001'))).toBe(true)
    expect(filter.mayDialNow(multiaddr('/ip4/127.0.0.1/tcp/4001'))).toBe(false)
  })
})
