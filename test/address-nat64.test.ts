/**
 * NAT64 addresses embed an IPv4 address, and a NAT64 gateway on the node's
 * network forwards to it: 64:ff9b::7f00:1 reaches 127.0.0.1 there. They are
 * judged as the IPv4 address they stand for (src/wire/address-filter.ts).
 */
import { describe, expect, it } from 'vitest'
import { generateKeyPair } from '@libp2p/crypto/keys'
import { peerIdFromPrivateKey } from '@libp2p/peer-id'
import { multiaddr } from '@multiformats/multiaddr'
import { AddressFilter, kindOfIp, nat64V4 } from '../src/wire/address-filter.ts'

const me = peerIdFromPrivateKey(await generateKeyPair('Ed25519'))
const other = peerIdFromPrivateKey(await generateKeyPair('Ed25519'))

describe('NAT64 addresses', () => {
  it('stand for the IPv4 address in their last 32 bits', () => {
    expect(nat64V4('64:ff9b::7f00:1')).toBe('127.0.0.1')
    expect(nat64V4('64:ff9b::127.0.0.1')).toBe('127.0.0.1')
    expect(nat64V4('64:FF9B::A00:1')).toBe('10.0.0.1')
    expect(nat64V4('64:ff9b:1::c0a8:101')).toBe('192.168.1.1')
    expect(nat64V4('64:ff9b:1:0:0:0:a9fe:a9fe')).toBe('169.254.169.254')
    // not NAT64: outside both prefixes, or not IPv6
    for (const ip of ['2001:db8::7f00:1', '64:ff9b::1:0:7f00:1', '::7f00:1', '127.0.0.1']) expect(nat64V4(ip), ip).toBeUndefined()
  })

  it('are judged as that IPv4 address', () => {
    expect(['64:ff9b::7f00:1', '64:ff9b::7f01:203', '64:ff9b::127.0.0.1', '64:ff9b:1::7f00:1'].map(kindOfIp)).toEqual(['loopback', 'loopback', 'loopback', 'loopback'])
    expect(['64:ff9b::a00:1', '64:ff9b::c0a8:101', '64:ff9b::ac10:1', '64:ff9b::6440:1', '64:ff9b:1::a00:1'].map(kindOfIp)).toEqual(['private', 'private', 'private', 'private', 'private'])
    expect(['64:ff9b::a9fe:a9fe', '64:ff9b::', '64:ff9b:1::a9fe:1'].map(kindOfIp)).toEqual(['link-local', 'link-local', 'link-local'])
    expect(['64:ff9b::808:808', '64:ff9b:1::808:808'].map(kindOfIp)).toEqual(['public', 'public'])
    // a local-use prefix of another length puts the IPv4 part elsewhere: it counts as the local network's
    expect(kindOfIp('64:ff9b:1:7f00:1::')).toBe('private')
    // outside the prefixes nothing changes
    expect(['2001:db8::7f00:1', '64:ff9b::1:0:7f00:1'].map(kindOfIp)).toEqual(['public', 'public'])
  })

  it('are kept and dialed as their IPv4 address would be', () => {
    const publicNode = new AddressFilter(me, { listen: ['/ip4/203.0.113.5/tcp/1'], localMesh: false })
    for (const a of ['/ip6/64:ff9b::7f00:1/tcp/22', '/ip6/64:ff9b::a00:1/tcp/4001', '/ip6/64:ff9b::a9fe:a9fe/tcp/80', '/ip6/64:ff9b:1::7f00:1/tcp/22']) {
      expect(publicNode.mayKeep(other, multiaddr(a)), a).toBe(false)
      expect(publicNode.mayDial(multiaddr(a)), a).toBe(false)
    }
    expect(publicNode.mayKeep(other, multiaddr('/ip6/64:ff9b::808:808/tcp/4001'))).toBe(true)
    // a node on loopback keeps the loopback one, as it keeps 127.0.0.1
    expect(new AddressFilter(me, { listen: ['/ip4/127.0.0.1/tcp/1'], localMesh: false }).mayKeep(other, multiaddr('/ip6/64:ff9b::7f00:1/tcp/22'))).toBe(true)
  })
})
