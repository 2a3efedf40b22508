/**
 * libp2p's own debug loggers (src/wire/libp2p-log.ts): off and free to create
 * unless DEBUG asks for them, and libp2p works the same with them (two real
 * hosts connect and ping over TCP).
 */
import { afterAll, describe, expect, it } from 'vitest'
import type { MeshHost } from '../src/wire/host.ts'
import { libp2pLogger, quietLibp2pLogger } from '../src/wire/libp2p-log.ts'
import { startLoopbackHost } from './helpers.ts'

const host = startLoopbackHost

describe("libp2p's debug loggers", () => {
  const hosts: MeshHost[] = []
  afterAll(async () => { await Promise.all(hosts.map(async h => h.stop())) })

  it('are off, and one shared object for every scope, when DEBUG is unset or blank', () => {
    for (const env of [{}, { DEBUG: '' }, { DEBUG: '  ' }]) {
      const logger = libp2pLogger(env)
      expect(logger).toBe(quietLibp2pLogger)
      const log = logger?.forComponent('libp2p:connection')
      expect(log?.enabled).toBe(false)
      expect(Reflect.get(log?.error ?? {}, 'enabled')).toBe(false)
      expect(Reflect.get(log?.trace ?? {}, 'enabled')).toBe(false)
      expect(log?.newScope('outbound')).toBe(log)
      expect(logger?.forComponent('libp2p:kad-dht')).toBe(log)
      // calling them does nothing and never throws
      expect(log?.('a %s', 'line')).toBeUndefined()
      expect(log?.error(new Error('x'))).toBeUndefined()
      expect(log?.trace('t')).toBeUndefined()
    }
  })

  it("leave libp2p its own logger when DEBUG names what to print", () => {
    expect(libp2pLogger({ DEBUG: 'libp2p:*' })).toBeUndefined()
  })

  it('are what a host uses, and two hosts still connect and ping', async () => {
    const [a, b] = [await host(), await host()]
    hosts.push(a, b)
    const debugSet = (process.env.DEBUG ?? '').trim() !== ''
    expect(a.logger === quietLibp2pLogger).toBe(!debugSet)
    const rtt = await a.services.ping.ping(b.getMultiaddrs()[0]!, { signal: AbortSignal.timeout(10_000) })
    expect(rtt).toBeGreaterThanOrEqual(0)
    expect(a.getConnections(b.peerId)).toHaveLength(1)
  })
})
