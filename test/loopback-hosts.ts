import { afterEach } from 'vitest'
import type { MeshHost } from '../src/wire/host.ts'
import { startLoopbackHost } from './helpers.ts'

/**
 * Loopback hosts for the tests of one describe: `start(n)` starts n of them,
 * and each test's hosts are stopped after it. Call inside the describe. (Not
 * in helpers.ts: the campaign scripts import that one outside vitest.)
 */
export function loopbackHostsPerTest (): (n: number) => Promise<MeshHost[]> {
  let hosts: MeshHost[] = []
  afterEach(async () => {
    await Promise.all(hosts.map(async h => h.stop()))
    hosts = []
  })
  return async (n) => {
    hosts = await Promise.all(Array.from({ length: n }, async () => startLoopbackHost()))
    return hosts
  }
}
